/* states.c - the HPGO/PipeDream layer-state builder (spec/hpgo-compat.md
 * section 3, with the canonical orders of sections 3.6, 11 and 13).
 *
 * DESIGN: a parsed graph becomes the ordered list of "antichain states" that
 * PipeDream's prepare() returns, number for number:
 *   1. clean-up: Input* sources, then unused __getitem__ sinks, are dropped
 *      (one pass each); the remaining nodes keep file order and get compact
 *      indices 0..m-1, so "file order" is simply ascending index;
 *   2. a Kahn pass checks for cycles (reported with the line of an edge on
 *      the cycle) and gives an order for the reachability bitsets anc(v) and
 *      des(v) (m^2/8 bytes each, refused beyond a fixed budget);
 *   3. the antichain DAG is enumerated breadth-first exactly like
 *      PipeDream: augment / reduce ("deaugment") / next, with the same memo
 *      tables keyed by the node set of a list (PipeDream's sorted tuples of the
 *      unique id strings identify the same sets), because a memo hit returns the
 *      list ORDER of its first computation and that order decides labels,
 *      creation order and summation order.  augment(A) is the union over
 *      a in A of F(a) = {p in anc(a) : p has an out-neighbour outside
 *      anc(a) + {a}}; F(a) is computed once per node and kept;
 *   4. state order: depth-first reverse post-order, roots and children
 *      visited by label (byte order = Python's code point order), stable;
 *   5. per state: preds from a bitset pass in state order; ct/act/par summed
 *      over cover(s) in ascending index (file order); oa over X_s in order.
 * Sets are int32 lists; memo keys are the sorted index lists (the key of
 * a replaced list is derived from the sorted augmented list in O(w)), hashed
 * into open-addressing tables.  Set tests use the cheaper of a list scan and
 * a bitset AND.  Cost: O((n + e) * n/64) for reachability, then per state
 * O(w * deg * (w + min(w, n/64) * w)) for next() on memo misses (w = width
 * of the augmented antichain) and O(|A| * n/64 + |cover|) for the sums.
 * The number of states is exponential in the graph width for some models
 * (PipeDream never finishes gnmt_32, inception_v3, nasnet*), so the builder
 * stops with HPGO_E_LIMIT past HPGO_MAX_STATES states or WORK_BUDGET
 * elementary operations, both reached in well under a second.
 *
 * Threading: no shared state; the graph is only read. */
#include "profile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BITSET_BUDGET ((size_t)512 << 20) /* bytes for reachability / pred bitsets */
/* Elementary set operations (bit tests, 64-bit word operations, list
 * entries touched) the builder may spend; the real profiles need < 10^6,
 * very wide graphs would otherwise run for minutes. */
#define WORK_BUDGET ((uint64_t)100000000)
#define ID_SNIP 64

typedef struct states_impl {
    hpgo_states_t pub;
    char *labels; /* arena holding every label */
} states_impl;

/* growable int32 vector */
typedef struct ivec {
    int32_t *v;
    size_t n, cap;
} ivec;

static int iv_reserve(ivec *a, size_t extra)
{
    if (a->n + extra <= a->cap)
        return 0;
    size_t cap = a->cap ? a->cap : 256;
    while (cap < a->n + extra)
        cap *= 2;
    int32_t *q = realloc(a->v, cap * sizeof *q);
    if (!q)
        return -1;
    a->v = q;
    a->cap = cap;
    return 0;
}

static int iv_push(ivec *a, int32_t x)
{
    if (iv_reserve(a, 1) < 0)
        return -1;
    a->v[a->n++] = x;
    return 0;
}

/* Hash table from a sorted int32 key (stored in its own arena) to an int32. */
typedef struct kslot {
    uint64_t h;
    size_t off;
    int32_t len;
    int32_t val; /* -1: empty */
} kslot;

typedef struct keymap {
    kslot *slots;
    size_t cap, count;
    ivec keys;
} keymap;

static uint64_t hash_key(const int32_t *k, int32_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uint32_t)n;
    for (int32_t i = 0; i < n; i++) {
        h = (h ^ (uint32_t)k[i]) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    return h;
}

static size_t km_slot(const keymap *km, const int32_t *key, int32_t n, uint64_t h)
{
    size_t mask = km->cap - 1, i = (size_t)h & mask;
    for (;;) {
        const kslot *s = &km->slots[i];
        if (s->val < 0)
            return i;
        if (s->h == h && s->len == n &&
            memcmp(km->keys.v + s->off, key, (size_t)n * sizeof *key) == 0)
            return i;
        i = (i + 1) & mask;
    }
}

static int km_grow(keymap *km)
{
    size_t cap = km->cap ? km->cap * 2 : 1024;
    kslot *ns = malloc(cap * sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < cap; i++)
        ns[i].val = -1;
    for (size_t i = 0; i < km->cap; i++) {
        if (km->slots[i].val < 0)
            continue;
        size_t j = (size_t)km->slots[i].h & (cap - 1);
        while (ns[j].val >= 0)
            j = (j + 1) & (cap - 1);
        ns[j] = km->slots[i];
    }
    free(km->slots);
    km->slots = ns;
    km->cap = cap;
    return 0;
}

/* Value stored for key, or -1. */
static int32_t km_get(keymap *km, const int32_t *key, int32_t n, uint64_t h)
{
    if (km->cap == 0)
        return -1;
    return km->slots[km_slot(km, key, n, h)].val;
}

/* Insert a key known to be absent. */
static int km_put(keymap *km, const int32_t *key, int32_t n, uint64_t h, int32_t val)
{
    if (2 * (km->count + 1) > km->cap && km_grow(km) < 0)
        return -1;
    if (iv_reserve(&km->keys, (size_t)n) < 0)
        return -1;
    size_t i = km_slot(km, key, n, h);
    km->slots[i].h = h;
    km->slots[i].off = km->keys.n;
    km->slots[i].len = n;
    km->slots[i].val = val;
    memcpy(km->keys.v + km->keys.n, key, (size_t)n * sizeof *key);
    km->keys.n += (size_t)n;
    km->count++;
    return 0;
}

static void km_free(keymap *km)
{
    free(km->slots);
    free(km->keys.v);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void sort_i32(int32_t *a, int32_t n)
{
    if (n > 24) {
        qsort(a, (size_t)n, sizeof *a, cmp_i32);
        return;
    }
    for (int32_t i = 1; i < n; i++) {
        int32_t x = a[i], j = i - 1;
        while (j >= 0 && a[j] > x) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = x;
    }
}

#define BIT(row, i) (((row)[(i) >> 6] >> ((i)&63)) & 1u)
#define SETBIT(row, i) ((row)[(i) >> 6] |= (uint64_t)1 << ((i)&63))
#define CLRBIT(row, i) ((row)[(i) >> 6] &= ~((uint64_t)1 << ((i)&63)))

typedef struct builder {
    const hpgo_graph_t *g;
    hpgo_err_t *err;
    /* cleaned graph, compact indices */
    int32_t m, me;
    int32_t *orig;             /* compact -> graph node index */
    int32_t *out_off, *out_to; /* CSR, file order of edge lines */
    int32_t *in_off, *in_from, *in_eid;
    int32_t *eid_line_src;     /* alive edge -> graph edge index */
    int32_t *topo;
    size_t words;
    uint64_t *anc, *des;
    uint64_t *branch;          /* nodes with >= 2 out-edges: the only candidates for F(a) */
    /* F(a), computed on demand */
    int32_t *f_len; /* -1 = not yet */
    size_t *f_off;
    ivec f_data;
    /* antichain DAG */
    ivec lists;                  /* every stored list (antichains, augments, reductions) */
    size_t *ac_off, *aug_off;    /* per DAG node */
    int32_t *ac_len, *aug_len;
    uint8_t *expanded;
    int32_t n_dag, cap_dag;
    keymap dagmap, redmap;
    ivec e_from, e_to;
    ivec queue;
    /* scratch, m entries each */
    int32_t *s_aa, *s_list, *s_key, *s_red, *s_sorted, *s_bkey;
    uint64_t *lbits;   /* bitset of the list being reduced (augmented antichain, x -> n) */
    uint64_t work;     /* operations spent so far, see WORK_BUDGET */
    uint32_t *stamp;   /* generation marks for set membership inside one call */
    uint32_t *in_ac;   /* marks of the antichain being expanded */
    uint32_t gen, ac_gen;
} builder;

static int berr(builder *b, int code, long line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int berr(builder *b, int code, long line, const char *fmt, ...)
{
    char body[HPGO_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    const char *name = b->g->name ? b->g->name : "<profile>";
    if (line > 0)
        return hpgo_err_set(b->err, code, line, "%.240s:%ld: %s", name, line, body);
    return hpgo_err_set(b->err, code, 0, "%.240s: %s", name, body);
}

static int nomem(builder *b)
{
    return berr(b, HPGO_E_NOMEM, 0, "out of memory while building the layer states");
}

/* The work budget is spent in one of three phases; the message names the
 * one that ran out (a long chain or a dense DAG is not "wide"). */
enum { PH_REACH, PH_ANTICHAINS, PH_SUMS };

static int over_budget(builder *b, int phase)
{
    if (phase == PH_REACH)
        return berr(b, HPGO_E_LIMIT, 0,
                    "the graph's %d nodes and %lld edges need more than %.0e set operations for "
                    "their reachability sets (the state builder's work limit; about 40,000 nodes "
                    "of a chain, or fewer with more edges)",
                    (int)b->m, (long long)b->me, (double)WORK_BUDGET);
    if (phase == PH_SUMS)
        return berr(b, HPGO_E_LIMIT, 0,
                    "summing the %d layer states needs more than %.0e set operations (the state "
                    "builder's work limit): the graph is too large for HPGO's layer-state import",
                    (int)b->n_dag, (double)WORK_BUDGET);
    return berr(b, HPGO_E_LIMIT, 0,
                "the antichain enumeration needs more than %.0e set operations: the graph is "
                "too wide for HPGO's layer-state import",
                (double)WORK_BUDGET);
}

static int starts_with(const char *s, const char *prefix)
{
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static const char *node_id(const builder *b, int32_t c, char *buf, size_t cap)
{
    const char *id = b->g->nodes[b->orig[c]].id;
    hpgo_snip(buf, cap, id, strlen(id));
    return buf;
}

/* ---------------------------------------------------------------- step 1: clean-up */

static int cleanup(builder *b)
{
    const hpgo_graph_t *g = b->g;
    int32_t n = g->n_nodes, E = g->n_edges;
    int rc = HPGO_OK;
    int32_t *indeg = calloc((size_t)n + 1, sizeof *indeg);
    int32_t *outdeg = calloc((size_t)n + 1, sizeof *outdeg);
    int32_t *cid = malloc(((size_t)n + 1) * sizeof *cid);
    uint8_t *alive = malloc((size_t)n + 1);
    if (!indeg || !outdeg || !cid || !alive) {
        rc = nomem(b);
        goto done;
    }
    for (int32_t e = 0; e < E; e++) {
        outdeg[g->edge_src[e]]++;
        indeg[g->edge_dst[e]]++;
    }
    for (int32_t v = 0; v < n; v++)
        alive[v] = !(indeg[v] == 0 && starts_with(g->nodes[v].desc, "Input"));
    /* Removed sources have no in-edges, so the out-degree of every
     * remaining node is unchanged by the first pass. */
    for (int32_t v = 0; v < n; v++)
        if (alive[v] && outdeg[v] == 0 && starts_with(g->nodes[v].desc, "__getitem__"))
            alive[v] = 0;
    int32_t m = 0;
    for (int32_t v = 0; v < n; v++)
        cid[v] = alive[v] ? m++ : -1;
    b->m = m;
    if (m == 0) {
        rc = berr(b, HPGO_E_INVALID, 0,
                  "profile has no nodes left after removing the input node(s) and unused "
                  "__getitem__ sinks");
        goto done;
    }
    int32_t me = 0;
    for (int32_t e = 0; e < E; e++)
        me += alive[g->edge_src[e]] && alive[g->edge_dst[e]];
    b->me = me;
    if (me == 0) {
        rc = berr(b, HPGO_E_INVALID, 0, "profile has no edges after removing the input node(s)");
        goto done;
    }
    b->orig = malloc((size_t)m * sizeof *b->orig);
    b->out_off = calloc((size_t)m + 1, sizeof *b->out_off);
    b->in_off = calloc((size_t)m + 1, sizeof *b->in_off);
    b->out_to = malloc((size_t)me * sizeof *b->out_to);
    b->in_from = malloc((size_t)me * sizeof *b->in_from);
    b->in_eid = malloc((size_t)me * sizeof *b->in_eid);
    b->eid_line_src = malloc((size_t)me * sizeof *b->eid_line_src);
    if (!b->orig || !b->out_off || !b->in_off || !b->out_to || !b->in_from || !b->in_eid ||
        !b->eid_line_src) {
        rc = nomem(b);
        goto done;
    }
    for (int32_t v = 0; v < n; v++)
        if (alive[v])
            b->orig[cid[v]] = v;
    int32_t k = 0;
    for (int32_t e = 0; e < E; e++) {
        if (!(alive[g->edge_src[e]] && alive[g->edge_dst[e]]))
            continue;
        b->out_off[cid[g->edge_src[e]] + 1]++;
        b->in_off[cid[g->edge_dst[e]] + 1]++;
        b->eid_line_src[k++] = e;
    }
    for (int32_t c = 0; c < m; c++) {
        b->out_off[c + 1] += b->out_off[c];
        b->in_off[c + 1] += b->in_off[c];
    }
    /* fill in file order (stable): reuse indeg/outdeg as cursors */
    for (int32_t c = 0; c < m; c++) {
        outdeg[c] = b->out_off[c];
        indeg[c] = b->in_off[c];
    }
    for (int32_t a = 0; a < me; a++) {
        int32_t e = b->eid_line_src[a];
        int32_t s = cid[g->edge_src[e]], d = cid[g->edge_dst[e]];
        b->out_to[outdeg[s]++] = d;
        b->in_from[indeg[d]] = s;
        b->in_eid[indeg[d]++] = a;
    }
done:
    free(indeg);
    free(outdeg);
    free(cid);
    free(alive);
    return rc;
}

/* ---------------------------------------------------------------- step 2: order, cycles */

static int report_cycle(builder *b, const uint8_t *done)
{
    int32_t m = b->m;
    int32_t *pos = malloc((size_t)m * sizeof *pos);
    int32_t *path_e = malloc(((size_t)m + 1) * sizeof *path_e); /* alive edge ids */
    int32_t *path_v = malloc(((size_t)m + 1) * sizeof *path_v);
    if (!pos || !path_e || !path_v) {
        free(pos);
        free(path_e);
        free(path_v);
        return nomem(b);
    }
    for (int32_t c = 0; c < m; c++)
        pos[c] = -1;
    int32_t v = 0;
    while (done[v])
        v++;
    /* walk backwards along in-edges from unfinished nodes until a node repeats */
    int32_t len = 0;
    for (;;) {
        pos[v] = len;
        path_v[len] = v;
        int32_t u = -1, eid = -1;
        for (int32_t i = b->in_off[v]; i < b->in_off[v + 1]; i++) {
            if (!done[b->in_from[i]]) {
                u = b->in_from[i];
                eid = b->in_eid[i];
                break;
            }
        }
        path_e[len++] = eid; /* edge u -> path_v[len-1]; u exists: v is unfinished */
        if (pos[u] >= 0) {
            v = u;
            break;
        }
        v = u;
    }
    /* cycle: path_v[pos[v]] .. path_v[len-1], edges path_e[pos[v]] .. path_e[len-1] */
    int32_t first = pos[v], best = first;
    const hpgo_graph_t *g = b->g;
    for (int32_t i = first; i < len; i++)
        if (g->edge_line[b->eid_line_src[path_e[i]]] < g->edge_line[b->eid_line_src[path_e[best]]])
            best = i;
    /* forward order of the cycle starting at the reported edge's source:
     * edge path_e[i] goes path_v[i+1] -> path_v[i] (path_v[len] == path_v[first]). */
    path_v[len] = path_v[first];
    char msg[400], id1[ID_SNIP], id2[ID_SNIP];
    size_t o = 0;
    int32_t count = len - first;
    for (int32_t k = 0; k <= count && k <= 6; k++) {
        int32_t i = best + 1 - k; /* walk downwards, wrapping inside [first, len] */
        while (i < first)
            i += count;
        const char *id = node_id(b, path_v[i], id1, sizeof id1);
        int w = snprintf(msg + o, sizeof msg - o, "%s%s", k ? " -> " : "", id);
        if (w < 0 || (size_t)w >= sizeof msg - o)
            break;
        o += (size_t)w;
    }
    if (count > 6 && o + 8 < sizeof msg)
        snprintf(msg + o, sizeof msg - o, " -> ...");
    int32_t ge = b->eid_line_src[path_e[best]];
    int rc = berr(b, HPGO_E_PARSE, g->edge_line[ge],
                  "the graph has a cycle: edge '%s -- %s' is on the cycle %s",
                  node_id(b, path_v[best + 1], id1, sizeof id1),
                  node_id(b, path_v[best], id2, sizeof id2), msg);
    free(pos);
    free(path_e);
    free(path_v);
    return rc;
}

static int reachability(builder *b)
{
    int32_t m = b->m;
    int32_t *rem = malloc((size_t)m * sizeof *rem);
    uint8_t *done = calloc((size_t)m, 1);
    b->topo = malloc((size_t)m * sizeof *b->topo);
    if (!rem || !done || !b->topo) {
        free(rem);
        free(done);
        return nomem(b);
    }
    int32_t head = 0, tail = 0;
    for (int32_t c = 0; c < m; c++) {
        rem[c] = b->in_off[c + 1] - b->in_off[c];
        if (rem[c] == 0)
            b->topo[tail++] = c;
    }
    while (head < tail) {
        int32_t v = b->topo[head++];
        done[v] = 1;
        for (int32_t i = b->out_off[v]; i < b->out_off[v + 1]; i++)
            if (--rem[b->out_to[i]] == 0)
                b->topo[tail++] = b->out_to[i];
    }
    free(rem);
    if (tail < m) {
        int rc = report_cycle(b, done);
        free(done);
        return rc;
    }
    free(done);
    size_t words = ((size_t)m + 63) / 64;
    b->words = words;
    if ((double)m * (double)words * 16.0 > (double)BITSET_BUDGET)
        return berr(b, HPGO_E_LIMIT, 0,
                    "the graph has %d nodes after clean-up; the state builder would need %.0f MiB "
                    "of reachability bitsets (limit %zu MiB)",
                    (int)m, (double)m * (double)words * 16.0 / 1048576.0, BITSET_BUDGET >> 20);
    b->work += 2 * ((uint64_t)b->me + (uint64_t)m) * words;
    if (b->work > WORK_BUDGET)
        return over_budget(b, PH_REACH);
    b->anc = calloc((size_t)m * words, sizeof *b->anc);
    b->des = calloc((size_t)m * words, sizeof *b->des);
    b->branch = calloc(words, sizeof *b->branch);
    if (!b->anc || !b->des || !b->branch)
        return nomem(b);
    for (int32_t v = 0; v < m; v++)
        if (b->out_off[v + 1] - b->out_off[v] >= 2)
            SETBIT(b->branch, v);
    for (int32_t t = 0; t < m; t++) {
        int32_t v = b->topo[t];
        uint64_t *row = b->anc + (size_t)v * words;
        for (int32_t i = b->in_off[v]; i < b->in_off[v + 1]; i++) {
            int32_t u = b->in_from[i];
            const uint64_t *ru = b->anc + (size_t)u * words;
            for (size_t w = 0; w < words; w++)
                row[w] |= ru[w];
            SETBIT(row, u);
        }
    }
    for (int32_t t = m - 1; t >= 0; t--) {
        int32_t v = b->topo[t];
        uint64_t *row = b->des + (size_t)v * words;
        for (int32_t i = b->out_off[v]; i < b->out_off[v + 1]; i++) {
            int32_t u = b->out_to[i];
            const uint64_t *ru = b->des + (size_t)u * words;
            for (size_t w = 0; w < words; w++)
                row[w] |= ru[w];
            SETBIT(row, u);
        }
    }
    return HPGO_OK;
}

/* ---------------------------------------------------------------- step 3: antichain DAG */

/* Does row (a node bitset) contain any element of list[0..n)?  bits is the
 * same list as a bitset; the cheaper of the two tests is used. */
static int intersects(builder *b, const uint64_t *row, const int32_t *list, int32_t n,
                      const uint64_t *bits)
{
    if ((size_t)n <= b->words) {
        b->work += (uint64_t)n;
        for (int32_t j = 0; j < n; j++)
            if (BIT(row, list[j]))
                return 1;
        return 0;
    }
    b->work += b->words;
    for (size_t w = 0; w < b->words; w++)
        if (row[w] & bits[w])
            return 1;
    return 0;
}

/* F(a): ancestors of a with an out-neighbour outside anc(a) + {a}, ascending. */
static int frontier(builder *b, int32_t a)
{
    if (b->f_len[a] >= 0)
        return HPGO_OK;
    const uint64_t *ra = b->anc + (size_t)a * b->words;
    size_t start = b->f_data.n;
    b->work += b->words;
    for (size_t w = 0; w < b->words; w++) {
        uint64_t bits = ra[w] & b->branch[w]; /* a single out-edge stays inside anc(a)+{a} */
        while (bits) {
            int32_t p = (int32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
            bits &= bits - 1;
            b->work += (uint64_t)(b->out_off[p + 1] - b->out_off[p]) + 1;
            for (int32_t i = b->out_off[p]; i < b->out_off[p + 1]; i++) {
                int32_t o = b->out_to[i];
                if (o != a && !BIT(ra, o)) {
                    if (iv_push(&b->f_data, p) < 0)
                        return nomem(b);
                    break;
                }
            }
        }
    }
    b->f_off[a] = start;
    b->f_len[a] = (int32_t)(b->f_data.n - start);
    return HPGO_OK;
}

/* Look up or create the DAG node of antichain list[0..n); key is the same
 * list sorted.  Neither may point into b->lists or b->s_red.  *id receives
 * the node. */
static int dag_node(builder *b, const int32_t *list, const int32_t *key, int32_t n, int32_t *id)
{
    uint64_t h = hash_key(key, n);
    int32_t got = km_get(&b->dagmap, key, n, h);
    if (got >= 0) {
        *id = got;
        return HPGO_OK;
    }
    if (b->n_dag >= HPGO_MAX_STATES)
        return berr(b, HPGO_E_LIMIT, 0,
                    "more than %d antichain states (limit HPGO_MAX_STATES): the graph is too long "
                    "or too wide for HPGO's layer-state import",
                    HPGO_MAX_STATES);
    if (b->n_dag == b->cap_dag) {
        int32_t cap = b->cap_dag ? 2 * b->cap_dag : 256;
        size_t *a1 = realloc(b->ac_off, (size_t)cap * sizeof *a1);
        if (a1)
            b->ac_off = a1;
        size_t *a2 = a1 ? realloc(b->aug_off, (size_t)cap * sizeof *a2) : NULL;
        if (a2)
            b->aug_off = a2;
        int32_t *a3 = a2 ? realloc(b->ac_len, (size_t)cap * sizeof *a3) : NULL;
        if (a3)
            b->ac_len = a3;
        int32_t *a4 = a3 ? realloc(b->aug_len, (size_t)cap * sizeof *a4) : NULL;
        if (a4)
            b->aug_len = a4;
        uint8_t *a5 = a4 ? realloc(b->expanded, (size_t)cap) : NULL;
        if (!a5)
            return nomem(b);
        b->expanded = a5;
        b->cap_dag = cap;
    }
    int32_t k = b->n_dag;
    /* X = union of F(a), ascending (file order), then the antichain itself */
    int32_t nx = 0;
    b->gen++;
    for (int32_t i = 0; i < n; i++) {
        int rc = frontier(b, list[i]);
        if (rc != HPGO_OK)
            return rc;
        /* indexed, not f_data.v + off: the vector is NULL while every F(a) is empty */
        size_t off = b->f_off[list[i]];
        for (int32_t j = 0; j < b->f_len[list[i]]; j++) {
            int32_t v = b->f_data.v[off + (size_t)j];
            if (b->stamp[v] != b->gen) {
                b->stamp[v] = b->gen;
                b->s_red[nx++] = v;
            }
        }
    }
    sort_i32(b->s_red, nx);
    b->work += 8 * (uint64_t)(nx + n);
    if (iv_reserve(&b->lists, (size_t)(2 * n + nx)) < 0 ||
        km_put(&b->dagmap, key, n, h, k) < 0)
        return nomem(b);
    b->ac_off[k] = b->lists.n;
    b->ac_len[k] = n;
    memcpy(b->lists.v + b->lists.n, list, (size_t)n * sizeof *list);
    b->lists.n += (size_t)n;
    b->aug_off[k] = b->lists.n;
    b->aug_len[k] = nx + n;
    memcpy(b->lists.v + b->lists.n, b->s_red, (size_t)nx * sizeof *list);
    memcpy(b->lists.v + b->lists.n + nx, list, (size_t)n * sizeof *list);
    b->lists.n += (size_t)(nx + n);
    b->expanded[k] = 0;
    b->n_dag++;
    *id = k;
    return HPGO_OK;
}

/* reduce(L) with PipeDream's memo: the result list for the node set of L is
 * the one computed the first time that set was seen.  key is L sorted and
 * b->lbits holds L as a bitset.  Result copied to b->s_red, length returned
 * in *out_n. */
static int reduce_memo(builder *b, const int32_t *L, const int32_t *key, int32_t n,
                       int32_t *out_n)
{
    b->work += 4 * (uint64_t)n;
    uint64_t h = hash_key(key, n);
    int32_t got = km_get(&b->redmap, key, n, h);
    if (got >= 0) {
        /* stored as [len, items...] at offset got in lists */
        int32_t len = b->lists.v[got];
        memcpy(b->s_red, b->lists.v + got + 1, (size_t)len * sizeof *L);
        *out_n = len;
        return HPGO_OK;
    }
    int32_t r = 0;
    b->gen++;
    for (int32_t i = 0; i < n; i++) {
        int32_t y = L[i];
        if (!intersects(b, b->des + (size_t)y * b->words, L, n, b->lbits) &&
            b->stamp[y] != b->gen) {
            b->stamp[y] = b->gen;
            b->s_red[r++] = y;
        }
    }
    if (b->lists.n + (size_t)r + 1 > (size_t)INT32_MAX)
        return berr(b, HPGO_E_LIMIT, 0, "antichain storage exceeds 2^31 entries");
    int32_t off = (int32_t)b->lists.n;
    if (iv_reserve(&b->lists, (size_t)r + 1) < 0 || km_put(&b->redmap, key, n, h, off) < 0)
        return nomem(b);
    b->lists.v[b->lists.n++] = r;
    memcpy(b->lists.v + b->lists.n, b->s_red, (size_t)r * sizeof *L);
    b->lists.n += (size_t)r;
    *out_n = r;
    return HPGO_OK;
}

static int expand(builder *b, int32_t a)
{
    int32_t na = b->aug_len[a];
    memcpy(b->s_aa, b->lists.v + b->aug_off[a], (size_t)na * sizeof *b->s_aa);
    uint32_t in_a = ++b->ac_gen;
    const int32_t *ac = b->lists.v + b->ac_off[a];
    for (int32_t i = 0; i < b->ac_len[a]; i++)
        b->in_ac[ac[i]] = in_a;
    memset(b->lbits, 0, b->words * sizeof *b->lbits);
    for (int32_t i = 0; i < na; i++)
        SETBIT(b->lbits, b->s_aa[i]);
    memcpy(b->s_sorted, b->s_aa, (size_t)na * sizeof *b->s_sorted);
    sort_i32(b->s_sorted, na);
    b->work += b->words + 8 * (uint64_t)na;
    for (int32_t xi = 0; xi < na; xi++) {
        int32_t x = b->s_aa[xi];
        for (int32_t ei = b->out_off[x]; ei < b->out_off[x + 1]; ei++) {
            int32_t nn = b->out_to[ei];
            b->work++;
            if (b->in_ac[nn] == in_a)
                continue;
            if (intersects(b, b->des + (size_t)nn * b->words, b->s_aa, na, b->lbits))
                continue;
            /* L = AA with x replaced by nn (nn is not in AA: it would be in A
             * or an ancestor of A); its key is sorted(AA) - x + nn */
            memcpy(b->s_list, b->s_aa, (size_t)na * sizeof *b->s_list);
            b->s_list[xi] = nn;
            int32_t kn = 0, placed = 0;
            for (int32_t i = 0; i < na; i++) {
                int32_t y = b->s_sorted[i];
                if (!placed && nn < y) {
                    b->s_key[kn++] = nn;
                    placed = 1;
                }
                if (y != x)
                    b->s_key[kn++] = y;
            }
            if (!placed)
                b->s_key[kn++] = nn;
            CLRBIT(b->lbits, x);
            SETBIT(b->lbits, nn);
            int32_t rn = 0, id = 0;
            int rc = reduce_memo(b, b->s_list, b->s_key, na, &rn);
            SETBIT(b->lbits, x);
            CLRBIT(b->lbits, nn);
            if (rc != HPGO_OK)
                return rc;
            /* the reduced antichain and its key (sorted(L) filtered) */
            memcpy(b->s_list, b->s_red, (size_t)rn * sizeof *b->s_list);
            b->gen++;
            for (int32_t i = 0; i < rn; i++)
                b->stamp[b->s_list[i]] = b->gen;
            int32_t bn = 0;
            for (int32_t i = 0; i < na; i++)
                if (b->stamp[b->s_key[i]] == b->gen)
                    b->s_bkey[bn++] = b->s_key[i];
            rc = dag_node(b, b->s_list, b->s_bkey, rn, &id);
            if (rc != HPGO_OK)
                return rc;
            if (iv_push(&b->e_from, a) < 0 || iv_push(&b->e_to, id) < 0 ||
                iv_push(&b->queue, id) < 0)
                return nomem(b);
            if (b->work > WORK_BUDGET)
                return over_budget(b, PH_ANTICHAINS);
        }
    }
    return HPGO_OK;
}

static int enumerate(builder *b)
{
    int32_t m = b->m;
    b->f_len = malloc((size_t)m * sizeof *b->f_len);
    b->f_off = malloc((size_t)m * sizeof *b->f_off);
    b->s_aa = malloc((size_t)m * sizeof *b->s_aa);
    b->s_list = malloc((size_t)m * sizeof *b->s_list);
    b->s_key = malloc((size_t)m * sizeof *b->s_key);
    b->s_sorted = malloc((size_t)m * sizeof *b->s_sorted);
    b->s_bkey = malloc((size_t)m * sizeof *b->s_bkey);
    b->s_red = malloc((size_t)m * sizeof *b->s_red);
    b->stamp = calloc((size_t)m, sizeof *b->stamp);
    b->in_ac = calloc((size_t)m, sizeof *b->in_ac);
    b->lbits = malloc(b->words * sizeof *b->lbits);
    if (!b->f_len || !b->f_off || !b->s_aa || !b->s_list || !b->s_key || !b->s_sorted ||
        !b->s_bkey || !b->s_red || !b->stamp || !b->in_ac || !b->lbits)
        return nomem(b);
    for (int32_t c = 0; c < m; c++)
        b->f_len[c] = -1;
    int32_t src = 0;
    while (b->in_off[src + 1] > b->in_off[src])
        src++; /* a DAG has a source; the first one in file order */
    int32_t id;
    int rc = dag_node(b, &src, &src, 1, &id);
    if (rc != HPGO_OK)
        return rc;
    if (iv_push(&b->queue, id) < 0)
        return nomem(b);
    for (size_t head = 0; head < b->queue.n; head++) {
        int32_t a = b->queue.v[head];
        if (b->expanded[a])
            continue;
        b->expanded[a] = 1;
        rc = expand(b, a);
        if (rc != HPGO_OK)
            return rc;
    }
    if (b->e_from.n == 0) {
        char id1[ID_SNIP];
        return berr(b, HPGO_E_INVALID, 0,
                    "profile yields no states: the first source node '%s' (line %ld) has no "
                    "outgoing edges after removing the input node(s)",
                    node_id(b, src, id1, sizeof id1), b->g->nodes[b->orig[src]].line);
    }
    return HPGO_OK;
}

/* ---------------------------------------------------------------- steps 4-5: order, numbers */

typedef struct rankitem {
    const char *s;
    int32_t c;
} rankitem;

static int cmp_rank(const void *x, const void *y)
{
    const rankitem *a = x, *b = y;
    int r = strcmp(a->s, b->s); /* byte order: UTF-8 keeps code point order */
    return r ? r : (a->c > b->c) - (a->c < b->c);
}

/* (label rank, position) pairs for stable sorting */
typedef struct lkey {
    int32_t rank, pos, val;
} lkey;

static int cmp_lkey(const void *x, const void *y)
{
    const lkey *a = x, *b = y;
    if (a->rank != b->rank)
        return (a->rank > b->rank) - (a->rank < b->rank);
    return (a->pos > b->pos) - (a->pos < b->pos);
}

static int finish(builder *b, hpgo_states_t **out)
{
    const hpgo_graph_t *g = b->g;
    int32_t m = b->m, L = b->n_dag;
    size_t nE = b->e_from.n;
    int rc = HPGO_OK;
    int32_t *rank = NULL, *lrank = NULL, *c_off = NULL, *c_to = NULL, *p_off = NULL,
            *p_from = NULL, *order = NULL, *pos = NULL, *stk = NULL, *sci = NULL;
    uint8_t *mark = NULL;
    rankitem *ri = NULL;
    lkey *lk = NULL;
    uint64_t *pb = NULL, *cover = NULL;
    states_impl *si = NULL;

    /* label ranks: equal DESC strings get equal ranks */
    rank = malloc((size_t)m * sizeof *rank);
    ri = malloc((size_t)m * sizeof *ri);
    lrank = malloc((size_t)L * sizeof *lrank);
    size_t lk_n = nE > (size_t)L ? nE : (size_t)L;
    lk = malloc(lk_n * sizeof *lk);
    c_off = calloc((size_t)L + 1, sizeof *c_off);
    c_to = malloc(nE * sizeof *c_to);
    p_off = calloc((size_t)L + 1, sizeof *p_off);
    p_from = malloc(nE * sizeof *p_from);
    order = malloc((size_t)L * sizeof *order);
    pos = malloc((size_t)L * sizeof *pos);
    stk = malloc((size_t)L * sizeof *stk);
    sci = malloc((size_t)L * sizeof *sci);
    mark = calloc((size_t)L, 1);
    if (!rank || !ri || !lrank || !lk || !c_off || !c_to || !p_off || !p_from || !order ||
        !pos || !stk || !sci || !mark) {
        rc = nomem(b);
        goto done;
    }
    for (int32_t c = 0; c < m; c++)
        ri[c] = (rankitem){g->nodes[b->orig[c]].desc, c};
    qsort(ri, (size_t)m, sizeof *ri, cmp_rank);
    for (int32_t i = 0, r = 0; i < m; i++) {
        if (i > 0 && strcmp(ri[i].s, ri[i - 1].s) != 0)
            r++;
        rank[ri[i].c] = r;
    }
    for (int32_t k = 0; k < L; k++)
        lrank[k] = rank[b->lists.v[b->ac_off[k]]];

    /* children (edge order, then stably by label) and parents */
    for (size_t e = 0; e < nE; e++) {
        c_off[b->e_from.v[e] + 1]++;
        p_off[b->e_to.v[e] + 1]++;
    }
    for (int32_t k = 0; k < L; k++) {
        c_off[k + 1] += c_off[k];
        p_off[k + 1] += p_off[k];
    }
    for (int32_t k = 0; k < L; k++) {
        stk[k] = c_off[k];
        sci[k] = p_off[k];
    }
    for (size_t e = 0; e < nE; e++) {
        c_to[stk[b->e_from.v[e]]++] = b->e_to.v[e];
        p_from[sci[b->e_to.v[e]]++] = b->e_from.v[e];
    }
    for (int32_t k = 0; k < L; k++) {
        int32_t s = c_off[k], n = c_off[k + 1] - s;
        for (int32_t i = 0; i < n; i++)
            lk[i] = (lkey){lrank[c_to[s + i]], i, c_to[s + i]};
        qsort(lk, (size_t)n, sizeof *lk, cmp_lkey);
        for (int32_t i = 0; i < n; i++)
            c_to[s + i] = lk[i].val;
    }

    /* DFS from the nodes sorted by label (stable on creation order, which
     * is the DAG's insertion order); order = reverse post-order */
    for (int32_t k = 0; k < L; k++)
        lk[k] = (lkey){lrank[k], k, k};
    qsort(lk, (size_t)L, sizeof *lk, cmp_lkey);
    int32_t nfin = 0;
    for (int32_t r = 0; r < L; r++) {
        int32_t root = lk[r].val;
        if (mark[root])
            continue;
        int32_t sp = 0;
        stk[sp] = root;
        sci[sp++] = c_off[root];
        mark[root] = 1;
        while (sp > 0) {
            int32_t v = stk[sp - 1];
            if (sci[sp - 1] < c_off[v + 1]) {
                int32_t c = c_to[sci[sp - 1]++];
                if (!mark[c]) {
                    mark[c] = 1;
                    stk[sp] = c;
                    sci[sp++] = c_off[c];
                }
            } else {
                sp--;
                order[L - 1 - nfin++] = v;
            }
        }
    }
    for (int32_t s = 0; s < L; s++)
        pos[order[s]] = s;

    /* output */
    si = calloc(1, sizeof *si);
    if (!si) {
        rc = nomem(b);
        goto done;
    }
    hpgo_states_t *st = &si->pub;
    st->n = L;
    st->ct = malloc((size_t)L * sizeof *st->ct);
    st->act = malloc((size_t)L * sizeof *st->act);
    st->par = malloc((size_t)L * sizeof *st->par);
    st->oa = malloc((size_t)L * sizeof *st->oa);
    st->pred_off = malloc(((size_t)L + 1) * sizeof *st->pred_off);
    st->label = malloc((size_t)L * sizeof *st->label);
    st->set_off = malloc(((size_t)L + 1) * sizeof *st->set_off);
    size_t label_bytes = 0, set_total = 0;
    for (int32_t k = 0; k < L; k++) {
        label_bytes += strlen(g->nodes[b->orig[b->lists.v[b->ac_off[k]]]].desc) + 1;
        set_total += (size_t)b->aug_len[k];
    }
    si->labels = malloc(label_bytes);
    st->set_idx = malloc((set_total ? set_total : 1) * sizeof *st->set_idx);
    size_t lw = ((size_t)L + 63) / 64;
    if ((double)L * (double)lw * 8.0 > (double)BITSET_BUDGET) {
        rc = berr(b, HPGO_E_LIMIT, 0, "%d states need too much memory for predecessor sets",
                  (int)L);
        goto done;
    }
    pb = calloc((size_t)L * lw, sizeof *pb);
    cover = malloc(b->words * sizeof *cover);
    if (!st->ct || !st->act || !st->par || !st->oa || !st->pred_off || !st->label ||
        !st->set_off || !si->labels || !st->set_idx || !pb || !cover) {
        rc = nomem(b);
        goto done;
    }

    for (int32_t k = 0; k < L; k++)
        b->work += ((uint64_t)b->ac_len[k] + 1) * b->words + (uint64_t)b->m / 8;
    if (b->work > WORK_BUDGET) {
        rc = over_budget(b, PH_SUMS);
        goto done;
    }

    /* preds: ancestor bitsets in state order (a topological order) */
    size_t total = 0;
    for (int32_t s = 0; s < L; s++) {
        uint64_t *row = pb + (size_t)s * lw;
        int32_t k = order[s];
        for (int32_t i = p_off[k]; i < p_off[k + 1]; i++) {
            int32_t ps = pos[p_from[i]];
            const uint64_t *pr = pb + (size_t)ps * lw;
            for (size_t w = 0; w < lw; w++)
                row[w] |= pr[w];
            SETBIT(row, ps);
        }
        for (size_t w = 0; w < lw; w++)
            total += (size_t)__builtin_popcountll(row[w]);
    }
    if (total > (size_t)INT32_MAX) {
        rc = berr(b, HPGO_E_LIMIT, 0, "too many predecessor entries (%zu)", total);
        goto done;
    }
    st->pred_idx = malloc((total ? total : 1) * sizeof *st->pred_idx);
    if (!st->pred_idx) {
        rc = nomem(b);
        goto done;
    }
    size_t pi = 0, li = 0, xi = 0;
    for (int32_t s = 0; s < L; s++) {
        const uint64_t *row = pb + (size_t)s * lw;
        st->pred_off[s] = (int32_t)pi;
        for (size_t w = 0; w < lw; w++) {
            uint64_t bits = row[w];
            while (bits) {
                st->pred_idx[pi++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
                bits &= bits - 1;
            }
        }
        int32_t k = order[s];
        const char *lab = g->nodes[b->orig[b->lists.v[b->ac_off[k]]]].desc;
        size_t ln = strlen(lab) + 1;
        memcpy(si->labels + li, lab, ln);
        st->label[s] = si->labels + li;
        li += ln;

        /* X_s in augment order; cover = X_s + anc(X_s), summed in file
         * order.  The extras of X_s are ancestors of the antichain A_s, so
         * cover = A_s + anc(A_s). */
        const int32_t *X = b->lists.v + b->aug_off[k];
        int32_t nx = b->aug_len[k];
        st->set_off[s] = (int32_t)xi;
        double oa = 0.0;
        for (int32_t i = 0; i < nx; i++) {
            oa += g->nodes[b->orig[X[i]]].act_bytes;
            st->set_idx[xi++] = b->orig[X[i]];
        }
        const int32_t *A = b->lists.v + b->ac_off[k];
        memset(cover, 0, b->words * sizeof *cover);
        for (int32_t i = 0; i < b->ac_len[k]; i++) {
            const uint64_t *ra = b->anc + (size_t)A[i] * b->words;
            for (size_t w = 0; w < b->words; w++)
                cover[w] |= ra[w];
            SETBIT(cover, A[i]);
        }
        double ct = 0.0, act = 0.0, par = 0.0;
        for (size_t w = 0; w < b->words; w++) {
            uint64_t bits = cover[w];
            while (bits) {
                const hpgo_node_t *nd =
                    &g->nodes[b->orig[w * 64 + (size_t)__builtin_ctzll(bits)]];
                bits &= bits - 1;
                ct += (nd->fwd_ms + nd->bwd_ms) / 1000.0;
                act += nd->act_bytes;
                par += nd->par_bytes;
            }
        }
        st->ct[s] = ct;
        st->act[s] = act;
        st->par[s] = par;
        st->oa[s] = oa;
    }
    st->pred_off[L] = (int32_t)pi;
    st->set_off[L] = (int32_t)xi;
    *out = st;
    si = NULL;
done:
    if (si)
        hpgo_states_free(&si->pub);
    free(rank);
    free(ri);
    free(lrank);
    free(lk);
    free(c_off);
    free(c_to);
    free(p_off);
    free(p_from);
    free(order);
    free(pos);
    free(stk);
    free(sci);
    free(mark);
    free(pb);
    free(cover);
    return rc;
}

static void builder_free(builder *b)
{
    free(b->orig);
    free(b->out_off);
    free(b->out_to);
    free(b->in_off);
    free(b->in_from);
    free(b->in_eid);
    free(b->eid_line_src);
    free(b->topo);
    free(b->anc);
    free(b->des);
    free(b->branch);
    free(b->f_len);
    free(b->f_off);
    free(b->f_data.v);
    free(b->lists.v);
    free(b->ac_off);
    free(b->aug_off);
    free(b->ac_len);
    free(b->aug_len);
    free(b->expanded);
    km_free(&b->dagmap);
    km_free(&b->redmap);
    free(b->e_from.v);
    free(b->e_to.v);
    free(b->queue.v);
    free(b->s_aa);
    free(b->s_list);
    free(b->s_key);
    free(b->s_sorted);
    free(b->s_bkey);
    free(b->s_red);
    free(b->stamp);
    free(b->in_ac);
    free(b->lbits);
}

int hpgo_states_build(const hpgo_graph_t *g, hpgo_states_t **out, hpgo_err_t *err)
{
    hpgo_err_clear(err);
    if (!g || !out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hpgo_states_build: NULL argument");
    *out = NULL;
    if (g->n_nodes < 0 || g->n_edges < 0 || (g->n_nodes > 0 && !g->nodes) ||
        (g->n_edges > 0 && (!g->edge_src || !g->edge_dst || !g->edge_line)))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hpgo_states_build: malformed graph");
    for (int32_t e = 0; e < g->n_edges; e++)
        if (g->edge_src[e] < 0 || g->edge_src[e] >= g->n_nodes || g->edge_dst[e] < 0 ||
            g->edge_dst[e] >= g->n_nodes)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "hpgo_states_build: edge %d names node index out of range",
                                (int)e);
    builder b;
    memset(&b, 0, sizeof b);
    b.g = g;
    b.err = err;
    int rc = cleanup(&b);
    if (rc == HPGO_OK)
        rc = reachability(&b);
    if (rc == HPGO_OK)
        rc = enumerate(&b);
    if (rc == HPGO_OK)
        rc = finish(&b, out);
    builder_free(&b);
    return rc;
}

void hpgo_states_free(hpgo_states_t *s)
{
    if (!s)
        return;
    states_impl *si = (states_impl *)s;
    free(s->ct);
    free(s->act);
    free(s->par);
    free(s->oa);
    free(s->pred_off);
    free(s->pred_idx);
    free(s->label);
    free(s->set_off);
    free(s->set_idx);
    free(si->labels);
    free(si);
}
