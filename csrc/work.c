/* work.c - per-stage costs of a training step (see work.h).
 *
 * DESIGN: a transformer layer is a fixed list of kernels, each with its
 * FLOPs and HBM bytes for one micro-batch on one tensor-parallel rank
 * (Megatron's layer: norm, QKV GEMM, attention core, output projection,
 * dropout + residual, norm, MLP GEMMs and activation, dropout + residual).
 * A kernel's time is hpgo_gpu_op_time (compute at the curve's efficiency
 * for its size, plus memory traffic).  The backward pass runs every GEMM
 * twice more (input gradient "B", weight gradient "W"); the attention
 * core has no weights, its backward belongs to B.  Tensor-parallel
 * collectives are priced by cost.h on the tp group (stride 1): two
 * all-reduces per layer forward and two backward, or with sequence
 * parallelism an all-gather and a reduce-scatter in their place plus the
 * two all-gathers redone in the backward (Korthikanti et al. 2022 4.2.2;
 * not with full recomputation).  Recomputation adds the attention core's
 * forward (selective) or the whole layer forward with its collectives
 * (full) to B.  Stored activations follow the itemisation of spec 3.3
 * (generalised to GQA, SwiGLU, fused attention, no dropout), which equals
 * Korthikanti's sbh(34 + 5as/h) and Table 2 for GPT layers.
 *
 * A chain (profile) layer has measured forward and backward times; its
 * backward splits evenly into B and W, its stored bytes are its profile's.
 * Complexity O(stages + layers); no allocation. */
#include "work.h"

#include <math.h>
#include <string.h>

#include "cost.h"

/* ---- kernels ------------------------------------------------------------ */

typedef struct acc {
    double t, flops; /* seconds, FLOPs */
} acc_t;

typedef struct kctx {
    const hpgo_gpu_t *g;
    int dtype;   /* matrix data type */
    double e;    /* bytes per activation element */
} kctx_t;

static void mm(const kctx_t *k, acc_t *a, double m, double kk, double n)
{
    double fl = 2 * m * kk * n;
    a->flops += fl;
    a->t += hpgo_gpu_op_time(k->g, k->dtype, 1, fl, k->e * (m * kk + kk * n + m * n));
}

/* A fused kernel on tensor cores with explicit FLOPs and bytes. */
static void fused(const kctx_t *k, acc_t *a, double fl, double bytes)
{
    a->flops += fl;
    a->t += hpgo_gpu_op_time(k->g, k->dtype, 1, fl, bytes);
}

static void vec(const kctx_t *k, acc_t *a, double elements, double flops_per, double bytes)
{
    a->t += hpgo_gpu_op_time(k->g, k->dtype, 0, elements * flops_per, bytes);
}

/* ---- checks ------------------------------------------------------------- */

static int pos_i(int64_t v, int64_t max) { return v >= 1 && v <= max; }

int hpgo_work_check(const hpgo_work_t *w, hpgo_err_t *err)
{
    if (!w)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "model: NULL");
    if (w->precision < HPGO_PREC_BF16 || w->precision > HPGO_PREC_FP32)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown precision %d", (int)w->precision);
    if (w->kind == HPGO_WORK_TRANSFORMER) {
        const hpgo_xformer_t *x = &w->x;
        const int64_t big = (int64_t)1 << 24;
        if (!pos_i(x->hidden, big) || !pos_i(x->ffn, big) || !pos_i(x->heads, 1 << 16) ||
            !pos_i(x->head_dim, 1 << 16) || !pos_i(x->seq, (int64_t)1 << 26) ||
            !pos_i(x->vocab, (int64_t)1 << 26))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "transformer sizes must be >= 1 (hidden, ffn <= 2^24, heads, "
                                "head_dim <= 65536, seq, vocab <= 2^26)");
        if (!pos_i(x->layers, HPGO_WORK_MAX_LAYERS))
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "layers must be in 1..%d",
                                HPGO_WORK_MAX_LAYERS);
        if (!pos_i(x->kv_heads, x->heads) || x->heads % x->kv_heads != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "kv_heads (%lld) must divide heads (%lld)",
                                (long long)x->kv_heads, (long long)x->heads);
        if (x->mlp != HPGO_MLP_GELU && x->mlp != HPGO_MLP_SWIGLU)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "mlp must be gelu or swiglu");
        return HPGO_OK;
    }
    if (w->kind != HPGO_WORK_CHAIN)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown model kind %d", (int)w->kind);
    const hpgo_chain_t *c = &w->chain;
    if (c->n < 1 || c->n > HPGO_WORK_MAX_LAYERS)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "a layer chain needs 1 to %d layers",
                            HPGO_WORK_MAX_LAYERS);
    if (!(c->batch > 0) || !isfinite(c->batch))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "profile batch must be > 0");
    if (!c->fwd || !c->bwd || !c->params || !c->act || !c->out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "layer chain: NULL array");
    for (int32_t i = 0; i < c->n; i++) {
        const double v[5] = {c->fwd[i], c->bwd[i], c->params[i], c->act[i], c->out[i]};
        for (int j = 0; j < 5; j++)
            if (!isfinite(v[j]) || v[j] < 0 || v[j] > 1e18)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "layer %d: times, parameters and bytes must be finite, "
                                    ">= 0 and <= 1e18",
                                    (int)i);
    }
    return HPGO_OK;
}

int64_t hpgo_work_layers(const hpgo_work_t *w)
{
    return w->kind == HPGO_WORK_TRANSFORMER ? w->x.layers : w->chain.n;
}

void hpgo_work_state_bytes(int32_t precision, double *weights, double *grads, double *optimizer)
{
    if (precision == HPGO_PREC_FP32) {
        *weights = 4, *grads = 4, *optimizer = 8;
        return;
    }
    *weights = precision == HPGO_PREC_FP8 ? 4 : 2; /* + fp8 copy and its transpose */
    *grads = 4;
    *optimizer = 12;
}

/* ---- transformer -------------------------------------------------------- */

typedef struct xshape {
    double h, f, a, g, dh, q, kv, s, V, L, b, t, c, T, tl; /* T: tokens on the rank (b s / c) */
    int sp, rc, flash, dropout, swiglu;
} xshape_t;

static int64_t padded_vocab(const hpgo_xformer_t *x, int64_t tp)
{
    int64_t m = 128 * tp;
    return (x->vocab + m - 1) / m * m;
}

static void shape(const hpgo_xformer_t *x, const hpgo_parplan_t *p, xshape_t *s)
{
    s->h = (double)x->hidden;
    s->f = (double)x->ffn;
    s->a = (double)x->heads;
    s->g = (double)x->kv_heads;
    s->dh = (double)x->head_dim;
    s->q = s->a * s->dh;
    s->kv = s->g * s->dh;
    s->s = (double)x->seq;
    s->V = (double)padded_vocab(x, p->tp);
    s->L = (double)x->layers;
    s->b = (double)p->micro_batch;
    s->t = (double)p->tp;
    s->c = (double)(p->cp > 0 ? p->cp : 1);
    s->T = s->b * s->s / s->c;
    s->sp = p->sequence_parallel && p->tp > 1;
    s->tl = s->sp ? s->T / s->t : s->T;
    s->rc = p->recompute;
    s->flash = x->flash;
    s->dropout = x->dropout;
    s->swiglu = x->mlp == HPGO_MLP_SWIGLU;
}

/* Parameters of one layer on one tp rank. */
static double layer_params(const hpgo_xformer_t *x, const xshape_t *s)
{
    double mats = s->h * (s->q + 2 * s->kv) + s->q * s->h + (s->swiglu ? 3 : 2) * s->h * s->f;
    double colb = x->bias ? (s->q + 2 * s->kv) + (s->swiglu ? 2 : 1) * s->f : 0;
    double repl = (x->bias ? 2 * s->h : 0) + (x->layernorm ? 4 : 2) * s->h;
    return (mats + colb) / s->t + repl;
}

/* Attention core forward (scores, softmax, dropout, probabilities x V). */
static void core_fwd(const kctx_t *k, acc_t *a, const xshape_t *s)
{
    double t = s->t, T = s->T, E = k->e;
    if (s->flash) {
        fused(k, a, 4 * T * s->s * s->q / t / 2, /* causal kernels skip the masked half */
              E * (T * (s->q + 2 * s->kv) / t + T * s->q / t));
        return;
    }
    double es = T * (s->a / t) * s->s; /* score elements: local queries x all keys */
    double fl = 2 * T * s->s * s->q / t;
    a->flops += fl;
    a->t += hpgo_gpu_op_time(k->g, k->dtype, 1, fl, E * (T * s->q / t + T * s->kv / t + es));
    vec(k, a, es, 5, 2 * E * es);
    if (s->dropout)
        vec(k, a, es, 2, (2 * E + 1) * es);
    a->flops += fl;
    a->t += hpgo_gpu_op_time(k->g, k->dtype, 1, fl, E * (es + T * s->kv / t + T * s->q / t));
}

static void core_bwd(const kctx_t *k, acc_t *a, const xshape_t *s)
{
    double t = s->t, T = s->T, E = k->e;
    if (s->flash) {
        /* five GEMMs against the forward's two (FlashAttention-2) */
        fused(k, a, 2.5 * 4 * T * s->s * s->q / t / 2,
              E * (2 * T * (s->q + 2 * s->kv) / t + 2 * T * s->q / t));
        return;
    }
    double es = T * (s->a / t) * s->s;
    double fl = 2 * T * s->s * s->q / t;
    for (int i = 0; i < 4; i++) { /* dQ, dK, dProbs, dV */
        a->flops += fl;
        a->t += hpgo_gpu_op_time(k->g, k->dtype, 1, fl, E * (es + T * s->q / t + T * s->kv / t));
    }
    if (s->dropout)
        vec(k, a, es, 2, (2 * E + 1) * es);
    vec(k, a, es, 5, 3 * E * es);
}

/* One layer's forward kernels (no collectives). */
static void layer_fwd(const kctx_t *k, acc_t *a, const xshape_t *s)
{
    double t = s->t, T = s->T, tl = s->tl, h = s->h, E = k->e;
    double fN = (s->swiglu ? 2 : 1) * s->f / t;
    double resid = (3 * E + (s->dropout ? 1 : 0)) * tl * h;
    vec(k, a, tl * h, 5, 2 * E * tl * h); /* norm 1 */
    mm(k, a, T, h, (s->q + 2 * s->kv) / t);
    core_fwd(k, a, s);
    mm(k, a, T, s->q / t, h);
    vec(k, a, tl * h, 2, resid);
    vec(k, a, tl * h, 5, 2 * E * tl * h); /* norm 2 */
    mm(k, a, T, h, fN);
    vec(k, a, T * s->f / t, 8, (s->swiglu ? 3 : 2) * E * T * s->f / t);
    mm(k, a, T, s->f / t, h);
    vec(k, a, tl * h, 2, resid);
}

/* Input-gradient kernels of one layer. */
static void layer_bwd_input(const kctx_t *k, acc_t *a, const xshape_t *s)
{
    double t = s->t, T = s->T, tl = s->tl, h = s->h, E = k->e;
    double fN = (s->swiglu ? 2 : 1) * s->f / t;
    double resid = (2 * E + (s->dropout ? 1 : 0)) * tl * h;
    vec(k, a, tl * h, 2, resid);
    mm(k, a, T, h, s->f / t); /* fc2 dgrad: (T x h) . (h x f/t) */
    vec(k, a, T * s->f / t, 8, (s->swiglu ? 5 : 3) * E * T * s->f / t);
    mm(k, a, T, fN, h);
    vec(k, a, tl * h, 8, 3 * E * tl * h);
    vec(k, a, tl * h, 2, resid);
    mm(k, a, T, h, s->q / t);
    core_bwd(k, a, s);
    mm(k, a, T, (s->q + 2 * s->kv) / t, h);
    vec(k, a, tl * h, 8, 3 * E * tl * h);
}

/* Weight-gradient kernels of one layer: X^T . dY for the four GEMMs. */
static void layer_bwd_weight(const kctx_t *k, acc_t *a, const xshape_t *s)
{
    double t = s->t, T = s->T, h = s->h;
    double fN = (s->swiglu ? 2 : 1) * s->f / t;
    mm(k, a, h, T, (s->q + 2 * s->kv) / t);
    mm(k, a, s->q / t, T, h);
    mm(k, a, h, T, fN);
    mm(k, a, s->f / t, T, h);
}

/* Stored bytes of one layer per micro-batch: total, the part released by
 * the weight gradient, and the attention score path. */
static void layer_act(const xshape_t *s, double E, double *total, double *held_w)
{
    double T = s->T, t = s->t, h = s->h;
    double rep_sp = s->sp ? t : 1;
    double masks = s->dropout ? 2 * h : 0;
    double rep = (4 * E * h + masks) / rep_sp;
    double score = s->flash ? 4 * s->a : E * s->a * s->s + (s->dropout ? (1 + E) * s->a * s->s : 0);
    double mlp = (s->swiglu ? 4 : 2) * E * s->f;
    double par = (E * (s->q + 2 * s->kv) + E * s->q + mlp) / t;
    if (s->rc == HPGO_RC_FULL) {
        *total = T * E * h / rep_sp;
        *held_w = *total;
        return;
    }
    if (s->rc == HPGO_RC_SELECTIVE && !s->flash)
        score = 0;
    *total = T * (rep + par + score / t);
    *held_w = T * (rep - masks / rep_sp + par);
}

static double tp_coll(const hpgo_cluster_t *c, int op, const xshape_t *s, double bytes)
{
    return hpgo_cost_collective(c, op, (int64_t)s->t, 1, bytes, HPGO_ALGO_AUTO);
}

static double dtype_of(int32_t precision)
{
    return precision == HPGO_PREC_FP8 ? HPGO_DT_FP8
           : precision == HPGO_PREC_FP32 ? HPGO_DT_FP32
                                         : HPGO_DT_BF16;
}

/* Everything a transformer stage is made of, for one micro-batch on one
 * tp rank: one layer's passes and the edges' (embedding, head) extras. */
typedef struct xpieces {
    xshape_t s;
    double X;                       /* bytes of one activation tensor (s b h) */
    acc_t fw, bi, bw;               /* one layer: forward, input gradient, weight gradient */
    double tp_f, tp_b, rc_t, rc_fl; /* one layer: tp communication, recomputation */
    double act, act_w, full_act;    /* one layer: stored bytes, held until W, working set */
    double lp, mfl_layer;           /* one layer: parameters, model FLOPs */
    acc_t ef, eb, hf, hb, hw;       /* embedding forward / backward, head forward / B / W */
    double emb_tp_f, emb_tp_b, head_tp_f, head_tp_b, emb_p, head_p;
} xpieces_t;

static int xformer_pieces(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                          xpieces_t *x_out, hpgo_err_t *err)
{
    const hpgo_xformer_t *x = &w->x;
    xshape_t s;
    shape(x, p, &s);
    kctx_t k = {&c->gpu, (int)dtype_of(w->precision), w->precision == HPGO_PREC_FP32 ? 4 : 2};
    if (c->gpu.peak[k.dtype] <= 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "the %s GPU has no %s rate",
                            c->gpu.name, w->precision == HPGO_PREC_FP8 ? "fp8" : "fp32");
    if (x->heads % p->tp != 0 || (x->kv_heads % p->tp != 0 && p->tp % x->kv_heads != 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp=%d must divide the %lld heads (and divide or be a multiple of "
                            "the %lld kv heads)",
                            (int)p->tp, (long long)x->heads, (long long)x->kv_heads);
    if (x->ffn % p->tp != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "tp=%d must divide ffn=%lld", (int)p->tp,
                            (long long)x->ffn);
    if (p->cp > 1 && x->seq % (2 * p->cp) != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "context parallelism splits the sequence in 2 x cp chunks: seq=%lld "
                            "is not a multiple of %d",
                            (long long)x->seq, 2 * (int)p->cp);
    if (s.sp && fmod(s.T, s.t) != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "sequence parallelism needs micro_batch x seq / cp divisible by tp");
    double E = k.e, X = E * s.T * s.h;
    /* one layer, priced once: all layers of a model are alike */
    acc_t fw = {0, 0}, bi = {0, 0}, bw = {0, 0}, core = {0, 0};
    layer_fwd(&k, &fw, &s);
    layer_bwd_input(&k, &bi, &s);
    layer_bwd_weight(&k, &bw, &s);
    core_fwd(&k, &core, &s);
    double tp_f, tp_b;
    if (s.sp) {
        double ag = tp_coll(c, HPGO_COLL_ALLGATHER, &s, X), rs = tp_coll(c, HPGO_COLL_REDUCE_SCATTER, &s, X);
        tp_f = 2 * ag + 2 * rs;
        tp_b = 2 * ag + 2 * rs + (s.rc == HPGO_RC_FULL ? 0 : 2 * ag);
    } else {
        double ar = tp_coll(c, HPGO_COLL_ALLREDUCE, &s, X);
        tp_f = 2 * ar;
        tp_b = 2 * ar;
    }
    if (p->cp > 1) {
        /* ring attention (Megatron-Core CP): K and V of the whole sequence
         * gathered around the cp group in the forward, gathered again and
         * their gradients reduce-scattered in the backward, overlapped with
         * the attention blocks: only what the attention core cannot hide */
        acc_t cb = {0, 0};
        core_bwd(&k, &cb, &s);
        double kv = 2 * E * s.b * s.s * s.kv / s.t;
        double ag = hpgo_cost_collective(c, HPGO_COLL_ALLGATHER, p->cp, p->tp, kv, HPGO_ALGO_AUTO);
        double rs =
            hpgo_cost_collective(c, HPGO_COLL_REDUCE_SCATTER, p->cp, p->tp, kv, HPGO_ALGO_AUTO);
        tp_f += ag > core.t ? ag - core.t : 0;
        tp_b += ag + rs > cb.t ? ag + rs - cb.t : 0;
    }
    double rc_t = 0, rc_fl = 0;
    if (s.rc == HPGO_RC_FULL)
        rc_t = fw.t + tp_f, rc_fl = fw.flops;
    else if (s.rc == HPGO_RC_SELECTIVE && !s.flash)
        rc_t = core.t, rc_fl = core.flops;
    double act, act_w, full_act = 0, full_w;
    layer_act(&s, E, &act, &act_w);
    if (s.rc == HPGO_RC_FULL) {
        xshape_t s2 = s;
        s2.rc = HPGO_RC_NONE;
        layer_act(&s2, E, &full_act, &full_w);
    }
    double lp = layer_params(x, &s);
    /* model FLOPs of one layer per token (3 x forward) */
    double s_eff = x->causal_flops ? s.s / 2 : s.s;
    double mfl_layer = 3 * (2 * s.h * (s.q + 2 * s.kv) + 4 * s_eff * s.q + 2 * s.q * s.h +
                            (s.swiglu ? 6 : 4) * s.h * s.f) / s.t * s.T;

    /* edges: embedding on model stage 0, final norm + logits + loss on the last */
    acc_t ef = {0, 0}, eb = {0, 0}, hf = {0, 0}, hb = {0, 0}, hw = {0, 0};
    vec(&k, &ef, s.tl * s.h, 1, (E + (s.dropout ? 1 + E : 0)) * s.tl * s.h + 8 * s.T);
    vec(&k, &eb, s.tl * s.h, 1, 3 * E * s.tl * s.h);
    double emb_tp_f = s.t > 1 ? (s.sp ? tp_coll(c, HPGO_COLL_REDUCE_SCATTER, &s, X)
                                      : tp_coll(c, HPGO_COLL_ALLREDUCE, &s, X))
                              : 0;
    double emb_tp_b = s.sp ? tp_coll(c, HPGO_COLL_ALLGATHER, &s, X) : 0;
    vec(&k, &hf, s.tl * s.h, 5, 2 * E * s.tl * s.h);
    mm(&k, &hf, s.T, s.h, s.V / s.t);
    vec(&k, &hf, s.T * s.V / s.t, 5, 3 * 4 * s.T * s.V / s.t); /* fp32 cross-entropy */
    mm(&k, &hb, s.T, s.V / s.t, s.h);
    vec(&k, &hb, s.tl * s.h, 8, 3 * E * s.tl * s.h);
    mm(&k, &hw, s.h, s.T, s.V / s.t);
    double head_tp_f = s.sp ? tp_coll(c, HPGO_COLL_ALLGATHER, &s, X) : 0;
    head_tp_f += 3 * tp_coll(c, HPGO_COLL_ALLREDUCE, &s, 4 * s.T); /* max, sum, target logit */
    double head_tp_b = s.sp ? tp_coll(c, HPGO_COLL_REDUCE_SCATTER, &s, X)
                            : (s.t > 1 ? tp_coll(c, HPGO_COLL_ALLREDUCE, &s, X) : 0);
    double emb_p = s.V * s.h / s.t + (x->learned_pos ? s.s * s.h : 0);
    double head_p = (x->layernorm ? 2 : 1) * s.h;
    int K = p->pp * p->vstages;
    if (!x->tied || K > 1)
        head_p += s.V * s.h / s.t; /* untied, or the tied copy Megatron keeps on the last stage */

    x_out->s = s;
    x_out->X = X;
    x_out->fw = fw, x_out->bi = bi, x_out->bw = bw;
    x_out->tp_f = tp_f, x_out->tp_b = tp_b, x_out->rc_t = rc_t, x_out->rc_fl = rc_fl;
    x_out->act = act, x_out->act_w = act_w, x_out->full_act = full_act;
    x_out->lp = lp, x_out->mfl_layer = mfl_layer;
    x_out->ef = ef, x_out->eb = eb, x_out->hf = hf, x_out->hb = hb, x_out->hw = hw;
    x_out->emb_tp_f = emb_tp_f, x_out->emb_tp_b = emb_tp_b;
    x_out->head_tp_f = head_tp_f, x_out->head_tp_b = head_tp_b;
    x_out->emb_p = emb_p, x_out->head_p = head_p;
    return HPGO_OK;
}

static int xformer_costs(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                         const int32_t *split, hpgo_stage_cost_t *out, hpgo_err_t *err)
{
    xpieces_t xp;
    memset(&xp, 0, sizeof xp);
    int rc = xformer_pieces(w, c, p, &xp, err);
    if (rc != HPGO_OK)
        return rc;
    const xshape_t s = xp.s;
    const double X = xp.X;
    const acc_t fw = xp.fw, bi = xp.bi, bw = xp.bw, ef = xp.ef, eb = xp.eb, hf = xp.hf,
                hb = xp.hb, hw = xp.hw;
    const double tp_f = xp.tp_f, tp_b = xp.tp_b, rc_t = xp.rc_t, rc_fl = xp.rc_fl;
    const double act = xp.act, act_w = xp.act_w, full_act = xp.full_act, lp = xp.lp;
    const double mfl_layer = xp.mfl_layer, emb_tp_f = xp.emb_tp_f, emb_tp_b = xp.emb_tp_b;
    const double head_tp_f = xp.head_tp_f, head_tp_b = xp.head_tp_b, emb_p = xp.emb_p;
    const double head_p = xp.head_p;
    int K = p->pp * p->vstages;
    for (int kk = 0; kk < K; kk++) {
        hpgo_stage_cost_t *o = &out[kk];
        memset(o, 0, sizeof *o);
        o->first_layer = split[kk];
        o->n_layers = split[kk + 1] - split[kk];
        double n = o->n_layers;
        o->f = n * (fw.t + tp_f);
        o->b = n * (bi.t + tp_b + rc_t);
        o->w = n * bw.t;
        o->tp_f = n * tp_f;
        o->tp_b = n * tp_b;
        o->recompute = n * rc_t;
        o->act_layers = n * act;
        o->act = n * act;
        o->act_w = n * act_w;
        o->transient = n > 0 ? full_act : 0;
        o->params = n * lp;
        o->model_flops = n * mfl_layer;
        o->hw_flops = n * (fw.flops + bi.flops + bw.flops + rc_fl);
        o->send_bytes = kk + 1 < K ? X / s.t : 0;
        o->regather = (kk > 0 && !s.sp) ? tp_coll(c, HPGO_COLL_ALLGATHER, &s, X) : 0;
        if (kk == 0) {
            o->f += ef.t + emb_tp_f;
            o->b += eb.t + emb_tp_b;
            o->tp_f += emb_tp_f;
            o->tp_b += emb_tp_b;
            o->act += (8 * s.T + (s.dropout ? s.T * s.h : 0)) / (s.sp ? s.t : 1);
            o->params += emb_p;
            o->emb_params += emb_p;
        }
        if (kk == K - 1) {
            o->f += hf.t + head_tp_f;
            o->b += hb.t + head_tp_b;
            o->w += hw.t;
            o->tp_f += head_tp_f;
            o->tp_b += head_tp_b;
            o->params += head_p;
            o->emb_params += head_p;
            o->transient += 4 * s.T * s.h * (1 + s.V / s.h) / s.t; /* final norm + fp32 logits */
            o->model_flops += 3 * 2 * s.h * s.V / s.t * s.T;
            o->hw_flops += hf.flops + hb.flops + hw.flops;
        }
    }
    return HPGO_OK;
}

/* ---- chain (profile) ---------------------------------------------------- */

static int chain_costs(const hpgo_work_t *w, const hpgo_parplan_t *p, const int32_t *split,
                       hpgo_stage_cost_t *out, hpgo_err_t *err)
{
    const hpgo_chain_t *c = &w->chain;
    if (p->tp != 1 || p->sequence_parallel)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "a profiled layer chain has no tensor-parallel split: tp must be 1 "
                            "and sequence_parallel off");
    if (p->recompute == HPGO_RC_SELECTIVE)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "selective recomputation needs a transformer model (a profile has "
                            "no attention core to recompute); use 'none' or 'full'");
    double r = (double)p->micro_batch / c->batch;
    int K = p->pp * p->vstages;
    for (int kk = 0; kk < K; kk++) {
        hpgo_stage_cost_t *o = &out[kk];
        memset(o, 0, sizeof *o);
        o->first_layer = split[kk];
        o->n_layers = split[kk + 1] - split[kk];
        double fsum = 0, bsum = 0, act = 0, par = 0, inb = 0;
        for (int32_t i = split[kk]; i < split[kk + 1]; i++) {
            fsum += c->fwd[i];
            bsum += c->bwd[i];
            act += c->act[i];
            par += c->params[i];
        }
        if (split[kk] > 0)
            inb = c->out[split[kk] - 1];
        o->f = fsum * r;
        o->b = bsum * r / 2;
        o->w = bsum * r / 2;
        if (p->recompute == HPGO_RC_FULL) {
            o->b += o->f;
            o->recompute = o->f;
            o->act = inb * r;
            o->transient = act * r;
        } else {
            o->act = act * r;
        }
        o->act_layers = o->act;
        o->act_w = o->act;
        o->params = par;
        o->send_bytes = split[kk + 1] < c->n && kk + 1 < K ? c->out[split[kk + 1] - 1] * r : 0;
    }
    return HPGO_OK;
}

/* ---- plan against model ------------------------------------------------- */

int hpgo_work_stage_costs(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                          hpgo_stage_cost_t *out, hpgo_err_t *err)
{
    int rc = hpgo_work_check(w, err);
    if (rc == HPGO_OK)
        rc = hpgo_cluster_check(c, err);
    if (rc == HPGO_OK)
        rc = hpgo_parplan_check(p, err);
    if (rc != HPGO_OK)
        return rc;
    int64_t need = (int64_t)p->tp * p->pp * p->dp * p->cp;
    int64_t have = hpgo_cluster_gpus(c);
    if (need > have)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the plan needs tp x cp x pp x dp = %lld GPUs, the cluster has %lld",
                            (long long)need, (long long)have);
    if (p->cp > 1 && w->kind != HPGO_WORK_TRANSFORMER)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "context parallelism splits attention: it needs a transformer model");
    if (p->tp > hpgo_cluster_unit(c, 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp=%d is larger than a node (%lld GPUs): tensor parallelism stays "
                            "inside a node",
                            (int)p->tp, (long long)hpgo_cluster_unit(c, 0));
    if (hpgo_cluster_unit(c, 0) % p->tp != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp=%d must divide the %lld GPUs of a node", (int)p->tp,
                            (long long)hpgo_cluster_unit(c, 0));
    int64_t fan[HPGO_CLUSTER_MAX_LEVELS];
    if ((rc = hpgo_group_fanout(c, p->tp, 1, fan, err)) != HPGO_OK ||
        (rc = hpgo_group_fanout(c, p->cp, p->tp, fan, err)) != HPGO_OK ||
        (rc = hpgo_group_fanout(c, (int64_t)p->dp * p->cp, p->tp, fan, err)) != HPGO_OK)
        return rc;
    int64_t L = hpgo_work_layers(w);
    int K = p->pp * p->vstages;
    if (L < K)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "%d model stages (pp x vstages) but only %lld layers", K,
                            (long long)L);
    int32_t ev[HPGO_PLAN_MAX_STAGES + 1];
    const int32_t *split = p->split;
    if (p->n_split) {
        if (p->n_split != K + 1 || !split)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "the layer split needs pp x vstages + 1 = %d boundaries", K + 1);
        if (split[0] != 0 || split[K] != L)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "the layer split must start at 0 and end at %lld layers",
                                (long long)L);
        for (int kk = 0; kk < K; kk++)
            if (split[kk + 1] <= split[kk])
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "the layer split must increase: stage %d is empty or "
                                    "reversed",
                                    kk);
    } else {
        hpgo_work_even_split(L, K, ev);
        split = ev;
    }
    int64_t m = hpgo_parplan_microbatches(p);
    if (p->schedule == HPGO_PS_INTERLEAVED && m % p->pp != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the interleaved schedule needs the %lld micro-batches to be a "
                            "multiple of pp=%d (as Megatron)",
                            (long long)m, (int)p->pp);
    if (w->kind == HPGO_WORK_TRANSFORMER)
        return xformer_costs(w, c, p, split, out, err);
    return chain_costs(w, p, split, out, err);
}

void hpgo_work_even_split(int64_t layers, int32_t K, int32_t *split)
{
    /* the remainder goes to the middle stages first (the edges carry the
     * embedding and the loss), then to the first and the last */
    int64_t base = layers / K, extra = layers % K;
    split[0] = 0;
    for (int32_t k = 0; k < K; k++) {
        int64_t n = base;
        int middle = k > 0 && k < K - 1;
        int64_t n_middle = K > 2 ? K - 2 : 0;
        if (middle && k - 1 < extra)
            n++;
        else if (!middle && extra > n_middle) {
            if (k == 0 || (k == K - 1 && extra - n_middle > 1))
                n++;
        }
        split[k + 1] = split[k] + (int32_t)n;
    }
}

int hpgo_work_layer_times(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                          double *out, double *first, double *last, hpgo_err_t *err)
{
    *first = *last = 0;
    if (w->kind == HPGO_WORK_TRANSFORMER) {
        xpieces_t xp;
        memset(&xp, 0, sizeof xp);
        int rc = xformer_pieces(w, c, p, &xp, err);
        if (rc != HPGO_OK)
            return rc;
        double t = xp.fw.t + xp.tp_f + xp.bi.t + xp.tp_b + xp.rc_t + xp.bw.t;
        for (int64_t i = 0; i < w->x.layers; i++)
            out[i] = t;
        *first = xp.ef.t + xp.emb_tp_f + xp.eb.t + xp.emb_tp_b;
        *last = xp.hf.t + xp.head_tp_f + xp.hb.t + xp.head_tp_b + xp.hw.t;
        return HPGO_OK;
    }
    const hpgo_chain_t *ch = &w->chain;
    double r = (double)p->micro_batch / ch->batch;
    for (int32_t i = 0; i < ch->n; i++)
        out[i] = (ch->fwd[i] * (p->recompute == HPGO_RC_FULL ? 2 : 1) + ch->bwd[i]) * r;
    return HPGO_OK;
}

void hpgo_work_params(const hpgo_work_t *w, double *total, double *embedding)
{
    if (w->kind != HPGO_WORK_TRANSFORMER) {
        double t = 0;
        for (int32_t i = 0; i < w->chain.n; i++)
            t += w->chain.params[i];
        *total = t;
        *embedding = 0;
        return;
    }
    const hpgo_xformer_t *x = &w->x;
    hpgo_parplan_t one;
    memset(&one, 0, sizeof one);
    one.tp = 1;
    one.micro_batch = 1;
    xshape_t s;
    shape(x, &one, &s);
    double V = (double)x->vocab;
    double emb = V * s.h * (x->tied ? 1 : 2) + (x->learned_pos ? s.s * s.h : 0);
    double norm = (x->layernorm ? 2 : 1) * s.h;
    *embedding = emb;
    *total = emb + norm + s.L * layer_params(x, &s);
}

double hpgo_work_model_flops(const hpgo_work_t *w, int64_t global_batch)
{
    if (w->kind != HPGO_WORK_TRANSFORMER)
        return 0;
    const hpgo_xformer_t *x = &w->x;
    double h = (double)x->hidden, f = (double)x->ffn, q = (double)(x->heads * x->head_dim);
    double kv = (double)(x->kv_heads * x->head_dim), s = (double)x->seq;
    double s_eff = x->causal_flops ? s / 2 : s;
    double per_tok = 2 * h * (q + 2 * kv) + 4 * s_eff * q + 2 * q * h +
                     (x->mlp == HPGO_MLP_SWIGLU ? 6 : 4) * h * f;
    per_tok = per_tok * (double)x->layers + 2 * h * (double)x->vocab;
    return 3 * per_tok * s * (double)global_batch;
}
