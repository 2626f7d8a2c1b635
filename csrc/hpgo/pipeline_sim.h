/* pipeline_sim.h - the event simulator of a pipelined, replicated plan of
 * given stage times (GPipe, DAPPLE's 1F1B, PipeDream's asynchronous 1F1B):
 * what HPGO's, DAPPLE's and PipeDream's plans are simulated with
 * (hpgo.simulate_pipeline, hpgo.simulate_plan), with HPGO's link and
 * all-reduce bandwidths.  Its 1F1B order is the step model's (schedule.h);
 * the step engine (engine.h) runs neutral plans from a model of the work
 * instead of stage times (docs/uneven-plans.md says where the two agree
 * event for event and why they differ elsewhere).  Results are timelines
 * (timeline.h).
 *
 * Units: seconds (double), bytes (double), bandwidth in bytes/s.  No global
 * state: thread-safe on distinct arguments. */
#ifndef HPGO_PIPELINE_SIM_H
#define HPGO_PIPELINE_SIM_H

#include <stdint.h>

#include "cancel.h"
#include "err.h"
#include "timeline.h"

#define HPGO_SIM_MAX_STAGES 4096

/* ---- generic pipeline plan ------------------------------------------------ */

typedef struct hpgo_sim_stage {
    double forward;          /* seconds per micro-batch on each GPU of the stage */
    double backward;         /* seconds per micro-batch */
    double send_bytes;       /* bytes each GPU sends to the next stage per micro-batch; the
                                gradient coming back has the same size (ignored for the last stage) */
    double param_bytes;      /* parameter bytes held by each GPU */
    double activation_bytes; /* bytes each GPU stashes per micro-batch in flight */
    int32_t n_gpus;          /* data-parallel replicas of the stage (>= 1) */
    const int32_t *gpus;     /* n_gpus distinct device ids, or NULL: numbered consecutively */
    double link_bandwidth;   /* bytes/s of the link to the next stage (both directions);
                                0: the pipeline's link_bandwidth */
    double allreduce_bandwidth; /* bytes/s of this stage's ring all-reduce; 0: the pipeline's */
} hpgo_sim_stage_t;

typedef struct hpgo_sim_pipeline {
    int32_t n_stages;
    const hpgo_sim_stage_t *stages;
    int32_t microbatches;       /* per iteration, >= 1 */
    int schedule;               /* HPGO_SCHED_* */
    double link_bandwidth;      /* bytes/s of a stage-to-stage transfer, > 0 (a stage may
                                   override it for its link to the next stage) */
    double link_latency;        /* seconds added to every transfer, >= 0 */
    double allreduce_bandwidth; /* bytes/s of the ring all-reduce among a stage's GPUs, > 0
                                   (a stage may override it) */
    double optimizer_factor;    /* optimizer-state bytes per parameter byte, >= 0 */
    int record_events;          /* non-zero: fill the timeline */
    hpgo_cancel_t *cancel;      /* NULL, or a flag that stops the run (HPGO_E_CANCELLED) */
} hpgo_sim_pipeline_t;

/* Simulate one iteration of the plan.
 * Semantics: every GPU of a stage runs the stage's op list (schedule above);
 * a forward waits for its activation, a backward for its gradient; each
 * boundary has one link per direction that carries the transfers in order
 * (duration link_latency + bytes / the sending side's stage link_bandwidth,
 * or the pipeline's) and overlaps compute; after its last backward a stage
 * with n > 1 GPUs runs a blocking ring all-reduce of 2 (n-1)/n param_bytes
 * at its allreduce_bandwidth (or the pipeline's).  PipeDream
 * runs iterations back to back without flush (an all-reduce after each
 * iteration's last backward); its iteration_time is the steady-state
 * period: the timeline's run, or if it has not settled yet runs without a
 * timeline of 2, 4, ... times its length, until every op time of a window
 * of ceil(S/M) + 2 iterations repeats c iterations later shifted by the
 * same delta (c <= 64), which makes the endless run periodic; delta / c is
 * reported.  When no run within 2^21 stage x micro-batch slots settles, the
 * slowest stage's average over the second half of the longest one is
 * reported instead (exact in the limit of long runs).
 * The timeline, the in-flight counts and the memory are those of
 * 3 + 2 ceil((S-1)/M) iterations (warm-up, two steady ones, cool-down).
 * Errors: HPGO_E_INVALID (bad numbers, unknown schedule, GPU used twice),
 * HPGO_E_LIMIT (sizes past the limits above), HPGO_E_NOMEM.  *out is NULL
 * on error.  Thread-safe; the caller owns *out. */
int hpgo_sim_pipeline_run(const hpgo_sim_pipeline_t *cfg, hpgo_sim_result_t **out,
                          hpgo_err_t *err);

#endif
