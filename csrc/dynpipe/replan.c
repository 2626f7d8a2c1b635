/* replan.c - DynPipe's re-partitioning, trigger and batch split (replan.h).
 *
 * DESIGN
 * - Score: an event replay of PipeDream's asynchronous 1F1B.  Each stage
 *   owns a fixed op order (warm-up forwards, then forward / backward
 *   alternation); an op starts at max(end of the stage's previous op, end
 *   of its producer + transfer).  The replay sweeps the stages, running
 *   every op whose producer is done, until all 2 S M ops ran: O(S M) ops,
 *   at most 2 S M sweeps in theory, about M in practice.  The start times of
 *   stage 0's forwards give DynPipe's steady-state score.
 * - TOPK enumerates the C(n_pos - 1, S - 1) choices of cuts in
 *   lexicographic order (first minimum wins: deterministic); stage sums come
 *   from prefix sums, so a candidate costs one replay, O(S M).
 * - DP is the classic chain partition DP over (stages, prefix length) with
 *   a lexicographic (bottleneck, total transfer) value and back-pointers,
 *   O(S L^2) time, O(S L) memory, on a non-overlapped model (a stage costs
 *   slowdown * (F + B) plus its in and out transfers); a steepest-descent
 *   local search on the replay score (one cut, one layer per move) then
 *   polishes both the DP split and the current split, and the better one
 *   is the incumbent of a branch and bound over all splits (depth-first over
 *   the cuts, lexicographic; a bound no lower than the incumbent prunes, as
 *   every split below it can at best tie).  The bound (replan.h) is proven
 *   from the 1F1B order alone, so the result is a best split under the
 *   score whenever the search ends within its budget.
 * - Whatever the method, a search result that does not score strictly
 *   better than the current cuts is replaced by them (kept_current).
 * - The trigger is a small state machine over windows (warm-up, baseline,
 *   compare); it allocates only at creation.
 * Nothing here prints or keeps global state; buffers are caller-owned or
 * freed before returning. */
#include "replan.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int finite_nonneg(double x)
{
    return isfinite(x) && x >= 0.0;
}

/* ---- 1F1B replay -------------------------------------------------------------- */

typedef struct {
    int32_t S, M;
    double *fend, *bend; /* S * M op end times */
    double *f0start;     /* M start times of stage 0's forwards */
    int32_t *nf, *nb;    /* per stage: forwards / backwards done */
    double *free_at;     /* per stage: end of its last op */
} replay_ws_t;

static void ws_free(replay_ws_t *w)
{
    free(w->fend);
    free(w->bend);
    free(w->f0start);
    free(w->nf);
    free(w->nb);
    free(w->free_at);
    memset(w, 0, sizeof *w);
}

static int ws_init(replay_ws_t *w, int32_t S, int32_t M, hpgo_err_t *err)
{
    memset(w, 0, sizeof *w);
    if ((int64_t)S * M > ((int64_t)1 << 26))
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "stages x microbatches = %lld exceeds the limit of %lld",
                            (long long)S * M, (long long)1 << 26);
    w->S = S;
    w->M = M;
    size_t n = (size_t)S * (size_t)M;
    w->fend = malloc(n * sizeof *w->fend);
    w->bend = malloc(n * sizeof *w->bend);
    w->f0start = malloc((size_t)M * sizeof *w->f0start);
    w->nf = malloc((size_t)S * sizeof *w->nf);
    w->nb = malloc((size_t)S * sizeof *w->nb);
    w->free_at = malloc((size_t)S * sizeof *w->free_at);
    if (!w->fend || !w->bend || !w->f0start || !w->nf || !w->nb || !w->free_at) {
        ws_free(w);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the 1F1B replay");
    }
    return HPGO_OK;
}

/* Replay with per-stage times F, B and transfers C (S-1 entries or NULL). */
static int replay(replay_ws_t *w, const double *F, const double *B, const double *C, double *t_mb,
                  hpgo_err_t *err)
{
    const int32_t S = w->S, M = w->M;
    for (int32_t s = 0; s < S; s++) {
        w->nf[s] = w->nb[s] = 0;
        w->free_at[s] = 0.0;
    }
    int64_t left = 2 * (int64_t)S * M;
    while (left > 0) {
        int progress = 0;
        for (int32_t s = 0; s < S; s++) {
            const int32_t warm = S - s - 1;
            for (;;) {
                int32_t nf = w->nf[s], nb = w->nb[s];
                if (nf == M && nb == M)
                    break;
                int fwd = nf < M && (nf < warm || nf - warm == nb);
                double ready;
                if (fwd) {
                    if (s == 0) {
                        ready = 0.0;
                    } else {
                        if (w->nf[s - 1] <= nf)
                            break;
                        ready = w->fend[(size_t)(s - 1) * M + nf] + (C ? C[s - 1] : 0.0);
                    }
                    double start = ready > w->free_at[s] ? ready : w->free_at[s];
                    if (s == 0)
                        w->f0start[nf] = start;
                    w->free_at[s] = start + F[s];
                    w->fend[(size_t)s * M + nf] = w->free_at[s];
                    w->nf[s] = nf + 1;
                } else {
                    if (s == S - 1) {
                        ready = 0.0; /* its forward is the stage's own earlier op */
                    } else {
                        if (w->nb[s + 1] <= nb)
                            break;
                        ready = w->bend[(size_t)(s + 1) * M + nb] + (C ? C[s] : 0.0);
                    }
                    double start = ready > w->free_at[s] ? ready : w->free_at[s];
                    w->free_at[s] = start + B[s];
                    w->bend[(size_t)s * M + nb] = w->free_at[s];
                    w->nb[s] = nb + 1;
                }
                left--;
                progress = 1;
            }
        }
        if (!progress)
            return hpgo_err_set(err, HPGO_E_INTERNAL, 0, "1F1B replay deadlocked");
    }
    int32_t K = 0;
    for (int32_t j = 1; (int64_t)j * S < (int64_t)M - S; j++)
        K = j;
    *t_mb = (w->f0start[(size_t)K * S] - w->f0start[0]) / ((double)K * S);
    return HPGO_OK;
}

static int check_sim_size(int32_t S, int32_t M, hpgo_err_t *err)
{
    if (S < 1 || S > HPGO_REPLAN_MAX_STAGES)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "number of stages must be in 1..%d, got %d",
                            HPGO_REPLAN_MAX_STAGES, (int)S);
    if (M > HPGO_REPLAN_MAX_MICROBATCHES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "microbatches must be at most %d, got %d",
                            HPGO_REPLAN_MAX_MICROBATCHES, (int)M);
    if ((int64_t)M <= 2 * (int64_t)S)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "microbatches must exceed twice the number of stages (%d), got %d",
                            2 * (int)S, (int)M);
    return HPGO_OK;
}

int hpgo_replan_score(int32_t n_stages, const double *fwd, const double *bwd, const double *comm,
                      int32_t microbatches, double *t_mb, hpgo_err_t *err)
{
    int rc = check_sim_size(n_stages, microbatches, err);
    if (rc != HPGO_OK)
        return rc;
    if (!fwd || !bwd || !t_mb)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    for (int32_t s = 0; s < n_stages; s++) {
        if (!finite_nonneg(fwd[s]) || !finite_nonneg(bwd[s]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: forward and backward times must be finite and >= 0",
                                (int)s);
        if (comm && s < n_stages - 1 && !finite_nonneg(comm[s]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "transfer %d must be finite and >= 0", (int)s);
    }
    replay_ws_t w;
    rc = ws_init(&w, n_stages, microbatches, err);
    if (rc != HPGO_OK)
        return rc;
    rc = replay(&w, fwd, bwd, comm, t_mb, err);
    ws_free(&w);
    return rc;
}

/* ---- re-partitioning ------------------------------------------------------------- */

typedef struct {
    int32_t L, S;
    double *pf, *pb; /* prefix sums, L + 1 */
    double *F, *B, *C; /* per-stage scratch */
    replay_ws_t ws;
} ctx_t;

/* Score the split whose stage s covers layers [cut[s], cut[s+1]) (cut[0] = 0, cut[S] = L). */
static int score_cuts(ctx_t *c, const hpgo_replan_input_t *in, const int32_t *cut, double *t,
                      hpgo_err_t *err)
{
    if (hpgo_cancelled(in->cancel)) /* a score costs O(S * M): reading the flag is free */
        return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "re-planning was cancelled");
    for (int32_t s = 0; s < c->S; s++) {
        double sd = in->slowdown[s];
        c->F[s] = sd * (c->pf[cut[s + 1]] - c->pf[cut[s]]);
        c->B[s] = sd * (c->pb[cut[s + 1]] - c->pb[cut[s]]);
        if (s < c->S - 1)
            c->C[s] = in->comm ? in->comm[cut[s + 1] - 1] : 0.0;
    }
    return replay(&c->ws, c->F, c->B, c->C, t, err);
}

static int validate(const hpgo_replan_input_t *in, hpgo_err_t *err)
{
    if (!in)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL input");
    if (in->n_layers < 1 || in->n_layers > HPGO_REPLAN_MAX_LAYERS)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "number of layers must be in 1..%d, got %d",
                            HPGO_REPLAN_MAX_LAYERS, (int)in->n_layers);
    int rc = check_sim_size(in->n_stages, in->microbatches, err);
    if (rc != HPGO_OK)
        return rc;
    if (in->n_stages > in->n_layers)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "%d stages cannot split %d layers",
                            (int)in->n_stages, (int)in->n_layers);
    if (!in->forward || !in->backward || !in->current || !in->slowdown)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    for (int32_t l = 0; l < in->n_layers; l++) {
        if (!finite_nonneg(in->forward[l]) || !finite_nonneg(in->backward[l]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "layer %d: forward and backward times must be finite and >= 0",
                                (int)l);
        if (in->comm && !finite_nonneg(in->comm[l]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "layer %d: transfer time must be finite and >= 0", (int)l);
        if (in->param_bytes && !finite_nonneg(in->param_bytes[l]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "layer %d: parameter bytes must be finite and >= 0", (int)l);
    }
    int64_t total = 0;
    for (int32_t s = 0; s < in->n_stages; s++) {
        if (in->current[s] < 1)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "stage %d of the current split has %d layers",
                                (int)s, (int)in->current[s]);
        total += in->current[s];
        if (!(isfinite(in->slowdown[s]) && in->slowdown[s] > 0.0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "slowdown of stage %d must be finite and > 0", (int)s);
    }
    if (total != in->n_layers)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the current split covers %lld layers, the chain has %d",
                            (long long)total, (int)in->n_layers);
    if (in->method != HPGO_REPLAN_TOPK && in->method != HPGO_REPLAN_DP)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown method %d", in->method);
    if (in->method == HPGO_REPLAN_TOPK && in->top_k < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "top_k must be >= 1, got %d", (int)in->top_k);
    if (!(isfinite(in->bandwidth) && in->bandwidth > 0.0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "bandwidth must be finite and > 0");
    if (!finite_nonneg(in->optimizer_factor) || !finite_nonneg(in->fixed_cost))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "optimizer_factor and fixed_cost must be finite and >= 0");
    if (isnan(in->remaining_iterations) || in->remaining_iterations < 0.0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "remaining_iterations must be >= 0 (infinity allowed)");
    if (!(isfinite(in->microbatches_per_iteration) && in->microbatches_per_iteration > 0.0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "microbatches_per_iteration must be finite and > 0");
    /* the DP's work, before any allocation or score (top-k's partitions are
     * counted once its candidate cuts are known, see run_topk) */
    double work = (double)in->n_stages * (double)in->n_layers * (double)in->n_layers / 2.0;
    if (in->method == HPGO_REPLAN_DP && work > HPGO_REPLAN_MAX_WORK)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "the DP would take %d stages x %d layers^2 / 2 = %.6g steps, over the "
                            "limit of %.6g (HPGO_REPLAN_MAX_WORK); merge neighbouring layers or "
                            "use method 'topk'",
                            (int)in->n_stages, (int)in->n_layers, work, HPGO_REPLAN_MAX_WORK);
    return HPGO_OK;
}

/* C(n, k) saturated at limit + 1. */
static int64_t binom_sat(int64_t n, int64_t k, int64_t limit)
{
    if (k < 0 || k > n)
        return 0;
    if (k > n - k)
        k = n - k;
    double v = 1.0;
    for (int64_t i = 1; i <= k; i++) {
        v = v * (double)(n - k + i) / (double)i;
        if (v > (double)limit)
            return limit + 1;
    }
    return (int64_t)(v + 0.5);
}

static int run_topk(ctx_t *c, const hpgo_replan_input_t *in, int32_t *best_cut, double *best_t,
                    int64_t *n_cand, hpgo_err_t *err)
{
    const int32_t L = c->L, S = c->S;
    int rc = HPGO_OK;
    double *p = malloc((size_t)L * sizeof *p);
    char *is_pos = calloc((size_t)L + 1, 1);
    int32_t *opts = malloc((size_t)L * sizeof *opts);
    int32_t *idx = malloc((size_t)S * sizeof *idx);
    int32_t *cut = malloc(((size_t)S + 1) * sizeof *cut);
    if (!p || !is_pos || !opts || !idx || !cut) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the re-partitioner");
        goto done;
    }
    for (int32_t l = 0; l < L; l++) {
        double t = in->forward[l] + in->backward[l];
        if (in->comm) {
            if (l > 0)
                t += in->comm[l - 1];
            if (l < L - 1)
                t += in->comm[l];
        }
        p[l] = t;
    }
    /* top-k layers of every current stage (ties: lower index); a cut after each */
    int32_t start = 0;
    for (int32_t s = 0; s < S; s++) {
        int32_t end = start + in->current[s];
        int32_t k = in->top_k < end - start ? in->top_k : end - start;
        for (int32_t r = 0; r < k; r++) {
            int32_t arg = -1;
            for (int32_t l = start; l < end; l++)
                if (!is_pos[l + 1] && (arg < 0 || p[l] > p[arg]))
                    arg = l;
            is_pos[arg + 1] = 1;
        }
        start = end;
    }
    int32_t n_pos = 0;
    for (int32_t q = 1; q <= L; q++)
        if (is_pos[q])
            opts[n_pos++] = q;
    int32_t n_opt = n_pos - 1; /* the last position merges into the tail block */
    int64_t total = binom_sat(n_opt, S - 1, HPGO_REPLAN_MAX_CANDIDATES);
    if (total > HPGO_REPLAN_MAX_CANDIDATES) {
        rc = hpgo_err_set(err, HPGO_E_LIMIT, 0,
                          "top-k search would score more than %d partitions (C(%d, %d)); "
                          "use the DP method or a smaller top_k",
                          HPGO_REPLAN_MAX_CANDIDATES, (int)n_opt, (int)(S - 1));
        goto done;
    }
    double work = (double)total * S * in->microbatches * HPGO_REPLAN_REPLAY_STEP;
    if (work > HPGO_REPLAN_MAX_WORK) {
        rc = hpgo_err_set(err, HPGO_E_LIMIT, 0,
                          "top-k search would take %lld partitions x %d stages x %d micro-batches "
                          "x %g (HPGO_REPLAN_REPLAY_STEP) = %.6g steps, over the limit of %.6g "
                          "(HPGO_REPLAN_MAX_WORK); use fewer micro-batches, a smaller top_k or "
                          "the DP method",
                          (long long)total, (int)S, (int)in->microbatches,
                          HPGO_REPLAN_REPLAY_STEP, work, HPGO_REPLAN_MAX_WORK);
        goto done;
    }
    for (int32_t i = 0; i < S - 1; i++)
        idx[i] = i;
    *best_t = INFINITY;
    *n_cand = 0;
    cut[0] = 0;
    cut[S] = L;
    for (;;) {
        for (int32_t i = 0; i < S - 1; i++)
            cut[i + 1] = opts[idx[i]];
        double t;
        rc = score_cuts(c, in, cut, &t, err);
        if (rc != HPGO_OK)
            goto done;
        (*n_cand)++;
        if (t < *best_t) {
            *best_t = t;
            memcpy(best_cut, cut, ((size_t)S + 1) * sizeof *cut);
        }
        int32_t i = S - 2;
        while (i >= 0 && idx[i] == n_opt - (S - 1) + i)
            i--;
        if (i < 0)
            break;
        idx[i]++;
        for (int32_t j = i + 1; j < S - 1; j++)
            idx[j] = idx[j - 1] + 1;
    }
done:
    free(p);
    free(is_pos);
    free(opts);
    free(idx);
    free(cut);
    return rc;
}

static int run_dp(ctx_t *c, const hpgo_replan_input_t *in, int32_t *best_cut, hpgo_err_t *err)
{
    const int32_t L = c->L, S = c->S;
    size_t n = (size_t)(L + 1);
    double *vb = malloc(2 * n * sizeof *vb), *vc = malloc(2 * n * sizeof *vc);
    int32_t *bp = malloc((size_t)S * n * sizeof *bp);
    if (!vb || !vc || !bp) {
        free(vb);
        free(vc);
        free(bp);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the re-partitioning DP");
    }
    double *pb_ = vb, *pc_ = vc, *nb_ = vb + n, *nc_ = vc + n;
    for (int32_t j = 0; j <= L; j++) {
        pb_[j] = j >= 1 ? in->slowdown[0] * ((c->pf[j] - c->pf[0]) + (c->pb[j] - c->pb[0])) +
                              ((in->comm && j < L) ? in->comm[j - 1] : 0.0)
                        : INFINITY;
        pc_[j] = 0.0;
        bp[j] = 0;
    }
    for (int32_t s = 1; s < S; s++) {
        double sd = in->slowdown[s];
        for (int32_t j = 0; j <= L; j++) {
            if (hpgo_cancelled(in->cancel)) {
                free(vb);
                free(vc);
                free(bp);
                return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "re-planning was cancelled");
            }
            nb_[j] = INFINITY;
            nc_[j] = INFINITY;
            bp[(size_t)s * n + j] = -1;
            /* stage s covers [i, j): i >= s (earlier stages need a layer each) */
            for (int32_t i = s; i < j; i++) {
                if (!isfinite(pb_[i]))
                    continue;
                /* non-overlapped model: the stage also pays its in / out transfers */
                double cin = in->comm ? in->comm[i - 1] : 0.0;
                double cout = (in->comm && j < L) ? in->comm[j - 1] : 0.0;
                double w = sd * ((c->pf[j] - c->pf[i]) + (c->pb[j] - c->pb[i])) + cin + cout;
                double prev = pb_[i];
                double b = prev > w ? prev : w;
                double cc = pc_[i] + cin;
                if (b < nb_[j] || (b == nb_[j] && cc < nc_[j])) {
                    nb_[j] = b;
                    nc_[j] = cc;
                    bp[(size_t)s * n + j] = i;
                }
            }
        }
        double *t = pb_;
        pb_ = nb_;
        nb_ = t;
        t = pc_;
        pc_ = nc_;
        nc_ = t;
    }
    best_cut[S] = L;
    int32_t j = L;
    for (int32_t s = S - 1; s >= 1; s--) {
        j = bp[(size_t)s * n + j];
        best_cut[s] = j;
    }
    best_cut[0] = 0;
    free(vb);
    free(vc);
    free(bp);
    return HPGO_OK;
}

/* Steepest descent on the replay score, moving one cut by one layer at a
 * time (first best move on ties), from cut (updated in place). */
static int local_search(ctx_t *c, const hpgo_replan_input_t *in, int32_t *cut, double *t,
                        int64_t *n_cand, hpgo_err_t *err)
{
    const int32_t S = c->S;
    int rc = score_cuts(c, in, cut, t, err);
    if (rc != HPGO_OK)
        return rc;
    (*n_cand)++;
    for (int64_t round = 0; round < 10 * (int64_t)c->L + 10; round++) {
        int32_t best_i = -1, best_d = 0;
        double best_t = *t;
        for (int32_t i = 1; i < S; i++) {
            for (int32_t d = -1; d <= 1; d += 2) {
                int32_t v = cut[i] + d;
                if (v <= cut[i - 1] || v >= cut[i + 1])
                    continue;
                int32_t old = cut[i];
                cut[i] = v;
                double tt;
                rc = score_cuts(c, in, cut, &tt, err);
                cut[i] = old;
                if (rc != HPGO_OK)
                    return rc;
                (*n_cand)++;
                if (tt < best_t) {
                    best_t = tt;
                    best_i = i;
                    best_d = d;
                }
            }
        }
        if (best_i < 0)
            break;
        cut[best_i] += best_d;
        *t = best_t;
    }
    return HPGO_OK;
}

/* Branch and bound over every split (see replan.h).  best_cut / *best_t
 * hold the incumbent and are replaced by strictly faster splits.  *exact:
 * 1 when the whole tree was searched within the budget. */
static int run_exact(ctx_t *c, const hpgo_replan_input_t *in, int32_t *best_cut, double *best_t,
                     int64_t *n_cand, int *exact, hpgo_err_t *err)
{
    const int32_t L = c->L, S = c->S;
    *exact = 0;
    if (S == 1) {
        *exact = 1;
        return HPGO_OK;
    }
    int32_t K = 0;
    for (int32_t j = 1; (int64_t)j * S < (int64_t)in->microbatches - S; j++)
        K = j;
    /* the score's proven bound factor: stage 0's forward K S waits for
     * K S - S + 1 forward and backward passes of every stage (less 1e-12, a
     * margin for the rounding of the sums and of the replay) */
    const double alpha = ((double)K * S - S + 1.0) / ((double)K * S) * (1.0 - 1e-12);
    int32_t *cut = malloc(((size_t)S + 1) * sizeof *cut);
    double *mx = malloc(((size_t)S + 1) * sizeof *mx);   /* max sd*W over stages < s */
    double *inv = malloc(((size_t)S + 1) * sizeof *inv); /* sum of 1/sd over stages >= s */
    if (!cut || !mx || !inv) {
        free(cut);
        free(mx);
        free(inv);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the re-partitioner");
    }
    inv[S] = 0.0;
    for (int32_t s = S - 1; s >= 0; s--)
        inv[s] = inv[s + 1] + 1.0 / in->slowdown[s];
    const double total = c->pf[L] + c->pb[L];
    const double step = (double)S * (double)in->microbatches;
    double spent = 0.0;
    int rc = HPGO_OK, over = 0;
    cut[0] = 0;
    cut[S] = L;
    mx[0] = 0.0;
    /* depth-first: cut[s] for s = 1..S-1; cut[s] = cut[s-1] before the first try */
    int32_t s = 1;
    cut[1] = 0;
    while (s >= 1) {
        /* every node costs about a replay step; the cancel flag is free */
        spent += 1.0;
        if (spent > HPGO_REPLAN_EXACT_BUDGET) {
            over = 1;
            break;
        }
        if (((int64_t)spent & 0xffff) == 0 && hpgo_cancelled(in->cancel)) {
            rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "re-planning was cancelled");
            break;
        }
        int32_t v = cut[s] + 1;
        if (v > L - (S - s)) { /* stage s-1 can grow no further */
            s--;
            continue;
        }
        cut[s] = v;
        double w = c->pf[v] - c->pf[cut[s - 1]] + c->pb[v] - c->pb[cut[s - 1]];
        double m = in->slowdown[s - 1] * w;
        if (mx[s - 1] > m)
            m = mx[s - 1];
        /* stage s-1 only grows as cut[s] grows: past the incumbent here, every
         * later value of cut[s] is too */
        if (alpha * m >= *best_t) {
            s--;
            continue;
        }
        double rest = (total - c->pf[v] - c->pb[v]) / inv[s];
        if (alpha * rest >= *best_t)
            continue;
        if (s < S - 1) {
            mx[s] = m;
            cut[s + 1] = v;
            s++;
            continue;
        }
        double last = in->slowdown[S - 1] * (total - c->pf[v] - c->pb[v]);
        if (alpha * (m > last ? m : last) >= *best_t)
            continue;
        if (spent + step > HPGO_REPLAN_EXACT_BUDGET) {
            over = 1;
            break;
        }
        spent += step;
        double t;
        rc = score_cuts(c, in, cut, &t, err);
        if (rc != HPGO_OK)
            break;
        (*n_cand)++;
        if (t < *best_t) {
            *best_t = t;
            memcpy(best_cut, cut, ((size_t)S + 1) * sizeof *cut);
        }
    }
    if (rc == HPGO_OK && !over)
        *exact = 1;
    free(cut);
    free(mx);
    free(inv);
    return rc;
}

int hpgo_replan_run(const hpgo_replan_input_t *in, hpgo_replan_result_t *out, hpgo_err_t *err)
{
    int rc = validate(in, err);
    if (rc != HPGO_OK)
        return rc;
    if (!out || !out->counts)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL result buffer");
    const int32_t L = in->n_layers, S = in->n_stages;
    ctx_t c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.S = S;
    int32_t *cur = malloc(((size_t)S + 1) * sizeof *cur);
    int32_t *best = malloc(((size_t)S + 1) * sizeof *best);
    c.pf = malloc(((size_t)L + 1) * sizeof *c.pf);
    c.pb = malloc(((size_t)L + 1) * sizeof *c.pb);
    c.F = malloc((size_t)S * sizeof *c.F);
    c.B = malloc((size_t)S * sizeof *c.B);
    c.C = malloc((size_t)S * sizeof *c.C);
    if (!cur || !best || !c.pf || !c.pb || !c.F || !c.B || !c.C) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the re-partitioner");
        goto done;
    }
    rc = ws_init(&c.ws, S, in->microbatches, err);
    if (rc != HPGO_OK)
        goto done;
    c.pf[0] = c.pb[0] = 0.0;
    for (int32_t l = 0; l < L; l++) {
        c.pf[l + 1] = c.pf[l] + in->forward[l];
        c.pb[l + 1] = c.pb[l] + in->backward[l];
    }
    cur[0] = 0;
    for (int32_t s = 0; s < S; s++)
        cur[s + 1] = cur[s] + in->current[s];
    double t_cur, t_new;
    rc = score_cuts(&c, in, cur, &t_cur, err);
    if (rc != HPGO_OK)
        goto done;
    if (!isfinite(c.pf[L]) || !isfinite(c.pb[L]) || !isfinite(t_cur)) {
        /* sums past the largest double: no search can compare splits (the
         * DP would reconstruct cuts from no choice at all) */
        rc = hpgo_err_set(err, HPGO_E_INVALID, 0,
                          "the scores are not finite: the layer times (or their sums times "
                          "the slowdowns) are too large for doubles");
        goto done;
    }
    int64_t n_cand = 0;
    out->exact = 0;
    if (in->method == HPGO_REPLAN_TOPK) {
        rc = run_topk(&c, in, best, &t_new, &n_cand, err);
    } else {
        /* DP on the non-overlapped model, then local search on the replay
         * score from the DP split and from the current one; the better wins
         * (ties: the DP's) */
        rc = run_dp(&c, in, best, err);
        if (rc == HPGO_OK)
            rc = local_search(&c, in, best, &t_new, &n_cand, err);
        if (rc == HPGO_OK) {
            int32_t *alt = malloc(((size_t)S + 1) * sizeof *alt);
            double t_alt;
            if (!alt) {
                rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the re-partitioner");
            } else {
                memcpy(alt, cur, ((size_t)S + 1) * sizeof *cur);
                rc = local_search(&c, in, alt, &t_alt, &n_cand, err);
                if (rc == HPGO_OK && t_alt < t_new) {
                    memcpy(best, alt, ((size_t)S + 1) * sizeof *alt);
                    t_new = t_alt;
                }
                free(alt);
            }
        }
        if (rc == HPGO_OK)
            rc = run_exact(&c, in, best, &t_new, &n_cand, &out->exact, err);
    }
    if (rc != HPGO_OK)
        goto done;
    /* never propose what the score says is slower than staying: DynPipe's
     * top-k positions need not include the current cuts, and with no
     * slowdown they often miss them */
    out->search_time = t_new;
    if (out->search_counts)
        for (int32_t s = 0; s < S; s++)
            out->search_counts[s] = best[s + 1] - best[s];
    out->kept_current = !(t_new < t_cur);
    if (out->kept_current) {
        memcpy(best, cur, ((size_t)S + 1) * sizeof *cur);
        t_new = t_cur;
    }
    out->current_time = t_cur;
    out->new_time = t_new;
    out->candidates = n_cand;
    for (int32_t s = 0; s < S; s++)
        out->counts[s] = best[s + 1] - best[s];
    /* layers whose stage changes move with their weights and optimizer state */
    double moved = 0.0;
    int same = 1;
    for (int32_t so = 0, sn = 0, l = 0; l < L; l++) {
        while (l >= cur[so + 1])
            so++;
        while (l >= best[sn + 1])
            sn++;
        if (so != sn) {
            same = 0;
            moved += in->param_bytes ? in->param_bytes[l] : 0.0;
        }
    }
    out->moved_bytes = moved;
    out->drain_time = same ? 0.0 : (double)(S - 1) * t_cur;
    out->migration_cost =
        same ? 0.0
             : moved * (1.0 + in->optimizer_factor) / in->bandwidth + out->drain_time + in->fixed_cost;
    /* 0 * infinity would be NaN: no difference means no gain */
    out->gain = t_cur == t_new ? 0.0
                               : (t_cur - t_new) * in->microbatches_per_iteration *
                                     in->remaining_iterations;
    out->do_switch = !same && t_new < t_cur && out->gain > out->migration_cost;
done:
    ws_free(&c.ws);
    free(cur);
    free(best);
    free(c.pf);
    free(c.pb);
    free(c.F);
    free(c.B);
    free(c.C);
    return rc;
}

/* ---- trigger -------------------------------------------------------------------- */

struct hpgo_trigger {
    hpgo_trigger_params_t p;
    int32_t in_window;   /* samples in the window in progress */
    int32_t windows;     /* windows completed since the last reset */
    int32_t run;         /* consecutive flagged windows */
    double *sum;         /* n_stages: window in progress */
    double *base;        /* n_stages: baseline window */
};

int hpgo_trigger_new(const hpgo_trigger_params_t *p, hpgo_trigger_t **out, hpgo_err_t *err)
{
    if (!p || !out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    *out = NULL;
    if (p->n_stages < 1 || p->n_stages > HPGO_REPLAN_MAX_STAGES)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "number of stages must be in 1..%d, got %d",
                            HPGO_REPLAN_MAX_STAGES, (int)p->n_stages);
    if (p->window < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "window must be >= 1, got %d", (int)p->window);
    if (p->warmup_windows < 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "warmup_windows must be >= 0, got %d",
                            (int)p->warmup_windows);
    if (p->patience < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "patience must be >= 1, got %d",
                            (int)p->patience);
    if (!(isfinite(p->low) && isfinite(p->high) && p->low >= 0.0 && p->low < 1.0 &&
          p->high > 1.0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the band must satisfy 0 <= low < 1 < high, got (%g, %g)", p->low,
                            p->high);
    hpgo_trigger_t *t = calloc(1, sizeof *t);
    if (!t)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    t->p = *p;
    t->sum = calloc((size_t)p->n_stages, sizeof *t->sum);
    t->base = calloc((size_t)p->n_stages, sizeof *t->base);
    if (!t->sum || !t->base) {
        hpgo_trigger_free(t);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    }
    *out = t;
    return HPGO_OK;
}

void hpgo_trigger_free(hpgo_trigger_t *t)
{
    if (!t)
        return;
    free(t->sum);
    free(t->base);
    free(t);
}

void hpgo_trigger_reset(hpgo_trigger_t *t)
{
    if (!t)
        return;
    t->in_window = t->windows = t->run = 0;
    for (int32_t s = 0; s < t->p.n_stages; s++)
        t->sum[s] = t->base[s] = 0.0;
}


/* A stage's window over its baseline.  A baseline of no time (0, or
 * subnormal: under DBL_MIN seconds, below any clock) carries no signal
 * (1); a quotient past DBL_MAX is DBL_MAX, never infinity. */
static double trigger_ratio(double sum, double base)
{
    if (!(base >= DBL_MIN))
        return 1.0;
    double rho = sum / base;
    return rho > DBL_MAX ? DBL_MAX : rho;
}

int hpgo_trigger_push(hpgo_trigger_t *t, const double *sample, int *kind, double *ratios,
                      hpgo_err_t *err)
{
    if (!t || !sample || !kind)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    const int32_t S = t->p.n_stages;
    *kind = HPGO_TRIGGER_NONE;
    for (int32_t s = 0; s < S; s++)
        if (!finite_nonneg(sample[s]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "sample value %d must be finite and >= 0", (int)s);
    for (int32_t s = 0; s < S; s++)
        if (!isfinite(t->sum[s] + sample[s]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "sample value %d (%g) makes its window's sum overflow", (int)s,
                                sample[s]);
    for (int32_t s = 0; s < S; s++)
        t->sum[s] += sample[s];
    if (++t->in_window < t->p.window)
        return HPGO_OK;
    t->in_window = 0;
    if (t->windows < t->p.warmup_windows) {
        t->windows++;
    } else if (t->windows == t->p.warmup_windows) {
        memcpy(t->base, t->sum, (size_t)S * sizeof *t->sum);
        t->windows++;
    } else {
        int slow = 0, fast = 0;
        for (int32_t s = 0; s < S; s++) {
            double rho = trigger_ratio(t->sum[s], t->base[s]);
            if (rho >= t->p.high)
                slow = 1;
            else if (rho <= t->p.low)
                fast = 1;
        }
        t->run = (slow || fast) ? t->run + 1 : 0;
        if (t->run >= t->p.patience) {
            *kind = slow ? HPGO_TRIGGER_SLOWDOWN : HPGO_TRIGGER_SPEEDUP;
            if (ratios)
                for (int32_t s = 0; s < S; s++) {
                    double rho = trigger_ratio(t->sum[s], t->base[s]);
                    ratios[s] = (rho >= t->p.high || rho <= t->p.low) ? rho : 1.0;
                }
            t->run = 0;
            if (t->p.rebaseline) {
                hpgo_trigger_reset(t);
                return HPGO_OK;
            }
        }
    }
    for (int32_t s = 0; s < S; s++)
        t->sum[s] = 0.0;
    return HPGO_OK;
}

/* ---- batch split -------------------------------------------------------------------- */

static int64_t round_half_even(double x)
{
    double f = floor(x);
    double d = x - f;
    int64_t r = (int64_t)f;
    if (d > 0.5 || (d == 0.5 && (r % 2 != 0)))
        r++;
    return r;
}

int hpgo_split_batch(int64_t batch, int32_t n, const double *w, int64_t *out, hpgo_err_t *err)
{
    if (!w || !out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    if (n < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "need at least one replica, got %d", (int)n);
    if (batch < 0 || batch > ((int64_t)1 << 50))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "batch must be in 0..2^50, got %lld",
                            (long long)batch);
    double total = 0.0;
    for (int32_t r = 0; r < n; r++) {
        if (!(isfinite(w[r]) && w[r] > 0.0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "weight %d must be finite and > 0",
                                (int)r);
        total += w[r];
    }
    if (!isfinite(total))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "the weights sum to infinity");
    int64_t sum = 0;
    for (int32_t r = 0; r < n; r++) {
        out[r] = round_half_even((double)batch * (w[r] / total));
        sum += out[r];
    }
    int64_t diff = batch - sum;
    int64_t q = diff / n, rem = diff % n;
    if (rem < 0) { /* floor division, as DynPipe's Python */
        rem += n;
        q -= 1;
    }
    for (int32_t r = 0; r < n; r++)
        out[r] += q + (r < rem ? 1 : 0);
    for (int32_t r = 0; r < n; r++) {
        while (out[r] < 0) {
            int32_t big = 0;
            for (int32_t j = 1; j < n; j++)
                if (out[j] > out[big])
                    big = j;
            out[big]--;
            out[r]++;
        }
    }
    return HPGO_OK;
}

int hpgo_slice_table(int32_t n_send, const int64_t *send, int32_t n_recv, const int64_t *recv,
                     int64_t *out, hpgo_err_t *err)
{
    if (!send || !recv || !out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "NULL argument");
    if (n_send < 1 || n_recv < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "both sides need at least one replica");
    int64_t ts = 0, tr = 0;
    for (int32_t i = 0; i < n_send; i++) {
        if (send[i] < 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "sender %d holds a negative count",
                                (int)i);
        ts += send[i];
    }
    for (int32_t j = 0; j < n_recv; j++) {
        if (recv[j] < 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "receiver %d holds a negative count",
                                (int)j);
        tr += recv[j];
    }
    if (ts != tr)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "senders hold %lld samples but receivers expect %lld", (long long)ts,
                            (long long)tr);
    memset(out, 0, (size_t)n_send * (size_t)n_recv * sizeof *out);
    int64_t ls = n_send > 0 ? send[0] : 0, lr = recv[0];
    int32_t i = 0, j = 0;
    while (i < n_send && j < n_recv) {
        if (ls == 0) {
            if (++i < n_send)
                ls = send[i];
            continue;
        }
        if (lr == 0) {
            if (++j < n_recv)
                lr = recv[j];
            continue;
        }
        int64_t x = ls < lr ? ls : lr;
        out[(size_t)i * n_recv + j] += x;
        ls -= x;
        lr -= x;
    }
    return HPGO_OK;
}
