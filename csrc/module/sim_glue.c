/* sim_glue.c - CPython glue of the simulators (sim.h, sim_distir.h) and the
 * thread pool (pool.h).
 *
 * DESIGN: every entry point parses its arguments into C structs, releases
 * the GIL around the core call (nothing between the two macros touches a
 * PyObject), then converts or raises.  A simulation result becomes a
 * `SimResult` heap type that owns the C result; it is immutable, so any
 * thread may read it, and its timeline is turned into Python tuples only
 * when asked for.  Batches of DistIR points run on a pthread pool created
 * for the call.  The Python package (hpgo/sim.py) validates and documents
 * the public API; these functions are its private backend. */
#include "glue.h"

#include <math.h>

#include "pool.h"
#include "pipeline_sim.h"
#include "sim_distir.h"

typedef struct {
    PyObject_HEAD
    hpgo_sim_result_t *r;
} SimResultObject;

static void simresult_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    hpgo_sim_result_free(((SimResultObject *)self)->r);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *simresult_get_iteration_time(PyObject *self, void *closure)
{
    (void)closure;
    return PyFloat_FromDouble(((SimResultObject *)self)->r->iteration_time);
}

static PyObject *simresult_get_n_events(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong((long long)((SimResultObject *)self)->r->n_events);
}

PyDoc_STRVAR(simresult_stages_doc,
             "stages() -> list of (busy, bubble, max_in_flight, weight_bytes, gradient_bytes, "
             "optimizer_bytes, activation_bytes, peak_bytes)");

static PyObject *simresult_stages(PyObject *self, PyObject *unused)
{
    (void)unused;
    const hpgo_sim_result_t *r = ((SimResultObject *)self)->r;
    PyObject *list = PyList_New(r->n_stages);
    if (!list)
        return NULL;
    for (int32_t s = 0; s < r->n_stages; s++) {
        const hpgo_sim_stage_stats_t *st = &r->stages[s];
        PyObject *t = Py_BuildValue("(ddiddddd)", st->busy, st->bubble, (int)st->max_in_flight,
                                    st->weight_bytes, st->gradient_bytes, st->optimizer_bytes,
                                    st->activation_bytes, st->peak_bytes);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, s, t);
    }
    return list;
}

PyDoc_STRVAR(simresult_devices_doc,
             "devices() -> list of (device, stage, end, busy, peak_bytes), ascending device");

static PyObject *simresult_devices(PyObject *self, PyObject *unused)
{
    (void)unused;
    const hpgo_sim_result_t *r = ((SimResultObject *)self)->r;
    PyObject *list = PyList_New(r->n_devices);
    if (!list)
        return NULL;
    for (int32_t d = 0; d < r->n_devices; d++) {
        const hpgo_sim_device_stats_t *ds = &r->devices[d];
        PyObject *t = Py_BuildValue("(iiddd)", (int)ds->device, (int)ds->stage, ds->end, ds->busy,
                                    ds->peak_bytes);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, d, t);
    }
    return list;
}

PyDoc_STRVAR(simresult_events_doc,
             "events() -> list of (start, duration, device, name, lane, stage, microbatch, layer, "
             "peer) in generation order; seconds; -1 means none");

static PyObject *simresult_events(PyObject *self, PyObject *unused)
{
    (void)unused;
    const hpgo_sim_result_t *r = ((SimResultObject *)self)->r;
    PyObject *names[HPGO_EV__COUNT] = {NULL};
    PyObject *list = PyList_New((Py_ssize_t)r->n_events);
    if (!list)
        return NULL;
    for (int k = 0; k < HPGO_EV__COUNT; k++) {
        names[k] = PyUnicode_InternFromString(hpgo_sim_event_name(k));
        if (!names[k])
            goto error;
    }
    for (int64_t i = 0; i < r->n_events; i++) {
        const hpgo_sim_event_t *e = &r->events[i];
        PyObject *name = (e->kind >= 0 && e->kind < HPGO_EV__COUNT) ? names[e->kind] : Py_None;
        PyObject *t = Py_BuildValue("(ddiOiiiii)", e->start, e->duration, (int)e->device, name,
                                    (int)e->lane, (int)e->stage, (int)e->microbatch,
                                    (int)e->layer, (int)e->peer);
        if (!t)
            goto error;
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    for (int k = 0; k < HPGO_EV__COUNT; k++)
        Py_XDECREF(names[k]);
    return list;
error:
    for (int k = 0; k < HPGO_EV__COUNT; k++)
        Py_XDECREF(names[k]);
    Py_DECREF(list);
    return NULL;
}

PyDoc_STRVAR(simresult_event_slice_doc,
             "event_slice(start, stop, short) -> list of the events [start, stop) as events()\n"
             "gives them; short: without the layer (start, duration, device, name, lane, stage,\n"
             "microbatch, peer).  Indices are clamped to 0 .. n_events.");

static PyObject *simresult_event_slice(PyObject *self, PyObject *args)
{
    long long a, b;
    int shrt;
    if (!PyArg_ParseTuple(args, "LLp:event_slice", &a, &b, &shrt))
        return NULL;
    const hpgo_sim_result_t *r = ((SimResultObject *)self)->r;
    if (a < 0)
        a = 0;
    if (b > r->n_events)
        b = r->n_events;
    if (b < a)
        b = a;
    PyObject *list = PyList_New((Py_ssize_t)(b - a));
    if (!list)
        return NULL;
    for (long long i = a; i < b; i++) {
        const hpgo_sim_event_t *e = &r->events[i];
        const char *name = hpgo_sim_event_name(e->kind);
        PyObject *t = shrt ? Py_BuildValue("(ddisiiii)", e->start, e->duration, (int)e->device,
                                           name, (int)e->lane, (int)e->stage, (int)e->microbatch,
                                           (int)e->peer)
                           : Py_BuildValue("(ddisiiiii)", e->start, e->duration, (int)e->device,
                                           name, (int)e->lane, (int)e->stage, (int)e->microbatch,
                                           (int)e->layer, (int)e->peer);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)(i - a), t);
    }
    return list;
}

static PyMethodDef simresult_methods[] = {
    {"stages", simresult_stages, METH_NOARGS, simresult_stages_doc},
    {"devices", simresult_devices, METH_NOARGS, simresult_devices_doc},
    {"events", simresult_events, METH_NOARGS, simresult_events_doc},
    {"event_slice", simresult_event_slice, METH_VARARGS, simresult_event_slice_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef simresult_getset[] = {
    {"iteration_time", simresult_get_iteration_time, NULL, "seconds of one iteration", NULL},
    {"n_events", simresult_get_n_events, NULL, "number of timeline events", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(simresult_doc, "Raw result of one simulation (immutable); see hpgo.sim.");

static PyType_Slot simresult_slots[] = {
    {Py_tp_dealloc, simresult_dealloc},
    {Py_tp_methods, simresult_methods},
    {Py_tp_getset, simresult_getset},
    {Py_tp_doc, (void *)simresult_doc},
    {0, NULL},
};

static PyType_Spec simresult_spec = {
    .name = "hpgo._core.SimResult",
    .basicsize = sizeof(SimResultObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = simresult_slots,
};

/* Wrap r (ownership moves to the new object; freed here on failure). */
static PyObject *wrap_result(PyObject *module, hpgo_sim_result_t *r)
{
    if (!isfinite(r->iteration_time)) {
        hpgo_sim_result_free(r);
        return PyErr_Format(PyExc_ValueError,
                            "the simulated iteration time is not finite: the stage times or "
                            "sizes are too large for doubles");
    }
    hpgo_modstate *st = glue_state(module);
    PyTypeObject *tp = NULL;
    for (int i = 0; i < st->n_types; i++)
        if (strcmp(((PyTypeObject *)st->types[i])->tp_name, simresult_spec.name) == 0)
            tp = (PyTypeObject *)st->types[i];
    if (!tp) {
        hpgo_sim_result_free(r);
        PyErr_SetString(PyExc_RuntimeError, "hpgo._core.SimResult is not registered");
        return NULL;
    }
    SimResultObject *o = PyObject_New(SimResultObject, tp);
    if (!o) {
        hpgo_sim_result_free(r);
        return NULL;
    }
    o->r = r;
    return (PyObject *)o;
}

PyObject *glue_wrap_timeline(PyObject *module, hpgo_sim_result_t *r)
{
    hpgo_sim_result_trim(r);
    return wrap_result(module, r);
}

/* ---- argument helpers ---------------------------------------------------- */

static int get_double(PyObject *o, const char *what, double *out)
{
    return glue_double(o, what, out);
}

/* ---- sim_pipeline ---------------------------------------------------------- */

PyDoc_STRVAR(sim_pipeline_doc,
             "sim_pipeline(stages, microbatches, schedule, link_bandwidth, link_latency, "
             "allreduce_bandwidth, optimizer_factor, timeline) -> SimResult\n\n"
             "stages: sequence of (forward, backward, send_bytes, param_bytes, activation_bytes, "
             "gpus[, link_bandwidth, allreduce_bandwidth]) with gpus a sequence of ints or an "
             "int count and the optional bandwidths (bytes/s, 0 = the pipeline's) overriding "
             "the pipeline's for that stage; schedule 0=1f1b, 1=gpipe, 2=pipedream.");

typedef struct pipe_work {
    const hpgo_sim_pipeline_t *cfg;
    hpgo_sim_result_t *out;
    hpgo_err_t err;
    int rc;
} pipe_work_t;

static void pipe_work(void *ctx)
{
    pipe_work_t *w = ctx;
    w->rc = hpgo_sim_pipeline_run(w->cfg, &w->out, &w->err);
}

static PyObject *sim_pipeline(PyObject *module, PyObject *args)
{
    PyObject *stages_obj, *mb_o;
    int32_t microbatches;
    int schedule, timeline;
    double link_bw, link_lat, ar_bw, opt;
    if (!PyArg_ParseTuple(args, "OOiddddp", &stages_obj, &mb_o, &schedule, &link_bw, &link_lat,
                          &ar_bw, &opt, &timeline))
        return NULL;
    long long mb;
    if (glue_index(mb_o, "microbatches", 1, INT32_MAX, &mb) < 0)
        return NULL;
    microbatches = (int32_t)mb;
    PyObject *seq = PySequence_Tuple(stages_obj); /* own copy: see distir_batch */
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > HPGO_SIM_MAX_STAGES) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%zd stages exceed the limit of %d", n,
                     HPGO_SIM_MAX_STAGES);
        return NULL;
    }
    hpgo_sim_stage_t *st = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *st);
    int32_t *gpus = NULL;
    Py_ssize_t n_gpus_total = 0, used = 0;
    if (!st) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    /* first pass: sizes of the GPU lists */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(t) || (PyTuple_GET_SIZE(t) != 6 && PyTuple_GET_SIZE(t) != 8)) {
            PyErr_Format(PyExc_TypeError, "stage %zd must be a 6- or 8-tuple", i);
            goto error;
        }
        PyObject *g = PyTuple_GET_ITEM(t, 5);
        if (PyIndex_Check(g)) {
            int32_t c;
            if (glue_i32(g, "replicas", &c) < 0)
                goto error;
            st[i].n_gpus = c;
        } else {
            Py_ssize_t len = PySequence_Size(g);
            if (len < 0)
                goto error;
            if (len > HPGO_SIM_MAX_DEVICES) {
                PyErr_Format(PyExc_ValueError, "stage %zd lists more than %d GPUs", i,
                             HPGO_SIM_MAX_DEVICES);
                goto error;
            }
            st[i].n_gpus = (int32_t)len;
            n_gpus_total += len;
        }
    }
    gpus = PyMem_Calloc((size_t)(n_gpus_total > 0 ? n_gpus_total : 1), sizeof *gpus);
    if (!gpus) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (get_double(PyTuple_GET_ITEM(t, 0), "forward", &st[i].forward) < 0 ||
            get_double(PyTuple_GET_ITEM(t, 1), "backward", &st[i].backward) < 0 ||
            get_double(PyTuple_GET_ITEM(t, 2), "send_bytes", &st[i].send_bytes) < 0 ||
            get_double(PyTuple_GET_ITEM(t, 3), "param_bytes", &st[i].param_bytes) < 0 ||
            get_double(PyTuple_GET_ITEM(t, 4), "activation_bytes", &st[i].activation_bytes) < 0)
            goto error;
        if (PyTuple_GET_SIZE(t) == 8 &&
            (get_double(PyTuple_GET_ITEM(t, 6), "link_bandwidth", &st[i].link_bandwidth) < 0 ||
             get_double(PyTuple_GET_ITEM(t, 7), "allreduce_bandwidth",
                        &st[i].allreduce_bandwidth) < 0))
            goto error;
        PyObject *g = PyTuple_GET_ITEM(t, 5);
        if (PyIndex_Check(g))
            continue;
        PyObject *gs = PySequence_Fast(g, "gpus must be a sequence of ints");
        if (!gs)
            goto error;
        if (PySequence_Fast_GET_SIZE(gs) != st[i].n_gpus) { /* a lying __len__ */
            Py_DECREF(gs);
            PyErr_Format(PyExc_ValueError, "stage %zd: the GPU list changed its length", i);
            goto error;
        }
        st[i].gpus = gpus + used;
        for (Py_ssize_t k = 0; k < st[i].n_gpus; k++) {
            if (glue_i32(PySequence_Fast_GET_ITEM(gs, k), "GPU id", &gpus[used + k]) < 0) {
                Py_DECREF(gs);
                goto error;
            }
        }
        used += st[i].n_gpus;
        Py_DECREF(gs);
    }
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    hpgo_sim_pipeline_t cfg = {(int32_t)n, st, microbatches, schedule, link_bw, link_lat, ar_bw,
                               opt, timeline, &cancel};
    pipe_work_t w = {&cfg, NULL, {0}, HPGO_OK};
    /* a few thousand operations take well under a millisecond */
    int small = (int64_t)n * (microbatches > 0 ? microbatches : 1) < 100000;
    int stopped = glue_call(pipe_work, &w, &cancel, 0.0, small ? GLUE_SMALL : 0,
                            "simulate_pipeline");
    PyMem_Free(st);
    PyMem_Free(gpus);
    Py_DECREF(seq);
    if (stopped < 0 || w.rc != HPGO_OK) {
        hpgo_sim_result_free(w.out);
        return stopped < 0 ? NULL : glue_raise(module, w.rc, &w.err);
    }
    return wrap_result(module, w.out);
error:
    PyMem_Free(st);
    PyMem_Free(gpus);
    Py_DECREF(seq);
    return NULL;
}

/* ---- DistIR study ------------------------------------------------------------ */

/* Fill *c from a dict with the keys of hpgo_distir_config_t (missing keys
 * keep their defaults).  0 / -1 with an exception set. */
static int distir_config_from_dict(PyObject *d, hpgo_distir_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->dp = c->tp = c->pp = c->microbatches = 1;
    c->kernel_launch = -1.0;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "a DistIR configuration must be a dict");
        return -1;
    }
    struct {
        const char *key;
        int kind; /* 0 int32, 1 int64, 2 double, 3 truth value */
        void *dst;
    } fields[] = {
        {"model", 0, &c->model},
        {"cost_model", 0, &c->cost_model},
        {"schedule", 0, &c->schedule},
        {"batch_size", 1, &c->batch_size},
        {"width", 1, &c->width},
        {"input_dim", 1, &c->input_dim},
        {"output_dim", 1, &c->output_dim},
        {"seq_len", 1, &c->seq_len},
        {"heads", 0, &c->heads},
        {"layers", 0, &c->layers},
        {"dp", 0, &c->dp},
        {"tp", 0, &c->tp},
        {"pp", 0, &c->pp},
        {"microbatches", 0, &c->microbatches},
        {"dtype_bytes", 0, &c->dtype_bytes},
        {"device_flops", 2, &c->device_flops},
        {"memory_bandwidth", 2, &c->memory_bandwidth},
        {"kernel_launch", 2, &c->kernel_launch},
        {"link_gbps", 2, &c->link_gbps},
        {"timeline", 3, &c->record_events},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        PyObject *v = PyDict_GetItemString(d, fields[i].key); /* borrowed */
        if (!v || v == Py_None)
            continue;
        if (fields[i].kind == 3) {
            int t = PyObject_IsTrue(v);
            if (t < 0)
                return -1;
            *(int *)fields[i].dst = t;
        } else if (fields[i].kind == 0) {
            if (glue_i32(v, fields[i].key, (int32_t *)fields[i].dst) < 0)
                return -1;
        } else if (fields[i].kind == 1) {
            if (glue_i64(v, fields[i].key, (int64_t *)fields[i].dst) < 0)
                return -1;
        } else {
            if (get_double(v, fields[i].key, (double *)fields[i].dst) < 0)
                return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(sim_distir_doc, "sim_distir(config: dict) -> SimResult");

typedef struct distir_work {
    const hpgo_distir_config_t *cfg;
    hpgo_sim_result_t *out;
    hpgo_err_t err;
    int rc;
} distir_work_t;

static void distir_work(void *ctx)
{
    distir_work_t *w = ctx;
    w->rc = hpgo_distir_simulate(w->cfg, &w->out, &w->err);
}

static PyObject *sim_distir(PyObject *module, PyObject *arg)
{
    hpgo_distir_config_t cfg;
    if (distir_config_from_dict(arg, &cfg) < 0)
        return NULL;
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    cfg.cancel = &cancel;
    distir_work_t w = {&cfg, NULL, {0}, HPGO_OK};
    int small = (int64_t)cfg.layers * (cfg.microbatches > 0 ? cfg.microbatches : 1) *
                    (cfg.dp > 0 ? cfg.dp : 1) * (cfg.tp > 0 ? cfg.tp : 1) < 20000;
    int stopped = glue_call(distir_work, &w, &cancel, 0.0, small ? GLUE_SMALL : 0,
                            "the DistIR simulation");
    if (stopped < 0 || w.rc != HPGO_OK) {
        hpgo_sim_result_free(w.out);
        return stopped < 0 ? NULL : glue_raise(module, w.rc, &w.err);
    }
    return wrap_result(module, w.out);
}

/* Run points on a pool of `threads` (0 = default) with the GIL released and
 * return [(dp, tp, pp, microbatches, iteration_time, peak_bytes), ...]; the
 * first failing point raises.  Takes ownership of pts. */
typedef struct points_work {
    hpgo_distir_point_t *pts;
    int64_t n;
    hpgo_pool_t *pool;
} points_work_t;

static void points_work(void *ctx)
{
    points_work_t *w = ctx;
    hpgo_distir_run_points(w->pts, w->n, w->pool);
}

static PyObject *run_points(PyObject *module, hpgo_distir_point_t *pts, int64_t n, int threads)
{
    hpgo_pool_t *pool = NULL;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc = HPGO_OK;
    /* the pool is made and freed by this thread, as before glue_call: under
     * a tight address-space limit the workers take what is left */
    Py_BEGIN_ALLOW_THREADS
    if (threads != 1 && n > 1) {
        rc = hpgo_pool_new(threads, &pool, &err);
        if (rc == HPGO_E_INTERNAL) { /* not even one thread: run on this one */
            rc = HPGO_OK;
            pool = NULL;
        }
    }
    Py_END_ALLOW_THREADS
    if (rc != HPGO_OK) {
        PyMem_Free(pts);
        return glue_raise(module, rc, &err);
    }
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    for (int64_t i = 0; i < n; i++)
        pts[i].cfg.cancel = &cancel;
    points_work_t w = {pts, n, pool};
    int stopped = glue_call(points_work, &w, &cancel, 0.0, pool ? GLUE_WAITS : 0,
                            "the DistIR study");
    Py_BEGIN_ALLOW_THREADS
    hpgo_pool_free(pool);
    Py_END_ALLOW_THREADS
    if (stopped < 0) {
        PyMem_Free(pts);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (pts[i].code != HPGO_OK) {
            hpgo_err_t e = pts[i].err;
            int code = pts[i].code;
            PyMem_Free(pts);
            char msg[HPGO_ERRMSG_LEN + 64];
            PyOS_snprintf(msg, sizeof msg, "configuration %lld: %s", (long long)i, e.msg);
            PyOS_snprintf(e.msg, sizeof e.msg, "%s", msg);
            return glue_raise(module, code, &e);
        }
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) {
        PyMem_Free(pts);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        const hpgo_distir_point_t *p = &pts[i];
        PyObject *t = Py_BuildValue("(iiiidd)", (int)p->cfg.dp, (int)p->cfg.tp, (int)p->cfg.pp,
                                    (int)p->cfg.microbatches, p->iteration_time, p->peak_bytes);
        if (!t) {
            Py_DECREF(list);
            PyMem_Free(pts);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    PyMem_Free(pts);
    return list;
}

PyDoc_STRVAR(distir_batch_doc,
             "distir_batch(configs: list[dict], threads: int) -> list of (dp, tp, pp, "
             "microbatches, iteration_time, peak_bytes)");

static PyObject *distir_batch(PyObject *module, PyObject *args)
{
    PyObject *configs, *threads_o;
    long long threads;
    if (!PyArg_ParseTuple(args, "OO", &configs, &threads_o))
        return NULL;
    if (glue_index(threads_o, "threads (0 = all cores)", 0, INT32_MAX, &threads) < 0)
        return NULL;
    /* a tuple copy: reading a config may run Python code that edits the list */
    PyObject *seq = PySequence_Tuple(configs);
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    hpgo_distir_point_t *pts = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *pts);
    if (!pts) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (distir_config_from_dict(PySequence_Fast_GET_ITEM(seq, i), &pts[i].cfg) < 0) {
            Py_DECREF(seq);
            PyMem_Free(pts);
            return NULL;
        }
    Py_DECREF(seq);
    return run_points(module, pts, (int64_t)n, (int)threads);
}

static int int_list(PyObject *o, const char *what, int32_t **out, int32_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    PyObject *seq = PySequence_Fast(o, what);
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > 4096) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: too many values (%zd)", what, n);
        return -1;
    }
    int32_t *v = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (glue_i32(PySequence_Fast_GET_ITEM(seq, i), what, &v[i]) < 0) {
            Py_DECREF(seq);
            PyMem_Free(v);
            return -1;
        }
    Py_DECREF(seq);
    *out = v;
    *n_out = (int32_t)n;
    return 0;
}

PyDoc_STRVAR(distir_grid_doc,
             "distir_grid(base: dict, world_sizes, microbatches or None, threads) -> list of "
             "(dp, tp, pp, microbatches, iteration_time, peak_bytes)");

static PyObject *distir_grid(PyObject *module, PyObject *args)
{
    PyObject *base_obj, *ws_obj, *mb_obj, *threads_o;
    long long threads;
    if (!PyArg_ParseTuple(args, "OOOO", &base_obj, &ws_obj, &mb_obj, &threads_o))
        return NULL;
    if (glue_index(threads_o, "threads (0 = all cores)", 0, INT32_MAX, &threads) < 0)
        return NULL;
    hpgo_distir_config_t base;
    if (distir_config_from_dict(base_obj, &base) < 0)
        return NULL;
    int32_t *ws = NULL, *mbs = NULL, n_ws = 0, n_mbs = 0;
    if (int_list(ws_obj, "devices", &ws, &n_ws) < 0)
        return NULL;
    if (mb_obj != Py_None && int_list(mb_obj, "microbatches", &mbs, &n_mbs) < 0) {
        PyMem_Free(ws);
        return NULL;
    }
    hpgo_distir_config_t *cfgs = NULL;
    int64_t n = 0;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hpgo_distir_grid_configs(&base, ws, n_ws, mbs, mb_obj == Py_None ? 0 : n_mbs, &cfgs, &n,
                                  &err);
    Py_END_ALLOW_THREADS
    PyMem_Free(ws);
    PyMem_Free(mbs);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    hpgo_distir_point_t *pts = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *pts);
    if (!pts) {
        free(cfgs);
        return PyErr_NoMemory();
    }
    for (int64_t i = 0; i < n; i++)
        pts[i].cfg = cfgs[i];
    free(cfgs);
    return run_points(module, pts, n, (int)threads);
}

PyDoc_STRVAR(default_threads_doc,
             "default_threads() -> int: threads used for threads=0 (HPGO_NUM_THREADS or the "
             "number of online CPUs)");

static PyObject *default_threads(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromLong((long)hpgo_default_threads());
}

PyDoc_STRVAR(event_names_doc, "event_names() -> tuple of the timeline's event names");

static PyObject *event_names(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    PyObject *t = PyTuple_New(HPGO_EV__COUNT);
    if (!t)
        return NULL;
    for (int k = 0; k < HPGO_EV__COUNT; k++) {
        PyObject *s = PyUnicode_FromString(hpgo_sim_event_name(k));
        if (!s) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, s);
    }
    return t;
}

static PyMethodDef sim_methods[] = {
    {"sim_pipeline", sim_pipeline, METH_VARARGS, sim_pipeline_doc},
    {"sim_distir", sim_distir, METH_O, sim_distir_doc},
    {"distir_batch", distir_batch, METH_VARARGS, distir_batch_doc},
    {"distir_grid", distir_grid, METH_VARARGS, distir_grid_doc},
    {"default_threads", default_threads, METH_NOARGS, default_threads_doc},
    {"event_names", event_names, METH_NOARGS, event_names_doc},
    {NULL, NULL, 0, NULL},
};

int glue_sim_init(PyObject *module)
{
    if (!glue_add_type(module, &simresult_spec, NULL))
        return -1;
    return PyModule_AddFunctions(module, sim_methods);
}
