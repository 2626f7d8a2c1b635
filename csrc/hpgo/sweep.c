/* sweep.c - many planning cases at once (see sweep.h).
 *
 * DESIGN: one job per (gbs, layout) case on a pthread pool; each job builds
 * its own scaled model copy, computes the data-parallel figures and runs the
 * whole orchestration single-threaded, writing only its own row.  With fewer
 * cases than threads the spare threads go to the candidates inside each case
 * instead (hpgo_orchestrate's own pool).  No shared mutable state. */
#include "sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataparallel.h"
#include "pool.h"

typedef struct sweep_ctx {
    const hpgo_model_t *base;
    const hpgo_topo_t *const *layouts;
    int32_t n_layouts;
    const uint32_t *gbs;
    hpgo_plan_opts_t inner;
    hpgo_sweep_t *s;
    int *rcs;
    hpgo_err_t *errs;
} sweep_ctx_t;

static int run_case(sweep_ctx_t *C, int64_t job, hpgo_err_t *err)
{
    hpgo_sweep_row_t *row = &C->s->rows[job];
    if (hpgo_cancelled(C->inner.cancel))
        return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the sweep was cancelled");
    const hpgo_topo_t *t = C->layouts[row->layout];
    hpgo_model_t *m = NULL;
    int rc = hpgo_model_normalized_copy(C->base, row->gbs, &m, err);
    if (rc != HPGO_OK)
        return rc;
    row->dp = hpgo_dp_speedup(t, m);
    uint32_t ga = 0;
    hpgo_err_t gerr;
    hpgo_err_clear(&gerr);
    row->ga_status = hpgo_current_ga_iter_size(t, m, &ga, &gerr);
    if (row->ga_status == HPGO_OK) {
        rc = hpgo_dp_ga_overlap_speedup(t, m, ga, 1, &row->dp_p3, err);
        if (rc == HPGO_OK)
            rc = hpgo_dp_ga_overlap_speedup(t, m, ga, 0, &row->dp_overlap, err);
    } else if (row->ga_status == HPGO_E_NOPLAN) {
        snprintf(row->ga_reason, sizeof row->ga_reason, "%s", gerr.msg);
    } else {
        rc = row->ga_status;
        *err = gerr;
    }
    if (rc == HPGO_OK)
        rc = hpgo_orchestrate(m, t, &C->inner, &row->orch, err);
    hpgo_model_free(m);
    return rc;
}

static void sweep_job(void *ctx, int64_t job)
{
    sweep_ctx_t *C = ctx;
    C->rcs[job] = run_case(C, job, &C->errs[job]);
}

int hpgo_sweep_run(const hpgo_model_t *base, const hpgo_topo_t *const *layouts, int32_t n_layouts,
                   const uint32_t *gbs, int32_t n_gbs, const hpgo_plan_opts_t *opts,
                   hpgo_sweep_t **out, hpgo_err_t *err)
{
    *out = NULL;
    if (n_layouts < 1 || n_gbs < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "a sweep needs at least one batch size "
                                                    "and one device layout");
    for (int32_t g = 0; g < n_gbs; g++)
        if (gbs[g] == 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "global batch sizes must be >= 1");
    int64_t n = (int64_t)n_gbs * n_layouts;
    hpgo_sweep_t *s = calloc(1, sizeof *s);
    int *rcs = calloc((size_t)n, sizeof *rcs);
    hpgo_err_t *errs = calloc((size_t)n, sizeof *errs);
    if (s)
        s->rows = calloc((size_t)n, sizeof *s->rows);
    if (!s || !s->rows || !rcs || !errs) {
        free(rcs);
        free(errs);
        hpgo_sweep_free(s);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for the sweep");
    }
    s->n = (int32_t)n;
    for (int64_t k = 0; k < n; k++) {
        s->rows[k].gbs = gbs[k / n_layouts];
        s->rows[k].layout = (int32_t)(k % n_layouts);
    }
    int threads = opts && opts->threads > 0 ? opts->threads : hpgo_default_threads();
    sweep_ctx_t C = {base, layouts, n_layouts, gbs, {0, 1, 0}, s, rcs, errs};
    if (opts) {
        C.inner.exhaustive = opts->exhaustive;
        C.inner.max_bytes = opts->max_bytes;
        C.inner.cancel = opts->cancel;
    }
    /* few cases: parallelise inside each case instead */
    if (n < threads)
        C.inner.threads = threads;
    int rc = hpgo_pool_map(n < threads ? 1 : threads, n, sweep_job, &C, err);
    for (int64_t k = 0; rc == HPGO_OK && k < n; k++) {
        if (rcs[k] != HPGO_OK) {
            rc = rcs[k];
            if (err)
                *err = errs[k];
        }
    }
    free(rcs);
    free(errs);
    if (rc != HPGO_OK) {
        hpgo_sweep_free(s);
        return rc;
    }
    *out = s;
    return HPGO_OK;
}

void hpgo_sweep_free(hpgo_sweep_t *s)
{
    if (!s)
        return;
    if (s->rows)
        for (int32_t k = 0; k < s->n; k++)
            hpgo_orch_free(s->rows[k].orch);
    free(s->rows);
    free(s);
}
