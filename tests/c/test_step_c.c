/* test_step_c.c - C-level tests of the training-step model: cluster presets
 * and checks (cluster.h), collective costs (cost.h), the work model
 * (work.h), schedules (schedule.h) and the engine (engine.h).
 *
 * Checked: the API contract on bad arguments (error code, *out NULL,
 * message set), engine invariants on random pipelines for every schedule
 * (all ops run, busy time = the work, in-flight bounds of each schedule,
 * the iteration no shorter than any device's work, each timeline stream's
 * events disjoint), identical results from several threads at once, and
 * cached stage costs of a mixture-of-experts model equal to uncached ones,
 * and uneven plans (stage groups on a cluster of two GPU types with slowed
 * GPUs): random ones run or are refused with *out NULL, and an even plan
 * equals its uneven form bit for bit.
 * Built by tests/test_sanitizers.py against the core sources and run under
 * ASan + UBSan, ThreadSanitizer and valgrind.
 *
 * Usage: test_step_c [--quick].  Prints "ok <checks>" and exits 0, or the
 * failures and exits 1. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cost.h"
#include "engine.h"
#include "schedule.h"
#include "work.h"

static int failures = 0;
static long checks = 0;
static int quick = 0;
static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        int ok_ = (cond) ? 1 : 0;                                                              \
        pthread_mutex_lock(&check_mu);                                                         \
        checks++;                                                                              \
        if (!ok_) {                                                                            \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
            failures++;                                                                        \
        }                                                                                      \
        pthread_mutex_unlock(&check_mu);                                                       \
    } while (0)

static int err_ok(const hpgo_err_t *e, int code)
{
    return e->code == code && e->msg[0] != '\0' && memchr(e->msg, 0, sizeof e->msg) != NULL;
}

static uint64_t rng_state = 88172645463325252ull;
static double urand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static hpgo_xformer_t gpt(int64_t h, int64_t heads, int64_t layers)
{
    hpgo_xformer_t x = {h, 4 * h, heads, heads, h / heads, layers, 51200, 2048,
                        HPGO_MLP_GELU, 1, 1, 1, 1, 0, 0, 1};
    return x;
}

static hpgo_parplan_t plan(int32_t tp, int32_t pp, int32_t dp, int32_t v, int64_t mb, int64_t gb,
                           int sched)
{
    hpgo_parplan_t p = {tp, pp, dp, 1, 1, v, mb, gb, sched, HPGO_RC_NONE, 0, 0, 1, 0, NULL};
    return p;
}

/* ---- contract --------------------------------------------------------------- */

static void test_contract(void)
{
    hpgo_cluster_t c;
    hpgo_err_t e;
    CHECK(hpgo_cluster_preset("nope", 1, &c, &e) == HPGO_E_INVALID && err_ok(&e, HPGO_E_INVALID));
    CHECK(hpgo_cluster_preset("dgx-h100", -1, &c, &e) == HPGO_E_INVALID);
    for (int i = 0; hpgo_cluster_preset_name(i); i++) {
        CHECK(hpgo_cluster_preset(hpgo_cluster_preset_name(i), 4, &c, &e) == HPGO_OK);
        CHECK(hpgo_cluster_check(&c, &e) == HPGO_OK);
    }
    CHECK(hpgo_cluster_preset_name(-1) == NULL && hpgo_cluster_preset_name(1000) == NULL);
    CHECK(hpgo_cluster_preset("dgx-a100-80gb", 2, &c, &e) == HPGO_OK);
    hpgo_cluster_t bad = c;
    bad.gpu.hbm_bytes = NAN;
    CHECK(hpgo_cluster_check(&bad, &e) == HPGO_E_INVALID && err_ok(&e, HPGO_E_INVALID));
    bad = c;
    bad.levels[1].efficiency = 0;
    CHECK(hpgo_cluster_check(&bad, &e) == HPGO_E_INVALID);
    bad = c;
    bad.gpu.steps[HPGO_EFF_MATRIX][1].threshold = 1e15;
    CHECK(hpgo_cluster_check(&bad, &e) == HPGO_E_INVALID);
    CHECK(hpgo_cluster_check(NULL, &e) == HPGO_E_INVALID);
    int64_t fan[HPGO_CLUSTER_MAX_LEVELS];
    CHECK(hpgo_group_fanout(&c, 32, 1, fan, &e) == HPGO_E_INVALID);
    CHECK(hpgo_group_fanout(&c, 2, 3, fan, &e) == HPGO_E_INVALID);
    CHECK(hpgo_group_fanout(&c, 16, 1, fan, &e) == HPGO_OK && fan[0] == 8 && fan[1] == 2);
    CHECK(hpgo_group_fanout(&c, 2, 8, fan, &e) == HPGO_OK && fan[0] == 1 && fan[1] == 2);
    CHECK(hpgo_cost_collective(&c, HPGO_COLL_ALLREDUCE, 1, 1, 1e9, HPGO_ALGO_AUTO) == 0);
    double ar8 = hpgo_cost_collective(&c, HPGO_COLL_ALLREDUCE, 8, 1, 1e9, HPGO_ALGO_RING);
    double rs8 = hpgo_cost_collective(&c, HPGO_COLL_REDUCE_SCATTER, 8, 1, 1e9, HPGO_ALGO_RING);
    CHECK(ar8 > 0 && fabs(ar8 - 2 * rs8) < 1e-12);
    /* node-deduplicating dispatch: inside a node it is the all-to-all;
     * across nodes fewer copies cross (touched < k), never more */
    double a2a8 = hpgo_cost_collective(&c, HPGO_COLL_ALLTOALL, 8, 1, 1e9, HPGO_ALGO_AUTO);
    CHECK(hpgo_cost_dispatch_dedup(&c, 8, 1, 1e9, 8, 1.5) == a2a8);
    double a2a16 = hpgo_cost_collective(&c, HPGO_COLL_ALLTOALL, 16, 1, 1e9, HPGO_ALGO_AUTO);
    double d16 = hpgo_cost_dispatch_dedup(&c, 16, 1, 1e9, 8, 1.99);
    CHECK(d16 > 0 && d16 < a2a16);
    CHECK(hpgo_cost_dispatch_dedup(&c, 16, 1, 1e9, 8, 100) >= d16); /* touched capped */
    CHECK(hpgo_cost_dispatch_dedup(&c, 1, 1, 1e9, 8, 1) == 0);
    CHECK(hpgo_cost_dispatch_dedup(&c, 32, 1, 1e9, 8, 2) == 0); /* no such group */

    hpgo_work_t w;
    memset(&w, 0, sizeof w);
    w.kind = HPGO_WORK_TRANSFORMER;
    w.x = gpt(4096, 32, 8);
    hpgo_parplan_t p = plan(8, 2, 1, 1, 1, 8, HPGO_PS_1F1B);
    hpgo_step_result_t *r = (hpgo_step_result_t *)&r;
    CHECK(hpgo_step_simulate(NULL, &c, &p, NULL, &r, &e) == HPGO_E_INVALID && r == NULL);
    r = (hpgo_step_result_t *)&r;
    CHECK(hpgo_step_simulate(&w, NULL, &p, NULL, &r, &e) == HPGO_E_INVALID && r == NULL);
    CHECK(hpgo_step_simulate(&w, &c, NULL, NULL, &r, &e) == HPGO_E_INVALID);
    CHECK(hpgo_step_simulate(&w, &c, &p, NULL, NULL, &e) == HPGO_E_INVALID);
    static const struct {
        int32_t tp, pp, dp, v;
        int64_t mb, gb;
        int sched;
    } bads[] = {
        {3, 1, 1, 1, 1, 8, HPGO_PS_1F1B},       /* tp does not divide a node */
        {16, 1, 1, 1, 1, 8, HPGO_PS_1F1B},      /* tp larger than a node */
        {8, 4, 1, 1, 1, 8, HPGO_PS_1F1B},       /* 32 GPUs on 16 */
        {1, 16, 1, 1, 1, 8, HPGO_PS_1F1B},      /* more stages than layers */
        {1, 2, 1, 2, 1, 3, HPGO_PS_INTERLEAVED},/* m not a multiple of pp */
        {1, 2, 1, 1, 1, 8, HPGO_PS_INTERLEAVED},/* interleaved needs v >= 2 */
        {1, 2, 1, 3, 1, 8, HPGO_PS_ZBV},        /* zb-v needs v = 2 */
        {1, 2, 1, 2, 1, 8, HPGO_PS_1F1B},       /* v > 1 on 1F1B */
        {1, 1, 3, 1, 1, 8, HPGO_PS_1F1B},       /* gb not a multiple */
        {1, 1, 1, 1, 0, 8, HPGO_PS_1F1B},       /* micro-batch 0 */
        {1, 1, 1, 1, 1, 8, 99},                 /* schedule */
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        hpgo_parplan_t q = plan(bads[i].tp, bads[i].pp, bads[i].dp, bads[i].v, bads[i].mb,
                                bads[i].gb, bads[i].sched);
        r = (hpgo_step_result_t *)&r;
        int rc = hpgo_step_simulate(&w, &c, &q, NULL, &r, &e);
        CHECK(rc == HPGO_E_INVALID && r == NULL && err_ok(&e, HPGO_E_INVALID));
    }
    int32_t split[3] = {0, 5, 5};
    p.n_split = 3;
    p.split = split;
    CHECK(hpgo_step_simulate(&w, &c, &p, NULL, &r, &e) == HPGO_E_INVALID);
    split[2] = 8;
    CHECK(hpgo_step_simulate(&w, &c, &p, NULL, &r, &e) == HPGO_OK && r);
    CHECK(r && r->stages[0].n_layers == 5 && r->stages[1].n_layers == 3);
    hpgo_step_result_free(r);
    hpgo_step_result_free(NULL);
    w.x.kv_heads = 5;
    p.n_split = 0;
    CHECK(hpgo_step_simulate(&w, &c, &p, NULL, &r, &e) == HPGO_E_INVALID);
}

/* ---- engine invariants ------------------------------------------------------- */

typedef struct job {
    uint64_t seed;
    int n;
    double out[64];
} job_t;

static void run_random(uint64_t *s, double *out, int record)
{
    static const int scheds[] = {HPGO_PS_GPIPE, HPGO_PS_1F1B, HPGO_PS_INTERLEAVED, HPGO_PS_ZBH1,
                                 HPGO_PS_ZBV};
    int sched = scheds[(int)(urand(s) * 5)];
    int32_t p = 1 + (int32_t)(urand(s) * (sched == HPGO_PS_ZBV ? 40 : 8));
    int32_t v = sched == HPGO_PS_INTERLEAVED ? 2 + (int32_t)(urand(s) * 2)
                : sched == HPGO_PS_ZBV         ? 2
                                               : 1;
    if (sched == HPGO_PS_INTERLEAVED && p < 2)
        p = 2;
    int64_t m = 1 + (int64_t)(urand(s) * 12);
    if (sched == HPGO_PS_INTERLEAVED)
        m = p * (1 + (int64_t)(urand(s) * 3));
    int32_t K = p * v, L = K * (1 + (int32_t)(urand(s) * 3));
    double *f = malloc(sizeof(double) * 5 * (size_t)L);
    for (int32_t i = 0; i < L; i++) {
        f[i] = 0.1 + urand(s);
        f[L + i] = 0.2 + 2 * urand(s);
        f[2 * L + i] = 1e6 * urand(s);
        f[3 * L + i] = 1e6 * urand(s);
        f[4 * L + i] = 1e8 * urand(s);
    }
    hpgo_work_t w;
    memset(&w, 0, sizeof w);
    w.kind = HPGO_WORK_CHAIN;
    w.precision = HPGO_PREC_FP32;
    hpgo_chain_t ch = {L, 1.0, f, f + L, f + 2 * L, f + 3 * L, f + 4 * L};
    w.chain = ch;
    hpgo_cluster_t c;
    hpgo_err_t e;
    hpgo_cluster_preset("dgx-a100-80gb", 16, &c, &e);
    int32_t dp = 1 + (int32_t)(urand(s) * 3);
    hpgo_parplan_t pl = plan(1, p, dp, v, 1, m * dp, sched);
    pl.zero = (int32_t)(urand(s) * 4);
    pl.overlap_grad_reduce = urand(s) < 0.5;
    hpgo_step_opts_t o = {record, -1};
    hpgo_step_result_t *r = NULL;
    *out = -1;
    int rc = hpgo_step_simulate(&w, &c, &pl, &o, &r, &e);
    CHECK(rc == HPGO_OK);
    if (rc != HPGO_OK) {
        fprintf(stderr, "sched %d p %d v %d m %lld: %s\n", sched, p, v, (long long)m, e.msg);
        free(f);
        return;
    }
    for (int32_t d = 0; d < p; d++) {
        const hpgo_step_device_t *dv = &r->devices[d];
        double work = 0;
        for (int32_t cc = 0; cc < v; cc++) {
            const hpgo_stage_cost_t *st = &r->stages[hpgo_sched_stage(sched, p, v, d, cc)];
            work += (double)m * (st->f + st->b + st->w);
        }
        /* ZeRO-3 passes also wait for their gathers (first layer exposed,
         * FSDP2's copy-in / copy-out), and compute beside a data-parallel
         * collective runs slower (DP_OVERLAP_SLOWDOWN): never shorter than
         * the stage's work */
        if (dp > 1)
            CHECK(dv->busy >= work * (1 - 1e-9));
        else
            CHECK(fabs(dv->busy - work) <= 1e-9 * work);
        CHECK(dv->compute_end >= dv->busy - 1e-9 * work);
        CHECK(r->iteration_time >= dv->compute_end);
        CHECK(dv->bubble >= 0 && dv->bubble < 1);
        if (sched == HPGO_PS_GPIPE)
            CHECK(dv->peak_in_flight == m);
        if (sched == HPGO_PS_1F1B)
            CHECK(dv->peak_in_flight == (p - d < m ? p - d : m));
        if (sched == HPGO_PS_ZBH1)
            CHECK(dv->peak_in_flight <= (p < m ? p : m));
        if (sched == HPGO_PS_ZBV)
            CHECK(dv->peak_in_flight <= 2 * p);
        CHECK(dv->mem.total > 0 && isfinite(dv->mem.total));
    }
    if (record && r->timeline) {
        /* each (device, lane) stream: events in time order, disjoint */
        const hpgo_sim_result_t *t = r->timeline;
        for (int32_t d = 0; d < p; d++)
            for (int lane = 0; lane < 4; lane++) {
                double last = -1;
                for (int64_t i = 0; i < t->n_events; i++) {
                    const hpgo_sim_event_t *ev = &t->events[i];
                    if (ev->device != d || ev->lane != lane)
                        continue;
                    CHECK(ev->start >= last - 1e-9);
                    last = ev->start + ev->duration;
                }
            }
    }
    *out = r->iteration_time;
    hpgo_step_result_free(r);
    free(f);
}

static void *job_run(void *arg)
{
    job_t *j = arg;
    uint64_t s = j->seed;
    for (int i = 0; i < j->n; i++)
        run_random(&s, &j->out[i], 0);
    return NULL;
}

static void test_engine(void)
{
    int n = quick ? 40 : 400;
    for (int i = 0; i < n; i++) {
        double t;
        run_random(&rng_state, &t, i % 4 == 0);
    }
    /* several threads, same seeds: bit-identical iteration times */
    enum { T = 4 };
    job_t jobs[T];
    pthread_t th[T];
    for (int k = 0; k < T; k++) {
        jobs[k].seed = 12345u;
        jobs[k].n = quick ? 8 : 64;
        pthread_create(&th[k], NULL, job_run, &jobs[k]);
    }
    for (int k = 0; k < T; k++)
        pthread_join(th[k], NULL);
    for (int k = 1; k < T; k++)
        CHECK(memcmp(jobs[k].out, jobs[0].out, sizeof(double) * (size_t)jobs[0].n) == 0);
}

/* GPT-3 175B as Korthikanti et al. 2022 ran it: finite, fits, stage 0
 * holds 31 chunk micro-batches (2(p-1) + (v-1)p + 1). */
static void test_gpt3(void)
{
    hpgo_cluster_t c;
    hpgo_err_t e;
    CHECK(hpgo_cluster_preset("dgx-a100-80gb", 8, &c, &e) == HPGO_OK);
    hpgo_work_t w;
    memset(&w, 0, sizeof w);
    w.kind = HPGO_WORK_TRANSFORMER;
    w.precision = HPGO_PREC_FP16;
    w.x = gpt(12288, 96, 96);
    hpgo_parplan_t p = plan(8, 8, 1, 3, 1, 64, HPGO_PS_INTERLEAVED);
    p.recompute = HPGO_RC_SELECTIVE;
    p.sequence_parallel = 1;
    hpgo_step_result_t *r = NULL;
    CHECK(hpgo_step_simulate(&w, &c, &p, NULL, &r, &e) == HPGO_OK);
    if (!r)
        return;
    CHECK(r->devices[0].peak_in_flight == 31);
    CHECK(r->fits);
    CHECK(r->iteration_time > 10 && r->iteration_time < 20);
    CHECK(r->mfu > 0.3 && r->mfu < 0.7 && r->hfu >= r->mfu);
    hpgo_step_result_free(r);
}

/* A mixture-of-experts model (DeepSeek-V3's shape, fewer layers): the
 * cached stage costs equal the uncached ones for a sequence of plans that
 * share, then change, what the cache keys on. */
static void test_moe_cache(void)
{
    hpgo_cluster_t c;
    hpgo_err_t e;
    CHECK(hpgo_cluster_preset("dgx-h100", 8, &c, &e) == HPGO_OK);
    hpgo_work_t w;
    memset(&w, 0, sizeof w);
    w.kind = HPGO_WORK_TRANSFORMER;
    w.precision = HPGO_PREC_FP8;
    hpgo_xformer_t *x = &w.x;
    x->hidden = 7168, x->ffn = 18432, x->heads = 128, x->kv_heads = 128, x->head_dim = 192;
    x->layers = 12, x->vocab = 129280, x->seq = 4096, x->mlp = HPGO_MLP_SWIGLU;
    x->flash = 1, x->causal_flops = 1;
    x->experts = 256, x->topk = 8, x->expert_ffn = 2048, x->shared_experts = 1;
    x->shared_ffn = 2048, x->dense_first = 3, x->router_bias = 1, x->mla = 1;
    x->q_lora = 1536, x->kv_lora = 512, x->qk_nope = 128, x->qk_rope = 64, x->v_head = 128;
    x->mtp = 1;
    hpgo_work_cache_t cache = {NULL, {0}, 0};
    hpgo_stage_cost_t a[8], b[8];
    static const int32_t pps[] = {1, 2, 4, 4, 2};
    static const int32_t eps[] = {8, 8, 8, 16, 16};
    static const int32_t rcs[] = {HPGO_RC_NONE, HPGO_RC_NONE, HPGO_RC_SELECTIVE,
                                  HPGO_RC_SELECTIVE, HPGO_RC_FULL};
    for (int i = 0; i < 5; i++) {
        hpgo_parplan_t p = plan(1, pps[i], 64 / pps[i], 1, 1, 256, HPGO_PS_1F1B);
        p.ep = eps[i];
        p.etp = 1;
        p.recompute = rcs[i];
        memset(a, 0, sizeof a);
        memset(b, 0, sizeof b);
        CHECK(hpgo_work_stage_costs_cached(&w, &c, &p, a, &cache, &e) == HPGO_OK);
        CHECK(hpgo_work_stage_costs(&w, &c, &p, b, &e) == HPGO_OK);
        CHECK(memcmp(a, b, sizeof(hpgo_stage_cost_t) * (size_t)p.pp) == 0);
        CHECK(a[p.pp - 1].ep_f > 0 && a[p.pp - 1].expert_params > 0 && a[0].fp8_state > 0);
    }
    hpgo_work_cache_free(&cache);
    hpgo_work_cache_free(&cache); /* idempotent */
}

/* ---- uneven plans ------------------------------------------------------------ */

/* The even plan p as stage groups (every stage at p's dp and tp, even
 * shares, placed as the even plan's ranks). */
static hpgo_parplan_t uneven_of(const hpgo_parplan_t *p, hpgo_stage_group_t *g)
{
    hpgo_parplan_t u = *p;
    for (int32_t k = 0; k < p->pp; k++) {
        hpgo_stage_group_t x = {0, p->tp, p->dp, -1, NULL, NULL};
        g[k] = x;
    }
    u.tp = u.dp = 1;
    u.micro_batch = p->micro_batch * p->dp;
    u.n_groups = p->pp;
    u.groups = g;
    return u;
}

static void test_uneven(void)
{
    hpgo_cluster_t a, b, mixed;
    hpgo_err_t e;
    CHECK(hpgo_cluster_preset("dgx-h100", 2, &a, &e) == HPGO_OK);
    CHECK(hpgo_cluster_preset("dgx-a100-80gb", 2, &b, &e) == HPGO_OK);
    hpgo_work_t w;
    memset(&w, 0, sizeof w);
    w.kind = HPGO_WORK_TRANSFORMER;
    w.x = gpt(2048, 16, 24);
    /* even = uneven, bit for bit */
    static const int32_t tps[] = {1, 2, 4, 8}, pps[] = {2, 4, 2, 1}, dps[] = {4, 2, 2, 2};
    for (int i = 0; i < 4; i++) {
        hpgo_parplan_t p = plan(tps[i], pps[i], dps[i], 1, 2, 64, HPGO_PS_1F1B);
        p.zero = i % 3;
        hpgo_stage_group_t g[8];
        hpgo_parplan_t u = uneven_of(&p, g);
        hpgo_step_result_t *r1 = NULL, *r2 = NULL;
        CHECK(hpgo_step_simulate(&w, &a, &p, NULL, &r1, &e) == HPGO_OK);
        CHECK(hpgo_step_simulate(&w, &a, &u, NULL, &r2, &e) == HPGO_OK);
        if (r1 && r2) {
            CHECK(r1->iteration_time == r2->iteration_time && r1->hw_flops == r2->hw_flops);
            CHECK(memcmp(r1->stages, r2->stages, sizeof(hpgo_stage_cost_t) * (size_t)p.pp) == 0);
        }
        hpgo_step_result_free(r1);
        hpgo_step_result_free(r2);
    }
    /* random groups on two GPU types joined at 25 GB/s, three GPUs slowed */
    hpgo_cluster_t parts[2] = {a, b};
    mixed = a;
    mixed.n_parts = 2;
    mixed.parts = parts;
    hpgo_level_t join = {2, 25e9, 25e9, 5e-6, 1.0};
    mixed.join = join;
    hpgo_gpu_speed_t slow[3] = {{1, 0.5}, {17, 1 / 1.5}, {30, 0.8}};
    mixed.n_slow = 3;
    mixed.slow = slow;
    uint64_t rs = 4242;
    int n = quick ? 30 : 300, ran = 0;
    for (int i = 0; i < n; i++) {
        int32_t K = 1 + (int32_t)(urand(&rs) * 4);
        hpgo_stage_group_t g[4];
        double shares[4][8];
        int32_t split[5] = {0}, rparts[4][8];
        for (int32_t k = 0; k < K; k++) {
            g[k].part = (int32_t)(urand(&rs) * 2.2); /* now and then part 2: refused */
            g[k].tp = 1 << (int32_t)(urand(&rs) * 3);
            g[k].dp = 1 + (int32_t)(urand(&rs) * 8);
            g[k].first_gpu = -1;
            g[k].gpus = NULL;
            g[k].shares = NULL;
            g[k].parts = NULL;
            if (urand(&rs) < 0.3) { /* replicas spanning both types (now and then part 2) */
                g[k].part = HPGO_PART_MIXED;
                for (int32_t r = 0; r < g[k].dp; r++)
                    rparts[k][r] = (int32_t)(urand(&rs) * 2.05);
                g[k].parts = rparts[k];
            }
            if (urand(&rs) < 0.5) {
                double sum = 0;
                for (int32_t r = 0; r < g[k].dp; r++)
                    sum += shares[k][r] = 1 + (int32_t)(urand(&rs) * 3);
                for (int32_t r = 0; r < g[k].dp; r++)
                    shares[k][r] /= sum;
                g[k].shares = shares[k];
            }
            split[k + 1] = (int32_t)(24 * (k + 1) / K);
        }
        int sched = urand(&rs) < 0.5 ? HPGO_PS_1F1B : HPGO_PS_GPIPE;
        hpgo_parplan_t p = plan(1, K, 1, 1, 24, 96, sched);
        p.n_split = K + 1;
        p.split = split;
        p.n_groups = K;
        p.groups = g;
        p.zero = (int32_t)(urand(&rs) * 3);
        hpgo_step_result_t *r = NULL;
        memset(&e, 0, sizeof e);
        int rc = hpgo_step_simulate(&w, &mixed, &p, NULL, &r, &e);
        if (rc == HPGO_OK) {
            ran++;
            CHECK(r != NULL && isfinite(r->iteration_time) && r->iteration_time > 0);
            if (!r)
                continue;
            for (int32_t k = 0; k < K; k++) {
                CHECK(r->devices[k].part == g[k].part ||
                      (g[k].part == HPGO_PART_MIXED && (r->devices[k].part == 0 ||
                                                        r->devices[k].part == 1)));
                CHECK(r->devices[k].speed > 0 && r->devices[k].speed <= 1);
                CHECK(r->iteration_time >= r->devices[k].busy);
            }
            hpgo_step_result_free(r);
        } else {
            CHECK(r == NULL && err_ok(&e, rc));
        }
    }
    CHECK(ran > 0);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
    test_contract();
    test_gpt3();
    test_moe_cache();
    test_uneven();
    test_engine();
    if (failures) {
        fprintf(stderr, "%d of %ld checks failed\n", failures, checks);
        return 1;
    }
    printf("ok %ld\n", checks);
    return 0;
}
