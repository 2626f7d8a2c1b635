/* sim_distir.h - DistIR-class data / tensor / pipeline parallel study of an
 * MLP or a transformer layer stack (spec/distir-sim.md).
 *
 * A configuration (model, D replicas, H Megatron shards, P stages, K
 * micro-batches, cost flavour) is simulated the way DistIR does it: the
 * D/H/P transform emits the per-device ops in the order of its timestep
 * schedule, each op advances its device's clock by its analytical cost, and
 * any op touching several devices (send, all-reduce, scatter, ...) first
 * sets their clocks to the latest of them (a blocking rendezvous).
 *
 * Cost flavours (the constants are defaults that the config may override):
 *   HPGO_DISTIR_2021      DistIR 83d7fc3, the paper's Figure 3: 1e14 FLOP/s,
 *                         1.2e12 B/s DRAM, 1e-6 s per split, 4800 Gbit/s;
 *                         weights are already in place (steady state), x / z
 *                         come from the host, labels go to the last stage per
 *                         micro-batch, all-gathers are costed.  A world of one
 *                         device with K = 1 is the untransformed program.
 *   HPGO_DISTIR_2021_GRID DistIR 3386edc, Figure 4's grid: as above but 200
 *                         Gbit/s with the bytes / 8e9 divisor, 2 bytes per
 *                         element in MatMul's memory term, weights sent host
 *                         -> device 1 -> stage device, all-gathers free but
 *                         synchronising.
 *   HPGO_DISTIR_2022      DistIR HEAD 7cfa1b0 (MLSys'22 cost model): 1.4e13
 *                         FLOP/s, 9e11 B/s, 1e-5 s launch overhead on every
 *                         kernel, element-wise ops pay DRAM traffic, 4800
 *                         Gbit/s; only the transformed function is timed (no
 *                         host transfers).
 * Figure 3 and Figure 4 numbers reproduce with these flavours (README).
 *
 * Units: seconds, bytes, FLOP/s, bytes/s, Gbit/s as named.  Thread-safe on
 * distinct arguments; no global state. */
#ifndef HPGO_SIM_DISTIR_H
#define HPGO_SIM_DISTIR_H

#include <stdint.h>

#include "err.h"
#include "pool.h"
#include "cancel.h"
#include "timeline.h"

enum { HPGO_DISTIR_2021 = 0, HPGO_DISTIR_2021_GRID = 1, HPGO_DISTIR_2022 = 2, HPGO_DISTIR__COUNT };
enum { HPGO_DISTIR_MLP = 0, HPGO_DISTIR_TRANSFORMER = 1 };

#define HPGO_DISTIR_MAX_LAYERS (1 << 16)
#define HPGO_DISTIR_MAX_DIM ((int64_t)1 << 20)    /* widths */
#define HPGO_DISTIR_MAX_SEQ ((int64_t)1 << 16)    /* tokens per sequence */
#define HPGO_DISTIR_MAX_TOKENS ((int64_t)1 << 32) /* batch x sequence length */

typedef struct hpgo_distir_config {
    int32_t model;          /* HPGO_DISTIR_MLP or HPGO_DISTIR_TRANSFORMER */
    int32_t cost_model;     /* HPGO_DISTIR_2021, _2021_GRID, _2022 */
    int32_t schedule;       /* HPGO_SCHED_1F1B (PipeDream scheduler) or HPGO_SCHED_GPIPE (FIFO) */
    int64_t batch_size;     /* samples (sequences for the transformer) per iteration */
    int64_t width;          /* hidden size */
    int64_t input_dim;      /* MLP input width, 0 = width */
    int64_t output_dim;     /* MLP output width, 0 = width */
    int64_t seq_len;        /* transformer: tokens per sequence */
    int32_t heads;          /* transformer: attention heads */
    int32_t layers;         /* MLP: weight matrices; transformer: blocks */
    int32_t dp, tp, pp;     /* replicas D, Megatron shards H, pipeline stages P */
    int32_t microbatches;   /* K */
    int32_t dtype_bytes;    /* bytes per element, 0 = 4 (fp32) */
    double device_flops;    /* FLOP/s, <= 0: flavour default */
    double memory_bandwidth;/* DRAM bytes/s, <= 0: flavour default */
    double kernel_launch;   /* seconds (split cost in the 2021 flavours), < 0: flavour default */
    double link_gbps;       /* Gbit/s between every pair of devices, <= 0: flavour default */
    int record_events;      /* non-zero: fill the timeline */
    hpgo_cancel_t *cancel;  /* NULL, or a flag that stops the run (HPGO_E_CANCELLED) */
} hpgo_distir_config_t;

/* Canonical name of a flavour ("distir-2021", "distir-2021-grid",
 * "distir-2022"), or NULL; and the reverse lookup (-1 when unknown). */
const char *hpgo_distir_cost_model_name(int cost_model);
int hpgo_distir_cost_model_from_name(const char *name);

/* Check a configuration without running it: HPGO_E_INVALID with a message
 * naming the offending argument, HPGO_E_LIMIT past the limits.  Thread-safe. */
int hpgo_distir_validate(const hpgo_distir_config_t *cfg, hpgo_err_t *err);

/* Simulate one iteration.  Devices: 0 is the host holding the inputs,
 * replica i, shard j, stage k runs on 1 + i*H*P + j*P + k.  Stage stats are
 * per pipeline stage; memory follows DistIR's liveness rule (values freed
 * after their last consumer; weights and the input data resident).
 * Errors as hpgo_distir_validate plus HPGO_E_NOMEM / HPGO_E_LIMIT (timeline
 * too long).  Thread-safe; the caller owns *out. */
int hpgo_distir_simulate(const hpgo_distir_config_t *cfg, hpgo_sim_result_t **out,
                         hpgo_err_t *err);

/* One point of a batch run. */
typedef struct hpgo_distir_point {
    hpgo_distir_config_t cfg;
    double iteration_time;  /* seconds */
    double peak_bytes;      /* max over devices */
    int code;               /* HPGO_OK or the error of this point */
    hpgo_err_t err;         /* its message */
} hpgo_distir_point_t;

/* The grid of a device budget: for each world size W in world_sizes (in
 * order), every (D, H, P) with D*H*P = W (D, then H ascending), P dividing
 * the layers and the batch / width divisible as needed, and K = 1 when P = 1,
 * else each of mb_choices (ascending; NULL = the flavour's rule: 2^1 ..
 * 2^(floor(log2(B/D)/2)-1) for the 2021 flavours, 2 .. 128 for 2022) with
 * B / (D*K) a whole number >= 1.  base gives the model and cost settings;
 * its dp/tp/pp/microbatches are ignored.  *out (caller frees with free())
 * gets *n_out configurations.  HPGO_E_INVALID for bad sizes. */
int hpgo_distir_grid_configs(const hpgo_distir_config_t *base, const int32_t *world_sizes,
                             int32_t n_world, const int32_t *mb_choices, int32_t n_mb,
                             hpgo_distir_config_t **out, int64_t *n_out, hpgo_err_t *err);

/* Simulate points[i].cfg for every i (timelines off), on the pool's threads
 * when pool is non-NULL, else on the calling thread; each point gets its own
 * result or error.  Results do not depend on the thread count. */
void hpgo_distir_run_points(hpgo_distir_point_t *points, int64_t n, hpgo_pool_t *pool);

#endif
