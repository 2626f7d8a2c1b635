/* plan_hpgo.c - HPGO's AsyncOrchestrate planner (spec/hpgo-compat.md 5.4, 7).
 *
 * DESIGN
 * For a pipeline width i (rp = N / i replicas, a "unit" = rp GPUs) the table
 * A[j][m] maps GPU-occupancy bitsets ("keys") to cells {value, split, units,
 * from, gpus}, plus one special PH cell holding the best cell of A[j][m].  A
 * cell's value is the slowest pipeline element (stage compute / its GPUs, or
 * the activation transfer into a stage) of the best plan found for states
 * 0..j on m+1 units.  Keys are kept in a sorted array per cell in HPGO's key
 * order (boolean vectors, lexicographic, GPU 0 first), so iterating a map
 * visits keys in exactly the original's order and every strict comparison
 * breaks ties the same way (first candidate reaching a value wins).
 *
 * What makes it fast without changing results:
 *  - allocation candidates (next_cards_with_replica) depend only on (key, mp):
 *    they are computed once per DP and cached.  Occupancies are per-machine
 *    prefixes, so the rounds run on vectors of per-machine counts and the
 *    finals reachable from (counts, rounds left) are memoised across all
 *    keys of the DP (see en_visit); the literal walk over bitsets, which
 *    skips a (round, occupancy) already expanded, remains for exhaustive
 *    runs and for tests;
 *  - a row under construction is an unsorted array with a hash index,
 *    sorted into key order once complete (inserts were O(n) memmoves);
 *  - bound pruning with a bound U: a plan's value only grows along its
 *    stages (t = max(prev, stage, transfer)), so with pruning every kept cell
 *    is exactly the original's cell at that key if its value is <= U, and
 *    absent otherwise.  If the final cell's value is <= U the result, its
 *    tie-breaking and its backtracked stages are therefore unchanged.
 *    Non-straight DPs use U = the final cell's initial data-parallel value
 *    and keep only cells strictly below it (only a strictly faster plan
 *    replaces that value; see beyond()); straight DPs try growing guesses,
 *    the last try unbounded;
 *  - rows (j, m) that cannot reach A[L-1][i-1] within U are never built:
 *    each remaining stage needs a state, and by the mediant inequality the
 *    slowest remaining stage takes at least the remaining compute over the
 *    remaining GPUs (a 1e-9 relative margin covers rounding);
 *  - widths that do not divide N make no transition in HPGO (quirk 2): their
 *    result is the closed-form initial value;
 *  - cells are variable-width bitsets in sorted arrays; each map remembers
 *    its PH cell by index (the PH cell is always the entry at its own key).
 * hpgo_plan_opts_t.exhaustive = 1 runs the literal programme (tests compare).
 * A DP whose tables would exceed its memory limit (HPGO_PLAN_MAX_BYTES)
 * stops and reports its
 * candidate as not planned (status HPGO_E_LIMIT): deterministic, unlike a
 * time limit.
 *
 * Complexity: sum over m, j, k in preds(j), mp <= m of |A[k][m-mp]| times the
 * candidates per key; memory O(L * i * keys).  Each DP is sequential; the
 * candidates of one orchestration are independent and may run in parallel
 * (see hpgo_orchestrate).  No global state: thread-safe. */
#include "plan_hpgo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* ---------------------------------------------------------------- bitsets */

static inline int set_cmp(const uint64_t *a, const uint64_t *b, int nw)
{
    /* HPGO key order: boolean vectors compared lexicographically from GPU 0,
     * false < true. */
    for (int w = 0; w < nw; w++) {
        uint64_t x = a[w] ^ b[w];
        if (x) {
            int bit = __builtin_ctzll(x);
            return ((a[w] >> bit) & 1u) ? 1 : -1;
        }
    }
    return 0;
}

static inline int set_eq(const uint64_t *a, const uint64_t *b, int nw)
{
    for (int w = 0; w < nw; w++)
        if (a[w] != b[w])
            return 0;
    return 1;
}

static inline void set_or(hpgo_gpuset_t *d, const hpgo_gpuset_t *a, const hpgo_gpuset_t *b,
                          int nw)
{
    for (int w = 0; w < nw; w++)
        d->w[w] = a->w[w] | b->w[w];
}

static inline uint64_t set_hash(const uint64_t *a, int nw, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (int w = 0; w < nw; w++) {
        h ^= a[w];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* ------------------------------------------------------ GPU allocation 5.4 */

/* Bits [lo, hi) of word w as a mask. */
static inline uint64_t word_mask(int32_t w, int32_t lo, int32_t hi)
{
    int32_t b0 = w * 64, a = lo > b0 ? lo - b0 : 0, b = hi < b0 + 64 ? hi - b0 : 64;
    if (a >= b)
        return 0;
    return (b - a == 64) ? ~0ull : (((1ull << (b - a)) - 1) << a);
}

/* Free GPUs in [lo, hi). */
static int32_t range_free(const hpgo_gpuset_t *occ, int32_t lo, int32_t hi)
{
    int32_t n = 0;
    for (int32_t w = lo >> 6; w <= (hi - 1) >> 6; w++)
        n += __builtin_popcountll(~occ->w[w] & word_mask(w, lo, hi));
    return n;
}

/* Lowest free GPU in [lo, hi), -1 if none. */
static int32_t lowest_free(const hpgo_gpuset_t *occ, int32_t lo, int32_t hi)
{
    for (int32_t w = lo >> 6; lo < hi && w <= (hi - 1) >> 6; w++) {
        uint64_t f = ~occ->w[w] & word_mask(w, lo, hi);
        if (f)
            return w * 64 + __builtin_ctzll(f);
    }
    return -1;
}

int hpgo_next_cards(const hpgo_topo_t *t, const hpgo_gpuset_t *occ, int32_t need,
                    hpgo_gpuset_t out[3])
{
    int32_t M = t->machines;
    int32_t left_total = 0;
    int32_t left[HPGO_MAX_GPUS];
    uint8_t fresh[HPGO_MAX_GPUS];
    for (int32_t k = 0; k < M; k++) {
        int32_t lo = k ? t->seps[k - 1] : 0, hi = t->seps[k];
        int32_t n = range_free(occ, lo, hi);
        left[k] = n;
        fresh[k] = (uint8_t)(n == hi - lo);
        left_total += n;
    }
    int count = 0;
    if (need <= 0 || left_total < need)
        return 0;
    /* FreshFirst and AppendFirst: the same walk over fresh / non-fresh machines */
    for (int strategy = 0; strategy < 2; strategy++) {
        hpgo_gpuset_t s = {{0}};
        int32_t rem = need;
        int broken = 0;
        for (int32_t k = 0; k < M && rem > 0; k++) {
            if (fresh[k] != (strategy == 0))
                continue;
            int32_t lo = k ? t->seps[k - 1] : 0, hi = t->seps[k];
            if (strategy == 1 && left[k] == 0) {
                /* HPGO scans on past the machine's end for a free id and
                 * panics when it runs past the last GPU (quirk 13): treat
                 * that as "no AppendFirst allocation". */
                if (lowest_free(occ, lo, t->n) < 0)
                    broken = 1;
                continue;
            }
            int32_t take = left[k] < rem ? left[k] : rem;
            rem -= take;
            for (int32_t w = lo >> 6; take > 0 && w <= (hi - 1) >> 6; w++) {
                uint64_t f = ~occ->w[w] & word_mask(w, lo, hi);
                while (f && take > 0) {
                    s.w[w] |= f & -f;
                    f &= f - 1;
                    take--;
                }
            }
        }
        if (rem == 0 && !broken)
            out[count++] = s;
    }
    /* ScatterFirst: round robin, lowest free id of each machine in turn */
    {
        hpgo_gpuset_t s = {{0}}, cur = *occ;
        int32_t rem = need;
        while (rem > 0) {
            int progress = 0;
            for (int32_t k = 0; k < M && rem > 0; k++) {
                if (left[k] == 0)
                    continue;
                int32_t lo = k ? t->seps[k - 1] : 0, hi = t->seps[k];
                int32_t g = lowest_free(&cur, lo, hi);
                hpgo_gpuset_add(&s, g);
                hpgo_gpuset_add(&cur, g);
                left[k]--;
                rem--;
                progress = 1;
            }
            if (!progress)
                break;
        }
        if (rem == 0)
            out[count++] = s;
    }
    /* keep the first occurrence of each set */
    int n = 0;
    for (int a = 0; a < count; a++) {
        int dup = 0;
        for (int b = 0; b < n; b++)
            if (set_eq(out[a].w, out[b].w, HPGO_GPUSET_WORDS))
                dup = 1;
        if (!dup)
            out[n++] = out[a];
    }
    return n;
}

/* ------------------------------------------------------------ score 7.5 */

double hpgo_analytical_speedup(const hpgo_model_t *m, const hpgo_topo_t *t, int32_t rp, double T,
                               const hpgo_stage_t *st, int32_t ns)
{
    double t1 = hpgo_model_total_time(m);
    uint32_t mbs = m->min_micro_batch_size ? m->min_micro_batch_size : 1;
    uint32_t M = m->gbs / (uint32_t)rp / mbs;
    if (M == 0)
        return 0.0;
    double block = T / (double)M;
    double length = block * (double)(M - 1) + t1 / (double)rp / (double)M;
    for (int32_t s = 0; s + 1 < ns; s++)
        length += hpgo_topo_split_concat_time(
            t, &st[s].gpus, &st[s + 1].gpus,
            hpgo_model_oa(m, st[s].b - 1) / (double)rp / (double)M);
    double delta = 0.0;
    for (int32_t s = 0; s < ns; s++) {
        double ar = hpgo_topo_all_reduce_time(t, &st[s].gpus, hpgo_model_pa(m, st[s].a, st[s].b));
        double d = ar - (double)s * block;
        if (d > delta)
            delta = d;
    }
    return t1 / (length + delta);
}

/* ------------------------------------------------------------- DP tables */

/* A cell is this header followed by two bitsets of nw words each: its key
 * (occupancy after the stage) and its stage's GPUs.  Variable width keeps a
 * 16-GPU cell at 40 bytes while allowing up to HPGO_MAX_GPUS. */
typedef struct cell {
    double value;
    int32_t split_k;  /* previous stage ends at state split_k; -1: no split */
    int32_t split_m;
    int32_t units;
    int32_t from;     /* index of the predecessor entry in A[split_k][split_m] */
} cell_t;

#define CKEY(c) ((uint64_t *)((cell_t *)(c) + 1))
#define CGPUS(c, nw) (CKEY(c) + (nw))

typedef struct cmap {
    unsigned char *buf; /* n cells of `stride` bytes, sorted by key */
    int32_t n, cap;
    int8_t has_ph;      /* PH cell present */
    int8_t ph_none;     /* PH value is "none" */
    int32_t ph;         /* index of the PH cell (always the entry at its key) */
} cmap_t;

/* The candidates of one (key, mp): n pairs of nw-word bitsets, the new
 * stage's GPUs (all rounds) then the occupancy after it (key | GPUs),
 * after the key itself. */
typedef struct cc_slot {
    uint64_t hash;
    int32_t mp;       /* 0 = empty slot */
    int32_t n;        /* candidates */
    uint64_t *w;      /* key, then n x (gpus, occ), nw words each */
} cc_slot_t;

typedef struct dp {
    const hpgo_model_t *m;
    const hpgo_topo_t *t;
    int32_t L, N, i, rp, nw;
    size_t stride;      /* bytes per cell */
    size_t bytes;       /* memory held by cell maps and candidate lists */
    size_t max_bytes;   /* limit on bytes */
    int straight;
    int prune;
    int limit_hit;      /* a table would have exceeded max_bytes */
    hpgo_cancel_t *cancel; /* the caller's flag (NULL: never) */
    uint32_t tick;      /* inner iterations since the flag was last read */
    int strict;         /* prune values >= bound, not just > bound */
    double bound;
    cmap_t *A;          /* L * i */
    int32_t *n_alive;   /* L: rows of state k that can still be transition sources */
    int32_t *alive_m;   /* L * i: which rows (ascending), alive_m[k * i + a] */
    double *oa2;        /* L: 2 * OA[k], forward + backward transfer bytes */
    const double *ctp;  /* unscaled prefix sums of CT */
    cc_slot_t *cc;      /* candidate cache, open addressing */
    size_t cc_cap, cc_n;
    /* scratch for the replica enumeration */
    hpgo_gpuset_t *seen;
    int32_t *seen_round;
    size_t seen_cap, seen_n;
    uint64_t *tmp;      /* candidates being collected, 2 * nw words each */
    size_t tmp_n, tmp_cap;
    /* allocation candidates over per-machine counts (see en_visit) */
    int32_t M;          /* machines */
    uint16_t *msize;    /* GPUs per machine */
    uint16_t *ev;       /* en_n vectors of M counts */
    int32_t *e_rem;     /* rounds left */
    int32_t *e_need;
    int32_t *e_loff, *e_llen; /* the state's own finals ("extras") in elist */
    int32_t *e_first;   /* the state whose finals precede the extras; -1 none */
    int32_t *e_total;   /* number of finals */
    int32_t *echain;    /* rp + 2 states: scratch of en_expand */
    uint32_t *e_mark;   /* merge stamps */
    uint64_t *e_hash;
    int32_t *eh;        /* open addressing: state index + 1, 0 = empty */
    size_t en_n, en_cap, eh_cap;
    int32_t *elist;
    size_t elist_n, elist_cap;
    uint16_t *escr;     /* (rp + 1) levels of 4 vectors */
    int32_t *emerge, *eexp;
    size_t tmp_cap_e, eexp_cap; /* their capacities */
    /* the row being built: unsorted, indexed by a hash of its keys */
    uint32_t *bh_gen;   /* slot in use when == bgen */
    int32_t *bh_idx;
    size_t bh_cap;
    uint32_t bgen;
    int32_t *sort_a, *sort_b;
    size_t sort_cap;
    uint32_t egen;
} dp_t;

#define AT(d, j, m) (&(d)->A[(size_t)(j) * (size_t)(d)->i + (size_t)(m)])

static inline cell_t *cmap_at(const cmap_t *mp, size_t stride, int32_t idx)
{
    return (cell_t *)(mp->buf + (size_t)idx * stride);
}

static cell_t *cmap_find(const cmap_t *mp, size_t stride, const uint64_t *key, int nw,
                         int32_t *pos)
{
    int32_t lo = 0, hi = mp->n;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        cell_t *c = cmap_at(mp, stride, mid);
        int r = set_cmp(CKEY(c), key, nw);
        if (r == 0) {
            *pos = mid;
            return c;
        }
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *pos = lo;
    return NULL;
}

/* Store c (stride bytes) at its key, replacing an entry with the same key.
 * -1: out of memory; -2: the DP's memory budget would be exceeded. */
static int cmap_put(cmap_t *mp, size_t stride, const cell_t *c, int nw, size_t *bytes,
                    size_t max_bytes)
{
    int32_t pos;
    cell_t *e = cmap_find(mp, stride, CKEY(c), nw, &pos);
    if (e) {
        memcpy(e, c, stride);
        return 0;
    }
    if (mp->n == mp->cap) {
        int32_t nc = mp->cap ? mp->cap * 2 : 2;
        if (*bytes + (size_t)(nc - mp->cap) * stride > max_bytes)
            return -2;
        unsigned char *nb = realloc(mp->buf, (size_t)nc * stride);
        if (!nb)
            return -1;
        *bytes += (size_t)(nc - mp->cap) * stride;
        mp->buf = nb;
        mp->cap = nc;
    }
    memmove(mp->buf + (size_t)(pos + 1) * stride, mp->buf + (size_t)pos * stride,
            (size_t)(mp->n - pos) * stride);
    memcpy(mp->buf + (size_t)pos * stride, c, stride);
    mp->n++;
    return 0;
}


/* ------------------------------------------------ the row being built */

/* A destination row gets many inserts (up to one per candidate) and is
 * only read in key order once complete, so it is built unsorted with a hash
 * index (slots are in use when stamped with the row's generation, so
 * starting a row costs nothing) and sorted once at the end (row_end). */

/* Index every entry of mp under the current generation. */
static void bh_index(dp_t *d, const cmap_t *mp)
{
    for (int32_t e = 0; e < mp->n; e++) {
        size_t h = set_hash(CKEY(cmap_at(mp, d->stride, e)), d->nw, 0) & (d->bh_cap - 1);
        while (d->bh_gen[h] == d->bgen)
            h = (h + 1) & (d->bh_cap - 1);
        d->bh_gen[h] = d->bgen;
        d->bh_idx[h] = e;
    }
}

static int bh_resize(dp_t *d, const cmap_t *mp, size_t nc)
{
    if (d->bytes + (nc - d->bh_cap) * (sizeof(uint32_t) + sizeof(int32_t)) > d->max_bytes)
        return -2;
    uint32_t *g = calloc(nc, sizeof *g);
    int32_t *ix = malloc(nc * sizeof *ix);
    if (!g || !ix) {
        free(g);
        free(ix);
        return -1;
    }
    d->bytes += (nc - d->bh_cap) * (sizeof(uint32_t) + sizeof(int32_t));
    free(d->bh_gen);
    free(d->bh_idx);
    d->bh_gen = g;
    d->bh_idx = ix;
    d->bh_cap = nc;
    d->bgen = 1;
    bh_index(d, mp);
    return 0;
}

/* Start building mp (it may hold an initial cell). */
static int row_begin(dp_t *d, const cmap_t *mp)
{
    if (++d->bgen == 0 || !d->bh_cap) {
        if (d->bh_cap)
            memset(d->bh_gen, 0, d->bh_cap * sizeof *d->bh_gen);
        d->bgen = 1;
    }
    size_t need = 64;
    while (need < (size_t)mp->n * 2 + 2)
        need *= 2;
    if (need > d->bh_cap)
        return bh_resize(d, mp, need);
    bh_index(d, mp);
    return 0;
}

/* The entry of the row being built at key, or NULL; *slot: where it goes. */
static cell_t *row_find(const dp_t *d, const cmap_t *mp, const uint64_t *key, size_t *slot)
{
    size_t h = set_hash(key, d->nw, 0) & (d->bh_cap - 1);
    while (d->bh_gen[h] == d->bgen) {
        cell_t *c = cmap_at(mp, d->stride, d->bh_idx[h]);
        if (set_eq(CKEY(c), key, d->nw))
            return c;
        h = (h + 1) & (d->bh_cap - 1);
    }
    *slot = h;
    return NULL;
}

/* Store c at its key in the row being built (replacing an entry with the
 * same key).  -1: out of memory; -2: over the DP's memory limit. */
static int row_put(dp_t *d, cmap_t *mp, const cell_t *c)
{
    size_t slot = 0, stride = d->stride;
    cell_t *e = row_find(d, mp, CKEY(c), &slot);
    if (e) {
        memcpy(e, c, stride);
        return 0;
    }
    if (mp->n == mp->cap) {
        int32_t nc = mp->cap ? mp->cap * 2 : 2;
        if (d->bytes + (size_t)(nc - mp->cap) * stride > d->max_bytes)
            return -2;
        unsigned char *nb = realloc(mp->buf, (size_t)nc * stride);
        if (!nb)
            return -1;
        d->bytes += (size_t)(nc - mp->cap) * stride;
        mp->buf = nb;
        mp->cap = nc;
    }
    memcpy(mp->buf + (size_t)mp->n * stride, c, stride);
    mp->n++;
    if ((size_t)mp->n * 2 > d->bh_cap)
        return bh_resize(d, mp, d->bh_cap * 2);
    d->bh_gen[slot] = d->bgen;
    d->bh_idx[slot] = mp->n - 1;
    return 0;
}

/* Finish the row: sort its entries into HPGO's key order (bottom-up merge
 * sort of indices, then one permutation). */
static int row_end(dp_t *d, cmap_t *mp)
{
    int32_t n = mp->n;
    if (n < 2)
        return 0;
    size_t stride = d->stride;
    if ((size_t)n > d->sort_cap) {
        size_t nc = (size_t)n * 2;
        int32_t *a = realloc(d->sort_a, nc * sizeof *a);
        if (a)
            d->sort_a = a;
        int32_t *b = a ? realloc(d->sort_b, nc * sizeof *b) : NULL;
        if (!b)
            return -1;
        d->sort_b = b;
        d->sort_cap = nc;
    }
    int32_t *a = d->sort_a, *b = d->sort_b;
    for (int32_t x = 0; x < n; x++)
        a[x] = x;
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int32_t p = lo, q = mid, o = lo;
            while (p < mid && q < hi)
                b[o++] = set_cmp(CKEY(cmap_at(mp, stride, a[q])), CKEY(cmap_at(mp, stride, a[p])),
                                 d->nw) < 0
                             ? a[q++]
                             : a[p++];
            while (p < mid)
                b[o++] = a[p++];
            while (q < hi)
                b[o++] = a[q++];
        }
        int32_t *t = a;
        a = b;
        b = t;
    }
    unsigned char *nb = malloc((size_t)mp->cap * stride);
    if (!nb)
        return -1;
    for (int32_t x = 0; x < n; x++)
        memcpy(nb + (size_t)x * stride, mp->buf + (size_t)a[x] * stride, stride);
    free(mp->buf);
    mp->buf = nb;
    return 0;
}

/* ----------------------------------------- next_cards_with_replica + cache */

static int seen_add(dp_t *d, const hpgo_gpuset_t *occ, int32_t round)
{
    /* open-addressing set of (round, occupancy); returns 1 if newly added,
     * 0 if present, -1 on out of memory */
    if ((d->seen_n + 1) * 2 > d->seen_cap) {
        size_t nc = d->seen_cap ? d->seen_cap * 2 : 64;
        hpgo_gpuset_t *ns = malloc(nc * sizeof *ns);
        int32_t *nr = malloc(nc * sizeof *nr);
        if (!ns || !nr) {
            free(ns);
            free(nr);
            return -1;
        }
        for (size_t a = 0; a < nc; a++)
            nr[a] = -1;
        for (size_t a = 0; a < d->seen_cap; a++) {
            if (d->seen_round[a] < 0)
                continue;
            size_t h = set_hash(d->seen[a].w, d->nw, (uint64_t)d->seen_round[a]) & (nc - 1);
            while (nr[h] >= 0)
                h = (h + 1) & (nc - 1);
            ns[h] = d->seen[a];
            nr[h] = d->seen_round[a];
        }
        free(d->seen);
        free(d->seen_round);
        d->seen = ns;
        d->seen_round = nr;
        d->seen_cap = nc;
    }
    size_t h = set_hash(occ->w, d->nw, (uint64_t)round) & (d->seen_cap - 1);
    while (d->seen_round[h] >= 0) {
        if (d->seen_round[h] == round && set_eq(d->seen[h].w, occ->w, d->nw))
            return 0;
        h = (h + 1) & (d->seen_cap - 1);
    }
    d->seen[h] = *occ;
    d->seen_round[h] = round;
    d->seen_n++;
    return 1;
}

static void seen_reset(dp_t *d)
{
    for (size_t a = 0; a < d->seen_cap; a++)
        d->seen_round[a] = -1;
    d->seen_n = 0;
}

static int tmp_push(dp_t *d, const hpgo_gpuset_t *gpus, const hpgo_gpuset_t *occ)
{
    size_t nw = (size_t)d->nw;
    if (d->tmp_n == d->tmp_cap) {
        size_t nc = d->tmp_cap ? d->tmp_cap * 2 : 16;
        uint64_t *nt = realloc(d->tmp, nc * 2 * nw * sizeof *nt);
        if (!nt)
            return -1;
        d->tmp = nt;
        d->tmp_cap = nc;
    }
    memcpy(d->tmp + d->tmp_n * 2 * nw, gpus->w, nw * sizeof(uint64_t));
    memcpy(d->tmp + d->tmp_n * 2 * nw + nw, occ->w, nw * sizeof(uint64_t));
    d->tmp_n++;
    return 0;
}

/* Depth-first over rp rounds, strategies in canonical order.  A (round,
 * occupancy) already expanded produces only sets already emitted. */
static int replica_dfs(dp_t *d, const hpgo_gpuset_t *base, const hpgo_gpuset_t *occ,
                       int32_t round, int32_t need)
{
    if (round == d->rp) {
        hpgo_gpuset_t gpus;
        for (int w = 0; w < HPGO_GPUSET_WORDS; w++)
            gpus.w[w] = occ->w[w] & ~base->w[w];
        return tmp_push(d, &gpus, occ);
    }
    hpgo_gpuset_t next[3];
    int n = hpgo_next_cards(d->t, occ, need, next);
    for (int c = 0; c < n; c++) {
        hpgo_gpuset_t o;
        set_or(&o, occ, &next[c], HPGO_GPUSET_WORDS);
        int added = seen_add(d, &o, round + 1);
        if (added < 0)
            return -1;
        if (added && replica_dfs(d, base, &o, round + 1, need) < 0)
            return -1;
    }
    return 0;
}

/* Allocation candidates over per-machine counts.
 *
 * Every strategy of hpgo_next_cards takes the lowest free ids of a machine,
 * and every DP key starts as a prefix of the GPUs, so every occupancy the
 * planner meets is a per-machine prefix: machine k's first c[k] GPUs.  An
 * occupancy is then a vector of M counts, next_cards an O(M) step on it,
 * and the candidates of (key, mp) depend only on (counts, rounds left, mp).
 *
 * F(r, c), the finals reached from counts c in r more rounds in depth-first
 * order (first occurrence kept), is the ordered union of F(r - 1, child)
 * over c's children in strategy order.  F is memoised for the whole DP
 * (every key and width), so the many keys whose searches pass through the
 * same intermediate occupancies share the work, where the per-key search
 * visited each of them again (hundreds of thousands of states per key for
 * uniform models on hundreds of GPUs).  Two closed forms end a branch: too
 * few free GPUs (no final) and exactly enough (the one final "all busy";
 * ScatterFirst never fails while enough GPUs are free).  Keys that are not
 * per-machine prefixes (none arise) fall back to replica_dfs. */

/* The children of counts c (next_cards with `need`), written to out[0..2]
 * in strategy order without duplicates; returns how many. */
static int en_next(const dp_t *d, const uint16_t *c, int32_t need, uint16_t *out)
{
    int32_t M = d->M, free_total = 0;
    for (int32_t k = 0; k < M; k++)
        free_total += d->msize[k] - c[k];
    if (need <= 0 || free_total < need)
        return 0;
    int n = 0;
    for (int strategy = 0; strategy < 3; strategy++) {
        uint16_t *o = out + (size_t)n * (size_t)M;
        memcpy(o, c, (size_t)M * sizeof *o);
        int32_t rem = need;
        if (strategy < 2) {
            /* FreshFirst (untouched machines) / AppendFirst (the others);
             * AppendFirst's scan past a full machine (quirk 13) only fails
             * when no later GPU is free, and then the walk fails anyway */
            for (int32_t k = 0; k < M && rem > 0; k++) {
                if ((c[k] == 0) != (strategy == 0))
                    continue;
                int32_t left = d->msize[k] - c[k], take = left < rem ? left : rem;
                o[k] = (uint16_t)(o[k] + take);
                rem -= take;
            }
        } else {
            /* ScatterFirst: one GPU from each machine with a free one, in
             * turn, until enough */
            while (rem > 0) {
                for (int32_t k = 0; k < M && rem > 0; k++)
                    if (o[k] < d->msize[k]) {
                        o[k]++;
                        rem--;
                    }
            }
        }
        if (rem != 0)
            continue;
        int dup = 0;
        for (int b = 0; b < n && !dup; b++)
            dup = !memcmp(out + (size_t)b * (size_t)M, o, (size_t)M * sizeof *o);
        if (!dup)
            n++;
    }
    return n;
}

static uint64_t en_hash(const uint16_t *c, int32_t M, int32_t rem, int32_t need)
{
    uint64_t h = 1469598103934665603ull ^ ((uint64_t)(uint32_t)rem << 32 | (uint32_t)need);
    for (int32_t k = 0; k < M; k++) {
        h ^= c[k];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 31);
}

/* Grow *p (elements of `size` bytes) to hold n, counting the bytes against
 * the DP's limit.  0, -1 out of memory, -2 over the limit. */
static int en_grow(dp_t *d, void **p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < n)
        nc *= 2;
    if (d->bytes + (nc - *cap) * size > d->max_bytes)
        return -2;
    void *np = realloc(*p, nc * size);
    if (!np)
        return -1;
    d->bytes += (nc - *cap) * size;
    *p = np;
    *cap = nc;
    return 0;
}

/* Index of state (rem, need, c), -1 if absent; *slot receives its slot. */
static int32_t en_find(const dp_t *d, const uint16_t *c, int32_t rem, int32_t need, uint64_t h,
                       size_t *slot)
{
    *slot = 0;
    if (!d->eh_cap)
        return -1;
    size_t s = h & (d->eh_cap - 1);
    while (d->eh[s]) {
        int32_t x = d->eh[s] - 1;
        if (d->e_hash[x] == h && d->e_rem[x] == rem && d->e_need[x] == need &&
            !memcmp(d->ev + (size_t)x * (size_t)d->M, c, (size_t)d->M * sizeof *c))
            return x;
        s = (s + 1) & (d->eh_cap - 1);
    }
    *slot = s;
    return -1;
}

static int re_alloc(void **p, size_t n, size_t size)
{
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

/* Add state (rem, need, c) with an empty final list; its index, or -1 / -2
 * as en_grow. */
static int32_t en_add(dp_t *d, const uint16_t *c, int32_t rem, int32_t need)
{
    size_t M = (size_t)d->M, n = d->en_n + 1, cap = d->en_cap;
    if (n > cap) {
        size_t nc = cap ? cap * 2 : 256;
        size_t per = M * sizeof(uint16_t) + 7 * sizeof(int32_t) + sizeof(uint32_t) +
                     sizeof(uint64_t);
        if (d->bytes + (nc - cap) * per > d->max_bytes)
            return -2;
        /* an array that grew before a failure keeps its size: harmless */
        if (re_alloc((void **)&d->ev, nc * M, sizeof *d->ev) ||
            re_alloc((void **)&d->e_rem, nc, sizeof *d->e_rem) ||
            re_alloc((void **)&d->e_need, nc, sizeof *d->e_need) ||
            re_alloc((void **)&d->e_loff, nc, sizeof *d->e_loff) ||
            re_alloc((void **)&d->e_llen, nc, sizeof *d->e_llen) ||
            re_alloc((void **)&d->e_first, nc, sizeof *d->e_first) ||
            re_alloc((void **)&d->e_total, nc, sizeof *d->e_total) ||
            re_alloc((void **)&d->e_mark, nc, sizeof *d->e_mark) ||
            re_alloc((void **)&d->e_hash, nc, sizeof *d->e_hash))
            return -1;
        memset(d->e_mark + cap, 0, (nc - cap) * sizeof *d->e_mark);
        d->bytes += (nc - cap) * per;
        d->en_cap = nc;
    }
    if (n * 2 > d->eh_cap) {
        size_t nc = d->eh_cap ? d->eh_cap * 2 : 512;
        if (d->bytes + (nc - d->eh_cap) * sizeof(int32_t) > d->max_bytes)
            return -2;
        int32_t *nh = calloc(nc, sizeof *nh);
        if (!nh)
            return -1;
        for (size_t x = 0; x < d->en_n; x++) {
            size_t s = d->e_hash[x] & (nc - 1);
            while (nh[s])
                s = (s + 1) & (nc - 1);
            nh[s] = (int32_t)x + 1;
        }
        d->bytes += (nc - d->eh_cap) * sizeof(int32_t);
        free(d->eh);
        d->eh = nh;
        d->eh_cap = nc;
    }
    uint64_t h = en_hash(c, d->M, rem, need);
    size_t slot = 0;
    en_find(d, c, rem, need, h, &slot);
    int32_t x = (int32_t)d->en_n++;
    memcpy(d->ev + (size_t)x * M, c, M * sizeof *c);
    d->e_rem[x] = rem;
    d->e_need[x] = need;
    d->e_hash[x] = h;
    d->e_loff[x] = 0;
    d->e_llen[x] = 0;
    d->e_first[x] = -1;
    d->e_total[x] = 0;
    d->e_mark[x] = 0;
    d->eh[slot] = x + 1;
    return x;
}

/* Give state x the extras fin[0..n) (appended to the arena). */
static int en_set_list(dp_t *d, int32_t x, const int32_t *fin, int32_t n)
{
    if (n == 0)
        return 0;
    int rc = en_grow(d, (void **)&d->elist, &d->elist_cap, d->elist_n + (size_t)n,
                     sizeof *d->elist);
    if (rc < 0)
        return rc;
    if (d->elist_n + (size_t)n > INT32_MAX)
        return -2;
    memcpy(d->elist + d->elist_n, fin, (size_t)n * sizeof *fin);
    d->e_loff[x] = (int32_t)d->elist_n;
    d->e_llen[x] = n;
    d->elist_n += (size_t)n;
    return 0;
}

/* The finals of state x, in order, into d->eexp (e_total[x] of them): the
 * finals of e_first[x], recursively, then x's extras.  Lists are stored
 * this way because most of a state's finals are its first child's: a
 * materialised list per state took O(states x finals) memory.  0, or -1 /
 * -2 as en_grow. */
static int en_expand(dp_t *d, int32_t x)
{
    int rc = en_grow(d, (void **)&d->eexp, &d->eexp_cap,
                     (size_t)(d->e_total[x] ? d->e_total[x] : 1), sizeof *d->eexp);
    if (rc < 0)
        return rc;
    int32_t depth = 0;
    for (int32_t y = x; y >= 0; y = d->e_first[y])
        d->echain[depth++] = y; /* each hop loses a round: depth <= rp + 1 */
    size_t n = 0;
    while (depth > 0) {
        int32_t y = d->echain[--depth];
        if (d->e_llen[y])
            memcpy(d->eexp + n, d->elist + d->e_loff[y], (size_t)d->e_llen[y] * sizeof *d->eexp);
        n += (size_t)d->e_llen[y];
    }
    return 0;
}

/* F(rem, c) for the vector at level `lv` of the scratch: the index of its
 * state (whose list holds the finals), or -1 / -2 as en_grow.  Recursion
 * depth is at most rp. */
static int32_t en_visit(dp_t *d, int32_t lv, int32_t rem, int32_t need)
{
    size_t M = (size_t)d->M;
    uint16_t *c = d->escr + (size_t)lv * 4 * M;
    size_t slot;
    int32_t x = en_find(d, c, rem, need, en_hash(c, d->M, rem, need), &slot);
    if (x >= 0)
        return x;
    int32_t free_total = 0;
    for (size_t k = 0; k < M; k++)
        free_total += d->msize[k] - c[k];
    if (rem == 0 || free_total == rem * need) {
        /* a final, or the closed form "exactly enough": all GPUs busy */
        uint16_t *f = c + M; /* scratch: the final's counts */
        if (rem == 0)
            memcpy(f, c, M * sizeof *f);
        else
            memcpy(f, d->msize, M * sizeof *f);
        int32_t fx = en_find(d, f, 0, need, en_hash(f, d->M, 0, need), &slot);
        if (fx < 0) {
            if ((fx = en_add(d, f, 0, need)) < 0)
                return fx;
            int rc = en_set_list(d, fx, &fx, 1);
            if (rc < 0)
                return rc;
            d->e_total[fx] = 1;
        }
        if (rem == 0)
            return fx;
        if ((x = en_add(d, c, rem, need)) < 0)
            return x;
        d->e_first[x] = fx;
        d->e_total[x] = 1;
        return x;
    }
    if (free_total < rem * need) /* some round finds too few free GPUs */
        return en_add(d, c, rem, need);
    int nch = en_next(d, c, need, c + M);
    int32_t ch[3];
    for (int a = 0; a < nch; a++) {
        uint16_t *next = d->escr + (size_t)(lv + 1) * 4 * M;
        memcpy(next, d->escr + (size_t)lv * 4 * M + (size_t)(a + 1) * M, M * sizeof *next);
        if ((ch[a] = en_visit(d, lv + 1, rem - 1, need)) < 0)
            return ch[a];
    }
    if ((x = en_add(d, d->escr + (size_t)lv * 4 * M, rem, need)) < 0)
        return x;
    if (nch == 0)
        return x;
    /* ordered union of the children's finals: the first child's, then the
     * others' finals not seen before (the extras) */
    d->e_first[x] = ch[0];
    d->e_total[x] = d->e_total[ch[0]];
    if (nch == 1)
        return x;
    if (++d->egen == 0) {
        memset(d->e_mark, 0, d->en_cap * sizeof *d->e_mark);
        d->egen = 1;
    }
    int32_t n = 0;
    for (int a = 0; a < nch; a++) {
        int rc = en_expand(d, ch[a]);
        if (rc < 0)
            return rc;
        if (a > 0 && (rc = en_grow(d, (void **)&d->emerge, &d->tmp_cap_e,
                                   (size_t)n + (size_t)d->e_total[ch[a]] + 1,
                                   sizeof *d->emerge)) < 0)
            return rc;
        for (int32_t q = 0; q < d->e_total[ch[a]]; q++) {
            int32_t f = d->eexp[q];
            if (d->e_mark[f] != d->egen) {
                d->e_mark[f] = d->egen;
                if (a > 0)
                    d->emerge[n++] = f;
            }
        }
    }
    int rc = en_set_list(d, x, d->emerge, n);
    if (rc < 0)
        return rc;
    d->e_total[x] += n;
    return x;
}

/* The occupancy of counts c: machine k's first c[k] GPUs. */
static void en_prefix(const dp_t *d, const uint16_t *c, hpgo_gpuset_t *out)
{
    memset(out, 0, sizeof *out);
    for (int32_t k = 0; k < d->M; k++) {
        int32_t lo = k ? d->t->seps[k - 1] : 0, hi = lo + c[k];
        for (int32_t w = lo >> 6; lo < hi && w <= (hi - 1) >> 6; w++)
            out->w[w] |= word_mask(w, lo, hi);
    }
}

/* Candidates of (key, mp) through F when the key is a per-machine prefix:
 * 1 done (d->tmp filled), 0 not a prefix, -1 out of memory, -2 limit. */
static int en_candidates(dp_t *d, const hpgo_gpuset_t *key, int32_t mp)
{
    const hpgo_topo_t *t = d->t;
    size_t M = (size_t)d->M;
    if (!d->msize) {
        d->msize = malloc(M * sizeof *d->msize);
        d->escr = malloc((size_t)(d->rp + 2) * 4 * M * sizeof *d->escr);
        d->echain = malloc((size_t)(d->rp + 2) * sizeof *d->echain);
        if (!d->msize || !d->escr || !d->echain)
            return -1;
        for (size_t k = 0; k < M; k++)
            d->msize[k] = (uint16_t)(t->seps[k] - (k ? t->seps[k - 1] : 0));
    }
    uint16_t *c = d->escr;
    hpgo_gpuset_t pre;
    for (size_t k = 0; k < M; k++) {
        int32_t lo = k ? t->seps[k - 1] : 0;
        c[k] = (uint16_t)(d->msize[k] - range_free(key, lo, t->seps[k]));
    }
    en_prefix(d, c, &pre);
    if (!set_eq(pre.w, key->w, HPGO_GPUSET_WORDS))
        return 0;
    int32_t x = en_visit(d, 0, d->rp, mp);
    if (x < 0)
        return x;
    int rc = en_expand(d, x);
    if (rc < 0)
        return rc;
    for (int32_t q = 0; q < d->e_total[x]; q++) {
        hpgo_gpuset_t occ, gpus;
        en_prefix(d, d->ev + (size_t)d->eexp[q] * M, &occ);
        for (int w = 0; w < HPGO_GPUSET_WORDS; w++)
            gpus.w[w] = occ.w[w] & ~key->w[w];
        if (tmp_push(d, &gpus, &occ) < 0)
            return -1;
    }
    return 1;
}

static cc_slot_t *candidates(dp_t *d, const uint64_t *keyw, int32_t mp)
{
    if ((d->cc_n + 1) * 2 > d->cc_cap) {
        size_t nc = d->cc_cap ? d->cc_cap * 2 : 256;
        cc_slot_t *ns = calloc(nc, sizeof *ns);
        if (!ns)
            return NULL;
        for (size_t a = 0; a < d->cc_cap; a++) {
            if (!d->cc[a].mp)
                continue;
            size_t h = d->cc[a].hash & (nc - 1);
            while (ns[h].mp)
                h = (h + 1) & (nc - 1);
            ns[h] = d->cc[a];
        }
        free(d->cc);
        d->cc = ns;
        d->cc_cap = nc;
    }
    uint64_t hv = set_hash(keyw, d->nw, (uint64_t)mp);
    size_t h = hv & (d->cc_cap - 1);
    while (d->cc[h].mp) {
        if (d->cc[h].hash == hv && d->cc[h].mp == mp && set_eq(d->cc[h].w, keyw, d->nw))
            return &d->cc[h];
        h = (h + 1) & (d->cc_cap - 1);
    }
    hpgo_gpuset_t keyset = {{0}};
    memcpy(keyset.w, keyw, (size_t)d->nw * sizeof(uint64_t));
    const hpgo_gpuset_t *key = &keyset;
    d->tmp_n = 0;
    int done = d->prune ? en_candidates(d, key, mp) : 0;
    if (done < 0) {
        d->limit_hit = done == -2;
        return NULL;
    }
    if (!done) {
        seen_reset(d);
        if (replica_dfs(d, key, key, 0, mp) < 0)
            return NULL;
    }
    size_t nw = (size_t)d->nw, words = (1 + 2 * d->tmp_n) * nw;
    d->bytes += words * sizeof(uint64_t);
    if (d->bytes > d->max_bytes)
        return NULL;
    uint64_t *list = malloc(words * sizeof *list);
    if (!list)
        return NULL;
    memcpy(list, keyw, nw * sizeof *list);
    memcpy(list + nw, d->tmp, 2 * d->tmp_n * nw * sizeof *list);
    cc_slot_t *s = &d->cc[h];
    s->hash = hv;
    s->mp = mp;
    s->n = (int32_t)d->tmp_n;
    s->w = list;
    d->cc_n++;
    return s;
}

static void dp_reset(dp_t *d);

static void dp_free(dp_t *d)
{
    dp_reset(d);
    for (size_t a = 0; a < d->cc_cap; a++)
        if (d->cc[a].mp)
            free(d->cc[a].w);
    free(d->cc);
    free(d->seen);
    free(d->seen_round);
    free(d->tmp);
    free(d->msize);
    free(d->ev);
    free(d->e_rem);
    free(d->e_need);
    free(d->e_loff);
    free(d->e_llen);
    free(d->e_first);
    free(d->e_total);
    free(d->echain);
    free(d->eexp);
    free(d->e_mark);
    free(d->e_hash);
    free(d->eh);
    free(d->elist);
    free(d->escr);
    free(d->emerge);
    free(d->bh_gen);
    free(d->bh_idx);
    free(d->sort_a);
    free(d->sort_b);
}


int hpgo_replica_candidates(const hpgo_topo_t *t, const hpgo_gpuset_t *key, int32_t rp,
                            int32_t need, int literal, hpgo_gpuset_t **out, int32_t *n,
                            hpgo_err_t *err)
{
    *out = NULL;
    *n = 0;
    if (!t || !key || rp < 1 || rp > t->n || need < 1 || need > t->n)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "bad arguments to hpgo_replica_candidates");
    dp_t d;
    memset(&d, 0, sizeof d);
    d.t = t;
    d.N = t->n;
    d.rp = rp;
    d.nw = (t->n + 63) / 64;
    d.M = t->machines;
    d.max_bytes = HPGO_PLAN_MAX_BYTES;
    int rc;
    if (literal) {
        rc = replica_dfs(&d, key, key, 0, need);
    } else {
        rc = en_candidates(&d, key, need);
        if (rc == 0) {
            dp_free(&d);
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "the key is not a per-machine prefix");
        }
    }
    if (rc < 0) {
        dp_free(&d);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory enumerating candidates");
    }
    hpgo_gpuset_t *o = calloc(d.tmp_n ? d.tmp_n : 1, sizeof *o);
    if (!o) {
        dp_free(&d);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory enumerating candidates");
    }
    for (size_t a = 0; a < d.tmp_n; a++)
        memcpy(o[a].w, d.tmp + (2 * a + 1) * (size_t)d.nw, (size_t)d.nw * sizeof(uint64_t));
    *out = o;
    *n = (int32_t)d.tmp_n;
    dp_free(&d);
    return HPGO_OK;
}

/* --------------------------------------------------------------- DP 7.3 */

/* Can cell (j, m) lie on a plan that ends in A[L-1][i-1] with a value of at
 * most the bound?  Every remaining stage needs at least one state (straight:
 * one unit each), and by the mediant inequality the slowest remaining stage
 * takes at least the remaining compute over the remaining GPUs; the relative
 * margin of 1e-9 covers the rounding of the differences of prefix sums many
 * times over.  Rows that cannot influence the final cell are never built. */
static int row_useful(const dp_t *d, int32_t j, int32_t m)
{
    int32_t L = d->L, i = d->i;
    if (!d->prune)
        return 1; /* exhaustive: HPGO's literal programme */
    if (m == i - 1)
        return j == L - 1;
    if (j == L - 1)
        return 0;
    if (d->straight && L - 1 - j < i - 1 - m)
        return 0;
    double rem = hpgo_model_ct(d->m, j + 1, L - 1) / (double)((i - 1 - m) * d->rp);
    return !(rem > d->bound + 1e-9 * (d->bound > 0 ? d->bound : 1.0));
}

/* Is a value outside the bound?  Non-straight DPs prune at the final cell's
 * initial value U itself: the final cell only changes for a plan strictly
 * below U and values only grow along a plan, so a cell at U or above never
 * matters (models whose layers split evenly tie at U almost everywhere). */
static inline int beyond(const dp_t *d, double v)
{
    return d->strict ? !(v < d->bound) : v > d->bound;
}

/* split_concat_all2all_time specialised for the DP (same arithmetic as
 * hpgo_topo_split_concat_time): machine masks make "GPUs of F outside T's
 * machine" two popcounts. */
static inline int32_t popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (int32_t)((x * 0x0101010101010101ull) >> 56);
}

/* CT[r][c] as hpgo_model_ct computes it, inlined for the DP's hot loop. */
static inline double ct_entry(const dp_t *d, int32_t r, int32_t c)
{
    double v = r == 0 ? d->ctp[c] : (c >= r ? d->ctp[c] - d->ctp[r - 1] : -1.0);
    for (int32_t f = 0; f < d->m->n_factors; f++)
        v *= d->m->factors[f];
    return v;
}

/* nf = |from|: a DP cell's stage has units * rp GPUs. */
static double dp_transfer(const dp_t *d, const uint64_t *from, int32_t nf,
                          const uint64_t *to, double bytes)
{
    /* to is never empty: a stage has at least one GPU */
    const hpgo_topo_t *t = d->t;
    int32_t lo = -1, hi = -1;
    for (int w = 0; w < d->nw && lo < 0; w++)
        if (to[w])
            lo = w * 64 + __builtin_ctzll(to[w]);
    for (int w = d->nw - 1; w >= 0 && hi < 0; w--)
        if (to[w])
            hi = w * 64 + 63 - __builtin_clzll(to[w]);
    int32_t mt = t->machine_of[lo];
    if (t->machine_of[hi] != mt)
        return bytes / HPGO_ETHERNET_NCCL_BW;
    int32_t mlo = mt ? t->seps[mt - 1] : 0, mhi = t->seps[mt];
    int32_t nin = 0;
    for (int w = 0; w < d->nw; w++) {
        uint64_t f = from[w];
        if (!f)
            continue;
        int32_t b0 = w * 64, b1 = b0 + 64;
        int32_t a = mlo > b0 ? mlo : b0, b = mhi < b1 ? mhi : b1;
        if (a < b) {
            uint64_t mask = (b - a == 64) ? ~0ull : (((1ull << (b - a)) - 1) << (a - b0));
            nin += popcount64(f & mask);
        }
    }
    int32_t nc = nf - nin;
    if (nc > 0)
        return bytes / (double)nf * (double)nc / HPGO_ETHERNET_BW;
    return bytes / HPGO_NVLINK_BW;
}

static int dp_init_cell(dp_t *d, int32_t j, int32_t mm, cell_t *c)
{
    memset(c, 0, d->stride);
    double v = hpgo_model_ct(d->m, 0, j) / (double)(mm + 1) / (double)d->rp;
    c->value = v > 0.0 ? v : 0.0;
    if (d->prune && beyond(d, c->value) && !(j == d->L - 1 && mm == d->i - 1))
        return 0; /* can never be part of a plan within the bound (the final
                   * cell's own initial value is the bound: always kept) */
    c->split_k = -1;
    c->split_m = -1;
    c->units = mm + 1;
    c->from = -1;
    uint64_t *key = CKEY(c), *gpus = CGPUS(c, d->nw);
    for (int32_t g = 0; g < (mm + 1) * d->rp; g++)
        gpus[g >> 6] |= (uint64_t)1 << (g & 63);
    memcpy(key, gpus, (size_t)d->nw * sizeof(uint64_t));
    cmap_t *mp = AT(d, j, mm);
    int rc = cmap_put(mp, d->stride, c, d->nw, &d->bytes, d->max_bytes);
    if (rc < 0)
        return rc;
    int32_t pos;
    cmap_find(mp, d->stride, key, d->nw, &pos);
    mp->has_ph = 1;
    mp->ph = pos;
    return 0;
}

static int dp_run(dp_t *d, hpgo_err_t *err)
{
    const hpgo_model_t *m = d->m;
    int32_t L = d->L, i = d->i, rp = d->rp, nw = d->nw;
    size_t stride = d->stride;
    d->A = calloc((size_t)L * (size_t)i, sizeof(cmap_t));
    d->n_alive = calloc((size_t)L, sizeof(int32_t));
    d->alive_m = malloc((size_t)L * (size_t)i * sizeof(int32_t));
    d->oa2 = malloc((size_t)L * sizeof(double));
    /* two scratch cells: the row's best and the candidate being built */
    unsigned char *scratch = malloc(2 * stride);
    if (!d->A || !d->n_alive || !d->alive_m || !d->oa2 || !scratch) {
        free(scratch);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
    }
    cell_t *best = (cell_t *)scratch, *nc = (cell_t *)(scratch + stride);
    int put = -1;
    for (int32_t k = 0; k < L; k++)
        d->oa2[k] = 2.0 * hpgo_model_oa(m, k);
    d->ctp = hpgo_model_ct_prefix(m);
    /* initial data-parallel blocks (only rows that can matter) */
    int32_t minit = d->straight ? 1 : i;
    for (int32_t j = 0; j < L; j++)
        for (int32_t mm = 0; mm < minit; mm++)
            if (row_useful(d, j, mm) && (put = dp_init_cell(d, j, mm, nc)) < 0)
                goto fail;
    /* keys are occupancy vectors of length N; HPGO skips keys longer than
     * i * rp, i.e. every key when i does not divide N (quirk 2) */
    int transitions = (d->N <= i * rp);
    for (int32_t mm = 1; mm < i && transitions; mm++) {
        /* row mm - 1 is final now: note which of its maps can be sources
         * (the PH test of 7.3, and with pruning a cell within the bound) */
        for (int32_t k = 0; k < L; k++) {
            const cmap_t *src = AT(d, k, mm - 1);
            int ok = src->n > 0 && src->has_ph && !src->ph_none &&
                     !(cmap_at(src, stride, src->ph)->value < -0.5);
            if (ok && d->prune) {
                ok = 0;
                for (int32_t e = 0; e < src->n && !ok; e++)
                    ok = !beyond(d, cmap_at(src, stride, e)->value);
            }
            if (ok)
                d->alive_m[(size_t)k * i + (size_t)d->n_alive[k]++] = mm - 1;
        }
        for (int32_t j = 1; j < L; j++) {
            if (!row_useful(d, j, mm))
                continue;
            if (hpgo_cancelled(d->cancel)) {
                put = -3;
                goto fail;
            }
            cmap_t *dst = AT(d, j, mm);
            if ((put = row_begin(d, dst)) < 0)
                goto fail;
            int best_none = 1;
            if (dst->has_ph && !dst->ph_none) {
                memcpy(best, cmap_at(dst, stride, dst->ph), stride);
                best_none = 0;
            }
            int32_t np;
            const int32_t *preds = hpgo_model_preds(m, j, &np);
            for (int32_t pi = 0; pi < np; pi++) {
                int32_t k = preds[pi];
                int32_t na = d->n_alive[k];
                if (!na)
                    continue;
                double oa2 = d->oa2[k];
                double ct = ct_entry(d, k + 1, j);
                if (ct < -0.5)
                    continue;
                /* alive source rows m' of state k, mp = mm - m' ascending;
                 * straight plans only take mp = 1 */
                const int32_t *am = &d->alive_m[(size_t)k * i];
                for (int32_t a = na - 1; a >= 0; a--) {
                    int32_t mp = mm - am[a];
                    if (d->straight && mp != 1)
                        break;
                    double t_st = ct / (double)(mp * rp);
                    if (d->prune && beyond(d, t_st))
                        continue;
                    const cmap_t *src = AT(d, k, mm - mp);
                    for (int32_t e = 0; e < src->n; e++) {
                        if (++d->tick >= HPGO_CANCEL_EVERY) {
                            d->tick = 0;
                            if (hpgo_cancelled(d->cancel)) {
                                put = -3;
                                goto fail;
                            }
                        }
                        const cell_t *cell = cmap_at(src, stride, e);
                        if (d->prune && beyond(d, cell->value))
                            continue;
                        cc_slot_t *cs = candidates(d, CKEY(cell), mp);
                        if (!cs)
                            goto fail;
                        for (int32_t c = 0; c < cs->n; c++) {
                            const uint64_t *cg = cs->w + (size_t)(1 + 2 * c) * (size_t)nw,
                                           *co = cg + nw;
                            double tv = cell->value;
                            if (t_st > tv)
                                tv = t_st;
                            if (d->prune && beyond(d, tv))
                                continue;
                            double t_in =
                                dp_transfer(d, CGPUS(cell, nw), cell->units * rp, cg, oa2);
                            if (t_in > tv)
                                tv = t_in;
                            if (d->prune && beyond(d, tv))
                                continue;
                            size_t slot;
                            cell_t *ex = row_find(d, dst, co, &slot);
                            int better = best_none || tv < best->value;
                            if (!better && ex && !(tv < ex->value))
                                continue;
                            nc->value = tv;
                            nc->split_k = k;
                            nc->split_m = mm - mp;
                            nc->units = mp;
                            nc->from = e;
                            memcpy(CKEY(nc), co, (size_t)nw * sizeof(uint64_t));
                            memcpy(CGPUS(nc, nw), cg, (size_t)nw * sizeof(uint64_t));
                            if (better) {
                                memcpy(best, nc, stride);
                                best_none = 0;
                            }
                            if (!ex || tv < ex->value) {
                                if ((put = row_put(d, dst, nc)) < 0)
                                    goto fail;
                            }
                        }
                    }
                }
            }
            if ((put = row_end(d, dst)) < 0)
                goto fail;
            dst->has_ph = 1;
            dst->ph_none = (int8_t)best_none;
            if (!best_none) {
                /* the best cell is always the entry stored at its key */
                int32_t pos;
                cmap_find(dst, stride, CKEY(best), nw, &pos);
                dst->ph = pos;
            }
        }
    }
    free(scratch);
    return HPGO_OK;
fail:
    free(scratch);
    if (put == -3)
        return hpgo_err_set(err, HPGO_E_CANCELLED, 0, "planning was cancelled");
    if (put == -2 || d->limit_hit || d->bytes > d->max_bytes)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "the search for this candidate needs more than %.6g MiB "
                            "(the planner's memory limit per candidate, max_memory)",
                            (double)d->max_bytes / 1048576.0);
    return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
}

static void dp_reset(dp_t *d)
{
    if (d->A)
        for (size_t a = 0; a < (size_t)d->L * (size_t)d->i; a++)
            d->bytes -= (size_t)d->A[a].cap * d->stride;
    free(d->n_alive);
    free(d->alive_m);
    free(d->oa2);
    d->n_alive = NULL;
    d->alive_m = NULL;
    d->oa2 = NULL;
    if (d->A) {
        for (size_t a = 0; a < (size_t)d->L * (size_t)d->i; a++)
            free(d->A[a].buf);
        free(d->A);
        d->A = NULL;
    }
}

void hpgo_candidate_clear(hpgo_candidate_t *c)
{
    if (!c)
        return;
    free(c->stages);
    c->stages = NULL;
    c->n_stages = 0;
}

static void cand_fail(hpgo_candidate_t *out, const char *fmt, int32_t a, int32_t b)
{
    out->status = HPGO_E_NOPLAN;
    out->speedup = 0.0;
    snprintf(out->reason, sizeof out->reason, fmt, (int)a, (int)b);
}

/* Can a straight pipeline of i one-unit stages end at the last state?  A
 * cell (j, m) exists iff m == 0 or some k in preds(j) has a cell (k, m - 1)
 * (every such transition finds GPUs: ScatterFirst needs only enough free
 * ones), so this is a bitset walk over the predecessor lists, the same in
 * the exhaustive and the pruned programme.  Without it a model whose state
 * graph has no chain of i states would run every bounded try and then the
 * unbounded search to find nothing (GNMT-16 on 256 GPUs: 21 s).
 * 1 yes, 0 no, -1 out of memory. */
static int straight_reachable(const hpgo_model_t *m, int32_t i)
{
    int32_t L = m->L, nw = (i + 63) / 64;
    uint64_t *r = calloc((size_t)L * (size_t)nw, sizeof *r);
    if (!r)
        return -1;
    for (int32_t j = 0; j < L; j++) {
        uint64_t *rj = r + (size_t)j * (size_t)nw;
        int32_t np;
        const int32_t *preds = hpgo_model_preds(m, j, &np);
        for (int32_t p = 0; p < np; p++) {
            const uint64_t *rk = r + (size_t)preds[p] * (size_t)nw;
            for (int32_t w = 0; w < nw; w++) /* rj |= rk << 1 */
                rj[w] |= rk[w] << 1 | (w ? rk[w - 1] >> 63 : 0);
        }
        rj[0] |= 1;
        if (i % 64)
            rj[nw - 1] &= ((uint64_t)1 << (i % 64)) - 1;
    }
    int ok = (int)(r[(size_t)(L - 1) * (size_t)nw + (size_t)(i - 1) / 64] >> ((i - 1) % 64) & 1);
    free(r);
    return ok;
}

int hpgo_plan_for(const hpgo_model_t *m, const hpgo_topo_t *t, int32_t i, int straight,
                  const hpgo_plan_opts_t *opts, hpgo_candidate_t *out, hpgo_err_t *err)
{
    if (!out || !m || !t)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hpgo_plan_for: NULL argument");
    memset(out, 0, sizeof *out);
    out->kind = straight ? HPGO_CAND_STRAIGHT : HPGO_CAND_DP;
    out->i = i;
    if (i < 1 || i > t->n)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "pipeline width %d is not in 1..%d",
                            (int)i, (int)t->n);
    dp_t d;
    memset(&d, 0, sizeof d);
    d.m = m;
    d.t = t;
    d.L = m->L;
    d.N = t->n;
    d.i = i;
    d.rp = t->n / i;
    d.nw = (t->n + 63) / 64;
    d.M = t->machines;
    d.stride = sizeof(cell_t) + 2 * (size_t)d.nw * sizeof(uint64_t);
    d.straight = straight;
    d.prune = !(opts && opts->exhaustive);
    d.max_bytes = opts && opts->max_bytes ? opts->max_bytes : HPGO_PLAN_MAX_BYTES;
    d.cancel = opts ? opts->cancel : NULL;
    out->rp = d.rp;
    hpgo_err_t lerr;
    hpgo_err_clear(&lerr);
    double t1 = hpgo_model_total_time(m);
    double lb = t1 / (double)i / (double)d.rp;
    if (lb < 0.0)
        lb = 0.0;
    int rc;
    if (d.N > i * d.rp) {
        /* i does not divide N: HPGO's key-length test discards every
         * transition (quirk 2), so the final cell is its initial value */
        if (straight) {
            cand_fail(out, "no plan: %d does not divide the %d GPUs (HPGO panics here)", i,
                      d.N);
            return HPGO_OK;
        }
        double T = lb;
        out->block_time = T;
        if (T < 0.001) {
            out->status = HPGO_E_NOPLAN;
            snprintf(out->reason, sizeof out->reason,
                     "slowest pipeline block takes %.3g s, under HPGO's 1 ms resolution "
                     "(HPGO panics with \"ppl time error\"); use a larger batch or model",
                     T);
            return HPGO_OK;
        }
        out->stages = malloc(sizeof *out->stages);
        if (!out->stages)
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
        memset(out->stages, 0, sizeof *out->stages);
        out->stages[0].a = 0;
        out->stages[0].b = d.L - 1;
        out->stages[0].units = i;
        for (int32_t g = 0; g < i * d.rp; g++)
            hpgo_gpuset_add(&out->stages[0].gpus, g);
        out->n_stages = 1;
        out->status = HPGO_OK;
        out->speedup = hpgo_analytical_speedup(m, t, d.rp, T, out->stages, 1);
        return HPGO_OK;
    }
    if (straight && d.L < i) {
        /* i one-state-or-more stages cannot fit in fewer states */
        cand_fail(out,
                  "no plan with %d one-unit stages over %d layer states (HPGO panics here: "
                  "a straight pipeline needs at least as many states as stages)",
                  i, d.L);
        return HPGO_OK;
    }
    if (straight) {
        int ok = straight_reachable(m, i);
        if (ok < 0)
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
        if (!ok) {
            cand_fail(out,
                      "no plan with %d one-unit stages: no chain of that many layer states, each "
                      "a predecessor of the next, ends at the last of the %d states (HPGO panics "
                      "here)",
                      i, d.L);
            return HPGO_OK;
        }
    }
    if (!straight) {
        /* the initial data-parallel value of the final cell bounds the result */
        d.bound = lb;
        d.strict = 1;
        rc = dp_run(&d, &lerr);
    } else {
        /* no initial value: bound the search with growing guesses; a run
         * that finds a final cell within its bound found exactly HPGO's
         * (every cell it kept is the original's, see the DESIGN note), and
         * the last try is unbounded */
        double guess = lb > 0.0 ? lb * 1.25 : 1e-3;
        for (int attempt = 0;; attempt++) {
            d.prune = d.prune && attempt < 8;
            d.bound = guess;
            rc = dp_run(&d, &lerr);
            if (rc != HPGO_OK || !d.prune)
                break;
            const cmap_t *fin = AT(&d, d.L - 1, i - 1);
            if (fin->has_ph && !fin->ph_none)
                break;
            dp_reset(&d);
            guess *= 3.0;
        }
    }
    if (rc == HPGO_E_LIMIT) {
        out->status = HPGO_E_LIMIT;
        snprintf(out->reason, sizeof out->reason, "%s", lerr.msg);
        dp_free(&d);
        return HPGO_OK;
    }
    if (rc != HPGO_OK) {
        if (err)
            *err = lerr;
        dp_free(&d);
        return rc;
    }
    const cmap_t *last = AT(&d, d.L - 1, i - 1);
    if (!last->has_ph || last->ph_none) {
        cand_fail(out,
                  "no plan with %d one-unit stages over %d layer states (HPGO panics here: "
                  "a straight pipeline needs at least as many states as stages)",
                  i, d.L);
        dp_free(&d);
        return HPGO_OK;
    }
    double T = cmap_at(last, d.stride, last->ph)->value;
    out->block_time = T;
    if (T < 0.001) {
        out->status = HPGO_E_NOPLAN;
        snprintf(out->reason, sizeof out->reason,
                 "slowest pipeline block takes %.3g s, under HPGO's 1 ms resolution "
                 "(HPGO panics with \"ppl time error\"); use a larger batch or model",
                 T);
        dp_free(&d);
        return HPGO_OK;
    }
    /* backtrack (7.4) */
    int32_t cap = 8, n = 0;
    hpgo_stage_t *st = malloc((size_t)cap * sizeof *st);
    if (!st) {
        dp_free(&d);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
    }
    const cell_t *c = cmap_at(last, d.stride, last->ph);
    int32_t prev = d.L - 1;
    for (;;) {
        if (n == cap) {
            cap *= 2;
            hpgo_stage_t *ns = realloc(st, (size_t)cap * sizeof *st);
            if (!ns) {
                free(st);
                dp_free(&d);
                return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
            }
            st = ns;
        }
        hpgo_stage_t *so = &st[n++];
        memset(so, 0, sizeof *so);
        memcpy(so->gpus.w, CGPUS(c, d.nw), (size_t)d.nw * sizeof(uint64_t));
        so->units = c->units;
        so->b = prev;
        if (c->split_k < 0) {
            so->a = 0;
            break;
        }
        so->a = c->split_k + 1;
        prev = c->split_k + 1;
        c = cmap_at(AT(&d, c->split_k, c->split_m), d.stride, c->from);
    }
    for (int32_t a = 0, b = n - 1; a < b; a++, b--) {
        hpgo_stage_t tmp = st[a];
        st[a] = st[b];
        st[b] = tmp;
    }
    out->stages = st;
    out->n_stages = n;
    out->status = HPGO_OK;
    out->speedup = hpgo_analytical_speedup(m, t, d.rp, T, st, n);
    dp_free(&d);
    return HPGO_OK;
}

/* ------------------------------------------------------ bipartition 7.6 */

int hpgo_bipartition(const hpgo_model_t *m, const hpgo_topo_t *t, hpgo_candidate_t *out,
                     hpgo_err_t *err)
{
    memset(out, 0, sizeof *out);
    out->kind = HPGO_CAND_BIPARTITION;
    out->i = t->n;
    out->rp = 1;
    int32_t N = t->n, L = m->L;
    /* (g1, g2) pairs for every g, in g, g1, g2 order; independent of the cut */
    size_t cap = (size_t)(N > 1 ? N - 1 : 1) * 9, np = 0;
    hpgo_gpuset_t *pairs = malloc(cap * 2 * sizeof *pairs);
    if (!pairs)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
    hpgo_gpuset_t empty = {{0}};
    for (int32_t g = 1; g < N; g++) {
        hpgo_gpuset_t c1[3];
        int n1 = hpgo_next_cards(t, &empty, g, c1);
        for (int a = 0; a < n1; a++) {
            hpgo_gpuset_t c2[3];
            int n2 = hpgo_next_cards(t, &c1[a], N - g, c2);
            for (int b = 0; b < n2; b++) {
                pairs[2 * np] = c1[a];
                pairs[2 * np + 1] = c2[b];
                np++;
            }
        }
    }
    int found = 0;
    hpgo_stage_t best[2];
    double best_s = 0.0, best_T = 0.0;
    for (int32_t l = 0; l + 1 < L; l++) {
        double ct1 = hpgo_model_ct(m, 0, l), ct2 = hpgo_model_ct(m, l + 1, L - 1);
        double oa = hpgo_model_oa(m, l);
        for (size_t p = 0; p < np; p++) {
            const hpgo_gpuset_t *g1 = &pairs[2 * p], *g2 = &pairs[2 * p + 1];
            int32_t n1 = hpgo_gpuset_count(g1), n2 = hpgo_gpuset_count(g2);
            double T = ct1 / (double)n1, b2 = ct2 / (double)n2;
            double tr = hpgo_topo_split_concat_time(t, g1, g2, oa);
            if (b2 > T)
                T = b2;
            if (tr > T)
                T = tr;
            hpgo_stage_t st[2] = {{0, l + 1, n1, *g1}, {l + 1, L - 1, n2, *g2}};
            double s = hpgo_analytical_speedup(m, t, 1, T, st, 2);
            if (!found || s >= best_s) {
                found = 1;
                best_s = s;
                best_T = T;
                best[0] = st[0];
                best[1] = st[1];
            }
        }
    }
    free(pairs);
    if (!found) {
        cand_fail(out, "no two-stage split: needs at least 2 GPUs and 2 layer states "
                       "(have %d GPUs, %d states)",
                  N, L);
        return HPGO_OK;
    }
    out->stages = malloc(2 * sizeof *out->stages);
    if (!out->stages)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
    out->stages[0] = best[0];
    out->stages[1] = best[1];
    out->n_stages = 2;
    out->speedup = best_s;
    out->block_time = best_T;
    out->status = HPGO_OK;
    return HPGO_OK;
}

/* ------------------------------------------------------ orchestrate 7.1 */

typedef struct orch_job {
    const hpgo_model_t *m;
    const hpgo_topo_t *t;
    const hpgo_plan_opts_t *opts;
    hpgo_orch_t *o;
    int *rcs;
    hpgo_err_t *errs;
    const int32_t *order; /* expensive candidates first */
} orch_job_t;

/* Rough cost rank of a candidate: DPs whose width divides N do real work,
 * growing with the width; the others are closed formulas. */
static int64_t cand_cost(const hpgo_candidate_t *c, int32_t N)
{
    if (c->kind == HPGO_CAND_BIPARTITION)
        return (int64_t)N;
    if (N % c->i != 0)
        return 0;
    return (int64_t)c->i * c->i * (c->kind == HPGO_CAND_STRAIGHT ? 4 : 1) + N;
}

static void orch_run_one(void *ctx, int64_t job)
{
    orch_job_t *J = ctx;
    job = J->order[job];
    hpgo_candidate_t *c = &J->o->cands[job];
    if (J->opts && hpgo_cancelled(J->opts->cancel))
        J->rcs[job] = hpgo_err_set(&J->errs[job], HPGO_E_CANCELLED, 0, "planning was cancelled");
    else if (c->kind == HPGO_CAND_BIPARTITION)
        J->rcs[job] = hpgo_bipartition(J->m, J->t, c, &J->errs[job]);
    else
        J->rcs[job] = hpgo_plan_for(J->m, J->t, c->i, c->kind == HPGO_CAND_STRAIGHT, J->opts, c,
                                    &J->errs[job]);
}

int hpgo_orchestrate(const hpgo_model_t *m, const hpgo_topo_t *t, const hpgo_plan_opts_t *opts,
                     hpgo_orch_t **out, hpgo_err_t *err)
{
    if (!out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hpgo_orchestrate: out is NULL");
    *out = NULL;
    if (!m || !t)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hpgo_orchestrate: %s is NULL",
                            m ? "the topology" : "the model");
    int32_t N = t->n;
    hpgo_orch_t *o = calloc(1, sizeof *o);
    if (!o)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
    int32_t cap = N + 3;
    o->cands = calloc((size_t)cap, sizeof *o->cands);
    int *rcs = calloc((size_t)cap, sizeof *rcs);
    hpgo_err_t *errs = calloc((size_t)cap, sizeof *errs);
    if (!o->cands || !rcs || !errs) {
        free(rcs);
        free(errs);
        hpgo_orch_free(o);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
    }
    int32_t n = 0;
    for (int32_t i = 2; i <= N; i++) {
        o->cands[n].kind = HPGO_CAND_DP;
        o->cands[n++].i = i;
    }
    if (N > 2 && N % 2 == 0) {
        o->cands[n].kind = HPGO_CAND_STRAIGHT;
        o->cands[n++].i = 2;
    }
    o->cands[n].kind = HPGO_CAND_STRAIGHT;
    o->cands[n++].i = N;
    if (N > 1)
        o->cands[n++].kind = HPGO_CAND_BIPARTITION;
    o->n = n;
    int32_t *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order) {
        free(rcs);
        free(errs);
        hpgo_orch_free(o);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory in the planner");
    }
    for (int32_t a = 0; a < n; a++)
        order[a] = a;
    for (int32_t a = 1; a < n; a++) { /* stable insertion sort, cost descending */
        int32_t x = order[a], b = a;
        while (b > 0 && cand_cost(&o->cands[order[b - 1]], N) < cand_cost(&o->cands[x], N)) {
            order[b] = order[b - 1];
            b--;
        }
        order[b] = x;
    }
    int threads = opts ? opts->threads : 0;
    if (threads == 0 && (int64_t)m->L * N * N < 20000)
        threads = 1; /* small case: starting threads costs more than it saves */
    orch_job_t J = {m, t, opts, o, rcs, errs, order};
    int rc = hpgo_pool_map(threads, n, orch_run_one, &J, err);
    free(order);
    if (rc != HPGO_OK) {
        free(rcs);
        free(errs);
        hpgo_orch_free(o);
        return rc;
    }
    for (int32_t a = 0; a < n; a++) {
        if (rcs[a] != HPGO_OK) {
            if (err)
                *err = errs[a];
            rc = rcs[a];
            free(rcs);
            free(errs);
            hpgo_orch_free(o);
            return rc;
        }
    }
    free(rcs);
    free(errs);
    /* a candidate without one micro-batch (min_micro_batch_size above
     * gbs / rp) has no pipeline: HPGO's score is 0 there, which would make
     * a 0.0-speedup plan the "best" one */
    uint32_t mbs = m->min_micro_batch_size ? m->min_micro_batch_size : 1;
    for (int32_t a = 0; a < n; a++) {
        hpgo_candidate_t *c = &o->cands[a];
        if (c->status == HPGO_OK && c->rp > 0 && m->gbs / (uint32_t)c->rp / mbs == 0) {
            free(c->stages);
            c->stages = NULL;
            c->n_stages = 0;
            c->status = HPGO_E_NOPLAN;
            snprintf(c->reason, sizeof c->reason,
                     "no micro-batch: gbs %lu / %d replicas / min_micro_batch_size %lu is 0",
                     (unsigned long)m->gbs, (int)c->rp, (unsigned long)mbs);
        }
    }
    o->best = -1;
    for (int32_t a = 0; a < n; a++)
        if (o->cands[a].status == HPGO_OK &&
            (o->best < 0 || o->cands[a].speedup >= o->cands[o->best].speedup))
            o->best = a;
    *out = o;
    return HPGO_OK;
}

void hpgo_orch_free(hpgo_orch_t *o)
{
    if (!o)
        return;
    if (o->cands)
        for (int32_t a = 0; a < o->n; a++)
            hpgo_candidate_clear(&o->cands[a]);
    free(o->cands);
    free(o);
}
