/* model.c - HPGO Model (spec/hpgo-compat.md section 4).
 *
 * DESIGN: the imported per-state cumulative sums ct(s), act(s), par(s), the
 * cut activations oa(s), predecessor lists and labels live in one immutable,
 * reference-counted hpgo_model_data shared by a model and its copies.  A
 * model adds its batch sizes, its settings and the chain of scale factors
 * applied so far (gbs/pbs, then bs/gbs for each normalized_copy).  Matrix
 * entries are recomputed on demand in the original's operation order: the
 * difference of two prefix sums (or the -1 sentinel), then multiplied by each
 * factor in turn.  This keeps results bit-identical to HPGO, which scales a
 * stored matrix in place, while memory stays O(L).
 *
 * Threading: the data block's reference count is atomic; everything else is
 * read-only after construction, so any number of threads may read a model. */
#include "model.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct hpgo_model_data {
    atomic_int refs;
    int32_t L;
    double *ct;  /* cumulative, seconds per pbs batch */
    double *ac;  /* cumulative activation bytes per pbs batch */
    double *pa;  /* cumulative parameter bytes */
    double *oa;  /* cut activation bytes per pbs batch */
    int32_t *pred_off;
    int32_t *pred_idx;
    char **label;
    char *label_buf;
};

static void data_release(struct hpgo_model_data *d)
{
    if (!d || atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    free(d->ct);
    free(d->ac);
    free(d->pa);
    free(d->oa);
    free(d->pred_off);
    free(d->pred_idx);
    free(d->label);
    free(d->label_buf);
    free(d);
}

static struct hpgo_model_data *data_from_states(const hpgo_states_t *st)
{
    int32_t L = st->n;
    struct hpgo_model_data *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    atomic_init(&d->refs, 1);
    d->L = L;
    size_t nb = (size_t)L * sizeof(double);
    int32_t np = st->pred_off[L];
    size_t lab = 0;
    for (int32_t s = 0; s < L; s++)
        lab += strlen(st->label[s] ? st->label[s] : "") + 1;
    d->ct = malloc(nb);
    d->ac = malloc(nb);
    d->pa = malloc(nb);
    d->oa = malloc(nb);
    d->pred_off = malloc((size_t)(L + 1) * sizeof(int32_t));
    d->pred_idx = malloc((size_t)(np > 0 ? np : 1) * sizeof(int32_t));
    d->label = malloc((size_t)L * sizeof(char *));
    d->label_buf = malloc(lab ? lab : 1);
    if (!d->ct || !d->ac || !d->pa || !d->oa || !d->pred_off || !d->pred_idx || !d->label ||
        !d->label_buf) {
        data_release(d);
        return NULL;
    }
    memcpy(d->ct, st->ct, nb);
    memcpy(d->ac, st->act, nb);
    memcpy(d->pa, st->par, nb);
    memcpy(d->oa, st->oa, nb);
    memcpy(d->pred_off, st->pred_off, (size_t)(L + 1) * sizeof(int32_t));
    if (np > 0)
        memcpy(d->pred_idx, st->pred_idx, (size_t)np * sizeof(int32_t));
    char *p = d->label_buf;
    for (int32_t s = 0; s < L; s++) {
        const char *src = st->label[s] ? st->label[s] : "";
        size_t n = strlen(src) + 1;
        memcpy(p, src, n);
        d->label[s] = p;
        p += n;
    }
    return d;
}

static hpgo_model_t *model_alloc(int32_t n_factors)
{
    hpgo_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->factors = malloc((size_t)(n_factors > 0 ? n_factors : 1) * sizeof(double));
    if (!m->factors) {
        free(m);
        return NULL;
    }
    m->n_factors = n_factors;
    return m;
}

static inline double scaled(const hpgo_model_t *m, double v);

/* Largest of v[0..n-1], or NaN when one is NaN. */
static double max_of(const double *v, int32_t n)
{
    double mx = 0.0;
    for (int32_t k = 0; k < n; k++) {
        if (isnan(v[k]))
            return v[k];
        if (v[k] > mx)
            mx = v[k];
    }
    return mx;
}

/* Refuse numbers the planners cannot compute with: every scaled per-state
 * total must be at most HPGO_MODEL_MAX_TOTAL (finite values of a profile can
 * still add up to infinity, and infinity minus infinity is NaN). */
static int check_totals(const hpgo_model_t *m, hpgo_err_t *err)
{
    const struct hpgo_model_data *d = m->data;
    const struct {
        const char *what;
        double v;
    } t[4] = {{"compute time (seconds)", scaled(m, max_of(d->ct, m->L))},
              {"activation bytes", scaled(m, max_of(d->ac, m->L))},
              {"parameter bytes", max_of(d->pa, m->L)},
              {"cut activation bytes", scaled(m, max_of(d->oa, m->L))}};
    const double *arr[4] = {d->ct, d->ac, d->pa, d->oa};
    const char *names[4] = {"ct", "act", "par", "oa"};
    for (int i = 0; i < 4; i++)
        for (int32_t k = 0; k < m->L; k++)
            if (arr[i][k] < 0.0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0, "%s[%d] is negative (%g)", names[i],
                                    (int)k, arr[i][k]);
    if (t[0].v == 0.0) /* every speedup would be 0 / 0 */
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the profile's forward and backward times are all 0: nothing to "
                            "plan");
    for (int i = 0; i < 4; i++)
        if (!(t[i].v <= HPGO_MODEL_MAX_TOTAL))
            return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                                "the profile's cumulative %s at global batch size %u is %g, "
                                "more than the limit of %g: its numbers are too large",
                                t[i].what, (unsigned)m->gbs, t[i].v, HPGO_MODEL_MAX_TOTAL);
    return HPGO_OK;
}

int hpgo_model_new(const hpgo_states_t *st, uint32_t pbs, uint32_t gbs, hpgo_model_t **out,
                   hpgo_err_t *err)
{
    *out = NULL;
    if (!st || st->n < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "the profile has no layer states");
    if (pbs == 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "profile batch size (pbs) must be >= 1");
    if (gbs == 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "global batch size (gbs) must be >= 1");
    hpgo_model_t *m = model_alloc(1);
    if (!m)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory building the model");
    m->data = data_from_states(st);
    if (!m->data) {
        hpgo_model_free(m);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory building the model");
    }
    m->L = st->n;
    m->pbs = pbs;
    m->gbs = gbs;
    m->min_micro_batch_size = 1;
    m->optimizer_memory_scaling = 1;
    /* papb: total activation bytes per sample, before scaling (AC[0][L-1] / pbs) */
    m->peak_activation_per_batch = m->data->ac[m->L - 1] / (double)pbs;
    m->factors[0] = (double)gbs / (double)pbs;
    int rc = check_totals(m, err);
    if (rc != HPGO_OK) {
        hpgo_model_free(m);
        return rc;
    }
    *out = m;
    return HPGO_OK;
}

static int model_copy(const hpgo_model_t *src, int extra, hpgo_model_t **out, hpgo_err_t *err)
{
    hpgo_model_t *m = model_alloc(src->n_factors + extra);
    if (!m)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory copying the model");
    memcpy(m->factors, src->factors, (size_t)src->n_factors * sizeof(double));
    m->L = src->L;
    m->pbs = src->pbs;
    m->gbs = src->gbs;
    m->min_micro_batch_size = src->min_micro_batch_size;
    m->optimizer_memory_scaling = src->optimizer_memory_scaling;
    m->peak_activation_per_batch = src->peak_activation_per_batch;
    m->data = src->data;
    atomic_fetch_add(&m->data->refs, 1);
    *out = m;
    return HPGO_OK;
}

int hpgo_model_clone(const hpgo_model_t *m, hpgo_model_t **out, hpgo_err_t *err)
{
    *out = NULL;
    return model_copy(m, 0, out, err);
}

int hpgo_model_normalized_copy(const hpgo_model_t *m, uint32_t bs, hpgo_model_t **out,
                               hpgo_err_t *err)
{
    *out = NULL;
    if (bs == 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "batch size must be >= 1");
    int rc = model_copy(m, 1, out, err);
    if (rc != HPGO_OK)
        return rc;
    (*out)->factors[m->n_factors] = (double)bs / (double)m->gbs;
    (*out)->gbs = bs;
    rc = check_totals(*out, err);
    if (rc != HPGO_OK) {
        hpgo_model_free(*out);
        *out = NULL;
    }
    return rc;
}

void hpgo_model_states_view(const hpgo_model_t *m, hpgo_states_t *out)
{
    const struct hpgo_model_data *d = m->data;
    memset(out, 0, sizeof *out);
    out->n = m->L;
    out->ct = d->ct;
    out->act = d->ac;
    out->par = d->pa;
    out->oa = d->oa;
    out->pred_off = d->pred_off;
    out->pred_idx = d->pred_idx;
    out->label = d->label;
}

int hpgo_model_with_factors(const hpgo_model_t *m, const double *f, int32_t n, uint32_t gbs,
                            hpgo_model_t **out, hpgo_err_t *err)
{
    *out = NULL;
    if (n < 1 || n > 4096)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "a model has 1 to 4096 scale factors, got %d",
                            (int)n);
    if (gbs == 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "global batch size (gbs) must be >= 1");
    for (int32_t i = 0; i < n; i++)
        if (!(f[i] > 0.0) || !isfinite(f[i]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "scale factor %d is not positive (%g)",
                                (int)i, f[i]);
    hpgo_model_t *c = model_alloc(n);
    if (!c)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory copying the model");
    memcpy(c->factors, f, (size_t)n * sizeof(double));
    c->L = m->L;
    c->pbs = m->pbs;
    c->gbs = gbs;
    c->min_micro_batch_size = m->min_micro_batch_size;
    c->optimizer_memory_scaling = m->optimizer_memory_scaling;
    c->peak_activation_per_batch = m->peak_activation_per_batch;
    c->data = m->data;
    atomic_fetch_add(&c->data->refs, 1);
    int rc = check_totals(c, err);
    if (rc != HPGO_OK) {
        hpgo_model_free(c);
        return rc;
    }
    *out = c;
    return HPGO_OK;
}

void hpgo_model_free(hpgo_model_t *m)
{
    if (!m)
        return;
    data_release(m->data);
    free(m->factors);
    free(m);
}

static inline double range_of(const double *cum, int32_t r, int32_t c)
{
    if (r == 0)
        return cum[c];
    return c >= r ? cum[c] - cum[r - 1] : -1.0;
}

static inline double scaled(const hpgo_model_t *m, double v)
{
    for (int32_t i = 0; i < m->n_factors; i++)
        v *= m->factors[i];
    return v;
}

double hpgo_model_ct(const hpgo_model_t *m, int32_t r, int32_t c)
{
    return scaled(m, range_of(m->data->ct, r, c));
}

double hpgo_model_ac(const hpgo_model_t *m, int32_t r, int32_t c)
{
    return scaled(m, range_of(m->data->ac, r, c));
}

double hpgo_model_pa(const hpgo_model_t *m, int32_t r, int32_t c)
{
    return range_of(m->data->pa, r, c);
}

double hpgo_model_oa(const hpgo_model_t *m, int32_t k)
{
    return scaled(m, m->data->oa[k]);
}

const int32_t *hpgo_model_preds(const hpgo_model_t *m, int32_t j, int32_t *n)
{
    *n = m->data->pred_off[j + 1] - m->data->pred_off[j];
    return m->data->pred_idx + m->data->pred_off[j];
}

const char *hpgo_model_label(const hpgo_model_t *m, int32_t j)
{
    return m->data->label[j];
}

const double *hpgo_model_ct_prefix(const hpgo_model_t *m)
{
    return m->data->ct;
}

double hpgo_model_total_time(const hpgo_model_t *m)
{
    return hpgo_model_ct(m, 0, m->L - 1);
}

double hpgo_model_total_params(const hpgo_model_t *m)
{
    return hpgo_model_pa(m, 0, m->L - 1);
}

uint32_t hpgo_model_max_single_gpu_batch_size(const hpgo_model_t *m)
{
    double sum = 0.0;
    for (int32_t k = 0; k < m->L; k++)
        sum += hpgo_model_pa(m, k, k);
    double v = (HPGO_GPU_MEMORY - (double)m->optimizer_memory_scaling * sum) /
               m->peak_activation_per_batch;
    /* Rust's saturating float -> u32 cast */
    if (isnan(v) || v <= 0.0)
        return 0;
    if (v >= 4294967295.0)
        return UINT32_MAX;
    return (uint32_t)v;
}
