/* step_glue.c - CPython glue of the training-step model: cluster presets
 * and costs (cluster.h, cost.h), the model of the work (work.h) and the
 * step engine (engine.h).
 *
 * DESIGN: the Python layer (hpgo/cluster.py, hpgo/transformer.py,
 * hpgo/parallel.py) holds immutable dataclasses and passes them here as
 * flat tuples in a fixed layout (documented at each parser); the glue only
 * converts them into the core's structs (one converter per kind of
 * number, non-finite numbers refused), releases the GIL around the core
 * call and converts the result into plain Python values.  Validation is
 * in the core, where C callers and the fuzzer get it too. */
#include "glue.h"

#include <math.h>
#include <string.h>

#include "autoplan.h"
#include "cost.h"
#include "hetplan.h"
#include "engine.h"

/* ---- converters ---------------------------------------------------------- */

static PyObject *item(PyObject *tup, Py_ssize_t i, Py_ssize_t n, const char *what)
{
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != n) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of %zd items", what, n);
        return NULL;
    }
    return PyTuple_GET_ITEM(tup, i);
}

static int get_f(PyObject *tup, Py_ssize_t i, Py_ssize_t n, const char *what, double *out)
{
    PyObject *o = item(tup, i, n, what);
    return o ? glue_f64(o, what, out) : -1;
}

static int get_i32(PyObject *tup, Py_ssize_t i, Py_ssize_t n, const char *what, int32_t *out)
{
    PyObject *o = item(tup, i, n, what);
    return o ? glue_i32(o, what, out) : -1;
}

static int get_i64(PyObject *tup, Py_ssize_t i, Py_ssize_t n, const char *what, int64_t *out)
{
    PyObject *o = item(tup, i, n, what);
    return o ? glue_i64(o, what, out) : -1;
}

static int get_str(PyObject *tup, Py_ssize_t i, Py_ssize_t n, const char *what, char *out,
                   size_t cap)
{
    PyObject *o = item(tup, i, n, what);
    if (!o)
        return -1;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", what);
        return -1;
    }
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(o, &len);
    if (!s)
        return -1;
    snprintf(out, cap, "%s", s);
    return 0;
}

/* steps: tuple of (threshold, efficiency) pairs; an optional curve may be empty */
static int get_steps(PyObject *o, const char *what, hpgo_gpu_t *g, int which)
{
    Py_ssize_t least = which >= HPGO_EFF__REQUIRED ? 0 : 1;
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) < least ||
        PyTuple_GET_SIZE(o) > HPGO_EFF_MAX_STEPS) {
        PyErr_Format(PyExc_ValueError, "%s must be a tuple of %d to %d (threshold, efficiency) pairs",
                     what, (int)least, HPGO_EFF_MAX_STEPS);
        return -1;
    }
    g->n_steps[which] = (int32_t)PyTuple_GET_SIZE(o);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++) {
        PyObject *pair = PyTuple_GET_ITEM(o, i);
        if (get_f(pair, 0, 2, what, &g->steps[which][i].threshold) < 0 ||
            get_f(pair, 1, 2, what, &g->steps[which][i].efficiency) < 0)
            return -1;
    }
    return 0;
}

/* cluster: (name, gpu_name, (fp32, tf32, bf16, fp8), vector_flops, hbm_bytes,
 *           hbm_bandwidth, matrix_steps, vector_steps, memory_steps,
 *           ((size, bandwidth, coll_bandwidth, latency, efficiency), ...),
 *           fp8_steps, attention_steps, (multiprocessors, power_limit),
 *           (host_memory, host_bandwidth, host_memory_bandwidth, alloc_frag, jitter,
 *            nccl_latency),
 *           parts, join, speeds)   (the steps may be empty)
 * with parts () or a tuple of 2.. cluster tuples (their own parts and speeds
 * empty), join None or (size, bandwidth, coll_bandwidth, latency, efficiency),
 * speeds a tuple of (gpu, speed) pairs.  one_cluster reads the first 14
 * items and counts the rest (a part's own parts or speeds reach
 * hpgo_cluster_check as counts with no array, which it refuses). */
#define CLUSTER_ITEMS 17

static int one_cluster(PyObject *t, hpgo_cluster_t *c)
{
    const Py_ssize_t N = CLUSTER_ITEMS;
    memset(c, 0, sizeof *c);
    if (get_str(t, 0, N, "cluster", c->name, sizeof c->name) < 0 ||
        get_str(t, 1, N, "cluster", c->gpu.name, sizeof c->gpu.name) < 0)
        return -1;
    PyObject *peaks = PyTuple_GET_ITEM(t, 2);
    for (int i = 0; i < HPGO_DT__COUNT; i++)
        if (get_f(peaks, i, HPGO_DT__COUNT, "gpu peak_flops", &c->gpu.peak[i]) < 0)
            return -1;
    if (get_f(t, 3, N, "gpu vector_flops", &c->gpu.vector_flops) < 0 ||
        get_f(t, 4, N, "gpu memory_bytes", &c->gpu.hbm_bytes) < 0 ||
        get_f(t, 5, N, "gpu memory_bandwidth", &c->gpu.hbm_bandwidth) < 0)
        return -1;
    if (get_steps(PyTuple_GET_ITEM(t, 6), "gpu matrix_efficiency", &c->gpu, HPGO_EFF_MATRIX) < 0 ||
        get_steps(PyTuple_GET_ITEM(t, 7), "gpu vector_efficiency", &c->gpu, HPGO_EFF_VECTOR) < 0 ||
        get_steps(PyTuple_GET_ITEM(t, 8), "gpu memory_efficiency", &c->gpu, HPGO_EFF_MEMORY) < 0 ||
        get_steps(PyTuple_GET_ITEM(t, 10), "gpu fp8_matrix_efficiency", &c->gpu, HPGO_EFF_FP8) < 0 ||
        get_steps(PyTuple_GET_ITEM(t, 11), "gpu attention_efficiency", &c->gpu,
                  HPGO_EFF_ATTENTION) < 0 ||
        get_i32(PyTuple_GET_ITEM(t, 12), 0, 2, "gpu multiprocessors", &c->gpu.sms) < 0 ||
        get_f(PyTuple_GET_ITEM(t, 12), 1, 2, "gpu power_limit", &c->gpu.power_limit) < 0)
        return -1;
    PyObject *sy = PyTuple_GET_ITEM(t, 13);
    if (get_f(sy, 0, 6, "host_memory", &c->sys.host_memory) < 0 ||
        get_f(sy, 1, 6, "host_bandwidth", &c->sys.host_bandwidth) < 0 ||
        get_f(sy, 2, 6, "host_memory_bandwidth", &c->sys.host_mem_bandwidth) < 0 ||
        get_f(sy, 3, 6, "allocator_fragmentation", &c->sys.alloc_frag) < 0 ||
        get_f(sy, 4, 6, "jitter", &c->sys.jitter) < 0 ||
        get_i32(sy, 5, 6, "nccl_latency", &c->sys.nccl_latency) < 0)
        return -1;
    PyObject *lv = PyTuple_GET_ITEM(t, 9);
    if (!PyTuple_Check(lv) || PyTuple_GET_SIZE(lv) < 1 ||
        PyTuple_GET_SIZE(lv) > HPGO_CLUSTER_MAX_LEVELS) {
        PyErr_Format(PyExc_ValueError, "a cluster needs 1 to %d levels", HPGO_CLUSTER_MAX_LEVELS);
        return -1;
    }
    c->n_levels = (int32_t)PyTuple_GET_SIZE(lv);
    for (int32_t l = 0; l < c->n_levels; l++) {
        PyObject *x = PyTuple_GET_ITEM(lv, l);
        hpgo_level_t *v = &c->levels[l];
        if (get_i32(x, 0, 5, "level size", &v->size) < 0 ||
            get_f(x, 1, 5, "level bandwidth", &v->bandwidth) < 0 ||
            get_f(x, 2, 5, "level collective_bandwidth", &v->coll_bandwidth) < 0 ||
            get_f(x, 3, 5, "level latency", &v->latency) < 0 ||
            get_f(x, 4, 5, "level efficiency", &v->efficiency) < 0)
            return -1;
    }
    PyObject *parts = PyTuple_GET_ITEM(t, 14), *sp = PyTuple_GET_ITEM(t, 16);
    if (!PyTuple_Check(parts) || !PyTuple_Check(sp)) {
        PyErr_SetString(PyExc_TypeError, "cluster parts and speeds must be tuples");
        return -1;
    }
    if (PyTuple_GET_SIZE(parts) > HPGO_CLUSTER_MAX_PARTS ||
        PyTuple_GET_SIZE(sp) > HPGO_CLUSTER_MAX_SLOW) {
        PyErr_Format(PyExc_ValueError, "a cluster has at most %d parts and %d slowed GPUs",
                     HPGO_CLUSTER_MAX_PARTS, HPGO_CLUSTER_MAX_SLOW);
        return -1;
    }
    c->n_parts = (int32_t)PyTuple_GET_SIZE(parts);
    c->n_slow = (int32_t)PyTuple_GET_SIZE(sp);
    return 0;
}

/* The cluster tuple `t` into *c; its parts and slow GPUs go to one PyMem
 * block, *store, which the caller frees (PyMem_Free) on every path, also
 * when this fails. */
static int to_cluster(PyObject *t, hpgo_cluster_t *c, void **store)
{
    *store = NULL;
    if (one_cluster(t, c) < 0)
        return -1;
    int32_t np = c->n_parts, ns = c->n_slow;
    c->n_parts = c->n_slow = 0;
    if (np == 0 && ns == 0)
        return 0;
    /* hpgo_cluster_t's alignment covers hpgo_gpu_speed_t's (both hold doubles) */
    char *buf = PyMem_Malloc(sizeof(hpgo_cluster_t) * (size_t)np +
                             sizeof(hpgo_gpu_speed_t) * (size_t)ns + 1);
    if (!buf) {
        PyErr_NoMemory();
        return -1;
    }
    *store = buf;
    hpgo_cluster_t *parts = (hpgo_cluster_t *)buf;
    hpgo_gpu_speed_t *slow = (hpgo_gpu_speed_t *)(buf + sizeof(hpgo_cluster_t) * (size_t)np);
    PyObject *pt = PyTuple_GET_ITEM(t, 14), *sp = PyTuple_GET_ITEM(t, 16);
    for (int32_t k = 0; k < np; k++)
        if (one_cluster(PyTuple_GET_ITEM(pt, k), &parts[k]) < 0)
            return -1;
    for (int32_t i = 0; i < ns; i++)
        if (get_i64(PyTuple_GET_ITEM(sp, i), 0, 2, "speeds GPU", &slow[i].gpu) < 0 ||
            get_f(PyTuple_GET_ITEM(sp, i), 1, 2, "speeds factor", &slow[i].speed) < 0)
            return -1;
    if (np) {
        PyObject *j = PyTuple_GET_ITEM(t, 15);
        hpgo_level_t *v = &c->join;
        if (j == Py_None) {
            PyErr_SetString(PyExc_ValueError, "a cluster with parts needs a join level");
            return -1;
        }
        if (get_i32(j, 0, 5, "join size", &v->size) < 0 ||
            get_f(j, 1, 5, "join bandwidth", &v->bandwidth) < 0 ||
            get_f(j, 2, 5, "join collective_bandwidth", &v->coll_bandwidth) < 0 ||
            get_f(j, 3, 5, "join latency", &v->latency) < 0 ||
            get_f(j, 4, 5, "join efficiency", &v->efficiency) < 0)
            return -1;
        c->parts = parts;
    }
    c->n_parts = np;
    c->n_slow = ns;
    c->slow = ns ? slow : NULL;
    return 0;
}

static PyObject *steps_tuple(const hpgo_gpu_t *g, int which)
{
    PyObject *t = PyTuple_New(g->n_steps[which]);
    if (!t)
        return NULL;
    for (int32_t i = 0; i < g->n_steps[which]; i++) {
        PyObject *p = Py_BuildValue("(dd)", g->steps[which][i].threshold,
                                    g->steps[which][i].efficiency);
        if (!p) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, p);
    }
    return t;
}

static PyObject *from_cluster(const hpgo_cluster_t *c)
{
    PyObject *lv = PyTuple_New(c->n_levels);
    if (!lv)
        return NULL;
    for (int32_t l = 0; l < c->n_levels; l++) {
        const hpgo_level_t *v = &c->levels[l];
        PyObject *x = Py_BuildValue("(idddd)", (int)v->size, v->bandwidth, v->coll_bandwidth,
                                    v->latency, v->efficiency);
        if (!x) {
            Py_DECREF(lv);
            return NULL;
        }
        PyTuple_SET_ITEM(lv, l, x);
    }
    const hpgo_gpu_t *g = &c->gpu;
    const hpgo_system_t *y = &c->sys;
    /* a preset: no parts, no join, no slowed GPUs */
    return Py_BuildValue("(ss(dddd)dddNNNNNN(id)(dddddi)()O())", c->name, g->name, g->peak[0],
                         g->peak[1], g->peak[2], g->peak[3], g->vector_flops, g->hbm_bytes, g->hbm_bandwidth,
                         steps_tuple(g, HPGO_EFF_MATRIX), steps_tuple(g, HPGO_EFF_VECTOR),
                         steps_tuple(g, HPGO_EFF_MEMORY), lv, steps_tuple(g, HPGO_EFF_FP8),
                         steps_tuple(g, HPGO_EFF_ATTENTION), (int)g->sms, g->power_limit,
                         y->host_memory,
                         y->host_bandwidth, y->host_mem_bandwidth, y->alloc_frag, y->jitter,
                         (int)y->nccl_latency, Py_None);
}

/* model: ("transformer", precision, hidden, ffn, heads, kv_heads, head_dim,
 *         layers, vocab, seq, mlp, tied, bias, layernorm, dropout, flash,
 *         causal_flops, learned_pos,
 *         (experts, topk, expert_ffn, shared_experts, shared_ffn, dense_first,
 *          moe_every, expert_bias, router_bias, capacity, imbalance, attn_bias,
 *          qk_norm, sinks, window, window_every, mla, q_lora, kv_lora, qk_nope,
 *          qk_rope, v_head, mtp, route_groups, route_topk_groups, parallel_block))
 *     or ("chain", precision, batch, fwd, bwd, params, act, out) with five
 *        equally long tuples of floats.  `arrays` receives the chain's
 *        storage (PyMem); free it with PyMem_Free. */
static int to_work(PyObject *t, hpgo_work_t *w, double **arrays)
{
    memset(w, 0, sizeof *w);
    *arrays = NULL;
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 2 || !PyUnicode_Check(PyTuple_GET_ITEM(t, 0))) {
        PyErr_SetString(PyExc_TypeError, "model must be a tuple starting with its kind");
        return -1;
    }
    const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0));
    if (!kind)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    if (strcmp(kind, "transformer") == 0) {
        const Py_ssize_t N = 19;
        hpgo_xformer_t *x = &w->x;
        w->kind = HPGO_WORK_TRANSFORMER;
        int64_t *dims[8] = {&x->hidden, &x->ffn,    &x->heads, &x->kv_heads,
                            &x->head_dim, &x->layers, &x->vocab, &x->seq};
        static const char *const names[8] = {"hidden", "ffn",    "heads", "kv_heads",
                                             "head_dim", "layers", "vocab", "seq"};
        if (get_i32(t, 1, N, "precision", &w->precision) < 0)
            return -1;
        for (int i = 0; i < 8; i++)
            if (get_i64(t, 2 + i, N, names[i], dims[i]) < 0)
                return -1;
        int32_t *flags[8] = {&x->mlp,   &x->tied,  &x->bias,         &x->layernorm,
                             &x->dropout, &x->flash, &x->causal_flops, &x->learned_pos};
        for (int i = 0; i < 8; i++)
            if (get_i32(t, 10 + i, N, "transformer flag", flags[i]) < 0)
                return -1;
        /* experts and attention variants */
        PyObject *ext = PyTuple_GET_ITEM(t, 18);
        const Py_ssize_t M = 26;
        int64_t *ints[17] = {&x->experts, &x->topk, &x->expert_ffn, &x->shared_experts,
                             &x->shared_ffn, &x->dense_first, &x->moe_every, &x->window,
                             &x->window_every, &x->q_lora, &x->kv_lora, &x->qk_nope,
                             &x->qk_rope, &x->v_head, &x->mtp, &x->route_groups,
                             &x->route_topk_groups};
        static const int idx64[17] = {0, 1, 2, 3, 4, 5, 6, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24};
        for (int i = 0; i < 17; i++)
            if (get_i64(ext, idx64[i], M, "transformer expert/attention field", ints[i]) < 0)
                return -1;
        int32_t *f32[7] = {&x->expert_bias, &x->router_bias, &x->attn_bias, &x->qk_norm,
                           &x->sinks, &x->mla, &x->parallel_block};
        static const int idx32[7] = {7, 8, 11, 12, 13, 16, 25};
        for (int i = 0; i < 7; i++)
            if (get_i32(ext, idx32[i], M, "transformer flag", f32[i]) < 0)
                return -1;
        if (get_f(ext, 9, M, "capacity_factor", &x->capacity) < 0 ||
            get_f(ext, 10, M, "routing_imbalance", &x->imbalance) < 0)
            return -1;
        return 0;
    }
    if (strcmp(kind, "chain") != 0 || n != 8) {
        PyErr_SetString(PyExc_ValueError, "model kind must be 'transformer' or 'chain'");
        return -1;
    }
    w->kind = HPGO_WORK_CHAIN;
    if (get_i32(t, 1, 8, "precision", &w->precision) < 0 ||
        get_f(t, 2, 8, "profile batch", &w->chain.batch) < 0)
        return -1;
    Py_ssize_t L = -1;
    for (int a = 0; a < 5; a++) {
        PyObject *arr = PyTuple_GET_ITEM(t, 3 + a);
        if (!PyTuple_Check(arr) || (L >= 0 && PyTuple_GET_SIZE(arr) != L)) {
            PyErr_SetString(PyExc_ValueError, "a layer chain needs five tuples of equal length");
            return -1;
        }
        L = PyTuple_GET_SIZE(arr);
    }
    if (L < 1 || L > HPGO_WORK_MAX_LAYERS) {
        PyErr_Format(PyExc_ValueError, "a layer chain needs 1 to %d layers", HPGO_WORK_MAX_LAYERS);
        return -1;
    }
    double *buf = PyMem_Malloc(sizeof(double) * 5 * (size_t)L);
    if (!buf) {
        PyErr_NoMemory();
        return -1;
    }
    *arrays = buf;
    for (int a = 0; a < 5; a++) {
        PyObject *arr = PyTuple_GET_ITEM(t, 3 + a);
        for (Py_ssize_t i = 0; i < L; i++)
            if (glue_f64(PyTuple_GET_ITEM(arr, i), "layer value", &buf[a * L + i]) < 0)
                return -1;
    }
    w->chain.n = (int32_t)L;
    w->chain.fwd = buf;
    w->chain.bwd = buf + L;
    w->chain.params = buf + 2 * L;
    w->chain.act = buf + 3 * L;
    w->chain.out = buf + 4 * L;
    return 0;
}

/* plan: (tp, pp, dp, cp, ep, vstages, micro_batch, global_batch, schedule,
 *        recompute, sequence_parallel, zero, overlap_grad_reduce, split, etp,
 *        ep_outer, overlap_moe_comm, moe_dispatcher, fp8_params, overlap_share,
 *        reshard_after_forward, shard_size, offload_optimizer, offload_activations,
 *        kernels, tp_overlap, cp_comm, recompute_layers, recompute_method, attention,
 *        optimizer_impl, cross_entropy, fp8_all_gather, fp8_recipe, groups)
 *        (the stage groups stay the last item when fields are added before them)
 *        with split None or a tuple of pp * vstages + 1 ints, groups None or a
 *        tuple of pp (part, tp, dp, first_gpu, shares, gpus) with first_gpu -1
 *        for "after the previous stages", shares None or a tuple of dp floats,
 *        gpus None or a tuple of dp x tp cluster GPU indices, and optionally
 *        parts: None or a tuple of dp part indices (part -1: a group whose
 *        replicas span GPU types).
 *        `split` and `gmem` receive their storage (PyMem). */
static int to_groups(PyObject *gs, hpgo_parplan_t *p, void **gmem)
{
    if (!PyTuple_Check(gs) || PyTuple_GET_SIZE(gs) < 1 ||
        PyTuple_GET_SIZE(gs) > HPGO_PLAN_MAX_PP) {
        PyErr_Format(PyExc_ValueError, "stages must be None or a tuple of 1 to %d groups",
                     HPGO_PLAN_MAX_PP);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(gs), nshares = 0, ngpus = 0, nparts = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *g = PyTuple_GET_ITEM(gs, k), *sh, *gp;
        if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) < 6 || PyTuple_GET_SIZE(g) > 7) {
            PyErr_Format(PyExc_TypeError, "stage group %zd must be a tuple of 6 or 7 items", k);
            return -1;
        }
        if (PyTuple_GET_SIZE(g) == 7 && PyTuple_GET_ITEM(g, 6) != Py_None) {
            PyObject *pa = PyTuple_GET_ITEM(g, 6);
            if (!PyTuple_Check(pa) || PyTuple_GET_SIZE(pa) > (1 << 24)) {
                PyErr_Format(PyExc_TypeError, "stage group %zd: parts must be a tuple", k);
                return -1;
            }
            nparts += PyTuple_GET_SIZE(pa);
        }
        gp = PyTuple_GET_ITEM(g, 5);
        if (gp != Py_None) {
            if (!PyTuple_Check(gp) || PyTuple_GET_SIZE(gp) > (1 << 24)) {
                PyErr_Format(PyExc_TypeError, "stage group %zd: gpus must be a tuple", k);
                return -1;
            }
            ngpus += PyTuple_GET_SIZE(gp);
        }
        sh = PyTuple_GET_ITEM(g, 4);
        if (sh != Py_None) {
            if (!PyTuple_Check(sh) || PyTuple_GET_SIZE(sh) > (1 << 24)) {
                PyErr_Format(PyExc_TypeError, "stage group %zd: shares must be a tuple", k);
                return -1;
            }
            nshares += PyTuple_GET_SIZE(sh);
        }
    }
    size_t bytes = (size_t)n * sizeof(hpgo_stage_group_t) + (size_t)nshares * sizeof(double) +
                   (size_t)ngpus * sizeof(int64_t) + (size_t)nparts * sizeof(int32_t);
    char *mem = PyMem_Malloc(bytes ? bytes : 1);
    if (!mem) {
        PyErr_NoMemory();
        return -1;
    }
    *gmem = mem;
    hpgo_stage_group_t *groups = (hpgo_stage_group_t *)mem;
    double *shares = (double *)(mem + (size_t)n * sizeof(hpgo_stage_group_t));
    int64_t *gpus = (int64_t *)(shares + nshares);
    int32_t *parts = (int32_t *)(gpus + ngpus);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *g = PyTuple_GET_ITEM(gs, k), *sh = PyTuple_GET_ITEM(g, 4);
        PyObject *gp = PyTuple_GET_ITEM(g, 5);
        PyObject *pa = PyTuple_GET_SIZE(g) == 7 ? PyTuple_GET_ITEM(g, 6) : Py_None;
        hpgo_stage_group_t *x = &groups[k];
        int ni = (int)PyTuple_GET_SIZE(g);
        if (get_i32(g, 0, ni, "stage group part", &x->part) < 0 ||
            get_i32(g, 1, ni, "stage group tp", &x->tp) < 0 ||
            get_i32(g, 2, ni, "stage group dp", &x->dp) < 0 ||
            get_i64(g, 3, ni, "stage group first_gpu", &x->first_gpu) < 0)
            return -1;
        x->shares = NULL;
        x->gpus = NULL;
        x->parts = NULL;
        if (pa != Py_None) {
            Py_ssize_t np2 = PyTuple_GET_SIZE(pa);
            if (np2 != x->dp) {
                PyErr_Format(PyExc_ValueError, "stage %zd: %zd parts for dp=%d", k, np2,
                             (int)x->dp);
                return -1;
            }
            for (Py_ssize_t i = 0; i < np2; i++) {
                int64_t v;
                if (glue_i64(PyTuple_GET_ITEM(pa, i), "part index", &v) < 0)
                    return -1;
                if (v < 0 || v >= HPGO_CLUSTER_MAX_PARTS) {
                    PyErr_Format(PyExc_ValueError, "stage %zd: part index %lld out of range",
                                 k, (long long)v);
                    return -1;
                }
                parts[i] = (int32_t)v;
            }
            x->parts = parts;
            parts += np2;
        }
        if (gp != Py_None) {
            Py_ssize_t ng = PyTuple_GET_SIZE(gp);
            if (ng != (Py_ssize_t)x->dp * x->tp) {
                PyErr_Format(PyExc_ValueError, "stage %zd: %zd gpus for dp x tp = %lld", k, ng,
                             (long long)x->dp * x->tp);
                return -1;
            }
            for (Py_ssize_t i = 0; i < ng; i++)
                if (glue_i64(PyTuple_GET_ITEM(gp, i), "gpu index", &gpus[i]) < 0)
                    return -1;
            x->gpus = gpus;
            gpus += ng;
        }
        if (sh != Py_None) {
            Py_ssize_t ns = PyTuple_GET_SIZE(sh);
            if (ns != x->dp) {
                PyErr_Format(PyExc_ValueError, "stage %zd: %zd shares for dp=%d", k, ns,
                             (int)x->dp);
                return -1;
            }
            for (Py_ssize_t i = 0; i < ns; i++)
                if (glue_f64(PyTuple_GET_ITEM(sh, i), "share", &shares[i]) < 0)
                    return -1;
            x->shares = shares;
            shares += ns;
        }
    }
    p->n_groups = (int32_t)n;
    p->groups = groups;
    return 0;
}

static int to_plan(PyObject *t, hpgo_parplan_t *p, int32_t **split, void **gmem)
{
    const Py_ssize_t N = 35;
    memset(p, 0, sizeof *p);
    *split = NULL;
    *gmem = NULL;
    int32_t *ints[6] = {&p->tp, &p->pp, &p->dp, &p->cp, &p->ep, &p->vstages};
    static const char *const names[6] = {"tp", "pp", "dp", "cp", "ep", "virtual_stages"};
    for (int i = 0; i < 6; i++)
        if (get_i32(t, i, N, names[i], ints[i]) < 0)
            return -1;
    if (get_i64(t, 6, N, "micro_batch", &p->micro_batch) < 0 ||
        get_i64(t, 7, N, "global_batch", &p->global_batch) < 0 ||
        get_i32(t, 8, N, "schedule", &p->schedule) < 0 ||
        get_i32(t, 9, N, "recompute", &p->recompute) < 0 ||
        get_i32(t, 10, N, "sequence_parallel", &p->sequence_parallel) < 0 ||
        get_i32(t, 11, N, "zero", &p->zero) < 0 ||
        get_i32(t, 12, N, "overlap_grad_reduce", &p->overlap_grad_reduce) < 0 ||
        get_i32(t, 14, N, "etp", &p->etp) < 0 || get_i32(t, 15, N, "ep_outer", &p->ep_outer) < 0 ||
        get_i32(t, 16, N, "overlap_moe_comm", &p->overlap_ep) < 0 ||
        get_i32(t, 17, N, "moe_dispatcher", &p->dispatcher) < 0 ||
        get_i32(t, 18, N, "fp8_params", &p->fp8_params) < 0 ||
        get_f(t, 19, N, "overlap_share", &p->overlap_share) < 0 ||
        get_i32(t, 20, N, "reshard_after_forward", &p->reshard_after_forward) < 0 ||
        get_i32(t, 21, N, "shard_size", &p->shard_size) < 0 ||
        get_i32(t, 22, N, "offload_optimizer", &p->offload_optimizer) < 0 ||
        get_f(t, 23, N, "offload_activations", &p->offload_activations) < 0 ||
        get_i32(t, 24, N, "kernels", &p->kernels) < 0 ||
        get_i32(t, 25, N, "tp_overlap", &p->tp_overlap) < 0 ||
        get_i32(t, 26, N, "cp_comm", &p->cp_comm) < 0 ||
        get_i32(t, 27, N, "recompute_layers", &p->recompute_layers) < 0 ||
        get_i32(t, 28, N, "recompute_method", &p->recompute_method) < 0 ||
        get_i32(t, 29, N, "attention", &p->attention) < 0 ||
        get_i32(t, 30, N, "optimizer_impl", &p->optimizer_impl) < 0 ||
        get_i32(t, 31, N, "cross_entropy", &p->cross_entropy) < 0 ||
        get_i32(t, 32, N, "fp8_all_gather", &p->fp8_all_gather) < 0 ||
        get_i32(t, 33, N, "fp8_recipe", &p->fp8_recipe) < 0)
        return -1;
    PyObject *gs = PyTuple_GET_ITEM(t, N - 1); /* the stage groups: always the last item */
    if (gs != Py_None && to_groups(gs, p, gmem) < 0)
        return -1;
    PyObject *s = PyTuple_GET_ITEM(t, 13);
    if (s == Py_None)
        return 0;
    if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) > HPGO_PLAN_MAX_STAGES + 1) {
        PyErr_SetString(PyExc_ValueError, "split must be None or a tuple of layer boundaries");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(s);
    int32_t *b = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!b) {
        PyErr_NoMemory();
        return -1;
    }
    *split = b;
    for (Py_ssize_t i = 0; i < n; i++)
        if (glue_i32(PyTuple_GET_ITEM(s, i), "split boundary", &b[i]) < 0)
            return -1;
    p->n_split = (int32_t)n;
    p->split = b;
    return 0;
}

/* ---- functions ----------------------------------------------------------- */

PyDoc_STRVAR(cluster_preset_doc,
             "_step_cluster_preset(name, nodes) -> cluster tuple (see step_glue.c)");

static PyObject *cluster_preset(PyObject *module, PyObject *args)
{
    const char *name;
    int nodes;
    if (!PyArg_ParseTuple(args, "si:_step_cluster_preset", &name, &nodes))
        return NULL;
    hpgo_cluster_t c;
    hpgo_err_t err;
    int rc = hpgo_cluster_preset(name, nodes, &c, &err);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    return from_cluster(&c);
}

PyDoc_STRVAR(cluster_presets_doc, "_step_cluster_presets() -> tuple of preset names");

static PyObject *cluster_presets(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int n = 0;
    while (hpgo_cluster_preset_name(n))
        n++;
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *s = PyUnicode_FromString(hpgo_cluster_preset_name(i));
        if (!s) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

PyDoc_STRVAR(cluster_check_doc, "_step_cluster_check(cluster) -> None; ValueError naming the field");

static PyObject *cluster_check(PyObject *module, PyObject *arg)
{
    hpgo_cluster_t c;
    hpgo_err_t err;
    void *store;
    PyObject *res = NULL;
    if (to_cluster(arg, &c, &store) == 0) {
        int rc = hpgo_cluster_check(&c, &err);
        res = rc != HPGO_OK ? glue_raise(module, rc, &err) : Py_NewRef(Py_None);
    }
    PyMem_Free(store);
    return res;
}

PyDoc_STRVAR(collective_doc,
             "_step_collective_time(cluster, op, size, stride, bytes, algorithm) -> seconds");

static PyObject *collective_time_c(PyObject *module, PyObject *args, void **store);

static PyObject *collective_time(PyObject *module, PyObject *args)
{
    void *store = NULL;
    PyObject *res = collective_time_c(module, args, &store);
    PyMem_Free(store);
    return res;
}

static PyObject *collective_time_c(PyObject *module, PyObject *args, void **store)
{
    PyObject *ct, *size_o, *stride_o, *bytes_o;
    int op, algo;
    if (!PyArg_ParseTuple(args, "OiOOOi:_step_collective_time", &ct, &op, &size_o, &stride_o,
                          &bytes_o, &algo))
        return NULL;
    hpgo_cluster_t c;
    hpgo_err_t err;
    int64_t size, stride;
    double bytes;
    if (to_cluster(ct, &c, store) < 0 || glue_i64(size_o, "group size", &size) < 0 ||
        glue_i64(stride_o, "stride", &stride) < 0 || glue_f64(bytes_o, "bytes", &bytes) < 0)
        return NULL;
    if (op < 0 || op >= HPGO_COLL__COUNT || algo < HPGO_ALGO_AUTO || algo > HPGO_ALGO_HIERARCHICAL) {
        PyErr_SetString(PyExc_ValueError, "unknown collective or algorithm");
        return NULL;
    }
    if (bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "bytes must be >= 0");
        return NULL;
    }
    int64_t fan[HPGO_CLUSTER_MAX_LEVELS];
    int rc = hpgo_cluster_check(&c, &err);
    if (rc == HPGO_OK)
        rc = hpgo_group_fanout(&c, size, stride, fan, &err);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    return PyFloat_FromDouble(hpgo_cost_collective(&c, op, size, stride, bytes, algo));
}

PyDoc_STRVAR(p2p_doc, "_step_p2p_time(cluster, level, bytes) -> seconds");

static PyObject *p2p_time_c(PyObject *module, PyObject *args, void **store);

static PyObject *p2p_time(PyObject *module, PyObject *args)
{
    void *store = NULL;
    PyObject *res = p2p_time_c(module, args, &store);
    PyMem_Free(store);
    return res;
}

static PyObject *p2p_time_c(PyObject *module, PyObject *args, void **store)
{
    PyObject *ct, *bytes_o;
    int level;
    if (!PyArg_ParseTuple(args, "OiO:_step_p2p_time", &ct, &level, &bytes_o))
        return NULL;
    hpgo_cluster_t c;
    hpgo_err_t err;
    double bytes;
    if (to_cluster(ct, &c, store) < 0 || glue_f64(bytes_o, "bytes", &bytes) < 0)
        return NULL;
    int rc = hpgo_cluster_check(&c, &err);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    if (level < 0 || level >= c.n_levels || bytes < 0) {
        PyErr_Format(PyExc_ValueError, "level must be in 0..%d and bytes >= 0",
                     (int)c.n_levels - 1);
        return NULL;
    }
    return PyFloat_FromDouble(hpgo_cost_p2p(&c, level, bytes));
}

PyDoc_STRVAR(kernel_time_doc,
             "_step_kernel_time(cluster, dtype, op, flops, bytes) -> seconds of one kernel");

static PyObject *kernel_time_c(PyObject *module, PyObject *args, void **store);

static PyObject *kernel_time(PyObject *module, PyObject *args)
{
    void *store = NULL;
    PyObject *res = kernel_time_c(module, args, &store);
    PyMem_Free(store);
    return res;
}

static PyObject *kernel_time_c(PyObject *module, PyObject *args, void **store)
{
    PyObject *ct, *flops_o, *bytes_o;
    int dtype, op;
    if (!PyArg_ParseTuple(args, "OiiOO:_step_kernel_time", &ct, &dtype, &op, &flops_o, &bytes_o))
        return NULL;
    hpgo_cluster_t c;
    hpgo_err_t err;
    double flops, bytes;
    if (to_cluster(ct, &c, store) < 0 || glue_f64(flops_o, "flops", &flops) < 0 ||
        glue_f64(bytes_o, "bytes", &bytes) < 0)
        return NULL;
    int rc = hpgo_cluster_check(&c, &err);
    if (rc != HPGO_OK)
        return glue_raise(module, rc, &err);
    if (dtype < 0 || dtype >= HPGO_DT__COUNT || op < HPGO_OP_VECTOR || op > HPGO_OP_ATTENTION) {
        PyErr_SetString(PyExc_ValueError, "unknown data type or kernel kind");
        return NULL;
    }
    if (!(flops >= 0) || !(bytes >= 0) || !isfinite(flops) || !isfinite(bytes)) {
        PyErr_SetString(PyExc_ValueError, "flops and bytes must be finite and >= 0");
        return NULL;
    }
    if (flops > 0 && op != HPGO_OP_VECTOR && !(c.gpu.peak[dtype] > 0)) {
        PyErr_Format(PyExc_ValueError, "gpu %s has no matrix rate for this data type", c.gpu.name);
        return NULL;
    }
    return PyFloat_FromDouble(hpgo_gpu_op_time(&c.gpu, dtype, op, flops, bytes));
}

PyDoc_STRVAR(model_params_doc,
             "_step_model_params(model) -> (total, input_embedding, output_layer, experts, active,\n"
             "mtp) parameter counts (work.h hpgo_params_t)");

static PyObject *model_params(PyObject *module, PyObject *arg)
{
    hpgo_work_t w;
    double *arrays = NULL;
    hpgo_params_t pc;
    hpgo_err_t err;
    PyObject *res = NULL;
    if (to_work(arg, &w, &arrays) == 0) {
        int rc = hpgo_work_check(&w, &err);
        if (rc != HPGO_OK)
            glue_raise(module, rc, &err);
        else {
            hpgo_work_params(&w, &pc);
            res = Py_BuildValue("(dddddd)", pc.total, pc.input_embedding, pc.output_layer,
                                pc.experts, pc.active, pc.mtp);
        }
    }
    PyMem_Free(arrays);
    return res;
}

static int dict_set(PyObject *d, const char *k, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *mem_dict(const hpgo_mem_t *m)
{
    return Py_BuildValue("{sdsdsdsdsdsdsdsdsOsdsd}", "weights", m->weights, "gradients",
                         m->gradients, "optimizer", m->optimizer, "activations", m->activations,
                         "other", m->other, "total", m->total, "capacity", m->capacity, "margin",
                         m->margin, "fits", m->fits ? Py_True : Py_False, "reserved",
                         m->reserved, "host", m->host);
}

static PyObject *result_dict(PyObject *module, hpgo_step_result_t *r)
{
    PyObject *d = Py_BuildValue(
        "{sdsdsdsdsdsdsdsdsLsLsisisisO}", "iteration_time", r->iteration_time, "compute_time",
        r->compute_time, "model_flops", r->model_flops, "hw_flops", r->hw_flops, "mfu", r->mfu,
        "hfu", r->hfu, "samples_per_second", r->samples_per_second, "tokens_per_second",
        r->tokens_per_second, "gpus", (long long)r->gpus, "microbatches",
        (long long)r->microbatches, "pp", (int)r->p, "vstages", (int)r->v, "n_stages",
        (int)r->n_stages, "fits", r->fits ? Py_True : Py_False);
    if (!d)
        return NULL;
    PyObject *devs = PyList_New(r->p), *stages = PyList_New(r->n_stages);
    if (dict_set(d, "devices", devs) < 0 || dict_set(d, "stages", stages) < 0)
        goto fail;
    for (int32_t i = 0; i < r->p; i++) {
        const hpgo_step_device_t *x = &r->devices[i];
        PyObject *o = Py_BuildValue("{sdsdsdsdsdsisdsNsisd}", "busy", x->busy, "bubble", x->bubble,
                                    "compute_end", x->compute_end, "sync_end", x->sync_end,
                                    "optimizer", x->optimizer, "peak_in_flight",
                                    (int)x->peak_in_flight, "params", x->params, "memory",
                                    mem_dict(&x->mem), "part", (int)x->part, "speed", x->speed);
        if (!o)
            goto fail;
        PyList_SET_ITEM(devs, i, o);
    }
    for (int32_t k = 0; k < r->n_stages; k++) {
        const hpgo_stage_cost_t *s = &r->stages[k];
        PyObject *o = Py_BuildValue(
            "{sisisdsdsdsdsdsdsdsdsdsdsdsdsdsdsdsdsd}", "first_layer", (int)s->first_layer, "layers",
            (int)s->n_layers, "forward", s->f, "backward_input", s->b, "backward_weight", s->w,
            "tp_forward", s->tp_f, "tp_backward", s->tp_b, "recompute", s->recompute,
            "activation_bytes", s->act, "activation_bytes_layers", s->act_layers,
            "transient_bytes", s->transient, "params", s->params, "embedding_params",
            s->emb_params, "send_bytes", s->send_bytes, "model_flops", s->model_flops,
            "hw_flops", s->hw_flops, "expert_params", s->expert_params, "ep_forward", s->ep_f,
            "ep_backward", s->ep_b);
        if (!o)
            goto fail;
        /* bytes the weight gradient still needs after the input gradient (memory timeline) */
        PyObject *aw = PyFloat_FromDouble(s->act_w);
        if (!aw || PyDict_SetItemString(o, "activation_bytes_w", aw) < 0) {
            Py_XDECREF(aw);
            Py_DECREF(o);
            goto fail;
        }
        Py_DECREF(aw);
        PyList_SET_ITEM(stages, k, o);
    }
    /* the timeline stays in C (40 bytes an event): hpgo.timeline reads it lazily */
    PyObject *evs = r->timeline ? glue_wrap_timeline(module, r->timeline) : Py_NewRef(Py_None);
    r->timeline = NULL;
    if (dict_set(d, "events", evs) < 0)
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

typedef struct step_work {
    const hpgo_work_t *w;
    const hpgo_cluster_t *c;
    const hpgo_parplan_t *p;
    const hpgo_step_opts_t *o;
    hpgo_step_result_t *out;
    hpgo_err_t err;
    int rc;
} step_work_t;

static void step_work(void *ctx)
{
    step_work_t *x = ctx;
    x->rc = hpgo_step_simulate(x->w, x->c, x->p, x->o, &x->out, &x->err);
}

PyDoc_STRVAR(simulate_doc,
             "_step_simulate(model, cluster, plan, record, overhead_bytes) -> dict\n\n"
             "One training step (engine.h); tuple layouts in step_glue.c.  The GIL is\n"
             "released while the engine runs.");

static PyObject *step_simulate(PyObject *module, PyObject *args)
{
    PyObject *mt, *ct, *pt, *ov_o;
    int record;
    if (!PyArg_ParseTuple(args, "OOOpO:_step_simulate", &mt, &ct, &pt, &record, &ov_o))
        return NULL;
    hpgo_work_t w;
    hpgo_cluster_t c;
    hpgo_parplan_t p;
    double *arrays = NULL;
    int32_t *split = NULL;
    void *cstore = NULL, *gmem = NULL;
    hpgo_step_opts_t opts = {record, -1, NULL};
    PyObject *res = NULL;
    if (to_work(mt, &w, &arrays) < 0 || to_cluster(ct, &c, &cstore) < 0 ||
        to_plan(pt, &p, &split, &gmem) < 0)
        goto done;
    if (ov_o != Py_None && glue_f64(ov_o, "overhead_bytes", &opts.overhead_bytes) < 0)
        goto done;
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    opts.cancel = &cancel;
    step_work_t sw = {&w, &c, &p, &opts, NULL, {0}, HPGO_OK};
    int64_t ops = (int64_t)p.pp * p.vstages *
                  (p.micro_batch > 0 && p.dp > 0 ? p.global_batch / (p.micro_batch * p.dp) : 1);
    int stopped = glue_call(step_work, &sw, &cancel, 0.0, ops < 100000 ? GLUE_SMALL : 0,
                            "simulate");
    hpgo_step_result_t *r = sw.out;
    if (stopped < 0 || sw.rc != HPGO_OK) {
        hpgo_step_result_free(r);
        if (stopped == 0)
            glue_raise(module, sw.rc, &sw.err);
        goto done;
    }
    res = result_dict(module, r);
    hpgo_step_result_free(r);
done:
    PyMem_Free(arrays);
    PyMem_Free(split);
    PyMem_Free(cstore);
    PyMem_Free(gmem);
    return res;
}

static PyObject *plan_tuple(const hpgo_parplan_t *p)
{
    PyObject *split;
    if (p->n_split) {
        split = PyTuple_New(p->n_split);
        if (!split)
            return NULL;
        for (int32_t i = 0; i < p->n_split; i++) {
            PyObject *v = PyLong_FromLong(p->split[i]);
            if (!v) {
                Py_DECREF(split);
                return NULL;
            }
            PyTuple_SET_ITEM(split, i, v);
        }
    } else {
        split = Py_NewRef(Py_None);
    }
    return Py_BuildValue("(iiiiiiLLiiiiiNiiiiidiiidiiiii)", (int)p->tp, (int)p->pp, (int)p->dp,
                         (int)p->cp, (int)p->ep, (int)p->vstages, (long long)p->micro_batch,
                         (long long)p->global_batch, (int)p->schedule, (int)p->recompute,
                         (int)p->sequence_parallel, (int)p->zero, (int)p->overlap_grad_reduce,
                         split, (int)p->etp, (int)p->ep_outer, (int)p->overlap_ep,
                         (int)p->dispatcher, (int)p->fp8_params, p->overlap_share,
                         (int)p->reshard_after_forward, (int)p->shard_size,
                         (int)p->offload_optimizer, p->offload_activations,
                         (int)p->kernels, (int)p->tp_overlap, (int)p->cp_comm,
                         (int)p->recompute_layers, (int)p->recompute_method);
}

typedef struct autoplan_work {
    const hpgo_work_t *w;
    const hpgo_cluster_t *c;
    const hpgo_autoplan_opts_t *o;
    hpgo_autoplan_result_t *out;
    hpgo_err_t err;
    int rc;
} autoplan_work_t;

static void autoplan_work(void *ctx)
{
    autoplan_work_t *x = ctx;
    x->rc = hpgo_autoplan(x->w, x->c, x->o, &x->out, &x->err);
}

PyDoc_STRVAR(autoplan_doc,
             "_autoplan(model, cluster, opts, timeout) -> dict\n\n"
             "opts: (global_batch, gpus, objective, top, exhaustive, threads, max_micro_batch,\n"
             "max_vstages, overhead_bytes or None, tp, pp, dp, vstages, micro_batch, schedule,\n"
             "recompute, sequence_parallel, zero, cp, ep, etp, ep_outer, overlap_moe_comm,\n"
             "moe_dispatcher, fp8_params, overlap_share, no_reshard, shard_size,\n"
             "offload_optimizer, offload_activations, kernels, tp_overlap, cp_comm,\n"
             "optimizer_impl, fp8_recipe, cross_entropy, attention) with\n"
             "-1 for a free choice or the default\n"
             "(overlap_moe_comm, fp8_params: -1 is off; moe_dispatcher: -1 is the\n"
             "all-to-all; overlap_share: a float, used with overlap_moe_comm 1).  The GIL is\n"
             "released while\n"
             "the search runs.");

static PyObject *autoplan(PyObject *module, PyObject *args)
{
    PyObject *mt, *ct, *ot, *to;
    if (!PyArg_ParseTuple(args, "OOOO:_autoplan", &mt, &ct, &ot, &to))
        return NULL;
    double timeout;
    if (glue_timeout(to, &timeout) < 0)
        return NULL;
    hpgo_work_t w;
    hpgo_cluster_t c;
    hpgo_autoplan_opts_t o;
    double *arrays = NULL;
    void *cstore = NULL;
    PyObject *res = NULL;
    memset(&o, 0, sizeof o);
    const Py_ssize_t N = 37;
    if (to_work(mt, &w, &arrays) < 0 || to_cluster(ct, &c, &cstore) < 0)
        goto done;
    if (get_i64(ot, 0, N, "global_batch", &o.global_batch) < 0 ||
        get_i64(ot, 1, N, "gpus", &o.gpus) < 0 || get_i32(ot, 2, N, "objective", &o.objective) < 0 ||
        get_i32(ot, 3, N, "top", &o.top) < 0 || get_i32(ot, 4, N, "exhaustive", &o.exhaustive) < 0 ||
        get_i32(ot, 5, N, "threads", &o.threads) < 0 ||
        get_i32(ot, 6, N, "max_micro_batch", &o.max_micro_batch) < 0 ||
        get_i32(ot, 7, N, "max_virtual_stages", &o.max_vstages) < 0)
        goto done;
    o.overhead_bytes = -1;
    if (PyTuple_GET_ITEM(ot, 8) != Py_None &&
        glue_f64(PyTuple_GET_ITEM(ot, 8), "overhead_bytes", &o.overhead_bytes) < 0)
        goto done;
    int32_t *fixed[16] = {&o.tp, &o.pp, &o.dp, &o.vstages, &o.micro_batch, &o.schedule,
                          &o.recompute, &o.sequence_parallel, &o.zero, &o.cp,
                          &o.ep, &o.etp, &o.ep_outer, &o.overlap_ep, &o.dispatcher,
                          &o.fp8_params};
    for (int i = 0; i < 16; i++)
        if (get_i32(ot, 9 + i, N, "fixed choice", fixed[i]) < 0)
            goto done;
    if (get_f(ot, 25, N, "overlap_share", &o.overlap_share) < 0 ||
        get_i32(ot, 26, N, "reshard_after_forward", &o.no_reshard) < 0 ||
        get_i32(ot, 27, N, "shard_size", &o.shard_size) < 0 ||
        get_i32(ot, 28, N, "offload_optimizer", &o.offload_optimizer) < 0 ||
        get_f(ot, 29, N, "offload_activations", &o.offload_activations) < 0 ||
        get_i32(ot, 30, N, "kernels", &o.kernels) < 0 ||
        get_i32(ot, 31, N, "tp_overlap", &o.tp_overlap) < 0 ||
        get_i32(ot, 32, N, "cp_comm", &o.cp_comm) < 0 ||
        get_i32(ot, 33, N, "optimizer_impl", &o.optimizer_impl) < 0 ||
        get_i32(ot, 34, N, "fp8_recipe", &o.fp8_recipe) < 0 ||
        get_i32(ot, 35, N, "cross_entropy", &o.cross_entropy) < 0 ||
        get_i32(ot, 36, N, "attention", &o.attention) < 0)
        goto done;
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    o.cancel = &cancel;
    autoplan_work_t aw = {&w, &c, &o, NULL, {0}, HPGO_OK};
    int stopped = glue_call(autoplan_work, &aw, &cancel, timeout, 0, "autoplan");
    hpgo_autoplan_result_t *r = aw.out;
    if (stopped < 0 || aw.rc != HPGO_OK) {
        hpgo_autoplan_result_free(r);
        if (stopped == 0)
            glue_raise(module, aw.rc, &aw.err);
        goto done;
    }
    PyObject *plans = PyList_New(r->n);
    if (plans) {
        for (int32_t i = 0; i < r->n; i++) {
            const hpgo_autoplan_entry_t *e = &r->entries[i];
            PyObject *x = Py_BuildValue("(Nddi)", plan_tuple(&e->plan), e->iteration_time,
                                        e->score, (int)e->balanced);
            if (!x) {
                Py_CLEAR(plans);
                break;
            }
            PyList_SET_ITEM(plans, i, x);
        }
    }
    if (plans)
        res = Py_BuildValue("{sNsLsLsLsLsLsLsL}", "plans", plans, "candidates",
                            (long long)r->candidates, "rejected", (long long)r->rejected,
                            "pruned_memory", (long long)r->pruned_memory, "pruned_time",
                            (long long)r->pruned_time, "simulated", (long long)r->simulated,
                            "did_not_fit", (long long)r->did_not_fit, "bounds_broken",
                            (long long)r->bounds_broken);
    hpgo_autoplan_result_free(r);
done:
    PyMem_Free(arrays);
    PyMem_Free(cstore);
    return res;
}

/* ---- heterogeneous search (hetplan.h) -------------------------------------- */

typedef struct hetplan_work {
    const hpgo_work_t *w;
    const hpgo_cluster_t *c;
    const hpgo_hetplan_opts_t *o;
    hpgo_hetplan_result_t *out;
    hpgo_err_t err;
    int rc;
} hetplan_work_t;

static void hetplan_work(void *ctx)
{
    hetplan_work_t *x = ctx;
    x->rc = hpgo_hetplan(x->w, x->c, x->o, &x->out, &x->err);
}

static PyObject *hetplan_entry(const hpgo_hetplan_entry_t *e)
{
    const hpgo_parplan_t *p = &e->plan;
    PyObject *groups = PyTuple_New(p->pp), *split = PyTuple_New(p->pp + 1);
    if (!groups || !split)
        goto fail;
    for (int32_t k = 0; k < p->pp; k++) {
        const hpgo_stage_group_t *g = &p->groups[k];
        PyObject *sh;
        if (g->shares) {
            sh = PyTuple_New(g->dp);
            for (int32_t i = 0; sh && i < g->dp; i++) {
                PyObject *v = PyFloat_FromDouble(g->shares[i]);
                if (!v) {
                    Py_CLEAR(sh);
                    break;
                }
                PyTuple_SET_ITEM(sh, i, v);
            }
        } else {
            sh = Py_NewRef(Py_None);
        }
        if (!sh)
            goto fail;
        PyObject *pa = g->parts ? PyTuple_New(g->dp) : Py_NewRef(Py_None);
        for (int32_t i = 0; pa && g->parts && i < g->dp; i++) {
            PyObject *v = PyLong_FromLong(g->parts[i]);
            if (!v) {
                Py_CLEAR(pa);
                break;
            }
            PyTuple_SET_ITEM(pa, i, v);
        }
        if (!pa) {
            Py_DECREF(sh);
            goto fail;
        }
        /* N steals both references, on failure too */
        PyObject *x = Py_BuildValue("(iiiNN)", (int)g->part, (int)g->tp, (int)g->dp, sh, pa);
        if (!x)
            goto fail;
        PyTuple_SET_ITEM(groups, k, x);
    }
    for (int32_t k = 0; k <= p->pp; k++) {
        PyObject *v = PyLong_FromLong(p->split[k]);
        if (!v)
            goto fail;
        PyTuple_SET_ITEM(split, k, v);
    }
    return Py_BuildValue("(NNLiiiiddi)", groups, split, (long long)p->micro_batch,
                         (int)p->schedule, (int)p->recompute, (int)p->sequence_parallel,
                         (int)p->zero, e->iteration_time, e->score, (int)e->balanced);
fail:
    Py_XDECREF(groups);
    Py_XDECREF(split);
    return NULL;
}

PyDoc_STRVAR(hetplan_doc,
             "_hetplan(model, cluster, opts, base_plan, timeout) -> dict\n\n"
             "The heterogeneous search (hetplan.h).  opts: (global_batch, objective, top,\n"
             "exhaustive, threads, max_micro_batch, overhead_bytes or None, prices (one per\n"
             "part) or None, tp, micro_batch, schedule, recompute, zero), -1 for a free\n"
             "choice; base_plan: a plan tuple whose other fields every plan copies.  Plans:\n"
             "(groups ((part, tp, dp, shares or None), ...), split, micro_batch, schedule,\n"
             "recompute, sequence_parallel, zero, iteration_time, score, balanced).  The\n"
             "GIL is released while the search runs.");

static PyObject *hetplan(PyObject *module, PyObject *args)
{
    PyObject *mt, *ct, *ot, *bt, *to;
    if (!PyArg_ParseTuple(args, "OOOOO:_hetplan", &mt, &ct, &ot, &bt, &to))
        return NULL;
    double timeout;
    if (glue_timeout(to, &timeout) < 0)
        return NULL;
    hpgo_work_t w;
    hpgo_cluster_t c;
    hpgo_parplan_t base;
    hpgo_hetplan_opts_t o;
    double *arrays = NULL, *prices = NULL;
    int32_t *split = NULL;
    void *cstore = NULL, *gmem = NULL;
    PyObject *res = NULL;
    memset(&o, 0, sizeof o);
    const Py_ssize_t N = 13;
    if (to_work(mt, &w, &arrays) < 0 || to_cluster(ct, &c, &cstore) < 0 ||
        to_plan(bt, &base, &split, &gmem) < 0)
        goto done;
    if (get_i64(ot, 0, N, "global_batch", &o.global_batch) < 0 ||
        get_i32(ot, 1, N, "objective", &o.objective) < 0 ||
        get_i32(ot, 2, N, "top", &o.top) < 0 ||
        get_i32(ot, 3, N, "exhaustive", &o.exhaustive) < 0 ||
        get_i32(ot, 4, N, "threads", &o.threads) < 0 ||
        get_i32(ot, 5, N, "max_micro_batch", &o.max_micro_batch) < 0 ||
        get_i32(ot, 8, N, "tp", &o.tp) < 0 ||
        get_i32(ot, 9, N, "micro_batch", &o.micro_batch) < 0 ||
        get_i32(ot, 10, N, "schedule", &o.schedule) < 0 ||
        get_i32(ot, 11, N, "recompute", &o.recompute) < 0 ||
        get_i32(ot, 12, N, "zero", &o.zero) < 0)
        goto done;
    o.overhead_bytes = -1;
    if (PyTuple_GET_ITEM(ot, 6) != Py_None &&
        glue_f64(PyTuple_GET_ITEM(ot, 6), "overhead_bytes", &o.overhead_bytes) < 0)
        goto done;
    PyObject *pr = PyTuple_GET_ITEM(ot, 7);
    if (pr != Py_None) {
        Py_ssize_t np = c.n_parts >= 2 ? c.n_parts : 1;
        if (!PyTuple_Check(pr) || PyTuple_GET_SIZE(pr) != np) {
            PyErr_Format(PyExc_ValueError, "prices must be a tuple of %zd numbers (one a part)",
                         np);
            goto done;
        }
        prices = PyMem_Malloc(sizeof(double) * (size_t)np);
        if (!prices) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < np; k++)
            if (glue_f64(PyTuple_GET_ITEM(pr, k), "price", &prices[k]) < 0)
                goto done;
        o.prices = prices;
    }
    o.base = &base;
    hpgo_cancel_t cancel;
    hpgo_cancel_init(&cancel);
    o.cancel = &cancel;
    hetplan_work_t hw = {&w, &c, &o, NULL, {0}, HPGO_OK};
    int stopped = glue_call(hetplan_work, &hw, &cancel, timeout, 0, "autoplan");
    hpgo_hetplan_result_t *r = hw.out;
    if (stopped < 0 || hw.rc != HPGO_OK) {
        hpgo_hetplan_result_free(r);
        if (stopped == 0)
            glue_raise(module, hw.rc, &hw.err);
        goto done;
    }
    PyObject *plans = PyList_New(r->n);
    for (int32_t i = 0; plans && i < r->n; i++) {
        PyObject *x = hetplan_entry(&r->entries[i]);
        if (!x) {
            Py_CLEAR(plans);
            break;
        }
        PyList_SET_ITEM(plans, i, x);
    }
    if (plans)
        res = Py_BuildValue("{sNsLsLsLsLsLsLsLsLsLsLsL}", "plans", plans, "shapes",
                            (long long)r->shapes, "pruned_shapes_memory",
                            (long long)r->pruned_shapes_memory, "shapes_expanded",
                            (long long)r->shapes_expanded, "candidates",
                            (long long)r->candidates, "pruned_shapes", (long long)r->pruned_shapes,
                            "pruned_memory", (long long)r->pruned_memory, "pruned_time",
                            (long long)r->pruned_time, "simulated", (long long)r->simulated,
                            "did_not_fit", (long long)r->did_not_fit, "rejected",
                            (long long)r->rejected, "bounds_broken", (long long)r->bounds_broken);
    hpgo_hetplan_result_free(r);
done:
    PyMem_Free(arrays);
    PyMem_Free(prices);
    PyMem_Free(split);
    PyMem_Free(cstore);
    PyMem_Free(gmem);
    return res;
}

static PyMethodDef step_methods[] = {
    {"_hetplan", hetplan, METH_VARARGS, hetplan_doc},
    {"_autoplan", autoplan, METH_VARARGS, autoplan_doc},
    {"_step_cluster_preset", cluster_preset, METH_VARARGS, cluster_preset_doc},
    {"_step_cluster_presets", cluster_presets, METH_NOARGS, cluster_presets_doc},
    {"_step_cluster_check", cluster_check, METH_O, cluster_check_doc},
    {"_step_collective_time", collective_time, METH_VARARGS, collective_doc},
    {"_step_p2p_time", p2p_time, METH_VARARGS, p2p_doc},
    {"_step_kernel_time", kernel_time, METH_VARARGS, kernel_time_doc},
    {"_step_model_params", model_params, METH_O, model_params_doc},
    {"_step_simulate", step_simulate, METH_VARARGS, simulate_doc},
    {NULL, NULL, 0, NULL},
};

int glue_step_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, step_methods) < 0)
        return -1;
    /* C enum values as module constants, so Python never repeats them */
    static const struct {
        const char *name;
        int value;
    } consts[] = {
        {"SCHEDULE_GPIPE", HPGO_PS_GPIPE},
        {"SCHEDULE_1F1B", HPGO_PS_1F1B},
        {"SCHEDULE_INTERLEAVED", HPGO_PS_INTERLEAVED},
        {"SCHEDULE_ZBH1", HPGO_PS_ZBH1},
        {"SCHEDULE_ZBV", HPGO_PS_ZBV},
        {"RECOMPUTE_NONE", HPGO_RC_NONE},
        {"RECOMPUTE_SELECTIVE", HPGO_RC_SELECTIVE},
        {"RECOMPUTE_FULL", HPGO_RC_FULL},
        {"RECOMPUTE_OP", HPGO_RC_OP},
        {"PRECISION_BF16", HPGO_PREC_BF16},
        {"PRECISION_FP16", HPGO_PREC_FP16},
        {"PRECISION_FP8", HPGO_PREC_FP8},
        {"PRECISION_FP32", HPGO_PREC_FP32},
        {"MLP_GELU", HPGO_MLP_GELU},
        {"MLP_SWIGLU", HPGO_MLP_SWIGLU},
        {"COLL_ALLREDUCE", HPGO_COLL_ALLREDUCE},
        {"COLL_REDUCE_SCATTER", HPGO_COLL_REDUCE_SCATTER},
        {"COLL_ALLGATHER", HPGO_COLL_ALLGATHER},
        {"COLL_ALLTOALL", HPGO_COLL_ALLTOALL},
        {"ALGO_AUTO", HPGO_ALGO_AUTO},
        {"ALGO_RING", HPGO_ALGO_RING},
        {"ALGO_HIERARCHICAL", HPGO_ALGO_HIERARCHICAL},
        {"OBJECTIVE_TIME", HPGO_OBJ_TIME},
        {"OBJECTIVE_COST", HPGO_OBJ_COST},
        {"CLUSTER_MAX_PARTS", HPGO_CLUSTER_MAX_PARTS},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        if (PyModule_AddIntConstant(module, consts[i].name, consts[i].value) < 0)
            return -1;
    PyObject *share = PyFloat_FromDouble(HPGO_EP_OVERLAP_MEGATRON);
    if (!share)
        return -1;
    int rc = PyModule_AddObjectRef(module, "EP_OVERLAP_MEGATRON", share);
    Py_DECREF(share);
    if (rc < 0)
        return rc;
    PyObject *frag = PyFloat_FromDouble(HPGO_ALLOC_FRAG_GMLAKE);
    if (!frag)
        return -1;
    rc = PyModule_AddObjectRef(module, "ALLOC_FRAG_GMLAKE", frag);
    Py_DECREF(frag);
    return rc;
}
