/* hetero.c - HAP-style SPMD planning of a layer chain on heterogeneous GPUs
 * (hetero.h).
 *
 * DESIGN
 * - A program is one strategy per layer; the forms between layers follow
 *   from it, and so do the collectives.  Given ratios, everything that
 *   depends on them is a function of u = max_d r_d / f_d, v = max_d r_d and
 *   min_d f_d, so a program reduces to a summary: sharded FLOPs A,
 *   replicated seconds, all-reduce seconds, and the bytes that go through
 *   all-gathers, reduce-scatters and all-to-alls.  The per-byte cost of a
 *   padded all-gather is n v / B_ag and of a grouped broadcast 1 / B_gb;
 *   the crossover v* = B_ag / (n B_gb) does not depend on the tensor, so
 *   the cheaper variant is the same for every tensor at given ratios.
 * - Search: Viterbi DP over (layer, output form), 4 forms x 7 strategies
 *   per layer, O(L), with back-pointers; ties go to the lower strategy /
 *   form index.  Exact for the chain at fixed ratios.
 * - Ratios: closed form of HAP's LP (see hetero.h), O(n log n + n^2) per
 *   call (n^2 only when locating the crossovers is needed).
 * - Alternation as HAP: r0 ~ f, program = DP(r), r = LP(program), until
 *   the cost stops dropping; (program, ratios) pairs stay together.
 * - Head-sharded attention: the shares of whole heads (sharding_round of
 *   each distinct head count, at most HAP_HEAD_KINDS of them) enter the
 *   shape as max_d h_d / (H f_d); their compute is summed in seconds with
 *   the replicated compute.
 * - Memory: a program's bytes are summed per category (parameters,
 *   gradients, optimizer state, activations) as full, times r_d, and times
 *   h_d / H per head count, so every device's total costs O(1) after one
 *   O(L) pass.  With capacities and an unfit program, a Lagrangian sweep
 *   reruns the DP with lambda x (the binding device's bytes of each layer)
 *   added to its cost, lambda = 2^k x (time / capacity) for k = -8..16, and
 *   keeps the fastest program that fits (then its ratio step, if it still
 *   fits).  O(25 L) more.
 * No global state, no printing; buffers are freed before returning. */
#include "hetero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NFORM = 4 };
/* distinct head counts of one chain (a model has one, or a few) */
#define HAP_HEAD_KINDS 8
#define HAP_MAX_HEADS (1 << 30)

static const int S_IN[HPGO_HAP_S__COUNT] = {HPGO_HAP_GB, HPGO_HAP_R,  HPGO_HAP_GF, HPGO_HAP_R,
                                           HPGO_HAP_R,  HPGO_HAP_GB, HPGO_HAP_GF, HPGO_HAP_GB,
                                           HPGO_HAP_R,  HPGO_HAP_GB, HPGO_HAP_GF};
static const int S_OUT[HPGO_HAP_S__COUNT] = {HPGO_HAP_GB, HPGO_HAP_GF, HPGO_HAP_P,  HPGO_HAP_R,
                                            HPGO_HAP_R,  HPGO_HAP_GB, HPGO_HAP_GF, HPGO_HAP_GB,
                                            HPGO_HAP_R,  HPGO_HAP_GB, HPGO_HAP_GF};

typedef struct {
    double frac;
    int32_t idx;
} frac_t;

/* Per-call context: the problem, its distinct head counts and scratch. */
typedef struct {
    const hpgo_hap_problem_t *pb;
    int32_t nh;                      /* distinct head counts */
    int32_t H[HAP_HEAD_KINDS];
    int64_t *hs;                     /* nh x n_devices head shares (scratch) */
    frac_t *fr;                      /* n_devices (scratch) */
} ctx_t;

typedef struct {
    double u, v, fmin; /* from the ratios */
    int32_t n;
    /* per-byte costs (seconds per byte) */
    double c_ag, c_rs, c_ar, c_a2a;
    int grouped_ag, grouped_rs;
    double hu[HAP_HEAD_KINDS]; /* max_d h_d / (H f_d) per distinct head count */
} shape_t;

typedef struct {
    double A;     /* sharded FLOPs (x3 for training) */
    double rep;   /* seconds of compute not proportional to u (replicated, by heads) */
    double ar;    /* bytes all-reduced */
    double ag;    /* bytes all-gathered */
    double rs;    /* bytes reduce-scattered */
    double a2a;   /* bytes sent through all-to-all */
} summary_t;

static int cmp_frac(const void *a, const void *b)
{
    const frac_t *x = a, *y = b;
    if (x->frac != y->frac)
        return x->frac > y->frac ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* HAP's sharding_round into out (n), fr: scratch of n.  Inputs are valid. */
static void shard_round(int64_t length, int32_t n, const double *ratios, int64_t *out,
                        frac_t *fr)
{
    int64_t used = 0;
    for (int32_t d = 0; d < n; d++) {
        double x = ratios[d] * (double)length;
        out[d] = (int64_t)floor(x);
        used += out[d];
        fr[d].frac = x - floor(x);
        fr[d].idx = d;
    }
    /* each unit lowers its device's deficit below every untouched one, so the
     * units go to the largest fractional parts, one each */
    qsort(fr, (size_t)n, sizeof *fr, cmp_frac);
    for (int64_t i = 0; used < length && i < n; i++, used++)
        out[fr[i].idx]++;
    for (int32_t d = 0; used > length && d < n; d++) /* rounding of a sum a hair above 1 */
        if (out[d] > 0) {
            out[d]--;
            used--;
        }
}

static int head_kind(const ctx_t *cx, int32_t heads)
{
    for (int32_t i = 0; i < cx->nh; i++)
        if (cx->H[i] == heads)
            return i;
    return 0; /* unreachable: every attention layer's count was collected */
}

static void make_shape(const ctx_t *cx, const double *r, shape_t *sh)
{
    const hpgo_hap_cluster_t *c = &cx->pb->cluster;
    double u = 0.0, v = 0.0, fmin = INFINITY;
    for (int32_t d = 0; d < c->n_devices; d++) {
        double q = r[d] / c->flops[d];
        if (q > u)
            u = q;
        if (r[d] > v)
            v = r[d];
        if (c->flops[d] < fmin)
            fmin = c->flops[d];
    }
    sh->u = u;
    sh->v = v;
    sh->fmin = fmin;
    sh->n = c->n_devices;
    double n = (double)c->n_devices;
    double pad_ag = n * v / c->bw_allgather, grp_ag = 1.0 / c->bw_allgather_group;
    double pad_rs = n * v / c->bw_reducescatter, grp_rs = 1.0 / c->bw_reducescatter_group;
    sh->grouped_ag = grp_ag < pad_ag;
    sh->grouped_rs = grp_rs < pad_rs;
    sh->c_ag = sh->grouped_ag ? grp_ag : pad_ag;
    sh->c_rs = sh->grouped_rs ? grp_rs : pad_rs;
    sh->c_ar = 1.0 / c->bw_allreduce;
    sh->c_a2a = n * v / c->bw_alltoall;
    for (int32_t i = 0; i < cx->nh; i++) {
        int64_t *h = cx->hs + (size_t)i * (size_t)c->n_devices;
        shard_round(cx->H[i], c->n_devices, r, h, cx->fr);
        double m = 0.0;
        for (int32_t d = 0; d < c->n_devices; d++) {
            double q = (double)h[d] / ((double)cx->H[i] * c->flops[d]);
            if (q > m)
                m = q;
        }
        sh->hu[i] = m;
    }
}

/* Transition kinds between an output form and an input form. */
enum { T_NONE = 0, T_SLICE, T_GATHER, T_ALLREDUCE, T_SCATTER, T_A2A, T_BAD };

static int transition(int from, int to)
{
    if (from == to)
        return T_NONE;
    if (to == HPGO_HAP_P)
        return T_BAD;
    if (from == HPGO_HAP_R)
        return T_SLICE; /* local slice forward, all-gather of the gradient backward */
    if (from == HPGO_HAP_P)
        return to == HPGO_HAP_R ? T_ALLREDUCE : T_SCATTER;
    return to == HPGO_HAP_R ? T_GATHER : T_A2A;
}

static double trans_cost(const shape_t *sh, int kind, double bytes)
{
    switch (kind) {
    case T_NONE:
        return 0.0;
    case T_SLICE:
        return bytes * sh->c_ag;
    case T_GATHER: /* all-gather forward, reduce-scatter backward */
    case T_SCATTER: /* reduce-scatter forward, all-gather backward */
        return bytes * (sh->c_ag + sh->c_rs);
    case T_ALLREDUCE:
        return bytes * sh->c_ar;
    case T_A2A:
        return 2.0 * bytes * sh->c_a2a;
    default:
        return INFINITY;
    }
}

static void trans_add(summary_t *s, int kind, double bytes)
{
    switch (kind) {
    case T_SLICE:
        s->ag += bytes;
        break;
    case T_GATHER:
    case T_SCATTER:
        s->ag += bytes;
        s->rs += bytes;
        break;
    case T_ALLREDUCE:
        s->ar += bytes;
        break;
    case T_A2A:
        s->a2a += 2.0 * bytes;
        break;
    default:
        break;
    }
}

static double layer_phi(const hpgo_hap_layer_t *l)
{
    return l->kind == HPGO_HAP_LINEAR ? 6.0 * l->m * l->k * l->n : 3.0 * l->flops;
}

static int strategy_fits(const hpgo_hap_layer_t *l, int s)
{
    switch (l->kind) {
    case HPGO_HAP_LINEAR:
        return s <= HPGO_HAP_S_REP || s == HPGO_HAP_S_DP_ZERO;
    case HPGO_HAP_ELEMENTWISE:
        return s >= HPGO_HAP_S_EW_R && s <= HPGO_HAP_S_EW_GF;
    default:
        return s >= HPGO_HAP_S_ATT_R && s <= HPGO_HAP_S_ATT_HEADS;
    }
}

/* Compute and strategy-owned communication of layer l under strategy s. */
static void layer_add(const ctx_t *cx, summary_t *sum, const hpgo_hap_layer_t *l, int s,
                      const shape_t *sh, double dt)
{
    double phi = layer_phi(l);
    if (s == HPGO_HAP_S_REP || s == HPGO_HAP_S_EW_R || s == HPGO_HAP_S_ATT_R)
        sum->rep += phi / sh->fmin;
    else if (s == HPGO_HAP_S_ATT_HEADS)
        sum->rep += phi * sh->hu[head_kind(cx, l->heads)];
    else
        sum->A += phi;
    double w = l->k * l->n * dt; /* weight (and weight-gradient) bytes */
    if (s == HPGO_HAP_S_DP) {
        sum->ar += w; /* weight gradient */
    } else if (s == HPGO_HAP_S_COL) {
        sum->ar += l->m * l->k * dt; /* input gradient (partial sums) */
    } else if (s == HPGO_HAP_S_DP_ZERO) {
        sum->ag += 2.0 * w; /* before the forward and again before the backward */
        sum->rs += w;       /* the weight gradient */
    }
}

static double layer_cost(const ctx_t *cx, const shape_t *sh, const hpgo_hap_layer_t *l, int s,
                         double dt)
{
    summary_t t;
    memset(&t, 0, sizeof t);
    layer_add(cx, &t, l, s, sh, dt);
    return t.A * sh->u + t.rep + t.ar * sh->c_ar + t.ag * sh->c_ag + t.rs * sh->c_rs;
}

/* ---- memory ---------------------------------------------------------------------- */

enum { M_PAR = 0, M_GRAD, M_OPT, M_ACT, M_CAT };

/* Bytes of a program by category: full on every device, times r_d, and
 * times h_d / H per head count. */
typedef struct {
    double full[M_CAT], shr[M_CAT], shh[HAP_HEAD_KINDS][M_CAT];
    double transient; /* full weight + gradient of the largest ZeRO-3 layer */
} memsum_t;

/* share: 0 full, 1 by r, 2 + i by heads of kind i */
static void mem_put(memsum_t *m, int share, int cat, double bytes)
{
    if (share == 0)
        m->full[cat] += bytes;
    else if (share == 1)
        m->shr[cat] += bytes;
    else
        m->shh[share - 2][cat] += bytes;
}

static int form_share(int form)
{
    return (form == HPGO_HAP_GB || form == HPGO_HAP_GF) ? 1 : 0;
}

static void layer_mem(const ctx_t *cx, memsum_t *m, const hpgo_hap_layer_t *l, int s)
{
    const double dt = cx->pb->dtype_bytes, ob = cx->pb->optimizer_bytes;
    if (l->kind == HPGO_HAP_LINEAR) {
        double p = l->k * l->n;
        int share = (s == HPGO_HAP_S_DP || s == HPGO_HAP_S_REP) ? 0 : 1;
        mem_put(m, share, M_PAR, p * dt);
        mem_put(m, share, M_GRAD, p * dt);
        mem_put(m, share, M_OPT, p * ob);
        if (s == HPGO_HAP_S_DP_ZERO && 2.0 * p * dt > m->transient)
            m->transient = 2.0 * p * dt;
    }
    int share_in = form_share(S_IN[s]), share_out = form_share(S_OUT[s]);
    if (s == HPGO_HAP_S_ATT_HEADS)
        share_in = share_out = 2 + head_kind(cx, l->heads);
    mem_put(m, share_in, M_ACT, l->m * l->k * dt);
    mem_put(m, share_out, M_ACT, l->saved * dt);
}

static void program_mem(const ctx_t *cx, const int32_t *strat, memsum_t *m)
{
    memset(m, 0, sizeof *m);
    for (int32_t l = 0; l < cx->pb->n_layers; l++)
        layer_mem(cx, m, &cx->pb->layers[l], strat[l]);
}

/* Device d's bytes; cx->hs must hold the head shares of the ratios r. */
static void device_mem(const ctx_t *cx, const memsum_t *m, const double *r, int32_t d,
                       hpgo_hap_memory_t *out)
{
    double v[M_CAT];
    const int32_t n = cx->pb->cluster.n_devices;
    for (int c = 0; c < M_CAT; c++) {
        v[c] = m->full[c] + r[d] * m->shr[c];
        for (int32_t i = 0; i < cx->nh; i++)
            v[c] += (double)cx->hs[(size_t)i * (size_t)n + d] / (double)cx->H[i] * m->shh[i][c];
    }
    out->parameters = v[M_PAR];
    out->gradients = v[M_GRAD];
    out->optimizer = v[M_OPT];
    out->activations = v[M_ACT];
    out->transient = m->transient;
    out->total = v[M_PAR] + v[M_GRAD] + v[M_OPT] + v[M_ACT] + m->transient;
}

/* The binding device (largest used / capacity, or used without capacities;
 * ties: lower index), whether all fit (-1: no capacities), optionally every
 * device's total.  Fills cx->hs for r. */
static int memory_verdict(const ctx_t *cx, const int32_t *strat, const double *r,
                          int32_t *worst, hpgo_hap_memory_t *wm, double *used)
{
    const hpgo_hap_problem_t *pb = cx->pb;
    const int32_t n = pb->cluster.n_devices;
    for (int32_t i = 0; i < cx->nh; i++)
        shard_round(cx->H[i], n, r, cx->hs + (size_t)i * (size_t)n, cx->fr);
    memsum_t m;
    program_mem(cx, strat, &m);
    int fits = pb->memory ? 1 : -1;
    double best = -1.0;
    for (int32_t d = 0; d < n; d++) {
        hpgo_hap_memory_t dm;
        device_mem(cx, &m, r, d, &dm);
        if (used)
            used[d] = dm.total;
        double q = pb->memory ? dm.total / pb->memory[d] : dm.total;
        if (pb->memory && dm.total > pb->memory[d])
            fits = 0;
        if (q > best) {
            best = q;
            *worst = d;
            *wm = dm;
        }
    }
    return fits;
}

/* Final output: reach R or Gb (the loss is per sample); the cheaper transition. */
static int end_transition(const shape_t *sh, int form, double bytes)
{
    int a = transition(form, HPGO_HAP_R), b = transition(form, HPGO_HAP_GB);
    return trans_cost(sh, b, bytes) < trans_cost(sh, a, bytes) ? b : a;
}

typedef struct {
    double time, compute, ag, rs, ar, a2a;
} breakdown_t;

static void summary_cost(const summary_t *s, const shape_t *sh, breakdown_t *b)
{
    b->compute = s->A * sh->u + s->rep;
    b->ag = s->ag * sh->c_ag;
    b->rs = s->rs * sh->c_rs;
    b->ar = s->ar * sh->c_ar;
    b->a2a = s->a2a * sh->c_a2a;
    b->time = b->compute + b->ag + b->rs + b->ar + b->a2a;
}

/* Summary of a program at the given shape (the end transition is chosen with it). */
static void program_summary(const ctx_t *cx, const int32_t *strat, const shape_t *sh,
                            summary_t *s)
{
    const hpgo_hap_problem_t *pb = cx->pb;
    memset(s, 0, sizeof *s);
    const double dt = pb->dtype_bytes;
    int prev = -1;
    for (int32_t l = 0; l < pb->n_layers; l++) {
        const hpgo_hap_layer_t *ly = &pb->layers[l];
        int st = strat[l];
        if (prev >= 0)
            trans_add(s, transition(prev, S_IN[st]), ly->m * ly->k * dt);
        layer_add(cx, s, ly, st, sh, dt);
        prev = S_OUT[st];
    }
    const hpgo_hap_layer_t *last = &pb->layers[pb->n_layers - 1];
    double bytes = last->m * last->n * dt;
    trans_add(s, end_transition(sh, prev, bytes), bytes);
}

/* Memory penalty of the Viterbi search: lambda seconds per byte of the
 * device whose shares are x (by r) and xh[i] (by heads); lambda 0: none. */
typedef struct {
    double lambda, x, xh[HAP_HEAD_KINDS];
} penalty_t;

static double layer_penalty(const ctx_t *cx, const penalty_t *pen, const hpgo_hap_layer_t *l,
                            int s)
{
    if (!pen || pen->lambda == 0.0)
        return 0.0;
    memsum_t m;
    memset(&m, 0, sizeof m);
    layer_mem(cx, &m, l, s);
    double b = m.transient;
    for (int c = 0; c < M_CAT; c++) {
        b += m.full[c] + pen->x * m.shr[c];
        for (int32_t i = 0; i < cx->nh; i++)
            b += pen->xh[i] * m.shh[i][c];
    }
    return pen->lambda * b;
}

/* Viterbi search at fixed ratios (plus the memory penalty, if any); strat
 * gets the program.  NOPLAN if none. */
static int search(const ctx_t *cx, uint32_t allowed, const shape_t *sh, const penalty_t *pen,
                  int32_t *strat, int8_t *bp_s, int8_t *bp_f, hpgo_err_t *err)
{
    const hpgo_hap_problem_t *pb = cx->pb;
    const double dt = pb->dtype_bytes;
    double best[NFORM], nbest[NFORM], in_cost[NFORM];
    int in_arg[NFORM];
    for (int f = 0; f < NFORM; f++)
        best[f] = INFINITY;
    for (int32_t l = 0; l < pb->n_layers; l++) {
        const hpgo_hap_layer_t *ly = &pb->layers[l];
        double tin = ly->m * ly->k * dt;
        for (int fi = 0; fi < NFORM; fi++) {
            in_cost[fi] = INFINITY;
            in_arg[fi] = -1;
            if (l == 0) {
                if (fi != HPGO_HAP_P) {
                    in_cost[fi] = 0.0; /* the input is available in any form */
                    in_arg[fi] = fi;
                }
                continue;
            }
            for (int fo = 0; fo < NFORM; fo++) {
                if (!isfinite(best[fo]))
                    continue;
                double c = best[fo] + trans_cost(sh, transition(fo, fi), tin);
                if (c < in_cost[fi]) {
                    in_cost[fi] = c;
                    in_arg[fi] = fo;
                }
            }
        }
        for (int f = 0; f < NFORM; f++) {
            nbest[f] = INFINITY;
            bp_s[(size_t)l * NFORM + f] = -1;
            bp_f[(size_t)l * NFORM + f] = -1;
        }
        for (int s = 0; s < HPGO_HAP_S__COUNT; s++) {
            if (!(allowed & (1u << s)) || !strategy_fits(ly, s))
                continue;
            int fi = S_IN[s], fo = S_OUT[s];
            if (!isfinite(in_cost[fi]))
                continue;
            double c = in_cost[fi] + layer_cost(cx, sh, ly, s, dt) +
                       layer_penalty(cx, pen, ly, s);
            if (c < nbest[fo]) {
                nbest[fo] = c;
                bp_s[(size_t)l * NFORM + fo] = (int8_t)s;
                bp_f[(size_t)l * NFORM + fo] = (int8_t)in_arg[fi];
            }
        }
        memcpy(best, nbest, sizeof best);
    }
    const hpgo_hap_layer_t *last = &pb->layers[pb->n_layers - 1];
    double bytes = last->m * last->n * dt, total = INFINITY;
    int fend = -1;
    for (int f = 0; f < NFORM; f++) {
        if (!isfinite(best[f]))
            continue;
        double c = best[f] + trans_cost(sh, end_transition(sh, f, bytes), bytes);
        if (c < total) {
            total = c;
            fend = f;
        }
    }
    if (fend < 0)
        return hpgo_err_set(err, HPGO_E_NOPLAN, 0,
                            "no allowed strategy covers every layer (linear layers need one of "
                            "dp/col/row/rep/dp_zero, element-wise ones one of ew_r/ew_gb/ew_gf, "
                            "attention ones one of att_r/att_gb/att_heads)");
    int f = fend;
    for (int32_t l = pb->n_layers - 1; l >= 0; l--) {
        int s = bp_s[(size_t)l * NFORM + f];
        strat[l] = s;
        f = bp_f[(size_t)l * NFORM + f];
    }
    return HPGO_OK;
}

static void ratios_at(const hpgo_hap_cluster_t *c, double rho, double *r)
{
    double s = 0.0;
    for (int32_t d = 0; d < c->n_devices; d++)
        s += c->flops[d] < rho ? c->flops[d] : rho;
    for (int32_t d = 0; d < c->n_devices; d++)
        r[d] = (c->flops[d] < rho ? c->flops[d] : rho) / s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Exact ratio optimum for a fixed program (see hetero.h).  r gets the ratios. */
static int optimise_ratios(const ctx_t *cx, const int32_t *strat, double *r, double *scratch,
                           hpgo_err_t *err)
{
    const hpgo_hap_cluster_t *c = &cx->pb->cluster;
    const int32_t n = c->n_devices;
    double *fs = malloc((size_t)n * sizeof *fs);
    double *cand = malloc(((size_t)n + 2 * (size_t)n + 2) * sizeof *cand);
    if (!fs || !cand) {
        free(fs);
        free(cand);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the ratio optimiser");
    }
    memcpy(fs, c->flops, (size_t)n * sizeof *fs);
    qsort(fs, (size_t)n, sizeof *fs, cmp_double);
    int32_t nc = 0;
    for (int32_t j = 0; j < n; j++)
        cand[nc++] = fs[j];
    double vstar[2] = {c->bw_allgather / ((double)n * c->bw_allgather_group),
                       c->bw_reducescatter / ((double)n * c->bw_reducescatter_group)};
    for (int q = 0; q < 2; q++) {
        double P = 0.0;
        for (int32_t j = 1; j < n; j++) {
            P += fs[j - 1];
            double den = 1.0 - vstar[q] * (double)(n - j);
            if (den <= 0.0)
                continue;
            double rho = vstar[q] * P / den;
            if (rho >= fs[j - 1] && rho <= fs[j])
                cand[nc++] = rho;
        }
    }
    qsort(cand, (size_t)nc, sizeof *cand, cmp_double);
    /* from the proportional split down: ties keep the larger rho */
    double best = INFINITY;
    for (int32_t i = nc - 1; i >= 0; i--) {
        if (i < nc - 1 && cand[i] == cand[i + 1])
            continue;
        ratios_at(c, cand[i], scratch);
        shape_t sh;
        make_shape(cx, scratch, &sh);
        summary_t s;
        program_summary(cx, strat, &sh, &s);
        breakdown_t b;
        summary_cost(&s, &sh, &b);
        if (b.time < best) {
            best = b.time;
            memcpy(r, scratch, (size_t)n * sizeof *r);
        }
    }
    free(fs);
    free(cand);
    return HPGO_OK;
}

static int check_pos(double x)
{
    return isfinite(x) && x > 0.0;
}

static int validate(const hpgo_hap_problem_t *pb, hpgo_err_t *err)
{
    if (!pb || !pb->layers)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL problem");
    if (pb->n_layers < 1 || pb->n_layers > HPGO_HAP_MAX_LAYERS)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "number of layers must be in 1..%d, got %d",
                            HPGO_HAP_MAX_LAYERS, (int)pb->n_layers);
    const hpgo_hap_cluster_t *c = &pb->cluster;
    if (c->n_devices < 1 || c->n_devices > HPGO_HAP_MAX_DEVICES || !c->flops)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "number of devices must be in 1..%d, got %d",
                            HPGO_HAP_MAX_DEVICES, (int)c->n_devices);
    for (int32_t d = 0; d < c->n_devices; d++)
        if (!check_pos(c->flops[d]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "device %d: FLOP/s must be finite and > 0",
                                (int)d);
    if (!check_pos(c->bw_allgather) || !check_pos(c->bw_allgather_group) ||
        !check_pos(c->bw_allreduce) || !check_pos(c->bw_reducescatter) ||
        !check_pos(c->bw_reducescatter_group) || !check_pos(c->bw_alltoall))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "every bandwidth must be finite and > 0");
    if (!check_pos(pb->dtype_bytes))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "dtype_bytes must be finite and > 0");
    for (int32_t l = 0; l < pb->n_layers; l++) {
        const hpgo_hap_layer_t *ly = &pb->layers[l];
        if (ly->kind != HPGO_HAP_LINEAR && ly->kind != HPGO_HAP_ELEMENTWISE &&
            ly->kind != HPGO_HAP_ATTENTION)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "layer %d: unknown kind %d", (int)l,
                                ly->kind);
        if (!check_pos(ly->m) || !check_pos(ly->k) || !check_pos(ly->n) ||
            !(isfinite(ly->flops) && ly->flops >= 0.0) ||
            !(isfinite(ly->saved) && ly->saved >= 0.0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "layer %d: sizes must be finite and > 0, FLOPs and saved "
                                "elements >= 0", (int)l);
        if (ly->kind == HPGO_HAP_ATTENTION && (ly->heads < 1 || ly->heads > HAP_MAX_HEADS))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "layer %d: heads must be in 1..%d, got %d",
                                (int)l, HAP_MAX_HEADS, (int)ly->heads);
    }
    if (!(isfinite(pb->optimizer_bytes) && pb->optimizer_bytes >= 0.0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "optimizer_bytes must be finite and >= 0");
    if (pb->memory)
        for (int32_t d = 0; d < c->n_devices; d++)
            if (!check_pos(pb->memory[d]))
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "device %d: memory must be finite and > 0 bytes", (int)d);
    if (pb->allowed >= (1u << HPGO_HAP_S__COUNT))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown strategy bits 0x%x", pb->allowed);
    if (pb->ratio_mode < HPGO_HAP_RATIO_OPTIMAL || pb->ratio_mode > HPGO_HAP_RATIO_GIVEN)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown ratio mode %d", pb->ratio_mode);
    if (pb->ratio_mode == HPGO_HAP_RATIO_GIVEN) {
        if (!pb->ratios)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "ratios are missing");
        double s = 0.0;
        for (int32_t d = 0; d < c->n_devices; d++) {
            if (!(isfinite(pb->ratios[d]) && pb->ratios[d] >= 0.0))
                return hpgo_err_set(err, HPGO_E_INVALID, 0, "ratio %d must be finite and >= 0",
                                    (int)d);
            s += pb->ratios[d];
        }
        if (fabs(s - 1.0) > 1e-9)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "ratios must sum to 1, got %.12g", s);
    }
    if (pb->ratio_mode == HPGO_HAP_RATIO_OPTIMAL && pb->max_rounds < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "max_rounds must be >= 1");
    return HPGO_OK;
}

/* Cost of a program at ratios r (breakdown b, shape sh). */
static void program_cost(const ctx_t *cx, const int32_t *strat, const double *r, shape_t *sh,
                         breakdown_t *b)
{
    make_shape(cx, r, sh);
    summary_t s;
    program_summary(cx, strat, sh, &s);
    summary_cost(&s, sh, b);
}

/* Ratios near `want` that leave every device within its capacity for the
 * program's bytes (head shares counted as r): r_d = min(t want_d, cap_d),
 * cap_d = (memory_d - full bytes) / sharded bytes, t by bisection so the
 * shares sum to 1.  0 if no such ratios exist. */
static int capped_ratios(const ctx_t *cx, const int32_t *strat, const double *want, double *r)
{
    const hpgo_hap_problem_t *pb = cx->pb;
    const int32_t n = pb->cluster.n_devices;
    memsum_t m;
    program_mem(cx, strat, &m);
    double full = m.transient, sh = 0.0;
    for (int c = 0; c < M_CAT; c++) {
        full += m.full[c];
        sh += m.shr[c];
        for (int32_t i = 0; i < cx->nh; i++)
            sh += m.shh[i][c];
    }
    if (!(sh > 0.0))
        return 0;
    double total = 0.0;
    for (int32_t d = 0; d < n; d++) {
        double cap = (pb->memory[d] - full) / sh;
        if (cap < 0.0)
            return 0;
        total += cap < 1.0 ? cap : 1.0;
    }
    if (total < 1.0)
        return 0;
    double lo = 0.0, hi = 1.0;
    for (int32_t d = 0; d < n; d++)
        if (want[d] > 0.0 && 1.0 / want[d] > hi)
            hi = 1.0 / want[d];
    for (int it = 0; it < 200; it++) {
        double mid = 0.5 * (lo + hi), s = 0.0;
        for (int32_t d = 0; d < n; d++) {
            double cap = (pb->memory[d] - full) / sh, x = mid * want[d];
            s += x < cap ? x : cap;
        }
        if (s < 1.0)
            lo = mid;
        else
            hi = mid;
    }
    double s = 0.0;
    for (int32_t d = 0; d < n; d++) {
        double cap = (pb->memory[d] - full) / sh, x = hi * want[d];
        r[d] = x < cap ? x : cap;
        s += r[d];
    }
    if (!(s > 0.0))
        return 0;
    for (int32_t d = 0; d < n; d++)
        r[d] /= s;
    return 1;
}

/* The memory-constrained step (see the file comment): prog / r hold the
 * unconstrained best, which does not fit; replaced by the fastest fitting
 * program found, if any. */
static int fit_sweep(const ctx_t *cx, uint32_t allowed, int32_t *prog, double *r,
                     breakdown_t *best, int32_t *work, int8_t *bp_s, int8_t *bp_f,
                     double *r2, double *scratch, hpgo_err_t *err)
{
    const hpgo_hap_problem_t *pb = cx->pb;
    const int32_t L = pb->n_layers, n = pb->cluster.n_devices;
    int32_t *cand = malloc((size_t)L * sizeof *cand);
    if (!cand)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the HAP planner");
    int rc = HPGO_OK, found = 0;
    breakdown_t found_b;
    memset(&found_b, 0, sizeof found_b);
    int32_t worst = 0;
    hpgo_hap_memory_t wm;
    memory_verdict(cx, prog, r, &worst, &wm, NULL);
    penalty_t pen;
    memset(&pen, 0, sizeof pen);
    pen.x = r[worst];
    for (int32_t i = 0; i < cx->nh; i++)
        pen.xh[i] = (double)cx->hs[(size_t)i * (size_t)n + worst] / (double)cx->H[i];
    shape_t sh;
    make_shape(cx, r, &sh);
    /* seconds per byte that make the binding device's bytes as costly as the
     * whole iteration, scaled by 2^k */
    double base = best->time / pb->memory[worst];
    double *rc_ = malloc(3 * (size_t)n * sizeof *rc_);
    if (!rc_) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the HAP planner");
        goto done;
    }
    double *found_r = rc_ + 2 * (size_t)n;
    for (int k = -8; k <= 16; k++) {
        pen.lambda = ldexp(base, k);
        rc = search(cx, allowed, &sh, &pen, work, bp_s, bp_f, err);
        if (rc != HPGO_OK)
            break;
        /* the ratios it may run at: the current ones, its own optimum (when
         * optimising) and both capped by memory */
        int nt = 0;
        const double *tries[4];
        tries[nt++] = r;
        if (pb->ratio_mode == HPGO_HAP_RATIO_OPTIMAL) {
            rc = optimise_ratios(cx, work, r2, scratch, err);
            if (rc != HPGO_OK)
                break;
            tries[nt++] = r2;
            if (capped_ratios(cx, work, r2, rc_ + n))
                tries[nt++] = rc_ + n;
        }
        if (pb->ratio_mode == HPGO_HAP_RATIO_OPTIMAL && capped_ratios(cx, work, r, rc_))
            tries[nt++] = rc_;
        for (int t = 0; t < nt; t++) {
            int32_t w2;
            hpgo_hap_memory_t m2;
            if (memory_verdict(cx, work, tries[t], &w2, &m2, NULL) != 1)
                continue;
            shape_t s2;
            breakdown_t b;
            program_cost(cx, work, tries[t], &s2, &b);
            if (!found || b.time < found_b.time) {
                found = 1;
                found_b = b;
                memcpy(cand, work, (size_t)L * sizeof *cand);
                memcpy(found_r, tries[t], (size_t)n * sizeof *found_r);
            }
        }
    }
    if (rc == HPGO_OK && found) {
        memcpy(prog, cand, (size_t)L * sizeof *prog);
        memcpy(r, found_r, (size_t)n * sizeof *r);
        *best = found_b;
    }
    free(rc_);
done:
    free(cand);
    return rc;
}

int hpgo_hap_plan(const hpgo_hap_problem_t *pb, hpgo_hap_result_t *out, hpgo_err_t *err)
{
    int rc = validate(pb, err);
    if (rc != HPGO_OK)
        return rc;
    if (!out || !out->strategy || !out->ratios)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL result buffers");
    const hpgo_hap_cluster_t *c = &pb->cluster;
    const int32_t L = pb->n_layers, n = c->n_devices;
    uint32_t allowed = pb->allowed ? pb->allowed : (1u << HPGO_HAP_S__COUNT) - 1u;
    ctx_t cx;
    memset(&cx, 0, sizeof cx);
    cx.pb = pb;
    for (int32_t l = 0; l < L; l++) {
        const hpgo_hap_layer_t *ly = &pb->layers[l];
        if (ly->kind != HPGO_HAP_ATTENTION)
            continue;
        int seen = 0;
        for (int32_t i = 0; i < cx.nh; i++)
            seen |= cx.H[i] == ly->heads;
        if (seen)
            continue;
        if (cx.nh == HAP_HEAD_KINDS)
            return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                                "layer %d: more than %d distinct head counts in one chain",
                                (int)l, HAP_HEAD_KINDS);
        cx.H[cx.nh++] = ly->heads;
    }
    int32_t *prog = malloc((size_t)L * sizeof *prog);
    int32_t *work = malloc((size_t)L * sizeof *work);
    int8_t *bp_s = malloc((size_t)L * NFORM), *bp_f = malloc((size_t)L * NFORM);
    double *r = malloc((size_t)n * sizeof *r), *r2 = malloc((size_t)n * sizeof *r2);
    double *scratch = malloc((size_t)n * sizeof *scratch);
    cx.hs = malloc(((size_t)cx.nh > 0 ? (size_t)cx.nh : 1) * (size_t)n * sizeof *cx.hs);
    cx.fr = malloc((size_t)n * sizeof *cx.fr);
    if (!prog || !work || !bp_s || !bp_f || !r || !r2 || !scratch || !cx.hs || !cx.fr) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the HAP planner");
        goto done;
    }
    double total = 0.0;
    for (int32_t d = 0; d < n; d++)
        total += c->flops[d];
    for (int32_t d = 0; d < n; d++) {
        if (pb->ratio_mode == HPGO_HAP_RATIO_UNIFORM)
            r[d] = 1.0 / (double)n;
        else if (pb->ratio_mode == HPGO_HAP_RATIO_GIVEN)
            r[d] = pb->ratios[d];
        else
            r[d] = c->flops[d] / total;
    }
    shape_t sh;
    make_shape(&cx, r, &sh);
    rc = search(&cx, allowed, &sh, NULL, prog, bp_s, bp_f, err);
    if (rc != HPGO_OK)
        goto done;
    breakdown_t best;
    program_cost(&cx, prog, r, &sh, &best);
    int32_t rounds = 1;
    if (pb->ratio_mode == HPGO_HAP_RATIO_OPTIMAL) {
        while (rounds < pb->max_rounds + 1) {
            /* LP for the best program, then search again at the new ratios */
            rc = optimise_ratios(&cx, prog, r2, scratch, err);
            if (rc != HPGO_OK)
                goto done;
            shape_t sh2;
            make_shape(&cx, r2, &sh2);
            rc = search(&cx, allowed, &sh2, NULL, work, bp_s, bp_f, err);
            if (rc != HPGO_OK)
                goto done;
            /* the searched program is no worse than the old one at r2 */
            breakdown_t b;
            program_cost(&cx, work, r2, &sh2, &b);
            rounds++;
            if (!(b.time < best.time))
                break;
            best = b;
            memcpy(prog, work, (size_t)L * sizeof *prog);
            memcpy(r, r2, (size_t)n * sizeof *r2);
        }
        /* the LP of the kept program may still lower its cost */
        rc = optimise_ratios(&cx, prog, r2, scratch, err);
        if (rc != HPGO_OK)
            goto done;
        shape_t sh3;
        breakdown_t b;
        program_cost(&cx, prog, r2, &sh3, &b);
        if (b.time < best.time) {
            best = b;
            memcpy(r, r2, (size_t)n * sizeof *r2);
        }
    }
    int32_t worst = 0;
    hpgo_hap_memory_t wm;
    if (!pb->report_only && memory_verdict(&cx, prog, r, &worst, &wm, NULL) == 0) {
        rc = fit_sweep(&cx, allowed, prog, r, &best, work, bp_s, bp_f, r2, scratch, err);
        if (rc != HPGO_OK)
            goto done;
    }
    memcpy(out->strategy, prog, (size_t)L * sizeof *prog);
    memcpy(out->ratios, r, (size_t)n * sizeof *r);
    out->fits = memory_verdict(&cx, prog, r, &out->worst_device, &out->worst, out->memory_used);
    make_shape(&cx, r, &sh);
    out->time = best.time;
    out->compute = best.compute;
    out->allgather = best.ag;
    out->reducescatter = best.rs;
    out->allreduce = best.ar;
    out->alltoall = best.a2a;
    out->grouped_allgather = sh.grouped_ag;
    out->grouped_reducescatter = sh.grouped_rs;
    out->rounds = rounds;
done:
    free(prog);
    free(work);
    free(bp_s);
    free(bp_f);
    free(r);
    free(r2);
    free(scratch);
    free(cx.hs);
    free(cx.fr);
    return rc;
}

int hpgo_hap_gather_cost(int32_t n, const double *ratios, double bytes, double bw_padded,
                         double bw_grouped, double *padded, double *grouped, hpgo_err_t *err)
{
    if (!ratios || !padded || !grouped)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    if (n < 1 || n > HPGO_HAP_MAX_DEVICES)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "number of devices must be in 1..%d",
                            HPGO_HAP_MAX_DEVICES);
    if (!(isfinite(bytes) && bytes >= 0.0) || !check_pos(bw_padded) || !check_pos(bw_grouped))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "bytes must be >= 0 and bandwidths > 0 (all finite)");
    double v = 0.0;
    for (int32_t d = 0; d < n; d++) {
        if (!(isfinite(ratios[d]) && ratios[d] >= 0.0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "ratio %d must be finite and >= 0",
                                (int)d);
        if (ratios[d] > v)
            v = ratios[d];
    }
    *padded = (double)n * v * bytes / bw_padded;
    *grouped = bytes / bw_grouped;
    return HPGO_OK;
}

int hpgo_hap_shard_round(int64_t length, int32_t n, const double *ratios, int64_t *out,
                         hpgo_err_t *err)
{
    if (!ratios || !out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    if (n < 1 || n > HPGO_HAP_MAX_DEVICES)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "number of devices must be in 1..%d",
                            HPGO_HAP_MAX_DEVICES);
    if (length < 0 || length > ((int64_t)1 << 50))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "length must be in 0..2^50");
    double s = 0.0;
    for (int32_t d = 0; d < n; d++) {
        if (!(isfinite(ratios[d]) && ratios[d] >= 0.0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "ratio %d must be finite and >= 0",
                                (int)d);
        s += ratios[d];
    }
    if (fabs(s - 1.0) > 1e-9)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "ratios must sum to 1, got %.12g", s);
    frac_t *fr = malloc((size_t)n * sizeof *fr);
    if (!fr)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    shard_round(length, n, ratios, out, fr);
    free(fr);
    return HPGO_OK;
}
