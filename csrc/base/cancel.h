/* cancel.h - a flag the caller raises to stop a long core call early.
 *
 * DESIGN: the caller owns an hpgo_cancel_t, passes its address in the
 * options of a long call (planner, sweep, simulators, re-planner) and may
 * raise it from any thread while the call runs; the call's loops read it
 * every few thousand iterations (a relaxed atomic load, so the check costs
 * nothing measurable) and return HPGO_E_CANCELLED after freeing what they
 * built.  A NULL pointer means "never cancelled".  The core never raises the
 * flag itself and keeps no global state: the CPython glue raises it on
 * Ctrl-C or when a timeout passes (module/call_glue.c). */
#ifndef HPGO_CANCEL_H
#define HPGO_CANCEL_H

#include <stdatomic.h>

typedef struct hpgo_cancel {
    atomic_int requested; /* non-zero: stop as soon as possible */
} hpgo_cancel_t;

/* Iterations of an inner loop between two looks at the flag. */
#define HPGO_CANCEL_EVERY 4096

static inline void hpgo_cancel_init(hpgo_cancel_t *c)
{
    atomic_init(&c->requested, 0);
}

/* Thread-safe; idempotent. */
static inline void hpgo_cancel_request(hpgo_cancel_t *c)
{
    atomic_store_explicit(&c->requested, 1, memory_order_relaxed);
}

/* Non-zero once hpgo_cancel_request was called on c (0 for NULL). */
static inline int hpgo_cancelled(hpgo_cancel_t *c)
{
    return c && atomic_load_explicit(&c->requested, memory_order_relaxed);
}

#endif
