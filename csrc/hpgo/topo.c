/* topo.c - HPGO devices and communication costs (spec/hpgo-compat.md 5.1-5.3).
 *
 * DESIGN: a topology is the GPU count, the cumulative machine boundaries and
 * a GPU -> machine table.  Because machines own contiguous id ranges, "does
 * this set cross machines" only needs the set's smallest and largest id
 * (which is also exactly what HPGO looks at).  Formulas are evaluated in the
 * original's operation order so results are bit-identical.
 * Thread-safety: immutable after hpgo_topo_new. */
#include "topo.h"

#include <stdlib.h>

int hpgo_topo_new(int32_t n, const int32_t *seps, int32_t n_seps, hpgo_topo_t **out,
                  hpgo_err_t *err)
{
    *out = NULL;
    if (n_seps < 1 || !seps)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "seps must not be empty");
    if (n < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "the number of GPUs must be >= 1, got %d",
                            (int)n);
    if (n > HPGO_MAX_GPUS)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "%d GPUs is more than the limit of %d",
                            (int)n, HPGO_MAX_GPUS);
    for (int32_t k = 0; k < n_seps; k++) {
        int32_t prev = k ? seps[k - 1] : 0;
        if (k == 0 && seps[0] < 1)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "seps must be strictly increasing positive GPU counts: "
                                "seps[0] (GPUs of the first machine) must be >= 1, got %d",
                                (int)seps[0]);
        if (seps[k] <= prev)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "seps must be strictly increasing positive GPU counts "
                                "(cumulative machine boundaries), got %d after %d at index %d",
                                (int)seps[k], (int)prev, (int)k);
    }
    if (seps[n_seps - 1] != n)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the last of seps (%d) must equal the number of GPUs (%d)",
                            (int)seps[n_seps - 1], (int)n);
    hpgo_topo_t *t = calloc(1, sizeof *t);
    if (!t)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    t->n = n;
    t->machines = n_seps;
    t->seps = malloc((size_t)n_seps * sizeof(int32_t));
    t->machine_of = malloc((size_t)n * sizeof(int32_t));
    if (!t->seps || !t->machine_of) {
        hpgo_topo_free(t);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    }
    for (int32_t k = 0; k < n_seps; k++) {
        t->seps[k] = seps[k];
        for (int32_t g = k ? seps[k - 1] : 0; g < seps[k]; g++)
            t->machine_of[g] = k;
    }
    *out = t;
    return HPGO_OK;
}

void hpgo_topo_free(hpgo_topo_t *t)
{
    if (!t)
        return;
    free(t->seps);
    free(t->machine_of);
    free(t);
}

int32_t hpgo_gpuset_count(const hpgo_gpuset_t *s)
{
    int32_t c = 0;
    for (int i = 0; i < HPGO_GPUSET_WORDS; i++)
        c += __builtin_popcountll(s->w[i]);
    return c;
}

int32_t hpgo_gpuset_min(const hpgo_gpuset_t *s)
{
    for (int i = 0; i < HPGO_GPUSET_WORDS; i++)
        if (s->w[i])
            return i * 64 + __builtin_ctzll(s->w[i]);
    return -1;
}

int32_t hpgo_gpuset_max(const hpgo_gpuset_t *s)
{
    for (int i = HPGO_GPUSET_WORDS - 1; i >= 0; i--)
        if (s->w[i])
            return i * 64 + 63 - __builtin_clzll(s->w[i]);
    return -1;
}

int hpgo_topo_cross_within(const hpgo_topo_t *t, const hpgo_gpuset_t *s)
{
    int32_t lo = hpgo_gpuset_min(s), hi = hpgo_gpuset_max(s);
    if (lo < 0)
        return 0;
    return t->machine_of[lo] != t->machine_of[hi];
}

double hpgo_topo_all_reduce_time(const hpgo_topo_t *t, const hpgo_gpuset_t *s, double bytes)
{
    int32_t n = hpgo_gpuset_count(s);
    if (n <= 1)
        return 0.0;
    double f = (double)(n - 1) / (double)n;
    if (hpgo_topo_cross_within(t, s))
        return bytes * 2.0 * f / HPGO_ETHERNET_NCCL_BW;
    return bytes * 2.0 * f / HPGO_NVLINK_BW / (double)(n / 2);
}

double hpgo_topo_split_concat_time(const hpgo_topo_t *t, const hpgo_gpuset_t *from,
                                   const hpgo_gpuset_t *to, double bytes)
{
    if (hpgo_topo_cross_within(t, to))
        return bytes / HPGO_ETHERNET_NCCL_BW;
    int32_t lo = hpgo_gpuset_min(to);
    int32_t mt = lo >= 0 ? t->machine_of[lo] : -1;
    int32_t nf = 0, nc = 0;
    for (int i = 0; i < HPGO_GPUSET_WORDS; i++) {
        uint64_t w = from->w[i];
        while (w) {
            int32_t g = i * 64 + __builtin_ctzll(w);
            w &= w - 1;
            nf++;
            if (t->machine_of[g] != mt)
                nc++;
        }
    }
    if (nc > 0)
        return bytes / (double)nf * (double)nc / HPGO_ETHERNET_BW;
    return bytes / HPGO_NVLINK_BW;
}
