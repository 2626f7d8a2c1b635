/* fuzz_profile.c - libFuzzer harness over the profile reader and the state
 * builder (csrc/hpgo/graph.c, csrc/hpgo/states.c) and the model built from the states
 * (csrc/hpgo/model.c).
 *
 * Each input is parsed as a graph.txt (no terminator, exact length, so
 * AddressSanitizer sees any read past the end), turned into states when it
 * parses, and the states into a model.  Besides the sanitizers' own reports,
 * the harness traps on a broken contract: an error code outside the
 * documented set, an error record that disagrees with the return value, a
 * message that does not start with the file name or is not valid UTF-8, a
 * parse error without a line, or states that break their invariants
 * (1 <= n <= HPGO_MAX_STATES, predecessors ascending and earlier, finite
 * non-negative sums, non-decreasing prefix sums).
 *
 * Build (clang):   see fuzz/README.md;  run: ./fuzz_profile fuzz/corpus */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "profile.h"

#define REQUIRE(cond)                                                                          \
    do {                                                                                       \
        if (!(cond))                                                                           \
            __builtin_trap();                                                                  \
    } while (0)

static int valid_utf8(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int k = *u < 0x80 ? 1 : (*u >> 5) == 6 ? 2 : (*u >> 4) == 14 ? 3 : (*u >> 3) == 30 ? 4 : 0;
        if (k == 0)
            return 0;
        for (int i = 1; i < k; i++)
            if ((u[i] & 0xC0) != 0x80)
                return 0;
        u += k;
    }
    return 1;
}

static void check_error(int rc, const hpgo_err_t *err)
{
    REQUIRE(rc == HPGO_E_PARSE || rc == HPGO_E_INVALID || rc == HPGO_E_LIMIT);
    REQUIRE(err->code == rc);
    REQUIRE(memchr(err->msg, 0, sizeof err->msg) != NULL);
    REQUIRE(strncmp(err->msg, "fuzz", 4) == 0);
    REQUIRE(valid_utf8(err->msg));
    REQUIRE(rc != HPGO_E_PARSE || err->line >= 1);
}

static void check_states(const hpgo_graph_t *g, const hpgo_states_t *st)
{
    REQUIRE(st->n >= 1 && st->n <= HPGO_MAX_STATES);
    REQUIRE(st->pred_off[0] == 0 && st->set_off[0] == 0);
    for (int32_t s = 0; s < st->n; s++) {
        REQUIRE(st->pred_off[s + 1] >= st->pred_off[s]);
        for (int32_t k = st->pred_off[s]; k < st->pred_off[s + 1]; k++) {
            REQUIRE(st->pred_idx[k] >= 0 && st->pred_idx[k] < s);
            REQUIRE(k == st->pred_off[s] || st->pred_idx[k] > st->pred_idx[k - 1]);
        }
        REQUIRE(st->set_off[s + 1] > st->set_off[s]);
        for (int32_t k = st->set_off[s]; k < st->set_off[s + 1]; k++)
            REQUIRE(st->set_idx[k] >= 0 && st->set_idx[k] < g->n_nodes);
        REQUIRE(st->label[s] != NULL);
        /* sums of finite non-negative values: never NaN or negative (they may
         * overflow to +inf for absurd inputs, which the model must survive) */
        REQUIRE(st->ct[s] >= 0 && st->act[s] >= 0 && st->par[s] >= 0 && st->oa[s] >= 0);
    }
}

static void check_model(const hpgo_states_t *st)
{
    hpgo_model_t *m = NULL;
    hpgo_err_t err;
    int rc = hpgo_model_new(st, 2, 6, &m, &err);
    if (rc != HPGO_OK) {
        REQUIRE(rc == HPGO_E_INVALID || rc == HPGO_E_LIMIT);
        REQUIRE(m == NULL);
        return;
    }
    int32_t L = m->L;
    REQUIRE(L == st->n);
    (void)hpgo_model_total_time(m);
    (void)hpgo_model_total_params(m);
    (void)hpgo_model_max_single_gpu_batch_size(m);
    for (int32_t j = 0; j < L; j++) {
        int32_t np = -1;
        const int32_t *p = hpgo_model_preds(m, j, &np);
        REQUIRE(np >= 0 && (np == 0 || p != NULL));
        REQUIRE(hpgo_model_label(m, j) != NULL);
        (void)hpgo_model_oa(m, j);
        (void)hpgo_model_ct(m, 0, j);
        (void)hpgo_model_ct(m, j + 1 <= L - 1 ? j + 1 : L - 1, j);
        (void)hpgo_model_ac(m, j, L - 1);
        (void)hpgo_model_pa(m, L, j);
    }
    hpgo_model_t *c = NULL;
    if (hpgo_model_normalized_copy(m, 3, &c, &err) == HPGO_OK)
        REQUIRE(c->L == L && c->gbs == 3);
    hpgo_model_free(c);
    hpgo_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    hpgo_err_t err;
    hpgo_graph_t *g = (hpgo_graph_t *)&err; /* must come back NULL on failure */
    int rc = hpgo_graph_parse(buf, size, "fuzz", &g, &err);
    free(buf);
    if (rc != HPGO_OK) {
        REQUIRE(g == NULL);
        check_error(rc, &err);
        return 0;
    }
    REQUIRE(g != NULL && g->n_nodes >= 1);
    for (int32_t e = 0; e < g->n_edges; e++)
        REQUIRE(g->edge_src[e] >= 0 && g->edge_src[e] < g->n_nodes && g->edge_dst[e] >= 0 &&
                g->edge_dst[e] < g->n_nodes && g->edge_line[e] >= 1);
    for (int32_t v = 0; v < g->n_nodes; v++) {
        const hpgo_node_t *n = &g->nodes[v];
        REQUIRE(isfinite(n->fwd_ms) && n->fwd_ms >= 0 && isfinite(n->bwd_ms) && n->bwd_ms >= 0);
        REQUIRE(isfinite(n->act_bytes) && n->act_bytes >= 0);
        REQUIRE(isfinite(n->par_bytes) && n->par_bytes >= 0);
        REQUIRE(valid_utf8(n->id) && valid_utf8(n->desc) && n->line >= 1);
    }
    hpgo_states_t *st = NULL;
    rc = hpgo_states_build(g, &st, &err);
    if (rc != HPGO_OK) {
        REQUIRE(st == NULL);
        check_error(rc, &err);
    } else {
        check_states(g, st);
        check_model(st);
    }
    hpgo_states_free(st);
    hpgo_graph_free(g);
    return 0;
}
