/* model.h - the HPGO layer-wise Model: per-state prefix sums scaled from the
 * profile batch size to a global batch size, plus the memory model
 * (spec/hpgo-compat.md section 4).
 *
 * The (L+1) x L matrices of the original (CT, AC, PA) are never stored: an
 * entry is rebuilt on demand from the prefix sums exactly as the original
 * computes it (difference first, then each scale factor in turn), so results
 * are bit-identical while memory stays O(L).
 *
 * A model is immutable after hpgo_model_new / hpgo_model_normalized_copy
 * except for the three scalar settings (mbs, oms, papb) which the owner sets
 * before sharing it; planners only read it and may run concurrently. */
#ifndef HPGO_MODEL_H
#define HPGO_MODEL_H

#include <stdint.h>

#include "err.h"
#include "profile.h"

#define HPGO_GPU_MEMORY 16e9 /* bytes; HPGO's fixed GPU memory */
/* Largest per-state cumulative total a model accepts after scaling to its
 * gbs (seconds or bytes): far beyond any real model, and far enough from
 * DBL_MAX that the planners' sums and products stay finite. */
#define HPGO_MODEL_MAX_TOTAL 1e100

typedef struct hpgo_model {
    int32_t L;           /* number of states ("layers") */
    uint32_t pbs;        /* profile batch size */
    uint32_t gbs;        /* global batch size the numbers are scaled to */
    /* settings (read/write from Python) */
    uint32_t min_micro_batch_size;   /* mbs, default 1 */
    uint32_t optimizer_memory_scaling; /* default 1 */
    double peak_activation_per_batch; /* papb, bytes per sample */
    /* immutable data, shared between copies (refcounted) */
    struct hpgo_model_data *data;
    int32_t n_factors;   /* scale factors applied so far (gbs/pbs, then each copy's) */
    double *factors;     /* owned by this model */
} hpgo_model_t;

/* Build from imported states at pbs, scaled to gbs (factor gbs/pbs).
 * HPGO_E_INVALID for pbs == 0, gbs == 0, an empty state list or compute
 * times that are all 0;
 * HPGO_E_LIMIT when a scaled cumulative total (ct, act, par or oa) is NaN
 * or above HPGO_MODEL_MAX_TOTAL. */
int hpgo_model_new(const hpgo_states_t *st, uint32_t pbs, uint32_t gbs, hpgo_model_t **out,
                   hpgo_err_t *err);
/* Deep copy with the same numbers (settings included). */
int hpgo_model_clone(const hpgo_model_t *m, hpgo_model_t **out, hpgo_err_t *err);
/* Clone scaled again by bs / gbs, gbs := bs; settings kept.  HPGO_E_INVALID
 * for bs == 0, HPGO_E_LIMIT as hpgo_model_new. */
int hpgo_model_normalized_copy(const hpgo_model_t *m, uint32_t bs, hpgo_model_t **out,
                               hpgo_err_t *err);
void hpgo_model_free(hpgo_model_t *m);

/* A borrowed view of the unscaled states behind m: n, ct, act, par, oa,
 * pred_off, pred_idx and label point into m's shared immutable data and stay
 * valid while m lives (set_off/set_idx are NULL).  With m->factors this is
 * everything m holds, so a model rebuilt from them (hpgo_model_new, then
 * hpgo_model_with_factors) computes bit-identical numbers.  Thread-safe. */
void hpgo_model_states_view(const hpgo_model_t *m, hpgo_states_t *out);
/* A copy of m (settings kept) whose scale factors are f[0..n) and whose
 * global batch size is gbs: how a serialized model gets back its exact
 * history of normalized copies.  HPGO_E_INVALID for n < 1, n > 4096, a
 * factor that is not finite and positive, or gbs == 0; HPGO_E_LIMIT as
 * hpgo_model_new. */
int hpgo_model_with_factors(const hpgo_model_t *m, const double *f, int32_t n, uint32_t gbs,
                            hpgo_model_t **out, hpgo_err_t *err);

/* Matrix entries of the original, scaled: seconds (CT), bytes (AC), bytes
 * unscaled (PA).  r in [0, L], c in [0, L-1]. Row 0: prefix to c; row r >= 1:
 * states r..c (sentinel -1 * factors when c < r). Thread-safe. */
double hpgo_model_ct(const hpgo_model_t *m, int32_t r, int32_t c);
double hpgo_model_ac(const hpgo_model_t *m, int32_t r, int32_t c);
double hpgo_model_pa(const hpgo_model_t *m, int32_t r, int32_t c);
/* output activation crossing the cut after state k, scaled (bytes). */
double hpgo_model_oa(const hpgo_model_t *m, int32_t k);
/* predecessor list of state j (ascending): *n entries. */
const int32_t *hpgo_model_preds(const hpgo_model_t *m, int32_t j, int32_t *n);
/* label (DESC) of state j. */
const char *hpgo_model_label(const hpgo_model_t *m, int32_t j);

/* The unscaled per-state prefix sums behind CT (seconds per pbs batch, L
 * entries) for hot loops that rebuild CT entries themselves: an entry is
 * (row 0 ? ct[c] : ct[c] - ct[r-1]) times each of m->factors in turn. */
const double *hpgo_model_ct_prefix(const hpgo_model_t *m);

/* T1 = CT[0][L-1]: one gbs iteration on one GPU, seconds. */
double hpgo_model_total_time(const hpgo_model_t *m);
/* P = PA[0][L-1], bytes. */
double hpgo_model_total_params(const hpgo_model_t *m);
/* maxbs of section 4 (saturating cast to u32). */
uint32_t hpgo_model_max_single_gpu_batch_size(const hpgo_model_t *m);

#endif
