/* schedule.h - pipeline schedules as generators of each device's op list.
 *
 * An op is the forward (F), input-gradient backward (B), weight-gradient
 * backward (W) or fused backward (BW = B then W) of one micro-batch on one
 * chunk of a device.  Device i of p holds v chunks; chunk c is model stage
 * hpgo_sched_stage(...): c * p + i for the interleaved schedule, i and
 * 2p - 1 - i for the V-shaped zb-v, i otherwise.  The engine (engine.h)
 * runs the lists.  The orders are those of spec/training-model.md section
 * 5 (GPipe; 1F1B as Megatron's schedules.py; interleaved 1F1B as
 * Megatron's warm-up rule; ZB-H1 as the authors' quick-start patch; ZB-V
 * as the authors' greedy, see schedule.c).  Pure functions, thread-safe. */
#ifndef HPGO_SCHEDULE_H
#define HPGO_SCHEDULE_H

#include <stdint.h>

#include "err.h"
#include "parplan.h"

enum { HPGO_OP_F = 0, HPGO_OP_B = 1, HPGO_OP_W = 2, HPGO_OP_BW = 3 };

typedef struct hpgo_op {
    int32_t mb;    /* micro-batch */
    int16_t chunk; /* 0 .. v-1 */
    int16_t kind;  /* HPGO_OP_* */
} hpgo_op_t;

/* Model stage of chunk c on device i. */
int32_t hpgo_sched_stage(int schedule, int32_t p, int32_t v, int32_t i, int32_t c);

/* Most ops a device can have: 3 m v. */
int64_t hpgo_sched_max_ops(int64_t m, int32_t v);

/* Op lists of all p devices for m micro-batches: ops[i] (capacity
 * hpgo_sched_max_ops each, caller-owned) receives n_ops[i] ops.  f, b, w
 * (seconds per model stage, p * v entries) and p2p (seconds of one
 * transfer) are used only by the greedy zb-v generator.  HPGO_E_INVALID
 * for an unknown schedule or m < 1; HPGO_E_NOMEM. */
int hpgo_sched_generate(int schedule, int32_t p, int32_t v, int64_t m, const double *f,
                        const double *b, const double *w, double p2p, hpgo_op_t **ops,
                        int64_t *n_ops, hpgo_err_t *err);

#endif
