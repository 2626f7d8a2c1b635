/* plan_glue.c - CPython glue of the HPGO-compatible planner: the Model,
 * Devices and AsyncOrchestrate types and the data-parallel speedup functions.
 *
 * DESIGN: one pattern per call (STYLE.md 8): parse arguments, copy into C
 * structs, drop the GIL, call the core, take the GIL back, raise or convert.
 * Model objects own an hpgo_model_t whose big arrays are immutable and
 * shared; its three settings are plain scalars that Python may change, so
 * every call that drops the GIL first takes a private snapshot (clone) of the
 * model under the GIL.  Devices are immutable.  AsyncOrchestrate keeps
 * references to its Model and Devices and replaces its `res` list atomically
 * (under the GIL) after planning, so concurrent calls are safe. */
#include "glue.h"

#include <float.h>
#include <limits.h>
#include <math.h>

#include "dataparallel.h"
#include "model.h"
#include "plan_hpgo.h"
#include "profile.h"
#include "sweep.h"
#include "topo.h"

/* ------------------------------------------------------------ helpers */

static PyObject *find_type(PyObject *module, const char *name)
{
    hpgo_modstate *st = glue_state(module);
    for (int i = 0; i < st->n_types; i++) {
        const char *tn = ((PyTypeObject *)st->types[i])->tp_name;
        const char *dot = strrchr(tn, '.');
        if (strcmp(dot ? dot + 1 : tn, name) == 0)
            return st->types[i];
    }
    PyErr_Format(PyExc_RuntimeError, "hpgo: type %s not registered", name);
    return NULL;
}

/* ---------------------------------------------------------------- Model */

typedef struct {
    PyObject_HEAD
    hpgo_model_t *m;
} ModelObject;

static PyObject *model_wrap(PyObject *module, hpgo_model_t *m)
{
    PyTypeObject *tp = (PyTypeObject *)find_type(module, "Model");
    if (!tp) {
        hpgo_model_free(m);
        return NULL;
    }
    ModelObject *o = PyObject_GC_New(ModelObject, tp);
    if (!o) {
        hpgo_model_free(m);
        return NULL;
    }
    o->m = m;
    PyObject_GC_Track(o);
    return (PyObject *)o;
}

static int model_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    (void)arg;
    return 0;
}

static void model_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    hpgo_model_free(((ModelObject *)self)->m);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* Load a profile and build a model with the GIL released. */
static PyObject *load_model(PyObject *module, PyObject *path, PyObject *pbs_o, PyObject *gbs_o)
{
    uint32_t pbs, gbs;
    if (glue_u32(pbs_o, "pbs", &pbs) < 0 || glue_u32(gbs_o, "gbs", &gbs) < 0)
        return NULL;
    if (pbs == 0)
        return PyErr_Format(PyExc_ValueError, "pbs (profile batch size) must be >= 1, got 0");
    if (gbs == 0)
        return PyErr_Format(PyExc_ValueError, "gbs (global batch size) must be >= 1, got 0");
    PyObject *b = glue_fspath(path);
    if (!b)
        return NULL;
    const char *cpath = PyBytes_AS_STRING(b);
    hpgo_err_t err;
    hpgo_err_clear(&err);
    hpgo_graph_t *g = NULL;
    hpgo_states_t *s = NULL;
    hpgo_model_t *m = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hpgo_graph_load(cpath, &g, &err);
    if (rc == HPGO_OK)
        rc = hpgo_states_build(g, &s, &err);
    if (rc == HPGO_OK) {
        rc = hpgo_model_new(s, pbs, gbs, &m, &err);
        if (rc != HPGO_OK) { /* name the file, as the reader's messages do */
            char msg[HPGO_ERRMSG_LEN];
            snprintf(msg, sizeof msg, "%.240s: %.390s", g->name, err.msg);
            memcpy(err.msg, msg, sizeof msg);
        }
    }
    hpgo_states_free(s);
    hpgo_graph_free(g);
    Py_END_ALLOW_THREADS
    Py_DECREF(b);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    return model_wrap(module, m);
}

PyDoc_STRVAR(model_new_doc,
             "Model(path, pbs, gbs)\n--\n\n"
             "Read a PipeDream graph.txt profile measured at batch size pbs and scale it to\n"
             "the global batch size gbs (HPGO's model_from_torch_graph).");

static PyObject *model_tp_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "pbs", "gbs", NULL};
    PyObject *path, *pbs, *gbs;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:Model", kwlist, &path, &pbs, &gbs))
        return NULL;
    PyObject *module = PyType_GetModule(type);
    if (!module)
        return NULL;
    return load_model(module, path, pbs, gbs);
}

static hpgo_model_t *model_snapshot(PyObject *module, PyObject *o)
{
    PyObject *tp = find_type(module, "Model");
    if (!tp)
        return NULL;
    if (!PyObject_TypeCheck(o, (PyTypeObject *)tp)) {
        PyErr_Format(PyExc_TypeError, "expected an hpgo.Model, not %.100s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    hpgo_model_t *copy = NULL;
    hpgo_err_t err;
    int rc = hpgo_model_clone(((ModelObject *)o)->m, &copy, &err);
    if (rc != HPGO_OK) {
        glue_raise(module, rc, &err);
        return NULL;
    }
    return copy;
}

PyDoc_STRVAR(normalized_copy_doc,
             "normalized_copy(bs)\n--\n\n"
             "A copy scaled to global batch size bs (settings are kept).");

static PyObject *model_normalized_copy(PyObject *self, PyObject *arg)
{
    PyObject *module = glue_module_of(self);
    uint32_t bs;
    if (glue_u32(arg, "bs", &bs) < 0)
        return NULL;
    if (bs == 0)
        return PyErr_Format(PyExc_ValueError, "bs (global batch size) must be >= 1, got 0");
    hpgo_model_t *m = NULL;
    hpgo_err_t err;
    int rc = hpgo_model_normalized_copy(((ModelObject *)self)->m, bs, &m, &err);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    return model_wrap(module, m);
}

static int check_rc(const hpgo_model_t *m, int32_t r, int32_t c, int row)
{
    if (r < 0 || r > (row ? m->L : m->L - 1) || c < 0 || c >= m->L) {
        PyErr_Format(PyExc_IndexError, "index out of range: (%d, %d) for %d states", (int)r,
                     (int)c, (int)m->L);
        return -1;
    }
    return 0;
}

/* A state index: any int (operator.index); one that does not even fit an
 * int32 is out of range like any other (IndexError, as for 39 states). */
static int state_index(PyObject *o, const char *what, int32_t *out)
{
    long long v;
    int overflow;
    if (glue_index_ll(o, what, &v, &overflow) < 0)
        return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_IndexError, "%s is out of range: %R", what, o);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

typedef double (*matrix_fn)(const hpgo_model_t *, int32_t, int32_t);

static PyObject *model_matrix(PyObject *self, PyObject *args, matrix_fn fn, const char *fmt)
{
    PyObject *ro, *co;
    int32_t r, c;
    if (!PyArg_ParseTuple(args, fmt, &ro, &co))
        return NULL;
    if (state_index(ro, "row r", &r) < 0 || state_index(co, "column c", &c) < 0)
        return NULL;
    const hpgo_model_t *m = ((ModelObject *)self)->m;
    if (check_rc(m, r, c, 1) < 0)
        return NULL;
    return PyFloat_FromDouble(fn(m, r, c));
}

static PyObject *model_ct(PyObject *self, PyObject *args)
{
    return model_matrix(self, args, hpgo_model_ct, "OO:ct");
}
static PyObject *model_ac(PyObject *self, PyObject *args)
{
    return model_matrix(self, args, hpgo_model_ac, "OO:ac");
}
static PyObject *model_pa(PyObject *self, PyObject *args)
{
    return model_matrix(self, args, hpgo_model_pa, "OO:pa");
}

static PyObject *model_oa(PyObject *self, PyObject *arg)
{
    const hpgo_model_t *m = ((ModelObject *)self)->m;
    int32_t k;
    if (state_index(arg, "k", &k) < 0)
        return NULL;
    if (check_rc(m, k, k, 0) < 0)
        return NULL;
    return PyFloat_FromDouble(hpgo_model_oa(m, k));
}

static PyObject *model_preds(PyObject *self, PyObject *arg)
{
    const hpgo_model_t *m = ((ModelObject *)self)->m;
    int32_t j, n;
    if (state_index(arg, "j", &j) < 0)
        return NULL;
    if (check_rc(m, j, j, 0) < 0)
        return NULL;
    const int32_t *p = hpgo_model_preds(m, j, &n);
    PyObject *l = PyList_New(n);
    for (int32_t a = 0; l && a < n; a++) {
        PyObject *v = PyLong_FromLong(p[a]);
        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, a, v);
    }
    return l;
}

static PyObject *model_maxbs(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLong(
        hpgo_model_max_single_gpu_batch_size(((ModelObject *)self)->m));
}

static PyObject *model_layers(PyObject *self, void *Py_UNUSED(closure))
{
    PyObject *module = glue_module_of(self);
    PyObject *tp = find_type(module, "Layer");
    if (!tp)
        return NULL;
    const hpgo_model_t *m = ((ModelObject *)self)->m;
    PyObject *l = PyList_New(m->L);
    if (!l)
        return NULL;
    for (int32_t k = 0; k < m->L; k++) {
        PyObject *it = PyStructSequence_New((PyTypeObject *)tp);
        if (!it) {
            Py_DECREF(l);
            return NULL;
        }
        PyObject *vals[7] = {
            PyLong_FromLong(k),
            Py_NewRef(Py_None),
            PyUnicode_DecodeUTF8(hpgo_model_label(m, k), (Py_ssize_t)strlen(hpgo_model_label(m, k)),
                                 "replace"),
            PyFloat_FromDouble(hpgo_model_ct(m, k, k)),
            PyFloat_FromDouble(hpgo_model_ac(m, k, k)),
            PyFloat_FromDouble(hpgo_model_oa(m, k)),
            PyFloat_FromDouble(hpgo_model_pa(m, k, k)),
        };
        int bad = 0;
        for (int v = 0; v < 7; v++) {
            if (!vals[v])
                bad = 1;
            PyStructSequence_SET_ITEM(it, v, vals[v] ? vals[v] : Py_NewRef(Py_None));
        }
        PyList_SET_ITEM(l, k, it);
        if (bad) {
            Py_DECREF(l);
            return NULL;
        }
    }
    return l;
}

#define MODEL_U32_GETTER(name, field)                                                        \
    static PyObject *model_get_##name(PyObject *self, void *Py_UNUSED(c))                   \
    {                                                                                        \
        return PyLong_FromUnsignedLong(((ModelObject *)self)->m->field);                     \
    }

MODEL_U32_GETTER(pbs, pbs)
MODEL_U32_GETTER(gbs, gbs)
MODEL_U32_GETTER(mbs, min_micro_batch_size)
MODEL_U32_GETTER(oms, optimizer_memory_scaling)

static PyObject *model_get_L(PyObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(((ModelObject *)self)->m->L);
}

static PyObject *model_get_papb(PyObject *self, void *Py_UNUSED(c))
{
    return PyFloat_FromDouble(((ModelObject *)self)->m->peak_activation_per_batch);
}

static PyObject *model_get_total_time(PyObject *self, void *Py_UNUSED(c))
{
    return PyFloat_FromDouble(hpgo_model_total_time(((ModelObject *)self)->m));
}

static PyObject *model_get_total_params(PyObject *self, void *Py_UNUSED(c))
{
    return PyFloat_FromDouble(hpgo_model_total_params(((ModelObject *)self)->m));
}

static int model_set_mbs(PyObject *self, PyObject *v, void *Py_UNUSED(c))
{
    uint32_t x;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete min_micro_batch_size");
        return -1;
    }
    if (glue_u32(v, "min_micro_batch_size", &x) < 0)
        return -1;
    if (x == 0) {
        PyErr_SetString(PyExc_ValueError, "min_micro_batch_size must be >= 1, got 0");
        return -1;
    }
    ((ModelObject *)self)->m->min_micro_batch_size = x;
    return 0;
}

static int model_set_oms(PyObject *self, PyObject *v, void *Py_UNUSED(c))
{
    uint32_t x;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete optimizer_memory_scaling");
        return -1;
    }
    if (glue_u32(v, "optimizer_memory_scaling", &x) < 0)
        return -1;
    ((ModelObject *)self)->m->optimizer_memory_scaling = x;
    return 0;
}

static int model_set_papb(PyObject *self, PyObject *v, void *Py_UNUSED(c))
{
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete peak_activation_per_batch");
        return -1;
    }
    double x;
    if (glue_double(v, "peak_activation_per_batch", &x) < 0)
        return -1;
    if (!(x > 0.0) || !isfinite(x)) {
        PyErr_Format(PyExc_ValueError,
                     "peak_activation_per_batch must be a positive finite number of bytes, got %R",
                     v);
        return -1;
    }
    ((ModelObject *)self)->m->peak_activation_per_batch = x;
    return 0;
}

static PyObject *model_repr(PyObject *self)
{
    const hpgo_model_t *m = ((ModelObject *)self)->m;
    char t1[64], p[64], papb[64];
    snprintf(t1, sizeof t1, "%.6g", hpgo_model_total_time(m));
    snprintf(p, sizeof p, "%.6g", hpgo_model_total_params(m));
    snprintf(papb, sizeof papb, "%.6g", m->peak_activation_per_batch);
    return PyUnicode_FromFormat(
        "Model(layers=%d, pbs=%u, gbs=%u, total_time=%s s, total_params=%s B, "
        "min_micro_batch_size=%u, optimizer_memory_scaling=%u, peak_activation_per_batch=%s)",
        (int)m->L, m->pbs, m->gbs, t1, p, m->min_micro_batch_size, m->optimizer_memory_scaling,
        papb);
}


/* ------------------------------------------------------------- pickling
 * A model pickles to what it holds, not to its profile file: the unscaled
 * per-state sums (little-endian doubles), the predecessor lists as runs of
 * consecutive states (CSR of (first, count) pairs, little-endian int32: an
 * antichain DAG's lists are mostly "every earlier state", so ResNet-50's
 * 28,009 predecessors are 494 runs), the labels (NUL-separated), pbs, gbs, the chain of
 * scale factors of its normalized copies and the three settings.  Rebuilt
 * by _model_restore, every number it computes is bit-identical. */

#define MODEL_PICKLE_VERSION 1

static PyObject *pack_doubles(const double *v, Py_ssize_t n)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!b)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(b);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyFloat_Pack8(v[i], (char *)p + 8 * i, 1) < 0) {
            Py_DECREF(b);
            return NULL;
        }
    return b;
}

static PyObject *pack_i32(const int32_t *v, Py_ssize_t n)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, n * 4);
    if (!b)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(b);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)v[i];
        for (int k = 0; k < 4; k++)
            p[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    return b;
}

/* bytes of exactly n little-endian doubles into a new PyMem array */
static double *unpack_doubles(PyObject *o, Py_ssize_t n, const char *what)
{
    if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) != n * 8) {
        PyErr_Format(PyExc_ValueError, "pickled model: %s must be %zd bytes", what, n * 8);
        return NULL;
    }
    double *v = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!v)
        return (double *)PyErr_NoMemory();
    const char *p = PyBytes_AS_STRING(o);
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyFloat_Unpack8(p + 8 * i, 1);
        if (v[i] == -1.0 && PyErr_Occurred()) {
            PyMem_Free(v);
            return NULL;
        }
    }
    return v;
}

static int32_t *unpack_i32(PyObject *o, Py_ssize_t *n, const char *what)
{
    if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) % 4) {
        PyErr_Format(PyExc_ValueError, "pickled model: %s must be bytes of int32", what);
        return NULL;
    }
    *n = PyBytes_GET_SIZE(o) / 4;
    int32_t *v = PyMem_Malloc((size_t)(*n ? *n : 1) * sizeof(int32_t));
    if (!v)
        return (int32_t *)PyErr_NoMemory();
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(o);
    for (Py_ssize_t i = 0; i < *n; i++) {
        uint32_t u = 0;
        for (int k = 0; k < 4; k++)
            u |= (uint32_t)p[4 * i + k] << (8 * k);
        v[i] = (int32_t)u;
    }
    return v;
}

static PyObject *model_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *module = glue_module_of(self);
    const hpgo_model_t *m = ((ModelObject *)self)->m;
    hpgo_states_t st;
    hpgo_model_states_view(m, &st);
    PyObject *restore = PyObject_GetAttrString(module, "_model_restore");
    if (!restore)
        return NULL;
    size_t lab = 0;
    for (int32_t s = 0; s < st.n; s++)
        lab += strlen(st.label[s]) + 1;
    PyObject *labels = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)lab);
    if (!labels) {
        Py_DECREF(restore);
        return NULL;
    }
    char *p = PyBytes_AS_STRING(labels);
    for (int32_t s = 0; s < st.n; s++) {
        size_t n = strlen(st.label[s]) + 1;
        memcpy(p, st.label[s], n);
        p += n;
    }
    /* runs: run_off[j]..run_off[j+1] index (first, count) pairs in runs */
    int32_t *run_off = PyMem_Malloc(((size_t)st.n + 1) * sizeof(int32_t));
    int32_t *runs = PyMem_Malloc(2 * (size_t)(st.pred_off[st.n] + 1) * sizeof(int32_t));
    if (!run_off || !runs) {
        PyMem_Free(run_off);
        PyMem_Free(runs);
        Py_DECREF(restore);
        Py_DECREF(labels);
        return PyErr_NoMemory();
    }
    int32_t nr = 0;
    for (int32_t j = 0; j < st.n; j++) {
        run_off[j] = nr;
        for (int32_t k = st.pred_off[j]; k < st.pred_off[j + 1]; k++) {
            if (k > st.pred_off[j] && st.pred_idx[k] == st.pred_idx[k - 1] + 1) {
                runs[2 * nr - 1]++;
            } else {
                runs[2 * nr] = st.pred_idx[k];
                runs[2 * nr + 1] = 1;
                nr++;
            }
        }
    }
    run_off[st.n] = nr;
    PyObject *off_b = pack_i32(run_off, (Py_ssize_t)st.n + 1), *runs_b = pack_i32(runs, 2 * nr);
    PyMem_Free(run_off);
    PyMem_Free(runs);
    PyObject *state = Py_BuildValue(
        "(iNNNNNNNIINIId)", MODEL_PICKLE_VERSION, pack_doubles(st.ct, st.n),
        pack_doubles(st.act, st.n), pack_doubles(st.par, st.n), pack_doubles(st.oa, st.n),
        off_b, runs_b,
        labels, (unsigned int)m->pbs, (unsigned int)m->gbs,
        pack_doubles(m->factors, m->n_factors), (unsigned int)m->min_micro_batch_size,
        (unsigned int)m->optimizer_memory_scaling, m->peak_activation_per_batch);
    if (!state) {
        Py_DECREF(restore);
        return NULL;
    }
    return Py_BuildValue("(N(N))", restore, state);
}

static PyMethodDef model_methods[] = {
    {"__reduce__", model_reduce, METH_NOARGS,
     "__reduce__()\n--\n\nPickle support: the per-state numbers and settings, not the file."},
    {"normalized_copy", model_normalized_copy, METH_O, normalized_copy_doc},
    {"ct", model_ct, METH_VARARGS,
     "ct(r, c)\n--\n\nCompute seconds of states r..c (row 0: 0..c), scaled to gbs (HPGO's CT)."},
    {"ac", model_ac, METH_VARARGS, "ac(r, c)\n--\n\nActivation bytes of states r..c (AC)."},
    {"pa", model_pa, METH_VARARGS, "pa(r, c)\n--\n\nParameter bytes of states r..c (PA)."},
    {"oa", model_oa, METH_O, "oa(k)\n--\n\nActivation bytes crossing the cut after state k."},
    {"preds", model_preds, METH_O, "preds(j)\n--\n\nPredecessor states of state j, ascending."},
    {"max_single_gpu_batch_size", model_maxbs, METH_NOARGS,
     "max_single_gpu_batch_size()\n--\n\nLargest batch one 16 GB GPU holds (HPGO's memory "
     "model)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef model_getset[] = {
    {"layers", model_layers, NULL, "Per-state layers (HPGO's Model.layers).", NULL},
    {"num_layers", model_get_L, NULL, "Number of layer states L.", NULL},
    {"pbs", model_get_pbs, NULL, "Profile batch size.", NULL},
    {"gbs", model_get_gbs, NULL, "Global batch size the numbers are scaled to.", NULL},
    {"min_micro_batch_size", model_get_mbs, model_set_mbs, "Smallest micro-batch (mbs).", NULL},
    {"optimizer_memory_scaling", model_get_oms, model_set_oms,
     "Parameter memory multiplier of the memory model.", NULL},
    {"peak_activation_per_batch", model_get_papb, model_set_papb,
     "Activation bytes per sample of the memory model.", NULL},
    {"total_time", model_get_total_time, NULL, "T1: one gbs iteration on one GPU, seconds.",
     NULL},
    {"total_params", model_get_total_params, NULL, "Parameter bytes of the whole model.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot model_slots[] = {
    {Py_tp_new, model_tp_new},
    {Py_tp_dealloc, model_dealloc},
    {Py_tp_traverse, model_traverse},
    {Py_tp_repr, model_repr},
    {Py_tp_methods, model_methods},
    {Py_tp_getset, model_getset},
    {Py_tp_doc, (void *)model_new_doc},
    {0, NULL},
};

static PyType_Spec model_spec = {
    .name = "hpgo.Model",
    .basicsize = sizeof(ModelObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = model_slots,
};

/* -------------------------------------------------------------- Devices */

typedef struct {
    PyObject_HEAD
    hpgo_topo_t *t;
} DevicesObject;

static int parse_seps(PyObject *seps, int32_t **out, int32_t *n)
{
    PyObject *seq = PySequence_Fast(seps, "seps must be a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len == 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError,
                        "seps must not be empty: give cumulative GPU counts per machine, "
                        "e.g. [8, 16] for 2 machines of 8 GPUs");
        return -1;
    }
    if (len > HPGO_MAX_GPUS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "seps has %zd machines, more than the limit of %d GPUs",
                     len, HPGO_MAX_GPUS);
        return -1;
    }
    int32_t *v = PyMem_Malloc((size_t)len * sizeof(int32_t));
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (glue_i32(PySequence_Fast_GET_ITEM(seq, i), "seps item", &v[i]) < 0) {
            PyMem_Free(v);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = v;
    *n = (int32_t)len;
    return 0;
}

static PyObject *devices_make(PyObject *module, PyTypeObject *tp, PyObject *n_o, PyObject *seps)
{
    int32_t n, ns, *sv = NULL;
    if (parse_seps(seps, &sv, &ns) < 0)
        return NULL;
    if (n_o) {
        if (glue_i32(n_o, "num_gpus", &n) < 0) {
            PyMem_Free(sv);
            return NULL;
        }
    } else {
        n = sv[ns - 1];
    }
    hpgo_topo_t *t = NULL;
    hpgo_err_t err;
    int rc = hpgo_topo_new(n, sv, ns, &t, &err);
    PyMem_Free(sv);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    DevicesObject *o = PyObject_GC_New(DevicesObject, tp);
    if (!o) {
        hpgo_topo_free(t);
        return NULL;
    }
    o->t = t;
    PyObject_GC_Track(o);
    return (PyObject *)o;
}

PyDoc_STRVAR(devices_doc,
             "Devices(num_gpus, seps)\n--\n\n"
             "A cluster of num_gpus GPUs on machines given by cumulative boundaries seps,\n"
             "e.g. Devices(16, [8, 16]) = 2 machines x 8 GPUs.  Bandwidths are HPGO's:\n"
             "NVLink 25 GB/s inside a machine, Ethernet 1 GB/s (3 GB/s all-reduce) across.");

static PyObject *devices_tp_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"num_gpus", "seps", NULL};
    PyObject *n, *seps;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:Devices", kwlist, &n, &seps))
        return NULL;
    PyObject *module = PyType_GetModule(type);
    if (!module)
        return NULL;
    return devices_make(module, type, n, seps);
}

static void devices_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    hpgo_topo_free(((DevicesObject *)self)->t);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *devices_get_n(PyObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(((DevicesObject *)self)->t->n);
}

static PyObject *devices_get_machines(PyObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(((DevicesObject *)self)->t->machines);
}

static PyObject *devices_get_seps(PyObject *self, void *Py_UNUSED(c))
{
    const hpgo_topo_t *t = ((DevicesObject *)self)->t;
    PyObject *l = PyList_New(t->machines);
    for (int32_t k = 0; l && k < t->machines; k++) {
        PyObject *v = PyLong_FromLong(t->seps[k]);
        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, k, v);
    }
    return l;
}

static PyObject *devices_repr(PyObject *self)
{
    PyObject *seps = devices_get_seps(self, NULL);
    if (!seps)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("Devices(num_gpus=%d, seps=%R)",
                                       (int)((DevicesObject *)self)->t->n, seps);
    Py_DECREF(seps);
    return r;
}

static PyObject *devices_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *seps = devices_get_seps(self, NULL);
    if (!seps)
        return NULL;
    return Py_BuildValue("(O(iN))", (PyObject *)Py_TYPE(self),
                         (int)((DevicesObject *)self)->t->n, seps);
}

static PyMethodDef devices_methods[] = {
    {"__reduce__", devices_reduce, METH_NOARGS,
     "__reduce__()\n--\n\nPickle support: Devices(num_gpus, seps)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef devices_getset[] = {
    {"num_gpus", devices_get_n, NULL, "Number of GPUs.", NULL},
    {"machines", devices_get_machines, NULL, "Number of machines.", NULL},
    {"seps", devices_get_seps, NULL, "Cumulative machine boundaries.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static int devices_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    (void)arg;
    return 0;
}

static PyType_Slot devices_slots[] = {
    {Py_tp_new, devices_tp_new},
    {Py_tp_dealloc, devices_dealloc},
    {Py_tp_traverse, devices_traverse},
    {Py_tp_repr, devices_repr},
    {Py_tp_getset, devices_getset},
    {Py_tp_methods, devices_methods},
    {Py_tp_doc, (void *)devices_doc},
    {0, NULL},
};

static PyType_Spec devices_spec = {
    .name = "hpgo.Devices",
    .basicsize = sizeof(DevicesObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = devices_slots,
};

static const hpgo_topo_t *get_topo(PyObject *module, PyObject *o)
{
    PyObject *tp = find_type(module, "Devices");
    if (!tp)
        return NULL;
    if (!PyObject_TypeCheck(o, (PyTypeObject *)tp)) {
        PyErr_Format(PyExc_TypeError, "expected an hpgo.Devices, not %.100s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return ((DevicesObject *)o)->t;
}

/* --------------------------------------------------------- conversions */

static PyObject *gpus_list(const hpgo_gpuset_t *s)
{
    PyObject *l = PyList_New(0);
    if (!l)
        return NULL;
    for (int w = 0; w < HPGO_GPUSET_WORDS; w++) {
        uint64_t x = s->w[w];
        while (x) {
            PyObject *v = PyLong_FromLong(w * 64 + __builtin_ctzll(x));
            x &= x - 1;
            if (!v || PyList_Append(l, v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(l);
                return NULL;
            }
            Py_DECREF(v);
        }
    }
    return l;
}

static PyObject *stages_list(const hpgo_candidate_t *c)
{
    PyObject *l = PyList_New(c->n_stages);
    for (int32_t s = 0; l && s < c->n_stages; s++) {
        const hpgo_stage_t *st = &c->stages[s];
        PyObject *g = gpus_list(&st->gpus);
        PyObject *t = g ? Py_BuildValue("(iiiN)", (int)st->a, (int)st->b, (int)st->units, g)
                        : NULL;
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, s, t);
    }
    return l;
}

static PyObject *cand_label(const hpgo_candidate_t *c)
{
    switch (c->kind) {
    case HPGO_CAND_DP: return PyUnicode_FromFormat("i=%d", (int)c->i);
    case HPGO_CAND_STRAIGHT: return PyUnicode_FromFormat("straight i=%d", (int)c->i);
    default: return PyUnicode_FromString("bipartition");
    }
}

static PyObject *cand_object(PyObject *module, const hpgo_candidate_t *c)
{
    PyObject *tp = find_type(module, "Candidate");
    if (!tp)
        return NULL;
    PyObject *o = PyStructSequence_New((PyTypeObject *)tp);
    if (!o)
        return NULL;
    PyObject *vals[5] = {
        PyFloat_FromDouble(c->speedup),
        stages_list(c),
        PyLong_FromLong(c->rp),
        cand_label(c),
        PyFloat_FromDouble(c->block_time),
    };
    int bad = 0;
    for (int v = 0; v < 5; v++) {
        if (!vals[v])
            bad = 1;
        PyStructSequence_SET_ITEM(o, v, vals[v] ? vals[v] : Py_NewRef(Py_None));
    }
    if (bad) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

/* ----------------------------------------------------- AsyncOrchestrate */

typedef struct {
    PyObject_HEAD
    PyObject *model;   /* Model */
    PyObject *devices; /* Devices */
    PyObject *res;     /* list of Candidate */
    PyObject *skipped; /* list of (label, reason) */
    int exhaustive;
    int threads;
    size_t max_bytes;
    double timeout; /* seconds, 0 = none */
} OrchObject;

PyDoc_STRVAR(orch_doc,
             "AsyncOrchestrate(model, devices, *, threads=0, exhaustive=False, max_memory=0,\n"
             "                 timeout=None)\n--\n\n"
             "HPGO's hybrid planner for a model on a cluster.  orchestrate() fills `res`\n"
             "with every candidate plan in HPGO's order; py_orchestrate() returns the best\n"
             "as (speedup, [(first_state, end_state, units, [gpu ids]), ...]).\n"
             "threads: worker threads (0 = HPGO_NUM_THREADS or all cores).  exhaustive:\n"
             "disable the exact pruning of the search (same results, slower).  max_memory:\n"
             "bytes one candidate's search may use (0 = 512 MiB); a candidate that needs\n"
             "more is listed in `skipped`.  timeout: seconds one orchestrate() may take\n"
             "(TimeoutError past it; None = no limit).  Ctrl-C stops a run.");

static PyObject *orch_tp_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"model",      "devices", "threads", "exhaustive",
                             "max_memory", "timeout", NULL};
    PyObject *model, *devices, *timeout_o = Py_None, *threads_o = NULL, *max_memory_o = NULL;
    int exhaustive = 0;
    long long threads = 0, max_memory = 0;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OpOO:AsyncOrchestrate", kwlist, &model,
                                     &devices, &threads_o, &exhaustive, &max_memory_o,
                                     &timeout_o))
        return NULL;
    if (glue_timeout(timeout_o, &timeout) < 0)
        return NULL;
    /* threads beyond the pool's limit are clamped by the pool, as documented */
    if (threads_o && glue_index(threads_o, "threads", 0, INT32_MAX, &threads) < 0)
        return NULL;
    const long long max_size =
        (uintmax_t)SIZE_MAX > (uintmax_t)LLONG_MAX ? LLONG_MAX : (long long)SIZE_MAX;
    if (max_memory_o && glue_index(max_memory_o, "max_memory (bytes)", 0, max_size,
                                   &max_memory) < 0)
        return NULL;
    PyObject *module = PyType_GetModule(type);
    if (!module)
        return NULL;
    PyObject *mt = find_type(module, "Model");
    if (!mt)
        return NULL;
    if (!PyObject_TypeCheck(model, (PyTypeObject *)mt))
        return PyErr_Format(PyExc_TypeError, "model must be an hpgo.Model, not %.100s",
                            Py_TYPE(model)->tp_name);
    if (!get_topo(module, devices))
        return NULL;
    OrchObject *o = PyObject_GC_New(OrchObject, type);
    if (!o)
        return NULL;
    o->model = Py_NewRef(model);
    o->devices = Py_NewRef(devices);
    o->res = PyList_New(0);
    o->skipped = PyList_New(0);
    o->exhaustive = exhaustive;
    o->threads = (int)threads;
    o->max_bytes = (size_t)max_memory;
    o->timeout = timeout;
    PyObject_GC_Track(o);
    if (!o->res || !o->skipped) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static int orch_traverse(PyObject *self, visitproc visit, void *arg)
{
    OrchObject *o = (OrchObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->model);
    Py_VISIT(o->devices);
    Py_VISIT(o->res);
    Py_VISIT(o->skipped);
    return 0;
}

static int orch_clear(PyObject *self)
{
    OrchObject *o = (OrchObject *)self;
    Py_CLEAR(o->model);
    Py_CLEAR(o->devices);
    Py_CLEAR(o->res);
    Py_CLEAR(o->skipped);
    return 0;
}

static void orch_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    orch_clear(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

typedef struct orch_work {
    const hpgo_model_t *m;
    const hpgo_topo_t *t;
    const hpgo_plan_opts_t *opts;
    hpgo_orch_t *res;
    hpgo_err_t err;
    int rc;
} orch_work_t;

static void orch_work(void *ctx)
{
    orch_work_t *w = ctx;
    w->rc = hpgo_orchestrate(w->m, w->t, w->opts, &w->res, &w->err);
}

/* Plan with the GIL released (Ctrl-C and the timeout stop it); on success
 * replaces res/skipped and returns the index of the best candidate in res
 * (-1: none). */
static int orch_run(OrchObject *o, Py_ssize_t *best_out)
{
    PyObject *module = glue_module_of((PyObject *)o);
    hpgo_model_t *m = model_snapshot(module, o->model);
    if (!m)
        return -1;
    const hpgo_topo_t *t = ((DevicesObject *)o->devices)->t;
    Py_INCREF(o->devices); /* keep the topology alive while unlocked */
    PyObject *devices = o->devices;
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    hpgo_plan_opts_t opts = {o->exhaustive, o->threads, o->max_bytes, &cancel};
    orch_work_t w = {m, t, &opts, NULL, {0}, HPGO_OK};
    int small = (int64_t)m->L * t->n * t->n < 20000;
    int stopped = glue_call(orch_work, &w, &cancel, o->timeout, small ? GLUE_SMALL : 0,
                            "AsyncOrchestrate.orchestrate");
    Py_DECREF(devices);
    hpgo_model_free(m);
    hpgo_orch_t *res = w.res;
    if (stopped < 0 || w.rc != HPGO_OK) {
        hpgo_orch_free(res);
        if (stopped == 0)
            glue_raise(module, w.rc, &w.err);
        return -1;
    }
    PyObject *lres = PyList_New(0), *lskip = PyList_New(0);
    Py_ssize_t best = -1;
    if (!lres || !lskip)
        goto error;
    for (int32_t a = 0; a < res->n; a++) {
        const hpgo_candidate_t *c = &res->cands[a];
        if (c->status == HPGO_OK) {
            PyObject *co = cand_object(module, c);
            if (!co || PyList_Append(lres, co) < 0) {
                Py_XDECREF(co);
                goto error;
            }
            Py_DECREF(co);
            if (a == res->best)
                best = PyList_GET_SIZE(lres) - 1;
        } else {
            PyObject *lab = cand_label(c);
            PyObject *t2 = lab ? Py_BuildValue("(Ns)", lab, c->reason) : NULL;
            if (!t2 || PyList_Append(lskip, t2) < 0) {
                Py_XDECREF(t2);
                goto error;
            }
            Py_DECREF(t2);
        }
    }
    hpgo_orch_free(res);
    Py_SETREF(o->res, lres);
    Py_SETREF(o->skipped, lskip);
    *best_out = best;
    return 0;
error:
    hpgo_orch_free(res);
    Py_XDECREF(lres);
    Py_XDECREF(lskip);
    return -1;
}

static PyObject *orch_orchestrate(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t best;
    if (orch_run((OrchObject *)self, &best) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *best_tuple(PyObject *module, OrchObject *o, Py_ssize_t best)
{
    if (best < 0) {
        hpgo_modstate *st = glue_state(module);
        PyObject *msg = PyUnicode_FromFormat(
            "no candidate plan for this model on %d GPUs; skipped candidates: %R",
            (int)((DevicesObject *)o->devices)->t->n, o->skipped);
        if (msg) {
            PyErr_SetObject(st->PlanningError, msg);
            Py_DECREF(msg);
        }
        return NULL;
    }
    PyObject *c = PyList_GET_ITEM(o->res, best);
    return PyTuple_Pack(2, PyStructSequence_GET_ITEM(c, 0), PyStructSequence_GET_ITEM(c, 1));
}

static PyObject *orch_py_orchestrate(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t best;
    if (orch_run((OrchObject *)self, &best) < 0)
        return NULL;
    return best_tuple(glue_module_of(self), (OrchObject *)self, best);
}

static PyObject *orch_get(PyObject *self, void *closure)
{
    OrchObject *o = (OrchObject *)self;
    const char *w = closure;
    PyObject *v = w[0] == 'm' ? o->model : w[0] == 'd' ? o->devices : w[0] == 'r' ? o->res
                                                                                  : o->skipped;
    return Py_NewRef(v);
}

/* Pickle support: the constructor's arguments, and as state the settings
 * and the last results (res and skipped), so an unpickled planner answers
 * .res without planning again. */
static PyObject *orch_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    OrchObject *o = (OrchObject *)self;
    PyObject *timeout = o->timeout > 0 ? PyFloat_FromDouble(o->timeout) : Py_NewRef(Py_None);
    if (!timeout)
        return NULL;
    return Py_BuildValue("(O(OO)(iiKNOO))", (PyObject *)Py_TYPE(self), o->model, o->devices,
                         o->threads, o->exhaustive, (unsigned long long)o->max_bytes, timeout,
                         o->res, o->skipped);
}

static PyObject *orch_setstate(PyObject *self, PyObject *state)
{
    OrchObject *o = (OrchObject *)self;
    int threads, exhaustive;
    unsigned long long max_bytes;
    PyObject *timeout_o, *res, *skipped;
    double timeout;
    if (!PyTuple_Check(state) || !PyArg_ParseTuple(state, "iiKOO!O!:__setstate__", &threads,
                                                   &exhaustive, &max_bytes, &timeout_o,
                                                   &PyList_Type, &res, &PyList_Type, &skipped)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "AsyncOrchestrate state must be a tuple");
        return NULL;
    }
    if (threads < 0 || glue_timeout(timeout_o, &timeout) < 0 || max_bytes > SIZE_MAX) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "invalid AsyncOrchestrate state");
        return NULL;
    }
    PyObject *r = PyList_GetSlice(res, 0, PyList_GET_SIZE(res));
    PyObject *s = r ? PyList_GetSlice(skipped, 0, PyList_GET_SIZE(skipped)) : NULL;
    if (!s) {
        Py_XDECREF(r);
        return NULL;
    }
    o->threads = threads;
    o->exhaustive = exhaustive != 0;
    o->max_bytes = (size_t)max_bytes;
    o->timeout = timeout;
    Py_SETREF(o->res, r);
    Py_SETREF(o->skipped, s);
    Py_RETURN_NONE;
}

static PyMethodDef orch_methods[] = {
    {"__reduce__", orch_reduce, METH_NOARGS,
     "__reduce__()\n--\n\nPickle support: model, devices, settings and the last results."},
    {"__setstate__", orch_setstate, METH_O,
     "__setstate__(state)\n--\n\nPickle support (see __reduce__)."},
    {"orchestrate", orch_orchestrate, METH_NOARGS,
     "orchestrate()\n--\n\nPlan every candidate (GIL released); fills res and skipped."},
    {"py_orchestrate", orch_py_orchestrate, METH_NOARGS,
     "py_orchestrate()\n--\n\nPlan and return the best candidate as HPGO's tuple\n"
     "(speedup, [(a, b, units, [gpu ids]), ...]).  Raises PlanningError when no\n"
     "candidate can be planned."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef orch_getset[] = {
    {"m", orch_get, NULL, "The Model.", "m"},
    {"d", orch_get, NULL, "The Devices.", "d"},
    {"res", orch_get, NULL, "Candidates of the last orchestrate(), in HPGO's order.", "r"},
    {"skipped", orch_get, NULL,
     "(label, reason) of candidates HPGO could not plan (it panics there).", "s"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *orch_repr(PyObject *self)
{
    OrchObject *o = (OrchObject *)self;
    return PyUnicode_FromFormat("AsyncOrchestrate(m=%R, d=%R, res=<%zd candidates>)", o->model,
                                o->devices, PyList_GET_SIZE(o->res));
}

static PyType_Slot orch_slots[] = {
    {Py_tp_new, orch_tp_new},
    {Py_tp_dealloc, orch_dealloc},
    {Py_tp_traverse, orch_traverse},
    {Py_tp_clear, orch_clear},
    {Py_tp_repr, orch_repr},
    {Py_tp_methods, orch_methods},
    {Py_tp_getset, orch_getset},
    {Py_tp_doc, (void *)orch_doc},
    {0, NULL},
};

static PyType_Spec orch_spec = {
    .name = "hpgo.AsyncOrchestrate",
    .basicsize = sizeof(OrchObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = orch_slots,
};


/* ---------------------------------------------------------------- sweep */

static PyObject *orch_lists(PyObject *module, const hpgo_orch_t *res, PyObject **best_out)
{
    PyObject *lres = PyList_New(0), *lskip = PyList_New(0);
    *best_out = Py_NewRef(Py_None);
    if (!lres || !lskip)
        goto error;
    for (int32_t a = 0; a < res->n; a++) {
        const hpgo_candidate_t *c = &res->cands[a];
        PyObject *item;
        if (c->status == HPGO_OK) {
            item = cand_object(module, c);
            if (item && a == res->best)
                Py_SETREF(*best_out, Py_NewRef(item));
        } else {
            PyObject *lab = cand_label(c);
            item = lab ? Py_BuildValue("(Ns)", lab, c->reason) : NULL;
        }
        if (!item || PyList_Append(c->status == HPGO_OK ? lres : lskip, item) < 0) {
            Py_XDECREF(item);
            goto error;
        }
        Py_DECREF(item);
    }
    return Py_BuildValue("(NN)", lres, lskip);
error:
    Py_XDECREF(lres);
    Py_XDECREF(lskip);
    Py_CLEAR(*best_out);
    return NULL;
}

typedef struct sweep_work {
    const hpgo_model_t *m;
    const hpgo_topo_t **topos;
    int32_t nl;
    const uint32_t *gv;
    int32_t ng;
    const hpgo_plan_opts_t *opts;
    hpgo_sweep_t *out;
    hpgo_err_t err;
    int rc;
} sweep_work_t;

static void sweep_work(void *ctx)
{
    sweep_work_t *w = ctx;
    w->rc = hpgo_sweep_run(w->m, w->topos, w->nl, w->gv, w->ng, w->opts, &w->out, &w->err);
}

PyDoc_STRVAR(sweep_doc,
             "_sweep(model, layouts, gbs, threads=0, exhaustive=False, timeout=None)\n--\n\n"
             "Backend of hpgo.sweep: one row per (gbs, layout), gbs-major, as tuples\n"
             "(gbs, layout_index, dp, dp_p3, dp_overlap, ga_error, best, res, skipped).");

static PyObject *f_sweep(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"model", "layouts", "gbs", "threads", "exhaustive", "timeout", NULL};
    PyObject *model_o, *layouts_o, *gbs_o, *timeout_o = Py_None, *threads_o = NULL;
    int exhaustive = 0;
    long long threads = 0;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OpO:_sweep", kwlist, &model_o, &layouts_o,
                                     &gbs_o, &threads_o, &exhaustive, &timeout_o))
        return NULL;
    if (glue_timeout(timeout_o, &timeout) < 0)
        return NULL;
    if (threads_o && glue_index(threads_o, "threads", 0, INT32_MAX, &threads) < 0)
        return NULL;
    PyObject *lay = PySequence_Fast(layouts_o, "layouts must be a sequence of Devices");
    if (!lay)
        return NULL;
    PyObject *gseq = PySequence_Fast(gbs_o, "gbs must be a sequence of ints");
    if (!gseq) {
        Py_DECREF(lay);
        return NULL;
    }
    Py_ssize_t nl = PySequence_Fast_GET_SIZE(lay), ng = PySequence_Fast_GET_SIZE(gseq);
    PyObject *result = NULL;
    hpgo_model_t *m = NULL;
    const hpgo_topo_t **topos = NULL;
    uint32_t *gv = NULL;
    if (nl < 1 || ng < 1) {
        PyErr_SetString(PyExc_ValueError, "a sweep needs at least one gbs and one layout");
        goto done;
    }
    if (nl > 100000 || ng > 1000000 || nl * ng > 10000000) {
        PyErr_SetString(PyExc_ValueError, "too many sweep cases (limit: 10 million)");
        goto done;
    }
    topos = PyMem_Malloc((size_t)nl * sizeof *topos);
    gv = PyMem_Malloc((size_t)ng * sizeof *gv);
    if (!topos || !gv) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nl; k++)
        if (!(topos[k] = get_topo(module, PySequence_Fast_GET_ITEM(lay, k))))
            goto done;
    for (Py_ssize_t k = 0; k < ng; k++) {
        if (glue_u32(PySequence_Fast_GET_ITEM(gseq, k), "gbs", &gv[k]) < 0)
            goto done;
        if (gv[k] == 0) {
            PyErr_SetString(PyExc_ValueError, "global batch sizes must be >= 1, got 0");
            goto done;
        }
    }
    if (!(m = model_snapshot(module, model_o)))
        goto done;
    {
        hpgo_cancel_t cancel;
        hpgo_cancel_init(&cancel);
        hpgo_plan_opts_t opts = {exhaustive, (int)threads, 0, &cancel};
        sweep_work_t w = {m, topos, (int32_t)nl, gv, (int32_t)ng, &opts, NULL, {0}, HPGO_OK};
        /* `lay` holds references to every Devices, so topos stay valid */
        int stopped = glue_call(sweep_work, &w, &cancel, timeout, 0, "sweep");
        hpgo_sweep_t *sw = w.out;
        if (stopped < 0 || w.rc != HPGO_OK) {
            hpgo_sweep_free(sw);
            if (stopped == 0)
                glue_raise(module, w.rc, &w.err);
            goto done;
        }
        PyObject *rows = PyList_New(sw->n);
        for (int32_t k = 0; rows && k < sw->n; k++) {
            const hpgo_sweep_row_t *r = &sw->rows[k];
            PyObject *best = NULL, *lists = orch_lists(module, r->orch, &best);
            PyObject *row = NULL;
            if (lists) {
                int ok = r->ga_status == HPGO_OK;
                row = Py_BuildValue("(kidNNNNOO)", (unsigned long)r->gbs, (int)r->layout, r->dp,
                                    ok ? PyFloat_FromDouble(r->dp_p3) : Py_NewRef(Py_None),
                                    ok ? PyFloat_FromDouble(r->dp_overlap) : Py_NewRef(Py_None),
                                    ok ? Py_NewRef(Py_None) : PyUnicode_FromString(r->ga_reason),
                                    best, PyTuple_GET_ITEM(lists, 0), PyTuple_GET_ITEM(lists, 1));
                Py_DECREF(lists);
            }
            if (!row) {
                Py_CLEAR(rows);
                break;
            }
            PyList_SET_ITEM(rows, k, row);
        }
        hpgo_sweep_free(sw);
        result = rows;
    }
done:
    hpgo_model_free(m);
    PyMem_Free(topos);
    PyMem_Free(gv);
    Py_DECREF(lay);
    Py_DECREF(gseq);
    return result;
}

/* ------------------------------------------------------ module functions */

PyDoc_STRVAR(mftg_doc, "model_from_torch_graph(path, pbs, gbs)\n--\n\n"
                       "Read a PipeDream graph.txt profile into a Model (HPGO's call).");

static PyObject *f_model_from_torch_graph(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "pbs", "gbs", NULL};
    PyObject *path, *pbs, *gbs;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:model_from_torch_graph", kwlist, &path, &pbs,
                                     &gbs))
        return NULL;
    return load_model(module, path, pbs, gbs);
}


/* Copy a sequence of floats into a new C array of exactly n items (n < 0:
 * any length, stored into *n).  Sequences here are copied into tuples
 * first: converting an item may run Python code (__float__ of an int
 * subclass, __len__ / __iter__ of a preds item) that could otherwise resize
 * or free what is being read. */
static double *float_array(PyObject *o, const char *what, Py_ssize_t *n)
{
    PyObject *seq = PySequence_Tuple(o);
    if (!seq) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be a sequence of numbers, not %.100s", what,
                         Py_TYPE(o)->tp_name);
        }
        return NULL;
    }
    Py_ssize_t len = PyTuple_GET_SIZE(seq);
    if (*n >= 0 && len != *n) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s has %zd items, expected %zd", what, len, *n);
        return NULL;
    }
    double *v = PyMem_Malloc((size_t)(len ? len : 1) * sizeof(double));
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *it = PyTuple_GET_ITEM(seq, i);
        char name[96];
        PyOS_snprintf(name, sizeof name, "%s[%zd]", what, i);
        if (glue_double(it, name, &v[i]) < 0)
            goto fail;
        if (!isfinite(v[i])) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] is not finite", what, i);
            goto fail;
        }
    }
    Py_DECREF(seq);
    *n = len;
    return v;
fail:
    PyMem_Free(v);
    Py_DECREF(seq);
    return NULL;
}

PyDoc_STRVAR(mfs_doc,
             "model_from_states(ct, act, par, oa, preds, labels, pbs, gbs)\n--\n\n"
             "Build a Model from per-state numbers instead of a profile file: cumulative\n"
             "compute seconds ct(s), activation bytes act(s) and parameter bytes par(s) of\n"
             "everything up to state s, the activation bytes oa(s) crossing the cut after s\n"
             "(all for pbs samples), ascending predecessor lists and labels.");

static PyObject *f_model_from_states(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ct", "act", "par", "oa", "preds", "labels", "pbs", "gbs", NULL};
    PyObject *ct_o, *act_o, *par_o, *oa_o, *preds_o, *labels_o, *pbs_o, *gbs_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOO:model_from_states", kwlist, &ct_o,
                                     &act_o, &par_o, &oa_o, &preds_o, &labels_o, &pbs_o, &gbs_o))
        return NULL;
    uint32_t pbs, gbs;
    if (glue_u32(pbs_o, "pbs", &pbs) < 0 || glue_u32(gbs_o, "gbs", &gbs) < 0)
        return NULL;
    Py_ssize_t L = -1;
    hpgo_states_t st;
    memset(&st, 0, sizeof st);
    PyObject *pseq = NULL, *lseq = NULL, *result = NULL;
    st.ct = float_array(ct_o, "ct", &L);
    if (!st.ct)
        return NULL;
    if (L < 1 || L > HPGO_MAX_STATES) {
        PyErr_Format(PyExc_ValueError, "need 1 to %d states, got %zd", HPGO_MAX_STATES, L);
        goto done;
    }
    if (!(st.act = float_array(act_o, "act", &L)) || !(st.par = float_array(par_o, "par", &L)) ||
        !(st.oa = float_array(oa_o, "oa", &L)))
        goto done;
    pseq = PySequence_Fast(preds_o, "preds must be a sequence of lists");
    lseq = pseq ? PySequence_Fast(labels_o, "labels must be a sequence of str") : NULL;
    if (!lseq)
        goto done;
    { /* own immutable copies (see float_array) */
        PyObject *pt = PySequence_Tuple(pseq), *lt = pt ? PySequence_Tuple(lseq) : NULL;
        Py_SETREF(pseq, pt);
        Py_SETREF(lseq, lt);
        if (!lseq)
            goto done;
    }
    if (PySequence_Fast_GET_SIZE(pseq) != L || PySequence_Fast_GET_SIZE(lseq) != L) {
        PyErr_Format(PyExc_ValueError, "preds and labels must have %zd items", L);
        goto done;
    }
    st.n = (int32_t)L;
    st.pred_off = PyMem_Calloc((size_t)L + 1, sizeof(int32_t));
    st.label = PyMem_Calloc((size_t)L, sizeof(char *));
    if (!st.pred_off || !st.label) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t j = 0; j < L; j++) {
        Py_ssize_t n = PyObject_Length(PySequence_Fast_GET_ITEM(pseq, j));
        if (n < 0)
            goto done;
        if (n > j) {
            PyErr_Format(PyExc_ValueError, "preds[%zd] has %zd items; at most %zd allowed", j, n,
                         j);
            goto done;
        }
        total += n;
        st.pred_off[j + 1] = (int32_t)total;
    }
    st.pred_idx = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(int32_t));
    if (!st.pred_idx) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < L; j++) {
        PyObject *pj = PySequence_Fast(PySequence_Fast_GET_ITEM(pseq, j), "preds item");
        if (!pj)
            goto done;
        if (PySequence_Fast_GET_SIZE(pj) != st.pred_off[j + 1] - st.pred_off[j]) {
            Py_DECREF(pj);
            PyErr_Format(PyExc_ValueError, "preds[%zd] changed its length while being read", j);
            goto done;
        }
        int32_t prev = -1;
        for (Py_ssize_t a = 0; a < PySequence_Fast_GET_SIZE(pj); a++) {
            int32_t v;
            if (glue_i32(PySequence_Fast_GET_ITEM(pj, a), "preds entry", &v) < 0) {
                Py_DECREF(pj);
                goto done;
            }
            if (v <= prev || v >= j) {
                Py_DECREF(pj);
                PyErr_Format(PyExc_ValueError,
                             "preds[%zd] must be strictly ascending states before %zd", j, j);
                goto done;
            }
            prev = v;
            st.pred_idx[st.pred_off[j] + a] = v;
        }
        Py_DECREF(pj);
        PyObject *lab = PySequence_Fast_GET_ITEM(lseq, j);
        if (!PyUnicode_Check(lab)) {
            PyErr_Format(PyExc_TypeError, "labels[%zd] must be str", j);
            goto done;
        }
        st.label[j] = (char *)PyUnicode_AsUTF8(lab);
        if (!st.label[j])
            goto done;
    }
    {
        hpgo_model_t *m = NULL;
        hpgo_err_t err;
        int rc = hpgo_model_new(&st, pbs, gbs, &m, &err);
        if (rc != HPGO_OK)
            glue_raise(module, rc, &err);
        else
            result = model_wrap(module, m);
    }
done:
    Py_XDECREF(pseq);
    Py_XDECREF(lseq);
    PyMem_Free(st.ct);
    PyMem_Free(st.act);
    PyMem_Free(st.par);
    PyMem_Free(st.oa);
    PyMem_Free(st.pred_off);
    PyMem_Free(st.pred_idx);
    PyMem_Free(st.label);
    return result;
}

PyDoc_STRVAR(model_restore_doc,
             "_model_restore(state)\n--\n\n"
             "Rebuild a pickled Model (see Model.__reduce__).");

static PyObject *f_model_restore(PyObject *module, PyObject *state)
{
    int version;
    PyObject *ct_o, *act_o, *par_o, *oa_o, *off_o, *idx_o, *lab_o, *fac_o, *mbs_o, *oms_o,
        *papb_o, *pbs_o, *gbs_o;
    if (!PyTuple_Check(state) ||
        !PyArg_ParseTuple(state, "iOOOOOOOOOOOOO:_model_restore", &version, &ct_o, &act_o,
                          &par_o, &oa_o, &off_o, &idx_o, &lab_o, &pbs_o, &gbs_o, &fac_o, &mbs_o,
                          &oms_o, &papb_o)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "pickled model: state must be a tuple");
        return NULL;
    }
    if (version != MODEL_PICKLE_VERSION)
        return PyErr_Format(PyExc_ValueError, "pickled model: unknown version %d", version);
    uint32_t pbs, gbs, mbs, oms;
    double papb;
    if (glue_u32(pbs_o, "pbs", &pbs) < 0 || glue_u32(gbs_o, "gbs", &gbs) < 0 ||
        glue_u32(mbs_o, "min_micro_batch_size", &mbs) < 0 ||
        glue_u32(oms_o, "optimizer_memory_scaling", &oms) < 0 ||
        glue_double(papb_o, "peak_activation_per_batch", &papb) < 0)
        return NULL;
    if (mbs == 0 || !(papb > 0.0) || !isfinite(papb))
        return PyErr_Format(PyExc_ValueError, "pickled model: invalid settings");
    hpgo_states_t st;
    memset(&st, 0, sizeof st);
    PyObject *result = NULL;
    double *fac = NULL;
    Py_ssize_t n_off = 0, n_idx = 0;
    if (!PyBytes_Check(ct_o) || PyBytes_GET_SIZE(ct_o) % 8 || PyBytes_GET_SIZE(ct_o) < 8 ||
        PyBytes_GET_SIZE(ct_o) / 8 > HPGO_MAX_STATES)
        return PyErr_Format(PyExc_ValueError, "pickled model: ct must hold 1 to %d doubles",
                            HPGO_MAX_STATES);
    Py_ssize_t L = PyBytes_GET_SIZE(ct_o) / 8;
    if (!PyBytes_Check(fac_o) || PyBytes_GET_SIZE(fac_o) % 8 || PyBytes_GET_SIZE(fac_o) < 8 ||
        PyBytes_GET_SIZE(fac_o) / 8 > 4096)
        return PyErr_Format(PyExc_ValueError, "pickled model: bad scale factors");
    Py_ssize_t nf = PyBytes_GET_SIZE(fac_o) / 8;
    if (!(st.ct = unpack_doubles(ct_o, L, "ct")) || !(st.act = unpack_doubles(act_o, L, "act")) ||
        !(st.par = unpack_doubles(par_o, L, "par")) || !(st.oa = unpack_doubles(oa_o, L, "oa")) ||
        !(fac = unpack_doubles(fac_o, nf, "factors")) ||
        !(st.pred_off = unpack_i32(off_o, &n_off, "pred_off")) ||
        !(st.pred_idx = unpack_i32(idx_o, &n_idx, "pred_idx")))
        goto done;
    for (Py_ssize_t i = 0; i < L; i++)
        if (!isfinite(st.ct[i]) || !isfinite(st.act[i]) || !isfinite(st.par[i]) ||
            !isfinite(st.oa[i])) {
            PyErr_SetString(PyExc_ValueError, "pickled model: a number is not finite");
            goto done;
        }
    { /* expand the runs (st.pred_off holds run offsets, st.pred_idx the pairs) */
        int32_t *run_off = st.pred_off, *runs = st.pred_idx;
        st.pred_off = NULL;
        st.pred_idx = NULL;
        int64_t total = 0;
        int bad = n_off != L + 1 || n_idx % 2 || run_off[0] != 0 || run_off[L] != n_idx / 2;
        for (Py_ssize_t j = 0; !bad && j < L; j++) {
            int64_t prev_end = 0;
            if (run_off[j] > run_off[j + 1])
                bad = 1;
            for (int32_t r = run_off[j]; !bad && r < run_off[j + 1]; r++) {
                int64_t a = runs[2 * r], n = runs[2 * r + 1];
                if (a < prev_end || n < 1 || a + n > j)
                    bad = 1;
                prev_end = a + n;
                total += n;
            }
        }
        if (!bad) {
            st.pred_off = PyMem_Malloc(((size_t)L + 1) * sizeof(int32_t));
            st.pred_idx = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(int32_t));
        }
        if (!bad && st.pred_off && st.pred_idx) {
            int32_t k = 0;
            for (Py_ssize_t j = 0; j < L; j++) {
                st.pred_off[j] = k;
                for (int32_t r = run_off[j]; r < run_off[j + 1]; r++)
                    for (int32_t i = 0; i < runs[2 * r + 1]; i++)
                        st.pred_idx[k++] = runs[2 * r] + i;
            }
            st.pred_off[L] = k;
        }
        PyMem_Free(run_off);
        PyMem_Free(runs);
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "pickled model: bad predecessor lists");
            goto done;
        }
        if (!st.pred_off || !st.pred_idx) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (!PyBytes_Check(lab_o)) {
        PyErr_SetString(PyExc_ValueError, "pickled model: labels must be bytes");
        goto done;
    }
    st.n = (int32_t)L;
    st.label = PyMem_Calloc((size_t)L, sizeof(char *));
    if (!st.label) {
        PyErr_NoMemory();
        goto done;
    }
    {
        char *p = PyBytes_AS_STRING(lab_o), *end = p + PyBytes_GET_SIZE(lab_o);
        for (Py_ssize_t j = 0; j < L; j++) {
            char *z = p < end ? memchr(p, 0, (size_t)(end - p)) : NULL;
            if (!z) {
                PyErr_SetString(PyExc_ValueError, "pickled model: bad labels");
                goto done;
            }
            st.label[j] = p;
            p = z + 1;
        }
    }
    {
        hpgo_model_t *m0 = NULL, *m = NULL;
        hpgo_err_t err;
        int rc = hpgo_model_new(&st, pbs, gbs, &m0, &err);
        if (rc == HPGO_OK) {
            m0->min_micro_batch_size = mbs;
            m0->optimizer_memory_scaling = oms;
            m0->peak_activation_per_batch = papb;
            rc = hpgo_model_with_factors(m0, fac, (int32_t)nf, gbs, &m, &err);
        }
        hpgo_model_free(m0);
        if (rc != HPGO_OK)
            glue_raise(module, rc, &err);
        else
            result = model_wrap(module, m);
    }
done:
    PyMem_Free(st.ct);
    PyMem_Free(st.act);
    PyMem_Free(st.par);
    PyMem_Free(st.oa);
    PyMem_Free(st.pred_off);
    PyMem_Free(st.pred_idx);
    PyMem_Free(st.label);
    PyMem_Free(fac);
    return result;
}

PyDoc_STRVAR(dfs_doc, "devices_from_seps(seps)\n--\n\n"
                      "Devices(seps[-1], seps) (HPGO's call).");

static PyObject *f_devices_from_seps(PyObject *module, PyObject *seps)
{
    PyObject *tp = find_type(module, "Devices");
    if (!tp)
        return NULL;
    return devices_make(module, (PyTypeObject *)tp, NULL, seps);
}

PyDoc_STRVAR(cftgs_doc,
             "conductor_from_torch_graph_and_seps(path, pbs, gbs, seps)\n--\n\n"
             "Model from the profile (HPGO defaults) and Devices from seps, as an\n"
             "AsyncOrchestrate; call .py_orchestrate() for the best plan (HPGO's call).");

static PyObject *f_conductor(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "pbs", "gbs", "seps", NULL};
    PyObject *path, *pbs, *gbs, *seps;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:conductor_from_torch_graph_and_seps",
                                     kwlist, &path, &pbs, &gbs, &seps))
        return NULL;
    PyObject *dtp = find_type(module, "Devices"), *otp = find_type(module, "AsyncOrchestrate");
    if (!dtp || !otp)
        return NULL;
    PyObject *d = devices_make(module, (PyTypeObject *)dtp, NULL, seps);
    if (!d)
        return NULL;
    PyObject *m = load_model(module, path, pbs, gbs);
    if (!m) {
        Py_DECREF(d);
        return NULL;
    }
    PyObject *o = PyObject_CallFunctionObjArgs(otp, m, d, NULL);
    Py_DECREF(m);
    Py_DECREF(d);
    return o;
}

enum { DP_PLAIN, DP_P3, DP_CUR_P3, DP_CUR_INNER, DP_OPT_P3, GA_CUR, GA_OPT };

static PyObject *dp_family(PyObject *module, PyObject *const *args, Py_ssize_t nargs, int which,
                           const char *name)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "%s(devices, model) takes 2 arguments (%zd given)",
                            name, nargs);
    const hpgo_topo_t *t = get_topo(module, args[0]);
    if (!t)
        return NULL;
    hpgo_model_t *m = model_snapshot(module, args[1]);
    if (!m)
        return NULL;
    Py_INCREF(args[0]);
    double v = 0.0;
    uint32_t ga = 0;
    int rc = HPGO_OK;
    hpgo_err_t err;
    hpgo_err_clear(&err);
    Py_BEGIN_ALLOW_THREADS
    switch (which) {
    case DP_PLAIN: v = hpgo_dp_speedup(t, m); break;
    case DP_P3: rc = hpgo_dp_p3_speedup(t, m, &v, &err); break;
    case DP_CUR_P3:
    case DP_CUR_INNER:
        rc = hpgo_current_ga_iter_size(t, m, &ga, &err);
        if (rc == HPGO_OK)
            rc = hpgo_dp_ga_overlap_speedup(t, m, ga, which == DP_CUR_P3, &v, &err);
        break;
    case DP_OPT_P3:
        ga = hpgo_optimal_ga_iter_size(t, m);
        rc = hpgo_dp_ga_overlap_speedup(t, m, ga, 1, &v, &err);
        break;
    case GA_CUR: rc = hpgo_current_ga_iter_size(t, m, &ga, &err); break;
    case GA_OPT: ga = hpgo_optimal_ga_iter_size(t, m); break;
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(args[0]);
    hpgo_model_free(m);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    if (which == GA_CUR || which == GA_OPT)
        return PyLong_FromUnsignedLong(ga);
    return PyFloat_FromDouble(v);
}

#define DP_FN(fname, which)                                                                  \
    static PyObject *f_##fname(PyObject *module, PyObject *const *args, Py_ssize_t nargs)    \
    {                                                                                        \
        return dp_family(module, args, nargs, which, #fname);                                \
    }
DP_FN(dp_speedup, DP_PLAIN)
DP_FN(dp_p3_speedup, DP_P3)
DP_FN(dp_cur_ga_p3_speedup, DP_CUR_P3)
DP_FN(dp_cur_ga_inner_overlap_speedup, DP_CUR_INNER)
DP_FN(dp_opt_ga_p3_speedup, DP_OPT_P3)
DP_FN(current_ga_iter_size, GA_CUR)
DP_FN(optimal_ga_iter_size, GA_OPT)

static PyMethodDef plan_functions[] = {
    {"model_from_torch_graph", (PyCFunction)(void (*)(void))f_model_from_torch_graph,
     METH_VARARGS | METH_KEYWORDS, mftg_doc},
    {"devices_from_seps", f_devices_from_seps, METH_O, dfs_doc},
    {"_model_restore", f_model_restore, METH_O, model_restore_doc},
    {"_sweep", (PyCFunction)(void (*)(void))f_sweep, METH_VARARGS | METH_KEYWORDS, sweep_doc},
    {"model_from_states", (PyCFunction)(void (*)(void))f_model_from_states,
     METH_VARARGS | METH_KEYWORDS, mfs_doc},
    {"conductor_from_torch_graph_and_seps", (PyCFunction)(void (*)(void))f_conductor,
     METH_VARARGS | METH_KEYWORDS, cftgs_doc},
    {"dp_speedup", (PyCFunction)(void (*)(void))f_dp_speedup, METH_FASTCALL,
     "dp_speedup(devices, model)\n--\n\nData parallel, all-reduce after the backward pass."},
    {"dp_p3_speedup", (PyCFunction)(void (*)(void))f_dp_p3_speedup, METH_FASTCALL,
     "dp_p3_speedup(devices, model)\n--\n\nData parallel with P3 overlap."},
    {"dp_cur_ga_p3_speedup", (PyCFunction)(void (*)(void))f_dp_cur_ga_p3_speedup, METH_FASTCALL,
     "dp_cur_ga_p3_speedup(devices, model)\n--\n\n"
     "Data parallel with gradient accumulation (current GA size) and P3 overlap."},
    {"dp_cur_ga_inner_overlap_speedup",
     (PyCFunction)(void (*)(void))f_dp_cur_ga_inner_overlap_speedup, METH_FASTCALL,
     "dp_cur_ga_inner_overlap_speedup(devices, model)\n--\n\n"
     "Data parallel with gradient accumulation, overlap with the current backward only."},
    {"dp_opt_ga_p3_speedup", (PyCFunction)(void (*)(void))f_dp_opt_ga_p3_speedup, METH_FASTCALL,
     "dp_opt_ga_p3_speedup(devices, model)\n--\n\nAs dp_cur_ga_p3_speedup with the optimal "
     "GA size."},
    {"current_ga_iter_size", (PyCFunction)(void (*)(void))f_current_ga_iter_size, METH_FASTCALL,
     "current_ga_iter_size(devices, model)\n--\n\nHPGO's gradient-accumulation micro-batch."},
    {"optimal_ga_iter_size", (PyCFunction)(void (*)(void))f_optimal_ga_iter_size, METH_FASTCALL,
     "optimal_ga_iter_size(devices, model)\n--\n\nHPGO's optimal gradient-accumulation size."},
    {NULL, NULL, 0, NULL},
};

static PyStructSequence_Field layer_fields[] = {
    {"id", "state index"},
    {"name", "always None (as in HPGO)"},
    {"desc", "label: DESC of the state's first node"},
    {"compute_time", "seconds for the global batch (diagonal of CT; may be negative)"},
    {"activation_size", "bytes (diagonal of AC)"},
    {"output_activation_size", "bytes crossing the cut after this state"},
    {"parameter_size", "bytes (diagonal of PA)"},
    {NULL, NULL},
};

static PyStructSequence_Desc layer_desc = {"hpgo.Layer", "One layer state of a Model.",
                                           layer_fields, 7};

static PyStructSequence_Field cand_fields[] = {
    {"speedup", "analytical score: single-GPU time / estimated time"},
    {"stages", "[(first_state, end_state, units, [gpu ids]), ...] in pipeline order"},
    {"rp", "pipeline replicas"},
    {"label", "which candidate: 'i=K', 'straight i=K' or 'bipartition'"},
    {"block_time", "slowest pipeline element for the global batch, seconds"},
    {NULL, NULL},
};

static PyStructSequence_Desc cand_desc = {"hpgo.Candidate", "One candidate plan of HPGO.",
                                          cand_fields, 5};

static int add_structseq(PyObject *module, PyStructSequence_Desc *desc)
{
    hpgo_modstate *st = glue_state(module);
    PyTypeObject *t = PyStructSequence_NewType(desc);
    if (!t)
        return -1;
    const char *dot = strrchr(desc->name, '.');
    if (PyModule_AddObjectRef(module, dot + 1, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    st->types[st->n_types++] = (PyObject *)t;
    return 0;
}

int glue_plan_init(PyObject *module)
{
    if (!glue_add_type(module, &model_spec, NULL) || !glue_add_type(module, &devices_spec, NULL) ||
        !glue_add_type(module, &orch_spec, NULL))
        return -1;
    if (add_structseq(module, &layer_desc) < 0 || add_structseq(module, &cand_desc) < 0)
        return -1;
    return PyModule_AddFunctions(module, plan_functions);
}
