/* args_glue.c - the argument-conversion policy of the whole glue.
 *
 * DESIGN: one rule per kind, so every entry point agrees (issue 16):
 * integers follow operator.index (int, NumPy integer scalars, anything with
 * __index__; bool refused), reals follow float() (also NumPy floats and
 * __float__; bool and str refused).  A wrong type is a TypeError naming the
 * argument; a value outside the range of the C type or of the argument is
 * a ValueError naming the argument and the range, never a bare
 * OverflowError.  glue_u32 / glue_i32 / glue_i64 (_coremodule.c) are
 * glue_index with the ranges of their types.  The Python layer follows the
 * same rules (hpgo/_args.py). */
#include "glue.h"

#include <limits.h>

int glue_index_ll(PyObject *o, const char *what, long long *out, int *overflow)
{
    /* operator.index semantics: int, NumPy integer scalars and anything with
     * __index__; bool is refused (True is not a batch size) */
    if (PyBool_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i)
        return -1;
    *overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, overflow);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (*overflow)
        v = *overflow > 0 ? LLONG_MAX : LLONG_MIN;
    *out = v;
    return 0;
}

int glue_index(PyObject *o, const char *what, long long lo, long long hi, long long *out)
{
    int overflow;
    long long v;
    if (glue_index_ll(o, what, &v, &overflow) < 0)
        return -1;
    if ((overflow < 0 || v < lo) && lo != LLONG_MIN) {
        PyErr_Format(PyExc_ValueError, "%s must be >= %lld (and <= %lld), got %R", what, lo, hi,
                     o);
        return -1;
    }
    if (overflow > 0 && lo == LLONG_MIN) { /* a full-range integer: name its upper bound */
        PyErr_Format(PyExc_ValueError, "%s must be <= %lld, got %R", what, hi, o);
        return -1;
    }
    if (overflow || v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s must be between %lld and %lld, got %R", what, lo, hi,
                     o);
        return -1;
    }
    *out = v;
    return 0;
}

int glue_double(PyObject *o, const char *what, double *out)
{
    /* float() semantics: float, int, NumPy floats and integers, anything
     * with __float__ or __index__; bool and str are refused */
    if (PyFloat_Check(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    PyNumberMethods *nb = Py_TYPE(o)->tp_as_number;
    if (PyBool_Check(o) || !(PyIndex_Check(o) || (nb && nb->nb_float))) {
        PyErr_Format(PyExc_TypeError, "%s must be a number, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "%s is too large for a double (at most about 1.8e308)", what);
        }
        return -1;
    }
    *out = v;
    return 0;
}
