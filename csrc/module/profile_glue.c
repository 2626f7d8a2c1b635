/* profile_glue.c - CPython glue of the profile reader: _core.read_profile.
 *
 * DESIGN: one call = copy the path into a C string, drop the GIL, read +
 * parse + build states in the C core, take the GIL back, then either raise
 * (glue_raise) or convert the C results into plain Python objects (a dict of
 * lists and tuples) and free them.  Nothing between Py_BEGIN/END_ALLOW_THREADS
 * touches a PyObject, so other Python threads run while a large profile is
 * read. */
#include "glue.h"

#include <stdlib.h>
#include <string.h>

#include "profile.h"

static PyObject *str_of(const char *s)
{
    /* the reader only produces valid UTF-8 */
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "surrogateescape");
}

static PyObject *nodes_list(const hpgo_graph_t *g)
{
    PyObject *lst = PyList_New(g->n_nodes);
    if (!lst)
        return NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const hpgo_node_t *nd = &g->nodes[i];
        PyObject *id = str_of(nd->id), *desc = id ? str_of(nd->desc) : NULL;
        PyObject *t = desc ? Py_BuildValue("(NNdddd)", id, desc, nd->fwd_ms, nd->bwd_ms,
                                           nd->act_bytes, nd->par_bytes)
                           : NULL;
        if (!t) {
            if (!desc)
                Py_XDECREF(id);
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, i, t);
    }
    return lst;
}

static PyObject *edges_list(const hpgo_graph_t *g)
{
    PyObject *lst = PyList_New(g->n_edges);
    if (!lst)
        return NULL;
    for (int32_t e = 0; e < g->n_edges; e++) {
        PyObject *t = Py_BuildValue("(ii)", (int)g->edge_src[e], (int)g->edge_dst[e]);
        if (!t) {
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, e, t);
    }
    return lst;
}

static PyObject *doubles(const double *v, int32_t n)
{
    PyObject *lst = PyList_New(n);
    if (!lst)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *x = PyFloat_FromDouble(v[i]);
        if (!x) {
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, i, x);
    }
    return lst;
}

/* list of lists from a CSR (off has n+1 entries) */
static PyObject *csr_lists(const int32_t *off, const int32_t *idx, int32_t n)
{
    PyObject *lst = PyList_New(n);
    if (!lst)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *row = PyList_New(off[i + 1] - off[i]);
        if (!row) {
            Py_DECREF(lst);
            return NULL;
        }
        for (int32_t k = off[i]; k < off[i + 1]; k++) {
            PyObject *x = PyLong_FromLong(idx[k]);
            if (!x) {
                Py_DECREF(row);
                Py_DECREF(lst);
                return NULL;
            }
            PyList_SET_ITEM(row, k - off[i], x);
        }
        PyList_SET_ITEM(lst, i, row);
    }
    return lst;
}

static PyObject *states_dict(const hpgo_states_t *s)
{
    PyObject *labels = PyList_New(s->n);
    if (!labels)
        return NULL;
    for (int32_t i = 0; i < s->n; i++) {
        PyObject *x = str_of(s->label[i]);
        if (!x) {
            Py_DECREF(labels);
            return NULL;
        }
        PyList_SET_ITEM(labels, i, x);
    }
    return Py_BuildValue("{sNsNsNsNsNsNsN}", "ct", doubles(s->ct, s->n), "act",
                         doubles(s->act, s->n), "par", doubles(s->par, s->n), "oa",
                         doubles(s->oa, s->n), "preds",
                         csr_lists(s->pred_off, s->pred_idx, s->n), "labels", labels, "sets",
                         csr_lists(s->set_off, s->set_idx, s->n));
}

PyDoc_STRVAR(read_profile_doc,
"read_profile(path, *, states=True)\n--\n\n"
"Read a PipeDream graph.txt profile and build HPGO's layer states.\n\n"
"Returns {'nodes': [(id, desc, fwd_ms, bwd_ms, act_bytes, par_bytes), ...],\n"
"'edges': [(src_index, dst_index), ...], 'states': {'ct', 'act', 'par', 'oa',\n"
"'preds', 'labels', 'sets'}} with nodes and edges in file order; 'states' is\n"
"None when states=False.  ct is seconds per profile batch, act/par/oa bytes,\n"
"preds ascending state indices, sets the node indices of X_s.  Raises\n"
"FileNotFoundError, OSError, or ValueError naming the file and line.\n"
"The GIL is released while the file is read and processed.");

static PyObject *read_profile(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "states", NULL};
    PyObject *path_o, *pb;
    int want_states = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$p:read_profile", kwlist, &path_o,
                                     &want_states))
        return NULL;
    if (!(pb = glue_fspath(path_o)))
        return NULL;
    size_t plen = (size_t)PyBytes_GET_SIZE(pb);
    char *path = malloc(plen + 1);
    if (!path) {
        Py_DECREF(pb);
        return PyErr_NoMemory();
    }
    memcpy(path, PyBytes_AS_STRING(pb), plen + 1);
    Py_DECREF(pb);

    hpgo_err_t err;
    hpgo_graph_t *g = NULL;
    hpgo_states_t *st = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hpgo_graph_load(path, &g, &err);
    if (rc == HPGO_OK && want_states)
        rc = hpgo_states_build(g, &st, &err);
    Py_END_ALLOW_THREADS
    free(path);
    if (rc != HPGO_OK) {
        hpgo_graph_free(g);
        return glue_raise(module, rc, &err);
    }
    PyObject *states = st ? states_dict(st) : Py_NewRef(Py_None);
    PyObject *res = states ? Py_BuildValue("{sNsNsN}", "nodes", nodes_list(g), "edges",
                                           edges_list(g), "states", states)
                           : NULL;
    hpgo_states_free(st);
    hpgo_graph_free(g);
    return res;
}

static PyMethodDef profile_methods[] = {
    {"read_profile", (PyCFunction)(void (*)(void))read_profile, METH_VARARGS | METH_KEYWORDS,
     read_profile_doc},
    {NULL, NULL, 0, NULL},
};

int glue_profile_init(PyObject *module)
{
    return PyModule_AddFunctions(module, profile_methods);
}
