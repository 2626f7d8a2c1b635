/* autoplan.c - the plan search (see autoplan.h).
 *
 * DESIGN: three phases.
 * 1. Enumerate the space in a fixed order: GPU count (one, or halvings for
 *    the cost objective), tp (divisors of a node that the heads and ffn
 *    allow), pp (dividing the GPUs, at most the layers), dp (the rest, must
 *    divide the global batch), micro-batch (divisors of the per-replica
 *    batch up to max_micro_batch), schedule (1F1B, ZB-H1, interleaved 1F1B
 *    with every vstages that divides the layers per stage as Megatron
 *    requires, ZB-V; GPipe only when asked: it has 1F1B's time and more
 *    memory), recomputation, sequence parallelism (tp > 1), ZeRO stage
 *    (dp > 1) and layer split (even, and balanced on the estimated
 *    per-layer times with the embedding and the head on the edge stages).
 * 2. On the pool, per candidate: its stage costs and two lower bounds.
 *    Memory: the exact model states of each device plus the activations its
 *    schedule must hold before its first backward (1F1B and ZB-H1: pp - i
 *    micro-batches, interleaved: Megatron's warm-up + 1 chunks, GPipe: all,
 *    ZB-V: its two chunks of the first micro-batch, and on device 0 the
 *    first-chunk forwards it runs before that micro-batch returns) plus the transient and
 *    fixed bytes, as the engine adds them.  Time: each device's work
 *    (m x the forward and backward of its chunks) plus its optimizer step,
 *    which the engine's iteration can only exceed.
 * 3. Candidates that may fit, in increasing order of their time bound, are
 *    simulated in batches on the pool; the search stops when the next bound
 *    exceeds the top-th best score (with a 1e-9 relative margin for
 *    rounding).  Ties break on the enumeration index, so the result is the
 *    exact top list of the whole space, for any thread count and batch size.
 * Cost: O(candidates x stages) for the bounds, plus the simulations that
 * the bounds cannot exclude. */
#include "autoplan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "engine.h"
#include "grow.h"
#include "memory.h"
#include "pool.h"
#include "schedule.h"

#define P_MIN(a, b) ((int64_t)(a) < (int64_t)(b) ? (int64_t)(a) : (int64_t)(b))

enum { ST_LIVE = 0, ST_REJECTED, ST_MEMORY, ST_FITS, ST_NOFIT, ST_NOMEM };

typedef struct cand {
    hpgo_parplan_t plan;
    int64_t split_off; /* -1: even */
    double lb, lb_score, time, score;
    int8_t state;
    int8_t balanced;
    int8_t mem_lb_over; /* the memory bound says it cannot fit */
} cand_t;

typedef struct search {
    const hpgo_work_t *w;
    const hpgo_cluster_t *c;
    const hpgo_autoplan_opts_t *o;
    cand_t *cands;
    int64_t n, cap;
    int32_t *splits;
    int64_t n_splits, cap_splits;
    const int64_t *batch; /* phase 3: candidate indices of the batch */
    double overhead;
    hpgo_work_cache_t cache; /* phase 1 (one thread) */
} search_t;

/* growable arrays start at 1024 elements (grow.h) */
static int grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    return hpgo_grow(p, cap, need, elem, 1024);
}

static hpgo_parplan_t with_split(const search_t *S, const cand_t *cd)
{
    hpgo_parplan_t p = cd->plan;
    if (cd->split_off >= 0) {
        p.split = S->splits + cd->split_off;
        p.n_split = p.pp * p.vstages + 1;
    }
    return p;
}

/* ---- phase 2: bounds ----------------------------------------------------- */

static int64_t inflight_lb(const hpgo_parplan_t *p, int64_t m, int32_t d)
{
    int64_t P = p->pp, v = p->vstages;
    switch (p->schedule) {
    case HPGO_PS_GPIPE:
        return m;
    case HPGO_PS_INTERLEAVED: {
        /* schedule.c's warm-up (current Megatron-Core: capped at m v, no
         * special case for m = P), then one more forward in 1F1B */
        int64_t total = m * v, w = 2 * (P - 1 - d) + (v - 1) * P;
        return w >= total ? total : w + 1;
    }
    case HPGO_PS_ZBV:
        return 2;
    default:
        return P - d < m ? P - d : m;
    }
}

/* Device of model stage k (engine.c's dev_of). */
static int32_t stage_dev(const hpgo_parplan_t *p, int32_t k)
{
    if (p->schedule == HPGO_PS_ZBV)
        return k < p->pp ? k : 2 * p->pp - 1 - k;
    return k % p->pp;
}

/* Seconds device d stands blocked on its own pipeline sends in one step
 * when they block (engine.c, Megatron's kernel set): each forward of a
 * stage whose successor lives on another device, and each backward of a
 * stage whose predecessor does, is followed by at least its transfer's
 * point-to-point time before the device computes on (the link may queue
 * it longer, the receiver's re-gather too). */
static double blocked_sends(const search_t *S, const hpgo_parplan_t *p,
                            const hpgo_stage_cost_t *sc, int32_t d, int64_t m)
{
    if (p->kernels != HPGO_KS_TE)
        return 0;
    int32_t K = p->pp * p->vstages;
    int64_t per_dev = (int64_t)p->tp * p->cp * p->dp;
    double t = 0;
    for (int32_t ch = 0; ch < p->vstages; ch++) {
        int32_t k = hpgo_sched_stage(p->schedule, p->pp, p->vstages, d, ch);
        int32_t nb[2] = {k + 1, k - 1};
        for (int i = 0; i < 2; i++) {
            if (nb[i] < 0 || nb[i] >= K || stage_dev(p, nb[i]) == d)
                continue;
            int32_t lvl = hpgo_cost_level_between(S->c, d * per_dev,
                                                  stage_dev(p, nb[i]) * per_dev);
            t += (double)m * hpgo_cost_p2p(S->c, lvl, sc[i == 0 ? k : nb[i]].send_bytes);
        }
    }
    return t;
}

/* Seconds ZeRO-3's gathers add at least to device d's passes in one step
 * (engine.c): every forward gathers its stage's weights, but for the
 * first of each chunk only when torch's pipelining keeps them gathered
 * over the micro-batches (FSDP2 accumulating without resharding after
 * forward); every backward that is not a deferred weight pass gathers
 * them again when they were resharded after the forward.  A pass lasts at
 * least hpgo_step_gathered_pass of its own time; unfused schedules may run a
 * backward as B or as B + W, so it takes the lesser of the two. */
static double zero3_gathers(const search_t *S, const hpgo_parplan_t *p,
                            const hpgo_stage_cost_t *sc, int32_t d, int64_t m, int fused)
{
    if (p->zero < 3)
        return 0;
    int64_t nf = hpgo_step_torch_pipeline(p) && hpgo_step_fsdp_accumulates(p, m) &&
                         !p->reshard_after_forward
                     ? 1
                     : m;
    double t = 0;
    for (int32_t ch = 0; ch < p->vstages; ch++) {
        const hpgo_stage_cost_t *st = &sc[hpgo_sched_stage(p->schedule, p->pp, p->vstages, d, ch)];
        double ag = hpgo_step_zero3_gather(S->c, p, st);
        if (!(ag > 0))
            continue;
        t += (double)nf * (hpgo_step_gathered_pass(ag, st, st->f) - st->f);
        if (p->reshard_after_forward) {
            double bw = st->b + st->w;
            double x = hpgo_step_gathered_pass(ag, st, bw) - bw;
            if (!fused) {
                double xb = hpgo_step_gathered_pass(ag, st, st->b) - st->b;
                x = xb < x ? xb : x;
            }
            t += (double)m * x;
        }
    }
    return t;
}

/* Whether device d fits with act bytes of live activations: the engine's
 * own figures for what it does not track in time (hpgo_step_accum_params,
 * the stage buffers in state_bytes); what it adds in time (outputs kept,
 * input gradients) only raises its peak above this bound. */
static int device_fits(const search_t *S, const hpgo_parplan_t *p, const hpgo_stage_cost_t *sc,
                       int32_t d, int64_t m, const hpgo_device_load_t *load, double act)
{
    hpgo_mem_t mem;
    hpgo_step_peak_memory(S->c, p, S->w->precision, sc, d, m, load, act,
                          S->overhead + load->state_bytes, &mem);
    return !(mem.total > mem.capacity * (1 + 1e-9));
}

static void bound_one(search_t *S, int64_t j, hpgo_work_cache_t *cache)
{
    cand_t *cd = &S->cands[j];
    hpgo_parplan_t p = with_split(S, cd);
    int32_t K = p.pp * p.vstages;
    hpgo_stage_cost_t *sc = malloc(sizeof *sc * (size_t)K);
    if (!sc) {
        cd->state = ST_NOMEM;
        return;
    }
    if (hpgo_work_stage_costs_cached(S->w, S->c, &p, sc, cache, NULL) != HPGO_OK) {
        cd->state = ST_REJECTED;
        free(sc);
        return;
    }
    int64_t m = hpgo_parplan_microbatches(&p);
    double lb = 0;
    int fits = 1;
    /* before[k]: forward of model stages < k; back[k]: their input (fused:
     * full) backward -- the least a micro-batch needs to reach stage k, and
     * to return from it */
    double *before = malloc(sizeof(double) * 2 * (size_t)(K + 1));
    if (!before) {
        cd->state = ST_NOMEM;
        free(sc);
        return;
    }
    double *back = before + K + 1;
    /* each device's load, once */
    hpgo_device_load_t *loads = malloc(sizeof *loads * (size_t)p.pp);
    if (!loads) {
        cd->state = ST_NOMEM;
        free(before);
        free(sc);
        return;
    }
    for (int32_t d = 0; d < p.pp; d++)
        hpgo_step_device_load(&p, sc, d, &loads[d]);
    int fused = p.schedule == HPGO_PS_GPIPE || p.schedule == HPGO_PS_1F1B ||
                p.schedule == HPGO_PS_INTERLEAVED;
    before[0] = back[0] = 0;
    for (int32_t k = 0; k < K; k++) {
        before[k + 1] = before[k] + sc[k].f;
        back[k + 1] = back[k] + sc[k].b + (fused ? sc[k].w : 0);
    }
    /* the memory bound first: a candidate that cannot fit needs no time
     * bound unless every candidate is simulated (and its bounds checked) */
    for (int32_t d = 0; d < p.pp && fits; d++) {
        const hpgo_device_load_t *load = &loads[d];
        double act = p.schedule == HPGO_PS_ZBV ? load->sum_act
                                               : (double)inflight_lb(&p, m, d) * load->min_act;
        if (p.schedule == HPGO_PS_ZBV && d == 0) {
            /* until the first micro-batch comes back to device 0's second
             * chunk (the forwards of stages 0 .. 2p-2 later), device 0 can
             * only run first-chunk forwards, back to back, up to the cap of
             * p started micro-batches (schedule.c) */
            double n0 = (double)(P_MIN(p.pp, m));
            if (sc[0].f > 0 && ceil(before[K - 1] / sc[0].f) < n0)
                n0 = ceil(before[K - 1] / sc[0].f);
            if (n0 < 1)
                n0 = 1;
            act = n0 * sc[0].act + sc[K - 1].act;
        }
        fits = device_fits(S, &p, sc, d, m, load, act);
    }
    cd->mem_lb_over = (int8_t)!fits;
    if (!fits && !S->o->exhaustive) {
        cd->state = ST_MEMORY;
        free(loads);
        free(before);
        free(sc);
        return;
    }
    /* opt[d]: device d's optimizer step with ZeRO 1 / 2's parameter gather,
     * which follows everything it runs; extra[d]: what its gradient
     * synchronisation adds at least to its compute after its last backward */
    double *opt = malloc(sizeof(double) * 2 * (size_t)p.pp);
    if (!opt) {
        cd->state = ST_NOMEM;
        free(loads);
        free(before);
        free(sc);
        return;
    }
    double *extra = opt + p.pp;
    for (int32_t d = 0; d < p.pp; d++) {
        double step_extra;
        hpgo_step_sync_bounds(S->c, &p, S->w->precision, sc, d, m, fused, &loads[d], &extra[d],
                              &step_extra);
        opt[d] = hpgo_step_optimizer_seconds(S->c, &p,
                                             hpgo_step_shard_params(&p, loads[d].params,
                                                                    loads[d].expert_params)) +
                 step_extra;
    }
    for (int32_t d = 0; d < p.pp; d++) {
        double busy = (double)m * loads[d].work + blocked_sends(S, &p, sc, d, m) +
                      zero3_gathers(S, &p, sc, d, m, fused);
        /* the device's lowest stage is d: nothing reaches it before the
         * forwards of the stages below; with fused backwards (and Megatron's
         * interleaving) its last op is a backward of stage d, which still
         * has to run down the stages below; with deferred W passes at least
         * its input-gradient work comes before that */
        double wsum = 0;
        for (int32_t ch = 0; ch < p.vstages; ch++)
            wsum += (double)m * sc[hpgo_sched_stage(p.schedule, p.pp, p.vstages, d, ch)].w;
        /* Proof that t <= the engine's iteration time.  Device d runs at
         * least busy seconds (an op lasts at least its pass, a gathering
         * one at least zero3_gathers' share: the engine adds copies and
         * more) and none before before[d], so its ops end at
         * E >= before[d] + busy; its optimizer step follows (the engine
         * starts it after its ops and gradient syncs): iteration >=
         * E + opt[d].  Its last backward (fused schedules: its last op;
         * ZB-H1: at the latest its W passes, wsum, can follow it) ends at
         * B >= E (ZB-H1: E - wsum) and still has to run down stages d-1 ..
         * 0, which live on devices d-1 .. 0 (1F1B, interleaved, ZB-H1):
         * device i < d ends at >= B + back[d] - back[i] and then takes its
         * OWN optimizer step, opt[i].  (Adding opt[d] to the whole chain,
         * as before, over-estimated whenever device d's shard is larger
         * than device i's: the routed experts, sharded only over their
         * expert data-parallel group, make MoE stages' steps the longest.) */
        double t = before[d] + busy + extra[d] + opt[d];
        /* Micro-batch reduce-scatters queue on device d's sync stream, none
         * starting before before[d], and the optimizer step waits for the
         * last (engine.c's dp_free). */
        double rs = 0;
        for (int32_t ch = 0; ch < p.vstages; ch++)
            rs += (double)m * hpgo_step_mb_scatter(S->c, &p, S->w->precision,
                                                   &sc[hpgo_sched_stage(p.schedule, p.pp,
                                                                        p.vstages, d, ch)],
                                                   m);
        if (rs > 0) {
            if (before[d] + rs + opt[d] > t)
                t = before[d] + rs + opt[d];
        }
        if (fused || p.schedule == HPGO_PS_ZBH1) {
            double b_end = before[d] + busy - (fused ? 0 : wsum);
            for (int32_t i = 0; i < d; i++)
                if (b_end + back[d] - back[i] + opt[i] > t)
                    t = b_end + back[d] - back[i] + opt[i];
        }
        if (t > lb)
            lb = t;
    }
    free(opt);
    free(loads);
    free(before);
    free(sc);
    cd->lb = lb;
    cd->lb_score = S->o->objective == HPGO_OBJ_COST ? lb * (double)((int64_t)p.tp * p.cp * p.pp * p.dp)
                                                    : lb;
}

/* Candidates are bounded in blocks of consecutive ones, which share the
 * prices of their layers (enumeration order): one cache per block. */
#define BOUND_BLOCK 64

static void bound_job(void *ctx, int64_t b)
{
    search_t *S = ctx;
    hpgo_work_cache_t cache = {NULL, {0}, 0};
    int64_t end = (b + 1) * BOUND_BLOCK < S->n ? (b + 1) * BOUND_BLOCK : S->n;
    for (int64_t j = b * BOUND_BLOCK; j < end && !hpgo_cancelled(S->o->cancel); j++)
        bound_one(S, j, &cache);
    hpgo_work_cache_free(&cache);
}

/* ---- phase 3: simulations -------------------------------------------------- */

static void sim_job(void *ctx, int64_t j)
{
    search_t *S = ctx;
    cand_t *cd = &S->cands[S->batch[j]];
    hpgo_parplan_t p = with_split(S, cd);
    hpgo_step_opts_t so = {0, S->overhead, S->o->cancel};
    hpgo_step_result_t *r = NULL;
    int rc = hpgo_step_simulate(S->w, S->c, &p, &so, &r, NULL);
    if (rc == HPGO_E_NOMEM || rc == HPGO_E_CANCELLED) {
        cd->state = ST_NOMEM;
        return;
    }
    if (rc != HPGO_OK) {
        cd->state = ST_REJECTED;
        return;
    }
    cd->time = r->iteration_time;
    cd->score = S->o->objective == HPGO_OBJ_COST ? r->iteration_time * (double)r->gpus
                                                 : r->iteration_time;
    cd->state = r->fits ? ST_FITS : ST_NOFIT;
    hpgo_step_result_free(r);
}

/* ---- phase 1: enumeration ------------------------------------------------------ */

/* Compute-balanced split of L layers into K stages: the smallest bottleneck
 * (bisection) that a right-most last stage (with the head) and greedy
 * stages from the left (the first with the embedding) reach.  Returns 0
 * and fills split (K + 1), or -1 when no better split than even exists. */
static int balanced_split(const double *t, int64_t L, int32_t K, double e0, double e1,
                          int32_t *split, hpgo_cancel_t *cancel)
{
    if (K < 2 || L < K)
        return -1;
    double total = e0 + e1, mx = 0;
    for (int64_t i = 0; i < L; i++) {
        total += t[i];
        if (t[i] > mx)
            mx = t[i];
    }
    double lo = total / K > mx ? total / K : mx, hi = total;
    int found = 0;
    for (int it = 0; it < 64; it++) {
        if (hpgo_cancelled(cancel))
            return -1; /* O(L) a step: the caller reports the cancellation */
        double T = it == 0 ? hi : 0.5 * (lo + hi);
        /* last stage from the right */
        int64_t last = L - 1;
        double sum = e1 + t[last];
        if (sum > T) {
            lo = T;
            continue;
        }
        while (last - 1 >= K - 1 && sum + t[last - 1] <= T)
            sum += t[--last];
        /* greedy from the left over [0, last) in at most K - 1 stages */
        int32_t parts = 0;
        int64_t i = 0;
        int ok = 1;
        while (i < last) {
            double s = parts == 0 ? e0 : 0;
            if (s + t[i] > T) {
                ok = 0;
                break;
            }
            while (i < last && s + t[i] <= T)
                s += t[i++];
            parts++;
        }
        if (!ok || parts > K - 1 || parts == 0) {
            lo = T;
            continue;
        }
        hi = T;
        found = 1;
        if (hi - lo <= 1e-12 * hi)
            break;
    }
    if (!found)
        return -1;
    /* rebuild at hi, then split the largest stages until there are K */
    double T = hi;
    int64_t last = L - 1;
    double sum = e1 + t[last];
    while (last - 1 >= K - 1 && sum + t[last - 1] <= T)
        sum += t[--last];
    int32_t n = 0;
    split[n++] = 0;
    int64_t i = 0;
    while (i < last) {
        double s = n == 1 ? e0 : 0;
        while (i < last && s + t[i] <= T)
            s += t[i++];
        split[n++] = (int32_t)i;
    }
    split[n] = (int32_t)L; /* the last stage [last, L) */
    int32_t stages = n;
    while (stages < K) {
        /* split the stage with the most layers (ties: the first) */
        int32_t best = -1, bl = 1;
        for (int32_t k = 0; k < stages; k++)
            if (split[k + 1] - split[k] > bl)
                bl = split[k + 1] - split[k], best = k;
        if (best < 0)
            return -1;
        memmove(&split[best + 2], &split[best + 1], sizeof(int32_t) * (size_t)(stages - best));
        split[best + 1] = split[best] + bl / 2;
        stages++;
    }
    return 0;
}

static int add_cand(search_t *S, const hpgo_parplan_t *p, int64_t split_off, int balanced,
                    hpgo_err_t *err)
{
    if (S->n >= HPGO_AUTOPLAN_MAX_CANDIDATES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "the search space has more than %d plans: fix some choices "
                            "(tp=, pp=, micro_batch=, ...)",
                            HPGO_AUTOPLAN_MAX_CANDIDATES);
    if (grow((void **)&S->cands, &S->cap, S->n + 1, sizeof(cand_t)) < 0)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory enumerating plans");
    cand_t *cd = &S->cands[S->n++];
    memset(cd, 0, sizeof *cd);
    cd->plan = *p;
    cd->plan.split = NULL;
    cd->plan.n_split = 0;
    cd->split_off = split_off;
    cd->balanced = (int8_t)balanced;
    cd->state = ST_LIVE;
    return HPGO_OK;
}

static int free_or(int32_t fixed, int32_t v) { return fixed < 0 || fixed == v; }

/* Candidates sharing (tp, pp, dp, micro-batch, schedule, vstages): the
 * recomputation, sp, ZeRO and split variants. */
/* The cluster has the host figures offloading needs. */
static int host_ok(const hpgo_cluster_t *c)
{
    return c->sys.host_bandwidth > 0 && c->sys.host_mem_bandwidth > 0 && c->sys.host_memory > 0;
}

/* The sharding and offloading variants of a plan (each an independent
 * candidate, bounded and simulated like the others). */
static int enum_memory(search_t *S, hpgo_parplan_t *p, int64_t off, hpgo_err_t *err)
{
    const hpgo_autoplan_opts_t *o = S->o;
    int host = host_ok(S->c);
    static const double act_shares[3] = {0, 0.5, 1};
    for (int32_t nr = 0; nr <= 1; nr++) {
        if (nr == 1 && p->zero < 3)
            break;
        /* no_reshard 2: torchtitan's default policy, keep the weights
         * gathered exactly when the plan pipelines (fsdp.py,
         * get_fsdp_reshard_after_forward_policy "default": not pp_enabled) */
        int32_t want = o->no_reshard == 2 ? (p->pp > 1) : o->no_reshard;
        if (!(want < 0 || want == nr || (p->zero < 3 && nr == 0)))
            continue;
        p->reshard_after_forward = !nr;
        for (int32_t oo = 0; oo <= 1; oo++) {
            if (!(o->offload_optimizer < 0 || o->offload_optimizer == oo) || (oo && !host))
                continue;
            p->offload_optimizer = oo;
            for (int ai = 0; ai < 3; ai++) {
                double a = o->offload_activations >= 0 ? o->offload_activations : act_shares[ai];
                if (ai > 0 && o->offload_activations >= 0)
                    break;
                if (a > 0 && !host)
                    continue;
                p->offload_activations = a;
                int r = add_cand(S, p, -1, 0, err);
                if (r == HPGO_OK && off >= 0)
                    r = add_cand(S, p, off, 1, err);
                if (r != HPGO_OK)
                    return r;
            }
        }
    }
    return HPGO_OK;
}

static int enum_tail(search_t *S, hpgo_parplan_t base, double *ltimes, int32_t *tmp_split,
                     hpgo_err_t *err)
{
    const hpgo_autoplan_opts_t *o = S->o;
    int xf = S->w->kind == HPGO_WORK_TRANSFORMER;
    int64_t L = hpgo_work_layers(S->w);
    int32_t K = base.pp * base.vstages;
    for (int32_t rc = HPGO_RC_NONE; rc <= HPGO_RC_FULL; rc++) {
        if (!free_or(o->recompute, rc))
            continue;
        if (rc == HPGO_RC_SELECTIVE && !xf)
            continue;
        for (int32_t sp = 0; sp <= 1; sp++) {
            if (sp && (!xf || base.tp == 1))
                continue;
            if (!sp && xf && S->w->x.experts > 0 && base.tp > 1)
                continue; /* MoE with tp needs sequence parallelism */
            if (!free_or(o->sequence_parallel, sp))
                continue;
            /* each shape costs O(layers): look at the flag before each */
            if (hpgo_cancelled(o->cancel))
                return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the search was cancelled");
            hpgo_parplan_t p = base;
            p.recompute = rc;
            p.sequence_parallel = sp;
            /* the overlap needs sequence parallelism: the other plans run without */
            p.tp_overlap = sp && p.tp > 1 && o->tp_overlap > 0 ? o->tp_overlap : HPGO_TPO_NONE;
            /* the balanced split of this shape (shared by the ZeRO variants),
             * kept when it differs from the even split */
            int64_t off = -1;
            double e0, e1;
            if (K > 1 &&
                hpgo_work_layer_times(S->w, S->c, &p, ltimes, &e0, &e1, &S->cache, NULL) ==
                    HPGO_OK &&
                balanced_split(ltimes, L, K, e0, e1, tmp_split, o->cancel) == 0) {
                hpgo_work_even_split(L, K, tmp_split + K + 1);
                if (memcmp(tmp_split, tmp_split + K + 1, sizeof(int32_t) * (size_t)(K + 1))) {
                    if (grow((void **)&S->splits, &S->cap_splits, S->n_splits + K + 1,
                             sizeof(int32_t)) < 0)
                        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                    memcpy(S->splits + S->n_splits, tmp_split, sizeof(int32_t) * (size_t)(K + 1));
                    off = S->n_splits;
                    S->n_splits += K + 1;
                }
            }
            for (int32_t z = 0; z <= 3; z++) {
                if (z > 0 && p.dp * p.cp == 1)
                    break;
                if (!free_or(o->zero, z))
                    continue;
                /* the ZeRO stages the optimizer's gradient path runs */
                if (hpgo_parplan_check_optimizer_zero(p.optimizer_impl, z, NULL) != HPGO_OK)
                    continue;
                p.zero = z;
                p.shard_size = 0;
                if (o->shard_size > 0 && z > 0) {
                    if (((int64_t)p.dp * p.cp) % o->shard_size)
                        continue;
                    p.shard_size = o->shard_size;
                }
                int r = enum_memory(S, &p, off, err);
                if (r != HPGO_OK)
                    return r;
            }
        }
    }
    return HPGO_OK;
}

/* Expert layouts of a plan: ep over the divisors of tp cp dp / etp that
 * divide the experts, etp = 1 or tp, and for ep and edp > 1 both
 * placements (ep inside, or outside the expert data-parallel group). */
static int enum_experts(search_t *S, hpgo_parplan_t base, double *ltimes, int32_t *tmp_split,
                        hpgo_err_t *err)
{
    const hpgo_autoplan_opts_t *o = S->o;
    int64_t E = S->w->kind == HPGO_WORK_TRANSFORMER ? S->w->x.experts : 0;
    if (E == 0) {
        if (!free_or(o->ep, 1) || (o->etp > 0 && o->etp != base.tp))
            return HPGO_OK;
        base.ep = 1, base.etp = 0, base.ep_outer = 0;
        return enum_tail(S, base, ltimes, tmp_split, err);
    }
    int64_t world = (int64_t)base.tp * base.cp * base.dp;
    const int32_t etps[2] = {1, base.tp};
    for (int ei = 0; ei < (base.tp > 1 ? 2 : 1); ei++) {
        int32_t etp = etps[ei];
        if (!free_or(o->etp, etp) || world % etp || S->w->x.expert_ffn % etp)
            continue;
        int64_t rest = world / etp;
        for (int64_t ep = 1; ep <= rest && ep <= E; ep++) {
            if (rest % ep || E % ep || !free_or(o->ep, (int32_t)ep))
                continue;
            int64_t edp = rest / ep;
            for (int32_t outer = 0; outer <= 1; outer++) {
                /* the placement only matters when the stage's GPUs span nodes */
                if (outer && (ep == 1 || edp == 1 || world <= hpgo_cluster_unit(S->c, 0)))
                    break;
                if (!free_or(o->ep_outer, outer))
                    continue;
                hpgo_parplan_t p = base;
                p.ep = (int32_t)ep, p.etp = etp, p.ep_outer = outer;
                p.overlap_ep = o->overlap_ep == 1;
                p.overlap_share = p.overlap_ep ? o->overlap_share : 0;
                p.dispatcher = o->dispatcher == HPGO_DISPATCH_DEDUP ? HPGO_DISPATCH_DEDUP
                                                                    : HPGO_DISPATCH_ALLTOALL;
                int rc = enum_tail(S, p, ltimes, tmp_split, err);
                if (rc != HPGO_OK)
                    return rc;
            }
        }
    }
    return HPGO_OK;
}

static int enumerate(search_t *S, int64_t N, hpgo_err_t *err)
{
    const hpgo_autoplan_opts_t *o = S->o;
    const hpgo_work_t *w = S->w;
    int xf = w->kind == HPGO_WORK_TRANSFORMER;
    int64_t L = hpgo_work_layers(w);
    int64_t gpn = hpgo_cluster_unit(S->c, 0);
    int64_t B = o->global_batch;
    double *ltimes = malloc(sizeof(double) * (size_t)L);
    int32_t *tmp = malloc(sizeof(int32_t) * 2 * (HPGO_PLAN_MAX_STAGES + 1));
    int rc = HPGO_OK;
    if (!ltimes || !tmp) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto done;
    }
    for (int64_t tp = 1; tp <= gpn && tp <= N; tp++) {
        if (gpn % tp || N % tp || !free_or(o->tp, (int32_t)tp))
            continue;
        if (!xf && tp > 1)
            continue;
        int dense_mlp = xf && (w->x.experts == 0 || w->x.dense_first > 0 || w->x.moe_every > 1);
        if (xf && (w->x.heads % tp || (dense_mlp && w->x.ffn % tp) ||
                   (w->x.kv_heads % tp && tp % w->x.kv_heads)))
            continue;
        for (int64_t cp = 1; cp <= HPGO_AUTOPLAN_MAX_CP && tp * cp <= N; cp *= 2) {
        if (N % (tp * cp) || !free_or(o->cp, (int32_t)cp))
            continue;
        if (cp > 1 && (!xf || w->x.seq % (2 * cp) ||
                       (o->cp < 0 && w->x.seq / cp < HPGO_AUTOPLAN_MIN_CP_TOKENS)))
            continue;
        int64_t tc = tp * cp;
        for (int64_t pp = 1; pp <= L && pp <= N / tc && pp <= HPGO_PLAN_MAX_PP; pp++) {
            if (N % (tc * pp) || !free_or(o->pp, (int32_t)pp))
                continue;
            int64_t dp = N / (tc * pp);
            if (dp > (1 << 24) || B % dp || !free_or(o->dp, (int32_t)dp))
                continue;
            int64_t per = B / dp;
            for (int64_t mb = 1; mb <= per && mb <= o->max_micro_batch; mb++) {
                if (per % mb || !free_or(o->micro_batch, (int32_t)mb))
                    continue;
                int64_t m = per / mb;
                if (m > HPGO_PLAN_MAX_MICROBATCHES)
                    continue;
                hpgo_parplan_t base;
                memset(&base, 0, sizeof base);
                base.tp = (int32_t)tp, base.pp = (int32_t)pp, base.dp = (int32_t)dp;
                base.cp = (int32_t)cp, base.ep = 1, base.micro_batch = mb, base.global_batch = B;
                base.overlap_grad_reduce = 1;
                base.fp8_params = o->fp8_params == 1;
                base.reshard_after_forward = 1; /* ZeRO-3 as DeepSpeed and FSDP's default */
                base.kernels = o->kernels > 0 ? o->kernels : HPGO_KS_TE;
                base.cp_comm = o->cp_comm > 0 ? o->cp_comm : HPGO_CP_P2P;
                base.optimizer_impl = o->optimizer_impl > 0 ? o->optimizer_impl : HPGO_OPT_MEGATRON;
                base.fp8_recipe = o->fp8_recipe > 0 ? o->fp8_recipe : HPGO_F8R_TENSORWISE;
                base.cross_entropy = o->cross_entropy > 0 ? o->cross_entropy : 0;
                base.attention = o->attention > 0 ? o->attention : HPGO_ATT_AUTO;
                /* schedules and their vstages */
                static const int order[] = {HPGO_PS_1F1B, HPGO_PS_ZBH1, HPGO_PS_INTERLEAVED,
                                            HPGO_PS_ZBV, HPGO_PS_GPIPE};
                for (size_t si = 0; si < sizeof order / sizeof order[0]; si++) {
                    int sch = order[si];
                    if (!free_or(o->schedule, sch))
                        continue;
                    if (sch == HPGO_PS_GPIPE && o->schedule != HPGO_PS_GPIPE)
                        continue; /* 1F1B's time with more memory: only when asked */
                    if (pp == 1 && sch != HPGO_PS_1F1B && sch != HPGO_PS_GPIPE)
                        continue;
                    int32_t vlo = 1, vhi = 1;
                    if (sch == HPGO_PS_INTERLEAVED) {
                        if (m % pp)
                            continue;
                        vlo = 2, vhi = o->max_vstages;
                    } else if (sch == HPGO_PS_ZBV) {
                        vlo = vhi = 2;
                    }
                    for (int32_t v = vlo; v <= vhi; v++) {
                        if (!free_or(o->vstages, v))
                            continue;
                        if (pp * v > L || pp * v > HPGO_PLAN_MAX_STAGES)
                            break;
                        if (sch == HPGO_PS_INTERLEAVED && L % (pp * v))
                            continue;
                        if (m * pp * v > HPGO_PLAN_MAX_OPS)
                            continue;
                        hpgo_parplan_t p = base;
                        p.schedule = sch;
                        p.vstages = v;
                        if ((rc = enum_experts(S, p, ltimes, tmp, err)) != HPGO_OK)
                            goto done;
                    }
                }
            }
        }
        }
    }
done:
    free(ltimes);
    free(tmp);
    return rc;
}

/* ---- driver -------------------------------------------------------------------- */

typedef struct keyed {
    double key;
    int64_t idx;
} keyed_t;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed_t *x = a, *y = b;
    if (x->key < y->key)
        return -1;
    if (x->key > y->key)
        return 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

void hpgo_autoplan_result_free(hpgo_autoplan_result_t *r)
{
    if (!r)
        return;
    free(r->entries);
    free(r->splits);
    free(r);
}

int hpgo_autoplan(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_autoplan_opts_t *o,
                  hpgo_autoplan_result_t **out, hpgo_err_t *err)
{
    if (!out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "autoplan: NULL output");
    *out = NULL;
    if (!w || !c || !o)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "autoplan: NULL argument");
    int rc = hpgo_work_check(w, err);
    if (rc == HPGO_OK)
        rc = hpgo_cluster_check(c, err);
    if (rc != HPGO_OK)
        return rc;
    int64_t total = hpgo_cluster_gpus(c);
    int64_t N = o->gpus ? o->gpus : total;
    if (N < 1 || N > total)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "gpus must be in 1..%lld (the cluster)",
                            (long long)total);
    if (o->global_batch < 1 || o->global_batch > ((int64_t)1 << 40))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "global_batch must be in 1..2^40");
    if (o->top < 1 || o->top > HPGO_AUTOPLAN_MAX_TOP)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "top must be in 1..%d", HPGO_AUTOPLAN_MAX_TOP);
    if (o->max_micro_batch < 1 || o->max_vstages < 1 || o->threads < 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "max_micro_batch and max_vstages must be >= 1, threads >= 0");
    if (o->objective != HPGO_OBJ_TIME && o->objective != HPGO_OBJ_COST)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "objective must be time or cost");
    if (o->schedule >= HPGO_PS__COUNT || o->recompute > HPGO_RC_FULL || o->zero > 3 ||
        o->sequence_parallel > 1 || o->kernels > HPGO_KS_EAGER || o->tp_overlap > HPGO_TPO_ASYNC ||
        o->cp_comm > HPGO_CP_TORCH_SDPA || o->optimizer_impl > HPGO_OPT_MEGATRON_BF16_GRADS ||
        o->fp8_recipe > HPGO_F8R_ROWWISE_GW_HP ||
        (o->fp8_recipe >= HPGO_F8R_ROWWISE && o->kernels <= HPGO_KS_TE) ||
        o->cross_entropy > HPGO_CE_FUSED ||
        (o->cross_entropy == HPGO_CE_UNFUSED && o->kernels > HPGO_KS_TE) ||
        (o->cross_entropy == HPGO_CE_FUSED && o->kernels <= HPGO_KS_TE) ||
        o->attention > HPGO_ATT_FLASH2)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "a fixed choice is out of range");
    if (o->zero >= 0 && o->optimizer_impl > 0 &&
        hpgo_parplan_check_optimizer_zero(o->optimizer_impl, o->zero, err) != HPGO_OK)
        return HPGO_E_INVALID;
    if (o->no_reshard < -1 || o->no_reshard > 2 || o->offload_optimizer < -1 ||
        o->offload_optimizer > 1 || o->shard_size < 0 || !(o->offload_activations <= 1) ||
        ((o->offload_activations > 0 || o->offload_optimizer == 1) && !host_ok(c)))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "reshard (-1, 0, 1, 2), offload_optimizer (-1, 0, 1), shard_size (>= 0) "
                            "or offload_activations (<= 1) out of range, or offloading asked of "
                            "a cluster without host_memory_bytes, host_bandwidth and "
                            "host_memory_bandwidth");

    search_t S;
    memset(&S, 0, sizeof S);
    S.w = w, S.c = c, S.o = o;
    /* the engine's default when none is given: the bound prices the same */
    S.overhead = o->overhead_bytes >= 0 ? o->overhead_bytes : HPGO_MEM_DEFAULT_OVERHEAD;
    hpgo_autoplan_result_t *r = calloc(1, sizeof *r);
    keyed_t *live = NULL;
    int64_t *batch = NULL;
    keyed_t *top = NULL;
    if (!r) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    for (int64_t n = N; n >= 1; n /= 2) {
        if ((rc = enumerate(&S, n, err)) != HPGO_OK)
            goto fail;
        if (o->objective != HPGO_OBJ_COST || n % 2)
            break;
    }
    r->candidates = S.n;
    int32_t threads = o->threads > 0 ? o->threads : hpgo_default_threads();
    if ((rc = hpgo_pool_map(threads, (S.n + BOUND_BLOCK - 1) / BOUND_BLOCK, bound_job, &S, err)) !=
        HPGO_OK)
        goto fail;
    if (hpgo_cancelled(o->cancel)) {
        rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the search was cancelled");
        goto fail;
    }
    int64_t n_live = 0;
    live = malloc(sizeof *live * (size_t)(S.n ? S.n : 1));
    top = malloc(sizeof *top * (size_t)(o->top + 1));
    batch = malloc(sizeof *batch * (size_t)(4 * threads + 4));
    if (!live || !top || !batch) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < S.n; i++) {
        cand_t *cd = &S.cands[i];
        if (cd->state == ST_NOMEM) {
            rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory bounding plans");
            goto fail;
        }
        if (cd->state == ST_REJECTED)
            r->rejected++;
        else if (cd->state == ST_MEMORY)
            r->pruned_memory++;
        else
            live[n_live++] = (keyed_t){cd->lb_score, i};
    }
    qsort(live, (size_t)n_live, sizeof *live, cmp_keyed);
    int32_t ntop = 0;
    int64_t next = 0;
    S.batch = batch;
    while (next < n_live) {
        double kth = ntop == o->top ? top[ntop - 1].key : INFINITY;
        if (!o->exhaustive && live[next].key * (1 - 1e-9) > kth)
            break;
        int64_t nb = 0, cap = 4 * (int64_t)threads + 4;
        while (next < n_live && nb < cap &&
               (o->exhaustive || live[next].key * (1 - 1e-9) <= kth))
            batch[nb++] = live[next++].idx;
        if ((rc = hpgo_pool_map(threads, nb, sim_job, &S, err)) != HPGO_OK)
            goto fail;
        if (hpgo_cancelled(o->cancel)) {
            rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the search was cancelled");
            goto fail;
        }
        for (int64_t b = 0; b < nb; b++) {
            cand_t *cd = &S.cands[batch[b]];
            r->simulated++;
            if (cd->state == ST_NOMEM) {
                rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory simulating plans");
                goto fail;
            }
            if (cd->state == ST_REJECTED) {
                r->rejected++;
                continue;
            }
            /* exhaustive: every candidate is simulated, so each bound can be
             * checked against the engine (the tests require none broken) */
            if (cd->lb_score * (1 - 1e-9) > cd->score || (cd->mem_lb_over && cd->state == ST_FITS))
                r->bounds_broken++;
            if (cd->state == ST_NOFIT) {
                r->did_not_fit++;
                continue;
            }
            keyed_t k = {cd->score, batch[b]};
            int32_t pos = ntop;
            while (pos > 0 && cmp_keyed(&k, &top[pos - 1]) < 0)
                pos--;
            if (pos >= o->top)
                continue;
            memmove(&top[pos + 1], &top[pos], sizeof *top * (size_t)(ntop - pos));
            top[pos] = k;
            if (ntop < o->top)
                ntop++;
        }
    }
    r->pruned_time = n_live - next;
    /* the result */
    int64_t split_len = 0;
    for (int32_t i = 0; i < ntop; i++) {
        const cand_t *cd = &S.cands[top[i].idx];
        split_len += cd->plan.pp * cd->plan.vstages + 1;
    }
    r->entries = calloc((size_t)(ntop ? ntop : 1), sizeof *r->entries);
    r->splits = malloc(sizeof(int32_t) * (size_t)(split_len ? split_len : 1));
    if (!r->entries || !r->splits) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    int64_t off = 0;
    for (int32_t i = 0; i < ntop; i++) {
        const cand_t *cd = &S.cands[top[i].idx];
        hpgo_autoplan_entry_t *e = &r->entries[i];
        e->plan = cd->plan;
        e->iteration_time = cd->time;
        e->score = cd->score;
        e->balanced = cd->balanced;
        if (cd->split_off >= 0) {
            int32_t K = cd->plan.pp * cd->plan.vstages;
            memcpy(r->splits + off, S.splits + cd->split_off, sizeof(int32_t) * (size_t)(K + 1));
            e->plan.split = r->splits + off;
            e->plan.n_split = K + 1;
            off += K + 1;
        }
    }
    r->n = ntop;
    *out = r;
    r = NULL;
    rc = HPGO_OK;
fail:
    free(S.cands);
    free(S.splits);
    hpgo_work_cache_free(&S.cache);
    free(live);
    free(batch);
    free(top);
    hpgo_autoplan_result_free(r);
    return rc;
}
