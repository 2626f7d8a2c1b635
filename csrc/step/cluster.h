/* cluster.h - the cluster a training step runs on: one GPU type and a
 * hierarchy of interconnect levels, shared by every planner and simulator.
 *
 * A GPU has dense matrix peaks per data type, a vector (non-tensor) peak,
 * HBM size and bandwidth, and three efficiency curves (matrix, vector,
 * memory) as step tables: the achieved fraction of peak for an operation
 * of a given size.  Level 0 is the inside of a node (GPUs per node,
 * NVLink-class bandwidth), level 1 the nodes of the fabric, and so on; the
 * cluster has prod(level sizes) GPUs, numbered node-major.  Bandwidths are
 * bytes/s per GPU and per direction; latency in seconds; `efficiency` is
 * the achieved fraction of the link rate (measured bus bandwidth / link
 * rate, see the presets in cluster.c).
 *
 * Presets (hpgo_cluster_preset) carry their sources in cluster.c.  A
 * cluster is a plain value: copy it, change a field, validate it with
 * hpgo_cluster_check.  Thread-safe: nothing here has state. */
#ifndef HPGO_CLUSTER_H
#define HPGO_CLUSTER_H

#include <stdint.h>

#include "err.h"

#define HPGO_CLUSTER_MAX_LEVELS 4
#define HPGO_EFF_MAX_STEPS 8
#define HPGO_CLUSTER_MAX_GPUS ((int64_t)1 << 24)
/* Least GPU rate (FLOP/s) or bandwidth (bytes/s) a cluster may give: a
 * slower one (1e-300) turns every kernel and transfer time into infinity */
#define HPGO_CLUSTER_MIN_RATE 1.0
#define HPGO_NAME_LEN 48

/* The "dapple-v100" preset's links: HPGO's fixed bandwidths, which its
 * planner (the hpgo/ wing, topo.h) prices every transfer with. */
#define HPGO_NVLINK_BW 25e9      /* bytes/s point to point inside a machine */
#define HPGO_ETHERNET_BW 1e9     /* bytes/s point to point across machines */
#define HPGO_ETHERNET_NCCL_BW 3e9 /* bytes/s all-reduce across machines */

/* Data types of the matrix peaks. */
enum { HPGO_DT_FP32 = 0, HPGO_DT_TF32, HPGO_DT_BF16, HPGO_DT_FP8, HPGO_DT__COUNT };

/* Efficiency curves of a GPU.  The last two are optional (0 steps: the
 * matrix curve applies): fp8 GEMMs, and fused attention kernels (whose
 * softmax between the two GEMMs keeps them below a plain GEMM's rate);
 * measured curves (hpgo.calibrate) fill them. */
enum {
    HPGO_EFF_MATRIX = 0,
    HPGO_EFF_VECTOR,
    HPGO_EFF_MEMORY,
    HPGO_EFF_FP8,
    HPGO_EFF_ATTENTION,
    HPGO_EFF__COUNT
};
#define HPGO_EFF__REQUIRED 3

/* What a kernel is, for hpgo_gpu_op_time. */
enum { HPGO_OP_VECTOR = 0, HPGO_OP_MATRIX = 1, HPGO_OP_ATTENTION = 2 };

/* One step of an efficiency table: operations of size >= threshold (FLOP
 * for matrix and vector, bytes for memory) reach `efficiency` of peak.
 * Steps are sorted by descending threshold; the last has threshold 0. */
typedef struct hpgo_eff_step {
    double threshold;
    double efficiency;
} hpgo_eff_step_t;

typedef struct hpgo_gpu {
    char name[HPGO_NAME_LEN];
    double peak[HPGO_DT__COUNT]; /* dense matrix FLOP/s; 0 = not supported */
    double vector_flops;         /* 16-bit element-wise FLOP/s */
    int32_t sms;                 /* streaming multiprocessors (0: unknown; communication
                                    kernels overlapped with compute then take none) */
    double power_limit;          /* board power limit, W, where it is below what the
                                    compute curves were measured at (0: none; Hopper SXM
                                    dies only: hpgo_gpu_clock_factor) */
    double hbm_bytes;            /* usable memory, bytes */
    double hbm_bandwidth;        /* bytes/s */
    int32_t n_steps[HPGO_EFF__COUNT];
    hpgo_eff_step_t steps[HPGO_EFF__COUNT][HPGO_EFF_MAX_STEPS];
} hpgo_gpu_t;

typedef struct hpgo_level {
    int32_t size;          /* units of the level below in one unit of this level */
    double bandwidth;      /* bytes/s per GPU and direction, point to point */
    double coll_bandwidth; /* bytes/s per GPU for collectives (HPGO prices them apart) */
    double latency;        /* seconds per step */
    double efficiency;     /* achieved fraction of both bandwidths, (0, 1] */
} hpgo_level_t;

/* What the caching allocator reserves beyond its allocated bytes, as a
 * share of the reserved memory: GMLake (Guo et al., ASPLOS'24, arXiv
 * 2401.08156) measures 9.2 GB of an A100-80GB (up to 25 GB) held in cached
 * blocks that cannot serve the next request, over eight LLM trainings and
 * fine-tunes: 9.2 / 80 = 0.115 (the stock allocator, without expandable
 * segments). */
#define HPGO_ALLOC_FRAG_GMLAKE (9.2 / 80.0)

/* The reserve of torchtitan's 2024 block (blocks compiled one by one, its
 * loss and final norm eager: kernel sets compile-blocks and
 * eager-unfused-norm) under the caching allocator with expandable
 * segments, as torchtitan runs it: on one H100 SXM5 it reserved 12.2 %
 * (op-level checkpointing) and 10.8 % (full) of its reserved peak beyond
 * the allocated one (profiles/h100-sxm5-torchtitan-steps.json,
 * expandable_segments; the eager block 12.3 % with the stock allocator),
 * GMLake's figure between them; taken at GMLake's.  It covers the block
 * the eager loss's backward maps anew (work.c eager_loss_hole).  Plain
 * PyTorch steps, whose loss leaves a smaller working set, reserved 0.6-7.9 %
 * (profiles/h100-sxm5-expandable-steps.json), which the default headroom
 * covers. */
#define HPGO_ALLOC_FRAG_TITAN HPGO_ALLOC_FRAG_GMLAKE

/* The host side, the runtime and losses at scale (cluster.c has the
 * sources of the defaults). */
typedef struct hpgo_system {
    double host_memory;        /* bytes of CPU memory per node (0: unknown, no offloading) */
    double host_bandwidth;     /* bytes/s per GPU and direction over its host link (PCIe) */
    double host_mem_bandwidth; /* bytes/s of a node's CPU memory (CPU optimizer step) */
    double alloc_frag;         /* share of the caching allocator's reserved memory that
                                  its cached blocks cannot reuse, in [0, 0.9] */
    double jitter;             /* coefficient of variation of one GPU's time between two
                                  synchronisations of its data-parallel group (>= 0) */
    int32_t nccl_latency;      /* 1: collective latency from NCCL's tuning model (cost.c);
                                  0: `latency` per ring step */
} hpgo_system_t;

/* A GPU that runs at `speed` times its type's rate (0 < speed; 1/1.5 for a
 * GPU slowed 1.5x, DynPipe's straggler; its kernels take 1/speed as long). */
typedef struct hpgo_gpu_speed {
    int64_t gpu;   /* cluster index */
    double speed;
} hpgo_gpu_speed_t;

/* The Hopper SXM die's power, measured on H100 SXM5s at their 700 W limit
 * (profiles/h100-sxm5-torchtitan-steps.json, `hpgo profile step --power`,
 * two machines): the idle board draws 73.8 W; a bf16 GEMM at full speed
 * would draw 955 / 923 W (from the power of bursts that leave the GPU idle
 * 37 % and 54 % of the time, where the GEMM runs at its uncapped rate), and
 * held to 700 W it runs at 0.866 / 0.889 of that rate, so board power above
 * the idle draw grows as speed^2.42 / speed^2.63 (mean 2.52); a training
 * step of torchtitan's Llama 3 8B block draws 681.0 / 682.5 W at that
 * limit. */
#define HPGO_HOPPER_IDLE_W 73.8
#define HPGO_HOPPER_STEP_W 681.7
#define HPGO_HOPPER_POWER_EXP 2.52

/* The rate of compute-bound kernels (matrix, fp8, attention) on `g` as a
 * share of the rate its curves describe: 1 without a power limit; with one
 * below the measured step's draw, the clock at which that step's power
 * above idle shrinks to fit the limit,
 * ((limit - idle) / (step - idle))^(1 / exponent).  Memory-bound kernels
 * keep their rate (the HBM clock is not lowered). */
double hpgo_gpu_clock_factor(const hpgo_gpu_t *g);

#define HPGO_CLUSTER_MAX_PARTS 16
#define HPGO_CLUSTER_MAX_SLOW 65536
/* Least speed factor of a GPU (and 1 / it the largest): a GPU a million
 * times slower than its type has failed; its times would overflow. */
#define HPGO_CLUSTER_MIN_SPEED 1e-6

typedef struct hpgo_cluster {
    char name[HPGO_NAME_LEN];
    hpgo_gpu_t gpu;
    int32_t n_levels;
    hpgo_level_t levels[HPGO_CLUSTER_MAX_LEVELS];
    hpgo_system_t sys;
    /* Several GPU types (hpgo.Cluster.combine): n_parts = 0 for one type
     * (gpu, levels, sys above); n_parts >= 2 homogeneous clusters (each with
     * n_parts 0 and no slow GPUs of its own), GPUs numbered part after part
     * (node-major inside a part), parts joined by `join` (bytes/s per GPU
     * and direction, latency, efficiency between any two parts).  With
     * parts, gpu / levels / sys above repeat part 0's.  Borrowed: the
     * array outlives the calls that read the cluster. */
    int32_t n_parts;
    const struct hpgo_cluster *parts;
    hpgo_level_t join;
    /* GPUs slower (or faster) than their type, sorted by index, unique;
     * borrowed like parts. */
    int32_t n_slow;
    const hpgo_gpu_speed_t *slow;
} hpgo_cluster_t;

/* Fill *out with the preset `name` ("dapple-v100", "dgx1-v100",
 * "dgx1-v100-16gb", "dgx2h-v100", "dgx-a100-40gb", "dgx-a100-80gb",
 * "dgx-h100", "dgx-h200", "grand-teton-h100", "h100-pcie", "dgx-b200") with `nodes`
 * nodes (0: the preset's own count).  HPGO_E_INVALID for an unknown name or
 * a bad node count. */
int hpgo_cluster_preset(const char *name, int32_t nodes, hpgo_cluster_t *out, hpgo_err_t *err);
/* Name of preset i (0-based), NULL past the last. */
const char *hpgo_cluster_preset_name(int i);

/* HPGO_E_INVALID naming the first bad field (non-finite or negative
 * numbers, empty levels, unsorted efficiency steps, too many GPUs; with
 * parts: each part valid with no parts or slow GPUs of its own, the join
 * level valid; slow GPUs sorted, unique, in range, with speeds in
 * [HPGO_CLUSTER_MIN_SPEED, 1 / HPGO_CLUSTER_MIN_SPEED]). */
int hpgo_cluster_check(const hpgo_cluster_t *c, hpgo_err_t *err);

/* Total GPUs (over all parts); GPUs in one unit of level l (level 0: GPUs
 * per node; of the cluster's own levels, part 0's with parts). */
int64_t hpgo_cluster_gpus(const hpgo_cluster_t *c);
int64_t hpgo_cluster_unit(const hpgo_cluster_t *c, int32_t level);
/* Part k (the cluster itself, k = 0, when it has no parts; NULL out of
 * range); the part holding cluster GPU `gpu` (-1: none) and, when `local`
 * is not NULL, its index inside that part; the GPU's speed factor (1
 * unless listed in `slow`). */
const hpgo_cluster_t *hpgo_cluster_part(const hpgo_cluster_t *c, int32_t k);
int32_t hpgo_cluster_part_of(const hpgo_cluster_t *c, int64_t gpu, int64_t *local);
double hpgo_cluster_gpu_speed(const hpgo_cluster_t *c, int64_t gpu);

/* Efficiency of curve `which` for an operation of `size`. */
double hpgo_gpu_efficiency(const hpgo_gpu_t *g, int which, double size);
/* Seconds of one kernel: matrix, fused-attention or vector FLOPs (`op`, an
 * HPGO_OP_ value) at their curve's efficiency plus its HBM traffic at the
 * memory curve (no overlap, as Calculon's presets do). */
double hpgo_gpu_op_time(const hpgo_gpu_t *g, int dtype, int op, double flops, double bytes);

#endif
