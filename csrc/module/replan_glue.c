/* replan_glue.c - CPython glue of the re-planner (replan.h) and of the
 * heterogeneous SPMD planner (hetero.h).
 *
 * DESIGN: every entry point copies its arguments into C arrays (PyMem),
 * releases the GIL around the core call (nothing between the two macros
 * touches a PyObject or PyMem), then converts the result or raises through
 * glue_raise.  The straggler trigger is a `Trigger` heap type owning the C
 * detector; its push is O(stages), so it keeps the GIL (which also
 * serialises calls on one object).  hpgo/dynpipe.py and hpgo/hetero.py
 * validate and document the public API; these functions are its backend. */
#include "glue.h"

#include <math.h>

#include "../replan.h"

/* ---- argument helpers ---------------------------------------------------------- */

static int num_to_double(PyObject *o, const char *what, Py_ssize_t i, double *out)
{
    if (PyBool_Check(o) || !(PyFloat_Check(o) || PyLong_Check(o) || PyNumber_Check(o)) ||
        PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s[%zd] must be a number, not %.100s", what, i,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* Sequence of numbers -> new PyMem array (at least one slot).  *n gets the length. */
static double *get_doubles(PyObject *o, const char *what, Py_ssize_t *n)
{
    PyObject *seq = PySequence_Fast(o, what);
    if (!seq)
        return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    double *a = PyMem_Malloc((size_t)(len > 0 ? len : 1) * sizeof *a);
    if (!a) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < len; i++)
        if (num_to_double(PySequence_Fast_GET_ITEM(seq, i), what, i, &a[i]) < 0) {
            PyMem_Free(a);
            Py_DECREF(seq);
            return NULL;
        }
    Py_DECREF(seq);
    *n = len;
    return a;
}

static int64_t *get_i64s(PyObject *o, const char *what, Py_ssize_t *n)
{
    PyObject *seq = PySequence_Fast(o, what);
    if (!seq)
        return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int64_t *a = PyMem_Malloc((size_t)(len > 0 ? len : 1) * sizeof *a);
    if (!a) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyLong_Check(v) || PyBool_Check(v)) {
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be an int, not %.100s", what, i,
                         Py_TYPE(v)->tp_name);
            goto error;
        }
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            goto error;
        if (overflow) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] is out of range", what, i);
            goto error;
        }
        a[i] = (int64_t)x;
    }
    Py_DECREF(seq);
    *n = len;
    return a;
error:
    PyMem_Free(a);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *doubles_to_list(const double *a, Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    if (!l)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyFloat_FromDouble(a[i]);
        if (!f) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, f);
    }
    return l;
}

static PyObject *i64s_to_list(const int64_t *a, Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    if (!l)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyLong_FromLongLong((long long)a[i]);
        if (!f) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, f);
    }
    return l;
}

/* ---- replan_score ------------------------------------------------------------------ */

PyDoc_STRVAR(replan_score_doc,
             "replan_score(forward, backward, comm, microbatches) -> float\n\n"
             "Steady-state seconds per micro-batch of PipeDream's 1F1B for per-stage times "
             "(comm: S-1 transfer times or None).");

static PyObject *replan_score(PyObject *module, PyObject *args)
{
    PyObject *fo, *bo, *co;
    int mb;
    if (!PyArg_ParseTuple(args, "OOOi", &fo, &bo, &co, &mb))
        return NULL;
    Py_ssize_t nf = 0, nb = 0, nc = 0;
    double *f = NULL, *b = NULL, *c = NULL;
    f = get_doubles(fo, "forward", &nf);
    if (!f)
        goto error;
    b = get_doubles(bo, "backward", &nb);
    if (!b)
        goto error;
    if (co != Py_None) {
        c = get_doubles(co, "comm", &nc);
        if (!c)
            goto error;
    }
    if (nf != nb || (c && nc != (nf > 0 ? nf - 1 : 0))) {
        PyErr_SetString(PyExc_ValueError,
                        "forward and backward need one value per stage and comm one fewer");
        goto error;
    }
    if (nf > HPGO_REPLAN_MAX_STAGES) {
        PyErr_Format(PyExc_ValueError, "at most %d stages", HPGO_REPLAN_MAX_STAGES);
        goto error;
    }
    double t = 0.0;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hpgo_replan_score((int32_t)nf, f, b, c, mb, &t, &err);
    Py_END_ALLOW_THREADS
    PyMem_Free(f);
    PyMem_Free(b);
    PyMem_Free(c);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    return PyFloat_FromDouble(t);
error:
    PyMem_Free(f);
    PyMem_Free(b);
    PyMem_Free(c);
    return NULL;
}

/* ---- replan_run --------------------------------------------------------------------- */

PyDoc_STRVAR(replan_run_doc,
             "replan_run(forward, backward, comm, param_bytes, current, slowdown, method, top_k, "
             "include_current, microbatches, bandwidth, optimizer_factor, fixed_cost, "
             "remaining_iterations, microbatches_per_iteration) -> dict\n\n"
             "comm and param_bytes may be None; method 0 = top-k (DynPipe), 1 = DP.");

static PyObject *replan_run(PyObject *module, PyObject *args)
{
    PyObject *fo, *bo, *co, *po, *curo, *so;
    hpgo_replan_input_t in;
    memset(&in, 0, sizeof in);
    if (!PyArg_ParseTuple(args, "OOOOOOiipiddddd", &fo, &bo, &co, &po, &curo, &so, &in.method,
                          &in.top_k, &in.include_current, &in.microbatches, &in.bandwidth,
                          &in.optimizer_factor, &in.fixed_cost, &in.remaining_iterations,
                          &in.microbatches_per_iteration))
        return NULL;
    double *f = NULL, *b = NULL, *c = NULL, *p = NULL, *sd = NULL;
    int64_t *cur64 = NULL;
    int32_t *cur = NULL, *counts = NULL;
    Py_ssize_t nf = 0, nb = 0, nc = 0, np_ = 0, ncur = 0, ns = 0;
    if (!(f = get_doubles(fo, "forward", &nf)) || !(b = get_doubles(bo, "backward", &nb)))
        goto error;
    if (co != Py_None && !(c = get_doubles(co, "comm", &nc)))
        goto error;
    if (po != Py_None && !(p = get_doubles(po, "param_bytes", &np_)))
        goto error;
    if (!(cur64 = get_i64s(curo, "current", &ncur)) || !(sd = get_doubles(so, "slowdown", &ns)))
        goto error;
    if (nb != nf || (c && nc != nf) || (p && np_ != nf)) {
        PyErr_SetString(PyExc_ValueError,
                        "forward, backward, comm and param_bytes need one value per layer");
        goto error;
    }
    if (ns != ncur) {
        PyErr_SetString(PyExc_ValueError, "current and slowdown need one value per stage");
        goto error;
    }
    if (nf > HPGO_REPLAN_MAX_LAYERS || ncur > HPGO_REPLAN_MAX_STAGES) {
        PyErr_Format(PyExc_ValueError, "at most %d layers and %d stages", HPGO_REPLAN_MAX_LAYERS,
                     HPGO_REPLAN_MAX_STAGES);
        goto error;
    }
    cur = PyMem_Malloc((size_t)(ncur > 0 ? ncur : 1) * sizeof *cur);
    counts = PyMem_Malloc((size_t)(ncur > 0 ? ncur : 1) * sizeof *counts);
    if (!cur || !counts) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t s = 0; s < ncur; s++) {
        if (cur64[s] < 0 || cur64[s] > HPGO_REPLAN_MAX_LAYERS) {
            PyErr_Format(PyExc_ValueError, "current[%zd] = %lld is out of range", s,
                         (long long)cur64[s]);
            goto error;
        }
        cur[s] = (int32_t)cur64[s];
    }
    in.n_layers = (int32_t)nf;
    in.forward = f;
    in.backward = b;
    in.comm = c;
    in.param_bytes = p;
    in.n_stages = (int32_t)ncur;
    in.current = cur;
    in.slowdown = sd;
    hpgo_replan_result_t res;
    memset(&res, 0, sizeof res);
    res.counts = counts;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hpgo_replan_run(&in, &res, &err);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc != HPGO_OK) {
        glue_raise(module, rc, &err);
    } else {
        PyObject *cl = PyList_New(ncur);
        if (cl) {
            for (Py_ssize_t s = 0; s < ncur; s++) {
                PyObject *v = PyLong_FromLong((long)counts[s]);
                if (!v) {
                    Py_CLEAR(cl);
                    break;
                }
                PyList_SET_ITEM(cl, s, v);
            }
        }
        if (cl)
            out = Py_BuildValue("{s:N,s:d,s:d,s:d,s:d,s:d,s:d,s:O,s:L}", "counts", cl,
                                "current_time", res.current_time, "new_time", res.new_time,
                                "moved_bytes", res.moved_bytes, "drain_time", res.drain_time,
                                "migration_cost", res.migration_cost, "gain", res.gain,
                                "switch", res.do_switch ? Py_True : Py_False, "candidates",
                                (long long)res.candidates);
    }
    PyMem_Free(f);
    PyMem_Free(b);
    PyMem_Free(c);
    PyMem_Free(p);
    PyMem_Free(sd);
    PyMem_Free(cur64);
    PyMem_Free(cur);
    PyMem_Free(counts);
    return out;
error:
    PyMem_Free(f);
    PyMem_Free(b);
    PyMem_Free(c);
    PyMem_Free(p);
    PyMem_Free(sd);
    PyMem_Free(cur64);
    PyMem_Free(cur);
    PyMem_Free(counts);
    return NULL;
}

/* ---- Trigger type ------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    hpgo_trigger_t *t;
    int32_t n_stages;
} TriggerObject;

static PyObject *trigger_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"n_stages", "window", "warmup_windows", "low", "high", "patience",
                             "rebaseline", NULL};
    hpgo_trigger_params_t p;
    memset(&p, 0, sizeof p);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiiddip", kwlist, &p.n_stages, &p.window,
                                     &p.warmup_windows, &p.low, &p.high, &p.patience,
                                     &p.rebaseline))
        return NULL;
    PyObject *module = PyType_GetModule(type);
    hpgo_trigger_t *t = NULL;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc = hpgo_trigger_new(&p, &t, &err);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    TriggerObject *o = (TriggerObject *)type->tp_alloc(type, 0);
    if (!o) {
        hpgo_trigger_free(t);
        return NULL;
    }
    o->t = t;
    o->n_stages = p.n_stages;
    return (PyObject *)o;
}

static void trigger_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    hpgo_trigger_free(((TriggerObject *)self)->t);
    tp->tp_free(self);
    Py_DECREF(tp);
}

PyDoc_STRVAR(trigger_push_doc,
             "push(sample) -> None or (kind, ratios)\n\n"
             "Feed one sample (one value per stage); kind is 1 (slowdown) or -1 (speed-up).");

static PyObject *trigger_push(PyObject *self, PyObject *arg)
{
    TriggerObject *o = (TriggerObject *)self;
    Py_ssize_t n = 0;
    double *v = get_doubles(arg, "sample", &n);
    if (!v)
        return NULL;
    if (n != o->n_stages) {
        PyMem_Free(v);
        return PyErr_Format(PyExc_ValueError, "sample must have %d values, got %zd",
                            (int)o->n_stages, n);
    }
    double *ratios = PyMem_Malloc((size_t)n * sizeof *ratios);
    if (!ratios) {
        PyMem_Free(v);
        return PyErr_NoMemory();
    }
    int kind = 0;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc = hpgo_trigger_push(o->t, v, &kind, ratios, &err);
    PyMem_Free(v);
    PyObject *out = NULL;
    if (rc != HPGO_OK) {
        glue_raise(glue_module_of(self), rc, &err);
    } else if (kind == HPGO_TRIGGER_NONE) {
        out = Py_NewRef(Py_None);
    } else {
        PyObject *l = doubles_to_list(ratios, n);
        if (l)
            out = Py_BuildValue("(iN)", kind, l);
    }
    PyMem_Free(ratios);
    return out;
}

static PyObject *trigger_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    hpgo_trigger_reset(((TriggerObject *)self)->t);
    Py_RETURN_NONE;
}

static PyMethodDef trigger_methods[] = {
    {"push", trigger_push, METH_O, trigger_push_doc},
    {"reset", trigger_reset, METH_NOARGS, "reset() -> None: forget the baseline"},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(trigger_doc,
             "Trigger(n_stages, window, warmup_windows, low, high, patience, rebaseline)\n\n"
             "Straggler detector over a stream of per-stage times (see hpgo.dynpipe).");

static PyType_Slot trigger_slots[] = {
    {Py_tp_new, trigger_new},
    {Py_tp_dealloc, trigger_dealloc},
    {Py_tp_methods, trigger_methods},
    {Py_tp_doc, (void *)trigger_doc},
    {0, NULL},
};

static PyType_Spec trigger_spec = {
    .name = "hpgo._core.Trigger",
    .basicsize = sizeof(TriggerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = trigger_slots,
};

/* ---- batch split -------------------------------------------------------------------- */

PyDoc_STRVAR(split_batch_doc, "split_batch(batch, weights) -> list of int");

static PyObject *split_batch(PyObject *module, PyObject *args)
{
    long long batch;
    PyObject *wo;
    if (!PyArg_ParseTuple(args, "LO", &batch, &wo))
        return NULL;
    Py_ssize_t n = 0;
    double *w = get_doubles(wo, "weights", &n);
    if (!w)
        return NULL;
    if (n > HPGO_REPLAN_MAX_STAGES * 64) {
        PyMem_Free(w);
        return PyErr_Format(PyExc_ValueError, "too many replicas (%zd)", n);
    }
    int64_t *out = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    if (!out) {
        PyMem_Free(w);
        return PyErr_NoMemory();
    }
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc = hpgo_split_batch((int64_t)batch, (int32_t)n, w, out, &err);
    PyObject *res = rc == HPGO_OK ? i64s_to_list(out, n) : glue_raise(module, rc, &err);
    PyMem_Free(w);
    PyMem_Free(out);
    return res;
}

PyDoc_STRVAR(slice_table_doc, "slice_table(send, recv) -> list of lists of int");

static PyObject *slice_table(PyObject *module, PyObject *args)
{
    PyObject *so, *ro;
    if (!PyArg_ParseTuple(args, "OO", &so, &ro))
        return NULL;
    Py_ssize_t ns = 0, nr = 0;
    int64_t *s = get_i64s(so, "send", &ns), *r = NULL, *out = NULL;
    PyObject *res = NULL;
    if (!s)
        return NULL;
    if (!(r = get_i64s(ro, "recv", &nr)))
        goto done;
    if (ns > 65536 || nr > 65536) {
        PyErr_SetString(PyExc_ValueError, "at most 65536 replicas per side");
        goto done;
    }
    out = PyMem_Malloc((size_t)(ns > 0 ? ns : 1) * (size_t)(nr > 0 ? nr : 1) * sizeof *out);
    if (!out) {
        PyErr_NoMemory();
        goto done;
    }
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc = hpgo_slice_table((int32_t)ns, s, (int32_t)nr, r, out, &err);
    if (rc != HPGO_OK) {
        glue_raise(module, rc, &err);
        goto done;
    }
    res = PyList_New(ns);
    if (!res)
        goto done;
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *row = i64s_to_list(out + (size_t)i * (size_t)nr, nr);
        if (!row) {
            Py_CLEAR(res);
            goto done;
        }
        PyList_SET_ITEM(res, i, row);
    }
done:
    PyMem_Free(s);
    PyMem_Free(r);
    PyMem_Free(out);
    return res;
}

static PyMethodDef replan_functions[] = {
    {"replan_score", replan_score, METH_VARARGS, replan_score_doc},
    {"replan_run", replan_run, METH_VARARGS, replan_run_doc},
    {"split_batch", split_batch, METH_VARARGS, split_batch_doc},
    {"slice_table", slice_table, METH_VARARGS, slice_table_doc},
    {NULL, NULL, 0, NULL},
};

int glue_replan_init(PyObject *module)
{
    if (!glue_add_type(module, &trigger_spec, NULL))
        return -1;
    return PyModule_AddFunctions(module, replan_functions);
}
