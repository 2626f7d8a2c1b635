/* test_core_c.c - C-level tests of the planner core and its threads: the
 * model (model.h), topologies (topo.h), the HPGO planner (plan_hpgo.h
 * hpgo_orchestrate), the batch-size sweep (sweep.h), the data-parallel
 * estimates (dataparallel.h), the thread pool (pool.h), both simulators
 * (sim.h, sim_distir.h) and HAP's planner with its memory model (hetero.h).
 *
 * Checked: the API contract on bad arguments (error code, *out NULL,
 * message set, nothing crashes), invariants of the plans, results identical
 * for any thread count, and many threads planning, sweeping, simulating and
 * sharing one pool at once on shared read-only models and topologies.
 * Built by tests/test_sanitizers.py against the core sources (no Python), run
 * under AddressSanitizer + UBSan, ThreadSanitizer and valgrind memcheck.
 *
 * Usage: test_core_c [--quick] [graph.txt ...]   (extra profiles are planned
 * too; --quick shrinks the workloads for valgrind).  Prints "ok <checks>"
 * and exits 0, or prints the failures and exits 1. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataparallel.h"
#include "hetero.h"
#include "model.h"
#include "plan_hpgo.h"
#include "pool.h"
#include "profile.h"
#include "replan.h"
#include "pipeline_sim.h"
#include "sim_distir.h"
#include "sweep.h"
#include "topo.h"

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

/* An error record filled by a failing call: its code, a message, a terminator. */
static int err_ok(const hpgo_err_t *e, int code)
{
    return e->code == code && e->msg[0] != '\0' && memchr(e->msg, 0, sizeof e->msg) != NULL;
}

/* ------------------------------------------------------------ models */

static const char META_FMT[] = "n%d -- %s%d -- forward_compute_time=%.3f, "
                               "backward_compute_time=%.3f, activation_size=%.1f, "
                               "parameter_size=%.1f\n";

/* A profile of `n` layers: a chain, or with `branchy` a chain whose every
 * third node also feeds the node two further on (skip connections). */
static char *make_profile(int n, int branchy, size_t *len)
{
    size_t cap = (size_t)n * 200 + 64, k = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    unsigned x = 12345u + (unsigned)n;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        double f = 1.0 + (double)(x >> 16 & 1023) / 100.0;
        double act = 1e6 * (1 + (x >> 8 & 15));
        double par = 4e6 * (1 + (x >> 4 & 31));
        k += (size_t)snprintf(buf + k, cap - k, META_FMT, i, i == 0 ? "Input" : "Layer_", i,
                              i == 0 ? 0.0 : f, i == 0 ? 0.0 : 2 * f, act, i == 0 ? 0.0 : par);
    }
    for (int i = 0; i + 1 < n; i++) {
        k += (size_t)snprintf(buf + k, cap - k, "\tn%d -- n%d\n", i, i + 1);
        if (branchy && i > 0 && i % 3 == 0 && i + 2 < n)
            k += (size_t)snprintf(buf + k, cap - k, "\tn%d -- n%d\n", i, i + 2);
    }
    *len = k;
    return buf;
}

static hpgo_model_t *model_from_text(const char *text, size_t len, uint32_t pbs, uint32_t gbs)
{
    hpgo_err_t err;
    hpgo_graph_t *g = NULL;
    hpgo_states_t *st = NULL;
    hpgo_model_t *m = NULL;
    int rc = hpgo_graph_parse(text, len, "gen", &g, &err);
    if (rc == HPGO_OK)
        rc = hpgo_states_build(g, &st, &err);
    if (rc == HPGO_OK)
        rc = hpgo_model_new(st, pbs, gbs, &m, &err);
    if (rc != HPGO_OK)
        fprintf(stderr, "model: %s\n", err.msg);
    hpgo_states_free(st);
    hpgo_graph_free(g);
    return m;
}

static hpgo_model_t *gen_model(int n, int branchy, uint32_t pbs, uint32_t gbs)
{
    size_t len = 0;
    char *text = make_profile(n, branchy, &len);
    hpgo_model_t *m = text ? model_from_text(text, len, pbs, gbs) : NULL;
    free(text);
    return m;
}

static hpgo_model_t *file_model(const char *path, uint32_t pbs, uint32_t gbs)
{
    hpgo_err_t err;
    hpgo_graph_t *g = NULL;
    hpgo_states_t *st = NULL;
    hpgo_model_t *m = NULL;
    int rc = hpgo_graph_load(path, &g, &err);
    if (rc == HPGO_OK)
        rc = hpgo_states_build(g, &st, &err);
    if (rc == HPGO_OK)
        rc = hpgo_model_new(st, pbs, gbs, &m, &err);
    if (rc != HPGO_OK)
        fprintf(stderr, "%s: %s\n", path, err.msg);
    hpgo_states_free(st);
    hpgo_graph_free(g);
    return m;
}

static hpgo_topo_t *topo(int32_t n, int32_t per_machine)
{
    int32_t seps[HPGO_MAX_GPUS];
    int32_t k = 0;
    for (int32_t s = per_machine; s < n; s += per_machine)
        seps[k++] = s;
    seps[k++] = n;
    hpgo_topo_t *t = NULL;
    hpgo_err_t err;
    if (hpgo_topo_new(n, seps, k, &t, &err) != HPGO_OK)
        fprintf(stderr, "topo: %s\n", err.msg);
    return t;
}

/* ------------------------------------------------------------ contract */

static void test_contract(void)
{
    hpgo_err_t err;
    int32_t seps[3] = {8, 16, 16};

    /* topologies */
    hpgo_topo_t *t = (hpgo_topo_t *)&err;
    CHECK(hpgo_topo_new(0, seps, 1, &t, &err) == HPGO_E_INVALID && !t &&
          err_ok(&err, HPGO_E_INVALID));
    t = (hpgo_topo_t *)&err;
    CHECK(hpgo_topo_new(16, NULL, 2, &t, &err) == HPGO_E_INVALID && !t);
    CHECK(hpgo_topo_new(16, seps, 0, &t, &err) == HPGO_E_INVALID && !t);
    CHECK(hpgo_topo_new(16, seps, 3, &t, &err) == HPGO_E_INVALID && !t); /* 16 after 16 */
    CHECK(hpgo_topo_new(17, seps, 2, &t, &err) == HPGO_E_INVALID && !t); /* last != n */
    int32_t neg[2] = {-8, 16};
    CHECK(hpgo_topo_new(16, neg, 2, &t, &err) == HPGO_E_INVALID && !t);
    int32_t big = 100000;
    CHECK(hpgo_topo_new(big, &big, 1, &t, &err) == HPGO_E_LIMIT && !t &&
          err_ok(&err, HPGO_E_LIMIT));
    CHECK(hpgo_topo_new(16, seps, 2, &t, NULL) == HPGO_OK && t && t->n == 16 && t->machines == 2);
    hpgo_topo_free(t);
    hpgo_topo_free(NULL);

    /* models */
    hpgo_model_t *m = (hpgo_model_t *)&err;
    CHECK(hpgo_model_new(NULL, 1, 1, &m, &err) == HPGO_E_INVALID && !m);
    hpgo_states_t empty;
    memset(&empty, 0, sizeof empty);
    m = (hpgo_model_t *)&err;
    CHECK(hpgo_model_new(&empty, 1, 1, &m, &err) == HPGO_E_INVALID && !m);
    /* hand-made states: all-zero times, sums too large, a negative entry */
    double zeros[2] = {0, 0}, ones[2] = {1, 2}, huge[2] = {1e99, 3e99}, negv[2] = {1, -1};
    int32_t poff[3] = {0, 0, 1}, pidx[1] = {0};
    char *labs[2] = {"a", "b"};
    hpgo_states_t hs = {2, zeros, ones, ones, ones, poff, pidx, labs, NULL, NULL};
    m = (hpgo_model_t *)&err;
    CHECK(hpgo_model_new(&hs, 1, 1, &m, &err) == HPGO_E_INVALID && !m &&
          err_ok(&err, HPGO_E_INVALID));
    hs.ct = huge;
    CHECK(hpgo_model_new(&hs, 1, 1, &m, &err) == HPGO_OK && m);
    hpgo_model_t *hc = (hpgo_model_t *)&err;
    CHECK(hpgo_model_normalized_copy(m, 100, &hc, &err) == HPGO_E_LIMIT && !hc &&
          err_ok(&err, HPGO_E_LIMIT));
    hpgo_model_free(m);
    m = (hpgo_model_t *)&err;
    CHECK(hpgo_model_new(&hs, 1, 34, &m, &err) == HPGO_E_LIMIT && !m);
    hs.ct = ones;
    hs.oa = negv;
    CHECK(hpgo_model_new(&hs, 1, 1, &m, &err) == HPGO_E_INVALID && !m);
    hpgo_model_t *g = gen_model(6, 0, 4, 16);
    CHECK(g != NULL);
    if (g) {
        CHECK(g->L == 5);
        hpgo_model_t *c = (hpgo_model_t *)&err;
        CHECK(hpgo_model_normalized_copy(g, 0, &c, &err) == HPGO_E_INVALID && !c);
        CHECK(hpgo_model_normalized_copy(g, UINT32_MAX, &c, &err) == HPGO_OK && c);
        if (c) {
            CHECK(c->gbs == UINT32_MAX && isfinite(hpgo_model_total_time(c)));
            CHECK(hpgo_model_total_time(c) > hpgo_model_total_time(g));
        }
        hpgo_model_free(c);
        CHECK(hpgo_model_clone(g, &c, &err) == HPGO_OK && c && c->L == g->L);
        hpgo_model_free(c);
    }
    hpgo_model_free(NULL);

    /* planner results */
    hpgo_orch_free(NULL);
    {
        /* NULL model or topology: an error, not a crash */
        hpgo_orch_t dummy, *o = &dummy; /* must come back NULL */
        CHECK(hpgo_orchestrate(NULL, NULL, NULL, &o, &err) == HPGO_E_INVALID);
        CHECK(o == NULL && err_ok(&err, HPGO_E_INVALID));
        hpgo_candidate_t c;
        CHECK(hpgo_plan_for(NULL, NULL, 2, 0, NULL, &c, &err) == HPGO_E_INVALID);
    }
    hpgo_sweep_free(NULL);
    hpgo_candidate_t zero_cand;
    memset(&zero_cand, 0, sizeof zero_cand);
    hpgo_candidate_clear(&zero_cand);

    /* sweep arguments */
    hpgo_topo_t *t16 = topo(16, 8);
    if (g && t16) {
        const hpgo_topo_t *lay[1] = {t16};
        uint32_t gbs[2] = {8, 0};
        hpgo_sweep_t *s = (hpgo_sweep_t *)&err;
        CHECK(hpgo_sweep_run(g, lay, 0, gbs, 1, NULL, &s, &err) == HPGO_E_INVALID && !s);
        s = (hpgo_sweep_t *)&err;
        CHECK(hpgo_sweep_run(g, lay, 1, gbs, 0, NULL, &s, &err) == HPGO_E_INVALID && !s);
        s = (hpgo_sweep_t *)&err;
        CHECK(hpgo_sweep_run(g, lay, 1, gbs, 2, NULL, &s, &err) == HPGO_E_INVALID && !s &&
              err_ok(&err, HPGO_E_INVALID));
    }
    hpgo_topo_free(t16);
    hpgo_model_free(g);

    /* pool */
    hpgo_pool_t *p = (hpgo_pool_t *)&err;
    CHECK(hpgo_pool_new(-1, &p, &err) == HPGO_E_INVALID && !p && err_ok(&err, HPGO_E_INVALID));
    /* an absurd size is clamped (valgrind runs the quick mode: threads are slow there) */
    CHECK(hpgo_pool_new(quick ? 5 : 100000, &p, &err) == HPGO_OK && p &&
          hpgo_pool_size(p) >= 1 && /* fewer when the system refuses threads */
          hpgo_pool_size(p) <= (quick ? 5 : HPGO_POOL_MAX_THREADS));
    hpgo_pool_run(p, 0, NULL, NULL);  /* no jobs: returns at once */
    hpgo_pool_run(p, -5, NULL, NULL);
    hpgo_pool_free(p);
    hpgo_pool_free(NULL);
    CHECK(hpgo_pool_size(NULL) == 0);
    CHECK(hpgo_default_threads() >= 1 && hpgo_default_threads() <= HPGO_POOL_MAX_THREADS);

    /* pipeline simulator */
    hpgo_sim_result_t *r = (hpgo_sim_result_t *)&err;
    CHECK(hpgo_sim_pipeline_run(NULL, &r, &err) == HPGO_E_INVALID && !r);
    hpgo_sim_stage_t st[2] = {{1e-3, 2e-3, 1e6, 1e8, 1e6, 2, NULL},
                              {1e-3, 2e-3, 0, 1e8, 1e6, 2, NULL}};
    hpgo_sim_pipeline_t base = {2, st, 4, HPGO_SCHED_1F1B, 25e9, 0.0, 25e9, 2.0, 1};
    hpgo_sim_pipeline_t c = base;
    CHECK(hpgo_sim_pipeline_run(&c, &r, &err) == HPGO_OK && r && r->iteration_time > 0);
    hpgo_sim_result_free(r);
    hpgo_sim_result_free(NULL);
    /* PipeDream's period once every stage has settled (issue 11: was 4.8 s) */
    hpgo_sim_stage_t pd[2] = {{2, 2, 1.3e9, 0, 0, 1, NULL}, {0.2, 0.8, 0, 0, 0, 1, NULL}};
    hpgo_sim_pipeline_t pdc = {2, pd, 1, HPGO_SCHED_PIPEDREAM, 1e9, 0.0, 1e9, 2.0, 1};
    CHECK(hpgo_sim_pipeline_run(&pdc, &r, &err) == HPGO_OK && r &&
          fabs(r->iteration_time - 4.0) < 1e-12);
    hpgo_sim_result_free(r);
    /* a stage's own link and all-reduce bandwidths override the pipeline's */
    hpgo_sim_stage_t ov[2] = {{1, 1, 2e9, 3e9, 0, 2, NULL, 1e9, 2e9},
                              {1, 1, 0, 0, 0, 1, NULL, 0, 0}};
    hpgo_sim_pipeline_t ovc = {2, ov, 1, HPGO_SCHED_GPIPE, 1e12, 0.0, 1e12, 2.0, 0};
    CHECK(hpgo_sim_pipeline_run(&ovc, &r, &err) == HPGO_OK && r &&
          fabs(r->iteration_time - (1 + 2 + 1 + 1 + 2 + 1 + 1.5)) < 1e-9);
    hpgo_sim_result_free(r);
    ov[0].link_bandwidth = -1;
    CHECK(hpgo_sim_pipeline_run(&ovc, &r, &err) == HPGO_E_INVALID && !r);
    ov[0].link_bandwidth = 1e9;
    ov[0].allreduce_bandwidth = NAN;
    CHECK(hpgo_sim_pipeline_run(&ovc, &r, &err) == HPGO_E_INVALID && !r);
    struct {
        int field;
        double value;
        int code;
    } bad[] = {
        {0, 0, HPGO_E_INVALID},     {0, 5000, HPGO_E_LIMIT},     {1, 0, HPGO_E_INVALID},
        {1, 1 << 21, HPGO_E_LIMIT}, {2, 9, HPGO_E_INVALID},      {3, 0, HPGO_E_INVALID},
        {3, NAN, HPGO_E_INVALID},   {4, -1, HPGO_E_INVALID},     {5, INFINITY, HPGO_E_INVALID},
        {6, -0.5, HPGO_E_INVALID},  {7, NAN, HPGO_E_INVALID},    {8, -1e-9, HPGO_E_INVALID},
        {9, 0, HPGO_E_INVALID},     {10, 2000, HPGO_E_LIMIT},    {11, -1, HPGO_E_INVALID},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        hpgo_sim_stage_t s2[2] = {st[0], st[1]};
        c = base;
        c.stages = s2;
        double v = bad[k].value;
        switch (bad[k].field) {
        case 0: c.n_stages = (int32_t)v; break;
        case 1: c.microbatches = (int32_t)v; break;
        case 2: c.schedule = (int)v; break;
        case 3: c.link_bandwidth = v; break;
        case 4: c.link_latency = v; break;
        case 5: c.allreduce_bandwidth = v; break;
        case 6: c.optimizer_factor = v; break;
        case 7: s2[1].forward = v; break;
        case 8: s2[0].send_bytes = v; break;
        case 9: s2[1].n_gpus = 0; break;
        case 10: s2[0].n_gpus = (int32_t)v; break;
        default: s2[0].activation_bytes = v; break;
        }
        r = (hpgo_sim_result_t *)&err;
        int rc = hpgo_sim_pipeline_run(&c, &r, &err);
        CHECK(rc == bad[k].code && !r && err_ok(&err, rc));
        if (rc != bad[k].code)
            fprintf(stderr, "  bad pipeline case %zu: rc %d (%s)\n", k, rc, err.msg);
    }
    int32_t dup[2] = {3, 3}, far[2] = {0, HPGO_SIM_MAX_DEVICES};
    hpgo_sim_stage_t s3[1] = {{1, 1, 0, 0, 0, 2, dup}};
    c = base;
    c.n_stages = 1;
    c.stages = s3;
    CHECK(hpgo_sim_pipeline_run(&c, &r, &err) == HPGO_E_INVALID && !r);
    s3[0].gpus = far;
    CHECK(hpgo_sim_pipeline_run(&c, &r, &err) != HPGO_OK && !r && err.msg[0]);

    /* re-planning keeps the current split when the search finds nothing faster:
     * top-1 of equal layers cuts after layers 0 and 2, the last position merges
     * into the tail, so the only candidate is (1, 3), slower than (2, 2) */
    {
        double f4[4] = {1, 1, 1, 1};
        int32_t cur4[2] = {2, 2}, got[2] = {0, 0}, searched[2] = {0, 0};
        double sd4[2] = {1, 1};
        hpgo_replan_input_t in = {4, f4, f4, NULL, NULL, 2, cur4, sd4, HPGO_REPLAN_TOPK,
                                  1, 0, 99, 1e9, 2.0, 0.0, INFINITY, 1.0};
        hpgo_replan_result_t res;
        memset(&res, 0, sizeof res);
        res.counts = got;
        res.search_counts = searched;
        CHECK(hpgo_replan_run(&in, &res, &err) == HPGO_OK);
        CHECK(searched[0] == 1 && searched[1] == 3 && res.search_time > res.current_time);
        CHECK(res.kept_current && got[0] == 2 && got[1] == 2 && !res.do_switch);
        CHECK(res.new_time == res.current_time && res.moved_bytes == 0.0);
    }

    /* DistIR study */
    hpgo_distir_config_t d0;
    memset(&d0, 0, sizeof d0);
    d0.model = HPGO_DISTIR_MLP;
    d0.batch_size = 64;
    d0.width = 32;
    d0.layers = 4;
    d0.dp = d0.tp = d0.pp = d0.microbatches = 1;
    CHECK(hpgo_distir_validate(&d0, &err) == HPGO_OK);
    for (int k = 0; k < 12; k++) {
        hpgo_distir_config_t d = d0;
        switch (k) {
        case 0: d.batch_size = 0; break;
        case 1: d.width = -4; break;
        case 2: d.layers = 0; break;
        case 3: d.dp = 0; break;
        case 4: d.tp = 3; break;
        case 5: d.pp = 3; break; /* 4 layers on 3 stages */
        case 6: d.dp = 2048; break;
        case 7: d.cost_model = 9; break;
        case 8: d.model = 7; break;
        case 9: d.width = (int64_t)1 << 40; break;
        case 10: d.device_flops = NAN; break;
        default: d.microbatches = 1 << 30; d.pp = 2; break;
        }
        r = (hpgo_sim_result_t *)&err;
        int rc = hpgo_distir_simulate(&d, &r, &err);
        CHECK((rc == HPGO_E_INVALID || rc == HPGO_E_LIMIT) && !r && err_ok(&err, rc));
        if (rc == HPGO_OK)
            fprintf(stderr, "  bad distir case %d accepted\n", k);
    }
    CHECK(hpgo_distir_cost_model_from_name("nope") == -1);
    CHECK(hpgo_distir_cost_model_name(99) == NULL);
    CHECK(strcmp(hpgo_sim_event_name(-3), "?") == 0);
}

/* ------------------------------------------------------------ planner */

/* Two orchestrations are identical: same candidates in the same order,
 * same statuses, scores, stages and GPU sets. */
static int orch_equal(const hpgo_orch_t *a, const hpgo_orch_t *b)
{
    if (a->n != b->n || a->best != b->best)
        return 0;
    for (int32_t k = 0; k < a->n; k++) {
        const hpgo_candidate_t *x = &a->cands[k], *y = &b->cands[k];
        if (x->kind != y->kind || x->i != y->i || x->rp != y->rp || x->status != y->status ||
            x->n_stages != y->n_stages || strcmp(x->reason, y->reason) != 0)
            return 0;
        if (memcmp(&x->speedup, &y->speedup, sizeof x->speedup) != 0 ||
            memcmp(&x->block_time, &y->block_time, sizeof x->block_time) != 0)
            return 0;
        for (int32_t s = 0; s < x->n_stages; s++)
            if (x->stages[s].a != y->stages[s].a || x->stages[s].b != y->stages[s].b ||
                x->stages[s].units != y->stages[s].units ||
                memcmp(&x->stages[s].gpus, &y->stages[s].gpus, sizeof(hpgo_gpuset_t)) != 0)
                return 0;
    }
    return 1;
}

/* Invariants of every successful candidate: stages cover 0..L-1 in order,
 * GPU sets are disjoint and inside the topology, the score is finite. */
static void check_orch(const hpgo_model_t *m, const hpgo_topo_t *t, const hpgo_orch_t *o)
{
    CHECK(o->n >= 1 && o->best >= -1 && o->best < o->n);
    for (int32_t k = 0; k < o->n; k++) {
        const hpgo_candidate_t *c = &o->cands[k];
        CHECK(c->status == HPGO_OK || c->status == HPGO_E_NOPLAN);
        if (c->status != HPGO_OK) {
            CHECK(c->reason[0] != '\0' && memchr(c->reason, 0, sizeof c->reason));
            continue;
        }
        CHECK(c->n_stages >= 1 && c->stages != NULL);
        CHECK(!isnan(c->speedup) && c->speedup >= 0);
        hpgo_gpuset_t seen;
        memset(&seen, 0, sizeof seen);
        int32_t expect_a = 0, total = 0;
        for (int32_t s = 0; s < c->n_stages; s++) {
            const hpgo_stage_t *st = &c->stages[s];
            CHECK(st->a == expect_a && st->b >= st->a && st->b <= m->L - 1);
            expect_a = st->b;
            CHECK(hpgo_gpuset_count(&st->gpus) >= 1);
            CHECK(hpgo_gpuset_max(&st->gpus) < t->n);
            for (int w = 0; w < HPGO_GPUSET_WORDS; w++) {
                CHECK((seen.w[w] & st->gpus.w[w]) == 0);
                seen.w[w] |= st->gpus.w[w];
            }
            total += hpgo_gpuset_count(&st->gpus);
        }
        CHECK(c->stages[c->n_stages - 1].b == m->L - 1);
        CHECK(total <= t->n);
    }
    if (o->best >= 0)
        for (int32_t k = 0; k < o->n; k++)
            if (o->cands[k].status == HPGO_OK)
                CHECK(o->cands[k].speedup <= o->cands[o->best].speedup);
}

static hpgo_orch_t *plan(const hpgo_model_t *m, const hpgo_topo_t *t, int threads, int exhaustive)
{
    hpgo_plan_opts_t opts = {.exhaustive = exhaustive, .threads = threads};
    hpgo_orch_t *o = NULL;
    hpgo_err_t err;
    int rc = hpgo_orchestrate(m, t, &opts, &o, &err);
    CHECK(rc == HPGO_OK && o != NULL);
    if (rc != HPGO_OK)
        fprintf(stderr, "orchestrate: %s\n", err.msg);
    return o;
}

static void test_planner_one(const hpgo_model_t *m, const hpgo_topo_t *t, int exhaustive_too)
{
    hpgo_orch_t *a = plan(m, t, 1, 0), *b = plan(m, t, 3, 0);
    if (a && b) {
        check_orch(m, t, a);
        CHECK(orch_equal(a, b));
    }
    if (a && exhaustive_too) {
        hpgo_orch_t *e = plan(m, t, 2, 1);
        if (e) {
            CHECK(e->best == a->best);
            if (e->best >= 0 && a->best >= 0)
                CHECK(e->cands[e->best].speedup == a->cands[a->best].speedup);
        }
        hpgo_orch_free(e);
    }
    /* the data-parallel estimates on the same pair */
    double dp = hpgo_dp_speedup(t, m), p3 = 0;
    hpgo_err_t err;
    CHECK(!isnan(dp) && dp >= 0);
    CHECK(hpgo_dp_p3_speedup(t, m, &p3, &err) == HPGO_OK && !isnan(p3));
    uint32_t ga = 0;
    int rc = hpgo_current_ga_iter_size(t, m, &ga, &err);
    CHECK(rc == HPGO_OK || (rc == HPGO_E_NOPLAN && err_ok(&err, HPGO_E_NOPLAN)));
    if (rc == HPGO_OK) {
        double ov = 0;
        CHECK(hpgo_dp_ga_overlap_speedup(t, m, ga, 0, &ov, &err) == HPGO_OK && !isnan(ov));
    }
    (void)hpgo_optimal_ga_iter_size(t, m);
    hpgo_orch_free(a);
    hpgo_orch_free(b);
}

static void test_planner(char **files, int n_files)
{
    const uint32_t gbs[] = {1, 7, 128, 4096, UINT32_MAX};
    const int32_t gpus[][2] = {{1, 1}, {2, 2}, {8, 4}, {16, 8}, {12, 3}};
    int nm = quick ? 2 : 3;
    for (int mi = 0; mi < nm; mi++) {
        hpgo_model_t *base = mi == 0 ? gen_model(12, 0, 2, 2)
                             : mi == 1 ? gen_model(16, 1, 4, 4)
                                       : gen_model(40, 1, 1, 1);
        CHECK(base != NULL);
        if (!base)
            continue;
        for (size_t gi = 0; gi < sizeof gbs / sizeof gbs[0]; gi++) {
            hpgo_model_t *m = NULL;
            hpgo_err_t err;
            CHECK(hpgo_model_normalized_copy(base, gbs[gi], &m, &err) == HPGO_OK);
            for (size_t ti = 0; m && ti < sizeof gpus / sizeof gpus[0]; ti++) {
                if (quick && ti > 3)
                    break;
                hpgo_topo_t *t = topo(gpus[ti][0], gpus[ti][1]);
                CHECK(t != NULL);
                if (t)
                    test_planner_one(m, t, mi == 0 && gpus[ti][0] <= 8);
                hpgo_topo_free(t);
            }
            hpgo_model_free(m);
        }
        hpgo_model_free(base);
    }
    /* memory settings at their extremes: planning must stay defined */
    hpgo_model_t *m = gen_model(10, 1, 1, 64);
    hpgo_topo_t *t = topo(8, 4);
    if (m && t) {
        m->optimizer_memory_scaling = 0;
        test_planner_one(m, t, 0);
        m->optimizer_memory_scaling = UINT32_MAX;
        m->min_micro_batch_size = UINT32_MAX;
        m->peak_activation_per_batch = 1e300;
        test_planner_one(m, t, 0);
    }
    hpgo_topo_free(t);
    hpgo_model_free(m);
    /* many machines of one GPU, a small model (1024 GPUs: tests/test_robust_limits.py) */
    m = gen_model(5, 0, 1, 1024);
    t = topo(quick ? 16 : 64, 1);
    if (m && t) {
        hpgo_orch_t *o = plan(m, t, 0, 0);
        if (o) {
            check_orch(m, t, o);
            CHECK(o->n == t->n + 2); /* i = 2..N, straight 2, straight N, bipartition */
        }
        hpgo_orch_free(o);
    }
    hpgo_topo_free(t);
    hpgo_model_free(m);
    for (int f = 0; f < n_files; f++) {
        m = file_model(files[f], 1, 64);
        CHECK(m != NULL);
        t = topo(16, 8);
        if (m && t)
            test_planner_one(m, t, 0);
        hpgo_topo_free(t);
        hpgo_model_free(m);
    }
}

/* ------------------------------------------------------------ GA sizes */

/* HPGO's definition of the accumulation size, literally (a linear scan). */
static uint32_t ga_reference(uint32_t gbs, uint32_t n, uint32_t maxbs)
{
    uint32_t bpd = gbs / n;
    if (maxbs >= bpd)
        return bpd;
    uint32_t it = bpd / maxbs;
    if ((uint64_t)it * maxbs < bpd)
        it += 1;
    while (it < bpd / 2 + 1 && bpd % it != 0)
        it += 1;
    return bpd / it;
}

static void test_ga(void)
{
    hpgo_model_t *base = gen_model(6, 0, 1, 1);
    hpgo_topo_t *t1 = topo(1, 1), *t3 = topo(3, 3);
    CHECK(base && t1 && t3);
    if (!base || !t1 || !t3)
        goto done;
    const uint32_t maxbs[] = {1, 2, 3, 7, 16, 97, 1000};
    uint32_t top = quick ? 300 : 2500;
    for (size_t k = 0; k < sizeof maxbs / sizeof maxbs[0]; k++) {
        for (uint32_t gbs = 1; gbs < top; gbs += 1 + gbs / 200) {
            hpgo_model_t *m = NULL;
            hpgo_err_t err;
            if (hpgo_model_normalized_copy(base, gbs, &m, &err) != HPGO_OK) {
                CHECK(0);
                continue;
            }
            m->optimizer_memory_scaling = 0;
            m->peak_activation_per_batch = HPGO_GPU_MEMORY / ((double)maxbs[k] + 0.5);
            CHECK(hpgo_model_max_single_gpu_batch_size(m) == maxbs[k]);
            for (int ti = 0; ti < 2; ti++) {
                const hpgo_topo_t *t = ti ? t3 : t1;
                uint32_t got = 0;
                int rc = hpgo_current_ga_iter_size(t, m, &got, &err);
                if (gbs / (uint32_t)t->n == 0)
                    continue; /* fewer samples than GPUs: nothing to compare */
                CHECK(rc == HPGO_OK && got == ga_reference(gbs, (uint32_t)t->n, maxbs[k]));
            }
            hpgo_model_free(m);
        }
    }
    /* a prime number of samples per GPU: 2^31 - 1 (HPGO scans up to 2^30 steps) */
    hpgo_topo_t *t2 = topo(2, 2);
    hpgo_model_t *m = NULL;
    hpgo_err_t err;
    if (t2 && hpgo_model_normalized_copy(base, UINT32_MAX, &m, &err) == HPGO_OK) {
        m->optimizer_memory_scaling = 0;
        m->peak_activation_per_batch = HPGO_GPU_MEMORY / 1000.5;
        uint32_t got = 0;
        CHECK(hpgo_current_ga_iter_size(t2, m, &got, &err) == HPGO_OK && got == 1);
    }
    hpgo_model_free(m);
    hpgo_topo_free(t2);
done:
    hpgo_topo_free(t1);
    hpgo_topo_free(t3);
    hpgo_model_free(base);
}

/* ------------------------------------------------------------ sweep */

static void test_sweep(void)
{
    hpgo_model_t *base = gen_model(14, 1, 2, 2);
    hpgo_topo_t *t1 = topo(8, 8), *t2 = topo(16, 4), *t3 = topo(6, 2);
    CHECK(base && t1 && t2 && t3);
    if (!base || !t1 || !t2 || !t3)
        goto done;
    const hpgo_topo_t *lay[3] = {t1, t2, t3};
    uint32_t gbs[] = {1, 2, 16, 256, 100000};
    int ng = quick ? 3 : 5;
    hpgo_sweep_t *s1 = NULL, *s3 = NULL;
    hpgo_plan_opts_t o1 = {.threads = 1}, o3 = {.threads = 3};
    hpgo_err_t err;
    CHECK(hpgo_sweep_run(base, lay, 3, gbs, ng, &o1, &s1, &err) == HPGO_OK && s1);
    CHECK(hpgo_sweep_run(base, lay, 3, gbs, ng, &o3, &s3, &err) == HPGO_OK && s3);
    if (s1 && s3) {
        CHECK(s1->n == 3 * ng && s3->n == s1->n);
        for (int32_t k = 0; k < s1->n; k++) {
            const hpgo_sweep_row_t *a = &s1->rows[k], *b = &s3->rows[k];
            CHECK(a->gbs == gbs[k / 3] && a->layout == k % 3);
            CHECK(a->gbs == b->gbs && a->layout == b->layout && a->ga_status == b->ga_status);
            CHECK(memcmp(&a->dp, &b->dp, sizeof a->dp) == 0);
            CHECK(a->orch && b->orch && orch_equal(a->orch, b->orch));
            /* a row equals the single-case call */
            hpgo_model_t *m = NULL;
            if (hpgo_model_normalized_copy(base, a->gbs, &m, &err) == HPGO_OK) {
                hpgo_orch_t *o = plan(m, lay[a->layout], 1, 0);
                CHECK(o && a->orch && orch_equal(o, a->orch));
                CHECK(memcmp(&a->dp, &(double){hpgo_dp_speedup(lay[a->layout], m)},
                             sizeof a->dp) == 0);
                hpgo_orch_free(o);
            }
            hpgo_model_free(m);
        }
    }
    hpgo_sweep_free(s1);
    hpgo_sweep_free(s3);
done:
    hpgo_topo_free(t1);
    hpgo_topo_free(t2);
    hpgo_topo_free(t3);
    hpgo_model_free(base);
}

/* ------------------------------------------------------------ pool */

typedef struct {
    int64_t *slots;
    int64_t mult;
} pool_ctx_t;

static void pool_job(void *ctx, int64_t j)
{
    pool_ctx_t *c = ctx;
    c->slots[j] = j * c->mult + 1;
}

typedef struct {
    hpgo_pool_t *pool;
    int id;
    int rounds;
    int bad;
} pool_caller_t;

static void *pool_caller(void *arg)
{
    pool_caller_t *pc = arg;
    int64_t n = 257 + pc->id * 31;
    int64_t *slots = calloc((size_t)n, sizeof *slots);
    if (!slots) {
        pc->bad++;
        return NULL;
    }
    for (int r = 0; r < pc->rounds; r++) {
        memset(slots, 0, (size_t)n * sizeof *slots);
        pool_ctx_t c = {slots, pc->id + r};
        hpgo_pool_run(pc->pool, n, pool_job, &c);
        for (int64_t j = 0; j < n; j++)
            if (slots[j] != j * c.mult + 1)
                pc->bad++;
    }
    free(slots);
    return NULL;
}

static void test_pool(void)
{
    hpgo_pool_t *p = NULL;
    hpgo_err_t err;
    CHECK(hpgo_pool_new(3, &p, &err) == HPGO_OK && p && hpgo_pool_size(p) == 3);
    if (!p)
        return;
    enum { CALLERS = 8 };
    pthread_t th[CALLERS];
    pool_caller_t pc[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        pc[i] = (pool_caller_t){p, i, quick ? 3 : 20, 0};
        CHECK(pthread_create(&th[i], NULL, pool_caller, &pc[i]) == 0);
    }
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(th[i], NULL);
        CHECK(pc[i].bad == 0);
    }
    hpgo_pool_free(p);
    /* map: more threads than jobs, one job, no job */
    int64_t slots[5] = {0};
    pool_ctx_t c = {slots, 7};
    CHECK(hpgo_pool_map(64, 5, pool_job, &c, &err) == HPGO_OK);
    for (int j = 0; j < 5; j++)
        CHECK(slots[j] == j * 7 + 1);
    CHECK(hpgo_pool_map(0, 1, pool_job, &c, &err) == HPGO_OK);
    CHECK(hpgo_pool_map(4, 0, pool_job, &c, &err) == HPGO_OK);
}

/* ------------------------------------------------------------ concurrency */

typedef struct {
    const hpgo_model_t *m;       /* shared, read only */
    const hpgo_topo_t *t;        /* shared, read only */
    const hpgo_orch_t *ref;      /* reference plan */
    const hpgo_sweep_t *ref_sw;  /* reference sweep */
    hpgo_pool_t *pool;           /* shared pool for the DistIR points */
    const hpgo_distir_point_t *ref_pts;
    int64_t n_pts;
    double ref_pipe;
    int id;
    int bad;
} worker_t;

static const hpgo_sim_stage_t PIPE[3] = {{1e-3, 2e-3, 4e6, 1e8, 1e6, 2, NULL},
                                         {2e-3, 3e-3, 4e6, 2e8, 1e6, 1, NULL},
                                         {1e-3, 1e-3, 0, 1e8, 1e6, 3, NULL}};

static double run_pipe(int schedule)
{
    hpgo_sim_pipeline_t c = {3, PIPE, 16, schedule, 25e9, 1e-6, 10e9, 2.0, 1};
    hpgo_sim_result_t *r = NULL;
    hpgo_err_t err;
    double v = -1;
    if (hpgo_sim_pipeline_run(&c, &r, &err) == HPGO_OK)
        v = r->iteration_time + (double)r->n_events;
    hpgo_sim_result_free(r);
    return v;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    int rounds = quick ? 1 : 4;
    for (int r = 0; r < rounds; r++) {
        switch ((w->id + r) % 4) {
        case 0: { /* plan the shared model on the shared topology, own threads */
            hpgo_plan_opts_t opts = {.threads = 1 + w->id % 3};
            hpgo_orch_t *o = NULL;
            hpgo_err_t err;
            if (hpgo_orchestrate(w->m, w->t, &opts, &o, &err) != HPGO_OK || !orch_equal(o, w->ref))
                w->bad++;
            hpgo_orch_free(o);
            break;
        }
        case 1: { /* sweep the shared model */
            const hpgo_topo_t *lay[1] = {w->t};
            uint32_t gbs[3] = {8, 64, 512};
            hpgo_plan_opts_t opts = {.threads = 2};
            hpgo_sweep_t *s = NULL;
            hpgo_err_t err;
            if (hpgo_sweep_run(w->m, lay, 1, gbs, 3, &opts, &s, &err) != HPGO_OK ||
                s->n != w->ref_sw->n)
                w->bad++;
            else
                for (int32_t k = 0; k < s->n; k++)
                    if (!orch_equal(s->rows[k].orch, w->ref_sw->rows[k].orch))
                        w->bad++;
            hpgo_sweep_free(s);
            break;
        }
        case 2: /* pipeline simulation */
            if (run_pipe(HPGO_SCHED_1F1B) != w->ref_pipe)
                w->bad++;
            break;
        default: { /* DistIR points on the shared pool, beside the other callers */
            hpgo_distir_point_t *pts = malloc((size_t)w->n_pts * sizeof *pts);
            if (!pts) {
                w->bad++;
                break;
            }
            for (int64_t k = 0; k < w->n_pts; k++)
                pts[k].cfg = w->ref_pts[k].cfg;
            hpgo_distir_run_points(pts, w->n_pts, w->pool);
            for (int64_t k = 0; k < w->n_pts; k++)
                if (pts[k].code != w->ref_pts[k].code ||
                    memcmp(&pts[k].iteration_time, &w->ref_pts[k].iteration_time,
                           sizeof(double)) != 0)
                    w->bad++;
            free(pts);
        }
        }
    }
    return NULL;
}

static void test_concurrency(void)
{
    hpgo_model_t *m = gen_model(24, 1, 2, 64);
    hpgo_topo_t *t = topo(16, 4);
    hpgo_pool_t *pool = NULL;
    hpgo_err_t err;
    CHECK(m && t && hpgo_pool_new(2, &pool, &err) == HPGO_OK);
    if (!m || !t || !pool)
        goto done;
    hpgo_orch_t *ref = plan(m, t, 1, 0);
    const hpgo_topo_t *lay[1] = {t};
    uint32_t gbs[3] = {8, 64, 512};
    hpgo_plan_opts_t o1 = {.threads = 1};
    hpgo_sweep_t *ref_sw = NULL;
    CHECK(hpgo_sweep_run(m, lay, 1, gbs, 3, &o1, &ref_sw, &err) == HPGO_OK);
    enum { NPTS = 12 };
    hpgo_distir_point_t pts[NPTS];
    memset(pts, 0, sizeof pts);
    for (int k = 0; k < NPTS; k++) {
        hpgo_distir_config_t *c = &pts[k].cfg;
        c->model = k % 3 == 2 ? HPGO_DISTIR_TRANSFORMER : HPGO_DISTIR_MLP;
        c->cost_model = k % HPGO_DISTIR__COUNT;
        c->batch_size = 256;
        c->width = 128;
        c->seq_len = 16;
        c->heads = 4;
        c->layers = 8;
        c->dp = 1 + k % 2;
        c->tp = 1 + (k / 2) % 2;
        c->pp = 1 + (k % 4 == 3) * 3;
        if (c->pp == 3)
            c->pp = 4;
        c->microbatches = c->pp > 1 ? 4 : 1;
    }
    hpgo_distir_run_points(pts, NPTS, NULL);
    for (int k = 0; k < NPTS; k++)
        CHECK(pts[k].code == HPGO_OK);
    if (!ref || !ref_sw)
        goto done2;
    enum { WORKERS = 16 };
    pthread_t th[WORKERS];
    worker_t w[WORKERS];
    double pipe = run_pipe(HPGO_SCHED_1F1B);
    CHECK(pipe > 0);
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (worker_t){m, t, ref, ref_sw, pool, pts, NPTS, pipe, i, 0};
        CHECK(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
    }
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(th[i], NULL);
        CHECK(w[i].bad == 0);
    }
done2:
    hpgo_orch_free(ref);
    hpgo_sweep_free(ref_sw);
done:
    hpgo_pool_free(pool);
    hpgo_topo_free(t);
    hpgo_model_free(m);
}

/* ------------------------------------------------------------ simulators */

static void test_simulators(void)
{
    /* every schedule, a timeline, results independent of repetition */
    for (int s = 0; s < 3; s++) {
        double a = run_pipe(s), b = run_pipe(s);
        CHECK(a > 0 && a == b);
    }
    /* largest allowed sizes without a timeline stay bounded */
    hpgo_sim_stage_t one = {1e-3, 1e-3, 0, 0, 0, 1, NULL};
    hpgo_sim_pipeline_t c = {1, &one, quick ? 1024 : HPGO_SIM_MAX_MICROBATCHES,
                             HPGO_SCHED_1F1B, 1e9, 0, 1e9, 0, 0};
    hpgo_sim_result_t *r = NULL;
    hpgo_err_t err;
    CHECK(hpgo_sim_pipeline_run(&c, &r, &err) == HPGO_OK && r && r->events == NULL);
    if (r)
        CHECK(fabs(r->iteration_time - c.microbatches * 2e-3) < 1e-6 * c.microbatches);
    hpgo_sim_result_free(r);
    /* huge but finite numbers give an infinite time, not NaN or a crash */
    hpgo_sim_stage_t huge[2] = {{1e308, 1e308, 1e308, 1e308, 1e308, 1, NULL},
                                {1e308, 1e308, 0, 1e308, 1e308, 1, NULL}};
    hpgo_sim_pipeline_t h = {2, huge, 4, HPGO_SCHED_GPIPE, 1e-300, 0, 1e-300, 1e300, 1};
    r = NULL;
    CHECK(hpgo_sim_pipeline_run(&h, &r, &err) == HPGO_OK && r && !isnan(r->iteration_time));
    hpgo_sim_result_free(r);
    /* a grid */
    hpgo_distir_config_t base;
    memset(&base, 0, sizeof base);
    base.model = HPGO_DISTIR_MLP;
    base.batch_size = 1024;
    base.width = 256;
    base.layers = 8;
    base.dp = base.tp = base.pp = base.microbatches = 1;
    int32_t ws[4] = {1, 2, 4, 8};
    hpgo_distir_config_t *cfgs = NULL;
    int64_t n = 0;
    CHECK(hpgo_distir_grid_configs(&base, ws, 4, NULL, 0, &cfgs, &n, &err) == HPGO_OK && n > 4);
    int32_t zero = 0;
    hpgo_distir_config_t *none = NULL;
    int64_t nn = 0;
    CHECK(hpgo_distir_grid_configs(&base, &zero, 1, NULL, 0, &none, &nn, &err) ==
          HPGO_E_INVALID);
    free(none);
    for (int64_t k = 0; k < n && k < (quick ? 4 : n); k++) {
        cfgs[k].record_events = 1;
        r = NULL;
        int rc = hpgo_distir_simulate(&cfgs[k], &r, &err);
        CHECK(rc == HPGO_OK && r && r->n_events > 0 && r->iteration_time > 0);
        hpgo_sim_result_free(r);
    }
    free(cfgs);
}

static void *raise_later(void *arg)
{
    struct timespec ts = {0, 2000000}; /* 2 ms */
    nanosleep(&ts, NULL);
    hpgo_cancel_request((hpgo_cancel_t *)arg);
    return NULL;
}

/* A raised cancel flag stops every long call with HPGO_E_CANCELLED and
 * nothing allocated (AddressSanitizer checks); one raised from another
 * thread during a run either stops it or lets it finish (ThreadSanitizer
 * checks the flag is the only shared state). */
static void test_cancel(void)
{
    hpgo_cancel_t up;
    hpgo_cancel_init(&up);
    hpgo_cancel_request(&up);
    hpgo_err_t err;
    hpgo_model_t *m = gen_model(40, 1, 1, 64);
    hpgo_topo_t *t = topo(16, 8);
    CHECK(m && t);
    if (!m || !t)
        goto done;
    hpgo_plan_opts_t o = {.threads = 2, .cancel = &up};
    hpgo_orch_t *res = NULL;
    CHECK(hpgo_orchestrate(m, t, &o, &res, &err) == HPGO_E_CANCELLED && !res);
    const hpgo_topo_t *lay[1] = {t};
    uint32_t gbs[2] = {64, 128};
    hpgo_sweep_t *sw = NULL;
    CHECK(hpgo_sweep_run(m, lay, 1, gbs, 2, &o, &sw, &err) == HPGO_E_CANCELLED && !sw);
    hpgo_sim_stage_t st[2] = {{1e-3, 2e-3, 1e6, 1e6, 1e6, 1, NULL},
                              {1e-3, 2e-3, 0, 1e6, 1e6, 1, NULL}};
    hpgo_sim_pipeline_t c = {2, st, 64, HPGO_SCHED_1F1B, 1e9, 0, 1e9, 0, 1, &up};
    hpgo_sim_result_t *r = NULL;
    CHECK(hpgo_sim_pipeline_run(&c, &r, &err) == HPGO_E_CANCELLED && !r);
    hpgo_distir_point_t pt;
    memset(&pt, 0, sizeof pt);
    pt.cfg.model = HPGO_DISTIR_MLP;
    pt.cfg.batch_size = 64;
    pt.cfg.width = 64;
    pt.cfg.layers = 2;
    pt.cfg.dp = pt.cfg.tp = pt.cfg.pp = pt.cfg.microbatches = 1;
    pt.cfg.cancel = &up;
    hpgo_distir_run_points(&pt, 1, NULL);
    CHECK(pt.code == HPGO_E_CANCELLED);
    double f[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int32_t cur[2] = {4, 4}, counts[2];
    double sd[2] = {2.0, 1.0};
    hpgo_replan_input_t in = {8, f, f, NULL, NULL, 2, cur, sd, HPGO_REPLAN_DP, 2, 0, 99, 1e9,
                              0, 0, 1e9, 1.0, &up};
    hpgo_replan_result_t rr;
    memset(&rr, 0, sizeof rr);
    rr.counts = counts;
    CHECK(hpgo_replan_run(&in, &rr, &err) == HPGO_E_CANCELLED);
    in.cancel = NULL;
    CHECK(hpgo_replan_run(&in, &rr, &err) == HPGO_OK && counts[0] + counts[1] == 8);
    /* raised from another thread during a run */
    hpgo_model_t *big = gen_model(quick ? 120 : 300, 0, 1, 1024);
    hpgo_topo_t *tb = topo(128, 8);
    if (big && tb) {
        hpgo_cancel_t mid;
        hpgo_cancel_init(&mid);
        hpgo_plan_opts_t om = {.threads = 2, .cancel = &mid};
        pthread_t th;
        if (pthread_create(&th, NULL, raise_later, &mid) == 0) {
            res = NULL;
            int rc = hpgo_orchestrate(big, tb, &om, &res, &err);
            CHECK((rc == HPGO_OK && res) || (rc == HPGO_E_CANCELLED && !res));
            hpgo_orch_free(res);
            pthread_join(th, NULL);
        }
    }
    hpgo_model_free(big);
    hpgo_topo_free(tb);
done:
    hpgo_model_free(m);
    hpgo_topo_free(t);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Section timings go to stderr (the result line is on stdout). */
static double lap(const char *what, double t0)
{
    double t = now();
    fprintf(stderr, "%-12s %.2f s\n", what, t - t0);
    return t;
}


/* The planner's memoised per-machine-count enumeration of allocation
 * candidates against the literal bitset walk, on random clusters with
 * uneven machines and random reachable occupancies: same sets, same order. */
static void test_replica_candidates(void)
{
    unsigned x = 2024u;
#define RND(n) ((x = x * 1103515245u + 12345u), (int32_t)((x >> 8) % (unsigned)(n)))
    int cases = quick ? 60 : 400;
    long compared = 0;
    for (int c = 0; c < cases; c++) {
        int32_t M = 1 + RND(9), seps[16], n = 0;
        for (int32_t k = 0; k < M; k++)
            seps[k] = (n += 1 + RND(8));
        hpgo_topo_t *t = NULL;
        hpgo_err_t err;
        CHECK(hpgo_topo_new(n, seps, M, &t, &err) == HPGO_OK);
        if (!t)
            continue;
        /* a reachable key: random allocation steps from the empty cluster */
        hpgo_gpuset_t key = {{0}};
        for (int steps = RND(4); steps > 0; steps--) {
            int32_t fr = n - hpgo_gpuset_count(&key);
            if (fr < 2)
                break;
            hpgo_gpuset_t nx[3];
            int k = hpgo_next_cards(t, &key, 1 + RND(fr / 2), nx);
            if (k > 0) {
                const hpgo_gpuset_t *pick = &nx[RND(k)];
                for (int w = 0; w < HPGO_GPUSET_WORDS; w++)
                    key.w[w] |= pick->w[w];
            }
        }
        int32_t fr = n - hpgo_gpuset_count(&key);
        if (fr < 1) {
            hpgo_topo_free(t);
            continue;
        }
        int32_t rp = 1 + RND(fr < 10 ? fr : 10), need = 1 + RND(fr / rp + 1);
        if (need > n)
            need = n;
        hpgo_gpuset_t *a = NULL, *b = NULL;
        int32_t na = 0, nb = 0;
        CHECK(hpgo_replica_candidates(t, &key, rp, need, 1, &a, &na, &err) == HPGO_OK);
        CHECK(hpgo_replica_candidates(t, &key, rp, need, 0, &b, &nb, &err) == HPGO_OK);
        CHECK(na == nb);
        for (int32_t q = 0; a && b && q < na && q < nb; q++)
            CHECK(memcmp(&a[q], &b[q], sizeof a[q]) == 0);
        CHECK((rp * need <= fr) == (na > 0));
        compared += na;
        free(a);
        free(b);
        hpgo_topo_free(t);
    }
    CHECK(compared > cases); /* the cases were not all empty */
    /* a key that is not a per-machine prefix is refused by the memoised form */
    int32_t seps2[2] = {4, 8};
    hpgo_topo_t *t = NULL;
    hpgo_err_t err;
    CHECK(hpgo_topo_new(8, seps2, 2, &t, &err) == HPGO_OK);
    if (t) {
        hpgo_gpuset_t key = {{0}}, *o = NULL;
        int32_t no = -1;
        hpgo_gpuset_add(&key, 1);
        CHECK(hpgo_replica_candidates(t, &key, 2, 2, 0, &o, &no, &err) == HPGO_E_INVALID);
        CHECK(o == NULL && no == 0 && err_ok(&err, HPGO_E_INVALID));
        CHECK(hpgo_replica_candidates(t, &key, 0, 2, 1, &o, &no, &err) == HPGO_E_INVALID);
        hpgo_topo_free(t);
    }
#undef RND
}

/* ------------------------------------------------------------ HAP */

static void test_hap(void)
{
    const double gb = 1e9;
    double flops[8] = {3.9e12, 3.9e12, 2.1e12, 2.1e12, 2.1e12, 2.1e12, 2.1e12, 2.1e12};
    hpgo_hap_layer_t layers[5];
    memset(layers, 0, sizeof layers);
    layers[0] = (hpgo_hap_layer_t){HPGO_HAP_LINEAR, 16384, 4096, 12288, 0, 0, 0};
    layers[1] = (hpgo_hap_layer_t){HPGO_HAP_ATTENTION, 16384, 12288, 4096,
                                   4.0 * 32 * 512 * 512 * 4096, 32, 32.0 * 32 * 512 * 512};
    layers[2] = (hpgo_hap_layer_t){HPGO_HAP_LINEAR, 16384, 4096, 4096, 0, 0, 0};
    layers[3] = (hpgo_hap_layer_t){HPGO_HAP_LINEAR, 16384, 4096, 16384, 0, 0, 0};
    layers[4] = (hpgo_hap_layer_t){HPGO_HAP_ELEMENTWISE, 16384, 16384, 16384, 8.0 * 16384 * 16384,
                                   0, 0};
    double mem[8], used[8], ratios[8];
    int32_t strat[5];
    for (int d = 0; d < 8; d++)
        mem[d] = 16 * gb;
    hpgo_hap_problem_t pb;
    memset(&pb, 0, sizeof pb);
    pb.n_layers = 5;
    pb.layers = layers;
    pb.cluster = (hpgo_hap_cluster_t){8, flops, 0.815 * gb, 0.55 * gb, 0.477 * gb, 0.876 * gb,
                                      0.512 * gb, 7.5 * gb};
    pb.dtype_bytes = 4.0;
    pb.ratio_mode = HPGO_HAP_RATIO_OPTIMAL;
    pb.max_rounds = 20;
    pb.optimizer_bytes = 8.0;
    pb.memory = mem;
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: fit search; 1: report only; 2: devices too small for anything */
        pb.report_only = pass == 1;
        for (int d = 0; d < 8; d++)
            mem[d] = (pass == 2 ? 0.01 : 16) * gb;
        hpgo_hap_result_t out;
        memset(&out, 0, sizeof out);
        out.strategy = strat;
        out.ratios = ratios;
        out.memory_used = used;
        hpgo_err_t err;
        hpgo_err_clear(&err);
        CHECK(hpgo_hap_plan(&pb, &out, &err) == HPGO_OK);
        double s = 0.0, worst = 0.0;
        int fits = 1;
        for (int d = 0; d < 8; d++) {
            s += ratios[d];
            CHECK(used[d] > 0.0);
            if (used[d] / mem[d] > worst)
                worst = used[d] / mem[d];
            fits &= used[d] <= mem[d];
        }
        CHECK(fabs(s - 1.0) < 1e-12);
        CHECK(out.fits == fits);
        CHECK(out.worst_device >= 0 && out.worst_device < 8);
        CHECK(used[out.worst_device] / mem[out.worst_device] == worst);
        CHECK(out.time > 0.0 && isfinite(out.time));
        CHECK(out.worst.total == used[out.worst_device]);
        if (pass == 0)
            CHECK(out.fits == 1);
        if (pass == 2)
            CHECK(out.fits == 0);
    }
    hpgo_err_t err;
    hpgo_hap_result_t out;
    memset(&out, 0, sizeof out);
    out.strategy = strat;
    out.ratios = ratios;
    layers[1].heads = 0;
    hpgo_err_clear(&err);
    CHECK(hpgo_hap_plan(&pb, &out, &err) == HPGO_E_INVALID && err_ok(&err, HPGO_E_INVALID));
    layers[1].heads = 32;
    mem[3] = -1.0;
    hpgo_err_clear(&err);
    CHECK(hpgo_hap_plan(&pb, &out, &err) == HPGO_E_INVALID && err_ok(&err, HPGO_E_INVALID));
    mem[3] = 16 * gb;
    /* more distinct head counts than the planner keeps */
    hpgo_hap_layer_t many[9];
    for (int i = 0; i < 9; i++)
        many[i] = (hpgo_hap_layer_t){HPGO_HAP_ATTENTION, 64, 3 * 64, 64, 1e6, i + 1, 0};
    pb.layers = many;
    pb.n_layers = 9;
    int32_t st9[9];
    out.strategy = st9;
    hpgo_err_clear(&err);
    CHECK(hpgo_hap_plan(&pb, &out, &err) == HPGO_E_LIMIT && err_ok(&err, HPGO_E_LIMIT));
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        quick = 1;
        first = 2;
    }
    double t0 = now();
    test_contract();
    test_hap();
    t0 = lap("contract", t0);
    test_pool();
    t0 = lap("pool", t0);
    test_simulators();
    t0 = lap("simulators", t0);
    test_planner(argv + first, argc - first);
    t0 = lap("planner", t0);
    test_replica_candidates();
    t0 = lap("allocation candidates", t0);
    test_ga();
    t0 = lap("ga sizes", t0);
    test_sweep();
    t0 = lap("sweep", t0);
    test_concurrency();
    t0 = lap("concurrency", t0);
    test_cancel();
    lap("cancel", t0);
    if (failures) {
        fprintf(stderr, "%d failure(s) in %ld checks\n", failures, checks);
        return 1;
    }
    printf("ok %ld\n", checks);
    return 0;
}
