/* glue.h - shared declarations of the CPython glue (the only code that
 * includes Python.h).  Each *_glue.c file adds its functions and types to
 * the module from an init hook called by _coremodule.c. */
#ifndef HPGO_GLUE_H
#define HPGO_GLUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cancel.h"
#include "err.h"

typedef struct hpgo_modstate {
    PyObject *HpgoError;     /* base class of hpgo's own exceptions */
    PyObject *PlanningError; /* HpgoError + ValueError: the planner cannot plan this case */
    PyObject *types[16];     /* heap types registered by the glue files, see glue_add_type */
    int n_types;
} hpgo_modstate;

hpgo_modstate *glue_state(PyObject *module);
/* Module that owns an object of one of our heap types. */
PyObject *glue_module_of(PyObject *self);

/* Turn a core error into a Python exception (the one place that maps codes,
 * see README "Errors").  Returns NULL so callers can `return glue_raise(...)`. */
PyObject *glue_raise(PyObject *module, int code, const hpgo_err_t *err);

/* Create a heap type from spec, add it to the module under its short name
 * and remember it in the module state.  Returns a borrowed reference. */
PyObject *glue_add_type(PyObject *module, PyType_Spec *spec, PyObject *bases);

/* The argument-conversion policy of the whole API.  Integers follow
 * operator.index (int, NumPy integer scalars, anything with __index__; bool
 * refused): TypeError naming `what` otherwise, and ValueError naming `what`
 * and its range when out of range (never a bare OverflowError).  Reals
 * follow float() (also NumPy floats, __float__): TypeError otherwise, and
 * ValueError when too large for a double.
 * glue_index_ll: no range check; *overflow is +1 / -1 when the value does
 * not fit a long long (then *out is LLONG_MAX / LLONG_MIN). */
int glue_index_ll(PyObject *o, const char *what, long long *out, int *overflow);
int glue_index(PyObject *o, const char *what, long long lo, long long hi, long long *out);
int glue_double(PyObject *o, const char *what, double *out);
int glue_u32(PyObject *o, const char *what, uint32_t *out);
int glue_i32(PyObject *o, const char *what, int32_t *out);
int glue_i64(PyObject *o, const char *what, int64_t *out);

/* glue_double, and a ValueError naming `what` when the value is not finite
 * (the training-step model refuses NaN and infinities everywhere). */
int glue_f64(PyObject *o, const char *what, double *out);

/* A private tuple of a sequence's items (TypeError naming `what` otherwise):
 * converting an item may run Python code (__float__, __index__) that would
 * resize or free a list being read in place. */
PyObject *glue_seq_copy(PyObject *o, const char *what);

/* Filesystem path (str, bytes or os.PathLike) to a new bytes object. */
PyObject *glue_fspath(PyObject *o);

/* Core work run by glue_call: reads and writes only its context (no
 * PyObject, no exception). */
typedef void (*glue_work_fn)(void *ctx);

/* Flags of glue_call: GLUE_SMALL, a quick call, run on the calling thread
 * when there is no timeout; GLUE_WAITS, the work only waits for a pool the
 * caller made (its helper thread gets a small stack). */
enum { GLUE_SMALL = 1, GLUE_WAITS = 2 };

/* Run fn(ctx) with the GIL released so that Ctrl-C and a timeout stop it
 * (call_glue.c): the work must read `cancel` (its options point at it).
 * timeout: seconds, <= 0 or +inf for none; flags: GLUE_*.  Returns 0 when the work
 * ran to its end, -1 with KeyboardInterrupt (or what the signal handler
 * raised) or TimeoutError (naming `what`) set after the work stopped; the
 * caller frees whatever the work produced in both cases.  Needs the GIL. */
int glue_call(glue_work_fn fn, void *ctx, hpgo_cancel_t *cancel, double timeout, int flags,
              const char *what);

/* A timeout argument: None -> 0 (none), a real > 0 -> seconds (float()
 * semantics); ValueError / TypeError naming `timeout` otherwise. */
int glue_timeout(PyObject *o, double *out);

/* Init hooks, one per glue file; return 0 or -1 with an exception set. */
/* A step's timeline as a SimResult object that owns r (trimmed; freed
 * here on failure); its events become Python objects only when read. */
struct hpgo_sim_result;
PyObject *glue_wrap_timeline(PyObject *module, struct hpgo_sim_result *r);

int glue_profile_init(PyObject *module);
int glue_plan_init(PyObject *module);
int glue_sim_init(PyObject *module);
int glue_replan_init(PyObject *module);
int glue_step_init(PyObject *module);

#endif
