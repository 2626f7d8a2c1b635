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
 *    they are computed once per DP and cached; their depth-first enumeration
 *    skips a (round, occupancy) already expanded, whose subtree can only
 *    repeat GPU sets already emitted (first occurrence kept, as canonical);
 *  - bound pruning with a bound U: a plan's value only grows along its
 *    stages (t = max(prev, stage, transfer)), so with pruning every kept cell
 *    is exactly the original's cell at that key if its value is <= U, and
 *    absent otherwise.  If the final cell's value is <= U the result, its
 *    tie-breaking and its backtracked stages are therefore unchanged.
 *    Non-straight DPs use U = the final cell's initial data-parallel value;
 *    straight DPs try growing guesses, the last try unbounded;
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

typedef struct cand {
    hpgo_gpuset_t gpus; /* the new stage's GPUs (all rounds) */
    hpgo_gpuset_t occ;  /* key | gpus */
} cand_t;

typedef struct cc_slot {
    uint64_t hash;
    int32_t mp;       /* 0 = empty slot */
    int32_t n;        /* candidates */
    hpgo_gpuset_t key;
    cand_t *list;
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
    cand_t *tmp;
    size_t tmp_n, tmp_cap;
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
    if (d->tmp_n == d->tmp_cap) {
        size_t nc = d->tmp_cap ? d->tmp_cap * 2 : 16;
        cand_t *nt = realloc(d->tmp, nc * sizeof *nt);
        if (!nt)
            return -1;
        d->tmp = nt;
        d->tmp_cap = nc;
    }
    d->tmp[d->tmp_n].gpus = *gpus;
    d->tmp[d->tmp_n].occ = *occ;
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
        if (d->cc[h].hash == hv && d->cc[h].mp == mp && set_eq(d->cc[h].key.w, keyw, d->nw))
            return &d->cc[h];
        h = (h + 1) & (d->cc_cap - 1);
    }
    hpgo_gpuset_t keyset = {{0}};
    memcpy(keyset.w, keyw, (size_t)d->nw * sizeof(uint64_t));
    const hpgo_gpuset_t *key = &keyset;
    d->tmp_n = 0;
    seen_reset(d);
    if (replica_dfs(d, key, key, 0, mp) < 0)
        return NULL;
    d->bytes += (d->tmp_n ? d->tmp_n : 1) * sizeof(cand_t);
    if (d->bytes > d->max_bytes)
        return NULL;
    cand_t *list = malloc((d->tmp_n ? d->tmp_n : 1) * sizeof *list);
    if (!list)
        return NULL;
    memcpy(list, d->tmp, d->tmp_n * sizeof *list);
    cc_slot_t *s = &d->cc[h];
    s->hash = hv;
    s->mp = mp;
    s->n = (int32_t)d->tmp_n;
    s->key = *key;
    s->list = list;
    d->cc_n++;
    return s;
}

static void dp_reset(dp_t *d);

static void dp_free(dp_t *d)
{
    dp_reset(d);
    for (size_t a = 0; a < d->cc_cap; a++)
        if (d->cc[a].mp)
            free(d->cc[a].list);
    free(d->cc);
    free(d->seen);
    free(d->seen_round);
    free(d->tmp);
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
                          const hpgo_gpuset_t *to, double bytes)
{
    const hpgo_topo_t *t = d->t;
    int32_t lo = hpgo_gpuset_min(to);
    int32_t mt = t->machine_of[lo];
    int32_t hi = -1;
    for (int w = d->nw - 1; w >= 0; w--)
        if (to->w[w]) {
            hi = w * 64 + 63 - __builtin_clzll(to->w[w]);
            break;
        }
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
    if (d->prune && c->value > d->bound)
        return 0; /* can never be part of a plan within the bound */
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
                    ok = !(cmap_at(src, stride, e)->value > d->bound);
            }
            if (ok)
                d->alive_m[(size_t)k * i + (size_t)d->n_alive[k]++] = mm - 1;
        }
        for (int32_t j = 1; j < L; j++) {
            if (!row_useful(d, j, mm))
                continue;
            cmap_t *dst = AT(d, j, mm);
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
                    if (d->prune && t_st > d->bound)
                        continue;
                    const cmap_t *src = AT(d, k, mm - mp);
                    for (int32_t e = 0; e < src->n; e++) {
                        const cell_t *cell = cmap_at(src, stride, e);
                        if (d->prune && cell->value > d->bound)
                            continue;
                        cc_slot_t *cs = candidates(d, CKEY(cell), mp);
                        if (!cs)
                            goto fail;
                        for (int32_t c = 0; c < cs->n; c++) {
                            const cand_t *cd = &cs->list[c];
                            double tv = cell->value;
                            if (t_st > tv)
                                tv = t_st;
                            if (d->prune && tv > d->bound)
                                continue;
                            double t_in =
                                dp_transfer(d, CGPUS(cell, nw), cell->units * rp, &cd->gpus, oa2);
                            if (t_in > tv)
                                tv = t_in;
                            if (d->prune && tv > d->bound)
                                continue;
                            int32_t pos;
                            cell_t *ex = cmap_find(dst, stride, cd->occ.w, nw, &pos);
                            int better = best_none || tv < best->value;
                            if (!better && ex && !(tv < ex->value))
                                continue;
                            nc->value = tv;
                            nc->split_k = k;
                            nc->split_m = mm - mp;
                            nc->units = mp;
                            nc->from = e;
                            memcpy(CKEY(nc), cd->occ.w, (size_t)nw * sizeof(uint64_t));
                            memcpy(CGPUS(nc, nw), cd->gpus.w, (size_t)nw * sizeof(uint64_t));
                            if (better) {
                                memcpy(best, nc, stride);
                                best_none = 0;
                            }
                            if (!ex || tv < ex->value) {
                                if ((put = cmap_put(dst, stride, nc, nw, &d->bytes, d->max_bytes)) < 0)
                                    goto fail;
                            }
                        }
                    }
                }
            }
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
    if (put == -2 || d->bytes > d->max_bytes)
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

int hpgo_plan_for(const hpgo_model_t *m, const hpgo_topo_t *t, int32_t i, int straight,
                  const hpgo_plan_opts_t *opts, hpgo_candidate_t *out, hpgo_err_t *err)
{
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
    d.stride = sizeof(cell_t) + 2 * (size_t)d.nw * sizeof(uint64_t);
    d.straight = straight;
    d.prune = !(opts && opts->exhaustive);
    d.max_bytes = opts && opts->max_bytes ? opts->max_bytes : HPGO_PLAN_MAX_BYTES;
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
    if (!straight) {
        /* the initial data-parallel value of the final cell bounds the result */
        d.bound = lb;
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
    if (c->kind == HPGO_CAND_BIPARTITION)
        J->rcs[job] = hpgo_bipartition(J->m, J->t, c, &J->errs[job]);
    else
        J->rcs[job] = hpgo_plan_for(J->m, J->t, c->i, c->kind == HPGO_CAND_STRAIGHT, J->opts, c,
                                    &J->errs[job]);
}

int hpgo_orchestrate(const hpgo_model_t *m, const hpgo_topo_t *t, const hpgo_plan_opts_t *opts,
                     hpgo_orch_t **out, hpgo_err_t *err)
{
    *out = NULL;
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
