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

#include "hetero.h"
#include "replan.h"

/* ---- argument helpers ---------------------------------------------------------- */

static int num_to_double(PyObject *o, const char *what, Py_ssize_t i, double *out)
{
    char name[96];
    PyOS_snprintf(name, sizeof name, "%s[%zd]", what, i);
    return glue_double(o, name, out);
}

/* Sequence of numbers -> new PyMem array (at least one slot).  *n gets the length. */
static double *get_doubles(PyObject *o, const char *what, Py_ssize_t *n)
{
    PyObject *seq = glue_seq_copy(o, what);
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
    PyObject *seq = glue_seq_copy(o, what);
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
        char name[96];
        PyOS_snprintf(name, sizeof name, "%s[%zd]", what, i);
        if (glue_i64(PySequence_Fast_GET_ITEM(seq, i), name, &a[i]) < 0)
            goto error;
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
    PyObject *fo, *bo, *co, *mbo;
    int32_t mb;
    if (!PyArg_ParseTuple(args, "OOOO", &fo, &bo, &co, &mbo))
        return NULL;
    if (glue_i32(mbo, "microbatches", &mb) < 0)
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
    if (!isfinite(t))
        return PyErr_Format(PyExc_ValueError,
                            "the score is not finite: the stage times are too large for doubles");
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

typedef struct replan_work {
    const hpgo_replan_input_t *in;
    hpgo_replan_result_t *res;
    hpgo_err_t *err;
    int rc;
} replan_work_t;

static void replan_work(void *ctx)
{
    replan_work_t *w = ctx;
    w->rc = hpgo_replan_run(w->in, w->res, w->err);
}

static PyObject *replan_run(PyObject *module, PyObject *args)
{
    PyObject *fo, *bo, *co, *po, *curo, *so, *topk_o, *mb_o, *timeout_o = Py_None;
    hpgo_replan_input_t in;
    memset(&in, 0, sizeof in);
    double timeout;
    if (!PyArg_ParseTuple(args, "OOOOOOiOpOddddd|O", &fo, &bo, &co, &po, &curo, &so, &in.method,
                          &topk_o, &in.include_current, &mb_o, &in.bandwidth,
                          &in.optimizer_factor, &in.fixed_cost, &in.remaining_iterations,
                          &in.microbatches_per_iteration, &timeout_o))
        return NULL;
    if (glue_i32(topk_o, "top_k", &in.top_k) < 0 ||
        glue_i32(mb_o, "microbatches", &in.microbatches) < 0)
        return NULL;
    if (glue_timeout(timeout_o, &timeout) < 0)
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
    /* the proposal, then the search's own best split */
    counts = PyMem_Malloc((size_t)(ncur > 0 ? 2 * ncur : 1) * sizeof *counts);
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
    res.search_counts = counts + ncur;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc;
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    in.cancel = &cancel;
    replan_work_t w = {&in, &res, &err, HPGO_OK};
    int small = (int64_t)in.n_layers * in.n_stages < 100000;
    if (glue_call(replan_work, &w, &cancel, timeout, small ? GLUE_SMALL : 0, "replan") < 0)
        goto error; /* KeyboardInterrupt or TimeoutError */
    rc = w.rc;
    if (rc == HPGO_OK && (!isfinite(res.current_time) || !isfinite(res.new_time))) {
        /* sums past the largest double: every score ties at inf, no split wins */
        PyErr_SetString(PyExc_ValueError, "the scores are not finite: the layer times (or their "
                                          "sums times the slowdowns) are too large for doubles");
        goto error;
    }
    PyObject *out = NULL;
    if (rc != HPGO_OK) {
        glue_raise(module, rc, &err);
    } else {
        PyObject *lists[2] = {PyList_New(ncur), PyList_New(ncur)};
        for (int k = 0; k < 2; k++) {
            if (!lists[k])
                continue;
            for (Py_ssize_t s = 0; s < ncur; s++) {
                PyObject *v = PyLong_FromLong((long)counts[k * ncur + s]);
                if (!v) {
                    Py_CLEAR(lists[k]);
                    break;
                }
                PyList_SET_ITEM(lists[k], s, v);
            }
        }
        if (lists[0] && lists[1])
            out = Py_BuildValue("{s:N,s:d,s:d,s:d,s:d,s:d,s:d,s:O,s:L,s:d,s:O,s:N,s:O}", "counts",
                                lists[0], "current_time", res.current_time, "new_time",
                                res.new_time, "moved_bytes", res.moved_bytes, "drain_time",
                                res.drain_time, "migration_cost", res.migration_cost, "gain",
                                res.gain, "switch", res.do_switch ? Py_True : Py_False,
                                "candidates", (long long)res.candidates, "search_time",
                                res.search_time, "kept_current",
                                res.kept_current ? Py_True : Py_False, "search_counts",
                                lists[1], "exact", res.exact ? Py_True : Py_False);
        else {
            Py_XDECREF(lists[0]);
            Py_XDECREF(lists[1]);
        }
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
    PyObject *n_o, *w_o, *ww_o, *pat_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOddOp", kwlist, &n_o, &w_o, &ww_o, &p.low,
                                     &p.high, &pat_o, &p.rebaseline))
        return NULL;
    if (glue_i32(n_o, "n_stages", &p.n_stages) < 0 || glue_i32(w_o, "window", &p.window) < 0 ||
        glue_i32(ww_o, "warmup_windows", &p.warmup_windows) < 0 ||
        glue_i32(pat_o, "patience", &p.patience) < 0)
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
    int64_t batch;
    PyObject *bo, *wo;
    if (!PyArg_ParseTuple(args, "OO", &bo, &wo))
        return NULL;
    if (glue_i64(bo, "batch", &batch) < 0)
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
    if ((int64_t)ns * (int64_t)nr > HPGO_REPLAN_MAX_SLICE_CELLS) {
        PyErr_Format(PyExc_ValueError,
                     "a table of %zd x %zd replicas exceeds the limit of %lld cells "
                     "(HPGO_REPLAN_MAX_SLICE_CELLS)",
                     ns, nr, (long long)HPGO_REPLAN_MAX_SLICE_CELLS);
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

/* ---- HAP (hetero.h) --------------------------------------------------------------- */

PyDoc_STRVAR(hap_plan_doc,
             "hap_plan(layers, flops, bandwidths, dtype_bytes, allowed, ratio_mode, ratios, "
             "max_rounds, optimizer_bytes=0.0, memory=None, report_only=False) -> dict\n\n"
             "layers: sequence of (kind, m, k, n, flops[, heads, saved]); bandwidths: "
             "(all_gather, all_gather_group, all_reduce, reduce_scatter, reduce_scatter_group, "
             "all_to_all) bytes/s; ratios: sequence or None; memory: bytes per device or None.");

static PyObject *hap_plan(PyObject *module, PyObject *args)
{
    PyObject *lo, *fo, *ro, *mo = Py_None;
    double bw[6], dt, ob = 0.0;
    unsigned int allowed;
    int mode, rounds, report_only = 0;
    if (!PyArg_ParseTuple(args, "OO(dddddd)dIiOi|dOp", &lo, &fo, &bw[0], &bw[1], &bw[2], &bw[3],
                          &bw[4], &bw[5], &dt, &allowed, &mode, &ro, &rounds, &ob, &mo,
                          &report_only))
        return NULL;
    hpgo_hap_layer_t *layers = NULL;
    double *flops = NULL, *ratios = NULL, *rout = NULL, *mem = NULL, *used = NULL;
    int32_t *strat = NULL;
    PyObject *seq = NULL, *res = NULL;
    Py_ssize_t nl = 0, nd = 0, nr = 0, nm = 0;
    if (!(flops = get_doubles(fo, "flops", &nd)))
        goto done;
    if (ro != Py_None && !(ratios = get_doubles(ro, "ratios", &nr)))
        goto done;
    if (ratios && nr != nd) {
        PyErr_SetString(PyExc_ValueError, "ratios need one value per device");
        goto done;
    }
    if (mo != Py_None && !(mem = get_doubles(mo, "memory", &nm)))
        goto done;
    if (mem && nm != nd) {
        PyErr_SetString(PyExc_ValueError, "memory needs one value per device");
        goto done;
    }
    if (nd > HPGO_HAP_MAX_DEVICES) {
        PyErr_Format(PyExc_ValueError, "at most %d devices", HPGO_HAP_MAX_DEVICES);
        goto done;
    }
    if (!(seq = glue_seq_copy(lo, "layers must be a sequence")))
        goto done;
    nl = PySequence_Fast_GET_SIZE(seq);
    if (nl > HPGO_HAP_MAX_LAYERS) {
        PyErr_Format(PyExc_ValueError, "at most %d layers", HPGO_HAP_MAX_LAYERS);
        goto done;
    }
    layers = PyMem_Calloc((size_t)(nl > 0 ? nl : 1), sizeof *layers);
    strat = PyMem_Calloc((size_t)(nl > 0 ? nl : 1), sizeof *strat);
    rout = PyMem_Calloc((size_t)(nd > 0 ? nd : 1), sizeof *rout);
    used = PyMem_Calloc((size_t)(nd > 0 ? nd : 1), sizeof *used);
    if (!layers || !strat || !rout || !used) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nl; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(t) || (PyTuple_GET_SIZE(t) != 5 && PyTuple_GET_SIZE(t) != 7)) {
            PyErr_Format(PyExc_TypeError, "layer %zd must be a 5- or 7-tuple", i);
            goto done;
        }
        if (PyTuple_GET_SIZE(t) == 7 &&
            (glue_i32(PyTuple_GET_ITEM(t, 5), "heads", &layers[i].heads) < 0 ||
             num_to_double(PyTuple_GET_ITEM(t, 6), "saved", i, &layers[i].saved) < 0))
            goto done;
        int32_t kind;
        if (glue_i32(PyTuple_GET_ITEM(t, 0), "layer kind", &kind) < 0 ||
            num_to_double(PyTuple_GET_ITEM(t, 1), "m", i, &layers[i].m) < 0 ||
            num_to_double(PyTuple_GET_ITEM(t, 2), "k", i, &layers[i].k) < 0 ||
            num_to_double(PyTuple_GET_ITEM(t, 3), "n", i, &layers[i].n) < 0 ||
            num_to_double(PyTuple_GET_ITEM(t, 4), "flops", i, &layers[i].flops) < 0)
            goto done;
        layers[i].kind = kind;
    }
    hpgo_hap_problem_t pb;
    memset(&pb, 0, sizeof pb);
    pb.n_layers = (int32_t)nl;
    pb.layers = layers;
    pb.cluster.n_devices = (int32_t)nd;
    pb.cluster.flops = flops;
    pb.cluster.bw_allgather = bw[0];
    pb.cluster.bw_allgather_group = bw[1];
    pb.cluster.bw_allreduce = bw[2];
    pb.cluster.bw_reducescatter = bw[3];
    pb.cluster.bw_reducescatter_group = bw[4];
    pb.cluster.bw_alltoall = bw[5];
    pb.dtype_bytes = dt;
    pb.allowed = allowed;
    pb.ratio_mode = mode;
    pb.ratios = ratios;
    pb.max_rounds = rounds;
    pb.optimizer_bytes = ob;
    pb.memory = mem;
    pb.report_only = report_only;
    hpgo_hap_result_t out;
    memset(&out, 0, sizeof out);
    out.strategy = strat;
    out.ratios = rout;
    out.memory_used = used;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hpgo_hap_plan(&pb, &out, &err);
    Py_END_ALLOW_THREADS
    if (rc != HPGO_OK) {
        glue_raise(module, rc, &err);
        goto done;
    }
    PyObject *sl = PyList_New(nl);
    if (!sl)
        goto done;
    for (Py_ssize_t i = 0; i < nl; i++) {
        PyObject *v = PyLong_FromLong((long)strat[i]);
        if (!v) {
            Py_DECREF(sl);
            goto done;
        }
        PyList_SET_ITEM(sl, i, v);
    }
    PyObject *rl = doubles_to_list(rout, nd);
    if (!rl) {
        Py_DECREF(sl);
        goto done;
    }
    PyObject *ul = doubles_to_list(used, nd);
    if (!ul) {
        Py_DECREF(sl);
        Py_DECREF(rl);
        goto done;
    }
    res = Py_BuildValue("{s:N,s:N,s:d,s:d,s:d,s:d,s:d,s:d,s:O,s:O,s:i,s:N,s:i,s:i,"
                        "s:(dddddd)}", "strategy", sl,
                        "ratios", rl, "time", out.time, "compute", out.compute, "allgather",
                        out.allgather, "reducescatter", out.reducescatter, "allreduce",
                        out.allreduce, "alltoall", out.alltoall, "grouped_allgather",
                        out.grouped_allgather ? Py_True : Py_False, "grouped_reducescatter",
                        out.grouped_reducescatter ? Py_True : Py_False, "rounds",
                        (int)out.rounds, "memory_used", ul, "fits", out.fits, "worst_device",
                        (int)out.worst_device, "worst", out.worst.parameters,
                        out.worst.gradients, out.worst.optimizer, out.worst.activations,
                        out.worst.transient, out.worst.total);
done:
    Py_XDECREF(seq);
    PyMem_Free(layers);
    PyMem_Free(flops);
    PyMem_Free(ratios);
    PyMem_Free(mem);
    PyMem_Free(used);
    PyMem_Free(rout);
    PyMem_Free(strat);
    return res;
}

PyDoc_STRVAR(hap_gather_cost_doc,
             "hap_gather_cost(ratios, bytes, bw_padded, bw_grouped) -> (padded, grouped) seconds");

static PyObject *hap_gather_cost(PyObject *module, PyObject *args)
{
    PyObject *ro;
    double bytes, bp, bg;
    if (!PyArg_ParseTuple(args, "Oddd", &ro, &bytes, &bp, &bg))
        return NULL;
    Py_ssize_t n = 0;
    double *r = get_doubles(ro, "ratios", &n);
    if (!r)
        return NULL;
    if (n > HPGO_HAP_MAX_DEVICES) {
        PyMem_Free(r);
        return PyErr_Format(PyExc_ValueError, "at most %d devices", HPGO_HAP_MAX_DEVICES);
    }
    double tp = 0.0, tg = 0.0;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc = hpgo_hap_gather_cost((int32_t)n, r, bytes, bp, bg, &tp, &tg, &err);
    PyMem_Free(r);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    return Py_BuildValue("(dd)", tp, tg);
}

PyDoc_STRVAR(hap_shard_round_doc, "hap_shard_round(length, ratios) -> list of int");

static PyObject *hap_shard_round(PyObject *module, PyObject *args)
{
    int64_t length;
    PyObject *lo, *ro;
    if (!PyArg_ParseTuple(args, "OO", &lo, &ro))
        return NULL;
    if (glue_i64(lo, "length", &length) < 0)
        return NULL;
    Py_ssize_t n = 0;
    double *r = get_doubles(ro, "ratios", &n);
    if (!r)
        return NULL;
    if (n > HPGO_HAP_MAX_DEVICES) {
        PyMem_Free(r);
        return PyErr_Format(PyExc_ValueError, "at most %d devices", HPGO_HAP_MAX_DEVICES);
    }
    int64_t *out = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    if (!out) {
        PyMem_Free(r);
        return PyErr_NoMemory();
    }
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc = hpgo_hap_shard_round((int64_t)length, (int32_t)n, r, out, &err);
    PyObject *res = rc == HPGO_OK ? i64s_to_list(out, n) : glue_raise(module, rc, &err);
    PyMem_Free(r);
    PyMem_Free(out);
    return res;
}

static PyMethodDef replan_functions[] = {
    {"replan_score", replan_score, METH_VARARGS, replan_score_doc},
    {"replan_run", replan_run, METH_VARARGS, replan_run_doc},
    {"split_batch", split_batch, METH_VARARGS, split_batch_doc},
    {"slice_table", slice_table, METH_VARARGS, slice_table_doc},
    {"hap_plan", hap_plan, METH_VARARGS, hap_plan_doc},
    {"hap_gather_cost", hap_gather_cost, METH_VARARGS, hap_gather_cost_doc},
    {"hap_shard_round", hap_shard_round, METH_VARARGS, hap_shard_round_doc},
    {NULL, NULL, 0, NULL},
};

int glue_replan_init(PyObject *module)
{
    if (!glue_add_type(module, &trigger_spec, NULL))
        return -1;
    if (PyModule_AddIntConstant(module, "HAP_MAX_DEVICES", HPGO_HAP_MAX_DEVICES) < 0 ||
        PyModule_AddIntConstant(module, "HAP_MAX_LAYERS", HPGO_HAP_MAX_LAYERS) < 0 ||
        PyModule_AddIntConstant(module, "REPLAN_MAX_SLICE_CELLS", HPGO_REPLAN_MAX_SLICE_CELLS) < 0)
        return -1;
    return PyModule_AddFunctions(module, replan_functions);
}
