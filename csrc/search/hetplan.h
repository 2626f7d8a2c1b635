/* hetplan.h - the best uneven pipeline plans for a model on a cluster of
 * several GPU types (cluster parts) or with slowed GPUs: which GPU types
 * hold which pipeline stages, how many stages, replicas (dp) and tensor
 * parallelism each type's stages have, the micro-batch, schedule,
 * recomputation and ZeRO stage, each replica's share of a micro-batch by
 * its speed, and the layer split; scored by the step engine
 * (hpgo_step_simulate on a plan with stage groups), memory checked on each
 * stage's own GPU type.
 *
 * The search space (hetplan.c says why each restriction keeps what a plan
 * needs):
 * - the parts a plan uses, in pipeline order (every ordered subset of the
 *   cluster's parts, at most HPGO_HET_MAX_TYPES of them);
 * - per used part k a segment of s_k consecutive stages, each of dp_k
 *   replicas of tp_k GPUs, s_k tp_k dp_k = the part's GPUs (cost
 *   objective: also its halvings), placed from the part's first GPU;
 * - the samples M of one micro-batch (dividing the global batch), shared
 *   by each stage's replicas in proportion to their speed (whole samples
 *   for a transformer: the allocation minimising the slowest replica's
 *   samples / speed), 1F1B or ZB-H1 (GPipe only when asked),
 *   recomputation none / selective / full, ZeRO 0 to 3 (above 0 with replicas),
 *   sequence parallelism with tp > 1;
 * - the layer split: the engine's even split, and the split balancing
 *   the stages' compute on their own GPUs (each stage's per-layer seconds
 *   at its slowest replica);
 * - on a cluster of several parts, also stages whose replicas span every
 *   part: 1 to 8 stages, each holding an equal share of every part's GPUs
 *   (P = 1: data parallelism over every GPU), the even split, shares by
 *   each replica's speed on its own type.
 *
 * Exact over that space: a plan is left unsimulated only when a proven
 * lower bound on its time (or on its memory) shows it cannot be among the
 * best `top` fitting plans; `exhaustive` simulates every plan instead,
 * with identical results (tests compare them).
 *
 * Thread-safe; expansions and simulations run on the pool; results are
 * identical for any thread count. */
#ifndef HPGO_HETPLAN_H
#define HPGO_HETPLAN_H

#include <stdint.h>

#include "cancel.h"
#include "cluster.h"
#include "err.h"
#include "parplan.h"
#include "work.h"

#define HPGO_HET_MAX_TYPES 4          /* parts a search orders */
#define HPGO_HET_MAX_SHAPES 4000000   /* plans' shapes (all but the split) enumerated */

typedef struct hpgo_hetplan_opts {
    int64_t global_batch;     /* samples (sequences) */
    int32_t objective;        /* HPGO_OBJ_TIME, or HPGO_OBJ_COST: time x sum over the GPUs used
                                 of their part's price (GPU-seconds without prices) */
    int32_t top;              /* plans returned, 1..HPGO_AUTOPLAN_MAX_TOP */
    int32_t exhaustive;       /* simulate every plan of the space */
    int32_t threads;          /* 0: hpgo_default_threads() */
    int32_t max_micro_batch;  /* most samples of one replica's micro-batch share (even shares) */
    double overhead_bytes;    /* as hpgo_step_opts_t; < 0: the default */
    hpgo_cancel_t *cancel;    /* NULL, or a flag that stops the search (HPGO_E_CANCELLED) */
    const double *prices;     /* NULL, or one price per part ($ per GPU-hour) */
    /* the plan every candidate copies its other fields from (kernels,
     * overlap, offloading, ...); its sizes, groups and split are ignored */
    const hpgo_parplan_t *base;
    /* fixed choices (-1: free): tp of every stage, micro-batch samples,
     * schedule, recompute, zero */
    int32_t tp, micro_batch, schedule, recompute, zero;
} hpgo_hetplan_opts_t;

typedef struct hpgo_hetplan_entry {
    hpgo_parplan_t plan;      /* groups, shares and split point into the result's storage */
    double iteration_time;
    double score;
    int32_t balanced;         /* 1: the compute-balanced split, 0: the even split */
} hpgo_hetplan_entry_t;

typedef struct hpgo_hetplan_result {
    int32_t n;
    hpgo_hetplan_entry_t *entries;
    void *storage;
    int64_t shapes;           /* shapes enumerated (each gives one or two plans) */
    int64_t shapes_expanded;  /* shapes whose plans were built and bounded */
    int64_t candidates;       /* plans built */
    int64_t pruned_shapes;    /* shapes whose time bound excluded all their plans */
    int64_t pruned_shapes_memory; /* shapes none of whose layer splits can fit */
    int64_t pruned_memory;    /* plans proven not to fit */
    int64_t pruned_time;      /* plans built, proven slower than the top-th */
    int64_t simulated;
    int64_t did_not_fit;
    int64_t rejected;         /* the engine refused them */
    int64_t bounds_broken;    /* a time or memory bound above what the engine found */
} hpgo_hetplan_result_t;

/* Search; *out is the caller's (hpgo_hetplan_result_free).  No fitting
 * plan: HPGO_OK with n = 0.  HPGO_E_INVALID for bad options (more than
 * HPGO_HET_MAX_TYPES parts, prices not > 0), HPGO_E_LIMIT past
 * HPGO_HET_MAX_SHAPES, HPGO_E_NOMEM, HPGO_E_CANCELLED. */
int hpgo_hetplan(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_hetplan_opts_t *o,
                 hpgo_hetplan_result_t **out, hpgo_err_t *err);
void hpgo_hetplan_result_free(hpgo_hetplan_result_t *r);

#endif
