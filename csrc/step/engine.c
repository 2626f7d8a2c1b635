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
 * (each sweep runs every op whose inputs are ready).
 *
 * Each device sees its stage through a view (devview_t): the GPU type
 * (cluster part) and plan (tp, dp) of its stage, its first GPU and the
 * speed of its slowest GPU.  An even plan's views are the plan and the
 * cluster themselves, so the even path computes exactly what it did before
 * views; an uneven plan's (n_groups > 0) are built by uneven_views, which
 * also prices the stages replica by replica and the resharding transfer of
 * each stage boundary once (reshard_time: O(dp_a + dp_b) per boundary).
 * Placement checks collect every group's GPUs and sort them (O(N log N)
 * for N GPUs used).  A group whose replicas span GPU types (mixed_view)
 * prices each replica on its own part, runs its collectives as one ring at
 * the slowest link the ring uses (the join between parts), and judges its
 * memory on every type it uses (each type's largest replica; ZeRO shards
 * evenly over all replicas, whatever their type).
 *
 * torch.distributed.pipelining (pp > 1 under a PyTorch kernel set) adds
 * what its stage and FSDP2 do around each pass (hpgo_step_fsdp_accumulates:
 * one gather a step, the fp32 accumulation after each backward, the
 * reduce-scatter after the last; a stage's kept outputs and input
 * gradients in the memory sweep), and its interleaved schedule walks
 * torch's grid of time steps in lock step (lockstep_t: O(p x steps) memory,
 * each step's end resolved once). */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "schedule.h"

double hpgo_step_optimizer_bytes(const hpgo_parplan_t *p)
{
    if (p->kernels == HPGO_KS_TE)
        return 46;
    /* PyTorch's AdamW on fp32 weights, gradients and moments.  Fused
     * (torchtitan from 2025, optimizer.implementation "fused"): one pass
     * reading the four and writing three, 28 bytes a parameter.  torchtitan
     * at 9dec370 (compile-blocks) left optimizer.fused off, so foreach=True:
     * torch.optim.adamw's _multi_tensor_adamw runs the weight decay (8
     * bytes), lerp of the first moment (12), mul and addcmul of the second
     * (8 + 16), sqrt, division and eps add of the denominator (8 each) and the
     * addcdiv into the weight (16) as separate passes: 84 bytes, what the
     * foreach step of a group of one took on an H100 (57.0 ms for 1.92e9
     * parameters, profiles/h100-sxm5-torchtitan-steps.json: 84 B at 2.8 TB/s
     * is 57.4 ms).  Without FSDP2 (ZeRO below 3) the bf16 gradients are cast
     * to fp32 first and the fp32 weights copied back to bf16 after (6 + 6).
     * eager-unfused-norm is the same commit run without torch.compile. */
    double adam = p->kernels == HPGO_KS_COMPILE_BLOCKS || p->kernels == HPGO_KS_EAGER_UNFUSED_NORM
                      ? 84
                      : 28;
    return adam + (p->zero >= 3 ? 0 : 12);
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

/* Compute beside a data-parallel collective (ZeRO-3's prefetched gathers,
 * gradient reduce-scatters during the backward, a distributed optimizer's
 * gathers behind the next forward) runs slower while the collective's
 * kernels share the GPU: measured across A100, H100, MI250 and MI210 the
 * compute ran 18.9 % slower beside NCCL (arXiv 2507.03114; the same
 * measurement as work.c's BULK_OVERLAP_GAIN; on one H100 SXM5, GEMMs beside
 * a 16-block copy kernel moving 817 GB/s ran 1.18x as long:
 * profiles/h100-sxm5-copy-beside-gemm.json).  A collective of y seconds
 * hidden behind compute so costs the compute y (1 - 1 / 1.189). */
#define DP_OVERLAP_SLOWDOWN 1.189

static double dp_contention(double hidden)
{
    return hidden > 0 ? hidden * (1 - 1 / DP_OVERLAP_SLOWDOWN) : 0;
}

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
        l.state_bytes += st->fp8_state + st->held;
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

int hpgo_step_torch_pipeline(const hpgo_parplan_t *p)
{
    return p->pp > 1 && p->kernels != HPGO_KS_TE;
}

/* FSDP2 under torch.distributed.pipelining (torch/distributed/pipelining/
 * stage.py, backward_maybe_with_nosync, PyTorch of December 2024 and
 * 2.5 / 2.6): every backward but a stage's last runs with
 * set_requires_gradient_sync(False) and set_reshard_after_backward(False),
 * and the last one calls each FSDP group's post_backward by hand after the
 * whole backward.  So the gradients accumulate unsharded in the reduce
 * dtype from the stage's first backward (_fsdp_param.py
 * to_accumulated_grad_if_needed) until that post_backward reduce-scatters
 * them and drops the buffer.  A device holds the buffers of the chunks
 * whose backwards overlap: the interleaved schedule with m <= p micro-
 * batches (one round; Megatron's and torch's ScheduleInterleaved1F1B)
 * runs all backwards of one chunk before the next chunk's first, so one
 * chunk's at a time; every other case holds them all together. */
int hpgo_step_fsdp_accumulates(const hpgo_parplan_t *p, int64_t m)
{
    return p->zero >= 3 && p->pp > 1 && m > 1;
}

double hpgo_step_accum_params(const hpgo_parplan_t *p, const hpgo_stage_cost_t *sc, int32_t d,
                              int64_t m)
{
    if (!hpgo_step_torch_pipeline(p) || !hpgo_step_fsdp_accumulates(p, m))
        return -1;
    double sum = 0, most = 0;
    for (int32_t ch = 0; ch < p->vstages; ch++) {
        const hpgo_stage_cost_t *st = &sc[hpgo_sched_stage(p->schedule, p->pp, p->vstages, d, ch)];
        double dense = st->params - st->expert_params;
        sum += dense;
        most = dense > most ? dense : most;
    }
    return p->schedule == HPGO_PS_INTERLEAVED && m <= p->pp ? most : sum;
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

/* What one pipeline device stands for: the GPU type (cluster part) its
 * stage runs on, the stage's plan (its group's tp and dp, n_groups 0), the
 * cluster index of its first GPU, the speed of its slowest GPU, and, for
 * an uneven plan, its replicas' share boundaries (dp + 1 fractions of a
 * micro-batch) and the bytes each replica's GPUs send on per micro-batch.
 * An even plan's devices all see the plan and the cluster themselves. */
typedef struct devview {
    const hpgo_cluster_t *c;
    hpgo_parplan_t p;
    int64_t first, local; /* cluster index and index inside its part */
    double speed;
    int replicas;         /* gradients to synchronise over replicas */
    const double *bound;  /* uneven: dp + 1 share boundaries */
    const double *send;   /* uneven: dp bytes per GPU to the next stage */
    const int64_t *gpus;  /* uneven: NULL, or its dp x tp GPUs replica by replica */
    /* a group spanning GPU types: each replica's part, the parts used, the
     * cost of each used part's largest replica (its memory), and the ring
     * every collective over the group runs (the slowest link it uses) */
    int mixed, n_mix;
    const int32_t *rparts;
    int32_t mix_part[HPGO_CLUSTER_MAX_PARTS];
    hpgo_stage_cost_t *mix_cost; /* HPGO_CLUSTER_MAX_PARTS, by part index */
    double ring_bw, ring_lat;
} devview_t;

/* Cluster index of the first GPU of replica i of a device's stage. */
static int64_t rep_first(const devview_t *v, int64_t i)
{
    return v->gpus ? v->gpus[i * v->p.tp] : v->first + i * v->p.tp;
}

typedef struct eng {
    const hpgo_cluster_t *c;
    const hpgo_parplan_t *p;
    devview_t *views;     /* P */
    int uneven;
    double *xfer;         /* uneven: seconds of the transfer over each stage boundary */
    void *mixbuf;         /* the mixed groups' GPU lists and per-part costs */
    hpgo_cancel_t *cancel;
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
    double dur;
    if (e->uneven) {
        dur = e->xfer[to < from ? to : from] + regather;
    } else {
        int32_t lvl = hpgo_cost_level_between(e->c, rank_of(e, from), rank_of(e, to));
        dur = hpgo_cost_p2p(e->c, lvl, bytes) + regather;
    }
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
    int64_t *fdone;            /* per chunk: forwards done */
    double *final_start, *final_dur; /* per chunk: the op that completed its gradients */
} devstate_t;

/* A collective over `size` GPUs at `stride` of a device's stage.  An even
 * plan's groups are priced by cost.h as laid out from a unit boundary.
 * An uneven plan's group starts where its stage was placed: when its
 * position makes it cross a level the aligned layout would not (DAPPLE's
 * 14 replicas of 16 GPUs, a group straddling two nodes), or cost.h cannot
 * lay it out evenly, it is priced as one ring at the bandwidth of the
 * highest level it crosses (cost.h's ring, spec/training-model.md 4.1). */
static double coll(const devview_t *v, int uneven, int op, int64_t size, int64_t stride,
                   double bytes)
{
    if (size <= 1 || !(bytes > 0))
        return 0;
    const hpgo_cluster_t *c = v->c;
    if (!uneven)
        return hpgo_cost_collective(c, op, size, stride, bytes, HPGO_ALGO_AUTO);
    if (v->mixed && v->n_mix > 1) { /* one ring over the replicas at the slowest link */
        double n = (double)size, bus = op == HPGO_COLL_ALLREDUCE ? 2 * (n - 1) / n : (n - 1) / n;
        double nsteps = op == HPGO_COLL_ALLREDUCE ? 2 * (n - 1) : n - 1;
        return bus * bytes / v->ring_bw + nsteps * v->ring_lat;
    }
    int64_t fan[HPGO_CLUSTER_MAX_LEVELS], last = v->local + (size - 1) * stride;
    int32_t top = hpgo_cost_level_between(c, v->local, last);
    if (v->gpus) { /* a placed list: the highest level between its GPUs */
        int64_t lo = v->gpus[0], hi = v->gpus[0], n = (int64_t)v->p.dp * v->p.tp;
        for (int64_t i = 1; i < n; i++) {
            lo = v->gpus[i] < lo ? v->gpus[i] : lo;
            hi = v->gpus[i] > hi ? v->gpus[i] : hi;
        }
        top = hpgo_cost_level_between(c, lo - (v->first - v->local), hi - (v->first - v->local));
    }
    if (!v->gpus && hpgo_group_fanout(c, size, stride, fan, NULL) == HPGO_OK &&
        top == hpgo_cost_level_between(c, 0, (size - 1) * stride))
        return hpgo_cost_collective(c, op, size, stride, bytes, HPGO_ALGO_AUTO);
    const hpgo_level_t *l = &c->levels[top];
    double n = (double)size, bus = op == HPGO_COLL_ALLREDUCE ? 2 * (n - 1) / n : (n - 1) / n;
    double nsteps = op == HPGO_COLL_ALLREDUCE ? 2 * (n - 1) : n - 1;
    return bus * bytes / (l->coll_bandwidth * l->efficiency) + nsteps * l->latency;
}

static double dp_coll(int uneven, const devview_t *v, int op, double bytes)
{
    /* gradients are averaged over every replica of the sequence: dp x cp;
     * with hybrid sharding (shard_size f) the ZeRO collectives run inside
     * groups of f replicas and the reduced shards are all-reduced across the
     * groups (FSDP2 HSDP: reduce-scatter, then an all-reduce of the shard on
     * its own stream, _fsdp_collectives.py foreach_reduce).  An uneven
     * plan's replicas all-reduce the whole gradient, whatever their shares
     * of the samples (each holds every parameter of its stage). */
    const hpgo_parplan_t *p = &v->p;
    int64_t n = (int64_t)p->dp * p->cp, f = hpgo_parplan_shard(p);
    if (op == HPGO_COLL_ALLREDUCE || f >= n)
        return coll(v, uneven, op, n, p->tp, bytes);
    double t = coll(v, uneven, op, f, p->tp, bytes);
    if (op == HPGO_COLL_REDUCE_SCATTER)
        t += coll(v, uneven, HPGO_COLL_ALLREDUCE, n / f, (int64_t)p->tp * f,
                  bytes / (double)f);
    return t;
}

/* A gradient (or parameter) collective over a stage's parameters: the
 * dense ones over dp x cp, the routed experts' over their expert
 * data-parallel group (one after the other on the sync stream). */
static double grad_coll(int uneven, const devview_t *v, int op, double params,
                        double expert_params, double bytes_per)
{
    double t = dp_coll(uneven, v, op, (params - expert_params) * bytes_per);
    if (expert_params > 0) {
        int64_t gs, gst;
        hpgo_parplan_edp_group(&v->p, &gs, &gst);
        if (gs > 1)
            t += coll(v, uneven, op, gs, gst, expert_params * bytes_per);
    }
    return t;
}

/* Seconds of ZeRO-3's all-gather of stage st's weights before one pass.
 * torchao's float8 all-gather moves the Float8Linear weights in fp8 (1 B),
 * the rest in 16 bits: (P - L / 2) x 2 B. */
static double zero3_gather(int uneven, const devview_t *v, const hpgo_stage_cost_t *st)
{
    double f8 = v->p.fp8_all_gather ? st->fp8_linear_params / 2 : 0;
    return grad_coll(uneven, v, HPGO_COLL_ALLGATHER, st->params - f8, st->expert_params, 2);
}

/* A pass of dur seconds of stage st with its weights gathered (ZeRO-3,
 * gather of ag seconds): gathered layer by layer, each prefetched behind
 * the one before (FSDP2's implicit forward and explicit backward
 * prefetch), the gathers after the first beside the pass and slowing it;
 * the first layer's gather has nothing before it to hide behind
 * (MegaScale section 3.2: the first all-gather is the exposed part). */
static double gathered_pass(double ag, const hpgo_stage_cost_t *st, double dur)
{
    double ag1 = ag / (st->n_layers > 0 ? st->n_layers : 1);
    double hid = ag - ag1 < dur ? ag - ag1 : dur;
    dur += dp_contention(hid);
    if (ag > dur)
        dur = ag;
    return dur + ag1;
}

/* Whether an even plan's gradients are synchronised over replicas: dp x cp
 * of them, or the routed experts' over their expert data-parallel group. */
static int even_replicas(const hpgo_parplan_t *p)
{
    return p->dp * p->cp > 1 || hpgo_parplan_edp(p) > 1;
}

/* A device's view of an even plan on the cluster itself (even_views). */
static devview_t even_view(const hpgo_cluster_t *c, const hpgo_parplan_t *p)
{
    devview_t v = {0};
    v.c = c;
    v.p = *p;
    v.speed = 1;
    v.replicas = even_replicas(p);
    return v;
}

/* ZeRO-2/3 reduce-scatter each micro-batch's gradients (DeepSpeed; FSDP2
 * without pipelining: torchtitan leaves gradient sync on), except FSDP
 * under pipeline parallelism (P devices, m micro-batches), which
 * accumulates them unsharded and reduce-scatters once after the stage's
 * last backward (torch/distributed/pipelining/stage.py; Llama 3 section
 * 3.3.2). */
static int per_mb_scatter(const hpgo_parplan_t *p, int replicas, int32_t P, int64_t m)
{
    return p->zero >= 2 && replicas && !(p->zero >= 3 && P > 1 && m > 1);
}

/* The collective that synchronises the gradients after the backward:
 * DeepSpeed's pipeline engine under ZeRO-1 all-reduces the fp32 gradients
 * (_exec_reduce_grads -> _bf16_reduce_grads); ZeRO shards reduce-scatter. */
static int sync_collective(const hpgo_parplan_t *p)
{
    int ds_ar = p->zero == 1 && p->optimizer_impl == HPGO_OPT_DEEPSPEED_BF16;
    return p->zero >= 1 && !ds_ar ? HPGO_COLL_REDUCE_SCATTER : HPGO_COLL_ALLREDUCE;
}

double hpgo_step_mb_scatter(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int precision,
                            const hpgo_stage_cost_t *st, int64_t m)
{
    if (p->n_groups > 0 || !per_mb_scatter(p, even_replicas(p), p->pp, m))
        return 0;
    devview_t v = even_view(c, p);
    double wbytes, gbytes, obytes;
    hpgo_work_state_bytes(precision, p->fp8_params, p->optimizer_impl, &wbytes, &gbytes, &obytes);
    if (!p->overlap_grad_reduce)
        return grad_coll(0, &v, HPGO_COLL_REDUCE_SCATTER, st->params, st->expert_params, gbytes);
    int32_t nb = st->n_layers > 0 ? st->n_layers : 1;
    return nb * grad_coll(0, &v, HPGO_COLL_REDUCE_SCATTER, st->params / nb, st->expert_params / nb,
                          gbytes);
}

void hpgo_step_sync_bounds(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int precision,
                           const hpgo_stage_cost_t *sc, int32_t d, int64_t m, int fused,
                           const hpgo_device_load_t *load, double *compute_extra,
                           double *step_extra)
{
    *compute_extra = *step_extra = 0;
    if (p->n_groups > 0 || !even_replicas(p))
        return;
    devview_t v = even_view(c, p);
    int per_mb_rs = per_mb_scatter(p, 1, p->pp, m);
    int accum = hpgo_step_torch_pipeline(p) && hpgo_step_fsdp_accumulates(p, m);
    double wbytes, gbytes, obytes;
    hpgo_work_state_bytes(precision, p->fp8_params, p->optimizer_impl, &wbytes, &gbytes, &obytes);
    int op_sync = sync_collective(p);
    double hid = 0, one_lo = INFINITY, one_hi = 0;
    for (int32_t ch = 0; ch < p->vstages; ch++) {
        const hpgo_stage_cost_t *st = &sc[hpgo_sched_stage(p->schedule, p->pp, p->vstages, d, ch)];
        int32_t nb = st->n_layers > 0 ? st->n_layers : 1;
        if (!per_mb_rs && p->overlap_grad_reduce && !accum) {
            /* the buckets beside the chunk's last backward: a B + W pass
             * under fused schedules, at least its W pass otherwise */
            double tb = grad_coll(0, &v, op_sync, st->params / nb, st->expert_params / nb,
                                  gbytes);
            double last = fused ? st->b + st->w : st->w;
            hid += (nb - 1) * tb < last ? (nb - 1) * tb : last;
        }
        double layer = per_mb_rs ? 0 : st->params / nb;
        double one = layer > 0 && load->params > 0
                         ? grad_coll(0, &v, HPGO_COLL_ALLGATHER, layer,
                                     layer * load->expert_params / load->params, 2)
                         : 0;
        one_lo = one < one_lo ? one : one_lo;
        one_hi = one > one_hi ? one : one_hi;
    }
    *compute_extra = dp_contention(hid);
    if (p->zero >= 1 && p->zero <= 2) {
        double t_ag = grad_coll(0, &v, HPGO_COLL_ALLGATHER, load->params, load->expert_params, 2);
        if (p->overlap_grad_reduce) {
            /* the engine's exposed first-layer gather is the first chunk's
             * in completion order: at least the least of them, and the rest
             * beside the first forward at least what the largest leaves */
            double fwd = sc[hpgo_sched_stage(p->schedule, p->pp, p->vstages, d, 0)].f;
            double rest = t_ag - one_hi < fwd ? t_ag - one_hi : fwd;
            t_ag = one_lo + dp_contention(rest);
        }
        *step_extra = t_ag;
    }
}

/* Whether an even plan's device peaks before its step holds gradients: a
 * PyTorch step of one micro-batch without a pipeline reaches its output
 * layer and loss's working set at the start of the backward, before the
 * backward has made any gradient -- torchtitan's train step zeroes them
 * with set_to_none before the forward (optimizers.zero_grad), FSDP2 makes
 * the sharded ones at each reduce-scatter, and one GPU's step makes its
 * own in the backward.  Megatron's DDP holds its contiguous gradient
 * buffer through the step, and so do PyTorch DDP's buckets (dp > 1
 * without FSDP); with micro-batches accumulated, the later ones find the
 * gradients made. */
static int peaks_before_grads(const hpgo_parplan_t *p, int64_t m, const hpgo_stage_cost_t *st)
{
    return p->kernels != HPGO_KS_TE && p->n_groups == 0 && p->pp == 1 && p->vstages == 1 &&
           m == 1 && (p->zero >= 3 || (int64_t)p->dp * p->cp == 1) && st->head_transient > 0;
}

void hpgo_step_peak_memory(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                           const hpgo_stage_cost_t *sc, int32_t d, int64_t m,
                           const hpgo_device_load_t *ld, double stored, double other,
                           hpgo_mem_t *out)
{
    const hpgo_device_load_t load = *ld;
    double accum = hpgo_step_accum_params(p, sc, d, m);
    if (!peaks_before_grads(p, m, &sc[0])) {
        hpgo_memory_breakdown3(c, p, precision, load.params, load.expert_params,
                               load.max_layer_params, stored + load.transient,
                               load.max_act + load.transient, other, accum, out);
        return;
    }
    /* the loss's working set with no gradient yet, or the layers' (with
     * every gradient counted, an upper figure for the backward) */
    hpgo_mem_t a, b;
    hpgo_memory_breakdown4(c, p, precision, load.params, load.expert_params, load.max_layer_params,
                           stored + sc[0].head_transient, load.max_act + sc[0].head_transient,
                           other, accum, 0, &a);
    hpgo_memory_breakdown4(c, p, precision, load.params, load.expert_params, load.max_layer_params,
                           stored + sc[0].layer_transient, load.max_act + sc[0].layer_transient,
                           other, accum, 1, &b);
    *out = a.total >= b.total ? a : b;
}

double hpgo_step_zero3_gather(const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                              const hpgo_stage_cost_t *st)
{
    if (p->zero < 3 || p->n_groups > 0 || !even_replicas(p))
        return 0;
    devview_t v = even_view(c, p);
    return zero3_gather(0, &v, st);
}

double hpgo_step_gathered_pass(double ag, const hpgo_stage_cost_t *st, double dur)
{
    return ag > 0 ? gathered_pass(ag, st, dur) : dur;
}

/* Seconds of torchao's precompute_float8_dynamic_scale_for_fsdp after the
 * optimizer step (torchao/float8/fsdp_utils.py at eab345c): the infinity
 * norm of every Float8Linear weight's fp32 shard (torch._foreach_norm: a
 * read of 4 B per local parameter), one all-reduce of their maxima (one
 * fp32 per weight, at most 7 a block) over the shard group, and a few
 * one-element kernels for the scales. */
static double fp8_precompute(const eng_t *e, const devview_t *v, const hpgo_stage_cost_t *sc,
                             int32_t d)
{
    const hpgo_parplan_t *p = &v->p;
    double lin = 0, layers = 0;
    for (int32_t ch = 0; ch < p->vstages; ch++) {
        const hpgo_stage_cost_t *st = &sc[hpgo_sched_stage(p->schedule, p->pp, p->vstages, d, ch)];
        lin += st->fp8_linear_params;
        layers += st->n_layers;
    }
    if (!(lin > 0))
        return 0;
    double shard = hpgo_step_shard_params(p, lin, 0), bytes = 4 * shard;
    double rd = hpgo_gpu_op_time(&v->c->gpu, HPGO_DT_FP32, HPGO_OP_VECTOR, 0, bytes);
    /* the scale's one-element kernels (stack, clamp, to(float64), division,
     * to(float32)) at the 8 us host floor of a launch (work.c
     * HOST_PER_KERNEL, profiles/h100-sxm5-kernels.json) */
    return rd + dp_coll(e->uneven, v, HPGO_COLL_ALLREDUCE, 4 * 7 * layers) + 5 * 8e-6;
}

/* Seconds of FSDP2's gradient accumulation after one micro-batch's
 * backward of a pipelined stage (_fsdp_param_group.py post_backward with
 * reduce_grads off): the first backward casts each 16-bit gradient to the
 * fp32 reduce dtype (to_accumulated_grad_if_needed: 2 bytes read, 4
 * written a parameter), every later one adds it into that buffer
 * (accumulate_unsharded_grad_if_needed: 4 + 2 read, 4 written), on the
 * compute stream. */
static double fsdp2_accum_time(const devview_t *v, double params, int first)
{
    double bytes = (first ? 6 : 10) * params;
    return hpgo_gpu_op_time(&v->c->gpu, HPGO_DT_BF16, HPGO_OP_VECTOR, 0, bytes) / v->speed;
}

/* The slowest speed factor of cluster GPUs [lo, hi) (1 when none is listed). */
static double min_speed(const hpgo_cluster_t *c, int64_t lo, int64_t hi)
{
    double s = 1;
    if (!c->slow || c->n_slow < 1)
        return s;
    int32_t a = 0, b = c->n_slow;
    while (a < b) { /* first listed GPU >= lo */
        int32_t mid = a + (b - a) / 2;
        if (c->slow[mid].gpu < lo)
            a = mid + 1;
        else
            b = mid;
    }
    for (int32_t i = a; i < c->n_slow && c->slow[i].gpu < hi; i++)
        if (c->slow[i].speed < s)
            s = c->slow[i].speed;
    return s;
}

/* Seconds of a point-to-point transfer of `bytes` between cluster GPUs a
 * and b: over the level they share inside a part, over the parts' join
 * between parts. */
static double p2p_gpus(const hpgo_cluster_t *c, int64_t a, int64_t b, double bytes)
{
    int64_t la, lb;
    int32_t pa = hpgo_cluster_part_of(c, a, &la), pb = hpgo_cluster_part_of(c, b, &lb);
    if (pa != pb) {
        const hpgo_level_t *j = &c->join;
        return j->latency + bytes / (j->bandwidth * j->efficiency);
    }
    const hpgo_cluster_t *part = hpgo_cluster_part(c, pa);
    return hpgo_cost_p2p(part, hpgo_cost_level_between(part, la, lb), bytes);
}

/* The transfer over the boundary between uneven stages a (sending) and b
 * = a + 1 of one micro-batch's activations (the gradients back move the
 * same bytes): sender replica i holds samples [bound_a[i], bound_a[i+1])
 * of the micro-batch, receiver j needs [bound_b[j], bound_b[j+1]); the
 * overlap of the two moves between them, split over the tp GPUs of the
 * group with fewer (each GPU of a tensor-parallel group holds 1/tp of it,
 * sequence parallelism or Megatron's scatter-gather of the send).  Each
 * GPU sends and receives one transfer at a time (cluster.h's bandwidths
 * are per GPU and direction): the boundary takes the longest sum over one
 * sender or one receiver.  Equal groups with equal shares move replica i
 * to replica i, as an even plan does. */
static double reshard_time(const hpgo_cluster_t *c, const devview_t *a, const devview_t *b)
{
    int32_t na = a->p.dp, nb = b->p.dp, i = 0, j = 0;
    int64_t ta = a->p.tp, tb = b->p.tp, tmin = ta < tb ? ta : tb;
    double worst = 0, out_i = 0, in_j = 0;
    while (i < na && j < nb) {
        double lo = a->bound[i] > b->bound[j] ? a->bound[i] : b->bound[j];
        double hi = a->bound[i + 1] < b->bound[j + 1] ? a->bound[i + 1] : b->bound[j + 1];
        if (hi > lo) {
            double share = a->bound[i + 1] - a->bound[i];
            /* a->send[i] is what one of replica i's GPUs sends for all its samples */
            double bytes = a->send[i] * ((hi - lo) / share) * ((double)ta / (double)tmin);
            double t = p2p_gpus(c, rep_first(a, i), rep_first(b, j), bytes);
            out_i += t;
            in_j += t;
            if (out_i > worst)
                worst = out_i;
            if (in_j > worst)
                worst = in_j;
        }
        /* advance whichever interval ends first (both when they end together) */
        int adv_i = a->bound[i + 1] <= b->bound[j + 1], adv_j = b->bound[j + 1] <= a->bound[i + 1];
        if (adv_i)
            i++, out_i = 0;
        if (adv_j)
            j++, in_j = 0;
    }
    return worst;
}


static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* First GPU of each part in the cluster's numbering. */
static int64_t part_start(const hpgo_cluster_t *c, int32_t part)
{
    int64_t first = 0;
    for (int32_t k = 0; k < part; k++)
        first += hpgo_cluster_gpus(hpgo_cluster_part(c, k));
    return first;
}

/* A stage group whose replicas span GPU types (part HPGO_PART_MIXED):
 * replica i on part parts[i], at its listed GPUs or the next free tp GPUs
 * of its part; each replica priced on its own part's GPU at its share
 * (equal samples on one part priced once), the stage's passes its slowest
 * replica's; the ring of its collectives runs at the slowest link it uses
 * (the top level a part's replicas span inside the part, and the parts'
 * join when it uses two or more).  `mix_at` hands out the GPU list and the
 * per-part costs. */
static int mixed_view(eng_t *e, const hpgo_work_t *w, int32_t k, const int32_t *split,
                      int64_t *next, int64_t *used, int64_t *u_n, char **mix_at, double *bound,
                      double *send, hpgo_stage_cost_t *out, hpgo_err_t *err)
{
    const hpgo_cluster_t *c = e->c;
    const hpgo_parplan_t *p = e->p;
    const hpgo_stage_group_t *g = &p->groups[k];
    devview_t *v = &e->views[k];
    int32_t n_parts = c->n_parts >= 2 && c->parts ? c->n_parts : 1, tp = g->tp, dp = g->dp;
    hpgo_stage_cost_t *mc = (hpgo_stage_cost_t *)*mix_at;
    *mix_at += sizeof *mc * HPGO_CLUSTER_MAX_PARTS;
    int64_t *gl = (int64_t *)*mix_at;
    *mix_at += sizeof *gl * (size_t)dp * (size_t)tp;
    int64_t lo[HPGO_CLUSTER_MAX_PARTS], hi[HPGO_CLUSTER_MAX_PARTS];
    int32_t cnt[HPGO_CLUSTER_MAX_PARTS] = {0};
    for (int32_t i = 0; i < dp; i++) {
        int32_t q = g->parts[i];
        const hpgo_cluster_t *part = q < n_parts ? hpgo_cluster_part(c, q) : NULL;
        if (!part)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: parts[%d] = %d, but the cluster has %d part%s",
                                (int)k, (int)i, (int)q, (int)n_parts, n_parts > 1 ? "s" : "");
        int64_t start = part_start(c, q), have = hpgo_cluster_gpus(part);
        int64_t unit = hpgo_cluster_unit(part, 0), loc = next[q];
        if (tp > unit || unit % tp != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: tp=%d must divide the %lld GPUs of a node of part %d",
                                (int)k, (int)tp, (long long)unit, (int)q);
        if (g->gpus && hpgo_cluster_part_of(c, g->gpus[(int64_t)i * tp], &loc) != q)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: GPU %lld of replica %d is not on its part %d", (int)k,
                                (long long)g->gpus[(int64_t)i * tp], (int)i, (int)q);
        if (loc % tp != 0 || loc + tp > have)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: replica %d needs tp=%d aligned GPUs of part %d from its "
                                "GPU %lld; the part has %lld",
                                (int)k, (int)i, (int)tp, (int)q, (long long)loc,
                                (long long)have);
        for (int32_t x = 0; x < tp; x++) {
            int64_t gx = start + loc + x;
            if (g->gpus && g->gpus[(int64_t)i * tp + x] != gx)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "stage %d: replica %d's GPUs must be tp=%d consecutive GPUs",
                                    (int)k, (int)i, (int)tp);
            gl[(int64_t)i * tp + x] = gx;
            used[(*u_n)++] = gx;
        }
        if (loc + tp > next[q])
            next[q] = loc + tp;
        if (!cnt[q] || loc < lo[q])
            lo[q] = loc;
        if (!cnt[q] || loc + tp - 1 > hi[q])
            hi[q] = loc + tp - 1;
        cnt[q]++;
    }
    double bw = INFINITY, lat = 0;
    v->n_mix = 0;
    for (int32_t q = 0; q < HPGO_CLUSTER_MAX_PARTS; q++) {
        if (!cnt[q])
            continue;
        v->mix_part[v->n_mix++] = q;
        const hpgo_cluster_t *part = hpgo_cluster_part(c, q);
        if (hi[q] > lo[q]) {
            const hpgo_level_t *l = &part->levels[hpgo_cost_level_between(part, lo[q], hi[q])];
            if (l->coll_bandwidth * l->efficiency < bw)
                bw = l->coll_bandwidth * l->efficiency;
            if (l->latency > lat)
                lat = l->latency;
        }
    }
    if (v->n_mix > 1) {
        const hpgo_level_t *j = &c->join;
        if (j->coll_bandwidth * j->efficiency < bw)
            bw = j->coll_bandwidth * j->efficiency;
        if (j->latency > lat)
            lat = j->latency;
    }
    v->ring_bw = isfinite(bw) ? bw : 1, v->ring_lat = lat;
    v->mixed = 1, v->rparts = g->parts, v->mix_cost = mc;
    v->gpus = gl, v->first = gl[0];
    hpgo_cluster_part_of(c, gl[0], &v->local);
    int run = v->n_mix == 1; /* one type on one run of GPUs: the group's own pricing */
    for (int64_t x = 1; run && x < (int64_t)dp * tp; x++)
        run = gl[x] == gl[0] + x;
    if (run)
        v->gpus = NULL;
    v->p = *p;
    v->p.tp = tp, v->p.dp = dp, v->p.n_groups = 0, v->p.groups = NULL;
    v->p.n_split = 0, v->p.split = NULL;
    v->p.micro_batch = 1, v->p.global_batch = e->m * dp;
    v->replicas = dp > 1;
    bound[0] = 0;
    for (int32_t i = 0; i < dp; i++)
        bound[i + 1] = g->shares ? bound[i] + g->shares[i] : (double)(i + 1) / dp;
    bound[dp] = 1;
    v->bound = bound, v->send = send;
    hpgo_stage_cost_t one[HPGO_CLUSTER_MAX_PARTS], big;
    double lastn[HPGO_CLUSTER_MAX_PARTS], most_q[HPGO_CLUSTER_MAX_PARTS];
    int have_q[HPGO_CLUSTER_MAX_PARTS] = {0};
    double most = -1, f = 0, bw2 = 0, ww = 0, slow = 1, hw = 0, mf = 0;
    int32_t bigpart = g->parts[0];
    memset(&big, 0, sizeof big);
    int64_t M = p->micro_batch;
    for (int32_t i = 0; i < dp; i++) {
        int32_t q = g->parts[i];
        const hpgo_cluster_t *part = hpgo_cluster_part(c, q);
        double samples = g->shares ? (double)M * g->shares[i] : (double)M / dp;
        if (!have_q[q] || lastn[q] != samples) {
            hpgo_err_t inner;
            int rc = hpgo_work_stage_cost_range(w, part, &v->p, split[k], split[k + 1], samples,
                                                &one[q], &inner);
            if (rc != HPGO_OK)
                return hpgo_err_set(err, rc, 0, "stage %d, replica %d: %s", (int)k, (int)i,
                                    inner.msg);
            if (!have_q[q])
                most_q[q] = -1;
            have_q[q] = 1, lastn[q] = samples;
        }
        double sp = min_speed(c, gl[(int64_t)i * tp], gl[(int64_t)i * tp] + tp);
        if (sp < slow)
            slow = sp;
        if (one[q].f / sp > f)
            f = one[q].f / sp;
        if (one[q].b / sp > bw2)
            bw2 = one[q].b / sp;
        if (one[q].w / sp > ww)
            ww = one[q].w / sp;
        send[i] = one[q].send_bytes;
        hw += one[q].hw_flops, mf += one[q].model_flops;
        if (samples > most_q[q])
            most_q[q] = samples, mc[q] = one[q];
        if (samples > most)
            most = samples, big = one[q], bigpart = q;
    }
    big.f = f, big.b = bw2, big.w = ww;
    big.hw_flops = hw / dp, big.model_flops = mf / dp;
    *out = big;
    v->speed = slow;
    v->c = hpgo_cluster_part(c, bigpart);
    return HPGO_OK;
}

/* An even plan's devices: the plan and the cluster themselves, stage d
 * from GPU rank_of(d), slowed by its slowest GPU.  On a cluster of several
 * GPU types the plan must lie in part 0 (its GPU and levels are the
 * cluster's own). */
static int even_views(eng_t *e, hpgo_err_t *err)
{
    const hpgo_cluster_t *c = e->c;
    const hpgo_parplan_t *p = e->p;
    int64_t per = (int64_t)p->tp * p->cp * p->dp, p0 = hpgo_cluster_gpus(hpgo_cluster_part(c, 0));
    if (c->n_parts >= 2 && c->parts && per * e->P > p0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the plan needs %lld GPUs of one type, the cluster's first part has "
                            "%lld: give each pipeline stage its own group (stages) on a cluster "
                            "of several GPU types",
                            (long long)(per * e->P), (long long)p0);
    int replicas = even_replicas(p);
    for (int32_t d = 0; d < e->P; d++) {
        devview_t *v = &e->views[d];
        v->c = c;
        v->p = *p;
        v->first = v->local = rank_of(e, d);
        v->speed = min_speed(c, v->first, v->first + per);
        v->replicas = replicas;
    }
    return HPGO_OK;
}

/* An uneven plan's devices and stage costs: stage k on its group's part,
 * placed, each replica's share of a micro-batch priced on that part's GPU
 * at the group's tp (work.h hpgo_work_stage_cost_range) and slowed by its
 * slowest GPU; the stage's passes take its slowest replica's time, its
 * memory is the replica with the most samples (every replica of a group
 * is on one GPU type).  `buf` receives 2 x (sum of dp + K) doubles. */
static int uneven_views(eng_t *e, const hpgo_work_t *w, hpgo_stage_cost_t *sc, double **buf,
                        hpgo_err_t *err)
{
    const hpgo_cluster_t *c = e->c;
    const hpgo_parplan_t *p = e->p;
    int32_t K = e->K, n_parts = c->n_parts >= 2 && c->parts ? c->n_parts : 1;
    int64_t L = hpgo_work_layers(w), total = 0;
    int32_t ev[HPGO_PLAN_MAX_STAGES + 1];
    const int32_t *split = p->split;
    if (p->n_split) {
        if (p->n_split != K + 1 || !split)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "the layer split needs pp + 1 = %d boundaries", K + 1);
        if (split[0] != 0 || split[K] != L)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "the layer split must start at 0 and end at %lld layers",
                                (long long)L);
    } else {
        if (L < K)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "%d stages but only %lld layers", K,
                                (long long)L);
        hpgo_work_even_split(L, K, ev);
        split = ev;
    }
    for (int32_t k = 0; k < K; k++) {
        if (split[k + 1] <= split[k])
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "the layer split must increase: stage %d is empty or reversed",
                                (int)k);
        total += p->groups[k].dp;
    }
    size_t mix_bytes = 0;
    for (int32_t k = 0; k < K; k++)
        if (p->groups[k].part == HPGO_PART_MIXED && p->groups[k].parts)
            mix_bytes += sizeof(hpgo_stage_cost_t) * HPGO_CLUSTER_MAX_PARTS +
                         sizeof(int64_t) * (size_t)p->groups[k].dp * (size_t)p->groups[k].tp;
    char *mix_at = NULL;
    if (mix_bytes) {
        if (!(e->mixbuf = malloc(mix_bytes)))
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for the stage groups");
        mix_at = e->mixbuf;
    }
    int64_t gpus = hpgo_cluster_gpus(c), n_used = 0; /* replicas (total) <= GPUs used */
    for (int32_t k = 0; k < K; k++)
        n_used += (int64_t)p->groups[k].dp * p->groups[k].tp;
    if (n_used > gpus)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the stage groups hold %lld GPUs, the cluster %lld",
                            (long long)n_used, (long long)gpus);
    /* share boundaries and sends (2 dp + 1 a stage), the K - 1 boundaries'
     * transfer times, and every group's GPUs (to find one used twice) */
    double *b = malloc(2 * (size_t)(total + K) * sizeof *b + (size_t)n_used * sizeof(int64_t));
    if (!b)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for the stage groups");
    *buf = b;
    int64_t *used = (int64_t *)(b + 2 * (size_t)(total + K)), u_n = 0;
    int64_t next[HPGO_CLUSTER_MAX_PARTS] = {0};
    int64_t m = e->m, M = p->micro_batch;
    for (int32_t k = 0; k < K; k++) {
        const hpgo_stage_group_t *g = &p->groups[k];
        devview_t *v = &e->views[k];
        if (hpgo_cancelled(e->cancel))
            return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the simulation was cancelled");
        if (g->part == HPGO_PART_MIXED) {
            double *bound = b, *send = b + g->dp + 1;
            b += 2 * (size_t)g->dp + 1;
            int rc = mixed_view(e, w, k, split, next, used, &u_n, &mix_at, bound, send, &sc[k],
                                err);
            if (rc != HPGO_OK)
                return rc;
            continue;
        }
        const hpgo_cluster_t *part = hpgo_cluster_part(c, g->part);
        if (!part)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: part %d, but the cluster has %d part%s", (int)k,
                                (int)g->part, (int)n_parts, n_parts > 1 ? "s" : "");
        int64_t start = part_start(c, g->part), have = hpgo_cluster_gpus(part);
        int64_t n = (int64_t)g->dp * g->tp;
        int64_t first = g->gpus ? g->gpus[0] : g->first_gpu;
        if (first >= 0) {
            int64_t loc;
            int32_t on = hpgo_cluster_part_of(c, first, &loc);
            if (on != g->part)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "stage %d: GPU %lld is %s, not on its part %d", (int)k,
                                    (long long)first,
                                    on < 0 ? "not a GPU of the cluster" : "on another part",
                                    (int)g->part);
            v->local = loc;
        } else {
            v->local = next[g->part];
        }
        v->first = start + v->local;
        v->gpus = g->gpus;
        if (!g->gpus && v->local + n > have)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d needs dp x tp = %lld GPUs of part %d from its GPU "
                                "%lld; the part has %lld",
                                (int)k, (long long)n, (int)g->part, (long long)v->local,
                                (long long)have);
        if (g->tp > hpgo_cluster_unit(part, 0) || hpgo_cluster_unit(part, 0) % g->tp != 0 ||
            v->local % g->tp != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: tp=%d must divide the %lld GPUs of a node and its "
                                "groups start at a multiple of tp (GPU %lld of its part)",
                                (int)k, (int)g->tp, (long long)hpgo_cluster_unit(part, 0),
                                (long long)v->local);
        for (int64_t x = 0; x < n; x++) { /* every GPU of the group on its part, tp aligned */
            int64_t gx = g->gpus ? g->gpus[x] : v->first + x;
            if (gx < start || gx >= start + have ||
                (g->gpus && x % g->tp && gx != g->gpus[x - x % g->tp] + x % g->tp) ||
                (g->gpus && x % g->tp == 0 && (gx - start) % g->tp != 0))
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "stage %d: GPU %lld is not on part %d (GPUs %lld..%lld) or "
                                    "breaks a replica's tp=%d consecutive, aligned GPUs",
                                    (int)k, (long long)gx, (int)g->part, (long long)start,
                                    (long long)(start + have - 1), (int)g->tp);
            used[u_n++] = gx;
        }
        if (v->local + n > next[g->part])
            next[g->part] = v->local + n;
        v->c = part;
        v->p = *p;
        v->p.tp = g->tp, v->p.dp = g->dp, v->p.n_groups = 0, v->p.groups = NULL;
        v->p.n_split = 0, v->p.split = NULL;
        v->p.micro_batch = 1, v->p.global_batch = m * g->dp; /* m micro-batches */
        v->replicas = g->dp > 1;
        double *bound = b, *send = b + g->dp + 1;
        b += 2 * (size_t)g->dp + 1;
        bound[0] = 0;
        for (int32_t i = 0; i < g->dp; i++)
            bound[i + 1] = g->shares ? bound[i] + g->shares[i] : (double)(i + 1) / g->dp;
        bound[g->dp] = 1;
        v->bound = bound, v->send = send;
        /* replicas, the slowest first; equal samples are priced once */
        hpgo_stage_cost_t one, big;
        double last = -1, most = -1, f = 0, bw = 0, ww = 0, slow = 1, hw = 0, mf = 0;
        int have_one = 0;
        for (int32_t i = 0; i < g->dp; i++) {
            double samples = g->shares ? (double)M * g->shares[i] : (double)M / g->dp;
            if (samples != last || !have_one) {
                hpgo_err_t inner;
                int rc = hpgo_work_stage_cost_range(w, part, &v->p, split[k], split[k + 1],
                                                    samples, &one, &inner);
                if (rc != HPGO_OK)
                    return hpgo_err_set(err, rc, 0, "stage %d, replica %d: %s", (int)k, (int)i,
                                        inner.msg);
                last = samples, have_one = 1;
            }
            double sp = min_speed(c, rep_first(v, i), rep_first(v, i) + g->tp);
            if (sp < slow)
                slow = sp;
            if (one.f / sp > f)
                f = one.f / sp;
            if (one.b / sp > bw)
                bw = one.b / sp;
            if (one.w / sp > ww)
                ww = one.w / sp;
            send[i] = one.send_bytes;
            hw += one.hw_flops, mf += one.model_flops;
            if (samples > most)
                most = samples, big = one;
        }
        /* the stage as its device: the slowest replica's passes, the
         * largest replica's memory, the mean replica's FLOPs (r->hw_flops
         * multiplies by dp x tp) */
        big.f = f, big.b = bw, big.w = ww;
        big.hw_flops = hw / g->dp, big.model_flops = mf / g->dp;
        sc[k] = big;
        v->speed = slow;
    }
    qsort(used, (size_t)u_n, sizeof *used, cmp_i64);
    for (int64_t x = 1; x < u_n; x++)
        if (used[x] == used[x - 1])
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "GPU %lld is in two stage groups", (long long)used[x]);
    e->xfer = b;
    for (int32_t k = 0; k + 1 < K; k++)
        e->xfer[k] = reshard_time(c, &e->views[k], &e->views[k + 1]);
    return HPGO_OK;
}

/* torch.distributed.pipelining's multi-stage schedules
 * (PipelineScheduleMulti._step_microbatches, PyTorch 2.5 / 2.6 and the
 * December 2024 nightly; torchtitan's Interleaved1F1B) run a grid of time
 * steps that every rank walks: ScheduleInterleaved1F1B's
 * _calculate_single_rank_operations gives rank r r empty steps, its
 * warm-up forwards, (v p + 2 (p - 1 - r)) - (warm-up + r) empty steps,
 * then a forward and a backward step per 1F1B pair, then an empty step
 * before each cool-down backward.  At each step a rank runs its action,
 * then posts the sends of that action and the receives that match its
 * neighbours' actions of the same step in one batch_isend_irecv and
 * waits for it.  A send completes only when its receiver has posted the
 * receive, so neighbours that exchange at a step leave it together: the
 * step of rank r ends at the latest end of its own action and of the
 * actions of the ranks it exchanges with, plus the transfer.  The engine
 * runs the same op order (Megatron's interleaved order is torch's) and
 * starts each op no earlier than the end of its rank's previous step. */
typedef struct lockstep {
    int32_t P;
    int64_t n;       /* time steps */
    int64_t *slot;   /* per device, per op index: its time step (P x cap) */
    int32_t *op_at;  /* P x n: the op index at the step, or -1 */
    double *C, *T;   /* P x n: end of the step's action, end of the step (NAN: unknown) */
    int64_t *known;  /* per rank: the last step whose end is known */
} lockstep_t;

static void lock_free(lockstep_t *L)
{
    free(L->slot);
    free(L->op_at);
    free(L->C);
    free(L->T);
    free(L->known);
}

/* The time steps of each device's ops; 0 when an op list is not of the
 * interleaved form (warm-up forwards, forward-backward pairs, cool-down
 * backwards), HPGO_E_NOMEM when out of memory. */
static int lock_build(lockstep_t *L, int32_t P, int32_t V, hpgo_op_t **ops, const int64_t *n_ops,
                      int64_t cap)
{
    memset(L, 0, sizeof *L);
    L->P = P;
    if (!(L->slot = malloc((size_t)P * (size_t)cap * sizeof *L->slot)))
        return HPGO_E_NOMEM;
    int64_t n = 0;
    for (int32_t d = 0; d < P; d++) {
        const hpgo_op_t *o = ops[d];
        int64_t *sl = L->slot + (int64_t)d * cap, nf = 0, w = 0;
        for (int64_t i = 0; i < n_ops[d]; i++)
            nf += o[i].kind == HPGO_OP_F;
        while (w < n_ops[d] && o[w].kind == HPGO_OP_F)
            w++;
        if (w < nf && w > 0) /* the last leading forward opens the first pair */
            w--;
        int64_t fb = nf - w, post = (int64_t)V * P + 2 * (int64_t)(P - 1 - d) - (w + d);
        if (post < 0)
            post = 0;
        if (n_ops[d] != nf + nf)
            return 0;
        int64_t base = d + w + post;
        for (int64_t i = 0; i < n_ops[d]; i++) {
            int64_t at;
            if (i < w)
                at = d + i;
            else if (i < w + 2 * fb) {
                if (o[i].kind != ((i - w) % 2 ? HPGO_OP_BW : HPGO_OP_F))
                    return 0;
                at = base + (i - w);
            } else {
                if (o[i].kind != HPGO_OP_BW)
                    return 0;
                at = base + 2 * fb + 2 * (i - w - 2 * fb) + 1;
            }
            sl[i] = at;
            if (at + 1 > n)
                n = at + 1;
        }
    }
    L->n = n;
    size_t pn = (size_t)P * (size_t)n;
    L->op_at = malloc(pn * sizeof *L->op_at);
    L->C = malloc(pn * sizeof *L->C);
    L->T = malloc(pn * sizeof *L->T);
    L->known = malloc((size_t)P * sizeof *L->known);
    if (!L->op_at || !L->C || !L->T || !L->known)
        return HPGO_E_NOMEM;
    for (size_t x = 0; x < pn; x++)
        L->op_at[x] = -1, L->C[x] = L->T[x] = NAN;
    for (int32_t d = 0; d < P; d++) {
        L->known[d] = -1;
        for (int64_t i = 0; i < n_ops[d]; i++)
            L->op_at[(int64_t)d * n + L->slot[(int64_t)d * cap + i]] = (int32_t)i;
    }
    return 1;
}

/* End of rank r's action at step t (NAN while unknown). */
static double lock_c(const lockstep_t *L, int32_t r, int64_t t)
{
    int64_t x = (int64_t)r * L->n + t;
    if (L->op_at[x] >= 0)
        return L->C[x];
    return t == 0 ? 0 : L->known[r] >= t - 1 ? L->T[x - 1] : NAN;
}

/* The rank the action of rank r at step t sends to (-1: none), and the
 * seconds of that transfer. */
static int32_t lock_dest(const eng_t *e, hpgo_op_t **ops, const lockstep_t *L, int32_t r,
                         int64_t t, double *secs)
{
    int32_t i = L->op_at[(int64_t)r * L->n + t];
    *secs = 0;
    if (i < 0)
        return -1;
    hpgo_op_t op = ops[r][i];
    int32_t k = hpgo_sched_stage(e->schedule, e->P, e->V, r, op.chunk), to;
    double bytes;
    if (op.kind == HPGO_OP_F) {
        if (k + 1 >= e->K)
            return -1;
        to = dev_of(e, k + 1), bytes = e->sc[k].send_bytes;
    } else {
        if (k == 0)
            return -1;
        to = dev_of(e, k - 1), bytes = e->sc[k - 1].send_bytes;
    }
    if (to == r)
        return -1;
    *secs = hpgo_cost_p2p(e->c, hpgo_cost_level_between(e->c, rank_of(e, r), rank_of(e, to)),
                          bytes);
    return to;
}

/* Resolve the ends of every step whose actions and partners are known. */
static void lock_advance(const eng_t *e, hpgo_op_t **ops, lockstep_t *L)
{
    int32_t P = L->P;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int32_t r = 0; r < P; r++) {
            while (L->known[r] + 1 < L->n) {
                int64_t t = L->known[r] + 1;
                double c = lock_c(L, r, t);
                if (isnan(c))
                    break;
                double end = c, xfer = 0, xs;
                int ok = 1;
                int32_t to = lock_dest(e, ops, L, r, t, &xs);
                if (to >= 0) {
                    double cq = lock_c(L, to, t);
                    ok = !isnan(cq);
                    end = cq > end ? cq : end;
                    xfer = xs;
                }
                int32_t nb[2] = {(r + P - 1) % P, (r + 1) % P};
                for (int j = 0; j < 2 && ok; j++) {
                    int32_t q = nb[j];
                    if (q == r || (j == 1 && q == nb[0]))
                        continue;
                    if (lock_dest(e, ops, L, q, t, &xs) != r)
                        continue;
                    double cq = lock_c(L, q, t);
                    ok = !isnan(cq);
                    end = cq > end ? cq : end;
                    xfer = xs > xfer ? xs : xfer;
                }
                if (!ok)
                    break;
                L->T[(int64_t)r * L->n + t] = end + xfer;
                L->known[r] = t;
                progress = 1;
            }
        }
    }
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
    int64_t *n_ops = NULL, *wd_all = NULL, *fd_all = NULL;
    double *fs_all = NULL;
    double *fb = NULL;
    int32_t *order = NULL;
    double *gbuf = NULL;
    lockstep_t L;
    memset(&L, 0, sizeof L);
    if (!r)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for a step result");
    r->stages = calloc((size_t)K, sizeof *r->stages);
    r->devices = calloc((size_t)P, sizeof *r->devices);
    if (!r->stages || !r->devices) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for a step result");
        goto fail;
    }
    e.c = c, e.p = p, e.schedule = p->schedule, e.P = P, e.V = V, e.K = K, e.m = m;
    e.err = err;
    e.uneven = p->n_groups > 0;
    e.cancel = opts ? opts->cancel : NULL;
    if (!(e.views = calloc((size_t)P, sizeof *e.views))) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for a step result");
        goto fail;
    }
    if (e.uneven) {
        if ((rc = hpgo_work_check(w, err)) != HPGO_OK ||
            (rc = hpgo_cluster_check(c, err)) != HPGO_OK ||
            (rc = uneven_views(&e, w, r->stages, &gbuf, err)) != HPGO_OK)
            goto fail;
    } else {
        if ((rc = hpgo_work_stage_costs(w, c, p, r->stages, err)) != HPGO_OK ||
            (rc = even_views(&e, err)) != HPGO_OK)
            goto fail;
        for (int32_t k = 0; k < K; k++) { /* a stage runs at its slowest GPU's speed */
            double sp = e.views[dev_of(&e, k)].speed;
            if (sp != 1) {
                hpgo_stage_cost_t *o = &r->stages[k];
                o->f /= sp, o->b /= sp, o->w /= sp, o->recompute /= sp;
            }
        }
    }
    const hpgo_stage_cost_t *sc = r->stages;
    e.sc = sc;
    size_t km = (size_t)K * (size_t)m;
    e.fend = malloc(km * sizeof(double));
    e.bend = malloc(km * sizeof(double));
    e.act_arr = malloc(km * sizeof(double));
    e.grad_arr = malloc(km * sizeof(double));
    ds = calloc((size_t)P, sizeof *ds);
    ops = calloc((size_t)P, sizeof *ops);
    n_ops = calloc((size_t)P, sizeof *n_ops);
    wd_all = calloc((size_t)K, sizeof *wd_all);
    fd_all = calloc((size_t)K, sizeof *fd_all);
    fs_all = calloc(2 * (size_t)K, sizeof *fs_all);
    fb = malloc(3 * (size_t)K * sizeof *fb);
    order = malloc((size_t)V * sizeof *order);
    if (!e.fend || !e.bend || !e.act_arr || !e.grad_arr || !ds || !ops || !n_ops || !wd_all ||
        !fd_all || !fs_all || !fb || !order) {
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
        ds[i].fdone = fd_all + (int64_t)i * V;
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
    hpgo_work_state_bytes(w->precision, p->fp8_params, p->optimizer_impl, &wbytes, &gbytes,
                          &obytes);

    hpgo_cancel_t *cancel = opts ? opts->cancel : NULL;
    /* gradients to synchronise: dense ones over dp x cp, expert ones over
     * the expert data-parallel group (which can exceed 1 with dp x cp = 1) */
    /* per_mb_scatter on a device's view */
#define PER_MB_RS(v) per_mb_scatter(p, (v)->replicas, P, m)
    /* activations offloaded to the host go down after each forward and come
     * back before the backward on the GPU's host link, beside the compute
     * (Megatron's fine-grained activation offloading, spec 6) */
    double host_bw = c->sys.host_bandwidth;
    int host_ok = 1; /* every stage's GPU type has the host figures */
    for (int32_t d = 0; d < P; d++) {
        const hpgo_system_t *y = &e.views[d].c->sys;
        if (!(y->host_bandwidth > 0 && y->host_mem_bandwidth > 0 && y->host_memory > 0))
            host_ok = 0;
    }
    if ((p->offload_activations > 0 || p->offload_optimizer) && !host_ok) {
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
    /* torch.distributed.pipelining with FSDP2 accumulating over the
     * micro-batches (hpgo_step_fsdp_accumulates; stage.py's
     * backward_maybe_with_nosync, read at PyTorch 2.5 / 2.6 and in the
     * December 2024 nightly torchtitan's benchmarks ran) */
    int tpipe = hpgo_step_torch_pipeline(p);
    int accum = tpipe && hpgo_step_fsdp_accumulates(p, m);
    /* FSDP2 (a PyTorch kernel set) gathers also on a shard group of one:
     * no wire, its copies (under torch's pipelining its accumulation and
     * last reduce too, below) */
    int fsdp2 = p->kernels != HPGO_KS_TE;
    /* ... and copies each micro-batch's gradients into its reduce buffer
     * wherever it scatters them per micro-batch (a group of one too) */
    int fsdp2_rs_copy = fsdp2 && per_mb_scatter(p, 1, P, m);
    int lock = 0;
    if (tpipe && p->schedule == HPGO_PS_INTERLEAVED && !e.uneven && P > 1) {
        if ((lock = lock_build(&L, P, V, ops, n_ops, cap)) == HPGO_E_NOMEM) {
            rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for the pipeline's time steps");
            goto fail;
        }
    }
    while (total > 0) {
        int64_t ran = 0;
        if (hpgo_cancelled(cancel)) {
            rc = hpgo_err_set(err, HPGO_E_CANCELLED, 0, "the simulation was cancelled");
            goto fail;
        }
        for (int32_t d = 0; d < P; d++) {
            devstate_t *s = &ds[d];
            const devview_t *v = &e.views[d];
            int per_mb_rs = PER_MB_RS(v);
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
                int64_t slot = lock ? L.slot[(int64_t)d * cap + s->idx] : 0;
                if (lock && slot > 0) {
                    if (L.known[d] < slot - 1)
                        lock_advance(&e, ops, &L);
                    if (L.known[d] < slot - 1)
                        break;
                    double ts = L.T[(int64_t)d * L.n + slot - 1];
                    ready = ts > ready ? ts : ready;
                }
                const hpgo_stage_cost_t *st = &sc[k];
                double dur = op.kind == HPGO_OP_F   ? st->f
                             : op.kind == HPGO_OP_B ? st->b
                             : op.kind == HPGO_OP_W ? st->w
                                                    : st->b + st->w;
                /* ZeRO-3 gathers the weights before the forward, and again before
                 * the backward when they were resharded after the forward */
                int gather = p->zero >= 3 && (v->replicas || fsdp2) &&
                             (op.kind == HPGO_OP_F ||
                              (op.kind != HPGO_OP_W && p->reshard_after_forward));
                /* without resharding after forward, torch's pipelining also
                 * keeps the weights gathered after every backward but the
                 * stage's last (set_reshard_after_backward(False)): the
                 * chunk's first forward of the step gathers them, the
                 * others find them gathered (torchtitan's apply_fsdp:
                 * "do not reshard after forward to avoid per-microbatch
                 * all-gathers") */
                if (gather && accum && !p->reshard_after_forward && s->fdone[op.chunk] > 0)
                    gather = 0;
                if (gather) {
                    double f8 = p->fp8_all_gather ? st->fp8_linear_params / 2 : 0;
                    dur = gathered_pass(zero3_gather(e.uneven, v, st), st, dur);
                    /* FSDP2 casts and copies the shards into the all-gather buffer
                     * on its copy-in stream, beside the compute (foreach_all_gather
                     * in _fsdp_collectives.py: all_gather_copy_in_stream), and
                     * copies the gathered buffer out into the parameters on the
                     * compute stream (foreach_all_gather_copy_out,
                     * split_with_sizes_copy): 2 + 2 bytes per gathered parameter */
                    double cbytes = 4 * (st->params - f8); /* fp8 weights: 1 + 1 */
                    if (fsdp2) {
                        /* FSDP2's copy-in reads the fp32 shard and writes it in
                         * bf16 (6 bytes per shard parameter); on its own stream,
                         * but its elementwise kernels take SMs from the compute
                         * beside them: on one H100 the copies of FSDP2 on a group
                         * of one cost their full time (profiles/h100-sxm5-
                         * torchtitan-steps.json, titan-fsdp against titan) */
                        double shards = (double)hpgo_parplan_shard(&v->p);
                        /* under the float8 all-gather the Float8Linear shards are
                         * cast to fp8 instead (fsdp_pre_all_gather: 4 read, 1
                         * written) */
                        cbytes += (6 * st->params - 2 * f8) / (shards > 1 ? shards : 1);
                    }
                    dur += hpgo_gpu_op_time(&v->c->gpu, HPGO_DT_BF16, HPGO_OP_VECTOR, 0,
                                            cbytes) / v->speed;
                }
                /* a micro-batch's sharded gradients, reduce-scattered layer by
                 * layer during its weight-gradient pass (the events below) */
                int rs_each = per_mb_rs && p->overlap_grad_reduce &&
                              (op.kind == HPGO_OP_W || op.kind == HPGO_OP_BW);
                int32_t nb_rs = st->n_layers > 0 ? st->n_layers : 1;
                double t_rs = 0;
                if (rs_each) {
                    /* all but the last layer's run beside the rest of the pass */
                    t_rs = grad_coll(e.uneven, v, HPGO_COLL_REDUCE_SCATTER, st->params / nb_rs,
                                     st->expert_params / nb_rs, gbytes);
                    double hid = (nb_rs - 1) * t_rs;
                    dur += dp_contention(hid < dur ? hid : dur);
                }
                if (fsdp2_rs_copy &&
                    (op.kind == HPGO_OP_W || op.kind == HPGO_OP_BW)) {
                    /* FSDP2's reduce-scatter copy-in (foreach_reduce: _chunk_cat of
                     * the bf16 gradients into the fp32 reduce_dtype buffer, 2 bytes
                     * read and 4 written per parameter, each micro-batch), on the
                     * reduce-scatter stream but taking SMs as the copy-in above */
                    dur += hpgo_gpu_op_time(&v->c->gpu, HPGO_DT_BF16, HPGO_OP_VECTOR, 0,
                                            6 * st->params) / v->speed;
                }
                if (accum && (op.kind == HPGO_OP_W || op.kind == HPGO_OP_BW))
                    dur += fsdp2_accum_time(v, st->params, s->wdone[op.chunk] == 0);
                if (p->offload_activations > 0 && op.kind != HPGO_OP_W) {
                    double mv = p->offload_activations * st->act /
                                (e.uneven ? v->c->sys.host_bandwidth : host_bw);
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
                if (lock)
                    L.C[(int64_t)d * L.n + slot] = end;
                s->busy += dur;
                static const int kinds[4] = {HPGO_EV_FORWARD, HPGO_EV_BACKWARD_INPUT,
                                             HPGO_EV_BACKWARD_WEIGHT, HPGO_EV_BACKWARD};
                if ((rc = add_event(&e, start, dur, d, kinds[op.kind], 0, k, op.mb, -1)) != HPGO_OK)
                    goto fail;
                if (op.kind == HPGO_OP_F) {
                    e.fend[x] = end;
                    s->fdone[op.chunk]++;
                    s->alive += st->act;
                    /* torch's pipelining appends every stage's output to
                     * output_chunks, cleared when the next step starts
                     * (PipelineStage.forward_one_chunk, clear_runtime_states);
                     * the last stage's, the logits, are in its transient */
                    if (tpipe && k + 1 < K)
                        s->alive += st->send_bytes;
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
                    /* the stage input's gradient stays in the .grad of its
                     * receive buffer (stage_backward: autograd.backward, then
                     * val.grad) until the next step clears it; it is written
                     * as the pass ends, when the layers' stored tensors are
                     * freed */
                    double in_grad = tpipe && k > 0 && op.kind != HPGO_OP_W
                                         ? sc[k - 1].send_bytes : 0;
                    if (op.kind != HPGO_OP_B) {
                        s->alive -= op.kind == HPGO_OP_W ? st->act_w : st->act;
                        s->count--;
                        if (++s->wdone[op.chunk] == m) {
                            s->final_start[op.chunk] = start;
                            s->final_dur[op.chunk] = dur;
                        }
                        if (rs_each) {
                            /* sharded gradients: each micro-batch's are reduce-scattered
                             * as soon as they exist, layer by layer as the pass
                             * completes them (FSDP2's post-backward hook of each
                             * fully_shard group -- torchtitan's one per block --
                             * DeepSpeed's reduce buckets), on the sync stream: what
                             * the last layers' scatters leave after the pass is exposed */
                            double s0 = -1, fr = s->dp_free;
                            for (int32_t bi = 0; bi < nb_rs; bi++) {
                                double done = start + dur * (bi + 1) / nb_rs;
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
                    if (in_grad > 0) {
                        s->alive += in_grad;
                        if (s->alive > s->peak)
                            s->peak = s->alive;
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

    if (lock) { /* each rank leaves its last step when its exchanges end */
        lock_advance(&e, ops, &L);
        for (int32_t d = 0; d < P; d++)
            if (L.known[d] == L.n - 1 && L.T[(int64_t)d * L.n + L.n - 1] > ds[d].t)
                ds[d].t = L.T[(int64_t)d * L.n + L.n - 1];
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
        const devview_t *v = &e.views[d];
        int per_mb_rs = PER_MB_RS(v);
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
                    t_all += (double)m * grad_coll(e.uneven, v, HPGO_COLL_REDUCE_SCATTER, sc[k].params,
                                                   sc[k].expert_params, gbytes);
                }
                if ((rc = add_event(&e, s->t, t_all, d, HPGO_EV_REDUCE_SCATTER, 3, -1, -1, -1)) !=
                    HPGO_OK)
                    goto fail;
                s->dp_free = s->t + t_all;
            }
            if (s->dp_free > sync)
                sync = s->dp_free;
        } else if (v->replicas || accum) {
            /* (a shard group of one under torch's pipelining: foreach_reduce's
             * copies after the last backward, no wire) */
            int op_sync = sync_collective(p);
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
            double free_at = 0, hid_dp = 0;
            for (int32_t oi = 0; oi < V; oi++) {
                int32_t ch = order[oi];
                int32_t k = hpgo_sched_stage(p->schedule, P, V, d, ch);
                const hpgo_stage_cost_t *st = &sc[k];
                int32_t nb = st->n_layers > 0 ? st->n_layers : 1;
                double tb = grad_coll(e.uneven, v, op_sync, st->params / nb, st->expert_params / nb,
                                      gbytes);
                /* torch's pipelining calls each FSDP group's post_backward
                 * after the stage's whole last backward (stage.py,
                 * run_post_backward): the reduce-scatters start when that
                 * backward ends, each after foreach_reduce's copy of the
                 * fp32 accumulated gradients into its input (_chunk_cat, 4
                 * bytes read and 4 written a parameter) on the
                 * reduce-scatter stream */
                int after_last = accum;
                if (after_last)
                    tb += hpgo_gpu_op_time(&v->c->gpu, HPGO_DT_BF16, HPGO_OP_VECTOR, 0,
                                           8 * st->params / nb) / v->speed;
                if (layer1 == 0)
                    layer1 = st->params / nb;
                if (overlap && !after_last) { /* all but the last layer's beside the pass */
                    double hid = (nb - 1) * tb;
                    hid_dp += hid < s->final_dur[ch] ? hid : s->final_dur[ch];
                }
                for (int32_t bi = 0; bi < nb; bi++) {
                    double ready = after_last ? s->final_start[ch] + s->final_dur[ch]
                                   : overlap ? s->final_start[ch] + s->final_dur[ch] * (bi + 1) / nb
                                             : s->t;
                    double st0 = free_at > ready ? free_at : ready;
                    free_at = st0 + tb;
                    if ((rc = add_event(&e, st0, tb, d,
                                        op_sync == HPGO_COLL_REDUCE_SCATTER
                                            ? HPGO_EV_REDUCE_SCATTER
                                            : HPGO_EV_ALLREDUCE,
                                        3, k, -1, -1)) != HPGO_OK)
                        goto fail;
                }
            }
            /* the last backward runs slower beside them */
            double dc = dp_contention(hid_dp);
            s->t += dc;
            s->busy += dc;
            if (s->t > sync)
                sync = s->t;
            if (free_at > sync)
                sync = free_at;
        }
        if (tied_sync && (d == dev_of(&e, 0) || d == dev_of(&e, K - 1))) {
            const hpgo_stage_cost_t *st = &sc[d == dev_of(&e, 0) ? 0 : K - 1];
            /* all-reduce of two: each side sends its half and receives the other */
            double t_emb = p2p_gpus(c, e.views[dev_of(&e, 0)].first,
                                    e.views[dev_of(&e, K - 1)].first, st->emb_params * gbytes);
            if ((rc = add_event(&e, sync, t_emb, d, HPGO_EV_ALLREDUCE, 3, -1, -1, -1)) != HPGO_OK)
                goto fail;
            sync += t_emb;
        }
        double shard = hpgo_step_shard_params(&v->p, params, load.expert_params);
        double t_opt = hpgo_step_optimizer_seconds(v->c, &v->p, shard);
        for (int32_t q = 0; v->mixed && q < v->n_mix; q++) { /* each type steps its shard */
            double tq = hpgo_step_optimizer_seconds(hpgo_cluster_part(c, v->mix_part[q]), &v->p,
                                                    shard);
            if (tq > t_opt)
                t_opt = tq;
        }
        if (p->fp8_all_gather)
            t_opt += fp8_precompute(&e, v, sc, d);
        if (!p->offload_optimizer)
            t_opt /= v->speed; /* the step's kernels run at the GPU's speed */
        double t_ag = 0;
        if (p->zero >= 1 && p->zero <= 2 && v->replicas) {
            double ex1 = layer1 > 0 && params > 0 ? layer1 * load.expert_params / params : 0;
            t_ag = grad_coll(e.uneven, v, HPGO_COLL_ALLGATHER, params, load.expert_params, 2);
            if (overlap) {
                /* the first layer's gather is exposed and the rest runs beside
                 * the next step's first forward (Megatron's
                 * --overlap-param-gather issues each bucket's gather from a
                 * forward pre-hook), which it slows for at most its length */
                double one = grad_coll(e.uneven, v, HPGO_COLL_ALLGATHER, layer1, ex1, 2);
                double fwd = sc[hpgo_sched_stage(p->schedule, P, V, d, 0)].f;
                t_ag = one + dp_contention(t_ag - one < fwd ? t_ag - one : fwd);
            }
        }
        if ((rc = add_event(&e, sync, t_opt + t_ag, d, HPGO_EV_OPTIMIZER, 0, -1, -1, -1)) != HPGO_OK)
            goto fail;
        o->busy = s->busy;
        o->compute_end = s->t;
        o->sync_end = sync;
        o->optimizer = t_opt + t_ag;
        o->peak_in_flight = (int32_t)s->peak_count;
        o->params = params;
        o->part = e.uneven ? p->groups[d].part : 0;
        o->speed = v->speed;
        double accum_p = hpgo_step_accum_params(p, sc, d, m);
        if (e.uneven)
            hpgo_memory_breakdown3(v->c, &v->p, w->precision, params, load.expert_params,
                                   maxlayer, s->peak + transient, load.max_act + transient,
                                   overhead + load.state_bytes, accum_p, &o->mem);
        else
            hpgo_step_peak_memory(c, p, w->precision, sc, d, m, &load, s->peak,
                                  overhead + load.state_bytes, &o->mem);
        if (v->mixed) {
            /* memory per GPU type: each part's largest replica, its
             * activations scaled from the stage's; the least relative
             * margin is shown (every type must fit) */
            o->part = v->mix_part[0];
            int all_fit = 1;
            double worst = INFINITY;
            for (int32_t q = 0; q < v->n_mix; q++) {
                int32_t pq = v->mix_part[q];
                hpgo_stage_cost_t save = r->stages[d];
                r->stages[d] = v->mix_cost[pq];
                hpgo_device_load_t lq;
                hpgo_step_device_load(p, r->stages, d, &lq);
                r->stages[d] = save;
                double scale = save.act > 0 ? v->mix_cost[pq].act / save.act : 1;
                hpgo_mem_t mq;
                hpgo_memory_breakdown3(hpgo_cluster_part(c, pq), &v->p, w->precision, lq.params,
                                       lq.expert_params, lq.max_layer_params,
                                       s->peak * scale + lq.transient, lq.max_act + lq.transient,
                                       overhead + lq.state_bytes,
                                       hpgo_step_accum_params(p, r->stages, d, m), &mq);
                all_fit &= mq.fits;
                double rel = mq.capacity > 0 ? mq.margin / mq.capacity : mq.margin;
                if (rel < worst)
                    worst = rel, o->mem = mq, o->part = pq;
            }
            o->mem.fits = all_fit;
        }
        if (!o->mem.fits)
            r->fits = 0;
        double end = sync + t_opt + t_ag;
        if (end > iter)
            iter = end;
        if (s->t > compute)
            compute = s->t;
    }
    /* the step ends when the slowest of its GPUs does (spec 5.3) */
    int64_t n_gpus = 0;
    double hw = 0, peak = 0;
    int dt = w->precision == HPGO_PREC_FP32 ? HPGO_DT_FP32 : HPGO_DT_BF16;
    if (!e.uneven) {
        for (int32_t k = 0; k < K; k++)
            hw += sc[k].hw_flops;
        n_gpus = (int64_t)p->tp * p->cp * P * p->dp;
        hw = hw * (double)m * p->tp * p->cp * p->dp;
        peak = c->gpu.peak[dt] * (double)n_gpus;
    } else {
        /* an uneven plan's stages run on their groups' GPUs, of their parts' types */
        for (int32_t k = 0; k < K; k++) {
            const devview_t *v = &e.views[k];
            double per = (double)v->p.tp * v->p.dp;
            hw += sc[k].hw_flops * per * (double)m;
            n_gpus += (int64_t)per;
            if (v->mixed)
                for (int32_t i = 0; i < v->p.dp; i++)
                    peak += hpgo_cluster_part(c, v->rparts[i])->gpu.peak[dt] * v->p.tp;
            else
                peak += v->c->gpu.peak[dt] * per;
        }
    }
    iter *= hpgo_step_straggler_factor(c, n_gpus);
    for (int32_t d = 0; d < P; d++)
        r->devices[d].bubble = iter > 0 ? 1 - r->devices[d].busy / iter : 0;
    r->iteration_time = iter;
    r->compute_time = compute;
    r->gpus = n_gpus;
    r->microbatches = m;
    r->p = P, r->v = V, r->n_stages = K;
    r->hw_flops = hw;
    r->model_flops = hpgo_work_model_flops(w, p->global_batch);
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
    free(fd_all);
    free(fs_all);
    free(fb);
    free(order);
    free(e.fend);
    free(e.bend);
    free(e.act_arr);
    free(e.grad_arr);
    free(e.views);
    free(e.mixbuf);
    free(gbuf);
    lock_free(&L);
    hpgo_sim_result_free(e.tl);
    hpgo_step_result_free(r);
    return rc;
}
