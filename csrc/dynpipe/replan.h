/* replan.h - re-planning a pipeline when its stages slow down (DynPipe,
 * spec dynpipe-hap.md section 1): the 1F1B score of a stage split, the
 * re-partitioner (DynPipe's top-k candidate cuts, or an exact chain DP),
 * the cost-benefit switch rule with a migration cost, the straggler
 * trigger (ratio band, window, hysteresis) and the uneven per-replica
 * batch split with its sender -> receiver slice table.
 *
 * Units: seconds (double), bytes (double), bandwidth in bytes/s.  All
 * functions are pure: no global state, thread-safe on distinct arguments;
 * output buffers are owned by the caller. */
#ifndef HPGO_REPLAN_H
#define HPGO_REPLAN_H

#include <stdint.h>

#include "cancel.h"
#include "err.h"

#define HPGO_REPLAN_MAX_LAYERS 1000000
#define HPGO_REPLAN_MAX_STAGES 4096
#define HPGO_REPLAN_MAX_MICROBATCHES 100000
#define HPGO_REPLAN_MAX_CANDIDATES 5000000 /* top-k partitions scored per call */
/* Work of one call, checked before it starts: the DP's stages x layers^2 / 2
 * steps (about 1.6 ns each), or top-k's partitions x stages x micro-batches
 * replay steps, each worth HPGO_REPLAN_REPLAY_STEP DP steps.  1e10 is about
 * 15 s here. */
#define HPGO_REPLAN_MAX_WORK 1e10
/* DP steps one replay step costs: measured 19 ns a replay step
 * (198,485 partitions x 4 stages x 99 and 400 micro-batches, 1.5 and 6.3 s)
 * against the DP's 1.6 ns on the shared 2-core machine. */
#define HPGO_REPLAN_REPLAY_STEP 12.0
/* Cells (senders x receivers) of one slice table: 2^24 int64 is 128 MiB. */
#define HPGO_REPLAN_MAX_SLICE_CELLS (1 << 24)

/* Re-partition methods. */
enum {
    HPGO_REPLAN_TOPK = 0, /* DynPipe: cuts after the k most "important" layers of each stage */
    HPGO_REPLAN_DP = 1    /* chain DP O(L^2 S) + local search on the 1F1B score */
};

/* Steady-state seconds per micro-batch of PipeDream's asynchronous 1F1B for
 * per-stage forward / backward times fwd[s], bwd[s] and boundary transfer
 * times comm[s] (s = 0..n_stages-2; the time to send stage s's output to
 * stage s+1, also charged to the gradient coming back; NULL = 0), as
 * DynPipe scores a candidate: stage s runs n_stages-s-1 warm-up forwards,
 * then alternates forward / backward; a forward starts when the stage is
 * free and the upstream forward has ended plus the transfer, a backward
 * when the stage is free and the downstream backward has ended plus the
 * transfer; over `microbatches` micro-batches (DynPipe: 99, must exceed
 * 2 n_stages) the score is (start of stage 0's forward K*S - its first
 * start) / (K*S) with K the number of multiples of S below
 * microbatches - S.  O(S * microbatches) time, O(S * microbatches) memory.
 * Errors: HPGO_E_INVALID, HPGO_E_LIMIT, HPGO_E_NOMEM.  Thread-safe. */
int hpgo_replan_score(int32_t n_stages, const double *fwd, const double *bwd, const double *comm,
                      int32_t microbatches, double *t_mb, hpgo_err_t *err);

typedef struct hpgo_replan_input {
    int32_t n_layers;
    const double *forward;     /* n_layers seconds per micro-batch, >= 0 */
    const double *backward;    /* n_layers seconds per micro-batch, >= 0 */
    const double *comm;        /* n_layers seconds to send layer l's output downstream
                                  (entry n_layers-1 ignored); NULL = no transfers */
    const double *param_bytes; /* n_layers parameter bytes (for the migration cost); NULL = 0 */
    int32_t n_stages;          /* 1..min(n_layers, HPGO_REPLAN_MAX_STAGES) */
    const int32_t *current;    /* layers per stage now, each >= 1, summing to n_layers */
    const double *slowdown;    /* n_stages factors > 0, one per stage position (device) */
    int method;                /* HPGO_REPLAN_* */
    int32_t top_k;             /* TOPK: candidate cuts per stage, >= 1 (DynPipe: 2) */
    int include_current;       /* ignored (kept for compatibility): the current cuts are
                                  always compared with the search's proposal */
    int32_t microbatches;      /* micro-batches of the scoring simulation (DynPipe: 99) */
    double bandwidth;          /* bytes/s used to move layers, > 0 */
    double optimizer_factor;   /* optimizer-state bytes per parameter byte moved, >= 0 */
    double fixed_cost;         /* seconds of every switch (restart, rebuild), >= 0 */
    double remaining_iterations;       /* iterations left to benefit, >= 0 (may be +inf) */
    double microbatches_per_iteration; /* seconds per iteration = this * seconds per micro-batch */
    hpgo_cancel_t *cancel;     /* NULL, or a flag that stops the run (HPGO_E_CANCELLED) */
} hpgo_replan_input_t;

typedef struct hpgo_replan_result {
    int32_t *counts;        /* caller buffer of n_stages: the proposed layers per stage */
    int32_t *search_counts; /* caller buffer of n_stages or NULL: the search's best split
                               (differs from counts when kept_current) */
    double current_time;    /* seconds per micro-batch of the current cuts under the slowdown */
    double new_time;        /* seconds per micro-batch of the proposal (same score),
                               <= current_time */
    double search_time;     /* seconds per micro-batch of the best split the search found */
    int kept_current;       /* the search found nothing faster: the proposal is the
                               current split */
    double moved_bytes;     /* parameter bytes whose stage changes (no optimizer state) */
    double drain_time;      /* (S - 1) * current_time: the pipeline drain before a switch */
    double migration_cost;  /* seconds: moved * (1 + optimizer_factor) / bandwidth + drain + fixed */
    double gain;            /* seconds saved by switching over the remaining iterations */
    int do_switch;          /* gain > migration_cost and new_time < current_time */
    int64_t candidates;     /* partitions scored */
    int exact;              /* DP: the search's split is a best of all splits under the score
                               (the branch and bound finished within its budget); TOPK: 0 */
} hpgo_replan_result_t;

/* Replay steps (stages x micro-batches per scored split) the DP method's
 * branch and bound may spend proving its split best: 5e6 is about 0.1 s on
 * the shared 2-core machine (19 ns a replay step, see above).  Past it the
 * best split found so far stands and `exact` is 0. */
#define HPGO_REPLAN_EXACT_BUDGET 5e6

/* Propose new cuts for the slowed-down stages and decide whether to switch.
 * TOPK (DynPipe's calculate_new_placement): importance p_l = f_l + b_l +
 * c_{l-1} + c_l (one transfer at the ends); inside every current stage the
 * top_k layers by p (ties: lower index) give a cut after them; the last of
 * these positions is merged into the tail block; every choice of S-1 cuts
 * among the rest is scored by hpgo_replan_score with stage times
 * slowdown[s] * sums; the first minimum (lexicographic cut order) wins.
 * DP: the split minimising max_s (slowdown[s] * (F_s + B_s) + the stage's
 * in and out transfers) (ties: smaller total transfer, then earlier cuts),
 * then a steepest-descent local search on the score (moving one cut by one
 * layer) from that split and from the current one; the better result
 * (ties: the DP's) is the incumbent of a branch and bound over all splits
 * (cuts in lexicographic order, a split replacing the incumbent only when
 * strictly faster) with the proven bound score >= alpha x max_s
 * slowdown[s] (F_s + B_s), alpha = (K S - S + 1) / (K S) (stage 0's forward
 * K S waits for every stage's first K S - S + 1 forward and backward
 * passes), the later stages bounded by their work over sum 1 / slowdown.
 * Within HPGO_REPLAN_EXACT_BUDGET replay steps the result is a best split
 * under the score (exact = 1).
 * Either way the proposal is never scored worse than keeping the current
 * split: when the search's best (search_time) is not strictly faster than
 * current_time, the current split is proposed and kept_current is set, so
 * new_time <= current_time always.  The decision: do_switch iff new_time < current_time and
 * (current_time - new_time) * microbatches_per_iteration *
 * remaining_iterations > migration_cost.  out->counts must hold n_stages.
 * Errors: HPGO_E_INVALID (bad arguments), HPGO_E_LIMIT (more than
 * HPGO_REPLAN_MAX_CANDIDATES partitions: use DP), HPGO_E_NOMEM.
 * Thread-safe. */
int hpgo_replan_run(const hpgo_replan_input_t *in, hpgo_replan_result_t *out, hpgo_err_t *err);

/* ---- straggler trigger ------------------------------------------------------ */

typedef struct hpgo_trigger_params {
    int32_t n_stages;       /* values per sample, 1..HPGO_REPLAN_MAX_STAGES */
    int32_t window;         /* samples summed per window, >= 1 (DynPipe: 50 iterations) */
    int32_t warmup_windows; /* windows ignored before the baseline window, >= 0 (DynPipe: 1) */
    double low, high;       /* ratio band, 0 <= low < 1 < high: flag rho <= low or rho >= high */
    int32_t patience;       /* consecutive flagged windows needed to fire, >= 1 */
    int rebaseline;         /* non-zero: after firing, warm up again and take a new baseline */
} hpgo_trigger_params_t;

typedef struct hpgo_trigger hpgo_trigger_t; /* opaque detector state */

/* Kinds of a fired trigger. */
enum { HPGO_TRIGGER_NONE = 0, HPGO_TRIGGER_SLOWDOWN = 1, HPGO_TRIGGER_SPEEDUP = -1 };

/* New detector.  Errors: HPGO_E_INVALID, HPGO_E_NOMEM.  The caller owns
 * *out (hpgo_trigger_free); one detector must not be used by two threads
 * at once. */
int hpgo_trigger_new(const hpgo_trigger_params_t *p, hpgo_trigger_t **out, hpgo_err_t *err);
void hpgo_trigger_free(hpgo_trigger_t *t);
/* Forget the baseline and the window in progress (as after a switch). */
void hpgo_trigger_reset(hpgo_trigger_t *t);

/* Feed one sample (n_stages seconds, >= 0, e.g. each stage's compute time of
 * one iteration).  When a window completes: the first warmup_windows are
 * ignored, the next becomes the baseline, later ones give rho_s =
 * window_s / baseline_s; a window is flagged when some rho_s is outside the
 * open band (low, high), and after `patience` consecutive flagged windows
 * the trigger fires: *kind = SLOWDOWN if some rho_s >= high, else SPEEDUP,
 * and ratios (caller buffer of n_stages, may be NULL) gets rho_s outside
 * the band and 1.0 inside it (DynPipe's dead band).  Otherwise *kind =
 * NONE.  Errors: HPGO_E_INVALID (negative or non-finite sample; the state
 * is unchanged). */
int hpgo_trigger_push(hpgo_trigger_t *t, const double *sample, int *kind, double *ratios,
                      hpgo_err_t *err);

/* ---- uneven batch split (DynPipe's LoadBalancer) ------------------------------ */

/* Split `batch` samples among n replicas with weights w[r] > 0 (throughputs,
 * e.g. 1 / slowdown): t_r = round(batch * w_r / sum w) (half to even, as
 * Python's round), the difference to `batch` is spread as DynPipe does (floor
 * division to all, +1 to the first ones for the remainder), and any
 * negative count is raised to 0 by taking from the largest (lowest index
 * on ties).  out: caller buffer of n.  Errors: HPGO_E_INVALID.  Thread-safe. */
int hpgo_split_batch(int64_t batch, int32_t n, const double *w, int64_t *out, hpgo_err_t *err);

/* Sender -> receiver table between two stages whose replicas hold send[i]
 * and recv[j] samples of the same micro-batch (equal totals): north-west
 * corner fill, x[i * n_recv + j] = samples replica i sends to replica j.
 * out: caller buffer of n_send * n_recv.  Errors: HPGO_E_INVALID. */
int hpgo_slice_table(int32_t n_send, const int64_t *send, int32_t n_recv, const int64_t *recv,
                     int64_t *out, hpgo_err_t *err);

#endif
