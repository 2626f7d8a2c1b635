/* sweep.h - DAPPLE's multi-batch-size study: for every (global batch size,
 * device layout) the data-parallel speedups and the best hybrid plan, the
 * cases spread over a thread pool.  Rows are identical for any thread count
 * and equal to the single-case calls. */
#ifndef HPGO_SWEEP_H
#define HPGO_SWEEP_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "plan_hpgo.h"
#include "topo.h"

typedef struct hpgo_sweep_row {
    uint32_t gbs;
    int32_t layout;        /* index into the topology array */
    double dp;             /* dp_speedup */
    int ga_status;         /* HPGO_OK or HPGO_E_NOPLAN (model does not fit one GPU) */
    char ga_reason[HPGO_ERRMSG_LEN];
    double dp_p3;          /* dp_cur_ga_p3_speedup (valid when ga_status == HPGO_OK) */
    double dp_overlap;     /* dp_cur_ga_inner_overlap_speedup (likewise) */
    hpgo_orch_t *orch;     /* every candidate; orch->best < 0: no plan */
} hpgo_sweep_row_t;

typedef struct hpgo_sweep {
    int32_t n;             /* n_gbs * n_layouts rows, gbs-major */
    hpgo_sweep_row_t *rows;
} hpgo_sweep_t;

/* base: the model at any batch size with its settings (mbs, oms, papb);
 * each row uses hpgo_model_normalized_copy(base, gbs).  threads: 0 =
 * default.  The caller owns *out (hpgo_sweep_free).  Thread-safe. */
int hpgo_sweep_run(const hpgo_model_t *base, const hpgo_topo_t *const *layouts, int32_t n_layouts,
                   const uint32_t *gbs, int32_t n_gbs, const hpgo_plan_opts_t *opts,
                   hpgo_sweep_t **out, hpgo_err_t *err);
void hpgo_sweep_free(hpgo_sweep_t *s);

#endif
