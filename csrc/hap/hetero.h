/* hetero.h - SPMD planning of a chain of layers on heterogeneous GPUs
 * (HAP, spec dynpipe-hap.md section 2, simplified as its section 2.7).
 *
 * Every device d (compute speed f_d FLOP/s) holds the share r_d of every
 * sharded dimension (sum r_d = 1).  A layer's output is in one of four
 * forms: R (replicated), Gb (batch-sharded), Gf (feature-sharded) or P
 * (partial sums).  Strategies: data parallel (Gb -> Gb, weight-gradient
 * all-reduce), column parallel (R -> Gf, input-gradient all-reduce), row
 * parallel (Gf -> P), replicated (R -> R) and, for element-wise layers,
 * any of R / Gb / Gf unchanged.  Form changes cost collectives:
 * G -> R all-gather forward + reduce-scatter backward, P -> R all-reduce,
 * P -> G reduce-scatter + all-gather, Gb <-> Gf all-to-all both ways,
 * R -> G a local slice forward whose gradient is all-gathered backward
 * (HAP charges nothing; without this charge a replicated layer followed by
 * a sharded one would get its full gradient for free).  The chain's input
 * is available in any form for free; its output must end in R or Gb.
 * With uneven shards, an all-gather (reduce-scatter) is either padded
 * (n max_d r_d S / B) or a grouped broadcast (reduce) (S / B_group),
 * whichever is cheaper.
 * Iteration time = sum over layers of max_d compute + collectives (no
 * overlap, HAP's cost model): sharded compute phi * max_d r_d / f_d,
 * replicated phi / min_d f_d, phi = 3 x forward FLOPs.
 *
 * Two sharding mechanisms complete HAP's program space (its `extra_ps`
 * parameter sharding and its attention-internal sharding):
 * - ZeRO-3 data parallelism of a linear layer (Rajbhandari et al., SC'20,
 *   section 5.3): parameters, gradients and optimizer state stored sharded
 *   by the ratios; the weight is all-gathered before the forward and again
 *   before the backward, and its gradient reduce-scattered (3 x the weight
 *   bytes through collectives where plain data parallelism all-reduces it).
 * - Attention by heads: an attention layer (scores, softmax, weighted sum of
 *   the values) runs on Gf data with whole heads per device: device d holds
 *   h_d heads, HAP's sharding_round of the head count by the ratios, and its
 *   compute is phi h_d / (H f_d); the other attention strategies are
 *   replicated (R) and batch-sharded (Gb, HAP's public attention).
 * Memory per device (bytes; with the device capacities given, the plan is
 * checked against them): parameters, gradients and optimizer state of every
 * layer (full when replicated or data parallel, r_d of them when sharded),
 * the activations saved for the backward (each layer's input in the form it
 * consumes it, plus the layer's `saved` elements, e.g. the attention
 * probabilities, in its output form; share r_d when sharded), and the
 * transient full weight and gradient of one ZeRO-3 layer (the largest).
 * With capacities, a program that does not fit is replaced by the fastest
 * fitting one a Lagrangian sweep finds (time + lambda x the binding
 * device's memory, lambda on a geometric grid; each program at the current
 * ratios, at its own optimal ratios and at those capped by memory); that
 * step is a heuristic, the fit verdict is exact.
 *
 * Units: seconds, bytes, FLOP/s, bytes/s.  Functions are pure and
 * thread-safe on distinct arguments; buffers are caller-owned. */
#ifndef HPGO_HETERO_H
#define HPGO_HETERO_H

#include <stdint.h>

#include "err.h"

#define HPGO_HAP_MAX_LAYERS 1000000
#define HPGO_HAP_MAX_DEVICES 65536

/* Layer kinds. */
enum {
    HPGO_HAP_LINEAR = 0,      /* Y[m, n] = X[m, k] W[k, n]; forward FLOPs 2 m k n */
    HPGO_HAP_ELEMENTWISE = 1, /* Y[m, n] from X[m, k] row by row, `flops` forward FLOPs,
                                 no weights */
    HPGO_HAP_ATTENTION = 2    /* Y[m, n] from X[m, k] (q, k, v), `flops` forward FLOPs, `heads` */
};

/* Strategies (also bits of hpgo_hap_problem_t.allowed). */
enum {
    HPGO_HAP_S_DP = 0,   /* linear: Gb -> Gb, weight gradient all-reduced */
    HPGO_HAP_S_COL = 1,  /* linear: R -> Gf, weight sharded on n, input gradient all-reduced */
    HPGO_HAP_S_ROW = 2,  /* linear: Gf -> P, weight sharded on k */
    HPGO_HAP_S_REP = 3,  /* linear: R -> R, replicated compute */
    HPGO_HAP_S_EW_R = 4, /* element-wise on R (replicated compute) */
    HPGO_HAP_S_EW_GB = 5,/* element-wise on Gb */
    HPGO_HAP_S_EW_GF = 6,/* element-wise on Gf */
    HPGO_HAP_S_DP_ZERO = 7,   /* linear: Gb -> Gb, ZeRO-3 (weight gathered, gradient scattered) */
    HPGO_HAP_S_ATT_R = 8,     /* attention on R (replicated compute) */
    HPGO_HAP_S_ATT_GB = 9,    /* attention on Gb (batch-sharded) */
    HPGO_HAP_S_ATT_HEADS = 10,/* attention on Gf: whole heads per device */
    HPGO_HAP_S__COUNT = 11
};

/* Forms of an activation. */
enum { HPGO_HAP_R = 0, HPGO_HAP_GB = 1, HPGO_HAP_GF = 2, HPGO_HAP_P = 3 };

/* How the sharding ratios are chosen. */
enum {
    HPGO_HAP_RATIO_OPTIMAL = 0,      /* alternate program search and the exact ratio LP */
    HPGO_HAP_RATIO_PROPORTIONAL = 1, /* r_d = f_d / sum f (DP-CP) */
    HPGO_HAP_RATIO_UNIFORM = 2,      /* r_d = 1 / n (DP-EV) */
    HPGO_HAP_RATIO_GIVEN = 3         /* the caller's ratios */
};

typedef struct hpgo_hap_layer {
    int kind;      /* HPGO_HAP_LINEAR / HPGO_HAP_ELEMENTWISE */
    double m;      /* rows (batch x sequence), > 0 */
    double k;      /* input features, > 0 */
    double n;      /* output features, > 0 */
    double flops;  /* ELEMENTWISE / ATTENTION: forward FLOPs of the whole layer, >= 0
                      (ignored for LINEAR) */
    int32_t heads; /* ATTENTION: attention heads, 1..2^30 (ignored otherwise) */
    double saved;  /* elements saved for the backward besides the input (e.g. the attention
                      probabilities), in the layer's output form, >= 0 */
} hpgo_hap_layer_t;

typedef struct hpgo_hap_cluster {
    int32_t n_devices;     /* 1..HPGO_HAP_MAX_DEVICES */
    const double *flops;   /* n_devices FLOP/s, > 0 */
    double bw_allgather;   /* bytes/s of the (padded) all-gather, > 0 */
    double bw_allgather_group;     /* grouped broadcast, > 0 */
    double bw_allreduce;   /* > 0 */
    double bw_reducescatter;       /* padded reduce-scatter, > 0 */
    double bw_reducescatter_group; /* grouped reduce, > 0 */
    double bw_alltoall;    /* > 0 */
} hpgo_hap_cluster_t;

typedef struct hpgo_hap_problem {
    int32_t n_layers;
    const hpgo_hap_layer_t *layers;
    hpgo_hap_cluster_t cluster;
    double dtype_bytes;    /* bytes per element, > 0 */
    uint32_t allowed;      /* bit (1 << HPGO_HAP_S_*) per allowed strategy; 0 = all */
    int ratio_mode;        /* HPGO_HAP_RATIO_* */
    const double *ratios;  /* RATIO_GIVEN: n_devices shares >= 0 summing to 1 (1e-9) */
    int32_t max_rounds;    /* RATIO_OPTIMAL: search / LP alternations, >= 1 */
    double optimizer_bytes;/* optimizer-state bytes per parameter, >= 0 (Adam in fp32: 8) */
    const double *memory;  /* n_devices capacities in bytes (> 0), or NULL: no memory check */
    int report_only;       /* non-zero: give the fit verdict, never change the program for it */
} hpgo_hap_problem_t;

/* Memory of one device (bytes). */
typedef struct hpgo_hap_memory {
    double parameters, gradients, optimizer, activations, transient, total;
} hpgo_hap_memory_t;

typedef struct hpgo_hap_result {
    int32_t *strategy;     /* caller buffer of n_layers: HPGO_HAP_S_* per layer */
    double *ratios;        /* caller buffer of n_devices */
    double time;           /* seconds per iteration */
    double compute;        /* seconds of compute (sum of per-layer maxima) */
    double allgather, reducescatter, allreduce, alltoall; /* seconds per collective type */
    int grouped_allgather;     /* 1: the grouped broadcast is the cheaper all-gather */
    int grouped_reducescatter; /* 1: the grouped reduce is the cheaper reduce-scatter */
    int32_t rounds;        /* search / LP alternations run */
    double *memory_used;   /* caller buffer of n_devices or NULL: bytes each device holds */
    hpgo_hap_memory_t worst; /* the device with the largest used / capacity (used, without
                                capacities), ties to the lower index */
    int32_t worst_device;
    int fits;              /* 1: every device within its capacity, 0: not, -1: no capacities */
} hpgo_hap_result_t;

/* Best program and ratios for the problem (see the file comment).  The
 * search is a Viterbi DP over (layer, form): exact for the chain given the
 * ratios.  The ratio LP of HAP (minimise the program's cost over r) has an
 * exact closed form here: the cost depends on r only through
 * u = max_d r_d / f_d and v = max_d r_d, the optimum lies on
 * sum_d min(u f_d, v) = 1, and along it the cost is linear-fractional in
 * rho = v / u between the breakpoints {f_d} and the collective crossovers,
 * so evaluating those points is exact; r_d = min(f_d, rho) / sum min(f, rho).
 * RATIO_OPTIMAL starts from r proportional to f and alternates DP and LP
 * while the cost strictly drops (the best (program, ratios) pair is kept).
 * Head-sharded attention depends on the ratios through its integer head
 * shares too; the ratio step then still returns the best of the candidate
 * points, no longer a proven optimum.  With capacities, see the file comment.
 * O(rounds * (n_layers + n_devices^2)).  Errors: HPGO_E_INVALID,
 * HPGO_E_NOPLAN (no allowed strategy reaches the end), HPGO_E_NOMEM.
 * Thread-safe. */
int hpgo_hap_plan(const hpgo_hap_problem_t *pb, hpgo_hap_result_t *out, hpgo_err_t *err);

/* The two all-gather variants of `bytes` sharded by ratios over n devices:
 * *padded = n max_d r_d bytes / bw_padded, *grouped = bytes / bw_grouped
 * (seconds).  Errors: HPGO_E_INVALID.  Thread-safe. */
int hpgo_hap_gather_cost(int32_t n, const double *ratios, double bytes, double bw_padded,
                         double bw_grouped, double *padded, double *grouped, hpgo_err_t *err);

/* Integer shard lengths of a dimension of `length` units (HAP's
 * sharding_round): floor(r_d length), then one unit at a time to the device
 * with the largest deficit r_d - len_d / length (lowest index on ties).
 * out: caller buffer of n.  Errors: HPGO_E_INVALID.  Thread-safe. */
int hpgo_hap_shard_round(int64_t length, int32_t n, const double *ratios, int64_t *out,
                         hpgo_err_t *err);

#endif
