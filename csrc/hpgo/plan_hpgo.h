/* plan_hpgo.h - the HPGO-compatible hybrid planner ("AsyncOrchestrate",
 * spec/hpgo-compat.md section 7): per pipeline width i a dynamic programme
 * over (last state, units, GPU occupancy), "straight" variants, the
 * exhaustive two-stage split, and the analytical pipeline score.
 *
 * Results are owned by the caller (hpgo_orch_free).  All functions only read
 * the model and topology and are thread-safe; hpgo_orchestrate may use a
 * thread pool internally and returns identical results for any thread count. */
#ifndef HPGO_PLAN_HPGO_H
#define HPGO_PLAN_HPGO_H

#include <stdint.h>

#include "cancel.h"
#include "err.h"
#include "model.h"
#include "topo.h"

/* Default memory one DP candidate may use for its tables (bytes).  Past it
 * the candidate is reported as not planned (status HPGO_E_LIMIT) instead of
 * growing without bound; HPGO itself would run for hours on such cases. */
#define HPGO_PLAN_MAX_BYTES ((size_t)512 << 20)

typedef struct hpgo_stage {
    int32_t a;          /* first state of the stage */
    int32_t b;          /* first state of the next stage; last stage: its last state (L-1) */
    int32_t units;      /* DP plans: units of rp GPUs; bipartition: GPU count */
    hpgo_gpuset_t gpus; /* all GPUs of the stage (every replica) */
} hpgo_stage_t;

enum { HPGO_CAND_DP = 0, HPGO_CAND_STRAIGHT = 1, HPGO_CAND_BIPARTITION = 2 };

typedef struct hpgo_candidate {
    int kind;           /* HPGO_CAND_* */
    int32_t i;          /* pipeline width of the DP (N for the bipartition) */
    int32_t rp;         /* pipeline replicas */
    int status;         /* HPGO_OK; HPGO_E_NOPLAN where HPGO panics, HPGO_E_LIMIT past
                           its memory limit (reason says why) */
    double speedup;     /* analytical score (single-GPU time / estimated time) */
    double block_time;  /* T: slowest pipeline element for the global batch, seconds */
    int32_t n_stages;
    hpgo_stage_t *stages; /* owned by the orchestration result */
    char reason[HPGO_ERRMSG_LEN];
} hpgo_candidate_t;

typedef struct hpgo_orch {
    int32_t n;                /* candidates in HPGO's order (7.1), failed ones included */
    hpgo_candidate_t *cands;
    int32_t best;             /* index of the best successful candidate (last max), -1 if none */
} hpgo_orch_t;

/* Options beyond HPGO's behaviour.  exhaustive = 1 disables the exact
 * pruning of the DP (for verification); threads: 0 = default; max_bytes:
 * see HPGO_PLAN_MAX_BYTES; cancel: NULL, or a flag that makes the call
 * return HPGO_E_CANCELLED soon after it is raised (cancel.h). */
typedef struct hpgo_plan_opts {
    int exhaustive;
    int threads;
    size_t max_bytes; /* per-candidate table memory; 0 = HPGO_PLAN_MAX_BYTES */
    hpgo_cancel_t *cancel;
} hpgo_plan_opts_t;

/* One DP candidate (7.2).  Returns HPGO_OK (out->status tells whether HPGO
 * could plan it) or HPGO_E_NOMEM / HPGO_E_LIMIT. */
int hpgo_plan_for(const hpgo_model_t *m, const hpgo_topo_t *t, int32_t i, int straight,
                  const hpgo_plan_opts_t *opts, hpgo_candidate_t *out, hpgo_err_t *err);
/* The two-stage exhaustive split (7.6). */
int hpgo_bipartition(const hpgo_model_t *m, const hpgo_topo_t *t, hpgo_candidate_t *out,
                     hpgo_err_t *err);
/* The whole candidate list of 7.1 and the best. */
int hpgo_orchestrate(const hpgo_model_t *m, const hpgo_topo_t *t, const hpgo_plan_opts_t *opts,
                     hpgo_orch_t **out, hpgo_err_t *err);
void hpgo_orch_free(hpgo_orch_t *o);
void hpgo_candidate_clear(hpgo_candidate_t *c);

/* Analytical score of 7.5 (0 when there are no micro-batches). */
double hpgo_analytical_speedup(const hpgo_model_t *m, const hpgo_topo_t *t, int32_t rp, double T,
                               const hpgo_stage_t *stages, int32_t n_stages);

/* Allocation strategies of 5.4 from occupancy `occ`: up to 3 GPU sets in the
 * canonical order FF, AF, SF, de-duplicated.  Returns the count. */
int hpgo_next_cards(const hpgo_topo_t *t, const hpgo_gpuset_t *occ, int32_t need,
                    hpgo_gpuset_t out[3]);

/* next_cards_with_replica (5.4): the occupancies reached from `key` after
 * rp rounds of `need` GPUs, distinct, in HPGO's depth-first order.  literal
 * = 1 walks the rounds over bitsets as HPGO does; 0 uses the planner's
 * memoised per-machine counts (the two must agree: tests compare them).
 * *out (caller frees) holds *n sets.  HPGO_E_NOMEM or HPGO_E_INVALID (bad
 * arguments, or a key that is not a per-machine prefix with literal = 0). */
int hpgo_replica_candidates(const hpgo_topo_t *t, const hpgo_gpuset_t *key, int32_t rp,
                            int32_t need, int literal, hpgo_gpuset_t **out, int32_t *n,
                            hpgo_err_t *err);

#endif
