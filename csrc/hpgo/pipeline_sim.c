/* pipeline_sim.c - the pipeline-plan event simulator (see pipeline_sim.h).
 *
 * DESIGN: the plan simulator first writes each stage's op list (forward /
 * backward per micro-batch, and all-reduce markers) as the schedule
 * dictates (GPipe's with backwards in micro-batch order; 1F1B's in the
 * step engine's order -- schedule.c's generator, built here a stage at a
 * time so the lists stay within 2 T + iterations ops a stage, and tested
 * equal to the engine's timeline event for event; PipeDream's as 1F1B
 * without a flush), then resolves start times by repeated sweeps over the stages: a
 * stage advances while the dependency of its next op (activation or
 * gradient arrival) is known.  Transfers are FIFO per link and direction and
 * overlap compute.  Every sweep either advances some stage or proves a
 * deadlock (impossible for the three schedules; reported as an internal
 * error).  Cost: O(S (M + S)) steps for S stages and M micro-batches, plus
 * the events.  All GPUs of a stage run the same
 * timeline; events are written for each of them.  PipeDream's period is
 * taken where the op times repeat, on the timeline's run or on longer runs
 * without a timeline (p_steady_period): a fixed measuring window right after the
 * warm-up can open while a stage that is not the bottleneck is still
 * settling, off by up to 30 % on random plans.  No threads, no globals. */
#include "pipeline_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- pipeline plan simulator ------------------------------------------- */

enum { OP_F = 0, OP_B = 1, OP_AR = 2 };

typedef struct pop {
    int32_t kind; /* OP_F, OP_B, OP_AR */
    int32_t mb;   /* micro-batch (global across PipeDream iterations); iteration for OP_AR */
} pop;

typedef struct psim {
    const hpgo_sim_pipeline_t *cfg;
    int record;         /* write timeline events */
    int32_t S, M, Mtot, iters;
    pop **ops;          /* per stage */
    int32_t *n_ops, *pos;
    double *dev_free;   /* per stage: when its GPUs are free */
    double *act_arr;    /* [S][Mtot] arrival of the forward input, NAN = unknown */
    double *grad_arr;   /* [S][Mtot] arrival of the backward input */
    double *f_end, *b_end; /* [S][Mtot] end of each forward / backward */
    double *link_f, *link_b; /* per boundary: when the link is free, forward / backward direction */
    int32_t *inflight, *max_inflight;
    double *iter_end;   /* [S][iters]: end of each stage's last op of each iteration */
    double *stage_end;
    int32_t **gpus;     /* resolved GPU ids per stage */
    hpgo_sim_result_t *res;
} psim;

static int is_finite_nonneg(double v)
{
    return isfinite(v) && v >= 0.0;
}

static int p_validate(const hpgo_sim_pipeline_t *c, hpgo_err_t *err)
{
    if (!c)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "no pipeline given");
    if (c->n_stages < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "a plan needs at least one stage, got %d",
                            (int)c->n_stages);
    if (c->n_stages > HPGO_SIM_MAX_STAGES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "%d stages exceed the limit of %d",
                            (int)c->n_stages, HPGO_SIM_MAX_STAGES);
    if (!c->stages)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "no stages given");
    if (c->microbatches < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "microbatches must be >= 1, got %d",
                            (int)c->microbatches);
    if (c->microbatches > HPGO_SIM_MAX_MICROBATCHES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "%d micro-batches exceed the limit of %d",
                            (int)c->microbatches, HPGO_SIM_MAX_MICROBATCHES);
    if (c->schedule != HPGO_SCHED_1F1B && c->schedule != HPGO_SCHED_GPIPE &&
        c->schedule != HPGO_SCHED_PIPEDREAM)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown schedule %d", c->schedule);
    if (!(isfinite(c->link_bandwidth) && c->link_bandwidth > 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "link_bandwidth must be a positive number of bytes/s, got %g",
                            c->link_bandwidth);
    if (!(isfinite(c->allreduce_bandwidth) && c->allreduce_bandwidth > 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "allreduce_bandwidth must be a positive number of bytes/s, got %g",
                            c->allreduce_bandwidth);
    if (!is_finite_nonneg(c->link_latency))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "link_latency must be >= 0 seconds, got %g",
                            c->link_latency);
    if (!is_finite_nonneg(c->optimizer_factor))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "optimizer_factor must be >= 0, got %g",
                            c->optimizer_factor);
    int64_t total_gpus = 0;
    for (int32_t s = 0; s < c->n_stages; s++) {
        const hpgo_sim_stage_t *st = &c->stages[s];
        if (!is_finite_nonneg(st->forward) || !is_finite_nonneg(st->backward))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: forward and backward must be finite times >= 0, got "
                                "%g and %g",
                                (int)s, st->forward, st->backward);
        if (!is_finite_nonneg(st->send_bytes) || !is_finite_nonneg(st->param_bytes) ||
            !is_finite_nonneg(st->activation_bytes))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: send_bytes, param_bytes and activation_bytes must be "
                                "finite and >= 0",
                                (int)s);
        if (!is_finite_nonneg(st->link_bandwidth) || !is_finite_nonneg(st->allreduce_bandwidth))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: link_bandwidth and allreduce_bandwidth must be finite "
                                "bytes/s > 0, or 0 for the pipeline's, got %g and %g",
                                (int)s, st->link_bandwidth, st->allreduce_bandwidth);
        if (st->n_gpus < 1)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "stage %d: needs at least one GPU, got %d",
                                (int)s, (int)st->n_gpus);
        total_gpus += st->n_gpus;
        if (total_gpus > HPGO_SIM_MAX_DEVICES)
            return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                                "the plan uses more than %d GPUs", HPGO_SIM_MAX_DEVICES);
        if (st->gpus)
            for (int32_t g = 0; g < st->n_gpus; g++)
                if (st->gpus[g] < 0 || st->gpus[g] >= HPGO_SIM_MAX_DEVICES)
                    return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                        "stage %d: GPU id %d is outside [0, %d)", (int)s,
                                        (int)st->gpus[g], HPGO_SIM_MAX_DEVICES);
    }
    return HPGO_OK;
}

/* Op list of stage s under GPipe (backwards in micro-batch order, as
 * HPGO's pipeline model takes them; the step engine's GPipe runs them last
 * first, schedule.c), 1F1B (warm-up of S - s - 1 forwards, one forward one
 * backward, cool-down, the all-reduce after the last backward: DAPPLE's
 * order, schedule.c's for one chunk) or PipeDream (1F1B over every
 * iteration's micro-batches without a flush, the all-reduce after each
 * iteration's last backward); see pipeline_sim.h. */
static void p_build_ops(psim *P, int32_t s)
{
    const int32_t S = P->S, M = P->M, T = P->Mtot;
    pop *o = P->ops[s];
    int32_t n = 0;
    if (P->cfg->schedule == HPGO_SCHED_GPIPE) {
        for (int32_t m = 0; m < M; m++)
            o[n++] = (pop){OP_F, m};
        for (int32_t m = 0; m < M; m++)
            o[n++] = (pop){OP_B, m};
        o[n++] = (pop){OP_AR, 0};
        P->n_ops[s] = n;
        return;
    }
    int32_t w = S - s - 1;
    if (w > T)
        w = T;
    for (int32_t m = 0; m < w; m++)
        o[n++] = (pop){OP_F, m};
    const int async = P->cfg->schedule == HPGO_SCHED_PIPEDREAM;
    for (int32_t i = 0; i < T - w; i++) {
        o[n++] = (pop){OP_F, w + i};
        o[n++] = (pop){OP_B, i};
        if (async && i % M == M - 1)
            o[n++] = (pop){OP_AR, i / M};
    }
    for (int32_t i = T - w; i < T; i++) {
        o[n++] = (pop){OP_B, i};
        if (async && i % M == M - 1)
            o[n++] = (pop){OP_AR, i / M};
    }
    if (!async)
        o[n++] = (pop){OP_AR, 0};
    P->n_ops[s] = n;
}

static double p_allreduce_time(const psim *P, int32_t s)
{
    const hpgo_sim_stage_t *st = &P->cfg->stages[s];
    if (st->n_gpus < 2 || st->param_bytes == 0.0)
        return 0.0;
    double n = (double)st->n_gpus;
    double bw = st->allreduce_bandwidth > 0.0 ? st->allreduce_bandwidth
                                              : P->cfg->allreduce_bandwidth;
    return 2.0 * (n - 1.0) / n * st->param_bytes / bw;
}

/* Seconds of one transfer on the boundary after stage s (either direction). */
static double p_transfer_time(const psim *P, int32_t s)
{
    const hpgo_sim_stage_t *st = &P->cfg->stages[s];
    double bw = st->link_bandwidth > 0.0 ? st->link_bandwidth : P->cfg->link_bandwidth;
    return P->cfg->link_latency + st->send_bytes / bw;
}

static int p_event(psim *P, int32_t s, int kind, int lane, double start, double dur, int32_t mb,
                   int32_t peer_stage, hpgo_err_t *err)
{
    const hpgo_sim_stage_t *st = &P->cfg->stages[s];
    for (int32_t g = 0; g < st->n_gpus; g++) {
        int32_t peer = -1;
        if (peer_stage >= 0) {
            int32_t pn = P->cfg->stages[peer_stage].n_gpus;
            peer = P->gpus[peer_stage][g % pn];
        }
        hpgo_sim_event_t ev = {start, dur, P->gpus[s][g], (int16_t)kind, (int16_t)lane, s, mb,
                               -1, peer};
        int rc = hpgo_sim_result_add_event(P->res, &ev, err);
        if (rc != HPGO_OK)
            return rc;
    }
    return HPGO_OK;
}

/* Queue a transfer from stage `from` to its neighbour `to` once `ready`:
 * FIFO on the link whose free time is *link; *arrival gets its end. */
static int p_transfer(psim *P, int32_t from, int32_t to, double ready, double *link,
                      double *arrival, int32_t mb, hpgo_err_t *err)
{
    const double t = p_transfer_time(P, from < to ? from : to);
    const double start = ready > *link ? ready : *link;
    *link = *arrival = start + t;
    if (!P->record || t <= 0.0)
        return HPGO_OK;
    int rc = p_event(P, from, HPGO_EV_SEND, 1, start, t, mb, to, err);
    if (rc == HPGO_OK)
        rc = p_event(P, to, HPGO_EV_RECV, 1, start, t, mb, from, err);
    return rc;
}

/* Run stage s's next op if its input is known; 1 if it ran, 0 if blocked, <0 error. */
static int p_step(psim *P, int32_t s, hpgo_err_t *err)
{
    const hpgo_sim_stage_t *st = &P->cfg->stages[s];
    const int32_t S = P->S, T = P->Mtot, M = P->M;
    const int rec = P->record;
    pop op = P->ops[s][P->pos[s]];
    double ready = P->dev_free[s], dur = 0.0;
    int kind = HPGO_EV_ALLREDUCE;
    if (op.kind == OP_F) {
        if (s > 0) {
            double a = P->act_arr[(size_t)s * T + op.mb];
            if (isnan(a))
                return 0;
            if (a > ready)
                ready = a;
        }
        dur = st->forward;
        kind = HPGO_EV_FORWARD;
    } else if (op.kind == OP_B) {
        if (s < S - 1) {
            double g = P->grad_arr[(size_t)s * T + op.mb];
            if (isnan(g))
                return 0;
            if (g > ready)
                ready = g;
        }
        dur = st->backward;
        kind = HPGO_EV_BACKWARD;
    } else {
        dur = p_allreduce_time(P, s);
    }
    const double end = ready + dur;
    P->dev_free[s] = end;
    P->pos[s]++;
    if (end > P->stage_end[s])
        P->stage_end[s] = end;
    if (rec && (op.kind != OP_AR || dur > 0.0)) {
        int rc = p_event(P, s, kind, 0, ready, dur, op.kind == OP_AR ? -1 : op.mb, -1, err);
        if (rc != HPGO_OK)
            return rc;
    }
    if (op.kind == OP_F) {
        P->f_end[(size_t)s * T + op.mb] = end;
        if (++P->inflight[s] > P->max_inflight[s])
            P->max_inflight[s] = P->inflight[s];
        if (s < S - 1) {
            int rc = p_transfer(P, s, s + 1, end, &P->link_f[s],
                                &P->act_arr[(size_t)(s + 1) * T + op.mb], op.mb, err);
            if (rc != HPGO_OK)
                return rc;
        }
    } else if (op.kind == OP_B) {
        P->b_end[(size_t)s * T + op.mb] = end;
        P->inflight[s]--;
        if (s > 0) {
            int rc = p_transfer(P, s, s - 1, end, &P->link_b[s - 1],
                                &P->grad_arr[(size_t)(s - 1) * T + op.mb], op.mb, err);
            if (rc != HPGO_OK)
                return rc;
        }
        /* a synchronous schedule's iteration ends with the all-reduce; PipeDream's
         * iteration k ends with its last backward (and all-reduce, below) */
        if (P->cfg->schedule == HPGO_SCHED_PIPEDREAM && op.mb % M == M - 1)
            P->iter_end[(size_t)s * P->iters + op.mb / M] = end;
    } else if (P->cfg->schedule == HPGO_SCHED_PIPEDREAM) {
        P->iter_end[(size_t)s * P->iters + op.mb] = end;
    }
    return 1;
}

static void p_free(psim *P)
{
    if (P->ops)
        for (int32_t s = 0; s < P->S; s++)
            free(P->ops[s]);
    if (P->gpus)
        for (int32_t s = 0; s < P->S; s++)
            free(P->gpus[s]);
    free(P->ops);
    free(P->gpus);
    free(P->n_ops);
    free(P->pos);
    free(P->dev_free);
    free(P->act_arr);
    free(P->grad_arr);
    free(P->f_end);
    free(P->b_end);
    free(P->link_f);
    free(P->link_b);
    free(P->inflight);
    free(P->max_inflight);
    free(P->iter_end);
    free(P->stage_end);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Resolve GPU ids (consecutive numbering when a stage gives none) and check
 * that no GPU serves two stages. */
static int p_assign_gpus(psim *P, hpgo_err_t *err)
{
    const hpgo_sim_pipeline_t *c = P->cfg;
    int32_t next = 0, total = 0;
    for (int32_t s = 0; s < P->S; s++) {
        const hpgo_sim_stage_t *st = &c->stages[s];
        P->gpus[s] = malloc((size_t)st->n_gpus * sizeof(int32_t));
        if (!P->gpus[s])
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        for (int32_t g = 0; g < st->n_gpus; g++)
            P->gpus[s][g] = st->gpus ? st->gpus[g] : next + g;
        next += st->n_gpus;
        total += st->n_gpus;
    }
    int32_t *all = malloc((size_t)total * sizeof *all);
    if (!all)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    int32_t k = 0;
    for (int32_t s = 0; s < P->S; s++)
        for (int32_t g = 0; g < c->stages[s].n_gpus; g++)
            all[k++] = P->gpus[s][g];
    qsort(all, (size_t)total, sizeof *all, cmp_i32);
    for (int32_t i = 1; i < total; i++)
        if (all[i] == all[i - 1]) {
            int32_t dup = all[i];
            free(all);
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "GPU %d appears more than once in the plan (or collides with "
                                "the consecutive numbering of a stage given without GPU ids)",
                                (int)dup);
        }
    free(all);
    return HPGO_OK;
}

/* Allocate the state of a run of `iters` iterations (1 unless PipeDream),
 * write the op lists and resolve the GPU ids.  On error the caller frees P. */
static int p_init(psim *P, const hpgo_sim_pipeline_t *cfg, int32_t iters, int record,
                  hpgo_err_t *err)
{
    memset(P, 0, sizeof *P);
    P->cfg = cfg;
    P->record = record;
    P->S = cfg->n_stages;
    P->M = cfg->microbatches;
    P->iters = iters;
    P->Mtot = P->M * iters;
    size_t S = (size_t)P->S, T = (size_t)P->Mtot;
    P->ops = calloc(S, sizeof *P->ops);
    P->gpus = calloc(S, sizeof *P->gpus);
    P->n_ops = calloc(S, sizeof *P->n_ops);
    P->pos = calloc(S, sizeof *P->pos);
    P->dev_free = calloc(S, sizeof *P->dev_free);
    P->act_arr = malloc(S * T * sizeof *P->act_arr);
    P->grad_arr = malloc(S * T * sizeof *P->grad_arr);
    P->f_end = malloc(S * T * sizeof *P->f_end);
    P->b_end = malloc(S * T * sizeof *P->b_end);
    P->link_f = calloc(S, sizeof *P->link_f);
    P->link_b = calloc(S, sizeof *P->link_b);
    P->inflight = calloc(S, sizeof *P->inflight);
    P->max_inflight = calloc(S, sizeof *P->max_inflight);
    P->iter_end = calloc(S * (size_t)iters, sizeof *P->iter_end);
    P->stage_end = calloc(S, sizeof *P->stage_end);
    if (!P->ops || !P->gpus || !P->n_ops || !P->pos || !P->dev_free || !P->act_arr ||
        !P->grad_arr || !P->f_end || !P->b_end || !P->link_f || !P->link_b || !P->inflight ||
        !P->max_inflight || !P->iter_end || !P->stage_end)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0,
                            "out of memory simulating %d stages x %d micro-batches", (int)P->S,
                            (int)P->Mtot);
    for (int32_t s = 0; s < P->S; s++) {
        if (hpgo_cancelled(cfg->cancel))
            return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the simulation was cancelled");
        for (size_t i = (size_t)s * T; i < ((size_t)s + 1) * T; i++)
            P->act_arr[i] = P->grad_arr[i] = P->f_end[i] = P->b_end[i] = NAN;
        P->ops[s] = malloc((2 * T + (size_t)iters + 1) * sizeof(pop));
        if (!P->ops[s])
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        p_build_ops(P, s);
    }
    return p_assign_gpus(P, err);
}

/* Resolve every op's start time by sweeps over the stages (see DESIGN). */
static int p_execute(psim *P, hpgo_err_t *err)
{
    int rc = HPGO_OK;
    int64_t left = 0;
    for (int32_t s = 0; s < P->S; s++)
        left += P->n_ops[s];
    while (left > 0 && rc == HPGO_OK) {
        if (hpgo_cancelled(P->cfg->cancel)) {
            rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the simulation was cancelled");
            break;
        }
        int progress = 0;
        for (int32_t s = 0; s < P->S && rc == HPGO_OK; s++) {
            while (P->pos[s] < P->n_ops[s]) {
                int r = p_step(P, s, err);
                if (r < 0) {
                    rc = r;
                    break;
                }
                if (r == 0)
                    break;
                progress = 1;
                left--;
            }
        }
        if (rc == HPGO_OK && !progress)
            rc = hpgo_err_set(err, HPGO_E_INTERNAL, 0, "pipeline schedule deadlocked");
    }
    return rc;
}

/* PipeDream iterations of a run whose every op time equals that of an
 * endless run: a finite op list is the endless one cut after the forward of
 * the last micro-batch, followed by the cool-down backwards, and a stage's
 * cool-down starts at micro-batch Mtot - (S - s - 1); ops before it depend
 * only on ops before it. */
static int32_t p_exact_iters(const psim *P)
{
    int32_t k = (P->Mtot - (P->S - 1)) / P->M;
    return k > 0 ? k : 0;
}

/* Whether iteration k repeats iteration k - c shifted by delta seconds:
 * every forward, backward, all-reduce and arrival of every stage. */
static int p_repeats(const psim *P, int32_t k, int32_t c, double delta)
{
    const size_t T = (size_t)P->Mtot;
    for (int32_t s = 0; s < P->S; s++) {
        const size_t row = (size_t)s * T;
        const double *q[4] = {P->f_end + row, P->b_end + row, P->act_arr + row,
                              P->grad_arr + row};
        for (int32_t j = 0; j < P->M; j++) {
            const size_t a = (size_t)k * P->M + j, b = (size_t)(k - c) * P->M + j;
            for (int i = 0; i < 4; i++) {
                if ((i == 2 && s == 0) || (i == 3 && s == P->S - 1))
                    continue; /* no arrival there */
                double d = q[i][a] - q[i][b] - delta;
                if (!(fabs(d) <= 1e-12 * fabs(q[i][a])))
                    return 0;
            }
        }
        const double *e = P->iter_end + (size_t)s * P->iters;
        if (!(fabs(e[k] - e[k - c] - delta) <= 1e-12 * fabs(e[k])))
            return 0;
    }
    return 1;
}

/* PipeDream's steady-state period from a run's exact iterations, when they
 * already repeat.  The run is a max-plus linear system invariant under a
 * shift of the micro-batch numbers by M, and an op depends only on ops at
 * most S micro-batches away; so once every op time (forwards, backwards,
 * all-reduces, arrivals) of span + 1 >= S / M + 1 consecutive iterations
 * equals that c iterations earlier plus one delta, the endless run repeats
 * with period delta / c from there on (induction over a topological order
 * of the later ops).  1 and *period (seconds per iteration, +inf when times
 * overflowed) when found, else 0. */
#define P_MAX_CYCLICITY 64

static int p_detect(const psim *P, double *period)
{
    const int32_t span = (P->S + P->M - 1) / P->M + 1;
    const int32_t K = p_exact_iters(P);
    const double *e0 = P->iter_end;
    if (K < 1)
        return 0;
    if (!isfinite(e0[K - 1])) {
        *period = INFINITY;
        return 1;
    }
    for (int32_t c = 1; c <= P_MAX_CYCLICITY && K - 1 - span - c >= 0; c++) {
        const double delta = e0[K - 1] - e0[K - 1 - c];
        int ok = 1;
        for (int32_t k = K - 1; ok && k >= K - 1 - span; k--)
            ok = p_repeats(P, k, c, delta);
        if (ok) {
            *period = delta / (double)c;
            return 1;
        }
    }
    return 0;
}

/* The slowest stage's average iteration over the second half of a run's
 * exact iterations (the fallback when no repetition was found). */
static double p_average_period(const psim *P)
{
    const int32_t K = p_exact_iters(P), a = K / 2, b = K - 1;
    double it = 0.0;
    if (K < 1)
        return 0.0;
    for (int32_t s = 0; s < P->S; s++) {
        const double *e = P->iter_end + (size_t)s * P->iters;
        double v = b > a ? (e[b] - e[a]) / (double)(b - a) : e[b];
        if (isnan(v)) /* inf - inf: times overflowed */
            v = INFINITY;
        if (v > it)
            it = v;
    }
    return it;
}

/* PipeDream's steady-state period: from the timeline run when its exact
 * iterations already repeat, else from runs without a timeline of twice,
 * four times, ... its length until they do (p_detect); a run past
 * P_MAX_PERIOD_ELEMS stage x micro-batch slots is not simulated and the
 * longest run's average stands in (p_average_period). */
#define P_MAX_PERIOD_ELEMS ((double)(1 << 21))

static int p_steady_period(const hpgo_sim_pipeline_t *cfg, const psim *first, double *period,
                           hpgo_err_t *err)
{
    if (p_detect(first, period))
        return HPGO_OK;
    const double cap = P_MAX_PERIOD_ELEMS / ((double)cfg->n_stages * (double)cfg->microbatches);
    int32_t iters = first->iters;
    if (2.0 * iters > cap) {
        *period = p_average_period(first);
        return HPGO_OK;
    }
    for (;;) {
        iters *= 2;
        psim P;
        int rc = p_init(&P, cfg, iters, 0, err);
        if (rc == HPGO_OK)
            rc = p_execute(&P, err);
        int done = rc != HPGO_OK || p_detect(&P, period);
        if (!done && 2.0 * iters > cap) {
            *period = p_average_period(&P);
            done = 1;
        }
        p_free(&P);
        if (done)
            return rc;
    }
}

static void p_fill_stats(psim *P, double it)
{
    const hpgo_sim_pipeline_t *c = P->cfg;
    hpgo_sim_result_t *r = P->res;
    r->iteration_time = it;
    for (int32_t s = 0; s < P->S; s++) {
        const hpgo_sim_stage_t *st = &c->stages[s];
        hpgo_sim_stage_stats_t *ss = &r->stages[s];
        ss->busy = (double)P->M * (st->forward + st->backward);
        ss->bubble = it > 0.0 ? 1.0 - ss->busy / it : 0.0;
        if (ss->bubble < 0.0)
            ss->bubble = 0.0;
        ss->max_in_flight = P->max_inflight[s];
        double versions = 1.0;
        if (c->schedule == HPGO_SCHED_PIPEDREAM && P->max_inflight[s] > 1)
            versions = (double)P->max_inflight[s];
        ss->weight_bytes = st->param_bytes * versions;
        ss->gradient_bytes = st->param_bytes;
        ss->optimizer_bytes = st->param_bytes * c->optimizer_factor;
        ss->activation_bytes = st->activation_bytes * (double)P->max_inflight[s];
        ss->peak_bytes =
            ss->weight_bytes + ss->gradient_bytes + ss->optimizer_bytes + ss->activation_bytes;
    }
    int32_t k = 0;
    for (int32_t s = 0; s < P->S; s++)
        for (int32_t g = 0; g < c->stages[s].n_gpus; g++) {
            hpgo_sim_device_stats_t *d = &r->devices[k++];
            d->device = P->gpus[s][g];
            d->stage = s;
            d->end = P->stage_end[s];
            d->busy = r->stages[s].busy;
            d->peak_bytes = r->stages[s].peak_bytes;
        }
    /* ascending device id (ids are distinct, so the order is total) */
    for (int32_t i = 1; i < r->n_devices; i++) {
        hpgo_sim_device_stats_t v = r->devices[i];
        int32_t j = i - 1;
        while (j >= 0 && r->devices[j].device > v.device) {
            r->devices[j + 1] = r->devices[j];
            j--;
        }
        r->devices[j + 1] = v;
    }
}

int hpgo_sim_pipeline_run(const hpgo_sim_pipeline_t *cfg, hpgo_sim_result_t **out,
                          hpgo_err_t *err)
{
    *out = NULL;
    int rc = p_validate(cfg, err);
    if (rc != HPGO_OK)
        return rc;
    const int32_t S = cfg->n_stages, M = cfg->microbatches;
    /* PipeDream's timeline: warm-up iterations, two steady ones, cool-down */
    int32_t iters = 1;
    if (cfg->schedule == HPGO_SCHED_PIPEDREAM)
        iters = 3 + 2 * ((S - 1 + M - 1) / M);
    if ((double)S * (double)M * iters > (double)(1 << 26))
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "%d stages x %d simulated micro-batches exceed the limit of 2^26",
                            (int)S, (int)(M * iters));
    int32_t n_gpus = 0;
    for (int32_t s = 0; s < S; s++)
        n_gpus += cfg->stages[s].n_gpus;
    if (cfg->record_events) {
        /* compute events, transfers on both ends, all-reduces, per GPU */
        double est = 0.0;
        for (int32_t s = 0; s < S; s++)
            est += (double)cfg->stages[s].n_gpus * (6.0 * M * iters + iters);
        if (est > (double)HPGO_SIM_MAX_EVENTS)
            return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                                "the timeline would have about %.0f events (limit %lld); "
                                "simulate without a timeline",
                                est, (long long)HPGO_SIM_MAX_EVENTS);
    }
    psim P;
    rc = p_init(&P, cfg, iters, cfg->record_events, err);
    if (rc == HPGO_OK)
        rc = hpgo_sim_result_new(S, n_gpus, &P.res, err);
    if (rc == HPGO_OK)
        rc = p_execute(&P, err);
    double it = 0.0;
    if (rc == HPGO_OK && cfg->schedule == HPGO_SCHED_PIPEDREAM) {
        rc = p_steady_period(cfg, &P, &it, err);
    } else if (rc == HPGO_OK) {
        for (int32_t s = 0; s < S; s++)
            if (P.stage_end[s] > it)
                it = P.stage_end[s];
    }
    if (rc == HPGO_OK)
        p_fill_stats(&P, it);
    if (rc != HPGO_OK) {
        hpgo_sim_result_free(P.res);
        p_free(&P);
        return rc;
    }
    *out = P.res;
    P.res = NULL;
    p_free(&P);
    return HPGO_OK;
}
