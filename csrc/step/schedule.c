/* schedule.c - op lists of the pipeline schedules (see schedule.h).
 *
 * DESIGN: GPipe, 1F1B, interleaved 1F1B and ZB-H1 are closed rules per
 * device (spec/training-model.md 5.1-5.4), O(m v) per device.  ZB-V has no
 * closed rule for unequal pass times; as its authors do (zbv.py), a greedy
 * list scheduler runs the V in virtual time with the stages' F, B, W
 * estimates and picks, whenever a device is free, the first ready op in
 * the order B of chunk 1, B of chunk 0, F of chunk 1, F of chunk 0 (the
 * latter only while the chunk activations alive or owed by started
 * micro-batches stay within 2p, the 1F1B memory cap), and otherwise a deferred W (bubble filling).  The order it
 * produces is consistent with a valid execution, so the engine can replay
 * it with any durations without deadlock.  O(m p^2) for zb-v. */
#include "schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t hpgo_sched_stage(int schedule, int32_t p, int32_t v, int32_t i, int32_t c)
{
    (void)v;
    if (schedule == HPGO_PS_ZBV)
        return c == 0 ? i : 2 * p - 1 - i;
    return c * p + i;
}

int64_t hpgo_sched_max_ops(int64_t m, int32_t v) { return 3 * m * v; }

typedef struct emit {
    hpgo_op_t *o;
    int64_t n;
} emit_t;

static void put(emit_t *e, int kind, int64_t mb, int chunk)
{
    hpgo_op_t op = {(int32_t)mb, (int16_t)chunk, (int16_t)kind};
    e->o[e->n++] = op;
}

static void gen_gpipe(emit_t *e, int64_t m)
{
    for (int64_t j = 0; j < m; j++)
        put(e, HPGO_OP_F, j, 0);
    for (int64_t j = m - 1; j >= 0; j--)
        put(e, HPGO_OP_BW, j, 0);
}

static void gen_1f1b(emit_t *e, int32_t p, int64_t m, int32_t i)
{
    int64_t w = p - 1 - i < m ? p - 1 - i : m;
    for (int64_t j = 0; j < w; j++)
        put(e, HPGO_OP_F, j, 0);
    for (int64_t j = 0; j < m - w; j++) {
        put(e, HPGO_OP_F, w + j, 0);
        put(e, HPGO_OP_BW, j, 0);
    }
    for (int64_t j = m - w; j < m; j++)
        put(e, HPGO_OP_BW, j, 0);
}

/* Megatron's interleaved schedule: item k of m v. */
static void item(int32_t p, int32_t v, int64_t k, int forward, int64_t *mb, int *chunk)
{
    int64_t pv = (int64_t)p * v;
    int c = (int)((k % pv) / p);
    *chunk = forward ? c : v - 1 - c;
    *mb = (k / pv) * p + (k % p);
}

/* Warm-up forwards of rank i: 2 (p - 1 - i) + (v - 1) p, at most all m v
 * (Megatron-Core's get_pp_rank_microbatches with the default group size
 * p).  With m = p that cap makes ranks i <= p/2 - 1 run every forward
 * before any backward, the others 1F1B; releases before 2023 made every
 * rank do so when m = p. */
static void gen_interleaved(emit_t *e, int32_t p, int32_t v, int64_t m, int32_t i)
{
    int64_t total = m * v;
    int64_t w = 2 * (int64_t)(p - 1 - i) + (int64_t)(v - 1) * p;
    if (w > total)
        w = total;
    int64_t mb;
    int c;
    for (int64_t k = 0; k < w; k++) {
        item(p, v, k, 1, &mb, &c);
        put(e, HPGO_OP_F, mb, c);
    }
    for (int64_t k = 0; k < total - w; k++) {
        item(p, v, w + k, 1, &mb, &c);
        put(e, HPGO_OP_F, mb, c);
        item(p, v, k, 0, &mb, &c);
        put(e, HPGO_OP_BW, mb, c);
    }
    for (int64_t k = total - w; k < total; k++) {
        item(p, v, k, 0, &mb, &c);
        put(e, HPGO_OP_BW, mb, c);
    }
}

/* ZB-H1 as the authors' quick-start patch (spec 5.4); q is a FIFO of
 * deferred W micro-batches. */
static void gen_zbh1(emit_t *e, int32_t p, int64_t m, int32_t r, int64_t *q)
{
    int64_t head = 0, tail = 0;
    int64_t w = p - 1 - r < m ? p - 1 - r : m;
    for (int64_t j = 0; j < w; j++)
        put(e, HPGO_OP_F, j, 0);
    for (int64_t j = 0; j < m - w; j++) {
        put(e, HPGO_OP_F, w + j, 0);
        int last = j == m - w - 1;
        if (r > 0 && (j < r || last)) {
            put(e, HPGO_OP_B, j, 0);
            q[tail++] = j;
            if (last && j >= r)
                put(e, HPGO_OP_W, q[head++], 0);
        } else {
            put(e, HPGO_OP_BW, j, 0);
        }
    }
    for (int64_t jj = 0; jj < w; jj++) {
        int64_t j = m - w + jj;
        if (r > 0) {
            put(e, HPGO_OP_B, j, 0);
            q[tail++] = j;
            if (j >= r)
                put(e, HPGO_OP_W, q[head++], 0);
        } else {
            put(e, HPGO_OP_BW, j, 0);
        }
    }
    while (head < tail)
        put(e, HPGO_OP_W, q[head++], 0);
}

/* ---- zb-v greedy -------------------------------------------------------- */

static int32_t zdev_of(int32_t p, int32_t k) { return k < p ? k : 2 * p - 1 - k; }

typedef struct zdev {
    double clock;
    int64_t nf[2], nb[2]; /* next micro-batch to run F / B on chunk c */
    int64_t wq_head, wq_tail;
    int64_t alive;
} zdev_t;

static int zdone(const zdev_t *z, int64_t m)
{
    return z->nb[0] == m && z->nb[1] == m && z->wq_head == z->wq_tail;
}

/* Devices ready to decide, ordered by (clock, index): a binary heap. */
static int zless(const zdev_t *d, int32_t a, int32_t b)
{
    return d[a].clock < d[b].clock || (d[a].clock == d[b].clock && a < b);
}

static void heap_push(int32_t *h, int32_t *n, const zdev_t *d, int32_t x)
{
    int32_t i = (*n)++;
    h[i] = x;
    while (i > 0 && zless(d, h[i], h[(i - 1) / 2])) {
        int32_t t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static int32_t heap_pop(int32_t *h, int32_t *n, const zdev_t *d)
{
    int32_t top = h[0], i = 0;
    h[0] = h[--(*n)];
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, s = i;
        if (l < *n && zless(d, h[l], h[s]))
            s = l;
        if (r < *n && zless(d, h[r], h[s]))
            s = r;
        if (s == i)
            break;
        int32_t t = h[i];
        h[i] = h[s];
        h[s] = t;
        i = s;
    }
    return top;
}

static int gen_zbv(int32_t p, int64_t m, const double *f, const double *b, const double *w,
                   double p2p, hpgo_op_t **ops, int64_t *n_ops, hpgo_err_t *err)
{
    int32_t K = 2 * p;
    double *fend = malloc(sizeof(double) * (size_t)(K * m));
    double *bend = malloc(sizeof(double) * (size_t)(K * m));
    zdev_t *d = calloc((size_t)p, sizeof *d);
    int64_t *wq = malloc(sizeof(int64_t) * (size_t)(p * 2 * m)); /* per device: (mb << 1 | chunk) */
    char *blocked = calloc((size_t)p, 1);
    int32_t *heap = malloc(sizeof(int32_t) * (size_t)p), nh = 0;
    int rc = HPGO_OK;
    if (!fend || !bend || !d || !wq || !blocked || !heap) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory generating zb-v");
        goto done;
    }
    for (int64_t x = 0; x < K * m; x++)
        fend[x] = bend[x] = INFINITY;
    for (int32_t i = 0; i < p; i++)
        n_ops[i] = 0;
    int64_t left = 6 * m * p; /* F, B, W of two chunks per device */
    const int64_t cap = 2 * (int64_t)p;
    for (int32_t x = 0; x < p; x++)
        heap_push(heap, &nh, d, x);
    while (left > 0) {
        if (nh == 0) {
            rc = hpgo_err_set(err, HPGO_E_INTERNAL, 0, "zb-v generator deadlocked");
            goto done;
        }
        int32_t i = heap_pop(heap, &nh, d);
        zdev_t *z = &d[i];
        double now = z->clock, soonest = INFINITY;
        int kind = -1, chunk = 0;
        /* readiness of each candidate: time its input is there */
        for (int pass = 0; pass < 4 && kind < 0; pass++) {
            int c = pass == 0 || pass == 2 ? 1 : 0;
            int is_b = pass < 2;
            int32_t k = c == 0 ? i : K - 1 - i;
            int64_t j = is_b ? z->nb[c] : z->nf[c];
            if (j >= m)
                continue;
            double ready;
            if (is_b) {
                if (j >= z->nf[c])
                    continue; /* its forward has not run */
                if (k == K - 1)
                    ready = fend[k * m + j];
                else
                    ready = bend[(k + 1) * m + j] + (zdev_of(p, k + 1) == i ? 0 : p2p);
            } else {
                /* a new micro-batch stores two chunk activations before any is freed */
                if (c == 0 && z->alive + (z->nf[0] - z->nf[1]) + 2 > cap)
                    continue;
                if (k == 0)
                    ready = 0;
                else
                    ready = fend[(k - 1) * m + j] + (zdev_of(p, k - 1) == i ? 0 : p2p);
            }
            if (ready <= now) {
                kind = is_b ? HPGO_OP_B : HPGO_OP_F;
                chunk = c;
            } else if (ready < soonest) {
                soonest = ready;
            }
        }
        int64_t mb;
        if (kind < 0 && z->wq_head < z->wq_tail) {
            int64_t x = wq[(int64_t)i * 2 * m + z->wq_head++];
            mb = x >> 1;
            chunk = (int)(x & 1);
            int32_t k = chunk == 0 ? i : K - 1 - i;
            ops[i][n_ops[i]++] = (hpgo_op_t){(int32_t)mb, (int16_t)chunk, HPGO_OP_W};
            z->clock = now + w[k];
            z->alive--;
            left--;
            if (!zdone(z, m))
                heap_push(heap, &nh, d, i);
            continue;
        }
        if (kind < 0) {
            if (isinf(soonest)) {
                blocked[i] = 1; /* waits on another device: until its producer moves */
            } else {
                z->clock = soonest;
                heap_push(heap, &nh, d, i);
            }
            continue;
        }
        int32_t k = chunk == 0 ? i : K - 1 - i;
        if (kind == HPGO_OP_F) {
            mb = z->nf[chunk]++;
            fend[k * m + mb] = now + f[k];
            z->clock = now + f[k];
            z->alive++;
        } else {
            mb = z->nb[chunk]++;
            bend[k * m + mb] = now + b[k];
            z->clock = now + b[k];
            wq[(int64_t)i * 2 * m + z->wq_tail++] = (mb << 1) | chunk;
        }
        ops[i][n_ops[i]++] = (hpgo_op_t){(int32_t)mb, (int16_t)chunk, (int16_t)kind};
        left--;
        /* only the device that receives this op's output can become ready */
        int32_t to = kind == HPGO_OP_F ? (k + 1 < K ? zdev_of(p, k + 1) : -1)
                                       : (k > 0 ? zdev_of(p, k - 1) : -1);
        if (to >= 0 && blocked[to]) {
            blocked[to] = 0;
            heap_push(heap, &nh, d, to);
        }
        if (!zdone(z, m))
            heap_push(heap, &nh, d, i);
    }
done:
    free(fend);
    free(bend);
    free(d);
    free(wq);
    free(blocked);
    free(heap);
    return rc;
}

int hpgo_sched_generate(int schedule, int32_t p, int32_t v, int64_t m, const double *f,
                        const double *b, const double *w, double p2p, hpgo_op_t **ops,
                        int64_t *n_ops, hpgo_err_t *err)
{
    if (m < 1 || p < 1 || v < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "schedule: p, v and m must be >= 1");
    if (schedule == HPGO_PS_ZBV)
        return gen_zbv(p, m, f, b, w, p2p, ops, n_ops, err);
    int64_t *q = NULL;
    if (schedule == HPGO_PS_ZBH1 && !(q = malloc(sizeof(int64_t) * (size_t)m)))
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory generating zb-h1");
    for (int32_t i = 0; i < p; i++) {
        emit_t e = {ops[i], 0};
        switch (schedule) {
        case HPGO_PS_GPIPE: gen_gpipe(&e, m); break;
        case HPGO_PS_1F1B: gen_1f1b(&e, p, m, i); break;
        case HPGO_PS_INTERLEAVED: gen_interleaved(&e, p, v, m, i); break;
        case HPGO_PS_ZBH1: gen_zbh1(&e, p, m, i, q); break;
        default:
            free(q);
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown schedule %d", schedule);
        }
        n_ops[i] = e.n;
    }
    free(q);
    return HPGO_OK;
}
