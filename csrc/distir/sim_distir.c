/* sim_distir.c - DistIR's D/H/P transform and simulator for an MLP or a
 * transformer layer stack, re-done at the op level in C (see sim_distir.h,
 * spec/distir-sim.md sections 2-6, 12, 13).
 *
 * DESIGN: the model is a flat forward program of op templates (MatMul with a
 * Megatron column / row split, element-wise ops, batched attention matmuls),
 * grouped into layers; stage k owns layers [k L/P, (k+1) L/P).  The pipeline
 * schedule is DistIR's timestep scheduler (PipeDream 1F1B or FIFO): each
 * timestep every device with ready work runs one (stage, micro-batch), work
 * made ready is visible at once to devices later in the key order, devices
 * are emitted in ascending order and boundary sends follow the timestep.
 * Emission walks replicas, timesteps, stage ops and shards in DistIR's order
 * and applies each op to per-device clocks immediately (no op list is
 * stored): a single-device op adds its cost, a multi-device op first
 * synchronises the clocks of its devices.  The cost formulas keep DistIR's
 * operation order (exact products converted once, then divided), so times
 * are bit-identical to the Python simulator's.  Memory follows DistIR's
 * liveness rule at the same op granularity.
 * Cost: O(D H K (ops + P)) per point plus the schedule O(P (P + K)); a 32-device
 * point of the 64-layer MLP takes well under a millisecond.  No globals;
 * thread-safe on distinct arguments. */
#include "sim_distir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { T_MM = 0, T_EW = 1, T_BMM = 2 };
enum { SPLIT_NONE = 0, SPLIT_COL = 1, SPLIT_ROW = 2 };
enum { TY_F = 0, TY_B = 1 };
enum { CAT_W = 0, CAT_G = 1, CAT_A = 2 };

typedef struct dop {
    int type;        /* T_MM, T_EW, T_BMM */
    int split;       /* MM: Megatron split when H > 1 */
    int fwd_inputs;  /* element-wise: tensor inputs of the forward op (1 or 2) */
    int ev_f, ev_b;  /* event kinds */
    int32_t layer;
    int64_t k, n;    /* MM: this shard's weight [k x n]; EW: elements per row */
    int64_t bmm_per_seq, bm, bk, bn; /* BMM: products per sequence, each [bm x bk][bk x bn] */
    int64_t in_cols, out_cols;       /* elements per row of the input / output (this shard) */
} dop;

typedef struct dsim {
    const hpgo_distir_config_t *cfg;
    hpgo_err_t *err;
    int rc;
    uint32_t tick;           /* operations since the cancel flag was last read */
    int flav, rec, seq;
    double e;                /* bytes per element */
    int64_t ei;
    double tp, dram, klo, gbps, div;
    int64_t mm_e;            /* bytes per element in MatMul's memory term */
    int32_t D, H, P, K, L;
    int64_t B, rows;
    int64_t x_cols, z_cols, loss_cols;
    dop *prog;
    int32_t nprog;
    int32_t *st_first, *st_last;
    int32_t base, ndev;
    double *clock, *busy;
    double *live[3], *peak, *peak_g, *peak_a;
    int32_t *infl, *max_infl;
    uint8_t *wsent;          /* [H][nprog] weight already sent to its stage device */
    int32_t *ts_off, *ts_k, *ts_t, *ts_mb;
    int32_t nts;
    hpgo_sim_result_t *res;
} dsim;

static const char *const flavour_names[HPGO_DISTIR__COUNT] = {
    [HPGO_DISTIR_2021] = "distir-2021",
    [HPGO_DISTIR_2021_GRID] = "distir-2021-grid",
    [HPGO_DISTIR_2022] = "distir-2022",
};

const char *hpgo_distir_cost_model_name(int cost_model)
{
    if (cost_model < 0 || cost_model >= HPGO_DISTIR__COUNT)
        return NULL;
    return flavour_names[cost_model];
}

int hpgo_distir_cost_model_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < HPGO_DISTIR__COUNT; i++)
        if (strcmp(name, flavour_names[i]) == 0)
            return i;
    return -1;
}

/* ---- cost model ---------------------------------------------------------- */

/* a*b*c as DistIR's Python gets it: the exact integer rounded once to double
 * (exact in int64 whenever it fits, which covers every realistic shape). */
static double prod3(int64_t a, int64_t b, int64_t c)
{
    if (a > 0 && b > 0 && c > 0 && a <= INT64_MAX / b && a * b <= INT64_MAX / c)
        return (double)(a * b * c);
    return (double)a * (double)b * (double)c;
}

static double c_mm(const dsim *S, int64_t m, int64_t k, int64_t n)
{
    double data = prod3(S->mm_e, 1, m * k + k * n);
    double flops = prod3(2 * m, k, n);
    if (S->flav == HPGO_DISTIR_2022)
        return S->klo + data / S->dram + flops / S->tp;
    return data / S->dram + flops / S->tp;
}

/* Element-wise op over nelem elements of its first input; `inputs` tensor
 * inputs (only the 2022 flavour charges their DRAM traffic). */
static double c_ew(const dsim *S, int64_t nelem, int inputs)
{
    double bytes = prod3(nelem, S->ei, 1);
    if (S->flav == HPGO_DISTIR_2022)
        return S->klo + prod3(nelem, S->ei, inputs) / S->dram + (double)nelem / S->tp;
    (void)inputs;
    return bytes / S->tp;
}

static double c_send(const dsim *S, int64_t nelem)
{
    if (S->flav == HPGO_DISTIR_2022)
        return prod3(nelem, S->ei, 1) / S->div / S->gbps;
    return prod3(nelem, S->ei, S->ei) / S->div / S->gbps; /* dtype counted twice */
}

static double c_allreduce(const dsim *S, int64_t nelem, int32_t n)
{
    if (n < 2)
        return 0.0;
    if (S->flav == HPGO_DISTIR_2022)
        return 2.0 * (prod3(nelem, S->ei, 1) / S->div) * (double)(n - 1) / (double)n / S->gbps;
    double per = prod3(2 * nelem, S->ei, n - 1) / (double)n;
    return per / S->div / S->gbps;
}

static double c_allgather(const dsim *S, int64_t nelem, int32_t n)
{
    if (n < 2 || S->flav == HPGO_DISTIR_2021_GRID)
        return 0.0;
    if (S->flav == HPGO_DISTIR_2022)
        return 2.0 * (prod3(nelem, S->ei, 1) / S->div) * (double)(n - 1) / (double)n / S->gbps;
    double per = prod3(2 * nelem, S->ei * S->ei, n - 1) / (double)n; /* dtype counted twice */
    return per / S->div / S->gbps;
}

/* ---- clocks, events, memory --------------------------------------------- */

static void d_event(dsim *S, int32_t dev, int kind, double start, double dur, int32_t stage,
                    int32_t mb, int32_t layer, int32_t peer)
{
    if (S->rc != HPGO_OK)
        return;
    hpgo_sim_event_t ev = {start, dur, dev, (int16_t)kind, 0, stage, mb, layer, peer};
    S->rc = hpgo_sim_result_add_event(S->res, &ev, S->err);
}

static int32_t d_stage_of(const dsim *S, int32_t dev)
{
    if (dev < S->base)
        return -1;
    return (dev - S->base) % S->P;
}

static void d_compute(dsim *S, int32_t dev, double cost, int kind, int32_t mb, int32_t layer)
{
    if (S->rec)
        d_event(S, dev, kind, S->clock[dev], cost, d_stage_of(S, dev), mb, layer, -1);
    S->clock[dev] += cost;
    S->busy[dev] += cost;
}

static void d_sync(dsim *S, const int32_t *devs, int32_t n)
{
    double m = S->clock[devs[0]];
    for (int32_t i = 1; i < n; i++)
        if (S->clock[devs[i]] > m)
            m = S->clock[devs[i]];
    for (int32_t i = 0; i < n; i++)
        S->clock[devs[i]] = m;
}

/* A collective over devs (cost on each), after a rendezvous of sync_devs. */
static void d_collective(dsim *S, const int32_t *sync_devs, int32_t n_sync, const int32_t *devs,
                         int32_t n, double cost, int kind, int32_t mb, int32_t layer)
{
    d_sync(S, sync_devs, n_sync);
    for (int32_t i = 0; i < n; i++) {
        if (S->rec)
            d_event(S, devs[i], kind, S->clock[devs[i]], cost, d_stage_of(S, devs[i]), mb, layer,
                    -1);
        S->clock[devs[i]] += cost;
    }
}

static void d_send(dsim *S, int32_t src, int32_t dst, double cost, int32_t mb, int32_t layer)
{
    int32_t pair[2] = {src, dst};
    d_sync(S, pair, 2);
    if (S->rec) {
        d_event(S, src, HPGO_EV_SEND, S->clock[src], cost, d_stage_of(S, src), mb, layer, dst);
        d_event(S, dst, HPGO_EV_RECV, S->clock[dst], cost, d_stage_of(S, dst), mb, layer, src);
    }
    S->clock[src] += cost;
    S->clock[dst] += cost;
}

static void mem_add(dsim *S, int32_t dev, int cat, double bytes)
{
    S->live[cat][dev] += bytes;
    double tot = S->live[CAT_W][dev] + S->live[CAT_G][dev] + S->live[CAT_A][dev];
    if (tot > S->peak[dev]) {
        S->peak[dev] = tot;
        S->peak_g[dev] = S->live[CAT_G][dev];
        S->peak_a[dev] = S->live[CAT_A][dev];
    }
}

static void mem_sub(dsim *S, int32_t dev, int cat, double bytes)
{
    S->live[cat][dev] -= bytes;
}

static double bytes_of(const dsim *S, int64_t nelem)
{
    return (double)nelem * S->e;
}

/* ---- program ------------------------------------------------------------- */

static void put_op(dop *o, int type, int split, int fwd_inputs, int ev_f, int32_t layer, int64_t k,
                   int64_t n, int64_t in_cols, int64_t out_cols)
{
    memset(o, 0, sizeof *o);
    o->type = type;
    o->split = split;
    o->fwd_inputs = fwd_inputs;
    o->ev_f = ev_f;
    o->ev_b = ev_f + 1; /* every forward kind is followed by its gradient kind */
    o->layer = layer;
    o->k = k;
    o->n = n;
    o->in_cols = in_cols;
    o->out_cols = out_cols;
}

/* Weighted MatMul [k x n] with the Megatron split of this shard. */
static void put_mm(dop *o, int split, int32_t layer, int64_t k, int64_t n, int32_t H)
{
    int64_t kk = split == SPLIT_ROW ? k / H : k;
    int64_t nn = split == SPLIT_COL ? n / H : n;
    put_op(o, T_MM, split, 1, HPGO_EV_MATMUL, layer, kk, nn, kk, nn);
}

static int build_program(dsim *S)
{
    const hpgo_distir_config_t *c = S->cfg;
    const int32_t H = S->H, L = S->L;
    const int64_t h = c->width;
    if (c->model == HPGO_DISTIR_MLP) {
        const int64_t din = c->input_dim > 0 ? c->input_dim : h;
        const int64_t dout = c->output_dim > 0 ? c->output_dim : h;
        S->nprog = 2 * L;
        S->prog = calloc((size_t)S->nprog, sizeof *S->prog);
        if (!S->prog)
            return HPGO_E_NOMEM;
        for (int32_t l = 0; l < L; l++) {
            int split = H > 1 ? (l % 2 == 0 ? SPLIT_COL : SPLIT_ROW) : SPLIT_NONE;
            put_mm(&S->prog[2 * l], split, l, l == 0 ? din : h, l == L - 1 ? dout : h, H);
            int64_t cols = S->prog[2 * l].out_cols;
            put_op(&S->prog[2 * l + 1], T_EW, SPLIT_NONE, 1, HPGO_EV_RELU, l, 0, cols, cols, cols);
        }
        S->x_cols = din;
        S->z_cols = dout;
    } else {
        const int64_t s = c->seq_len, a = c->heads, dh = h / a, al = a / H;
        S->nprog = 12 * L;
        S->prog = calloc((size_t)S->nprog, sizeof *S->prog);
        if (!S->prog)
            return HPGO_E_NOMEM;
        const int col = H > 1 ? SPLIT_COL : SPLIT_NONE, row = H > 1 ? SPLIT_ROW : SPLIT_NONE;
        for (int32_t b = 0; b < L; b++) {
            dop *o = &S->prog[12 * b];
            put_op(&o[0], T_EW, SPLIT_NONE, 1, HPGO_EV_LAYERNORM, b, 0, h, h, h);
            put_mm(&o[1], col, b, h, 3 * h, H);
            put_op(&o[2], T_BMM, SPLIT_NONE, 2, HPGO_EV_BATCH_MATMUL, b, 0, 0, 3 * h / H, s * al);
            o[2].bmm_per_seq = al, o[2].bm = s, o[2].bk = dh, o[2].bn = s;
            put_op(&o[3], T_EW, SPLIT_NONE, 1, HPGO_EV_SOFTMAX, b, 0, s * al, s * al, s * al);
            put_op(&o[4], T_BMM, SPLIT_NONE, 2, HPGO_EV_BATCH_MATMUL, b, 0, 0, s * al, h / H);
            o[4].bmm_per_seq = al, o[4].bm = s, o[4].bk = s, o[4].bn = dh;
            put_mm(&o[5], row, b, h, h, H);
            put_op(&o[6], T_EW, SPLIT_NONE, 2, HPGO_EV_RESIDUAL_ADD, b, 0, h, h, h);
            put_op(&o[7], T_EW, SPLIT_NONE, 1, HPGO_EV_LAYERNORM, b, 0, h, h, h);
            put_mm(&o[8], col, b, h, 4 * h, H);
            put_op(&o[9], T_EW, SPLIT_NONE, 1, HPGO_EV_GELU, b, 0, 4 * h / H, 4 * h / H,
                   4 * h / H);
            put_mm(&o[10], row, b, 4 * h, h, H);
            put_op(&o[11], T_EW, SPLIT_NONE, 2, HPGO_EV_RESIDUAL_ADD, b, 0, h, h, h);
        }
        S->x_cols = h;
        S->z_cols = h;
    }
    /* DistIR's Loss reads its first argument (the activations) in 2021 and,
     * through the shifted adapter, the labels in 2022 */
    S->loss_cols =
        S->flav == HPGO_DISTIR_2022 ? S->z_cols : S->prog[S->nprog - 1].out_cols;
    S->st_first = malloc((size_t)S->P * sizeof(int32_t));
    S->st_last = malloc((size_t)S->P * sizeof(int32_t));
    if (!S->st_first || !S->st_last)
        return HPGO_E_NOMEM;
    const int32_t per = S->nprog / S->P; /* ops per stage: layers split evenly */
    for (int32_t k = 0; k < S->P; k++) {
        S->st_first[k] = k * per;
        S->st_last[k] = (k + 1) * per - 1;
    }
    return HPGO_OK;
}

/* ---- DistIR's timestep scheduler ------------------------------------------ */

static int build_schedule(dsim *S)
{
    const int32_t P = S->P, K = S->K;
    const size_t PK = (size_t)P * K;
    int32_t *rem = malloc(2 * PK * sizeof *rem);        /* [type][k][mb] */
    uint8_t *state = calloc(2 * PK, 1);                 /* 1 ready, 2 scheduled */
    int32_t *nready = calloc(2 * (size_t)P, sizeof *nready);
    int32_t *lo = calloc(2 * (size_t)P, sizeof *lo);    /* lowest unscheduled mb */
    int32_t *prev = malloc((size_t)P * sizeof *prev);
    int32_t *keys = malloc((size_t)P * sizeof *keys);
    uint8_t *haskey = calloc((size_t)P, 1);
    int32_t *tmp_k = malloc((size_t)P * sizeof *tmp_k);
    int32_t *tmp_t = malloc((size_t)P * sizeof *tmp_t);
    int32_t *tmp_mb = malloc((size_t)P * sizeof *tmp_mb);
    S->ts_off = malloc((2 * PK + 1) * sizeof *S->ts_off);
    S->ts_k = malloc(2 * PK * sizeof *S->ts_k);
    S->ts_t = malloc(2 * PK * sizeof *S->ts_t);
    S->ts_mb = malloc(2 * PK * sizeof *S->ts_mb);
    int rc = HPGO_OK;
    if (!rem || !state || !nready || !lo || !prev || !keys || !haskey || !tmp_k || !tmp_t ||
        !tmp_mb || !S->ts_off || !S->ts_k || !S->ts_t || !S->ts_mb) {
        rc = HPGO_E_NOMEM;
        goto done;
    }
    for (int32_t k = 0; k < P; k++) {
        prev[k] = TY_B;
        for (int32_t m = 0; m < K; m++) {
            rem[(size_t)k * K + m] = k == 0 ? 0 : 1;
            rem[PK + (size_t)k * K + m] = 1 + (k > 0) + (k < P - 1);
        }
    }
    for (int32_t m = 0; m < K; m++)
        state[m] = 1;
    nready[0] = K;
    keys[0] = 0;
    haskey[0] = 1;
    int32_t nkeys = 1, n_entries = 0;
    const int64_t total = 2 * (int64_t)PK;
    S->nts = 0;
    S->ts_off[0] = 0;
    while (n_entries < total) {
        const int32_t snapshot = nkeys;
        int32_t nt = 0;
        for (int32_t idx = 0; idx < snapshot; idx++) {
            const int32_t k = keys[idx];
            const int32_t nf = nready[2 * k], nb = nready[2 * k + 1];
            if (nf + nb == 0)
                continue;
            int t;
            if (S->cfg->schedule == HPGO_SCHED_GPIPE)
                t = nf > 0 ? TY_F : TY_B;
            else if (prev[k] == TY_F)
                t = nb > 0 ? TY_B : TY_F;
            else
                t = nf > 0 ? TY_F : TY_B;
            prev[k] = t;
            uint8_t *st = &state[(size_t)t * PK + (size_t)k * K];
            int32_t m = lo[2 * k + t];
            while (st[m] != 1)
                m++;
            st[m] = 2;
            nready[2 * k + t]--;
            while (lo[2 * k + t] < K && st[lo[2 * k + t]] == 2)
                lo[2 * k + t]++;
            tmp_k[nt] = k, tmp_t[nt] = t, tmp_mb[nt] = m, nt++;
            /* consumers of this stage's outputs */
            int32_t ck[3], ct[3], nc = 0;
            if (t == TY_F) {
                if (k + 1 < P) {
                    ck[nc] = k + 1, ct[nc++] = TY_F;
                    ck[nc] = k + 1, ct[nc++] = TY_B;
                }
                ck[nc] = k, ct[nc++] = TY_B;
            } else if (k > 0) {
                ck[nc] = k - 1, ct[nc++] = TY_B;
            }
            for (int32_t i = 0; i < nc; i++) {
                size_t at = (size_t)ct[i] * PK + (size_t)ck[i] * K + m;
                if (--rem[at] == 0) {
                    state[at] = 1;
                    nready[2 * ck[i] + ct[i]]++;
                    if (!haskey[ck[i]]) {
                        haskey[ck[i]] = 1;
                        keys[nkeys++] = ck[i];
                    }
                }
            }
        }
        if (nt == 0) {
            rc = HPGO_E_INTERNAL;
            goto done;
        }
        /* emission order: ascending device, i.e. stage */
        for (int32_t i = 1; i < nt; i++) {
            int32_t a = tmp_k[i], b = tmp_t[i], c = tmp_mb[i], j = i - 1;
            while (j >= 0 && tmp_k[j] > a) {
                tmp_k[j + 1] = tmp_k[j], tmp_t[j + 1] = tmp_t[j], tmp_mb[j + 1] = tmp_mb[j];
                j--;
            }
            tmp_k[j + 1] = a, tmp_t[j + 1] = b, tmp_mb[j + 1] = c;
        }
        for (int32_t i = 0; i < nt; i++) {
            S->ts_k[n_entries] = tmp_k[i];
            S->ts_t[n_entries] = tmp_t[i];
            S->ts_mb[n_entries] = tmp_mb[i];
            n_entries++;
        }
        S->ts_off[++S->nts] = n_entries;
    }
done:
    free(rem);
    free(state);
    free(nready);
    free(lo);
    free(prev);
    free(keys);
    free(haskey);
    free(tmp_k);
    free(tmp_t);
    free(tmp_mb);
    return rc;
}

/* ---- emission ------------------------------------------------------------ */

static int32_t dev_of(const dsim *S, int32_t i, int32_t j, int32_t k)
{
    return S->base + i * S->H * S->P + j * S->P + k;
}

/* Function-output aggregation for micro-batch mb on the shard devices. */
static void d_aggregate_concat(dsim *S, const int32_t *devs, int32_t mb, int32_t layer)
{
    for (int32_t j = 0; j < S->H; j++) {
        if (mb == 0) {
            if (S->K > 1)
                d_compute(S, devs[j], 0.0, HPGO_EV_IDENTITY, mb, layer);
        } else {
            d_compute(S, devs[j], S->flav == HPGO_DISTIR_2022 ? S->klo : 0.0, HPGO_EV_CONCAT, mb,
                      layer);
        }
    }
}

/* Non-zero when the run must stop: an earlier error, or the caller's cancel
 * flag (read every HPGO_CANCEL_EVERY / 16 operations; one may cost H). */
static int d_stop(dsim *S)
{
    if (S->rc != HPGO_OK)
        return 1;
    if (++S->tick < HPGO_CANCEL_EVERY / 16)
        return 0;
    S->tick = 0;
    if (hpgo_cancelled(S->cfg->cancel))
        S->rc = hpgo_err_set(S->err, HPGO_E_CANCELLED, 0, "the simulation was cancelled");
    return S->rc != HPGO_OK;
}

static void emit_forward(dsim *S, int32_t i, int32_t k, int32_t mb)
{
    int32_t devs[HPGO_SIM_MAX_DEVICES];
    const int32_t H = S->H;
    const int64_t rows = S->rows;
    for (int32_t j = 0; j < H; j++) {
        devs[j] = dev_of(S, i, j, k);
        if (++S->infl[devs[j]] > S->max_infl[devs[j]])
            S->max_infl[devs[j]] = S->infl[devs[j]];
    }
    for (int32_t o = S->st_first[k]; o <= S->st_last[k]; o++) {
        if (d_stop(S))
            return;
        const dop *op = &S->prog[o];
        double cost;
        if (op->type == T_MM)
            cost = c_mm(S, rows, op->k, op->n);
        else if (op->type == T_EW)
            cost = c_ew(S, rows * op->n, op->fwd_inputs);
        else
            cost = (double)(rows / S->cfg->seq_len * op->bmm_per_seq) *
                   c_mm(S, op->bm, op->bk, op->bn);
        const double out_b = bytes_of(S, rows * op->out_cols);
        for (int32_t j = 0; j < H; j++) {
            if (op->type == T_MM && S->flav == HPGO_DISTIR_2021_GRID && k > 0 &&
                !S->wsent[(size_t)j * S->nprog + o]) {
                S->wsent[(size_t)j * S->nprog + o] = 1;
                d_send(S, dev_of(S, i, j, 0), devs[j], c_send(S, op->k * op->n), -1, op->layer);
            }
            d_compute(S, devs[j], cost, op->ev_f, mb, op->layer);
            mem_add(S, devs[j], CAT_A, out_b);
        }
        if (op->type == T_MM && op->split == SPLIT_ROW) {
            d_collective(S, devs, H, devs, H, c_allreduce(S, rows * op->n, H), HPGO_EV_ALLREDUCE,
                         mb, op->layer);
            for (int32_t j = 0; j < H; j++) {
                mem_add(S, devs[j], CAT_A, out_b);
                mem_sub(S, devs[j], CAT_A, out_b);
            }
        }
    }
    if (k == S->P - 1) {
        const int32_t layer = S->L - 1;
        const double loss_cost = c_ew(S, rows * S->loss_cols, 1);
        const double l_b = bytes_of(S, rows * S->prog[S->nprog - 1].out_cols);
        const double z_b = bytes_of(S, rows * S->z_cols);
        for (int32_t j = 0; j < H; j++) {
            if (S->P > 1 && S->flav != HPGO_DISTIR_2022) {
                d_send(S, dev_of(S, i, j, 0), devs[j], c_send(S, rows * S->z_cols), mb, -1);
                mem_add(S, devs[j], CAT_A, z_b);
            }
            d_compute(S, devs[j], loss_cost, HPGO_EV_LOSS, mb, layer);
            mem_add(S, devs[j], CAT_A, l_b); /* l is a function output: never freed */
        }
        d_aggregate_concat(S, devs, mb, layer);
        for (int32_t j = 0; j < H; j++) {
            d_compute(S, devs[j], loss_cost, HPGO_EV_LOSS_GRAD, mb, layer);
            mem_add(S, devs[j], CAT_A, l_b); /* dl */
            if (S->P > 1 && S->flav != HPGO_DISTIR_2022)
                mem_sub(S, devs[j], CAT_A, z_b);
        }
    }
}

static void emit_backward(dsim *S, int32_t i, int32_t k, int32_t mb)
{
    int32_t devs[HPGO_SIM_MAX_DEVICES];
    const int32_t H = S->H;
    const int64_t rows = S->rows;
    for (int32_t j = 0; j < H; j++)
        devs[j] = dev_of(S, i, j, k);
    for (int32_t o = S->st_last[k]; o >= S->st_first[k]; o--) {
        if (d_stop(S))
            return;
        const dop *op = &S->prog[o];
        double cost;
        if (op->type == T_MM)
            cost = c_mm(S, rows, op->n, op->k) + c_mm(S, op->k, rows, op->n);
        else if (op->type == T_EW)
            cost = c_ew(S, rows * op->n, 2);
        else
            cost = (double)(rows / S->cfg->seq_len * op->bmm_per_seq) *
                   (c_mm(S, op->bm, op->bn, op->bk) + c_mm(S, op->bk, op->bm, op->bn));
        const double dx_b = bytes_of(S, rows * op->in_cols);
        const double dw_b = op->type == T_MM ? bytes_of(S, op->k * op->n) : 0.0;
        const double g_b = bytes_of(S, rows * op->out_cols);
        for (int32_t j = 0; j < H; j++) {
            d_compute(S, devs[j], cost, op->ev_b, mb, op->layer);
            mem_add(S, devs[j], CAT_A, dx_b);
            if (dw_b > 0.0)
                mem_add(S, devs[j], CAT_G, dw_b);
            mem_sub(S, devs[j], CAT_A, g_b); /* the incoming gradient */
            if (o > 0)
                mem_sub(S, devs[j], CAT_A, dx_b); /* the stashed input (x stays) */
            if (o == S->nprog - 1)
                mem_sub(S, devs[j], CAT_A, g_b); /* the last activation, read by the loss */
        }
        if (op->type == T_MM && op->split == SPLIT_COL) {
            d_collective(S, devs, H, devs, H, c_allreduce(S, rows * op->k, H), HPGO_EV_ALLREDUCE,
                         mb, op->layer);
            for (int32_t j = 0; j < H; j++) {
                mem_add(S, devs[j], CAT_A, dx_b);
                mem_sub(S, devs[j], CAT_A, dx_b);
            }
        }
        if (o == 0)
            d_aggregate_concat(S, devs, mb, op->layer); /* dy0 is a function output */
        if (op->type == T_MM) {
            for (int32_t j = 0; j < H; j++) {
                if (mb == 0) {
                    if (S->K > 1) {
                        d_compute(S, devs[j], 0.0, HPGO_EV_IDENTITY, mb, op->layer);
                        mem_add(S, devs[j], CAT_G, dw_b);
                        mem_sub(S, devs[j], CAT_G, dw_b);
                    }
                } else {
                    d_compute(S, devs[j], c_ew(S, op->k * op->n, 2), HPGO_EV_ADD, mb, op->layer);
                    mem_add(S, devs[j], CAT_G, dw_b);
                    mem_sub(S, devs[j], CAT_G, 2.0 * dw_b);
                }
            }
        }
    }
    for (int32_t j = 0; j < H; j++)
        S->infl[devs[j]]--;
}

/* Boundary sends after a timestep (forward activation, backward gradient). */
static void emit_handoff(dsim *S, int32_t i, int32_t e0, int32_t e1)
{
    for (int32_t e = e0; e < e1; e++) {
        const int32_t k = S->ts_k[e], mb = S->ts_mb[e];
        for (int32_t j = 0; j < S->H; j++) {
            int32_t src = dev_of(S, i, j, k), dst;
            int64_t nelem;
            int32_t layer;
            if (S->ts_t[e] == TY_F) {
                if (k == S->P - 1)
                    continue;
                dst = src + 1;
                nelem = S->rows * S->prog[S->st_last[k]].out_cols;
                layer = S->prog[S->st_last[k]].layer;
            } else {
                if (k == 0)
                    continue;
                dst = src - 1;
                nelem = S->rows * S->prog[S->st_first[k]].in_cols;
                layer = S->prog[S->st_first[k]].layer;
            }
            d_send(S, src, dst, c_send(S, nelem), mb, layer);
            mem_sub(S, src, CAT_A, bytes_of(S, nelem));
            mem_add(S, dst, CAT_A, bytes_of(S, nelem));
        }
    }
}

/* One distribution step from set[0] to set[1..n]: x, z and (when DistIR
 * ships them) every weight, each a free op that synchronises its devices. */
static void d_distribute(dsim *S, const int32_t *set, int32_t n, int kind_xz, int kind_w,
                         int weights)
{
    d_collective(S, set, n + 1, set + 1, n, 0.0, kind_xz, -1, -1); /* x */
    d_collective(S, set, n + 1, set + 1, n, 0.0, kind_xz, -1, -1); /* z */
    if (weights)
        for (int32_t o = 0; o < S->nprog; o++)
            if (S->prog[o].type == T_MM)
                d_collective(S, set, n + 1, set + 1, n, 0.0, kind_w, -1, S->prog[o].layer);
}

/* Input distribution (DistIR's _partition_inputs_*), before any compute:
 * scatter / broadcast to the replicas (or send everything to device 1),
 * broadcast / scatter to the shards, split x and z into micro-batches. */
static void emit_inputs(dsim *S)
{
    const int32_t D = S->D, H = S->H;
    const int grid = S->flav == HPGO_DISTIR_2021_GRID; /* weights are shipped, not in place */
    int32_t set[HPGO_SIM_MAX_DEVICES + 1];
    if (D > 1) {
        set[0] = 0;
        for (int32_t i = 0; i < D; i++)
            set[1 + i] = dev_of(S, i, 0, 0);
        d_distribute(S, set, D, HPGO_EV_SCATTER, HPGO_EV_BROADCAST, grid);
    } else {
        const int32_t d1 = dev_of(S, 0, 0, 0);
        d_send(S, 0, d1, c_send(S, S->B * S->x_cols), -1, -1);
        d_send(S, 0, d1, c_send(S, S->B * S->z_cols), -1, -1);
        if (grid)
            for (int32_t o = 0; o < S->nprog; o++) {
                const dop *op = &S->prog[o];
                if (op->type == T_MM) /* the unsharded weight */
                    d_send(S, 0, d1, c_send(S, op->k * op->n * (op->split ? H : 1)), -1,
                           op->layer);
            }
    }
    if (H > 1)
        for (int32_t i = 0; i < D; i++) {
            set[0] = dev_of(S, i, 0, 0);
            for (int32_t j = 0; j < H; j++)
                set[1 + j] = dev_of(S, i, j, 0);
            d_distribute(S, set, H, HPGO_EV_BROADCAST, HPGO_EV_SCATTER, grid);
        }
    if (S->P > 1 || S->K > 1)
        for (int32_t i = 0; i < D; i++)
            for (int32_t j = 0; j < H; j++) {
                d_compute(S, dev_of(S, i, j, 0), S->klo, HPGO_EV_SPLIT, -1, -1);
                d_compute(S, dev_of(S, i, j, 0), S->klo, HPGO_EV_SPLIT, -1, -1);
            }
}

/* Data-parallel aggregation after all replicas: gradient all-reduces and
 * all-gathers, in the order of the function's outputs. */
static void emit_dp(dsim *S)
{
    const int32_t D = S->D;
    int32_t devs[HPGO_SIM_MAX_DEVICES];
    const int32_t per = S->nprog / S->P;
    for (int32_t j = 0; j < S->H; j++) {
        for (int32_t i = 0; i < D; i++)
            devs[i] = dev_of(S, i, j, S->P - 1);
        int64_t nel = S->B / D * S->prog[S->nprog - 1].out_cols;
        d_collective(S, devs, D, devs, D, c_allgather(S, nel, D), HPGO_EV_ALLGATHER, -1, S->L - 1);
        for (int32_t i = 0; i < D; i++)
            mem_add(S, devs[i], CAT_A, (double)(D - 1) * bytes_of(S, nel));
    }
    for (int32_t o = S->nprog - 1; o >= 0; o--) {
        if (d_stop(S))
            return;
        const dop *op = &S->prog[o];
        if (o == 0)
            for (int32_t j = 0; j < S->H; j++) {
                for (int32_t i = 0; i < D; i++)
                    devs[i] = dev_of(S, i, j, 0);
                int64_t nel = S->B / D * op->in_cols;
                d_collective(S, devs, D, devs, D, c_allgather(S, nel, D), HPGO_EV_ALLGATHER, -1,
                             op->layer);
                for (int32_t i = 0; i < D; i++)
                    mem_add(S, devs[i], CAT_A, (double)(D - 1) * bytes_of(S, nel));
            }
        if (op->type != T_MM)
            continue;
        for (int32_t j = 0; j < S->H; j++) {
            for (int32_t i = 0; i < D; i++)
                devs[i] = dev_of(S, i, j, o / per);
            d_collective(S, devs, D, devs, D, c_allreduce(S, op->k * op->n, D),
                         HPGO_EV_ALLREDUCE, -1, op->layer);
            for (int32_t i = 0; i < D; i++) {
                mem_add(S, devs[i], CAT_G, bytes_of(S, op->k * op->n));
                mem_sub(S, devs[i], CAT_G, bytes_of(S, op->k * op->n));
            }
        }
    }
}

/* Resident memory at the start: each device's weight shards and, on the
 * first stage, its replica's x and z. */
static void init_memory(dsim *S)
{
    const int32_t per = S->nprog / S->P;
    for (int32_t i = 0; i < S->D; i++)
        for (int32_t j = 0; j < S->H; j++) {
            for (int32_t o = 0; o < S->nprog; o++)
                if (S->prog[o].type == T_MM)
                    mem_add(S, dev_of(S, i, j, o / per), CAT_W,
                            bytes_of(S, S->prog[o].k * S->prog[o].n));
            mem_add(S, dev_of(S, i, j, 0), CAT_A,
                    bytes_of(S, S->B / S->D * (S->x_cols + S->z_cols)));
        }
}

/* ---- validation and entry points -------------------------------------------- */

static int bad(hpgo_err_t *err, const char *fmt, long long v)
{
    return hpgo_err_set(err, HPGO_E_INVALID, 0, fmt, v);
}

int hpgo_distir_validate(const hpgo_distir_config_t *c, hpgo_err_t *err)
{
    if (!c)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "no configuration given");
    if (c->model != HPGO_DISTIR_MLP && c->model != HPGO_DISTIR_TRANSFORMER)
        return bad(err, "unknown model kind %lld", c->model);
    if (c->cost_model < 0 || c->cost_model >= HPGO_DISTIR__COUNT)
        return bad(err, "unknown cost model %lld", c->cost_model);
    if (c->schedule != HPGO_SCHED_1F1B && c->schedule != HPGO_SCHED_GPIPE)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the DistIR study schedules pipelines with '1f1b' or 'gpipe' only");
    if (c->batch_size < 1)
        return bad(err, "batch_size must be >= 1, got %lld", (long long)c->batch_size);
    if (c->width < 1)
        return bad(err, "width must be >= 1, got %lld", (long long)c->width);
    if (c->layers < 1)
        return bad(err, "layers must be >= 1, got %lld", (long long)c->layers);
    if (c->input_dim < 0 || c->output_dim < 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "input_dim / output_dim must be >= 1");
    if (c->dp < 1)
        return bad(err, "dp must be >= 1, got %lld", (long long)c->dp);
    if (c->tp < 1)
        return bad(err, "tp must be >= 1, got %lld", (long long)c->tp);
    if (c->pp < 1)
        return bad(err, "pp must be >= 1, got %lld", (long long)c->pp);
    if (c->microbatches < 1)
        return bad(err, "microbatches must be >= 1, got %lld", (long long)c->microbatches);
    if (c->dtype_bytes < 0 || c->dtype_bytes > 16)
        return bad(err, "dtype_bytes must be between 1 and 16, got %lld",
                   (long long)c->dtype_bytes);
    if (c->width > HPGO_DISTIR_MAX_DIM || c->input_dim > HPGO_DISTIR_MAX_DIM ||
        c->output_dim > HPGO_DISTIR_MAX_DIM)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "widths above %lld are not supported",
                            (long long)HPGO_DISTIR_MAX_DIM);
    if (c->seq_len > HPGO_DISTIR_MAX_SEQ)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "seq_len above %lld is not supported",
                            (long long)HPGO_DISTIR_MAX_SEQ);
    if (c->layers > HPGO_DISTIR_MAX_LAYERS)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "%d layers exceed the limit of %d",
                            (int)c->layers, HPGO_DISTIR_MAX_LAYERS);
    if (c->batch_size > HPGO_DISTIR_MAX_TOKENS ||
        (c->model == HPGO_DISTIR_TRANSFORMER && c->seq_len > 0 &&
         c->batch_size > HPGO_DISTIR_MAX_TOKENS / c->seq_len))
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "batch_size %lld is too large (at most %lld samples, or tokens "
                            "= batch_size x seq_len for the transformer)",
                            (long long)c->batch_size, (long long)HPGO_DISTIR_MAX_TOKENS);
    const int64_t W = (int64_t)c->dp * c->tp * c->pp;
    if (W > HPGO_SIM_MAX_DEVICES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "dp*tp*pp = %lld devices exceed the limit of %d", (long long)W,
                            HPGO_SIM_MAX_DEVICES);
    if (c->microbatches > HPGO_SIM_MAX_MICROBATCHES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "%d micro-batches exceed the limit of %d",
                            (int)c->microbatches, HPGO_SIM_MAX_MICROBATCHES);
    if (c->layers % c->pp != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "layers (%d) must be a multiple of pp (%d): stages hold equal "
                            "numbers of layers",
                            (int)c->layers, (int)c->pp);
    if (c->batch_size % ((int64_t)c->dp * c->microbatches) != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "batch_size (%lld) must be a multiple of dp*microbatches (%lld)",
                            (long long)c->batch_size, (long long)c->dp * c->microbatches);
    const int64_t h = c->width, H = c->tp;
    if (c->model == HPGO_DISTIR_MLP) {
        const int64_t dout = c->output_dim > 0 ? c->output_dim : h;
        if (H > 1) {
            if (h % H != 0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "width (%lld) must be a multiple of tp (%d)", (long long)h,
                                    (int)H);
            if (c->layers % 2 == 1 && dout % H != 0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "output_dim (%lld) must be a multiple of tp (%d): the last "
                                    "layer is column-split",
                                    (long long)dout, (int)H);
            if (c->layers == 1 && dout % H != 0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "output_dim must be a multiple of tp");
        }
    } else {
        if (c->seq_len < 1)
            return bad(err, "seq_len must be >= 1, got %lld", (long long)c->seq_len);
        if (c->heads < 1)
            return bad(err, "heads must be >= 1, got %lld", (long long)c->heads);
        if (h % c->heads != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "width (%lld) must be a multiple of heads (%d)", (long long)h,
                                (int)c->heads);
        if (c->heads % H != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "heads (%d) must be a multiple of tp (%d)", (int)c->heads,
                                (int)H);
    }
    double v[4] = {c->device_flops, c->memory_bandwidth, c->kernel_launch, c->link_gbps};
    const char *names[4] = {"device_flops", "memory_bandwidth", "kernel_launch_overhead",
                            "devices_bandwidth_gbps"};
    for (int i = 0; i < 4; i++)
        if (!isfinite(v[i]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "%s must be a finite number", names[i]);
    /* work bound: keeps one call from running for minutes */
    double ops = (double)c->dp * (double)c->tp * (double)c->microbatches *
                 (2.0 * c->layers * (c->model == HPGO_DISTIR_MLP ? 2 : 12) + 8.0 + 2.0 * c->pp);
    if (ops > 4e9)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "this configuration would emit about %.3g operations (limit 4e9)",
                            ops);
    if (c->record_events && ops * 2.0 > (double)HPGO_SIM_MAX_EVENTS)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "the timeline would have about %.3g events (limit %lld); simulate "
                            "without a timeline",
                            ops * 2.0, (long long)HPGO_SIM_MAX_EVENTS);
    return HPGO_OK;
}

static void d_free(dsim *S)
{
    free(S->prog);
    free(S->st_first);
    free(S->st_last);
    free(S->clock);
    free(S->busy);
    for (int c = 0; c < 3; c++)
        free(S->live[c]);
    free(S->peak);
    free(S->peak_g);
    free(S->peak_a);
    free(S->infl);
    free(S->max_infl);
    free(S->wsent);
    free(S->ts_off);
    free(S->ts_k);
    free(S->ts_t);
    free(S->ts_mb);
}

static void set_defaults(dsim *S, const hpgo_distir_config_t *c)
{
    const int f = c->cost_model;
    S->flav = f;
    S->ei = c->dtype_bytes > 0 ? c->dtype_bytes : 4;
    S->e = (double)S->ei;
    if (f == HPGO_DISTIR_2022) {
        S->tp = 1.4e13, S->dram = 9.0e11, S->klo = 1e-5, S->gbps = 4800.0, S->div = 1.25e8;
        S->mm_e = S->ei;
    } else {
        S->tp = 1.0e14, S->dram = 1.2e12, S->klo = 1e-6;
        S->gbps = f == HPGO_DISTIR_2021 ? 4800.0 : 200.0;
        S->div = f == HPGO_DISTIR_2021 ? 1.25e8 : 8e9;
        S->mm_e = f == HPGO_DISTIR_2021 ? S->ei : 2;
    }
    if (c->device_flops > 0)
        S->tp = c->device_flops;
    if (c->memory_bandwidth > 0)
        S->dram = c->memory_bandwidth;
    if (c->kernel_launch >= 0)
        S->klo = c->kernel_launch;
    if (c->link_gbps > 0)
        S->gbps = c->link_gbps;
}

static int fill_result(dsim *S)
{
    hpgo_sim_result_t *r = S->res;
    const int32_t first = S->seq ? 0 : (S->flav == HPGO_DISTIR_2022 ? 1 : 0);
    int32_t nd = 0;
    double it = 0.0;
    for (int32_t d = first; d < S->ndev; d++) {
        hpgo_sim_device_stats_t *ds = &r->devices[nd++];
        ds->device = d;
        ds->stage = S->seq ? 0 : d_stage_of(S, d);
        ds->end = S->clock[d];
        ds->busy = S->busy[d];
        ds->peak_bytes = S->peak[d];
        if (S->clock[d] > it)
            it = S->clock[d];
    }
    r->n_devices = nd;
    r->iteration_time = it;
    for (int32_t k = 0; k < S->P; k++) {
        hpgo_sim_stage_stats_t *ss = &r->stages[k];
        for (int32_t d = S->base; d < S->ndev; d++) {
            if (d_stage_of(S, d) != k)
                continue;
            if (S->busy[d] > ss->busy)
                ss->busy = S->busy[d];
            if (S->max_infl[d] > ss->max_in_flight)
                ss->max_in_flight = S->max_infl[d];
            if (S->peak[d] > ss->peak_bytes) {
                ss->peak_bytes = S->peak[d];
                ss->weight_bytes = S->live[CAT_W][d];
                ss->gradient_bytes = S->peak_g[d];
                ss->activation_bytes = S->peak_a[d];
            }
        }
        ss->bubble = it > 0.0 ? 1.0 - ss->busy / it : 0.0;
        if (ss->bubble < 0.0)
            ss->bubble = 0.0;
    }
    return HPGO_OK;
}

int hpgo_distir_simulate(const hpgo_distir_config_t *cfg, hpgo_sim_result_t **out,
                         hpgo_err_t *err)
{
    *out = NULL;
    int rc = hpgo_distir_validate(cfg, err);
    if (rc != HPGO_OK)
        return rc;
    dsim S;
    memset(&S, 0, sizeof S);
    S.cfg = cfg;
    S.err = err;
    S.rec = cfg->record_events != 0;
    set_defaults(&S, cfg);
    if (!(S.tp > 0 && S.dram > 0 && S.gbps > 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "device_flops, memory_bandwidth and devices_bandwidth_gbps must be > 0");
    S.D = cfg->dp, S.H = cfg->tp, S.P = cfg->pp, S.K = cfg->microbatches, S.L = cfg->layers;
    S.B = cfg->batch_size;
    S.rows = S.B / S.D / S.K * (cfg->model == HPGO_DISTIR_TRANSFORMER ? cfg->seq_len : 1);
    /* DistIR times a one-device, one-micro-batch program untransformed in the
     * Figure 3 and HEAD code paths; the Figure 4 grid transforms it too */
    const int32_t W = S.D * S.H * S.P;
    S.seq = W == 1 && S.K == 1 && S.flav != HPGO_DISTIR_2021_GRID;
    S.base = S.seq ? 0 : 1;
    S.ndev = S.seq ? 1 : W + 1;
    if (cfg->model == HPGO_DISTIR_TRANSFORMER) {
        /* x and z are [tokens x width]; the batch counts sequences */
        S.B *= cfg->seq_len;
    }
    rc = build_program(&S);
    if (rc == HPGO_OK)
        rc = build_schedule(&S);
    if (rc == HPGO_OK) {
        const size_t nd = (size_t)S.ndev;
        S.clock = calloc(nd, sizeof(double));
        S.busy = calloc(nd, sizeof(double));
        for (int c = 0; c < 3; c++)
            S.live[c] = calloc(nd, sizeof(double));
        S.peak = calloc(nd, sizeof(double));
        S.peak_g = calloc(nd, sizeof(double));
        S.peak_a = calloc(nd, sizeof(double));
        S.infl = calloc(nd, sizeof(int32_t));
        S.max_infl = calloc(nd, sizeof(int32_t));
        S.wsent = calloc((size_t)S.H * (size_t)S.nprog, 1);
        if (!S.clock || !S.busy || !S.live[0] || !S.live[1] || !S.live[2] || !S.peak ||
            !S.peak_g || !S.peak_a || !S.infl || !S.max_infl || !S.wsent)
            rc = HPGO_E_NOMEM;
    }
    if (rc == HPGO_OK)
        rc = hpgo_sim_result_new(S.P, S.ndev, &S.res, err);
    else if (rc == HPGO_E_NOMEM)
        hpgo_err_set(err, rc, 0, "out of memory simulating this configuration");
    else
        hpgo_err_set(err, rc, 0, "the pipeline scheduler found no ready stage");
    if (rc != HPGO_OK) {
        d_free(&S);
        return rc;
    }
    S.rc = HPGO_OK;
    init_memory(&S);
    if (!S.seq && S.flav != HPGO_DISTIR_2022)
        emit_inputs(&S);
    for (int32_t i = 0; i < S.D && S.rc == HPGO_OK; i++) {
        memset(S.wsent, 0, (size_t)S.H * (size_t)S.nprog);
        for (int32_t t = 0; t < S.nts && S.rc == HPGO_OK; t++) {
            const int32_t e0 = S.ts_off[t], e1 = S.ts_off[t + 1];
            for (int32_t e = e0; e < e1 && S.rc == HPGO_OK; e++) {
                if (S.ts_t[e] == TY_F)
                    emit_forward(&S, i, S.ts_k[e], S.ts_mb[e]);
                else
                    emit_backward(&S, i, S.ts_k[e], S.ts_mb[e]);
            }
            if (S.P > 1)
                emit_handoff(&S, i, e0, e1);
        }
    }
    if (S.rc == HPGO_OK && S.D > 1)
        emit_dp(&S);
    rc = S.rc;
    if (rc == HPGO_OK)
        rc = fill_result(&S);
    if (rc != HPGO_OK) {
        hpgo_sim_result_free(S.res);
        d_free(&S);
        return rc;
    }
    *out = S.res;
    d_free(&S);
    return HPGO_OK;
}

/* ---- grids and batches ----------------------------------------------------- */

static int32_t ilog2_i64(int64_t v)
{
    int32_t r = -1;
    while (v > 0) {
        v >>= 1;
        r++;
    }
    return r;
}

int hpgo_distir_grid_configs(const hpgo_distir_config_t *base, const int32_t *world_sizes,
                             int32_t n_world, const int32_t *mb_choices, int32_t n_mb,
                             hpgo_distir_config_t **out, int64_t *n_out, hpgo_err_t *err)
{
    *out = NULL;
    *n_out = 0;
    if (!base || (n_world > 0 && !world_sizes) || n_world < 0 || n_mb < 0 ||
        (n_mb > 0 && !mb_choices))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "bad grid arguments");
    for (int32_t w = 0; w < n_world; w++)
        if (world_sizes[w] < 1 || world_sizes[w] > HPGO_SIM_MAX_DEVICES)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "device counts must be between 1 and %d, got %d",
                                HPGO_SIM_MAX_DEVICES, (int)world_sizes[w]);
    for (int32_t m = 0; m < n_mb; m++)
        if (mb_choices[m] < 1)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "micro-batch counts must be >= 1, got %d",
                                (int)mb_choices[m]);
    /* the model itself must be valid at D = H = P = K = 1 */
    hpgo_distir_config_t one = *base;
    one.dp = one.tp = one.pp = one.microbatches = 1;
    one.record_events = 0;
    int rc = hpgo_distir_validate(&one, err);
    if (rc != HPGO_OK)
        return rc;
    int64_t cap = 64, n = 0;
    hpgo_distir_config_t *v = malloc((size_t)cap * sizeof *v);
    if (!v)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
    for (int32_t w = 0; w < n_world; w++) {
        const int32_t W = world_sizes[w];
        for (int32_t D = 1; D <= W; D++) {
            if (W % D)
                continue;
            for (int32_t H = 1; H <= W / D; H++) {
                if ((W / D) % H)
                    continue;
                const int32_t P = W / D / H;
                int32_t ks[64], nk = 0;
                if (P == 1) {
                    ks[nk++] = 1;
                } else if (n_mb > 0) {
                    for (int32_t m = 0; m < n_mb && nk < 64; m++)
                        ks[nk++] = mb_choices[m];
                } else if (base->cost_model == HPGO_DISTIR_2022) {
                    for (int32_t kk = 2; kk <= 128; kk *= 2)
                        ks[nk++] = kk;
                } else {
                    int32_t kmax = ilog2_i64(base->batch_size / D) / 2 - 1;
                    for (int32_t e = 1; e <= kmax && e < 31; e++)
                        ks[nk++] = (int32_t)1 << e;
                }
                for (int32_t q = 0; q < nk; q++) {
                    hpgo_distir_config_t c = *base;
                    c.dp = D, c.tp = H, c.pp = P, c.microbatches = ks[q];
                    c.record_events = 0;
                    if (hpgo_distir_validate(&c, NULL) != HPGO_OK)
                        continue;
                    if (n == cap) {
                        cap *= 2;
                        hpgo_distir_config_t *nv = realloc(v, (size_t)cap * sizeof *v);
                        if (!nv) {
                            free(v);
                            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
                        }
                        v = nv;
                    }
                    v[n++] = c;
                }
            }
        }
    }
    *out = v;
    *n_out = n;
    return HPGO_OK;
}

static void point_job(void *ctx, int64_t i)
{
    hpgo_distir_point_t *p = &((hpgo_distir_point_t *)ctx)[i];
    hpgo_sim_result_t *r = NULL;
    hpgo_err_clear(&p->err);
    if (hpgo_cancelled(p->cfg.cancel)) {
        p->code = hpgo_err_set(&p->err, HPGO_E_CANCELLED, 0, "the simulation was cancelled");
        return;
    }
    p->cfg.record_events = 0;
    p->code = hpgo_distir_simulate(&p->cfg, &r, &p->err);
    if (p->code == HPGO_OK) {
        p->iteration_time = r->iteration_time;
        p->peak_bytes = 0.0;
        for (int32_t d = 0; d < r->n_devices; d++)
            if (r->devices[d].peak_bytes > p->peak_bytes)
                p->peak_bytes = r->devices[d].peak_bytes;
    }
    hpgo_sim_result_free(r);
}

void hpgo_distir_run_points(hpgo_distir_point_t *points, int64_t n, hpgo_pool_t *pool)
{
    if (pool) {
        hpgo_pool_run(pool, n, point_job, points);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        point_job(points, i);
}
