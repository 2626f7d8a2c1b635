/* engine.h - one training step simulated on a cluster: a model of the work
 * (work.h), a parallel plan (parplan.h) and a schedule (schedule.h) run by
 * one event engine, with the memory verdict of memory.h.
 *
 * Semantics: the p devices of one pipeline (one GPU of each stage's tp
 * group stands for the group; all dp replicas are alike) run their op
 * lists in order, each at the speed of its stage's slowest GPU
 * (hpgo_cluster_gpu_speed); an op starts when its device is free and its input is
 * there.  Stage-to-stage transfers go over the directed link between the
 * two devices' GPUs (FIFO; priced by cost.h at the level the GPUs share).
 * Gradient synchronisation over dp runs per layer bucket on its own
 * stream as soon as a chunk's last weight gradient produces the bucket
 * (overlap_grad_reduce) or after the last backward; all-reduce for ZeRO 0,
 * reduce-scatter for ZeRO >= 1 followed by the parameter all-gather after
 * the optimizer step (hidden behind the next forward except its first
 * bucket when overlapping).  The optimizer step reads and writes 30 bytes
 * per local parameter (fp32 master, moments and gradient, bf16 copy) at
 * the GPU's memory bandwidth.  The iteration ends when the last device has
 * synchronised and stepped (a flush, as Megatron's and DAPPLE's schedules).
 *
 * Uneven plans (parplan.h n_groups > 0): device k is stage k's group on
 * its part's GPU type at the group's tp, standing for its slowest
 * replica: each replica runs its share of a micro-batch's samples on its
 * slowest GPU, the stage's passes take the longest of them, its memory is
 * that of the replica with the most samples.  A stage boundary moves each
 * sample's activations from the replica that holds it to the one that
 * needs it (resharding between groups of different dp, tp or shares,
 * priced at the level the two GPUs share, the parts' join across parts);
 * each stage synchronises its gradients over its own replicas (the whole
 * gradient, whatever the shares) and steps its optimizer on its GPU.
 * With every group at the plan's dp and tp, even shares, and placed as
 * the even plan's ranks, the result is the even plan's.
 *
 * Units: seconds, bytes, FLOP.  The result is owned by the caller (free
 * with hpgo_step_result_free), immutable, readable from any thread.  No
 * global state: thread-safe on distinct results. */
#ifndef HPGO_ENGINE_H
#define HPGO_ENGINE_H

#include <stdint.h>

#include "cancel.h"
#include "cluster.h"
#include "memory.h"
#include "parplan.h"
#include "timeline.h"
#include "work.h"

typedef struct hpgo_step_opts {
    int record_events;     /* fill the timeline */
    double overhead_bytes; /* `other` memory per GPU; < 0: HPGO_MEM_DEFAULT_OVERHEAD */
    hpgo_cancel_t *cancel; /* NULL, or a flag that stops the run (HPGO_E_CANCELLED) */
} hpgo_step_opts_t;

typedef struct hpgo_step_device {
    double busy;          /* compute seconds */
    double bubble;        /* 1 - busy / iteration_time */
    double compute_end;   /* seconds: end of its last compute op */
    double sync_end;      /* seconds: end of its gradient synchronisation */
    double optimizer;     /* seconds of its optimizer step (+ exposed parameter all-gather) */
    int32_t peak_in_flight; /* most chunk micro-batches whose activations are alive */
    double params;        /* parameters held (tp-sharded, before ZeRO) */
    hpgo_mem_t mem;       /* at the activation peak */
    int32_t part;         /* the cluster part (GPU type) its stage runs on */
    double speed;         /* its slowest GPU's speed factor (1: its type's) */
} hpgo_step_device_t;

typedef struct hpgo_step_result {
    double iteration_time;
    double compute_time;   /* latest end of a compute op */
    double model_flops;    /* per iteration, all GPUs (0: unknown for profiles) */
    double hw_flops;       /* per iteration, all GPUs, executed (with recomputation) */
    double mfu, hfu;       /* against the bf16 (or the precision's) dense peak */
    double samples_per_second, tokens_per_second;
    int64_t gpus;          /* tp x cp x pp x dp */
    int64_t microbatches;
    int32_t p, v, n_stages;
    int fits;              /* every device fits */
    hpgo_step_device_t *devices; /* p */
    hpgo_stage_cost_t *stages;   /* p * v model stages */
    hpgo_sim_result_t *timeline; /* events (lane 0 compute, 1 send to the next device, 2 send
                                    to the previous, 3 gradient sync); NULL unless recorded */
} hpgo_step_result_t;

/* Simulate one iteration.  HPGO_E_INVALID for a plan the model or cluster
 * cannot run (message names the conflict), HPGO_E_LIMIT, HPGO_E_NOMEM.
 * *out is NULL on error.  Thread-safe. */
int hpgo_step_simulate(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                       const hpgo_step_opts_t *opts, hpgo_step_result_t **out, hpgo_err_t *err);
void hpgo_step_result_free(hpgo_step_result_t *r);

/* What device d of the plan's pipeline holds, summed over its chunks:
 * seconds of one micro-batch's passes, parameters, the most parameters of
 * one layer (what ZeRO-3 gathers at a time), the largest transient bytes,
 * and the smallest and total activation bytes of one micro-batch. */
typedef struct hpgo_device_load {
    double work, params, max_layer_params, transient, min_act, sum_act;
    double expert_params; /* part of params in routed experts */
    double max_act;       /* largest activation bytes of one of its chunks' micro-batch */
    double state_bytes;   /* persistent bytes besides the model states (fp8 scaling state,
                           * FSDP2's gathered root parameters) */
} hpgo_device_load_t;

/* Parameters of a device's optimizer shard: ZeRO >= 1 divides the dense
 * parameters over dp x cp and the routed experts' over the expert
 * data-parallel group. */
double hpgo_step_shard_params(const hpgo_parplan_t *p, double params, double expert_params);
void hpgo_step_device_load(const hpgo_parplan_t *p, const hpgo_stage_cost_t *sc, int32_t d,
                           hpgo_device_load_t *out);

/* Whether the plan runs torch.distributed.pipelining (pp > 1 under a
 * PyTorch kernel set), and whether its FSDP accumulates gradients over
 * the micro-batches (ZeRO 3, pp > 1, m > 1). */
int hpgo_step_torch_pipeline(const hpgo_parplan_t *p);
int hpgo_step_fsdp_accumulates(const hpgo_parplan_t *p, int64_t m);
/* Seconds of ZeRO-3's all-gather of stage st's weights before one pass
 * of an even plan (0 where it gathers nothing), and a pass of dur seconds
 * with a gather of ag seconds as the engine prices it (the gather beside
 * the pass, at least the gather, the first layer's gather exposed; dur
 * where ag is 0).  The engine adds the gather's copies and more, never
 * less. */
double hpgo_step_zero3_gather(const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                              const hpgo_stage_cost_t *st);
double hpgo_step_gathered_pass(double ag, const hpgo_stage_cost_t *st, double dur);
/* Seconds one micro-batch's gradients of stage st hold the sync stream on
 * an even plan that reduce-scatters them each micro-batch (ZeRO 2, and
 * ZeRO 3 without accumulation; 0 for others): layer by layer beside the
 * pass with overlap_grad_reduce, whole after the compute without. */
double hpgo_step_mb_scatter(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int precision,
                            const hpgo_stage_cost_t *st, int64_t m);
/* Least time an even plan's gradient synchronisation adds to device d
 * (`load` as hpgo_step_device_load gives it) in a step of m micro-batches
 * (engine.c, for the search's bound): to its compute, the slowdown beside
 * the gradient buckets that overlap each chunk's last backward (whose pass
 * is at least B + W under fused schedules, W otherwise); to its optimizer
 * step, ZeRO 1 / 2's parameter all-gather. */
void hpgo_step_sync_bounds(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int precision,
                           const hpgo_stage_cost_t *sc, int32_t d, int64_t m, int fused,
                           const hpgo_device_load_t *load, double *compute_extra,
                           double *step_extra);
/* Memory of an even plan's device d (`load` as hpgo_step_device_load
 * gives it) at its peak with `stored` bytes of stored activations (the
 * engine's peak; a lower figure gives a lower bound): the model states,
 * the stage's working set and `other`.  A
 * PyTorch step of one micro-batch without a pipeline peaks at its loss
 * before any gradient exists (engine.c says when), so its peak is the
 * larger of that moment without gradients and the layers' working set
 * with them. */
void hpgo_step_peak_memory(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                           const hpgo_stage_cost_t *sc, int32_t d, int64_t m,
                           const hpgo_device_load_t *load, double stored, double other,
                           hpgo_mem_t *out);
/* Parameters whose gradients device d holds unsharded at once under
 * FSDP2 with torch.distributed.pipelining (engine.c says when), or -1
 * where memory.c's rule (every dense parameter) applies. */
double hpgo_step_accum_params(const hpgo_parplan_t *p, const hpgo_stage_cost_t *sc, int32_t d,
                              int64_t m);

/* Seconds of the optimizer step of `params` local parameters under the
 * plan's kernel set, its bytes per parameter read or written at the GPU's
 * memory bandwidth (hpgo_step_optimizer_bytes).  Thread-safe. */
double hpgo_step_optimizer_time(const hpgo_cluster_t *c, const hpgo_parplan_t *p, double params);
/* Bytes per local parameter of the optimizer step (spec stack-mechanisms
 * 2.4): Megatron's Adam on fp32 master weights, gradients and moments (16
 * read, 12 written), the copy of the master into the 16-bit weight (6),
 * the inf/NaN check and gradient norm (8) and zeroing the gradient buffer
 * (4): 46; PyTorch's fused AdamW on fp32 weights (compile, eager,
 * compile-fa2) 28, or its foreach AdamW (compile-blocks: torchtitan at
 * 9dec370) 84; below ZeRO 3 (no FSDP2) the 16-bit gradients cast to fp32
 * (2 + 4) and the master copied back to the 16-bit weights (4 + 2) add 12. */
double hpgo_step_optimizer_bytes(const hpgo_parplan_t *p);
/* The plan's optimizer step: on the GPU as above, or on the host with
 * offload_optimizer (28 bytes a parameter over the node's CPU memory
 * bandwidth shared by its GPUs, plus 4 bytes over the GPU's host link);
 * INFINITY when the cluster has no host figures.  Thread-safe. */
double hpgo_step_optimizer_seconds(const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                                   double params);
/* 1 + jitter x the expected maximum of `gpus` independent standard normal
 * variables: what the slowest GPU adds to a synchronous step whose per-GPU
 * time varies with coefficient of variation c->sys.jitter.  Thread-safe. */
double hpgo_step_straggler_factor(const hpgo_cluster_t *c, int64_t gpus);

#endif
