/* _coremodule.c - hpgo._core: module definition, module state, exception
 * classes and the error mapping shared by all glue files.
 *
 * DESIGN: multi-phase initialisation (PEP 489) with a module-state struct; no
 * global Python objects.  Types are heap types created per module object, so
 * methods find their module (and so the exception classes) through
 * PyType_GetModule.  Error codes of the C core become exceptions only here
 * (glue_raise), after the GIL has been re-acquired by the caller. */
#include "glue.h"

#include <errno.h>
#include <math.h>

hpgo_modstate *glue_state(PyObject *module)
{
    return (hpgo_modstate *)PyModule_GetState(module);
}

PyObject *glue_module_of(PyObject *self)
{
    return PyType_GetModule(Py_TYPE(self));
}

PyObject *glue_raise(PyObject *module, int code, const hpgo_err_t *err)
{
    const char *msg = (err && err->msg[0]) ? err->msg : hpgo_strerror(code);
    hpgo_modstate *st = module ? glue_state(module) : NULL;
    switch (code) {
    case HPGO_E_NOMEM:
        PyErr_SetString(PyExc_MemoryError, msg);
        break;
    case HPGO_E_NOTFOUND: {
        /* PyErr_SetObject does not steal its value: the tuple is ours to drop */
        PyObject *args = Py_BuildValue("(is)", ENOENT, msg);
        if (args) {
            PyErr_SetObject(PyExc_FileNotFoundError, args);
            Py_DECREF(args);
        }
        break;
    }
    case HPGO_E_IO:
        PyErr_SetString(PyExc_OSError, msg);
        break;
    case HPGO_E_PARSE:
    case HPGO_E_INVALID:
    case HPGO_E_LIMIT:
        PyErr_SetString(PyExc_ValueError, msg);
        break;
    case HPGO_E_NOPLAN:
        PyErr_SetString(st ? st->PlanningError : PyExc_ValueError, msg);
        break;
    default:
        PyErr_SetString(st ? st->HpgoError : PyExc_RuntimeError, msg);
        break;
    }
    return NULL;
}

PyObject *glue_add_type(PyObject *module, PyType_Spec *spec, PyObject *bases)
{
    hpgo_modstate *st = glue_state(module);
    if (st->n_types >= (int)(sizeof st->types / sizeof st->types[0])) {
        PyErr_SetString(PyExc_RuntimeError, "hpgo: too many types");
        return NULL;
    }
    PyObject *t = PyType_FromModuleAndSpec(module, spec, bases);
    if (!t)
        return NULL;
    const char *dot = strrchr(spec->name, '.');
    const char *shortname = dot ? dot + 1 : spec->name;
    if (PyModule_AddObjectRef(module, shortname, t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    st->types[st->n_types++] = t; /* the state keeps the reference */
    return t;
}

int glue_u32(PyObject *o, const char *what, uint32_t *out)
{
    long long v; /* the policy of args_glue.c: operator.index, ranges named */
    if (glue_index(o, what, 0, (long long)UINT32_MAX, &v) < 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int glue_i64(PyObject *o, const char *what, int64_t *out)
{
    long long v;
    if (glue_index(o, what, (long long)INT64_MIN, (long long)INT64_MAX, &v) < 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

int glue_i32(PyObject *o, const char *what, int32_t *out)
{
    long long v;
    if (glue_index(o, what, INT32_MIN, INT32_MAX, &v) < 0)
        return -1;
    *out = (int32_t)v;
    return 0;
}

int glue_f64(PyObject *o, const char *what, double *out)
{
    double v;
    if (glue_double(o, what, &v) < 0)
        return -1;
    if (!isfinite(v)) {
        PyErr_Format(PyExc_ValueError, "%s must be finite, got %R", what, o);
        return -1;
    }
    *out = v;
    return 0;
}

PyObject *glue_seq_copy(PyObject *o, const char *what)
{
    PyObject *fast = PySequence_Fast(o, what);
    if (!fast)
        return NULL;
    PyObject *t = PySequence_Tuple(fast);
    Py_DECREF(fast);
    return t;
}

PyObject *glue_fspath(PyObject *o)
{
    PyObject *b = NULL;
    if (!PyUnicode_FSConverter(o, &b))
        return NULL;
    if (memchr(PyBytes_AS_STRING(b), '\0', (size_t)PyBytes_GET_SIZE(b))) {
        Py_DECREF(b);
        PyErr_SetString(PyExc_ValueError, "path contains a NUL byte");
        return NULL;
    }
    return b;
}

static int core_exec(PyObject *module)
{
    hpgo_modstate *st = glue_state(module);
    st->n_types = 0;
    st->HpgoError = PyErr_NewExceptionWithDoc(
        "hpgo.HpgoError", "Base class of errors raised by hpgo's C core.", NULL, NULL);
    if (!st->HpgoError)
        return -1;
    PyObject *bases = PyTuple_Pack(2, st->HpgoError, PyExc_ValueError);
    if (!bases)
        return -1;
    st->PlanningError = PyErr_NewExceptionWithDoc(
        "hpgo.PlanningError",
        "The planner cannot produce a plan for these arguments (HPGO panicked here).", bases,
        NULL);
    Py_DECREF(bases);
    if (!st->PlanningError)
        return -1;
    if (PyModule_AddObjectRef(module, "HpgoError", st->HpgoError) < 0 ||
        PyModule_AddObjectRef(module, "PlanningError", st->PlanningError) < 0)
        return -1;
    if (glue_profile_init(module) < 0 || glue_plan_init(module) < 0 || glue_sim_init(module) < 0)
        return -1;
    if (glue_replan_init(module) < 0 || glue_step_init(module) < 0)
        return -1;
    return 0;
}

static int core_traverse(PyObject *module, visitproc visit, void *arg)
{
    hpgo_modstate *st = glue_state(module);
    Py_VISIT(st->HpgoError);
    Py_VISIT(st->PlanningError);
    for (int i = 0; i < st->n_types; i++)
        Py_VISIT(st->types[i]);
    return 0;
}

static int core_clear(PyObject *module)
{
    hpgo_modstate *st = glue_state(module);
    Py_CLEAR(st->HpgoError);
    Py_CLEAR(st->PlanningError);
    for (int i = 0; i < st->n_types; i++)
        Py_CLEAR(st->types[i]);
    st->n_types = 0;
    return 0;
}

static void core_free(void *module)
{
    core_clear((PyObject *)module);
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
    {0, NULL},
};

PyDoc_STRVAR(core_doc, "hpgo._core: the C core of hpgo (planner and simulator kernels).");

static struct PyModuleDef core_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hpgo._core",
    .m_doc = core_doc,
    .m_size = sizeof(hpgo_modstate),
    .m_methods = NULL,
    .m_slots = core_slots,
    .m_traverse = core_traverse,
    .m_clear = core_clear,
    .m_free = core_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_def);
}
