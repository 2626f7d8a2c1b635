/* dataparallel.h - HPGO's data-parallel and gradient-accumulation speedup
 * estimates (spec/hpgo-compat.md section 6).  All functions are pure, read
 * only their arguments and are thread-safe.  Speedups are ratios of the
 * single-GPU iteration time to the estimated time on all GPUs of the topology. */
#ifndef HPGO_DATAPARALLEL_H
#define HPGO_DATAPARALLEL_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "topo.h"

/* Plain all-reduce after the whole backward pass (6.1). */
double hpgo_dp_speedup(const hpgo_topo_t *t, const hpgo_model_t *m);
/* Offset (seconds of non-hidden communication) of the overlap simulator
 * (6.2) into *offset.  HPGO_E_NOMEM is the only error. */
int hpgo_cc_overlap_partial(const hpgo_topo_t *t, const hpgo_model_t *m, int inter_batch,
                            double partial, double *offset, hpgo_err_t *err);
/* P3-style overlap, partial = 1 (6.2). */
int hpgo_dp_p3_speedup(const hpgo_topo_t *t, const hpgo_model_t *m, double *out,
                       hpgo_err_t *err);
/* Gradient-accumulation sizes (6.3).  current: HPGO_E_NOPLAN when the model
 * does not fit one GPU (maxbs = 0), where HPGO divides by zero. */
int hpgo_current_ga_iter_size(const hpgo_topo_t *t, const hpgo_model_t *m, uint32_t *out,
                              hpgo_err_t *err);
uint32_t hpgo_optimal_ga_iter_size(const hpgo_topo_t *t, const hpgo_model_t *m);
/* T1 / (T1/N + offset(inter, ga/gbs)) (6.4). */
int hpgo_dp_ga_overlap_speedup(const hpgo_topo_t *t, const hpgo_model_t *m, uint32_t ga,
                               int inter_batch, double *out, hpgo_err_t *err);

#endif
