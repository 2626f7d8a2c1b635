/* hetplan.c - the heterogeneous plan search (see hetplan.h).
 *
 * DESIGN: branch and bound over shapes.  A shape is a plan but its layer
 * split: the parts in pipeline order, each part's segment (stages s,
 * replicas dp, tensor parallelism tp), the micro-batch's samples M, the
 * schedule, recomputation and ZeRO stage.  Phase 1 enumerates the shapes
 * in a fixed order and gives each a lower bound on its time that holds for
 * every layer split; phase 2 takes shapes in increasing order of that
 * bound, builds their plans (the balanced and the even split), bounds each
 * plan's time and memory from its exact stage costs, and simulates the
 * plans in increasing order of their bound, on the pool, until the next
 * bound exceeds the top-th best score found (relative margin 1e-9).  Ties
 * break on the enumeration index, so the result is the exact top list of
 * the space for any thread count; `exhaustive` builds and simulates every
 * plan and counts each bound the engine contradicts (bounds_broken).
 *
 * Why the restrictions of the space keep what matters:
 * - a part's stages are consecutive in the pipeline: a part's GPUs share
 *   its fast network, the join between parts is crossed once per part
 *   boundary;
 * - a segment uses the whole part (time objective): an unused GPU never
 *   shortens a step under the model, GPUs slowed by a factor get a smaller
 *   share instead; the cost objective also tries halvings of each part;
 * - shares by speed: each stage's replicas take a micro-batch's samples in
 *   proportion to their speed (whole samples: the allocation with the
 *   smallest largest samples / speed, greedy), so a slowed GPU holds its
 *   replica back least;
 * - the even split and the split balancing each stage's compute on its own
 *   GPUs (the smallest largest per-stage seconds, by bisection over a
 *   greedy cover, which is exact for stages in a fixed order).
 *
 * The shape bound (proof).  Stage j's device runs m micro-batches'
 * forward, backward and weight passes one after another; each pass lasts
 * at least its replicas' slowest seconds (the engine's f, b, w are the
 * maxima over replicas of the replica's seconds over its speed), and a
 * replica's seconds for layers [a, b) are at least the sum of its layers'
 * seconds (work.h hpgo_work_layer_times, the same pieces), each at least
 * the model's cheapest layer at that replica's samples, c_j.  So T >= m
 * max_j (l_j c_j) for the stage's l_j layers, and over every split with
 * sum l_j = L, max_j l_j c_j >= L / sum_j (1 / c_j) (the real relaxation:
 * equality when l_j c_j is constant).  With fused backwards (1F1B, GPipe)
 * the chain of the stages below adds the fill: T >= sum_{i<j} l_i c_i +
 * m l_j c_j for each j, which weights lambda_j >= 0 with m lambda_i +
 * sum_{j>i} lambda_j >= 1 / c_i turn into T >= L / sum lambda (weak
 * duality).  With ZeRO 0 or 1 a stage's gradient sync starts no earlier
 * than its last backward and its buckets run one after another:
 * T >= l_j ((m - 1) c_j + d_j), d_j the sync's bandwidth term per layer.
 * Each stage boundary's directed link carries the m transfers one after
 * another, each at least the total bytes over the fewer replicas at the
 * lowest level any pair of its GPUs shares (the join between parts).  Tied
 * embeddings' gradient exchange between the edge stages' first GPUs adds
 * its point-to-point time.  The plan bound is autoplan.c's (before + busy
 * + optimizer, and the last backward running down the stages below) on the
 * engine's own stage costs, with the same sync, transfer and tied
 * embedding terms; the memory bound is the model states plus the
 * activations the schedule must hold (1F1B and ZB-H1: min(P - d, m)
 * micro-batches, GPipe: m) on the stage's GPU type, and a shape none of
 * whose splits can fit (the layers its stages can hold, as middle stages,
 * sum to fewer than the model's) is dropped.
 *
 * Span shapes (stages whose replicas span every part, add_span): their
 * data-parallel plans are simulated without a bound; their pipelines are
 * bounded from the engine's own stage costs (price_span: before + busy)
 * before they are simulated.  Both join the same ranking, so the result
 * stays the exact top list of the larger space.
 *
 * Cost: O(shapes x parts) for phase 1 (per-segment sums cached), plus
 * O(stages x replicas) engine pricing per built plan and the simulations
 * the bounds cannot exclude. */
#include "hetplan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autoplan.h"
#include "cost.h"
#include "engine.h"
#include "grow.h"
#include "memory.h"
#include "pool.h"
#include "schedule.h"

enum { HS_LIVE = 0, HS_REJECTED, HS_MEMORY, HS_FITS, HS_NOFIT, HS_NOMEM };

typedef struct cfg {
    int32_t part, tp, s, dp;
    int64_t gpus;
} cfg_t;

/* Per-layer seconds of one replica: part, tp, samples, recompute, ZeRO,
 * one-stage plan (pp 1 prices differently from pp > 1). */
typedef struct ltimes {
    int32_t part, tp, rc, zero, one;
    double n;
    double *t;
    double tmin, e0, e1;
    int ok;
} ltimes_t;

/* A segment's stage memory as an affine function of its layers (a middle
 * stage of l layers: params p0 + l p1, expert params e0 + l e1,
 * activations per micro-batch a0 + l a1), for the shape memory bound. */
typedef struct memline {
    int ok;
    double p0, p1, e0, e1, a0, a1, transient, state, maxlayer;
    double send1; /* bytes a GPU of a replica sends on per sample (transformers; 0: none) */
    double dsync; /* ZeRO 0 and 1: least seconds of gradient sync per layer of a stage */
} memline_t;

typedef struct shape {
    int32_t nseg;
    int32_t seg[HPGO_HET_MAX_TYPES];
    int64_t M;
    int8_t sched, rc, zero;
    double lb, key;
    int8_t mem_over; /* no split fits (the shape memory bound) */
    int64_t canon;   /* base index x N_VARIANTS + variant: the enumeration order */
    int8_t span;     /* data parallelism over every GPU, replicas of several types */
} shape_t;

/* A base shape: the parts' segments and the micro-batch; its variants
 * (schedule, recomputation, ZeRO) are the shapes phase 2 makes of it. */
typedef struct base {
    int32_t nseg;
    int32_t seg[HPGO_HET_MAX_TYPES];
    int32_t mi;
    double key;
} base_t;

#define N_VARIANTS 48 /* 3 schedules x 4 recomputation slots x 4 ZeRO stages */

typedef struct cand {
    int64_t shape;
    int8_t balanced, state, mem_over, priced;
    double lb, key, time, score;
    hpgo_parplan_t plan;
    void *blob; /* groups, shares, split */
} cand_t;

typedef struct search {
    const hpgo_work_t *w;
    const hpgo_cluster_t *c;
    const hpgo_hetplan_opts_t *o;
    int32_t n_parts;
    int64_t L, B;
    int xf;
    double overhead;
    cfg_t *cfgs;
    int32_t n_cfgs;
    int64_t *Ms;
    int32_t n_Ms;
    double *segcmin; /* the same index: the least c_j of the segment's stages */
    double *segsum; /* [cfg][M][rc][zero][one]: sum over the segment's stages of 1 / c_j;
                       NAN unknown, -1 invalid */
    memline_t *mlines; /* [cfg][M][rc][zero]; ok = -1: not computed */
    ltimes_t *lts;
    int32_t n_lts, cap_lts;
    int32_t *lt_hash; /* phase 2: open addressing over lts (-1 empty), size lt_hash_n */
    int64_t lt_hash_n;
    shape_t *shapes;
    int64_t n_shapes, cap_shapes;
    base_t *bases;
    int64_t n_bases, cap_bases;
    double emb[HPGO_CLUSTER_MAX_PARTS][2][12]; /* embedding parameters a GPU of an edge
                                                  stage holds: [part][last][log2 tp];
                                                  < 0: unknown */
    int64_t n_variants; /* shapes the bases have (counted in phase 1) */
    cand_t *cands;
    int64_t n_cands, cap_cands;
    const int64_t *batch;
    int8_t *pricing;     /* per batch slot: the job prices (1) or simulates (0) */
    int64_t batch_first; /* expansion: first shape index of the batch */
    int32_t nthreads;
} search_t;

/* growable arrays start at 256 elements (grow.h) */
static int grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    return hpgo_grow(p, cap, need, elem, 256);
}

static int64_t part_start(const hpgo_cluster_t *c, int32_t part)
{
    int64_t first = 0;
    for (int32_t k = 0; k < part; k++)
        first += hpgo_cluster_gpus(hpgo_cluster_part(c, k));
    return first;
}

/* Slowest speed of cluster GPUs [lo, hi) (the engine's min_speed). */
static double min_speed(const hpgo_cluster_t *c, int64_t lo, int64_t hi)
{
    double s = 1;
    for (int32_t i = 0; c->slow && i < c->n_slow; i++)
        if (c->slow[i].gpu >= lo && c->slow[i].gpu < hi && c->slow[i].speed < s)
            s = c->slow[i].speed;
    return s;
}

static int any_slow(const hpgo_cluster_t *c, int64_t lo, int64_t hi)
{
    for (int32_t i = 0; c->slow && i < c->n_slow; i++)
        if (c->slow[i].gpu >= lo && c->slow[i].gpu < hi)
            return 1;
    return 0;
}

/* The replicas' samples of stage j of segment g for micro-batches of M
 * samples: n[i] (dp entries) and their speeds sp[i].  Returns 1 when the
 * shares are even (no shares needed), 0 when uneven, -1 when a replica
 * would get no sample. */
static int stage_samples(const search_t *S, const cfg_t *g, int32_t j, int64_t M, double *n,
                         double *sp)
{
    const hpgo_cluster_t *c = S->c;
    int64_t first = part_start(c, g->part) + (int64_t)j * g->tp * g->dp;
    int32_t dp = g->dp;
    if (M < dp && S->xf)
        return -1;
    if (!any_slow(c, first, first + (int64_t)dp * g->tp)) {
        for (int32_t i = 0; i < dp; i++)
            sp[i] = 1;
        if (!S->xf || M % dp == 0) {
            for (int32_t i = 0; i < dp; i++)
                n[i] = (double)M / dp;
            return 1;
        }
        int64_t q = M / dp, r = M % dp;
        for (int32_t i = 0; i < dp; i++)
            n[i] = (double)(q + (i < r));
        return 0;
    }
    double tot = 0;
    for (int32_t i = 0; i < dp; i++) {
        sp[i] = min_speed(c, first + (int64_t)i * g->tp, first + (int64_t)(i + 1) * g->tp);
        tot += sp[i];
    }
    if (!S->xf) {
        for (int32_t i = 0; i < dp; i++)
            n[i] = (double)M * sp[i] / tot;
        return 0;
    }
    /* whole samples: start from the floor of the proportional share (at
     * least 1), then move single samples so that the largest n / speed is
     * smallest (greedy: each added sample goes where it raises the maximum
     * least, each removed one where the maximum is) */
    int64_t sum = 0;
    for (int32_t i = 0; i < dp; i++) {
        int64_t k = (int64_t)floor((double)M * sp[i] / tot);
        n[i] = (double)(k < 1 ? 1 : k);
        sum += (int64_t)n[i];
    }
    while (sum > M) {
        int32_t best = -1;
        for (int32_t i = 0; i < dp; i++)
            if (n[i] > 1 && (best < 0 || n[i] / sp[i] > n[best] / sp[best]))
                best = i;
        if (best < 0)
            return -1;
        n[best] -= 1, sum--;
    }
    while (sum < M) {
        int32_t best = 0;
        for (int32_t i = 1; i < dp; i++)
            if ((n[i] + 1) / sp[i] < (n[best] + 1) / sp[best])
                best = i;
        n[best] += 1, sum++;
    }
    for (int32_t i = 1; i < dp; i++)
        if (n[i] != n[0])
            return 0;
    return 1;
}

/* The plan of stage group g as the engine sees it (engine.c uneven_views). */
static hpgo_parplan_t view_plan(const hpgo_parplan_t *p, int32_t tp, int32_t dp, int64_t m)
{
    hpgo_parplan_t v = *p;
    v.tp = tp, v.dp = dp, v.n_groups = 0, v.groups = NULL;
    v.n_split = 0, v.split = NULL;
    v.micro_batch = 1, v.global_batch = m * dp;
    return v;
}

/* Seconds per byte, at least, of a stage's gradient collective over its dp
 * replicas of tp GPUs from GPU `local` of part pc (engine.c coll): every
 * algorithm's time is at least its bandwidth term, the cheapest of which
 * the secant of the automatic choice at a vast size is; a group the
 * engine prices as one ring at the highest level it crosses pays that
 * level's.  0 when there is nothing to bound. */
static double sync_per_byte(const hpgo_cluster_t *pc, int op, int32_t dp, int32_t tp,
                            int64_t local)
{
    if (dp < 2)
        return 0;
    double n = (double)dp, bus = op == HPGO_COLL_ALLREDUCE ? 2 * (n - 1) / n : (n - 1) / n;
    int32_t top = hpgo_cost_level_between(pc, local, local + (int64_t)(dp - 1) * tp);
    const hpgo_level_t *l = &pc->levels[top];
    double ring = bus / (l->coll_bandwidth * l->efficiency);
    int64_t fan[HPGO_CLUSTER_MAX_LEVELS];
    if (hpgo_group_fanout(pc, dp, tp, fan, NULL) != HPGO_OK)
        return ring;
    double X = 1e12;
    double beta = (hpgo_cost_collective(pc, op, dp, tp, 2 * X, HPGO_ALGO_AUTO) -
                   hpgo_cost_collective(pc, op, dp, tp, X, HPGO_ALGO_AUTO)) / X;
    if (!(beta >= 0))
        return 0;
    return beta < ring ? beta : ring;
}

/* The base plan of a shape (sizes of the whole plan, groups and split unset). */
static hpgo_parplan_t shape_plan(const search_t *S, const shape_t *sh)
{
    hpgo_parplan_t p = *S->o->base;
    int32_t P = 0;
    int32_t tp1 = 1;
    for (int32_t k = 0; k < sh->nseg; k++) {
        P += S->cfgs[sh->seg[k]].s;
        if (S->cfgs[sh->seg[k]].tp > 1)
            tp1 = S->cfgs[sh->seg[k]].tp;
    }
    p.tp = p.dp = p.cp = p.ep = p.vstages = 1;
    p.etp = 0;
    p.pp = P;
    p.micro_batch = sh->M;
    p.global_batch = S->B;
    p.schedule = sh->sched;
    p.recompute = sh->rc;
    p.zero = sh->zero;
    p.sequence_parallel = S->xf && tp1 > 1;
    p.shard_size = 0;
    p.n_split = 0, p.split = NULL, p.n_groups = 0, p.groups = NULL;
    return p;
}

/* ---- per-layer times (phase 1, one thread) ------------------------------- */

static uint64_t lt_key(int32_t part, int32_t tp, double n, int32_t rc, int32_t zero, int32_t one)
{
    uint64_t bits;
    memcpy(&bits, &n, sizeof bits);
    uint64_t h = bits * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)(uint32_t)part << 40) ^ ((uint64_t)(uint32_t)tp << 20) ^
         ((uint64_t)(uint32_t)rc << 8) ^ ((uint64_t)(uint32_t)zero << 4) ^ (uint64_t)one;
    return h * 0xBF58476D1CE4E5B9ull;
}

static int lt_index(search_t *S)
{
    int64_t n = 16;
    while (n < 2 * (int64_t)S->n_lts + 2)
        n *= 2;
    S->lt_hash = malloc(sizeof(int32_t) * (size_t)n);
    if (!S->lt_hash)
        return -1;
    S->lt_hash_n = n;
    for (int64_t i = 0; i < n; i++)
        S->lt_hash[i] = -1;
    for (int32_t i = 0; i < S->n_lts; i++) {
        const ltimes_t *x = &S->lts[i];
        uint64_t h = lt_key(x->part, x->tp, x->n, x->rc, x->zero, x->one) & (uint64_t)(n - 1);
        while (S->lt_hash[h] >= 0)
            h = (h + 1) & (uint64_t)(n - 1);
        S->lt_hash[h] = i;
    }
    return 0;
}

/* Phase 2's read-only lookup (NULL: never priced). */
static const ltimes_t *lt_find(const search_t *S, int32_t part, int32_t tp, double n, int32_t rc,
                               int32_t zero, int32_t one)
{
    uint64_t mask = (uint64_t)(S->lt_hash_n - 1);
    for (uint64_t h = lt_key(part, tp, n, rc, zero, one) & mask; S->lt_hash[h] >= 0;
         h = (h + 1) & mask) {
        const ltimes_t *y = &S->lts[S->lt_hash[h]];
        if (y->part == part && y->tp == tp && y->n == n && y->rc == rc && y->zero == zero &&
            y->one == one)
            return y;
    }
    return NULL;
}

static void lt_free(search_t *S)
{
    for (int32_t i = 0; i < S->n_lts; i++)
        free(S->lts[i].t);
    free(S->lts);
}

/* Per-layer seconds of a replica of `n` samples on part `part` at `tp`
 * (NULL on failure of memory; ok = 0 when the model cannot run so). */
static const ltimes_t *layer_times(search_t *S, int32_t part, int32_t tp, double n, int32_t rc,
                                   int32_t zero, int32_t one, int32_t sched, int32_t sp)
{
    for (int32_t i = 0; i < S->n_lts; i++) {
        const ltimes_t *x = &S->lts[i];
        if (x->part == part && x->tp == tp && x->n == n && x->rc == rc && x->zero == zero &&
            x->one == one)
            return x;
    }
    int64_t cap = S->cap_lts;
    if (grow((void **)&S->lts, &cap, S->n_lts + 1, sizeof(ltimes_t)) < 0)
        return NULL;
    S->cap_lts = (int32_t)cap;
    ltimes_t *x = &S->lts[S->n_lts];
    memset(x, 0, sizeof *x);
    x->part = part, x->tp = tp, x->n = n, x->rc = rc, x->zero = zero, x->one = one;
    x->t = malloc(sizeof(double) * (size_t)S->L);
    if (!x->t)
        return NULL;
    S->n_lts++;
    /* the plan hpgo_work_stage_cost_range prices a replica with */
    hpgo_parplan_t q = *S->o->base;
    q.tp = tp, q.dp = 1, q.cp = 1, q.ep = 1, q.etp = 0, q.shard_size = 0, q.vstages = 1;
    q.pp = one ? 1 : 2;
    /* the sum of a layer's passes does not depend on the schedule */
    (void)sched;
    q.schedule = HPGO_PS_1F1B, q.recompute = rc, q.zero = zero, q.sequence_parallel = sp;
    int64_t whole = S->xf ? (int64_t)llround(n) : 1;
    q.micro_batch = whole, q.global_batch = whole;
    q.n_split = 0, q.split = NULL, q.n_groups = 0, q.groups = NULL;
    const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, part);
    hpgo_stage_cost_t tmp[2];
    if (hpgo_parplan_check(&q, NULL) != HPGO_OK || S->L < q.pp ||
        hpgo_work_stage_costs(S->w, pc, &q, tmp, NULL) != HPGO_OK ||
        hpgo_work_layer_times(S->w, pc, &q, x->t, &x->e0, &x->e1, NULL, NULL) != HPGO_OK) {
        x->ok = 0;
        return x;
    }
    double scale = S->xf ? 1.0 : n; /* a chain's times are linear in its samples */
    x->tmin = INFINITY;
    for (int64_t l = 0; l < S->L; l++) {
        x->t[l] *= scale;
        if (x->t[l] < x->tmin)
            x->tmin = x->t[l];
    }
    x->e0 *= scale, x->e1 *= scale;
    x->ok = 1;
    return x;
}

/* sum over segment g's stages of 1 / c_j (see the DESIGN proof), -1 when
 * the segment cannot run the shape; cached. */
static double seg_sum(search_t *S, int32_t ci, int32_t mi, int32_t rc, int32_t zero, int32_t one,
                      int32_t sched, double *n, double *sp)
{
    size_t at = ((((size_t)ci * (size_t)S->n_Ms + (size_t)mi) * 3 + (size_t)rc) * 4 +
                 (size_t)zero) * 2 + (size_t)one;
    if (!isnan(S->segsum[at]))
        return S->segsum[at];
    const cfg_t *g = &S->cfgs[ci];
    int64_t M = S->Ms[mi];
    double sum = 0, cmin = INFINITY;
    int32_t spf = S->xf && g->tp > 1;
    for (int32_t j = 0; j < g->s && sum >= 0; j++) {
        if (stage_samples(S, g, j, M, n, sp) < 0) {
            sum = -1;
            break;
        }
        double cj = 0;
        for (int32_t i = 0; i < g->dp; i++) {
            if (i > 0 && n[i] == n[i - 1] && sp[i] == sp[i - 1])
                continue;
            const ltimes_t *x = layer_times(S, g->part, g->tp, n[i], rc, zero, one, sched, spf);
            if (!x)
                return NAN; /* out of memory: the caller fails */
            if (!x->ok) {
                sum = -1;
                break;
            }
            if (x->tmin / sp[i] > cj)
                cj = x->tmin / sp[i];
        }
        if (sum >= 0)
            sum = cj > 0 ? sum + 1 / cj : INFINITY;
        if (cj < cmin)
            cmin = cj;
    }
    S->segsum[at] = sum;
    S->segcmin[at] = cmin;
    return sum;
}

/* The memory line of segment ci at micro-batch M (its stages' fewest
 * "most samples" of a replica: memory grows with samples, so the bound
 * holds for each stage), from the engine's prices of middle stages of one
 * and two layers. */
static const memline_t *mem_line(search_t *S, int32_t ci, int32_t mi, int32_t rc, int32_t zero,
                                 double *n, double *sp)
{
    size_t at = (((size_t)ci * (size_t)S->n_Ms + (size_t)mi) * 3 + (size_t)rc) * 4 + (size_t)zero;
    memline_t *ml = &S->mlines[at];
    if (ml->ok != -1)
        return ml;
    ml->ok = 0;
    const cfg_t *g = &S->cfgs[ci];
    int64_t M = S->Ms[mi];
    if (S->L < 4)
        return ml;
    double least = INFINITY;
    for (int32_t j = 0; j < g->s; j++) {
        if (stage_samples(S, g, j, M, n, sp) < 0)
            return ml;
        double most = 0;
        for (int32_t i = 0; i < g->dp; i++)
            if (n[i] > most)
                most = n[i];
        if (most < least)
            least = most;
    }
    hpgo_parplan_t p = *S->o->base;
    p.recompute = rc, p.zero = zero, p.schedule = HPGO_PS_1F1B;
    p.sequence_parallel = S->xf && g->tp > 1;
    p.pp = 3, p.cp = 1, p.ep = 1, p.etp = 0, p.vstages = 1, p.shard_size = 0;
    hpgo_parplan_t vp = view_plan(&p, g->tp, g->dp, S->B / M);
    const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, g->part);
    hpgo_stage_cost_t one, two;
    if (hpgo_work_stage_cost_range(S->w, pc, &vp, 1, 2, least, &one, NULL) != HPGO_OK ||
        hpgo_work_stage_cost_range(S->w, pc, &vp, 1, 3, least, &two, NULL) != HPGO_OK)
        return ml;
    ml->p1 = two.params - one.params, ml->p0 = one.params - ml->p1;
    ml->e1 = two.expert_params - one.expert_params, ml->e0 = one.expert_params - ml->e1;
    ml->a1 = two.act - one.act, ml->a0 = one.act - ml->a1;
    ml->transient = one.transient < two.transient ? one.transient : two.transient;
    ml->state = one.fp8_state < two.fp8_state ? one.fp8_state : two.fp8_state;
    ml->maxlayer = one.params - one.emb_params;
    /* a transformer's hidden states are the same between any two layers,
     * in proportion to the samples */
    ml->send1 = S->xf ? one.send_bytes / least : 0;
    ml->dsync = 0;
    if (zero <= 1 && g->dp > 1) {
        double wb, gb, ob, least_pb = INFINITY;
        hpgo_work_state_bytes(S->w->precision, p.fp8_params, p.optimizer_impl, &wb, &gb, &ob);
        int op = zero >= 1 ? HPGO_COLL_REDUCE_SCATTER : HPGO_COLL_ALLREDUCE;
        for (int32_t j = 0; j < g->s; j++) {
            double pb = sync_per_byte(pc, op, g->dp, g->tp, (int64_t)j * g->tp * g->dp);
            if (pb < least_pb)
                least_pb = pb;
        }
        double dense1 = ml->p1 - ml->e1;
        ml->dsync = dense1 > 0 ? least_pb * dense1 * gb : 0;
    }
    if (ml->p0 < 0)
        ml->p0 = 0;
    if (ml->e0 < 0)
        ml->e0 = 0;
    if (ml->a0 < 0)
        ml->a0 = 0;
    ml->ok = ml->p1 >= 0 && ml->a1 >= 0 && ml->e1 >= 0;
    return ml;
}

static int line_fits(const search_t *S, const hpgo_cluster_t *pc, const memline_t *ml,
                     const hpgo_parplan_t *vp, int64_t k, int64_t layers)
{
    double l = (double)layers, act = ml->a0 + l * ml->a1;
    hpgo_mem_t mem;
    hpgo_memory_breakdown2(pc, vp, S->w->precision, ml->p0 + l * ml->p1, ml->e0 + l * ml->e1,
                           ml->maxlayer, (double)k * act + ml->transient, act + ml->transient,
                           S->overhead + ml->state, &mem);
    return !(mem.total > mem.capacity * (1 + 1e-9));
}

/* Most layers (0..L) a stage of line ml holding k micro-batches fits:
 * memory grows with the layers; it is affine in them below ZeRO-3, so the
 * line through 0 and 1 layer gives the answer, which two evaluations
 * confirm (a bisection otherwise). */
static int64_t max_layers(const search_t *S, const memline_t *ml, const cfg_t *g,
                          const hpgo_parplan_t *vp, int64_t k)
{
    const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, g->part);
    int64_t lo = 0, hi = S->L;
    if (!line_fits(S, pc, ml, vp, k, 1))
        return 0;
    if (line_fits(S, pc, ml, vp, k, hi))
        return hi;
    if (vp->zero < 3) {
        double l = (double)1, act = ml->a0 + l * ml->a1;
        hpgo_mem_t m0, m1;
        hpgo_memory_breakdown2(pc, vp, S->w->precision, ml->p0, ml->e0, ml->maxlayer,
                               (double)k * ml->a0 + ml->transient, ml->a0 + ml->transient,
                               S->overhead + ml->state, &m0);
        hpgo_memory_breakdown2(pc, vp, S->w->precision, ml->p0 + ml->p1, ml->e0 + ml->e1,
                               ml->maxlayer, (double)k * act + ml->transient,
                               act + ml->transient, S->overhead + ml->state, &m1);
        double slope = m1.total - m0.total;
        if (slope > 0) {
            double x = floor((m0.capacity * (1 + 1e-9) - m0.total) / slope);
            int64_t guess = x < 1 ? 1 : x > (double)(hi - 1) ? hi - 1 : (int64_t)x;
            if (line_fits(S, pc, ml, vp, k, guess) && !line_fits(S, pc, ml, vp, k, guess + 1))
                return guess;
        }
    }
    lo = 1, hi = hi - 1; /* fits at lo, not at hi + 1 */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (line_fits(S, pc, ml, vp, k, mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* 1 when no layer split of the shape fits: the layers each stage can hold
 * (the model states and the activations its schedule must hold, for its
 * layers as a middle stage: the edge stages only hold more) sum to fewer
 * than the model's. */
static int shape_mem_over(search_t *S, const shape_t *sh, double *n, double *sp)
{
    int32_t P = 0;
    for (int32_t k = 0; k < sh->nseg; k++)
        P += S->cfgs[sh->seg[k]].s;
    int32_t mi = 0;
    while (S->Ms[mi] != sh->M)
        mi++;
    int64_t m = S->B / sh->M, total = 0;
    hpgo_parplan_t p = *S->o->base;
    p.recompute = sh->rc, p.zero = sh->zero, p.schedule = sh->sched;
    p.pp = P, p.cp = 1, p.ep = 1, p.etp = 0, p.vstages = 1, p.shard_size = 0;
    /* every segment's line first: phase 2 reads them from its threads */
    int ok = 1;
    for (int32_t k = 0; k < sh->nseg; k++)
        ok &= mem_line(S, sh->seg[k], mi, sh->rc, sh->zero, n, sp)->ok == 1;
    if (!ok)
        return 0;
    int32_t j = 0;
    for (int32_t k = 0; k < sh->nseg; k++) {
        const cfg_t *g = &S->cfgs[sh->seg[k]];
        const memline_t *ml = mem_line(S, sh->seg[k], mi, sh->rc, sh->zero, n, sp);
        hpgo_parplan_t vp = view_plan(&p, g->tp, g->dp, m);
        for (int32_t s = 0; s < g->s; s++, j++) {
            int64_t held = sh->sched == HPGO_PS_GPIPE ? m : (P - j < m ? P - j : m);
            total += max_layers(S, ml, g, &vp, held);
            if (total >= S->L)
                return 0;
        }
    }
    return 1;
}

/* ---- phase 1: shapes ----------------------------------------------------- */

static int free_or(int32_t fixed, int32_t v) { return fixed < 0 || fixed == v; }

static int tp_ok(const search_t *S, int64_t tp)
{
    if (!S->xf)
        return tp == 1;
    const hpgo_xformer_t *x = &S->w->x;
    int dense_mlp = x->experts == 0 || x->dense_first > 0 || x->moe_every > 1;
    return !(x->heads % tp || (dense_mlp && x->ffn % tp) ||
             (x->kv_heads % tp && tp % x->kv_heads) || (x->experts > 0 && x->expert_ffn % tp));
}

static int add_cfgs(search_t *S, hpgo_err_t *err)
{
    const hpgo_hetplan_opts_t *o = S->o;
    for (int32_t k = 0; k < S->n_parts; k++) {
        const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, k);
        int64_t G = hpgo_cluster_gpus(pc), gpn = hpgo_cluster_unit(pc, 0);
        for (int64_t n = G; n >= 1; n /= 2) {
            for (int64_t tp = 1; tp <= gpn && tp <= n; tp++) {
                if (gpn % tp || n % tp || !free_or(o->tp, (int32_t)tp) || !tp_ok(S, tp))
                    continue;
                for (int64_t s = 1; s <= S->L && s <= n / tp && s <= HPGO_PLAN_MAX_PP; s++) {
                    if ((n / tp) % s)
                        continue;
                    int64_t dp = n / (tp * s);
                    if (dp > (1 << 24))
                        continue;
                    cfg_t *nc = realloc(S->cfgs, sizeof(cfg_t) * (size_t)(S->n_cfgs + 1));
                    if (!nc)
                        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                    S->cfgs = nc;
                    S->cfgs[S->n_cfgs++] = (cfg_t){k, (int32_t)tp, (int32_t)s, (int32_t)dp, n};
                }
            }
            if (o->objective != HPGO_OBJ_COST || n % 2)
                break;
        }
    }
    return HPGO_OK;
}

typedef struct enum_ctx {
    int32_t order[HPGO_HET_MAX_TYPES];
    int32_t n_order;
    int32_t pick[HPGO_HET_MAX_TYPES];
    double *n, *sp; /* scratch, max dp entries */
} enum_ctx_t;

static double weight(const search_t *S, const shape_t *sh)
{
    double wgt = 0;
    for (int32_t k = 0; sh->span && k < S->n_parts; k++)
        wgt += (double)hpgo_cluster_gpus(hpgo_cluster_part(S->c, k)) *
               (S->o->prices ? S->o->prices[k] / 3600.0 : 1.0);
    for (int32_t k = 0; k < sh->nseg; k++) {
        const cfg_t *g = &S->cfgs[sh->seg[k]];
        wgt += (double)g->gpus * (S->o->prices ? S->o->prices[g->part] / 3600.0 : 1.0);
    }
    return S->o->objective == HPGO_OBJ_COST ? wgt : 1.0;
}

/* A bound on the seconds one micro-batch's activations take to cross the
 * join from segment a to segment b (engine.c reshard_time: each sender
 * replica sends its share, ta / min(ta, tb) x its GPU's send bytes, one
 * transfer at a time to each receiver replica, and the boundary lasts as
 * long as the busiest sender or receiver: at least the total over the
 * fewer of them).  The directed link carries the m micro-batches one
 * after another, so the step takes at least m times this. */
static double join_seconds(const search_t *S, const cfg_t *a, const cfg_t *b, double send1,
                           int64_t M)
{
    const hpgo_level_t *j = &S->c->join;
    if (S->c->n_parts < 2 || a->part == b->part || !(send1 > 0))
        return 0;
    int32_t tmin = a->tp < b->tp ? a->tp : b->tp;
    double total = send1 * (double)M * (double)a->tp / (double)tmin;
    int32_t fewer = a->dp < b->dp ? a->dp : b->dp;
    return total / (double)fewer / (j->bandwidth * j->efficiency);
}

/* The embedding parameters a GPU of the first (last = 0) or the last
 * (last = 1) stage holds on part `part` at `tp` (the engine's
 * emb_params); 0 when unknown (no bound). */
static double edge_emb(search_t *S, int32_t part, int32_t tp, int last)
{
    int32_t lg = 0;
    while ((1 << lg) < tp && lg < 11)
        lg++;
    if ((1 << lg) != tp)
        return 0;
    double *slot = &S->emb[part][last][lg];
    if (*slot >= 0)
        return *slot;
    *slot = 0;
    hpgo_parplan_t p = *S->o->base;
    p.tp = tp, p.dp = 1, p.cp = 1, p.ep = 1, p.etp = 0, p.vstages = 1, p.pp = 2;
    p.sequence_parallel = tp > 1, p.shard_size = 0, p.schedule = HPGO_PS_1F1B;
    p.micro_batch = 1, p.global_batch = 1, p.n_split = 0, p.split = NULL;
    p.n_groups = 0, p.groups = NULL;
    hpgo_stage_cost_t one;
    int32_t a = last ? (int32_t)S->L - 1 : 0;
    if (hpgo_work_stage_cost_range(S->w, hpgo_cluster_part(S->c, part), &p, a, a + 1, 1.0, &one,
                                   NULL) == HPGO_OK)
        *slot = one.emb_params;
    return *slot;
}

/* The variants of base b (schedule, recomputation, ZeRO) with their time
 * bounds; `make` adds each as a shape (phase 2), otherwise only the least
 * bound is returned (phase 1).  -1 on a failure (err set). */
static int variants(search_t *S, const base_t *b, int64_t bi, int make, double *least,
                    enum_ctx_t *E, hpgo_err_t *err)
{
    const hpgo_hetplan_opts_t *o = S->o;
    int32_t P = 0, anydp = 0;
    for (int32_t k = 0; k < b->nseg; k++) {
        P += S->cfgs[b->seg[k]].s;
        anydp |= S->cfgs[b->seg[k]].dp > 1;
    }
    int64_t M = S->Ms[b->mi], m = S->B / M;
    *least = INFINITY;
    /* tied embeddings: the edge stages exchange the embedding's gradient
     * (engine.c tied_sync) between the first GPUs of the first and the
     * last stage, at least the smaller edge's bytes */
    double t_tied = 0;
    if (S->xf && S->w->x.tied && P > 1) {
        const cfg_t *g0 = &S->cfgs[b->seg[0]], *g1 = &S->cfgs[b->seg[b->nseg - 1]];
        double e0 = edge_emb(S, g0->part, g0->tp, 0), e1 = edge_emb(S, g1->part, g1->tp, 1);
        double wb, gb, ob;
        hpgo_work_state_bytes(S->w->precision, o->base->fp8_params, o->base->optimizer_impl, &wb,
                              &gb, &ob);
        double bytes = (e0 < e1 ? e0 : e1) * gb;
        if (g0->part != g1->part) {
            const hpgo_level_t *j = &S->c->join;
            t_tied = j->latency + bytes / (j->bandwidth * j->efficiency);
        } else {
            const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, g0->part);
            int64_t last = (int64_t)(g1->s - 1) * g1->dp * g1->tp;
            t_tied = hpgo_cost_p2p(pc, hpgo_cost_level_between(pc, 0, last), bytes);
        }
    }
    static const int8_t scheds[3] = {HPGO_PS_1F1B, HPGO_PS_ZBH1, HPGO_PS_GPIPE};
    for (int si = 0; si < 3; si++) {
        int8_t sch = scheds[si];
        if (!free_or(o->schedule, sch) || (sch == HPGO_PS_GPIPE && o->schedule != sch))
            continue;
        if (P == 1 && sch == HPGO_PS_ZBH1)
            continue;
        for (int8_t rc = HPGO_RC_NONE; rc <= HPGO_RC_FULL; rc++) {
            if (!free_or(o->recompute, rc) || (rc == HPGO_RC_SELECTIVE && !S->xf))
                continue;
            for (int8_t z = 0; z <= 3; z++) {
                if (o->zero < 0 ? (z > 0 && !anydp) : z != o->zero)
                    continue;
                if (hpgo_cancelled(o->cancel))
                    return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the search was cancelled");
                double inv = 0;
                int bad = 0;
                for (int32_t k = 0; k < b->nseg && !bad; k++) {
                    double v = seg_sum(S, b->seg[k], b->mi, rc, z, P == 1, sch, E->n, E->sp);
                    if (isnan(v))
                        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                    if (v < 0)
                        bad = 1;
                    inv += v;
                }
                if (bad)
                    continue;
                shape_t sh;
                memset(&sh, 0, sizeof sh);
                sh.nseg = b->nseg;
                memcpy(sh.seg, b->seg, sizeof(int32_t) * (size_t)b->nseg);
                sh.M = M, sh.sched = sch, sh.rc = rc, sh.zero = z;
                sh.lb = inv > 0 ? (double)m * (double)S->L / inv : INFINITY;
                if (t_tied > sh.lb)
                    sh.lb = t_tied;
                if (z <= 1) {
                    /* each stage's last backward starts after its m
                     * forwards and m - 1 backwards, and its gradient sync
                     * follows: T >= l_j ((m - 1) c_j + d_j), d_j the
                     * sync's seconds per layer, with c_j at least its
                     * segment's least: T >= L / sum_j 1 / c'_j */
                    double inv2 = 0;
                    for (int32_t k = 0; k < b->nseg; k++) {
                        size_t at = ((((size_t)b->seg[k] * (size_t)S->n_Ms + (size_t)b->mi) * 3 +
                                      (size_t)rc) * 4 + (size_t)z) * 2 + (size_t)(P == 1);
                        const memline_t *ml = mem_line(S, b->seg[k], b->mi, rc, z, E->n, E->sp);
                        double c = S->segcmin[at];
                        double d = ml->ok == 1 ? ml->dsync : 0;
                        double cm = (double)m * c, cs = (double)(m - 1) * c + d;
                        double cc = cm > cs ? cm : cs;
                        inv2 += cc > 0 ? (double)S->cfgs[b->seg[k]].s / cc : INFINITY;
                    }
                    if (inv2 > 0 && (double)S->L / inv2 > sh.lb)
                        sh.lb = (double)S->L / inv2;
                }
                if (sch != HPGO_PS_ZBH1 && P > 1) {
                    /* fused backwards: T >= sum_{i<j} l_i c_i + m l_j c_j for
                     * every stage j (autoplan.c's chain down the stages);
                     * weights lambda_j >= 0 with m lambda_i + sum_{j>i}
                     * lambda_j >= 1 / c_i turn them into T >= L / sum
                     * lambda over every split (weak duality), each stage's
                     * c_j taken as its segment's least */
                    double R = 0;
                    for (int32_t k = b->nseg - 1; k >= 0; k--) {
                        size_t at = ((((size_t)b->seg[k] * (size_t)S->n_Ms + (size_t)b->mi) * 3 +
                                      (size_t)rc) * 4 + (size_t)z) * 2 + (size_t)(P == 1);
                        double c = S->segcmin[at];
                        for (int32_t st = 0; st < S->cfgs[b->seg[k]].s; st++) {
                            double lam = (1 / c - R) / (double)m;
                            if (lam > 0)
                                R += lam;
                        }
                    }
                    if (R > 0 && (double)S->L / R > sh.lb)
                        sh.lb = (double)S->L / R;
                }
                /* boundaries inside a part: the same, over the level of the
                 * closest pair of GPUs of the two stages (the lowest any of
                 * its transfers uses: blocks of GPUs one after the other) */
                for (int32_t k = 0; k < b->nseg; k++) {
                    const cfg_t *g = &S->cfgs[b->seg[k]];
                    const memline_t *ml = mem_line(S, b->seg[k], b->mi, rc, z, E->n, E->sp);
                    if (g->s < 2 || ml->ok != 1 || !(ml->send1 > 0))
                        continue;
                    const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, g->part);
                    int64_t n = (int64_t)g->dp * g->tp;
                    for (int32_t j = 0; j + 1 < g->s; j++) {
                        int32_t lvl = hpgo_cost_level_between(pc, (j + 1) * n - 1, (j + 1) * n);
                        const hpgo_level_t *lv = &pc->levels[lvl];
                        double t = (double)m * ml->send1 * (double)M / (double)g->dp /
                                   (lv->bandwidth * lv->efficiency);
                        if (t > sh.lb)
                            sh.lb = t;
                    }
                }
                for (int32_t k = 0; k + 1 < b->nseg; k++) {
                    const memline_t *ml = mem_line(S, b->seg[k], b->mi, rc, z, E->n, E->sp);
                    double t = (double)m * join_seconds(S, &S->cfgs[b->seg[k]],
                                                        &S->cfgs[b->seg[k + 1]],
                                                        ml->ok == 1 ? ml->send1 : 0, M);
                    if (t > sh.lb)
                        sh.lb = t;
                }
                sh.key = sh.lb * weight(S, &sh);
                sh.canon = bi * N_VARIANTS + (si * 4 + rc) * 4 + z;
                if (sh.key < *least)
                    *least = sh.key;
                if (!make) {
                    S->n_variants++;
                    continue;
                }
                sh.mem_over = (int8_t)shape_mem_over(S, &sh, E->n, E->sp);
                if (grow((void **)&S->shapes, &S->cap_shapes, S->n_shapes + 1,
                         sizeof(shape_t)) < 0)
                    return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                S->shapes[S->n_shapes++] = sh;
            }
        }
    }
    return HPGO_OK;
}

static int add_shapes(search_t *S, enum_ctx_t *E, hpgo_err_t *err)
{
    const hpgo_hetplan_opts_t *o = S->o;
    int32_t P = 0, maxdp = 1;
    for (int32_t k = 0; k < E->n_order; k++) {
        const cfg_t *g = &S->cfgs[E->pick[k]];
        P += g->s;
        if (g->dp > maxdp)
            maxdp = g->dp;
    }
    if (P > S->L || P > HPGO_PLAN_MAX_PP)
        return HPGO_OK;
    for (int32_t mi = 0; mi < S->n_Ms; mi++) {
        int64_t M = S->Ms[mi], m = S->B / M;
        if (S->xf && M < maxdp)
            continue;
        if (m * P > HPGO_PLAN_MAX_OPS || m > HPGO_PLAN_MAX_MICROBATCHES)
            continue;
        int big = 0;
        for (int32_t k = 0; k < E->n_order; k++) {
            const cfg_t *g = &S->cfgs[E->pick[k]];
            if ((M + g->dp - 1) / g->dp > o->max_micro_batch)
                big = 1;
        }
        if (big)
            continue;
        if (S->n_bases >= HPGO_HET_MAX_SHAPES)
            return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                                "the heterogeneous search has more than %d shapes: fix some "
                                "choices (tp=, micro_batch=, ...)",
                                HPGO_HET_MAX_SHAPES);
        base_t b;
        memset(&b, 0, sizeof b);
        b.nseg = E->n_order;
        memcpy(b.seg, E->pick, sizeof(int32_t) * (size_t)E->n_order);
        b.mi = mi;
        double least;
        int rc = variants(S, &b, S->n_bases, 0, &least, E, err);
        if (rc != HPGO_OK)
            return rc;
        if (!isfinite(least))
            continue;
        b.key = least;
        if (grow((void **)&S->bases, &S->cap_bases, S->n_bases + 1, sizeof(base_t)) < 0)
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        S->bases[S->n_bases++] = b;
    }
    return HPGO_OK;
}

/* Segments for the parts of E->order, one after another. */
static int pick_segs(search_t *S, enum_ctx_t *E, int32_t k, hpgo_err_t *err)
{
    if (k == E->n_order)
        return add_shapes(S, E, err);
    for (int32_t ci = 0; ci < S->n_cfgs; ci++) {
        if (S->cfgs[ci].part != E->order[k])
            continue;
        E->pick[k] = ci;
        int rc = pick_segs(S, E, k + 1, err);
        if (rc != HPGO_OK)
            return rc;
    }
    return HPGO_OK;
}

/* Every ordered subset of the parts (orders of length len over unused parts). */
static int orders(search_t *S, enum_ctx_t *E, int32_t len, hpgo_err_t *err)
{
    if (E->n_order == len)
        return pick_segs(S, E, 0, err);
    for (int32_t k = 0; k < S->n_parts; k++) {
        int used = 0;
        for (int32_t i = 0; i < E->n_order; i++)
            used |= E->order[i] == k;
        if (used)
            continue;
        E->order[E->n_order++] = k;
        int rc = orders(S, E, len, err);
        E->n_order--;
        if (rc != HPGO_OK)
            return rc;
    }
    return HPGO_OK;
}

/* ---- phase 2: plans of a shape ------------------------------------------- */

/* Replica samples of every stage of shape sh: groups[k], shares and the
 * per-stage view; fills the blob of a candidate. */
typedef struct built {
    hpgo_stage_group_t *groups;
    double *shares;
    int32_t *split;
    double *samples; /* per replica, all stages */
    double *speeds;
} built_t;

static int64_t total_dp(const search_t *S, const shape_t *sh)
{
    int64_t t = 0;
    for (int32_t k = 0; k < sh->nseg; k++)
        t += (int64_t)S->cfgs[sh->seg[k]].s * S->cfgs[sh->seg[k]].dp;
    return t;
}

/* Balanced split by bisection over T with a greedy cover (exact for
 * stages in a fixed order, each stage's cost growing with its layers). */
static int balanced(const search_t *S, int32_t P, const double *pre, const double *e0,
                    const double *e1, const int64_t *cap, int32_t *split)
{
    int64_t L = S->L;
    double hi = 0;
    for (int32_t j = 0; j < P; j++) {
        double t = pre[(size_t)j * (L + 1) + L] + e0[j] + e1[j];
        if (t > hi)
            hi = t;
    }
    double lo = 0;
    int found = 0;
    for (int it = 0; it < 100; it++) {
        double T = it == 0 ? hi : 0.5 * (lo + hi);
        int64_t pos = 0;
        int ok = 1;
        for (int32_t j = 0; j < P && ok; j++) {
            const double *q = pre + (size_t)j * (L + 1);
            double extra = (j == 0 ? e0[j] : 0) + (j == P - 1 ? e1[j] : 0);
            int64_t most = L - (P - 1 - j); /* leave a layer to each later stage */
            if (pos + cap[j] < most)
                most = pos + cap[j];
            if (j == P - 1) {
                if (q[L] - q[pos] + extra > T || L - pos > cap[j])
                    ok = 0;
                pos = L;
                break;
            }
            int64_t end = pos + 1;
            if (q[end] - q[pos] + extra > T || end > most) {
                ok = 0;
                break;
            }
            while (end + 1 <= most && q[end + 1] - q[pos] + extra <= T)
                end++;
            split[j + 1] = (int32_t)end;
            pos = end;
        }
        if (ok) {
            hi = T, found = 1;
        } else {
            lo = T;
        }
        if (found && hi - lo <= 1e-12 * hi)
            break;
    }
    if (!found)
        return -1;
    /* rebuild at hi */
    int64_t pos = 0;
    split[0] = 0;
    for (int32_t j = 0; j + 1 < P; j++) {
        const double *q = pre + (size_t)j * (L + 1);
        double extra = j == 0 ? e0[j] : 0;
        int64_t most = L - (P - 1 - j), end = pos + 1;
        if (pos + cap[j] < most)
            most = pos + cap[j];
        while (end + 1 <= most && q[end + 1] - q[pos] + extra <= hi)
            end++;
        split[j + 1] = (int32_t)end;
        pos = end;
    }
    split[P] = (int32_t)L;
    return 0;
}

static int64_t inflight_lb(int32_t sched, int32_t P, int32_t d, int64_t m)
{
    if (sched == HPGO_PS_GPIPE)
        return m;
    return P - d < m ? P - d : m;
}

/* Build candidate cd (shape sh, balanced or even split): its plan, stage
 * costs as the engine computes them, and its time and memory bounds. */
static void build(const search_t *S, cand_t *cd)
{
    const shape_t *sh = &S->shapes[cd->shape];
    hpgo_parplan_t p = shape_plan(S, sh);
    int32_t P = p.pp;
    int64_t L = S->L, m = S->B / sh->M, ndp = total_dp(S, sh);
    size_t bytes = sizeof(hpgo_stage_group_t) * (size_t)P + sizeof(double) * (size_t)ndp * 3 +
                   sizeof(int32_t) * (size_t)(P + 1) + 8;
    char *blob = malloc(bytes);
    double *pre = malloc(sizeof(double) * ((size_t)P * (size_t)(L + 1) + 2 * (size_t)P));
    if (!blob || !pre) {
        free(blob), free(pre);
        cd->state = HS_NOMEM;
        return;
    }
    hpgo_stage_group_t *groups = (hpgo_stage_group_t *)blob;
    double *shares = (double *)(groups + P);
    double *n = shares + ndp, *sp = n + ndp;
    int32_t *split = (int32_t *)(sp + ndp);
    double *e0 = pre + (size_t)P * (size_t)(L + 1), *e1 = e0 + P;
    cd->blob = blob;
    /* groups and replica samples */
    int32_t j = 0;
    int64_t off = 0;
    int bad = 0;
    for (int32_t k = 0; k < sh->nseg; k++) {
        const cfg_t *g = &S->cfgs[sh->seg[k]];
        for (int32_t s = 0; s < g->s; s++, j++) {
            int even = stage_samples(S, g, s, sh->M, n + off, sp + off);
            if (even < 0)
                bad = 1;
            hpgo_stage_group_t *gr = &groups[j];
            memset(gr, 0, sizeof *gr); /* fields added later (gpus, ...) read as unset */
            gr->part = g->part, gr->tp = g->tp, gr->dp = g->dp, gr->first_gpu = -1;
            gr->shares = NULL;
            if (even == 0) {
                for (int32_t i = 0; i < g->dp; i++)
                    shares[off + i] = n[off + i] / (double)sh->M;
                gr->shares = shares + off;
            }
            /* the stage's per-layer seconds at its slowest replica */
            double *q = pre + (size_t)j * (size_t)(L + 1);
            for (int64_t l = 0; l <= L; l++)
                q[l] = 0;
            e0[j] = e1[j] = 0;
            for (int32_t i = 0; i < g->dp && !bad; i++) {
                if (i > 0 && n[off + i] == n[off + i - 1] && sp[off + i] == sp[off + i - 1])
                    continue;
                const ltimes_t *x =
                    lt_find(S, g->part, g->tp, n[off + i], sh->rc, sh->zero, P == 1);
                if (!x || !x->ok) {
                    bad = 1;
                    break;
                }
                double acc = 0;
                for (int64_t l = 0; l < L; l++) {
                    acc += x->t[l] / sp[off + i];
                    if (acc > q[l + 1])
                        q[l + 1] = acc;
                }
                if (x->e0 / sp[off + i] > e0[j])
                    e0[j] = x->e0 / sp[off + i];
                if (x->e1 / sp[off + i] > e1[j])
                    e1[j] = x->e1 / sp[off + i];
            }
            off += g->dp;
        }
    }
    /* q[l] above: the largest over the stage's replicas of the seconds of
     * its layers < l (nondecreasing in l, what balancing needs) */
    int64_t *cap = malloc(sizeof(int64_t) * (size_t)P);
    if (!cap) {
        free(pre);
        cd->state = HS_NOMEM;
        return;
    }
    if (!bad) {
        /* the most layers each stage can hold (the shape memory bound's
         * line): the balanced split only among splits that may fit, and a
         * split past them cannot fit */
        {
            int32_t mi = 0;
            while (S->Ms[mi] != sh->M)
                mi++;
            j = 0;
            for (int32_t k = 0; k < sh->nseg; k++) {
                const cfg_t *g = &S->cfgs[sh->seg[k]];
                size_t at = (((size_t)sh->seg[k] * (size_t)S->n_Ms + (size_t)mi) * 3 +
                             (size_t)sh->rc) * 4 + (size_t)sh->zero;
                const memline_t *ml = &S->mlines[at];
                hpgo_parplan_t vp = view_plan(&p, g->tp, g->dp, m);
                for (int32_t s2 = 0; s2 < g->s; s2++, j++) {
                    int64_t held = p.schedule == HPGO_PS_GPIPE ? m : (P - j < m ? P - j : m);
                    cap[j] = ml->ok == 1 ? max_layers(S, ml, g, &vp, held) : L;
                    if (cap[j] < 1)
                        cap[j] = 1;
                }
            }
        }
        if (cd->balanced) {
            if (balanced(S, P, pre, e0, e1, cap, split) < 0)
                bad = 1;
        } else {
            hpgo_work_even_split(L, P, split);
        }
    }
    if (bad) {
        cd->state = HS_REJECTED;
        free(pre), free(cap);
        return;
    }
    p.n_groups = P, p.groups = groups;
    p.n_split = P + 1, p.split = split;
    cd->plan = p;
    /* the cheap bounds: each stage's m passes at its replicas' layer
     * seconds (the shape bound's proof, on this split), and the memory
     * line's layer caps */
    double cheap = sh->lb, chain = 0; /* chain: sum of the stages' W before j */
    int over = 0, fused = sh->sched != HPGO_PS_ZBH1;
    off = 0;
    for (j = 0; j < P; j++) {
        const hpgo_stage_group_t *g = &groups[j];
        if (split[j + 1] - split[j] > cap[j])
            over = 1;
        double wj = 0;
        for (int32_t i = 0; i < g->dp; i++) {
            if (i > 0 && n[off + i] == n[off + i - 1] && sp[off + i] == sp[off + i - 1])
                continue;
            const ltimes_t *x = lt_find(S, g->part, g->tp, n[off + i], sh->rc, sh->zero, P == 1);
            double t = (j == 0 ? x->e0 : 0) + (j == P - 1 ? x->e1 : 0);
            for (int32_t l = split[j]; l < split[j + 1]; l++)
                t += x->t[l];
            if (t / sp[off + i] > wj)
                wj = t / sp[off + i];
        }
        /* fused backwards: the stages before j, then j's m passes */
        double t = (fused ? chain : 0) + (double)m * wj;
        if (t > cheap)
            cheap = t;
        chain += wj;
        off += g->dp;
    }
    free(pre), free(cap);
    cd->lb = cheap;
    cd->key = cheap * weight(S, sh);
    cd->mem_over = (int8_t)over;
    cd->priced = 0;
    cd->state = over && !S->o->exhaustive ? HS_MEMORY : HS_LIVE;
}

/* The exact stage costs of built candidate cd, as engine.c's uneven_views
 * prices them, and its time and memory bounds from them. */
static void price_span(const search_t *S, cand_t *cd);

static void price(const search_t *S, cand_t *cd)
{
    const shape_t *sh = &S->shapes[cd->shape];
    if (sh->span) {
        price_span(S, cd);
        return;
    }
    hpgo_parplan_t p = cd->plan;
    const hpgo_stage_group_t *groups = p.groups;
    const int32_t *split = p.split;
    int32_t P = p.pp, j;
    int64_t m = S->B / sh->M, ndp = total_dp(S, sh);
    const double *sp = (const double *)(groups + P) + 2 * ndp;
    hpgo_stage_cost_t *sc = malloc(sizeof *sc * (size_t)P);
    double *tmp = malloc(sizeof(double) * (size_t)(5 * P + 4));
    int64_t *locals = malloc(sizeof(int64_t) * (size_t)P);
    if (!sc || !tmp || !locals) {
        free(sc), free(tmp), free(locals);
        cd->state = HS_NOMEM;
        return;
    }
    double *sent = tmp + 4 * P + 3; /* per stage: its replicas' send bytes, summed */
    double wbytes, gbytes, obytes, sync_lb = 0;
    hpgo_work_state_bytes(S->w->precision, p.fp8_params, p.optimizer_impl, &wbytes, &gbytes,
                          &obytes);
    int64_t next_local[HPGO_CLUSTER_MAX_PARTS] = {0};
    int64_t off = 0;
    double *before = tmp, *back = tmp + P + 1, *opt = tmp + 2 * P + 2;
    int fused = p.schedule != HPGO_PS_ZBH1;
    before[0] = back[0] = 0;
    double mem_over = 0;
    for (j = 0; j < P; j++) {
        const hpgo_stage_group_t *g = &groups[j];
        const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, g->part);
        hpgo_parplan_t vp = view_plan(&p, g->tp, g->dp, m);
        hpgo_stage_cost_t one, big;
        memset(&big, 0, sizeof big);
        double last = -1, most = -1, f = 0, bw = 0, ww = 0, slow = 1;
        int have = 0;
        sent[j] = 0;
        for (int32_t i = 0; i < g->dp; i++) {
            double samples = g->shares ? (double)sh->M * g->shares[i] : (double)sh->M / g->dp;
            if (samples != last || !have) {
                if (hpgo_work_stage_cost_range(S->w, pc, &vp, split[j], split[j + 1], samples,
                                               &one, NULL) != HPGO_OK) {
                    cd->state = HS_REJECTED;
                    free(sc), free(tmp), free(locals);
                    return;
                }
                last = samples, have = 1;
            }
            double s = sp[off + i];
            sent[j] += one.send_bytes;
            if (s < slow)
                slow = s;
            if (one.f / s > f)
                f = one.f / s;
            if (one.b / s > bw)
                bw = one.b / s;
            if (one.w / s > ww)
                ww = one.w / s;
            if (samples > most)
                most = samples, big = one;
        }
        big.f = f, big.b = bw, big.w = ww;
        sc[j] = big;
        before[j + 1] = before[j] + f;
        back[j + 1] = back[j] + bw + (fused ? ww : 0);
        hpgo_device_load_t load;
        hpgo_step_device_load(&p, sc, j, &load);
        double shard = hpgo_step_shard_params(&vp, load.params, load.expert_params);
        opt[j] = hpgo_step_optimizer_seconds(pc, &vp, shard);
        if (!p.offload_optimizer)
            opt[j] /= slow;
        double act = (double)inflight_lb(p.schedule, P, j, m) * load.min_act;
        hpgo_mem_t mem;
        hpgo_memory_breakdown2(pc, &vp, S->w->precision, load.params, load.expert_params,
                               load.max_layer_params, act + load.transient,
                               load.max_act + load.transient, S->overhead + load.state_bytes,
                               &mem);
        if (mem.total > mem.capacity * (1 + 1e-9))
            mem_over = 1;
        /* the gradient sync (ZeRO 0 and 1: once, after the last micro-batch):
         * its buckets wait for the last backward pass (the device ran m
         * forwards and m - 1 backwards before it), run one after another,
         * and the optimizer step follows them */
        int64_t local = next_local[g->part];
        locals[j] = local;
        next_local[g->part] += (int64_t)g->dp * g->tp;
        if (p.zero <= 1 && g->dp > 1) {
            int op = p.zero >= 1 ? HPGO_COLL_REDUCE_SCATTER : HPGO_COLL_ALLREDUCE;
            double t = before[j] + (double)m * f + (double)(m - 1) * (bw + ww) +
                       sync_per_byte(pc, op, g->dp, g->tp, local) *
                           (load.params - load.expert_params) * gbytes +
                       opt[j];
            if (t > sync_lb)
                sync_lb = t;
        }
        off += g->dp;
    }
    double lb = sync_lb;
    /* tied embeddings: the first and the last stage exchange the
     * embedding's gradient after their own compute (engine.c tied_sync),
     * before their optimizer steps */
    if (S->xf && S->w->x.tied && P > 1) {
        const hpgo_cluster_t *c = S->c;
        for (int e = 0; e < 2; e++) {
            int32_t d = e == 0 ? 0 : P - 1;
            double bytes = sc[d].emb_params * gbytes, t_emb;
            if (groups[0].part != groups[P - 1].part) {
                t_emb = c->join.latency + bytes / (c->join.bandwidth * c->join.efficiency);
            } else {
                const hpgo_cluster_t *pc = hpgo_cluster_part(c, groups[0].part);
                t_emb = hpgo_cost_p2p(pc, hpgo_cost_level_between(pc, locals[0], locals[P - 1]),
                                      bytes);
            }
            double t = before[d] + (double)m * (sc[d].f + sc[d].b + sc[d].w) + t_emb + opt[d];
            if (t > lb)
                lb = t;
        }
    }
    /* the join's directed links carry each boundary's m transfers one
     * after another (join_seconds) */
    for (int32_t d = 0; d + 1 < P; d++) {
        const hpgo_stage_group_t *a = &groups[d], *b = &groups[d + 1];
        if (a->part != b->part || a->tp != b->tp)
            continue;
        /* inside a part, blocks one after the other: the closest pair of
         * GPUs shares the lowest level any transfer of the boundary uses */
        const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, a->part);
        int64_t edge = locals[d + 1];
        const hpgo_level_t *lv = &pc->levels[hpgo_cost_level_between(pc, edge - 1, edge)];
        int32_t fewer = a->dp < b->dp ? a->dp : b->dp;
        double t = (double)m * sent[d] / (double)fewer / (lv->bandwidth * lv->efficiency);
        if (t > lb)
            lb = t;
    }
    if (S->c->n_parts >= 2)
        for (int32_t d = 0; d + 1 < P; d++) {
            const hpgo_stage_group_t *a = &groups[d], *b = &groups[d + 1];
            if (a->part == b->part)
                continue;
            int32_t tmin = a->tp < b->tp ? a->tp : b->tp, fewer = a->dp < b->dp ? a->dp : b->dp;
            double t = (double)m * sent[d] * (double)a->tp / (double)tmin / (double)fewer /
                       (S->c->join.bandwidth * S->c->join.efficiency);
            if (t > lb)
                lb = t;
        }
    for (int32_t d = 0; d < P; d++) {
        double busy = (double)m * (sc[d].f + sc[d].b + sc[d].w);
        double t = before[d] + busy + opt[d];
        double b_end = before[d] + busy - (fused ? 0 : (double)m * sc[d].w);
        for (int32_t i = 0; i < d; i++)
            if (b_end + back[d] - back[i] + opt[i] > t)
                t = b_end + back[d] - back[i] + opt[i];
        if (t > lb)
            lb = t;
    }
    if (lb > cd->lb)
        cd->lb = lb;
    cd->key = cd->lb * weight(S, sh);
    cd->mem_over |= (int8_t)mem_over;
    cd->priced = 1;
    cd->state = cd->mem_over && !S->o->exhaustive ? HS_MEMORY : HS_LIVE;
    free(sc), free(tmp), free(locals);
}

/* A span pipeline's bound from the engine's own stage costs (engine.c
 * mixed_view: each replica priced on its part at its samples, the stage's
 * passes its slowest replica's over its speed): stage j's device runs its
 * m forwards and m backwards one after another, and its first forward
 * waits for one forward of every stage before it, so T >= sum_{i<j} f_i +
 * m (f_j + b_j + w_j) (autoplan's before + busy).  No memory bound. */
static void price_span(const search_t *S, cand_t *cd)
{
    const shape_t *sh = &S->shapes[cd->shape];
    const hpgo_parplan_t *p = &cd->plan;
    int64_t m = S->B / sh->M;
    double before = 0, lb = 0;
    for (int32_t j = 0; j < p->pp; j++) {
        const hpgo_stage_group_t *g = &p->groups[j];
        hpgo_parplan_t vp = view_plan(p, g->tp, g->dp, m);
        double lastn[HPGO_CLUSTER_MAX_PARTS];
        hpgo_stage_cost_t one[HPGO_CLUSTER_MAX_PARTS];
        int have[HPGO_CLUSTER_MAX_PARTS] = {0};
        double f = 0, bw = 0, ww = 0;
        int64_t next[HPGO_CLUSTER_MAX_PARTS] = {0};
        for (int32_t i = 0; i < g->dp; i++) {
            int32_t q = g->parts[i];
            const hpgo_cluster_t *pc = hpgo_cluster_part(S->c, q);
            double samples = (double)sh->M * g->shares[i];
            if (!have[q] || lastn[q] != samples) {
                if (hpgo_work_stage_cost_range(S->w, pc, &vp, p->split[j], p->split[j + 1],
                                               samples, &one[q], NULL) != HPGO_OK) {
                    cd->state = HS_REJECTED;
                    return;
                }
                have[q] = 1, lastn[q] = samples;
            }
            /* replica i's first GPU: stage j's share of part q, in order */
            int64_t per = hpgo_cluster_gpus(pc) / p->pp;
            int64_t g0 = part_start(S->c, q) + (int64_t)j * per + next[q];
            next[q] += g->tp;
            double sp = min_speed(S->c, g0, g0 + g->tp);
            f = one[q].f / sp > f ? one[q].f / sp : f;
            bw = one[q].b / sp > bw ? one[q].b / sp : bw;
            ww = one[q].w / sp > ww ? one[q].w / sp : ww;
        }
        double t = before + (double)m * (f + bw + ww);
        lb = t > lb ? t : lb;
        before += f;
    }
    cd->lb = lb;
    cd->key = lb * weight(S, sh);
    cd->priced = 1;
    cd->state = HS_LIVE;
}

static void build_job(void *ctx, int64_t i)
{
    search_t *S = ctx;
    build(S, &S->cands[S->batch_first + i]);
}

/* A batch's job: price an unpriced candidate, simulate a priced one. */
static void sim_or_price(search_t *S, cand_t *cd);

static void step_job(void *ctx, int64_t i)
{
    search_t *S = ctx;
    cand_t *cd = &S->cands[S->batch[i]];
    if (!cd->priced)
        price(S, cd);
    else
        sim_or_price(S, cd);
}

static void sim_or_price(search_t *S, cand_t *cd)
{
    hpgo_step_opts_t so = {0, S->overhead, S->o->cancel};
    hpgo_step_result_t *r = NULL;
    int rc = hpgo_step_simulate(S->w, S->c, &cd->plan, &so, &r, NULL);
    if (rc == HPGO_E_NOMEM || rc == HPGO_E_CANCELLED) {
        cd->state = HS_NOMEM;
        return;
    }
    if (rc != HPGO_OK) {
        cd->state = HS_REJECTED;
        return;
    }
    cd->time = r->iteration_time;
    cd->score = r->iteration_time * weight(S, &S->shapes[cd->shape]);
    cd->state = r->fits ? HS_FITS : HS_NOFIT;
    hpgo_step_result_free(r);
}

/* ---- driver ----------------------------------------------------------------- */

typedef struct keyed {
    double key;
    int64_t idx;
} keyed_t;

enum { K_BASE = 0, K_SHAPE = 1, K_CAND = 2 };
#define ITEM(kind, i) (((int64_t)(kind) << 56) | (int64_t)(i))
#define ITEM_MASK (((int64_t)1 << 56) - 1)

static int cmp_keyed(const void *a, const void *b)
{
    const keyed_t *x = a, *y = b;
    if (x->key < y->key)
        return -1;
    if (x->key > y->key)
        return 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* A binary min-heap of keyed candidates. */
typedef struct heap {
    keyed_t *a;
    int64_t n, cap;
} heap_t;

static int heap_push(heap_t *h, keyed_t k)
{
    if (grow((void **)&h->a, &h->cap, h->n + 1, sizeof(keyed_t)) < 0)
        return -1;
    int64_t i = h->n++;
    while (i > 0) {
        int64_t up = (i - 1) / 2;
        if (cmp_keyed(&h->a[up], &k) <= 0)
            break;
        h->a[i] = h->a[up];
        i = up;
    }
    h->a[i] = k;
    return 0;
}

static keyed_t heap_pop(heap_t *h)
{
    keyed_t top = h->a[0], last = h->a[--h->n];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, s = i;
        const keyed_t *best = &last;
        if (l < h->n && cmp_keyed(&h->a[l], best) < 0)
            s = l, best = &h->a[l];
        if (r < h->n && cmp_keyed(&h->a[r], best) < 0)
            s = r;
        if (s == i)
            break;
        h->a[i] = h->a[s];
        i = s;
    }
    if (h->n > 0)
        h->a[i] = last;
    return top;
}

/* ---- stages whose replicas span GPU types ------------------------------------ */

#define SPAN_CANON ((int64_t)1 << 50) /* span shapes rank after every pipeline shape on ties */
#define SPAN_MAX_PP 8                 /* stages of a pipeline whose stages span types */

/* Whole samples (a transformer) or fractions (a layer chain) of a
 * micro-batch of M for replicas of rates rate[0..R): proportional, the
 * greedy of stage_samples for whole ones.  -1 when a replica would get
 * no sample. */
static int span_samples(const search_t *S, int64_t M, int64_t R, const double *rate, double *nn)
{
    double tot = 0;
    for (int64_t i = 0; i < R; i++)
        tot += rate[i];
    if (!S->xf) {
        for (int64_t i = 0; i < R; i++)
            nn[i] = (double)M * rate[i] / tot;
        return 0;
    }
    int64_t sum = 0;
    for (int64_t i = 0; i < R; i++) {
        int64_t k = (int64_t)floor((double)M * rate[i] / tot);
        nn[i] = (double)(k < 1 ? 1 : k);
        sum += (int64_t)nn[i];
    }
    while (sum > M) {
        int64_t best = -1;
        for (int64_t i = 0; i < R; i++)
            if (nn[i] > 1 && (best < 0 || nn[i] / rate[i] > nn[best] / rate[best]))
                best = i;
        if (best < 0)
            return -1;
        nn[best] -= 1, sum--;
    }
    while (sum < M) {
        int64_t best = 0;
        for (int64_t i = 1; i < R; i++)
            if ((nn[i] + 1) / rate[i] < (nn[best] + 1) / rate[best])
                best = i;
        nn[best] += 1, sum++;
    }
    return 0;
}

/* The span shapes: P stages (1 <= P <= SPAN_MAX_PP) each of R replicas on
 * every part (part q's GPUs split evenly over the stages, in stage order,
 * replicas of tp consecutive GPUs), for each tp dividing every part's node
 * and GPUs, micro-batch M, schedule (P > 1), recomputation and ZeRO stage;
 * the even layer split; each replica's share proportional to its speed
 * (its type's samples per second at the mean share, priced on its part at
 * the shape's tp and recomputation, times its slowest GPU's factor; whole
 * samples for a transformer by the greedy of stage_samples).  P = 1 is
 * data parallelism over every GPU.  The data-parallel plans are few (tp x
 * M x 12) and not bounded: each is simulated, first, so that its time
 * tightens the bound the other plans must beat.  A pipeline's plan is
 * priced first (price_span) and simulated only when its bound allows. */
static int add_span(search_t *S, hpgo_hetplan_result_t *r, heap_t *H, hpgo_err_t *err)
{
    const hpgo_hetplan_opts_t *o = S->o;
    const hpgo_cluster_t *c = S->c;
    if (S->n_parts < 2)
        return HPGO_OK;
    int64_t gpn = 1 << 30, total = hpgo_cluster_gpus(c);
    for (int32_t q = 0; q < S->n_parts; q++) {
        int64_t u = hpgo_cluster_unit(hpgo_cluster_part(c, q), 0);
        gpn = u < gpn ? u : gpn;
    }
    double *rate = malloc(sizeof(double) * 2 * (size_t)total);
    int32_t *rpart = malloc(sizeof(int32_t) * (size_t)total);
    if (!rate || !rpart) {
        free(rate), free(rpart);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    }
    double *nn = rate + total;
    int rc = HPGO_OK;
    static const int8_t scheds[3] = {HPGO_PS_1F1B, HPGO_PS_ZBH1, HPGO_PS_GPIPE};
    for (int32_t tp = 1; tp <= gpn && rc == HPGO_OK; tp++) {
        int ok = free_or(o->tp, tp) && tp_ok(S, tp);
        for (int32_t q = 0; ok && q < S->n_parts; q++) {
            const hpgo_cluster_t *pc = hpgo_cluster_part(c, q);
            ok = hpgo_cluster_unit(pc, 0) % tp == 0 && hpgo_cluster_gpus(pc) % tp == 0;
        }
        if (!ok)
            continue;
        for (int32_t P = 1; P <= SPAN_MAX_PP && P <= S->L && rc == HPGO_OK; P++) {
            int fits_p = 1;
            for (int32_t q = 0; q < S->n_parts; q++)
                fits_p &= (hpgo_cluster_gpus(hpgo_cluster_part(c, q)) / tp) % P == 0;
            int64_t R = total / tp / P;
            if (!fits_p || R > (1 << 24) || R < 2)
                continue;
            for (int32_t mi = 0; mi < S->n_Ms && rc == HPGO_OK; mi++) {
                int64_t M = S->Ms[mi], m = S->B / M;
                if (hpgo_cancelled(o->cancel)) {
                    rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the search was cancelled");
                    break;
                }
                if (S->xf && M < R)
                    continue;
                for (int8_t rcm = HPGO_RC_NONE; rcm <= HPGO_RC_FULL && rc == HPGO_OK; rcm++) {
                    if (!free_or(o->recompute, rcm) || (rcm == HPGO_RC_SELECTIVE && !S->xf))
                        continue;
                    hpgo_parplan_t p = *o->base;
                    p.tp = p.dp = p.cp = p.ep = p.vstages = 1;
                    p.etp = 0, p.pp = P, p.micro_batch = M, p.global_batch = S->B;
                    p.recompute = rcm, p.sequence_parallel = S->xf && tp > 1, p.shard_size = 0;
                    p.n_split = 0, p.split = NULL, p.n_groups = 0, p.groups = NULL;
                    p.zero = 0, p.schedule = HPGO_PS_1F1B;
                    /* each replica's rate (all stages, stage after stage) */
                    double ref = S->xf ? (double)(M / R > 0 ? M / R : 1) : (double)M / (double)R;
                    int good = 1;
                    for (int32_t q = 0; q < S->n_parts && good; q++) {
                        const hpgo_cluster_t *pc = hpgo_cluster_part(c, q);
                        hpgo_parplan_t vp = view_plan(&p, tp, 1, m);
                        vp.pp = 1;
                        hpgo_stage_cost_t one;
                        if (hpgo_work_stage_cost_range(S->w, pc, &vp, 0, (int32_t)S->L, ref, &one,
                                                       NULL) != HPGO_OK ||
                            !(one.f + one.b + one.w > 0)) {
                            good = 0;
                            break;
                        }
                        int64_t first = part_start(c, q), per = hpgo_cluster_gpus(pc) / P;
                        for (int32_t j = 0; j < P; j++) {
                            /* stage j's replicas of part q: after the earlier parts' */
                            int64_t at = (int64_t)j * R;
                            for (int32_t q2 = 0; q2 < q; q2++)
                                at += hpgo_cluster_gpus(hpgo_cluster_part(c, q2)) / P / tp;
                            for (int64_t x = 0; x < per; x += tp, at++) {
                                int64_t g0 = first + (int64_t)j * per + x;
                                rate[at] = ref / (one.f + one.b + one.w) *
                                           min_speed(c, g0, g0 + tp);
                                rpart[at] = q;
                            }
                        }
                    }
                    double most = 0;
                    for (int32_t j = 0; j < P && good; j++) {
                        if (span_samples(S, M, R, rate + (int64_t)j * R, nn + (int64_t)j * R) < 0)
                            good = 0;
                        for (int64_t i = 0; i < R; i++)
                            most = nn[(int64_t)j * R + i] > most ? nn[(int64_t)j * R + i] : most;
                    }
                    if (!good || most > (double)o->max_micro_batch)
                        continue;
                    for (int si = 0; si < 3 && rc == HPGO_OK; si++) {
                        int8_t sch = scheds[si];
                        if (P == 1 ? si > 0 || (o->schedule >= 0 && o->schedule != sch &&
                                                o->schedule != HPGO_PS_GPIPE)
                                   : (!free_or(o->schedule, sch) ||
                                      (sch == HPGO_PS_GPIPE && o->schedule != sch)))
                            continue;
                        for (int8_t z = 0; z <= 3; z++) {
                            if (o->zero >= 0 && z != o->zero)
                                continue;
                            if (grow((void **)&S->shapes, &S->cap_shapes, S->n_shapes + 1,
                                     sizeof(shape_t)) < 0 ||
                                grow((void **)&S->cands, &S->cap_cands, S->n_cands + 1,
                                     sizeof(cand_t)) < 0) {
                                rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                                break;
                            }
                            shape_t *sh = &S->shapes[S->n_shapes];
                            memset(sh, 0, sizeof *sh);
                            sh->span = 1, sh->M = M, sh->sched = sch, sh->rc = rcm;
                            sh->zero = z, sh->canon = SPAN_CANON + S->n_shapes;
                            size_t nr = (size_t)R * (size_t)P;
                            size_t bytes = sizeof(hpgo_stage_group_t) * (size_t)P +
                                           sizeof(double) * nr +
                                           sizeof(int32_t) * (nr + (size_t)P + 1);
                            char *blob = malloc(bytes);
                            if (!blob) {
                                rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                                break;
                            }
                            hpgo_stage_group_t *g = (hpgo_stage_group_t *)blob;
                            double *shares = (double *)(g + P);
                            int32_t *split = (int32_t *)(shares + nr), *parts = split + P + 1;
                            for (size_t i = 0; i < nr; i++)
                                shares[i] = nn[i] / (double)M, parts[i] = rpart[i];
                            for (int32_t j = 0; j < P; j++) {
                                memset(&g[j], 0, sizeof g[j]);
                                g[j].part = HPGO_PART_MIXED, g[j].tp = tp, g[j].dp = (int32_t)R;
                                g[j].first_gpu = -1, g[j].shares = shares + (int64_t)j * R;
                                g[j].parts = parts + (int64_t)j * R;
                            }
                            hpgo_work_even_split(S->L, P, split);
                            cand_t *cd = &S->cands[S->n_cands];
                            memset(cd, 0, sizeof *cd);
                            cd->shape = S->n_shapes;
                            cd->plan = p;
                            cd->plan.zero = z, cd->plan.schedule = sch;
                            cd->plan.n_groups = P, cd->plan.groups = g;
                            cd->plan.n_split = P + 1, cd->plan.split = split;
                            cd->blob = blob;
                            cd->priced = (int8_t)(P == 1), cd->state = HS_LIVE;
                            cd->lb = 0, cd->key = 0;
                            if (heap_push(H, (keyed_t){0, ITEM(K_CAND, S->n_cands)}) < 0) {
                                free(blob);
                                rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                                break;
                            }
                            S->n_shapes++, S->n_cands++;
                            r->shapes++, r->shapes_expanded++, r->candidates++;
                        }
                    }
                }
            }
        }
    }
    free(rate), free(rpart);
    return rc;
}

void hpgo_hetplan_result_free(hpgo_hetplan_result_t *r)
{
    if (!r)
        return;
    free(r->entries);
    free(r->storage);
    free(r);
}

static int check_opts(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_hetplan_opts_t *o,
                      hpgo_err_t *err)
{
    int rc = hpgo_work_check(w, err);
    if (rc == HPGO_OK)
        rc = hpgo_cluster_check(c, err);
    if (rc != HPGO_OK)
        return rc;
    int32_t np = c->n_parts >= 2 && c->parts ? c->n_parts : 1;
    if (np > HPGO_HET_MAX_TYPES)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the heterogeneous search orders at most %d GPU types, the cluster "
                            "has %d parts",
                            HPGO_HET_MAX_TYPES, (int)np);
    if (!o->base)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hetplan: no base plan");
    if (o->global_batch < 1 || o->global_batch > ((int64_t)1 << 40))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "global_batch must be in 1..2^40");
    if (o->top < 1 || o->top > HPGO_AUTOPLAN_MAX_TOP)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "top must be in 1..%d", HPGO_AUTOPLAN_MAX_TOP);
    if (o->max_micro_batch < 1 || o->threads < 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "max_micro_batch must be >= 1, threads >= 0");
    if (o->objective != HPGO_OBJ_TIME && o->objective != HPGO_OBJ_COST)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "objective must be time or cost");
    if (o->schedule == HPGO_PS_INTERLEAVED || o->schedule == HPGO_PS_ZBV ||
        o->schedule >= HPGO_PS__COUNT || o->recompute > HPGO_RC_FULL || o->zero > 3 ||
        o->tp > 1024 || o->micro_batch == 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "a fixed choice is out of range (an uneven plan runs gpipe, 1f1b or "
                            "zb-h1)");
    for (int32_t k = 0; o->prices && k < np; k++)
        if (!(o->prices[k] > 0) || !isfinite(o->prices[k]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "the price of part %d must be a finite number > 0", (int)k);
    return HPGO_OK;
}

int hpgo_hetplan(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_hetplan_opts_t *o,
                 hpgo_hetplan_result_t **out, hpgo_err_t *err)
{
    if (!out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hetplan: NULL output");
    *out = NULL;
    if (!w || !c || !o)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hetplan: NULL argument");
    int rc = check_opts(w, c, o, err);
    if (rc != HPGO_OK)
        return rc;
    search_t S;
    memset(&S, 0, sizeof S);
    S.w = w, S.c = c, S.o = o;
    S.n_parts = c->n_parts >= 2 && c->parts ? c->n_parts : 1;
    S.L = hpgo_work_layers(w);
    S.B = o->global_batch;
    S.xf = w->kind == HPGO_WORK_TRANSFORMER;
    S.overhead = o->overhead_bytes >= 0 ? o->overhead_bytes : HPGO_MEM_DEFAULT_OVERHEAD;
    for (int a = 0; a < HPGO_CLUSTER_MAX_PARTS; a++)
        for (int b2 = 0; b2 < 2; b2++)
            for (int t = 0; t < 12; t++)
                S.emb[a][b2][t] = -1;
    S.nthreads = o->threads > 0 ? o->threads : hpgo_default_threads();
    hpgo_hetplan_result_t *r = calloc(1, sizeof *r);
    keyed_t *order = NULL, *top = NULL;
    int64_t *batch = NULL;
    heap_t H = {NULL, 0, 0};
    enum_ctx_t E;
    memset(&E, 0, sizeof E);
    if (!r) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    /* micro-batch sizes: divisors of the global batch */
    S.Ms = malloc(sizeof(int64_t) * 64);
    if (!S.Ms) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    for (int64_t d = 1; d * d <= S.B && S.n_Ms < 62; d++) {
        if (S.B % d)
            continue;
        int64_t pair[2] = {d, S.B / d};
        for (int i = 0; i < (pair[0] == pair[1] ? 1 : 2); i++)
            if ((o->micro_batch < 0 || pair[i] == o->micro_batch) && S.n_Ms < 64)
                S.Ms[S.n_Ms++] = pair[i];
    }
    /* ascending */
    for (int32_t i = 1; i < S.n_Ms; i++)
        for (int32_t k = i; k > 0 && S.Ms[k - 1] > S.Ms[k]; k--) {
            int64_t t = S.Ms[k];
            S.Ms[k] = S.Ms[k - 1], S.Ms[k - 1] = t;
        }
    if ((rc = add_cfgs(&S, err)) != HPGO_OK)
        goto fail;
    int32_t maxdp = 1;
    for (int32_t i = 0; i < S.n_cfgs; i++)
        if (S.cfgs[i].dp > maxdp)
            maxdp = S.cfgs[i].dp;
    size_t nss = (size_t)(S.n_cfgs ? S.n_cfgs : 1) * (size_t)(S.n_Ms ? S.n_Ms : 1) * 3 * 4 * 2;
    S.segsum = malloc(sizeof(double) * nss);
    S.segcmin = malloc(sizeof(double) * nss);
    S.mlines = malloc(sizeof(memline_t) * (nss / 2));
    E.n = malloc(sizeof(double) * (size_t)maxdp * 2);
    if (!S.segsum || !S.segcmin || !S.mlines || !E.n) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    E.sp = E.n + maxdp;
    for (size_t i = 0; i < nss; i++)
        S.segsum[i] = NAN;
    for (size_t i = 0; i < nss / 2; i++)
        S.mlines[i].ok = -1;
    for (int32_t len = 1; len <= S.n_parts; len++)
        if ((rc = orders(&S, &E, len, err)) != HPGO_OK)
            goto fail;
    r->shapes = S.n_variants;
    /* phase 2: one heap of bases, shapes and plans, least bound first */
    top = malloc(sizeof *top * (size_t)(o->top + 1));
    int64_t bcap = 4 * (int64_t)S.nthreads + 4;
    batch = malloc(sizeof *batch * (size_t)bcap);
    S.pricing = malloc((size_t)bcap);
    if (!top || !batch || !S.pricing || lt_index(&S) < 0) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < S.n_bases; i++)
        if (heap_push(&H, (keyed_t){S.bases[i].key, ITEM(K_BASE, i)}) < 0) {
            rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
            goto fail;
        }
    if ((rc = add_span(&S, r, &H, err)) != HPGO_OK)
        goto fail;
    int32_t ntop = 0;
    S.batch = batch;
    for (;;) {
        if (hpgo_cancelled(o->cancel)) {
            rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the search was cancelled");
            goto fail;
        }
        double kth = ntop == o->top ? top[ntop - 1].key : INFINITY;
        if (H.n == 0 || (!o->exhaustive && H.a[0].key * (1 - 1e-9) > kth))
            break;
        int kind = (int)(H.a[0].idx >> 56);
        if (kind == K_BASE) {
            int64_t bi = heap_pop(&H).idx & ITEM_MASK;
            int64_t first = S.n_shapes;
            double least;
            if ((rc = variants(&S, &S.bases[bi], bi, 1, &least, &E, err)) != HPGO_OK)
                goto fail;
            for (int64_t i = first; i < S.n_shapes; i++) {
                if (S.shapes[i].mem_over && !o->exhaustive) {
                    r->pruned_shapes_memory++;
                    continue;
                }
                if (heap_push(&H, (keyed_t){S.shapes[i].key, ITEM(K_SHAPE, i)}) < 0) {
                    rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                    goto fail;
                }
            }
            continue;
        }
        if (kind == K_SHAPE) {
            /* build the plans of the next shapes (up to a batch) */
            int64_t first = S.n_cands, ns = 0;
            /* building is cheap: larger batches keep the pool's threads busy */
            while (H.n > 0 && ns < 16 * bcap && (H.a[0].idx >> 56) == K_SHAPE &&
                   (o->exhaustive || H.a[0].key * (1 - 1e-9) <= kth)) {
                int64_t si = heap_pop(&H).idx & ITEM_MASK;
                if (grow((void **)&S.cands, &S.cap_cands, S.n_cands + 2, sizeof(cand_t)) < 0) {
                    rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                    goto fail;
                }
                for (int v = 0; v < 2; v++) {
                    cand_t *cd = &S.cands[S.n_cands++];
                    memset(cd, 0, sizeof *cd);
                    cd->shape = si;
                    cd->balanced = (int8_t)(v == 0);
                }
                ns++;
            }
            r->shapes_expanded += ns;
            S.batch_first = first;
            if ((rc = hpgo_pool_map(S.nthreads, S.n_cands - first, build_job, &S, err)) !=
                HPGO_OK)
                goto fail;
            for (int64_t i = first; i < S.n_cands; i++) {
                cand_t *cd = &S.cands[i];
                if (cd->state == HS_NOMEM) {
                    rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory building plans");
                    goto fail;
                }
                /* the even split is a second plan only when it differs */
                if (!cd->balanced && i > first && S.cands[i - 1].shape == cd->shape &&
                    S.cands[i - 1].state != HS_REJECTED &&
                    memcmp(S.cands[i - 1].plan.split, cd->plan.split,
                           sizeof(int32_t) * (size_t)(cd->plan.pp + 1)) == 0) {
                    cd->state = HS_REJECTED;
                    continue;
                }
                if (cd->state == HS_REJECTED)
                    continue;
                r->candidates++;
                if (cd->state == HS_MEMORY) {
                    r->pruned_memory++;
                    continue;
                }
                if (heap_push(&H, (keyed_t){cd->key, ITEM(K_CAND, i)}) < 0) {
                    rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                    goto fail;
                }
            }
            continue;
        }
        /* price the next unpriced candidates, simulate the next priced ones */
        int64_t nb = 0;
        while (H.n > 0 && nb < bcap && (H.a[0].idx >> 56) == K_CAND &&
               (o->exhaustive || H.a[0].key * (1 - 1e-9) <= kth))
            batch[nb++] = heap_pop(&H).idx & ITEM_MASK;
        int8_t *was = S.pricing;
        for (int64_t b2 = 0; b2 < nb; b2++)
            was[b2] = (int8_t)!S.cands[batch[b2]].priced;
        if ((rc = hpgo_pool_map(S.nthreads, nb, step_job, &S, err)) != HPGO_OK)
            goto fail;
        if (hpgo_cancelled(o->cancel)) {
            rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the search was cancelled");
            goto fail;
        }
        for (int64_t b2 = 0; b2 < nb; b2++) {
            cand_t *cd = &S.cands[batch[b2]];
            if (was[b2]) {
                if (cd->state == HS_NOMEM) {
                    rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory pricing plans");
                    goto fail;
                }
                if (cd->state == HS_REJECTED) {
                    r->rejected++;
                } else if (cd->state == HS_MEMORY) {
                    r->pruned_memory++;
                } else if (heap_push(&H, (keyed_t){cd->key, ITEM(K_CAND, batch[b2])}) < 0) {
                    rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                    goto fail;
                }
                continue;
            }
            r->simulated++;
            if (cd->state == HS_NOMEM) {
                rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory simulating plans");
                goto fail;
            }
            if (cd->state == HS_REJECTED) {
                r->rejected++;
                continue;
            }
            if (cd->key * (1 - 1e-9) > cd->score ||
                ((cd->mem_over || S.shapes[cd->shape].mem_over) && cd->state == HS_FITS))
                r->bounds_broken++;
            if (cd->state == HS_NOFIT) {
                r->did_not_fit++;
                continue;
            }
            /* ties: the enumeration order (shape, then balanced before even) */
            keyed_t k = {cd->score, S.shapes[cd->shape].canon * 2 + !cd->balanced};
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
    /* what is left unexpanded */
    for (int64_t i = 0; i < H.n; i++) {
        int kind = (int)(H.a[i].idx >> 56);
        if (kind == K_BASE || kind == K_SHAPE) {
            r->pruned_shapes++; /* a base counts once for its variants */
        } else {
            r->pruned_time++;
        }
    }

    /* the result: copy each entry's groups, shares and split */
    size_t need = 0;
    int64_t *which = malloc(sizeof(int64_t) * (size_t)(ntop ? ntop : 1));
    if (!which) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < ntop; i++) {
        /* find the candidate of key idx (shape * 2 + even) */
        int64_t want = top[i].idx, found = -1;
        for (int64_t j = 0; j < S.n_cands && found < 0; j++)
            if (S.shapes[S.cands[j].shape].canon * 2 + !S.cands[j].balanced == want)
                found = j;
        which[i] = found;
        const hpgo_parplan_t *p = &S.cands[found].plan;
        need += sizeof(hpgo_stage_group_t) * (size_t)p->pp +
                sizeof(int32_t) * (size_t)(p->pp + 1) + 8; /* + padding to 8 */
        for (int32_t k = 0; k < p->pp; k++)
            need += (sizeof(double) + (p->groups[k].parts ? sizeof(int32_t) : 0)) *
                    (size_t)p->groups[k].dp;
    }
    r->entries = calloc((size_t)(ntop ? ntop : 1), sizeof *r->entries);
    r->storage = malloc(need + 8);
    if (!r->entries || !r->storage) {
        free(which);
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        goto fail;
    }
    char *at = r->storage;
    for (int32_t i = 0; i < ntop; i++) {
        const cand_t *cd = &S.cands[which[i]];
        hpgo_hetplan_entry_t *e = &r->entries[i];
        e->plan = cd->plan;
        e->iteration_time = cd->time;
        e->score = cd->score;
        e->balanced = cd->balanced;
        int32_t P = cd->plan.pp;
        hpgo_stage_group_t *g = (hpgo_stage_group_t *)at;
        at += sizeof *g * (size_t)P;
        memcpy(g, cd->plan.groups, sizeof *g * (size_t)P);
        for (int32_t k = 0; k < P; k++) {
            if (g[k].shares) {
                memcpy(at, g[k].shares, sizeof(double) * (size_t)g[k].dp);
                g[k].shares = (const double *)at;
                at += sizeof(double) * (size_t)g[k].dp;
            }
        }
        int32_t *sp = (int32_t *)at;
        at += sizeof(int32_t) * (size_t)(P + 1);
        memcpy(sp, cd->plan.split, sizeof(int32_t) * (size_t)(P + 1));
        for (int32_t k = 0; k < P; k++) {
            if (g[k].parts) {
                memcpy(at, g[k].parts, sizeof(int32_t) * (size_t)g[k].dp);
                g[k].parts = (const int32_t *)at;
                at += sizeof(int32_t) * (size_t)g[k].dp;
            }
        }
        at += (8 - (size_t)(at - (char *)r->storage) % 8) % 8; /* the next groups' alignment */
        e->plan.groups = g;
        e->plan.split = sp;
    }
    free(which);
    r->n = ntop;
    *out = r;
    r = NULL;
    rc = HPGO_OK;
fail:
    for (int64_t i = 0; i < S.n_cands; i++)
        free(S.cands[i].blob);
    free(S.cands);
    free(S.shapes);
    free(S.bases);
    free(S.cfgs);
    free(S.Ms);
    free(S.segsum);
    free(S.segcmin);
    free(S.mlines);
    free(S.pricing);
    free(S.lt_hash);
    lt_free(&S);
    free(E.n);
    free(order);
    free(top);
    free(batch);
    free(H.a);
    hpgo_hetplan_result_free(r);
    return rc;
}
