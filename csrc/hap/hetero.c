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
 * No global state, no printing; buffers are freed before returning. */
#include "hetero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NFORM = 4 };

static const int S_IN[HPGO_HAP_S__COUNT] = {HPGO_HAP_GB, HPGO_HAP_R, HPGO_HAP_GF, HPGO_HAP_R,
                                           HPGO_HAP_R, HPGO_HAP_GB, HPGO_HAP_GF};
static const int S_OUT[HPGO_HAP_S__COUNT] = {HPGO_HAP_GB, HPGO_HAP_GF, HPGO_HAP_P, HPGO_HAP_R,
                                            HPGO_HAP_R, HPGO_HAP_GB, HPGO_HAP_GF};

typedef struct {
    double u, v, fmin; /* from the ratios */
    int32_t n;
    /* per-byte costs (seconds per byte) */
    double c_ag, c_rs, c_ar, c_a2a;
    int grouped_ag, grouped_rs;
} shape_t;

typedef struct {
    double A;     /* sharded FLOPs (x3 for training) */
    double rep;   /* seconds of replicated compute */
    double ar;    /* bytes all-reduced */
    double ag;    /* bytes all-gathered */
    double rs;    /* bytes reduce-scattered */
    double a2a;   /* bytes sent through all-to-all */
} summary_t;

static void make_shape(const hpgo_hap_cluster_t *c, const double *r, shape_t *sh)
{
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
    return l->kind == HPGO_HAP_LINEAR ? s <= HPGO_HAP_S_REP : s >= HPGO_HAP_S_EW_R;
}

/* Compute and strategy-owned communication of layer l under strategy s. */
static void layer_add(summary_t *sum, const hpgo_hap_layer_t *l, int s, double fmin, double dt)
{
    double phi = layer_phi(l);
    if (s == HPGO_HAP_S_REP || s == HPGO_HAP_S_EW_R)
        sum->rep += phi / fmin;
    else
        sum->A += phi;
    if (s == HPGO_HAP_S_DP)
        sum->ar += l->k * l->n * dt; /* weight gradient */
    else if (s == HPGO_HAP_S_COL)
        sum->ar += l->m * l->k * dt; /* input gradient (partial sums) */
}

static double layer_cost(const shape_t *sh, const hpgo_hap_layer_t *l, int s, double dt)
{
    summary_t t;
    memset(&t, 0, sizeof t);
    layer_add(&t, l, s, sh->fmin, dt);
    return t.A * sh->u + t.rep + t.ar * sh->c_ar;
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
static void program_summary(const hpgo_hap_problem_t *pb, const int32_t *strat, const shape_t *sh,
                            summary_t *s)
{
    memset(s, 0, sizeof *s);
    const double dt = pb->dtype_bytes;
    int prev = -1;
    for (int32_t l = 0; l < pb->n_layers; l++) {
        const hpgo_hap_layer_t *ly = &pb->layers[l];
        int st = strat[l];
        if (prev >= 0)
            trans_add(s, transition(prev, S_IN[st]), ly->m * ly->k * dt);
        layer_add(s, ly, st, sh->fmin, dt);
        prev = S_OUT[st];
    }
    const hpgo_hap_layer_t *last = &pb->layers[pb->n_layers - 1];
    double bytes = last->m * last->n * dt;
    trans_add(s, end_transition(sh, prev, bytes), bytes);
}

/* Viterbi search at fixed ratios; strat gets the program.  NOPLAN if none. */
static int search(const hpgo_hap_problem_t *pb, uint32_t allowed, const shape_t *sh,
                  int32_t *strat, int8_t *bp_s, int8_t *bp_f, hpgo_err_t *err)
{
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
            double c = in_cost[fi] + layer_cost(sh, ly, s, dt);
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
                            "dp/col/row/rep, element-wise ones one of ew_r/ew_gb/ew_gf)");
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
static int optimise_ratios(const hpgo_hap_problem_t *pb, const int32_t *strat, double *r,
                           double *scratch, hpgo_err_t *err)
{
    const hpgo_hap_cluster_t *c = &pb->cluster;
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
        make_shape(c, scratch, &sh);
        summary_t s;
        program_summary(pb, strat, &sh, &s);
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
        if (ly->kind != HPGO_HAP_LINEAR && ly->kind != HPGO_HAP_ELEMENTWISE)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "layer %d: unknown kind %d", (int)l,
                                ly->kind);
        if (!check_pos(ly->m) || !check_pos(ly->k) || !check_pos(ly->n) ||
            !(isfinite(ly->flops) && ly->flops >= 0.0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "layer %d: sizes must be finite and > 0, FLOPs >= 0", (int)l);
    }
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
    int32_t *prog = malloc((size_t)L * sizeof *prog);
    int8_t *bp_s = malloc((size_t)L * NFORM), *bp_f = malloc((size_t)L * NFORM);
    double *r = malloc((size_t)n * sizeof *r), *r2 = malloc((size_t)n * sizeof *r2);
    double *scratch = malloc((size_t)n * sizeof *scratch);
    if (!prog || !bp_s || !bp_f || !r || !r2 || !scratch) {
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
    make_shape(c, r, &sh);
    rc = search(pb, allowed, &sh, prog, bp_s, bp_f, err);
    if (rc != HPGO_OK)
        goto done;
    summary_t sum;
    breakdown_t best;
    program_summary(pb, prog, &sh, &sum);
    summary_cost(&sum, &sh, &best);
    memcpy(out->strategy, prog, (size_t)L * sizeof *prog);
    memcpy(out->ratios, r, (size_t)n * sizeof *r);
    int32_t rounds = 1;
    if (pb->ratio_mode == HPGO_HAP_RATIO_OPTIMAL) {
        while (rounds < pb->max_rounds + 1) {
            /* LP for the best program, then search again at the new ratios */
            rc = optimise_ratios(pb, out->strategy, r2, scratch, err);
            if (rc != HPGO_OK)
                goto done;
            shape_t sh2;
            make_shape(c, r2, &sh2);
            rc = search(pb, allowed, &sh2, prog, bp_s, bp_f, err);
            if (rc != HPGO_OK)
                goto done;
            /* the searched program is no worse than the old one at r2 */
            program_summary(pb, prog, &sh2, &sum);
            breakdown_t b;
            summary_cost(&sum, &sh2, &b);
            rounds++;
            if (!(b.time < best.time))
                break;
            best = b;
            memcpy(out->strategy, prog, (size_t)L * sizeof *prog);
            memcpy(out->ratios, r2, (size_t)n * sizeof *r2);
        }
        /* the LP of the kept program may still lower its cost */
        rc = optimise_ratios(pb, out->strategy, r2, scratch, err);
        if (rc != HPGO_OK)
            goto done;
        shape_t sh3;
        make_shape(c, r2, &sh3);
        program_summary(pb, out->strategy, &sh3, &sum);
        breakdown_t b;
        summary_cost(&sum, &sh3, &b);
        if (b.time < best.time) {
            best = b;
            memcpy(out->ratios, r2, (size_t)n * sizeof *r2);
        }
    }
    make_shape(c, out->ratios, &sh);
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
    free(bp_s);
    free(bp_f);
    free(r);
    free(r2);
    free(scratch);
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

typedef struct {
    double frac;
    int32_t idx;
} frac_t;

static int cmp_frac(const void *a, const void *b)
{
    const frac_t *x = a, *y = b;
    if (x->frac != y->frac)
        return x->frac > y->frac ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
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
    free(fr);
    return HPGO_OK;
}
