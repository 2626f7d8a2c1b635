/* engine.c - the training-step event engine (see engine.h).
 *
 * DESIGN: the schedule fixes each device's op order, so the engine needs
 * no priority queue: it sweeps the devices and runs each one's next ops
 * while their inputs are known, until every op has run (a sweep that runs
 * nothing means the order deadlocks: HPGO_E_INTERNAL).  Every directed
 * link has a single sender whose ops run in time order, so scheduling a
 * transfer when its producer runs keeps each link FIFO in time.  Memory is
 * tracked per device in op order: a forward stores its stage's
 * activations, an input-gradient pass frees all but what the weight
 * gradient still needs, a weight-gradient (or fused backward) pass frees
 * the rest; the peak gives the activation memory and the in-flight count.
 * O(p + K m) memory, O(ops x sweeps) time with few sweeps in practice
 * (each sweep runs every op whose inputs are ready). */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "schedule.h"

double hpgo_step_optimizer_bytes(const hpgo_parplan_t *p)
{
    return p->kernels == HPGO_KS_TE ? 46 : 40;
}

double hpgo_step_optimizer_time(const hpgo_cluster_t *c, const hpgo_parplan_t *p, double params)
{
    double bytes = hpgo_step_optimizer_bytes(p) * params;
    if (bytes <= 0)
        return 0;
    return bytes / (c->gpu.hbm_bandwidth * hpgo_gpu_efficiency(&c->gpu, HPGO_EFF_MEMORY, bytes));
}

double hpgo_step_optimizer_seconds(const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                                   double params)
{
    if (!p->offload_optimizer)
        return hpgo_step_optimizer_time(c, p, params);
    /* the optimizer on the host (ZeRO-Offload's DeepSpeedCPUAdam, Megatron's
     * HybridDeviceOptimizer; spec/stack-mechanisms.md 6): Adam reads the fp32
     * weight, gradient and two moments and writes three of them back (28
     * bytes a parameter) over the node's CPU memory, shared by its GPUs; the
     * 16-bit gradients go down and the 16-bit weights come back over the
     * GPU's host link (2 + 2 bytes a parameter) */
    double gpn = (double)c->levels[0].size;
    if (!(c->sys.host_mem_bandwidth > 0) || !(c->sys.host_bandwidth > 0))
        return INFINITY;
    return 28 * params / (c->sys.host_mem_bandwidth / gpn) + 4 * params / c->sys.host_bandwidth;
}

static const double PI = 3.14159265358979323846;

double hpgo_step_straggler_factor(const hpgo_cluster_t *c, int64_t gpus)
{
    double sigma = c->sys.jitter;
    if (!(sigma > 0) || gpus < 2)
        return 1;
    /* expected maximum of n independent standard normals (spec 5.3):
     * E = int x n phi(x) Phi(x)^(n-1) dx, a smooth integrand; Simpson's rule
     * on [-10, 10] (it vanishes beyond for n <= 2^24) */
    double n = (double)gpus, h = 0.005, e = 0;
    int steps = 4000;
    for (int i = 0; i <= steps; i++) {
        double x = -10 + i * h;
        double F = 0.5 * erfc(-x / sqrt(2.0));
        double y = x * n * exp(-0.5 * x * x) / sqrt(2 * PI) *
                   exp((n - 1) * log(F > 1e-300 ? F : 1e-300));
        double wgt = (i == 0 || i == steps) ? 1 : (i % 2 ? 4 : 2);
        e += wgt * y;
    }
    e *= h / 3;
    return 1 + sigma * e;
}

void hpgo_step_device_load(const hpgo_parplan_t *p, const hpgo_stage_cost_t *sc, int32_t d,
                           hpgo_device_load_t *out)
{
    hpgo_device_load_t l = {0, 0, 0, 0, INFINITY, 0, 0, 0, 0};
    for (int32_t ch = 0; ch < p->vstages; ch++) {
        const hpgo_stage_cost_t *st = &sc[hpgo_sched_stage(p->schedule, p->pp, p->vstages, d, ch)];
        l.work += st->f + st->b + st->w;
        l.params += st->params;
        l.expert_params += st->expert_params;
        l.state_bytes += st->fp8_state;
        double per_layer = st->n_layers > 0 ? (st->params - st->emb_params) / st->n_layers : 0;
        if (per_layer > l.max_layer_params)
            l.max_layer_params = per_layer;
        if (st->transient > l.transient)
            l.transient = st->transient;
        if (st->act < l.min_act)
            l.min_act = st->act;
        if (st->act > l.max_act)
            l.max_act = st->act;
        l.sum_act += st->act;
    }
    *out = l;
}

double hpgo_step_shard_params(const hpgo_parplan_t *p, double params, double expert_params)
{
    if (p->zero < 1)
        return params;
    int64_t edp = hpgo_parplan_edp(p);
    return (params - expert_params) / (double)hpgo_parplan_shard(p) +
           expert_params / (double)(edp > 0 ? edp : 1);
}

void hpgo_step_result_free(hpgo_step_result_t *r)
{
    if (!r)
        return;
    free(r->devices);
    free(r->stages);
    hpgo_sim_result_free(r->timeline);
    free(r);
}

typedef struct eng {
    const hpgo_cluster_t *c;
    const hpgo_parplan_t *p;
    const hpgo_stage_cost_t *sc;
    int schedule;
    int32_t P, V, K;
    int64_t m;
    double *fend, *bend, *act_arr, *grad_arr; /* K x m */
    double link_free[2 * HPGO_PLAN_MAX_PP];   /* per device: to next, to previous */
    hpgo_sim_result_t *tl;
    hpgo_err_t *err;
} eng_t;

static int32_t dev_of(const eng_t *e, int32_t k)
{
    if (e->schedule == HPGO_PS_ZBV)
        return k < e->P ? k : 2 * e->P - 1 - k;
    return k % e->P;
}

static int64_t rank_of(const eng_t *e, int32_t d)
{
    return (int64_t)d * e->p->tp * e->p->cp * e->p->dp;
}

static int add_event(eng_t *e, double start, double dur, int32_t dev, int kind, int lane,
                     int32_t stage, int64_t mb, int32_t peer)
{
    if (!e->tl)
        return HPGO_OK;
    hpgo_sim_event_t ev = {start, dur, dev, (int16_t)kind, (int16_t)lane, stage, (int32_t)mb,
                           -1, peer};
    return hpgo_sim_result_add_event(e->tl, &ev, e->err);
}

/* Transfer from device `from` (op ended at `end`) to the device of stage
 * `to_stage`; returns the arrival time (or -1 with e->err set). */
static double transfer(eng_t *e, int32_t from, int32_t to_stage, double end, double bytes,
                       double regather, int64_t mb, int *rc)
{
    int32_t to = dev_of(e, to_stage);
    if (to == from)
        return end;
    int lane = (to == (from + 1) % e->P || e->P == 2) ? 0 : 1;
    double *lf = &e->link_free[2 * from + lane];
    double start = end > *lf ? end : *lf;
    int32_t lvl = hpgo_cost_level_between(e->c, rank_of(e, from), rank_of(e, to));
    double dur = hpgo_cost_p2p(e->c, lvl, bytes) + regather;
    *lf = start + dur;
    if ((*rc = add_event(e, start, dur, from, HPGO_EV_SEND, 1 + lane, to_stage, mb, to)) != HPGO_OK)
        return -1;
    return start + dur;
}

typedef struct devstate {
    double t, busy, alive, peak;
    double dp_free;            /* ZeRO-2/3: end of the per-micro-batch gradient reduce-scatters */
    int64_t idx, count, peak_count;
    int64_t *wdone;            /* per chunk: weight gradients done */
    double *final_start, *final_dur; /* per chunk: the op that completed its gradients */
} devstate_t;

static double dp_coll(const eng_t *e, int op, double bytes)
{
    /* gradients are averaged over every replica of the sequence: dp x cp;
     * with hybrid sharding (shard_size f) the ZeRO collectives run inside
     * groups of f replicas and the reduced shards are all-reduced across the
     * groups (FSDP2 HSDP: reduce-scatter, then an all-reduce of the shard on
     * its own stream, _fsdp_collectives.py foreach_reduce) */
    const hpgo_parplan_t *p = e->p;
    int64_t n = (int64_t)p->dp * p->cp, f = hpgo_parplan_shard(p);
    if (op == HPGO_COLL_ALLREDUCE || f >= n)
        return hpgo_cost_collective(e->c, op, n, p->tp, bytes, HPGO_ALGO_AUTO);
    double t = hpgo_cost_collective(e->c, op, f, p->tp, bytes, HPGO_ALGO_AUTO);
    if (op == HPGO_COLL_REDUCE_SCATTER)
        t += hpgo_cost_collective(e->c, HPGO_COLL_ALLREDUCE, n / f, (int64_t)p->tp * f,
                                  bytes / (double)f, HPGO_ALGO_AUTO);
    return t;
}

/* A gradient (or parameter) collective over a stage's parameters: the
 * dense ones over dp x cp, the routed experts' over their expert
 * data-parallel group (one after the other on the sync stream). */
static double grad_coll(const eng_t *e, int op, double params, double expert_params,
                        double bytes_per)
{
    double t = dp_coll(e, op, (params - expert_params) * bytes_per);
    if (expert_params > 0) {
        int64_t gs, gst;
        hpgo_parplan_edp_group(e->p, &gs, &gst);
        if (gs > 1)
            t += hpgo_cost_collective(e->c, op, gs, gst, expert_params * bytes_per, HPGO_ALGO_AUTO);
    }
    return t;
}

int hpgo_step_simulate(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                       const hpgo_step_opts_t *opts, hpgo_step_result_t **out, hpgo_err_t *err)
{
    if (!out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "step simulation: NULL output");
    *out = NULL;
    if (!w || !c || !p)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "step simulation: NULL argument");
    int rc = hpgo_parplan_check(p, err);
    if (rc != HPGO_OK)
        return rc;
    int32_t P = p->pp, V = p->vstages, K = P * V;
    int64_t m = hpgo_parplan_microbatches(p);
    hpgo_step_result_t *r = calloc(1, sizeof *r);
    eng_t e;
    memset(&e, 0, sizeof e);
    devstate_t *ds = NULL;
    hpgo_op_t **ops = NULL;
    int64_t *n_ops = NULL, *wd_all = NULL;
    double *fs_all = NULL;
    double *fb = NULL;
    int32_t *order = NULL;
    if (!r)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for a step result");
    r->stages = calloc((size_t)K, sizeof *r->stages);
    r->devices = calloc((size_t)P, sizeof *r->devices);
    if (!r->stages || !r->devices) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for a step result");
        goto fail;
    }
    if ((rc = hpgo_work_stage_costs(w, c, p, r->stages, err)) != HPGO_OK)
        goto fail;
    const hpgo_stage_cost_t *sc = r->stages;
    e.c = c, e.p = p, e.sc = sc, e.schedule = p->schedule, e.P = P, e.V = V, e.K = K, e.m = m;
    e.err = err;
    size_t km = (size_t)K * (size_t)m;
    e.fend = malloc(km * sizeof(double));
    e.bend = malloc(km * sizeof(double));
    e.act_arr = malloc(km * sizeof(double));
    e.grad_arr = malloc(km * sizeof(double));
    ds = calloc((size_t)P, sizeof *ds);
    ops = calloc((size_t)P, sizeof *ops);
    n_ops = calloc((size_t)P, sizeof *n_ops);
    wd_all = calloc((size_t)K, sizeof *wd_all);
    fs_all = calloc(2 * (size_t)K, sizeof *fs_all);
    fb = malloc(3 * (size_t)K * sizeof *fb);
    order = malloc((size_t)V * sizeof *order);
    if (!e.fend || !e.bend || !e.act_arr || !e.grad_arr || !ds || !ops || !n_ops || !wd_all ||
        !fs_all || !fb || !order) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory simulating %lld ops",
                          (long long)km);
        goto fail;
    }
    for (size_t x = 0; x < km; x++)
        e.fend[x] = e.bend[x] = e.act_arr[x] = e.grad_arr[x] = INFINITY;
    int64_t cap = hpgo_sched_max_ops(m, V), total = 0;
    for (int32_t i = 0; i < P; i++) {
        if (!(ops[i] = malloc((size_t)cap * sizeof(hpgo_op_t)))) {
            rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for the op lists");
            goto fail;
        }
        ds[i].wdone = wd_all + (int64_t)i * V;
        ds[i].final_start = fs_all + 2 * (int64_t)i * V;
        ds[i].final_dur = ds[i].final_start + V;
    }
    /* zb-v's generator needs the pass times and a typical transfer */
    for (int32_t k = 0; k < K; k++)
        fb[k] = sc[k].f, fb[K + k] = sc[k].b, fb[2 * K + k] = sc[k].w;
    double p2p_est = P > 1 ? hpgo_cost_p2p(c, hpgo_cost_level_between(c, 0, rank_of(&e, 1)),
                                           sc[0].send_bytes)
                           : 0;
    if ((rc = hpgo_sched_generate(p->schedule, P, V, m, fb, fb + K, fb + 2 * K, p2p_est, ops,
                                  n_ops, err)) != HPGO_OK)
        goto fail;
    for (int32_t i = 0; i < P; i++)
        total += n_ops[i];
    if (opts && opts->record_events &&
        (rc = hpgo_sim_result_new(K, P, &e.tl, err)) != HPGO_OK)
        goto fail;

    /* ZeRO-3 gathers a chunk's weights before each pass (prefetched: an op
     * takes at least the gather's time) */
    double wbytes, gbytes, obytes;
    hpgo_work_state_bytes(w->precision, p->fp8_params, &wbytes, &gbytes, &obytes);

    hpgo_cancel_t *cancel = opts ? opts->cancel : NULL;
    /* gradients to synchronise: dense ones over dp x cp, expert ones over
     * the expert data-parallel group (which can exceed 1 with dp x cp = 1) */
    int replicas = p->dp * p->cp > 1 || hpgo_parplan_edp(p) > 1;
    /* ZeRO-2/3 reduce-scatter each micro-batch's gradients (DeepSpeed; FSDP2
     * without pipelining: torchtitan leaves gradient sync on), except FSDP
     * under pipeline parallelism, which accumulates them unsharded and
     * reduce-scatters once after the stage's last backward
     * (torch/distributed/pipelining/stage.py; Llama 3 section 3.3.2) */
    int per_mb_rs = p->zero >= 2 && replicas && !(p->zero >= 3 && P > 1 && m > 1);
    /* activations offloaded to the host go down after each forward and come
     * back before the backward on the GPU's host link, beside the compute
     * (Megatron's fine-grained activation offloading, spec 6) */
    double host_bw = c->sys.host_bandwidth;
    if ((p->offload_activations > 0 || p->offload_optimizer) &&
        !(host_bw > 0 && c->sys.host_mem_bandwidth > 0 && c->sys.host_memory > 0)) {
        rc = hpgo_err_set(err, HPGO_E_INVALID, 0,
                          "offloading needs the cluster's host_memory_bytes, host_bandwidth and "
                          "host_memory_bandwidth");
        goto fail;
    }
    /* Megatron's pipeline sends and receives (p2p_communication.py
     * _communicate) wait for completion before the rank computes on, with a
     * device synchronisation after batch_isend_irecv in the releases of
     * Korthikanti et al. 2022; its interleaved --overlap-p2p-communication
     * (later releases) is not modelled.  torch.distributed.pipelining
     * (torchtitan: the compile and eager kernel sets) sends asynchronously. */
    int block_p2p = p->kernels == HPGO_KS_TE;
    while (total > 0) {
        int64_t ran = 0;
        if (hpgo_cancelled(cancel)) {
            rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the simulation was cancelled");
            goto fail;
        }
        for (int32_t d = 0; d < P; d++) {
            devstate_t *s = &ds[d];
            while (s->idx < n_ops[d]) {
                hpgo_op_t op = ops[d][s->idx];
                int32_t k = hpgo_sched_stage(p->schedule, P, V, d, op.chunk);
                size_t x = (size_t)k * (size_t)m + (size_t)op.mb;
                double ready;
                if (op.kind == HPGO_OP_F)
                    ready = k == 0 ? 0 : e.act_arr[x];
                else if (op.kind == HPGO_OP_W)
                    ready = e.bend[x];
                else
                    ready = k == K - 1 ? e.fend[x] : e.grad_arr[x];
                if (isinf(ready))
                    break;
                const hpgo_stage_cost_t *st = &sc[k];
                double dur = op.kind == HPGO_OP_F   ? st->f
                             : op.kind == HPGO_OP_B ? st->b
                             : op.kind == HPGO_OP_W ? st->w
                                                    : st->b + st->w;
                /* ZeRO-3 gathers the weights before the forward, and again before
                 * the backward when they were resharded after the forward */
                if (p->zero >= 3 && replicas &&
                    (op.kind == HPGO_OP_F || (op.kind != HPGO_OP_W && p->reshard_after_forward))) {
                    /* gathered layer by layer, each prefetched behind the one
                     * before (FSDP2's implicit forward and explicit backward
                     * prefetch); the first layer's gather has nothing before it
                     * to hide behind (MegaScale section 3.2: the first
                     * all-gather is the exposed part) */
                    double ag = grad_coll(&e, HPGO_COLL_ALLGATHER, st->params, st->expert_params, 2);
                    if (ag > dur)
                        dur = ag;
                    dur += ag / (st->n_layers > 0 ? st->n_layers : 1);
                    /* FSDP2 casts and copies the shards into the all-gather buffer
                     * on its copy-in stream, beside the compute (foreach_all_gather
                     * in _fsdp_collectives.py: all_gather_copy_in_stream), and
                     * copies the gathered buffer out into the parameters on the
                     * compute stream (foreach_all_gather_copy_out,
                     * split_with_sizes_copy): 2 + 2 bytes per gathered parameter */
                    dur += hpgo_gpu_op_time(&c->gpu, HPGO_DT_BF16, HPGO_OP_VECTOR, 0,
                                            4 * st->params);
                }
                if (p->offload_activations > 0 && op.kind != HPGO_OP_W) {
                    double mv = p->offload_activations * st->act / host_bw;
                    if (mv > dur)
                        dur = mv;
                }
                if (!isfinite(dur)) {
                    rc = hpgo_err_set(err, HPGO_E_INVALID, 0,
                                      "stage %d's pass time is not finite: the model's numbers "
                                      "are too large for the cluster's rates",
                                      (int)k);
                    goto fail;
                }
                double start = s->t > ready ? s->t : ready, end = start + dur;
                s->t = end;
                s->busy += dur;
                static const int kinds[4] = {HPGO_EV_FORWARD, HPGO_EV_BACKWARD_INPUT,
                                             HPGO_EV_BACKWARD_WEIGHT, HPGO_EV_BACKWARD};
                if ((rc = add_event(&e, start, dur, d, kinds[op.kind], 0, k, op.mb, -1)) != HPGO_OK)
                    goto fail;
                if (op.kind == HPGO_OP_F) {
                    e.fend[x] = end;
                    s->alive += st->act;
                    s->count++;
                    if (s->alive > s->peak)
                        s->peak = s->alive;
                    if (s->count > s->peak_count)
                        s->peak_count = s->count;
                    if (k + 1 < K) {
                        double a = transfer(&e, d, k + 1, end, st->send_bytes, sc[k + 1].regather,
                                            op.mb, &rc);
                        if (rc != HPGO_OK)
                            goto fail;
                        e.act_arr[x + (size_t)m] = a;
                        if (block_p2p && a > s->t)
                            s->t = a;
                    }
                } else {
                    if (op.kind != HPGO_OP_W) {
                        e.bend[x] = end;
                        if (k > 0) {
                            double a = transfer(&e, d, k - 1, end, sc[k - 1].send_bytes, 0, op.mb,
                                                &rc);
                            if (rc != HPGO_OK)
                                goto fail;
                            e.grad_arr[x - (size_t)m] = a;
                            if (block_p2p && a > s->t)
                                s->t = a;
                        }
                    }
                    if (op.kind == HPGO_OP_B)
                        s->alive -= st->act - st->act_w;
                    else {
                        s->alive -= op.kind == HPGO_OP_W ? st->act_w : st->act;
                        s->count--;
                        if (++s->wdone[op.chunk] == m) {
                            s->final_start[op.chunk] = start;
                            s->final_dur[op.chunk] = dur;
                        }
                        if (per_mb_rs && p->overlap_grad_reduce) {
                            /* sharded gradients: each micro-batch's are reduce-scattered
                             * as soon as they exist, layer by layer as the pass
                             * completes them (FSDP2's post-backward hook of each
                             * fully_shard group -- torchtitan's one per block --
                             * DeepSpeed's reduce buckets), on the sync stream: what
                             * the last layers' scatters leave after the pass is exposed */
                            int32_t nb = st->n_layers > 0 ? st->n_layers : 1;
                            double t_rs = grad_coll(&e, HPGO_COLL_REDUCE_SCATTER,
                                                    st->params / nb, st->expert_params / nb,
                                                    gbytes);
                            double s0 = -1, fr = s->dp_free;
                            for (int32_t bi = 0; bi < nb; bi++) {
                                double done = start + dur * (bi + 1) / nb;
                                double b0 = fr > done ? fr : done;
                                if (s0 < 0)
                                    s0 = b0;
                                fr = b0 + t_rs;
                            }
                            s->dp_free = fr;
                            if ((rc = add_event(&e, s0, fr - s0, d, HPGO_EV_REDUCE_SCATTER, 3, k,
                                                op.mb, -1)) != HPGO_OK)
                                goto fail;
                        }
                    }
                }
                s->idx++;
                total--;
                ran++;
            }
        }
        if (ran == 0 && total > 0) {
            rc = hpgo_err_set(err, HPGO_E_INTERNAL, 0, "the schedule's op order deadlocks");
            goto fail;
        }
    }

    /* gradient synchronisation, optimizer step, verdicts */
    double iter = 0, compute = 0;
    double overhead = opts && opts->overhead_bytes >= 0 ? opts->overhead_bytes
                                                        : HPGO_MEM_DEFAULT_OVERHEAD;
    int overlap = p->overlap_grad_reduce;
    int tied_sync = w->kind == HPGO_WORK_TRANSFORMER && w->x.tied && K > 1 &&
                    dev_of(&e, 0) != dev_of(&e, K - 1);
    r->fits = 1;
    for (int32_t d = 0; d < P; d++) {
        devstate_t *s = &ds[d];
        hpgo_step_device_t *o = &r->devices[d];
        hpgo_device_load_t load;
        hpgo_step_device_load(p, sc, d, &load);
        double params = load.params, maxlayer = load.max_layer_params, transient = load.transient;
        double layer1 = 0;
        double sync = s->t;
        if (per_mb_rs) {
            if (!p->overlap_grad_reduce) {
                /* every micro-batch's reduce-scatter after the backward */
                double t_all = 0;
                for (int32_t ch = 0; ch < V; ch++) {
                    int32_t k = hpgo_sched_stage(p->schedule, P, V, d, ch);
                    t_all += (double)m * grad_coll(&e, HPGO_COLL_REDUCE_SCATTER, sc[k].params,
                                                   sc[k].expert_params, gbytes);
                }
                if ((rc = add_event(&e, s->t, t_all, d, HPGO_EV_REDUCE_SCATTER, 3, -1, -1, -1)) !=
                    HPGO_OK)
                    goto fail;
                s->dp_free = s->t + t_all;
            }
            if (s->dp_free > sync)
                sync = s->dp_free;
        } else if (replicas) {
            int coll = p->zero >= 1 ? HPGO_COLL_REDUCE_SCATTER : HPGO_COLL_ALLREDUCE;
            /* chunks in the order their gradients complete */
            for (int32_t ch = 0; ch < V; ch++)
                order[ch] = ch;
            for (int32_t a = 1; a < V; a++)
                for (int32_t b2 = a; b2 > 0 && s->final_start[order[b2]] < s->final_start[order[b2 - 1]];
                     b2--) {
                    int32_t tmp = order[b2];
                    order[b2] = order[b2 - 1];
                    order[b2 - 1] = tmp;
                }
            double free_at = 0;
            for (int32_t oi = 0; oi < V; oi++) {
                int32_t ch = order[oi];
                int32_t k = hpgo_sched_stage(p->schedule, P, V, d, ch);
                const hpgo_stage_cost_t *st = &sc[k];
                int32_t nb = st->n_layers > 0 ? st->n_layers : 1;
                double tb = grad_coll(&e, coll, st->params / nb, st->expert_params / nb, gbytes);
                if (layer1 == 0)
                    layer1 = st->params / nb;
                for (int32_t bi = 0; bi < nb; bi++) {
                    double ready = overlap ? s->final_start[ch] + s->final_dur[ch] * (bi + 1) / nb
                                           : s->t;
                    double st0 = free_at > ready ? free_at : ready;
                    free_at = st0 + tb;
                    if ((rc = add_event(&e, st0, tb, d,
                                        p->zero >= 1 ? HPGO_EV_REDUCE_SCATTER : HPGO_EV_ALLREDUCE,
                                        3, k, -1, -1)) != HPGO_OK)
                        goto fail;
                }
            }
            if (free_at > sync)
                sync = free_at;
        }
        if (tied_sync && (d == dev_of(&e, 0) || d == dev_of(&e, K - 1))) {
            const hpgo_stage_cost_t *st = &sc[d == dev_of(&e, 0) ? 0 : K - 1];
            int32_t lvl = hpgo_cost_level_between(c, rank_of(&e, dev_of(&e, 0)),
                                                  rank_of(&e, dev_of(&e, K - 1)));
            /* all-reduce of two: each side sends its half and receives the other */
            double t_emb = hpgo_cost_p2p(c, lvl, st->emb_params * gbytes);
            if ((rc = add_event(&e, sync, t_emb, d, HPGO_EV_ALLREDUCE, 3, -1, -1, -1)) != HPGO_OK)
                goto fail;
            sync += t_emb;
        }
        double shard = hpgo_step_shard_params(p, params, load.expert_params);
        double t_opt = hpgo_step_optimizer_seconds(c, p, shard);
        double t_ag = 0;
        if (p->zero >= 1 && p->zero <= 2 && replicas) {
            double ex1 = layer1 > 0 && params > 0 ? layer1 * load.expert_params / params : 0;
            t_ag = overlap ? grad_coll(&e, HPGO_COLL_ALLGATHER, layer1, ex1, 2)
                           : grad_coll(&e, HPGO_COLL_ALLGATHER, params, load.expert_params, 2);
        }
        if ((rc = add_event(&e, sync, t_opt + t_ag, d, HPGO_EV_OPTIMIZER, 0, -1, -1, -1)) != HPGO_OK)
            goto fail;
        o->busy = s->busy;
        o->compute_end = s->t;
        o->sync_end = sync;
        o->optimizer = t_opt + t_ag;
        o->peak_in_flight = (int32_t)s->peak_count;
        o->params = params;
        hpgo_memory_breakdown2(c, p, w->precision, params, load.expert_params, maxlayer,
                               s->peak + transient, load.max_act + transient,
                               overhead + load.state_bytes, &o->mem);
        if (!o->mem.fits)
            r->fits = 0;
        double end = sync + t_opt + t_ag;
        if (end > iter)
            iter = end;
        if (s->t > compute)
            compute = s->t;
    }
    /* the step ends when the slowest of its GPUs does (spec 5.3) */
    iter *= hpgo_step_straggler_factor(c, (int64_t)p->tp * p->cp * P * p->dp);
    for (int32_t d = 0; d < P; d++)
        r->devices[d].bubble = iter > 0 ? 1 - r->devices[d].busy / iter : 0;
    r->iteration_time = iter;
    r->compute_time = compute;
    r->gpus = (int64_t)p->tp * p->cp * P * p->dp;
    r->microbatches = m;
    r->p = P, r->v = V, r->n_stages = K;
    double hw = 0;
    for (int32_t k = 0; k < K; k++)
        hw += sc[k].hw_flops;
    r->hw_flops = hw * (double)m * p->tp * p->cp * p->dp;
    r->model_flops = hpgo_work_model_flops(w, p->global_batch);
    int dt = w->precision == HPGO_PREC_FP32 ? HPGO_DT_FP32 : HPGO_DT_BF16;
    double peak = c->gpu.peak[dt] * (double)r->gpus;
    if (iter > 0) {
        r->mfu = r->model_flops / (iter * peak);
        r->hfu = r->hw_flops / (iter * peak);
        r->samples_per_second = (double)p->global_batch / iter;
        r->tokens_per_second =
            w->kind == HPGO_WORK_TRANSFORMER ? r->samples_per_second * (double)w->x.seq : 0;
    }
    if (!isfinite(iter)) {
        rc = hpgo_err_set(err, HPGO_E_INVALID, 0,
                          "the step's time is not finite: the model's numbers are too large");
        goto fail;
    }
    r->timeline = e.tl;
    e.tl = NULL;
    rc = HPGO_OK;
    *out = r;
    r = NULL;
fail:
    if (ops)
        for (int32_t i = 0; i < P; i++)
            free(ops[i]);
    free(ops);
    free(n_ops);
    free(ds);
    free(wd_all);
    free(fs_all);
    free(fb);
    free(order);
    free(e.fend);
    free(e.bend);
    free(e.act_arr);
    free(e.grad_arr);
    hpgo_sim_result_free(e.tl);
    hpgo_step_result_free(r);
    return rc;
}
