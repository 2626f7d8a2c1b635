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
 * is available in any form for free; its output must end in R or Gb.  With uneven shards, an all-gather
 * (reduce-scatter) is either padded (n max_d r_d S / B) or a grouped
 * broadcast (reduce) (S / B_group), whichever is cheaper.
 * Iteration time = sum over layers of max_d compute + collectives (no
 * overlap, HAP's cost model): sharded compute phi * max_d r_d / f_d,
 * replicated phi / min_d f_d, phi = 3 x forward FLOPs.
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
    HPGO_HAP_LINEAR = 0,     /* Y[m, n] = X[m, k] W[k, n]; forward FLOPs 2 m k n */
    HPGO_HAP_ELEMENTWISE = 1 /* Y[m, n] from X[m, k] row by row, `flops` forward FLOPs, no weights */
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
    HPGO_HAP_S__COUNT = 7
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
    double flops;  /* ELEMENTWISE: forward FLOPs of the whole layer, >= 0 (ignored for LINEAR) */
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
} hpgo_hap_problem_t;

typedef struct hpgo_hap_result {
    int32_t *strategy;     /* caller buffer of n_layers: HPGO_HAP_S_* per layer */
    double *ratios;        /* caller buffer of n_devices */
    double time;           /* seconds per iteration */
    double compute;        /* seconds of compute (sum of per-layer maxima) */
    double allgather, reducescatter, allreduce, alltoall; /* seconds per collective type */
    int grouped_allgather;     /* 1: the grouped broadcast is the cheaper all-gather */
    int grouped_reducescatter; /* 1: the grouped reduce is the cheaper reduce-scatter */
    int32_t rounds;        /* search / LP alternations run */
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
