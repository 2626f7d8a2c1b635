/* autoplan.h - the best parallel plans for a model on a cluster: a search
 * over data x tensor x context x pipeline parallelism, virtual stages, micro-batch
 * size, schedule, recomputation, sequence parallelism, ZeRO stage and
 * layer split, scored by the step engine (engine.h), keeping only plans
 * that fit in memory.
 *
 * The search is exact under the model: every candidate that could be among
 * the best `top` fitting plans is simulated; a candidate is skipped only
 * when a lower bound proves it cannot fit (its model states plus the
 * activations its schedule must hold already exceed the GPU) or cannot be
 * among the best (its busiest device's compute plus optimizer step already
 * takes longer than the top-th plan found).  `exhaustive` simulates every
 * candidate instead; results are identical (tests compare them).
 *
 * Thread-safe; runs candidates on a thread pool; results are identical for
 * any thread count. */
#ifndef HPGO_AUTOPLAN_H
#define HPGO_AUTOPLAN_H

#include <stdint.h>

#include "cancel.h"
#include "cluster.h"
#include "err.h"
#include "parplan.h"
#include "work.h"

#define HPGO_AUTOPLAN_MAX_TOP 1000
#define HPGO_AUTOPLAN_MAX_CANDIDATES 2000000
#define HPGO_AUTOPLAN_MAX_CP 64            /* context-parallel sizes tried: 1, 2, 4, ... */
#define HPGO_AUTOPLAN_MIN_CP_TOKENS 4096   /* ... while each rank keeps this many tokens (unless cp is fixed) */

enum { HPGO_OBJ_TIME = 0, HPGO_OBJ_COST = 1 };

typedef struct hpgo_autoplan_opts {
    int64_t global_batch;    /* sequences */
    int64_t gpus;            /* GPUs to use; 0: the whole cluster */
    int32_t objective;       /* HPGO_OBJ_TIME: iteration time on `gpus`; HPGO_OBJ_COST: GPU-seconds
                                per iteration, over every GPU count gpus / 2^k that still fits */
    int32_t top;             /* plans to return, 1..HPGO_AUTOPLAN_MAX_TOP */
    int32_t exhaustive;      /* simulate every candidate (no bounds) */
    int32_t threads;         /* 0: hpgo_default_threads() */
    int32_t max_micro_batch; /* largest micro-batch tried (>= 1) */
    int32_t max_vstages;     /* largest number of virtual stages tried (>= 2) */
    double overhead_bytes;   /* as hpgo_step_opts_t; < 0 for the default */
    hpgo_cancel_t *cancel;   /* NULL, or a flag that stops the search (HPGO_E_CANCELLED) */
    /* fixed choices; -1 leaves the dimension free */
    int32_t tp, pp, dp, vstages, micro_batch, schedule, recompute, sequence_parallel, zero, cp;
    int32_t ep, etp, ep_outer; /* expert parallel size, expert tp size, ep placement */
    int32_t overlap_ep;        /* 1: MoE all-to-alls overlapped (every plan); -1 or 0: not */
    double overlap_share;      /* with overlap_ep 1: the plans' overlap_share */
    int32_t dispatcher;        /* MoE dispatcher of every plan (HPGO_DISPATCH_); -1: all-to-all */
    int32_t fp8_params;        /* 1: fp8 weights only (every plan); -1 or 0: not */
    /* sharding and offloading (0 keeps each plan as FSDP / ZeRO default it) */
    int32_t no_reshard;        /* ZeRO-3 plans: 0 reshard after forward, 1 keep the weights
                                  gathered to the backward, -1 search both, 2 keep them
                                  exactly when pp > 1 (torchtitan's default) */
    int32_t shard_size;        /* every ZeRO plan's shard group (0: all replicas; plans
                                  whose dp x cp it does not divide are skipped) */
    int32_t offload_optimizer; /* 0 off, 1 every plan, -1 search both (clusters with host
                                  figures only) */
    double offload_activations;/* >= 0: every plan's share; < 0: search 0, 0.5 and 1 */
    /* the training stack every plan is priced on (not searched; -1: the
     * defaults): kernel set, tensor-parallel overlap (on the plans with
     * sequence parallelism), context-parallel exchange, the optimizer's
     * gradient path (parplan.h; ZeRO stages it does not run are skipped),
     * torchao's float8 recipe under fp8 (HPGO_F8R_*), the loss (parplan.h
     * cross_entropy: 1 Megatron's unfused one, on the TE kernel set only), the
     * fused attention kernel (HPGO_ATT_*) */
    int32_t kernels, tp_overlap, cp_comm, optimizer_impl, fp8_recipe, cross_entropy, attention;
} hpgo_autoplan_opts_t;

typedef struct hpgo_autoplan_entry {
    hpgo_parplan_t plan;      /* plan.split points into the result's split array */
    double iteration_time;    /* seconds */
    double score;             /* what was minimised: time, or time x GPUs */
    int32_t balanced;         /* 1: compute-balanced layer split, 0: even split */
} hpgo_autoplan_entry_t;

typedef struct hpgo_autoplan_result {
    int32_t n;                       /* plans found (<= top), best first */
    hpgo_autoplan_entry_t *entries;
    int32_t *splits;                 /* storage of the entries' splits */
    int64_t candidates;              /* plans of the search space */
    int64_t rejected;                /* the model or cluster cannot run them */
    int64_t pruned_memory;           /* proven not to fit without simulation */
    int64_t pruned_time;             /* proven slower than the top-th plan */
    int64_t simulated;               /* run by the engine */
    int64_t did_not_fit;             /* simulated and over the GPU's memory */
    int64_t bounds_broken;           /* simulated candidates whose time or memory bound exceeds
                                        what the engine found (0 unless a bound is wrong) */
} hpgo_autoplan_result_t;

/* Search; *out is the caller's (hpgo_autoplan_result_free).  A search that
 * finds no plan that fits returns HPGO_OK with n = 0 ("no feasible plan" is
 * a result).  HPGO_E_INVALID for bad options, HPGO_E_LIMIT past
 * HPGO_AUTOPLAN_MAX_CANDIDATES, HPGO_E_NOMEM. */
int hpgo_autoplan(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_autoplan_opts_t *o,
                  hpgo_autoplan_result_t **out, hpgo_err_t *err);
void hpgo_autoplan_result_free(hpgo_autoplan_result_t *r);

#endif
