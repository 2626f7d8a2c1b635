/* dataparallel.c - data-parallel speedups of HPGO (spec section 6).
 *
 * DESIGN: closed formulas plus the layer-by-layer overlap simulator of 6.2,
 * which walks the layers once (O(L)) keeping how much backward compute is
 * left to hide each layer's gradient all-reduce.  The original's quirks are
 * kept on purpose (next-forward compute indexed in forward order while the
 * blocks are in backward order; negative diagonal values of branchy graphs);
 * see README "Compatibility".  No output is printed (HPGO printed several
 * debug lines here).  Pure functions: thread-safe. */
#include "dataparallel.h"

#include <stdlib.h>

static void all_gpus(const hpgo_topo_t *t, hpgo_gpuset_t *g)
{
    *g = (hpgo_gpuset_t){{0}};
    for (int32_t i = 0; i < t->n; i++)
        hpgo_gpuset_add(g, i);
}

double hpgo_dp_speedup(const hpgo_topo_t *t, const hpgo_model_t *m)
{
    hpgo_gpuset_t g;
    all_gpus(t, &g);
    double t1 = hpgo_model_total_time(m);
    return t1 / (t1 / (double)t->n + hpgo_topo_all_reduce_time(t, &g, hpgo_model_total_params(m)));
}

int hpgo_cc_overlap_partial(const hpgo_topo_t *t, const hpgo_model_t *m, int inter_batch,
                            double partial, double *offset_out, hpgo_err_t *err)
{
    int32_t L = m->L;
    if (L < 1) /* a model always has states; guards eta[L - 1] below */
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "the model has no layer states");
    hpgo_gpuset_t g;
    all_gpus(t, &g);
    /* eta[b], avail[b], comp[b] for blocks b = 0..L-1 (block b = layer L-1-b) */
    double *eta = malloc((size_t)L * 3 * sizeof(double));
    if (!eta)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the overlap simulator");
    double *avail = eta + L, *comp = eta + 2 * L;
    double run = 0.0;
    for (int32_t b = 0; b < L; b++) {
        int32_t k = L - 1 - b;
        eta[b] = hpgo_topo_all_reduce_time(t, &g, hpgo_model_pa(m, k, k));
        run += hpgo_model_ct(m, k, k) * partial / 2.0;
        avail[b] = run;
        comp[b] = inter_batch ? hpgo_model_ct(m, b, b) * partial / 2.0 : 0.0;
    }
    double offset = eta[L - 1], excess = 0.0;
    for (int32_t b = L - 2; b >= 0; b--) {
        double slot = (avail[b + 1] - avail[b]) + comp[b + 1];
        if (slot < eta[b]) {
            double need = eta[b] - slot;
            if (need < excess) {
                excess -= need;
            } else {
                offset += need - excess;
                excess = 0.0;
            }
        } else {
            excess += slot - eta[b];
        }
    }
    free(eta);
    *offset_out = offset;
    return HPGO_OK;
}

int hpgo_dp_p3_speedup(const hpgo_topo_t *t, const hpgo_model_t *m, double *out,
                       hpgo_err_t *err)
{
    double t1 = hpgo_model_total_time(m), off;
    int rc = hpgo_cc_overlap_partial(t, m, 1, 1.0, &off, err);
    if (rc == HPGO_OK)
        *out = t1 / (t1 / (double)t->n + off);
    return rc;
}

/* HPGO's search for the number of accumulation steps: starting at `start`,
 * step up until it divides bpd or reaches bpd / 2 + 1.  Same result as that
 * linear scan (up to 2^31 steps for a prime bpd, seconds), from the divisor
 * pairs (d, bpd / d) with d <= sqrt(bpd): at most 65,536 steps. */
static uint32_t first_divisor_from(uint32_t bpd, uint32_t start)
{
    uint32_t stop = bpd / 2 + 1;
    if (start >= stop)
        return start;
    uint32_t best = stop;
    for (uint32_t d = 1; (uint64_t)d * d <= bpd; d++) {
        if (bpd % d != 0)
            continue;
        uint32_t e = bpd / d;
        if (d >= start && d < best)
            best = d;
        if (e >= start && e < best)
            best = e;
    }
    return best;
}

int hpgo_current_ga_iter_size(const hpgo_topo_t *t, const hpgo_model_t *m, uint32_t *out,
                              hpgo_err_t *err)
{
    uint32_t maxbs = hpgo_model_max_single_gpu_batch_size(m);
    uint32_t bpd = m->gbs / (uint32_t)t->n;
    if (maxbs >= bpd) {
        *out = bpd;
        return HPGO_OK;
    }
    if (maxbs == 0)
        return hpgo_err_set(err, HPGO_E_NOPLAN, 0,
                            "the model does not fit in one GPU's %.0f GB: parameters times "
                            "optimizer_memory_scaling (%u) leave no room for a single sample "
                            "of peak_activation_per_batch = %g bytes",
                            HPGO_GPU_MEMORY / 1e9, m->optimizer_memory_scaling,
                            m->peak_activation_per_batch);
    uint32_t it = bpd / maxbs;
    if ((uint64_t)it * maxbs < bpd)
        it += 1;
    *out = bpd / first_divisor_from(bpd, it);
    return HPGO_OK;
}

uint32_t hpgo_optimal_ga_iter_size(const hpgo_topo_t *t, const hpgo_model_t *m)
{
    uint32_t maxbs = hpgo_model_max_single_gpu_batch_size(m);
    uint32_t bpd = m->gbs / (uint32_t)t->n;
    if (maxbs >= bpd)
        return bpd;
    if (2 * (uint64_t)maxbs >= bpd)
        return bpd / 2;
    return maxbs;
}

int hpgo_dp_ga_overlap_speedup(const hpgo_topo_t *t, const hpgo_model_t *m, uint32_t ga,
                               int inter_batch, double *out, hpgo_err_t *err)
{
    double t1 = hpgo_model_total_time(m), off;
    double partial = (double)ga / (double)m->gbs;
    int rc = hpgo_cc_overlap_partial(t, m, inter_batch, partial, &off, err);
    if (rc == HPGO_OK)
        *out = t1 / (t1 / (double)t->n + off);
    return rc;
}
