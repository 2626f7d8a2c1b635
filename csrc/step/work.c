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
 * forward (selective), every other matmul of the block with its pointwise
 * ops (torchtitan's op-level checkpointing) or the whole layer forward with
 * its collectives (full) to B.  Stored activations follow the itemisation of spec 3.3
 * (generalised to GQA, SwiGLU, fused attention, no dropout), which equals
 * Korthikanti's sbh(34 + 5as/h) and Table 2 for GPT layers.
 *
 * Layers come in up to four kinds (dense or mixture-of-experts MLP, full
 * or sliding-window attention), each priced once.  A MoE layer replaces
 * the MLP by a router, the rank's routed experts as grouped GEMMs, shared
 * experts as a tp-split MLP, and the token dispatch / combine all-to-alls
 * over the expert-parallel group (with etp gathers; or DeepEP's dispatch,
 * one crossing per node a token reaches, cost.h), overlapped phase by phase
 * with another micro-batch's compute on request; latent attention
 * (MLA) replaces the QKV GEMM by down- and up-projections.  fp8 runs the
 * linear GEMMs at the fp8 rate and keeps the attention core, router and
 * head in 16 bits: under kernels te after Transformer Engine's quantization
 * passes, under the PyTorch kernel sets with torchao's Float8Linear casts,
 * priced per linear of a dense block (tao_*: inputs, weights, output
 * gradients, fp8 tensor-parallel gathers, FSDP2's float8 all-gather; or
 * the rowwise recipe's casts along both axes, tao_row_*).
 *
 * A chain (profile) layer has measured forward and backward times; its
 * backward splits evenly into B and W, its stored bytes are its profile's.
 * Complexity O(stages + layers); allocation only for a caller's cache. */
#include "work.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "memory.h"

/* ---- kernels ------------------------------------------------------------ */

typedef struct acc {
    double t, flops, n; /* seconds, FLOPs, kernels launched */
} acc_t;

/* Device seconds between two back-to-back kernels of a stream when the host
 * is ahead: NVIDIA's "Getting Started with CUDA Graphs" (developer blog,
 * 2019) times a 2.9 us kernel at 3.8 us per launch back to back without a
 * graph (recalled figure, spec stack-mechanisms 2.5). */
#define KERNEL_GAP 1e-6
/* Host seconds to issue one kernel from Python: the floor hpgo measured for
 * back-to-back eager launches on an H100 (profiles/h100-sxm5-kernels.json,
 * the memory curve below 4 MB; docs/training-model.md).  Every stack here
 * launches its kernels from Python without CUDA graphs (Megatron-Core and
 * torchtitan's defaults), so a pass takes at least its launches' host time
 * (spec stack-mechanisms 2.5: t_step >= sum of the ops' host time). */
#define HOST_PER_KERNEL 8e-6
/* SMs a communication kernel overlapped with a GEMM holds: NCCL's channels
 * on a DGX H100 (one CTA per channel) and Transformer Engine's num_sm for
 * its pipelined reduce-scatter and bulk overlaps (TE
 * pytorch/module/base.py::initialize_ub defaults, spec stack-mechanisms 1.2) */
#define COMM_SMS 16
/* GEMM chunks of Transformer Engine's pipelined GEMM + reduce-scatter
 * (initialize_ub: num_splits 4) */
#define TE_RS_SPLITS 4

typedef struct kctx {
    const hpgo_gpu_t *g;
    int dtype;      /* data type of the linear layers' GEMMs */
    int attn_dtype; /* of the attention core, the router and the output layer (fp8
                       training keeps them in bf16, as Transformer Engine and Megatron) */
    double e;       /* bytes per activation element */
    int quant;      /* fp8: a GEMM's left operand is quantized first (forward input,
                       backward output gradient; the weight gradient reuses both) */
    int tao;        /* fp8 under a PyTorch kernel set: torchao's Float8Linear, its casts
                       priced per linear (tao_*), not per GEMM */
    int fp8ag;      /* ... with FSDP2's float8 all-gather (weights arrive in fp8) */
    int rowwise;    /* ... with its rowwise recipes (tao_row_*) */
    int gwhp;       /* ... rowwise_with_gw_hp: weight-gradient GEMMs in 16 bits */
    int ks;         /* kernel set, HPGO_KS_* */
    int att;        /* fused attention kernel, HPGO_ATT_* (FLASH2 also under the
                       compile-blocks and compile-fa2 kernel sets) */
} kctx_t;

static void launch(acc_t *a, double t)
{
    a->t += t + KERNEL_GAP;
    a->n += 1;
}

static void mm(const kctx_t *k, acc_t *a, double m, double kk, double n)
{
    double fl = 2 * m * kk * n;
    double ob = k->dtype == HPGO_DT_FP8 ? 1 : k->e; /* operand bytes; the output stays 16-bit */
    a->flops += fl;
    launch(a, hpgo_gpu_op_time(k->g, k->dtype, HPGO_OP_MATRIX, fl,
                               ob * (m * kk + kk * n) + k->e * m * n));
    if (k->quant) /* Transformer Engine: an amax pass, then a cast to both fp8 layouts */
        launch(a, hpgo_gpu_op_time(k->g, k->dtype, HPGO_OP_VECTOR, 0, m * kk * (2 * k->e + 2)));
}

/* The same context with the GEMMs in 16 bits (attention core, router, head). */
static kctx_t k16(const kctx_t *k)
{
    kctx_t b = *k;
    b.dtype = k->attn_dtype;
    b.quant = 0;
    return b;
}

/* The same context for weight-gradient GEMMs (operands already quantized;
 * in 16 bits under torchao's rowwise_with_gw_hp recipe). */
static kctx_t kwgrad(const kctx_t *k)
{
    kctx_t b = *k;
    b.quant = 0;
    if (k->tao && k->gwhp)
        b.dtype = k->attn_dtype;
    return b;
}

/* Fused attention throughput on the GPUs with published tables (spec
 * stack-mechanisms 2.2, read from Dao-AILab/flash-attention's benchmark
 * plots at 16k tokens per batch, hidden 2048), TFLOP/s by the kernel's
 * sequence length 512 ... 16k, the FLOPs counted as 4 s^2 a d_h b forward,
 * halved when causal, backward 2.5 x forward: */
static const double ATT_LEN[6] = {512, 1024, 2048, 4096, 8192, 16384};
/* H100 SXM5: cuDNN forward, causal, d_h 128 (Transformer Engine's back end on
 * Hopper) */
static const double H100_CUDNN_F_CAUSAL[6] = {315, 410, 484, 518, 529, 539};
/* FlashAttention-2 forward + backward, causal and not, d_h 128 (PyTorch's
 * SDPA flash back end; the only public table with a backward) */
static const double H100_FA2_FB_CAUSAL[6] = {163, 221, 265, 294, 308, 328};
static const double H100_FA2_FB_FULL[6] = {248, 294, 320, 326, 335, 338};
/* FlashAttention-3 forward: causal and not at d_h 128, causal at d_h 64 (the
 * ratios price masking and head size for the cuDNN row) */
static const double H100_FA3_F_CAUSAL[6] = {292, 423, 521, 579, 602, 616};
static const double H100_FA3_F_FULL[6] = {467, 565, 625, 638, 646, 648};
static const double H100_FA3_F_CAUSAL64[6] = {197, 265, 371, 420, 460, 473};
/* A100 80 GB: FlashAttention-2 forward + backward, causal, d_h 128 */
static const double A100_FA2_FB_CAUSAL[6] = {99, 133, 155, 173, 182, 189};
#define H100_BF16_PEAK 989.4 /* TFLOP/s the H100 rows are fractions of */
/* Backward over forward rate of causal attention (d_h 128, GQA) through
 * PyTorch's SDPA on an H100 SXM5: 0.85 / 0.78 / 0.84 / 0.93 at 16k / 32k /
 * 64k / 128k tokens, the median (profiles/h100-sxm5-steps.json, hpgo
 * profile step) */
#define H100_ATT_BWD_RATIO 0.84
/* The same ratio for PyTorch's flash back end (FlashAttention-2) on the
 * H100 SXM5: 0.92 for causal attention of 32 heads, d_h 128, at 16k tokens
 * (310 / 337 TFLOP/s; 0.96 at 8k with 8 kv heads, 0.90 at 4k), hpgo's
 * kernel profile (profiles/h100-sxm5-kernels.json, the "flash" rows) */
#define H100_FA2_BWD_RATIO 0.92
#define A100_BF16_PEAK 312.0

/* Table value at len (linear in log2 of the length, flat outside 512 ...
 * 16k: the curves are flat from 8k to 16k, spec 2.2). */
static double att_at(const double *tab, double len)
{
    if (!(len > ATT_LEN[0]))
        return tab[0];
    if (len >= ATT_LEN[5])
        return tab[5];
    int i = 0;
    while (len > ATT_LEN[i + 1])
        i++;
    double u = log2(len / ATT_LEN[i]);
    return tab[i] + u * (tab[i + 1] - tab[i]);
}

/* The Hopper parts (H100 SXM and PCIe, H200: the same SM design), told
 * apart by their dense bf16 peak of 700-1000 TFLOP/s: the measured attention,
 * SM-held and async-TP chunk tables apply to them. */
static int hopper_peak(const hpgo_gpu_t *g)
{
    double pk = g->peak[HPGO_DT_BF16];
    return pk >= 700e12 && pk <= 1000e12;
}

/* The B200 (148 SMs, dense bf16 2,000-2,600 TFLOP/s).  Its fused attention
 * is priced at the Hopper tables' fractions of the peak: FlashAttention-4
 * reaches at most 1,613 TFLOP/s (71 %) on a B200 in bf16, up to 1.3x cuDNN
 * 9.13's rate (Zadouri et al. 2026, arXiv 2603.05451), so cuDNN's best is
 * about 55 % of the B200's peak -- the fraction cuDNN reaches on an H100
 * (539 of 989 TFLOP/s at 16k tokens, the forward table below); the same
 * fractions at every length and for the backward are ASSUMED.  Without
 * this the B200's attention ran on its GEMM curve (78 % of the peak). */
static int blackwell_peak(const hpgo_gpu_t *g)
{
    double pk = g->peak[HPGO_DT_BF16];
    return g->sms == 148 && pk >= 2000e12 && pk <= 2600e12;
}

/* Fraction of the 16-bit peak a fused attention kernel reaches over a
 * sequence of `len` keys at head size dh, causal or not, forward or
 * backward; 0 where no table applies (another GPU, or a calibrated
 * attention curve, which then prices it).  GPUs are told apart by their
 * dense bf16 peak: 700-1000 TFLOP/s for the Hopper parts (H100 SXM and
 * PCIe, H200: the same SM design), 300-320 for the A100; the B200 takes
 * the Hopper fractions (blackwell_peak). */
static double attn_eff(const kctx_t *k, double len, double dh, int causal, int bwd)
{
    const hpgo_gpu_t *g = k->g;
    /* a calibrated curve stands for the back end it was measured with (the
     * default one): FlashAttention-2, when asked for, keeps its table */
    if ((g->n_steps[HPGO_EFF_ATTENTION] > 0 && k->att != HPGO_ATT_FLASH2) ||
        k->attn_dtype != HPGO_DT_BF16)
        return 0;
    double pk = g->peak[HPGO_DT_BF16];
    int hopper = hopper_peak(g) || blackwell_peak(g), ampere = pk >= 300e12 && pk <= 320e12;
    if (!hopper && !ampere)
        return 0;
    double dfac = 1;
    if (dh < 128) { /* FA3's d_h 64 / 128 ratio, linear in d_h between */
        double r = att_at(H100_FA3_F_CAUSAL64, len) / att_at(H100_FA3_F_CAUSAL, len);
        double u = dh <= 64 ? 1 : (128 - dh) / 64;
        dfac = 1 - u * (1 - r);
    }
    /* Hopper: cuDNN's forward (Transformer Engine's back end, and PyTorch's
     * SDPA on H100 reaches the same class of rate: profiles/h100-sxm5-steps.json),
     * its backward at the measured backward / forward ratio; A100:
     * FlashAttention-2's forward + backward rate for both */
    double base, full;
    if (hopper && k->att == HPGO_ATT_FLASH2) {
        /* PyTorch's SDPA before cuDNN was preferred again picks its
         * FlashAttention-2 kernels on Hopper: cuDNN attention was made
         * opt-in after the 2.5 release (pytorch/pytorch#138649, #138522), and
         * a 2.6 nightly of 2024-12-04 ran FA2 at about half cuDNN's rate on
         * an H100 (pytorch/pytorch#142132, "expected"); torchtitan's SDPA
         * wrapper kept flash first on Hopper (pytorch/torchtitan#1196).
         * FlashAttention-2's forward + backward rate R, split so that the
         * forward (1 unit) and the backward (2.5 units at ratio rho of the
         * forward's rate) take 3.5 / R together */
        double rho = H100_FA2_BWD_RATIO, fwd = (1 + 2.5 / rho) / 3.5;
        base = att_at(H100_FA2_FB_CAUSAL, len) / H100_BF16_PEAK * fwd * (bwd ? rho : 1);
        full = att_at(H100_FA2_FB_FULL, len) / att_at(H100_FA2_FB_CAUSAL, len);
    } else if (hopper) {
        base = att_at(H100_CUDNN_F_CAUSAL, len) / H100_BF16_PEAK * (bwd ? H100_ATT_BWD_RATIO : 1);
        full = att_at(H100_FA3_F_FULL, len) / att_at(H100_FA3_F_CAUSAL, len);
    } else {
        base = att_at(A100_FA2_FB_CAUSAL, len) / A100_BF16_PEAK;
        full = att_at(H100_FA2_FB_FULL, len) / att_at(H100_FA2_FB_CAUSAL, len);
    }
    return base * (causal ? 1 : full) * dfac;
}

/* A fused attention kernel on tensor cores with explicit FLOPs and bytes,
 * over `len` keys per query block, causal or not. */
static void fused(const kctx_t *k, acc_t *a, double fl, double bytes, double len, double dh,
                  int causal, int bwd)
{
    a->flops += fl;
    double eff = attn_eff(k, len, dh, causal, bwd);
    if (!(eff > 0)) {
        launch(a, hpgo_gpu_op_time(k->g, k->attn_dtype, HPGO_OP_ATTENTION, fl, bytes));
        return;
    }
    double t = fl / (k->g->peak[k->attn_dtype] * hpgo_gpu_clock_factor(k->g) * eff);
    if (bytes > 0)
        t += bytes / (k->g->hbm_bandwidth * hpgo_gpu_efficiency(k->g, HPGO_EFF_MEMORY, bytes));
    launch(a, t);
}

static void vec(const kctx_t *k, acc_t *a, double elements, double flops_per, double bytes)
{
    launch(a, hpgo_gpu_op_time(k->g, k->dtype, HPGO_OP_VECTOR, elements * flops_per, bytes));
}

/* A pass cannot run faster than the host issues its kernels. */
static void host_bound(acc_t *a)
{
    if (a->n * HOST_PER_KERNEL > a->t)
        a->t = a->n * HOST_PER_KERNEL;
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
        if (x->experts < 0 || x->experts > 65536)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "experts must be in 0..65536");
        if (x->experts > 0) {
            if (x->topk < 1 || x->topk > x->experts)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "topk must be in 1..experts (%lld), got %lld",
                                    (long long)x->experts, (long long)x->topk);
            if (!pos_i(x->expert_ffn, big))
                return hpgo_err_set(err, HPGO_E_INVALID, 0, "expert_ffn must be in 1..2^24");
            if (x->shared_experts < 0 || x->shared_experts > 64 ||
                (x->shared_experts > 0 && !pos_i(x->shared_ffn, big)))
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "shared_experts must be in 0..64, with shared_ffn in 1..2^24");
            if (x->dense_first < 0 || x->dense_first > x->layers || x->moe_every < 0 ||
                x->moe_every > x->layers)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "dense_first and moe_every must be in 0..layers");
            if (!isfinite(x->capacity) || x->capacity < 0 || x->capacity > (double)x->experts)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "capacity factor must be 0 (dropless) or in (0, experts]");
            if (!isfinite(x->imbalance) || (x->imbalance != 0 && x->imbalance < 1) ||
                x->imbalance > (double)x->experts)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "routing imbalance must be in [1, experts] (1: balanced)");
            if (x->route_groups > 1 &&
                (x->route_groups > x->experts || x->experts % x->route_groups != 0 ||
                 x->route_topk_groups < 1 || x->route_topk_groups > x->route_groups ||
                 x->route_topk_groups * (x->experts / x->route_groups) < x->topk))
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "routing groups must divide experts, with 1 <= topk_groups "
                                    "<= groups holding at least topk experts");
            if (x->route_groups < 0 || x->route_topk_groups < 0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0, "routing groups must be >= 0");
        }
        if (x->window < 0 || x->window_every < 0 || x->window_every > x->layers)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "window must be >= 0 and window_every in 0..layers");
        if (x->mla && (!pos_i(x->q_lora, big) || !pos_i(x->kv_lora, big) || x->qk_nope < 0 ||
                       x->qk_nope > (1 << 16) || !pos_i(x->qk_rope, 1 << 16) ||
                       !pos_i(x->v_head, 1 << 16)))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "latent attention needs q_lora, kv_lora in 1..2^24, qk_nope in "
                                "0..65536, qk_rope and v_head in 1..65536");
        if (x->mtp < 0 || x->mtp > 16)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "mtp modules must be in 0..16");
        if ((x->parallel_block != 0 && x->parallel_block != 1) ||
            (x->parallel_block && (x->experts > 0 || x->mla)))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "parallel_block (0 or 1) needs a dense model without latent "
                                "attention");
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

void hpgo_work_state_bytes(int32_t precision, int32_t fp8_params, int32_t optimizer_impl,
                           double *weights, double *grads, double *optimizer)
{
    if (precision == HPGO_PREC_FP32) {
        *weights = 4, *grads = 4, *optimizer = 8;
        return;
    }
    /* fp8: the fp8 weight and its transpose, beside the 16-bit weight
     * unless the weights are kept in fp8 only */
    *weights = precision == HPGO_PREC_FP8 ? (fp8_params ? 2 : 4) : 2;
    *grads = 4;
    *optimizer = 12;
    if (optimizer_impl == HPGO_OPT_MEGATRON_BF16_GRADS) {
        /* Megatron-Core's DDP with grad_reduce_in_fp32 off (Megatron-LM's
         * --grad-reduce-in-bf16, NeMo 2's performance mode): the gradient
         * buffer, its accumulation and reduce-scatter in 16 bits.  The
         * distributed optimizer casts its shard to fp32 for the step
         * (_copy_model_grads_to_main_grads: 4 / N B, freed by zero_grad),
         * after the activations are gone: not counted at their peak. */
        *grads = 2;
    }
    if (optimizer_impl == HPGO_OPT_APEX_BF16) {
        /* Apex's DistributedFusedAdam (apex/contrib/optimizers/
         * distributed_fused_adam.py) as NeMo's distributed_fused_adam with
         * grad_sync_dtype bf16 and contiguous grad / param buffers: every
         * parameter's gradient lives unsharded in a persistent 16-bit
         * buffer (_init_grad_buffer) and is reduce-scattered in 16 bits.
         * Its shard keeps fp32 exp_avg and exp_avg_sq and, for a bf16 model
         * (NeMo's store_param_remainders), the low 16 bits of the fp32
         * master as an int16: the master is rebuilt from the bf16 weight,
         * 10 B.  fp8 weights kept in fp8 (fp8_params) have no 16-bit copy to
         * rebuild it from: NeMo sets store_params, an fp32 master, 12 B.
         * The reduce-scatter writes a second, sharded 16-bit gradient (2 / N
         * B) kept from the last backward to the next step's zero_grad, so
         * not at the activations' peak: not counted. */
        *grads = 2;
        *optimizer = precision == HPGO_PREC_BF16 || (precision == HPGO_PREC_FP8 && !fp8_params)
                         ? 10
                         : 12;
    }
}

/* ---- transformer -------------------------------------------------------- */

/* Layer kinds: bit 0 a mixture-of-experts MLP, bit 1 sliding-window
 * attention.  Layers of one kind are alike: each kind is priced once. */
enum { K_MOE = 1, K_WINDOW = 2, N_KINDS = 4 };

int hpgo_work_is_moe_layer(const hpgo_xformer_t *x, int64_t i)
{
    int64_t every = x->moe_every > 1 ? x->moe_every : 1;
    return x->experts > 0 && i >= x->dense_first && (i + 1) % every == 0;
}

static int layer_kind(const hpgo_xformer_t *x, int64_t i)
{
    int64_t every = x->window_every > 1 ? x->window_every : 1;
    int win = x->window > 0 && x->window < x->seq && i % every == 0;
    return (hpgo_work_is_moe_layer(x, i) ? K_MOE : 0) | (win ? K_WINDOW : 0);
}

typedef struct xshape {
    double h, f, a, s, V, L, b, t, c, T, tl; /* T: tokens on the rank (b s / c); tl: / t with SP */
    double qkd, vdh;     /* per-head query/key and value widths */
    double q, kw, vw, o; /* widths: queries, keys, values (tp-unsplit), attention output */
    double ql, kl, dr;   /* MLA: query and key-value latent ranks, rope width */
    double E, ge;        /* bytes of an activation element, and of a stored GEMM input (fp8: 1) */
    /* experts */
    double ex, k, fe, fsh, etp, ep, imb, rx; /* rx: routed token slots on the rank */
    int sp, rc, flash, dropout, swiglu, mla;
    int ks;        /* kernel set (HPGO_KS_*) */
    int fp32_norm; /* RMSNorm as separate fp32 ops, run eager (norm_unfused_fwd) */
    int rope;      /* rotary embeddings applied to q and k (no learned positions, no MLA) */
    int gathered;  /* the column-parallel GEMMs' inputs are stored gathered (async TP) */
    int pb;        /* parallel attention + MLP block */
    int fused_act; /* SwiGLU as one fused kernel storing only its input */
} xshape_t;

static int64_t padded_vocab(const hpgo_xformer_t *x, int64_t tp)
{
    int64_t m = 128 * tp;
    return (x->vocab + m - 1) / m * m;
}

static void shape(const hpgo_xformer_t *x, const hpgo_parplan_t *p, int32_t precision, xshape_t *s)
{
    memset(s, 0, sizeof *s);
    s->h = (double)x->hidden;
    s->f = (double)x->ffn;
    s->a = (double)x->heads;
    s->mla = x->mla != 0;
    if (s->mla) {
        s->qkd = (double)(x->qk_nope + x->qk_rope);
        s->vdh = (double)x->v_head;
        s->q = s->a * s->qkd;
        s->kw = s->a * s->qkd; /* keys and values are expanded per head */
        s->vw = s->a * s->vdh;
        s->ql = (double)x->q_lora;
        s->kl = (double)x->kv_lora;
        s->dr = (double)x->qk_rope;
    } else {
        s->qkd = s->vdh = (double)x->head_dim;
        s->q = s->a * s->qkd;
        s->kw = s->vw = (double)x->kv_heads * s->qkd;
    }
    s->o = s->a * s->vdh;
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
    /* compile-blocks and compile-fa2 compile the transformer blocks as
     * compile does (their attention and loss: xformer_pieces) */
    s->ks = p->kernels == HPGO_KS_COMPILE_BLOCKS || p->kernels == HPGO_KS_COMPILE_FA2
                ? HPGO_KS_COMPILE
            : p->kernels == HPGO_KS_EAGER_UNFUSED_NORM ? HPGO_KS_EAGER
                                                       : p->kernels;
    s->fp32_norm = p->kernels == HPGO_KS_EAGER_UNFUSED_NORM;
    s->rope = !x->learned_pos && !x->mla;
    /* torchao's Float8ColwiseParallel / PrepareFloat8ModuleInput gather the
     * input in fp8 and Float8Linear saves that gathered fp8 input for the
     * weight gradient, as async TP saves its gathered input */
    int tao_rows = precision == HPGO_PREC_FP8 && p->kernels != HPGO_KS_TE &&
                   p->fp8_recipe != HPGO_F8R_TENSORWISE;
    s->gathered = (p->tp_overlap == HPGO_TPO_ASYNC ||
                   (precision == HPGO_PREC_FP8 && p->kernels != HPGO_KS_TE && x->experts == 0 &&
                    !x->mla && !x->parallel_block && !tao_rows)) &&
                  s->sp;
    s->pb = x->parallel_block != 0;
    /* Megatron's bias_swiglu (jit-fused) and Inductor keep the SwiGLU's input
     * and recompute the SiLU; eager silu + mul also stores the SiLU output */
    s->fused_act = x->flash && s->ks != HPGO_KS_EAGER;
    s->flash = x->flash;
    s->dropout = x->dropout;
    s->swiglu = x->mlp == HPGO_MLP_SWIGLU;
    s->E = precision == HPGO_PREC_FP32 ? 4 : 2;
    /* torchao's rowwise recipe saves each linear's 16-bit input
     * (matmul_with_hp_or_float8_args: save_for_backward(input_hp, ...)) */
    s->ge = precision == HPGO_PREC_FP8 && !tao_rows ? 1 : s->E;
    s->ex = (double)x->experts;
    s->k = (double)x->topk;
    s->fe = (double)x->expert_ffn;
    s->fsh = (double)(x->shared_experts * x->shared_ffn);
    s->etp = (double)hpgo_parplan_etp(p);
    s->ep = (double)(p->ep > 0 ? p->ep : 1);
    s->imb = x->imbalance > 1 ? x->imbalance : 1;
    /* each rank routes its tl tokens to k experts (capacity: C k slots); an
     * expert-tensor-parallel group gathers its etp ranks' tokens */
    s->rx = s->tl * (x->capacity > 0 ? x->capacity * s->k : s->k) * s->etp * s->imb;
}

/* ---- parameters ---- */

static double mlp_mats(const xshape_t *s, double f) { return (s->swiglu ? 3 : 2) * s->h * f; }

/* Attention parameters on one tp rank (norms and biases included). */
static double attn_params(const hpgo_xformer_t *x, const xshape_t *s)
{
    double t = s->t, h = s->h;
    double n = (x->layernorm ? 2 : 1) * h; /* the attention's input norm */
    if (s->mla)
        n += s->h * s->ql + s->ql + s->h * (s->kl + s->dr) + s->kl +
             (s->ql * s->q + s->kl * s->a * (s->qkd - s->dr + s->vdh) + s->o * h) / t;
    else
        n += (h * (s->q + s->kw + s->vw) + s->o * h) / t;
    if (x->bias || x->attn_bias) /* attn_bias 2: q, k, v only (Qwen2), no output bias */
        n += (s->q + s->kw + s->vw) / t + (x->bias || x->attn_bias != 2 ? h : 0);
    if (x->qk_norm)
        n += 2 * s->qkd;
    if (x->sinks)
        n += s->a / t;
    return n;
}

/* MLP parameters on one tp rank for a dense MLP of inner size f. */
static double dense_mlp_params(const hpgo_xformer_t *x, const xshape_t *s, double f)
{
    double n = (x->layernorm ? 2 : 1) * s->h + mlp_mats(s, f) / s->t;
    if (x->bias)
        n += (s->swiglu ? 2 : 1) * f / s->t + s->h;
    return n;
}

/* Parameters of one routed expert (unsplit). */
static double expert_params(const hpgo_xformer_t *x, const xshape_t *s)
{
    return mlp_mats(s, s->fe) + (x->expert_bias ? (s->swiglu ? 2 : 1) * s->fe + s->h : 0);
}

/* MoE MLP parameters on one rank: router, shared experts (tp-split) and
 * the rank's routed experts (E / ep of them, each split over etp). */
static void moe_params(const hpgo_xformer_t *x, const xshape_t *s, double *all, double *routed)
{
    double n = (x->layernorm ? 2 : 1) * s->h + s->h * s->ex + (x->router_bias ? s->ex : 0);
    if (s->fsh > 0)
        n += mlp_mats(s, s->fsh) / s->t + (x->expert_bias ? (s->swiglu ? 2 : 1) * s->fsh / s->t + s->h : 0);
    *routed = s->ex / s->ep * expert_params(x, s) / s->etp;
    *all = n + *routed;
}

/* ---- model FLOPs (3 x forward, per token, whole layer, no tp) ---- */

static double attn_keys(const hpgo_xformer_t *x, const xshape_t *s, int kind, int causal)
{
    double S = s->s;
    if (kind & K_WINDOW) {
        double w = (double)x->window;
        return causal ? w * (1 - w / (2 * S)) : w;
    }
    return causal ? S / 2 : S;
}

static double attn_proj_flops(const xshape_t *s)
{
    if (s->mla)
        return 2 * (s->h * s->ql + s->ql * s->q + s->h * (s->kl + s->dr) +
                    s->kl * s->a * (s->qkd - s->dr + s->vdh) + s->o * s->h);
    return 2 * s->h * (s->q + s->kw + s->vw) + 2 * s->o * s->h;
}

/* Model FLOPs count the attention core's keys per query once, here: half
 * the square (causal) with causal_flops (current Megatron's
 * num_floating_point_operations), or with fused attention whatever the
 * convention -- a flash kernel skips the masked blocks (core_fwd), so a
 * full square would credit work no GPU does and MFU could pass 100 %;
 * the full square only for unfused attention, which computes it (the
 * 2021-22 papers' count).  Hardware FLOPs are what the kernels execute,
 * recomputation and FlashAttention-2's backward included, so they are
 * never below these. */
static double layer_model_flops(const hpgo_xformer_t *x, const xshape_t *s, int kind)
{
    int causal = x->causal_flops || s->flash;
    double fl = attn_proj_flops(s) + 2 * attn_keys(x, s, kind, causal) * (s->q + s->o);
    double mf = s->swiglu ? 6 : 4;
    if (kind & K_MOE)
        fl += 2 * s->h * s->ex + s->k * mf * s->h * s->fe + mf * s->h * s->fsh;
    else
        fl += mf * s->h * s->f;
    return 3 * fl;
}

/* ---- kernels of one layer on one rank ---- */

typedef struct lcost {
    acc_t fw, bi, bw;             /* forward, input gradient, weight gradient kernels */
    double tp_f, tp_b, ep_f, ep_b; /* exposed communication seconds */
    double rc_t, rc_fl;           /* recomputation inside the input gradient */
    double act, act_w, full_act;  /* stored bytes, held until W, working set under full recompute */
    double buf;                   /* transient bytes while it runs: all-to-all send / receive buffers */
    double fp8_state;             /* fp8 scaling state of its GEMMs (persistent) */
    double lin_p;                 /* parameters of its Float8Linear weights on the rank */
    double lp, ep_p;              /* parameters on the rank, part in routed experts */
    double mfl;                   /* model FLOPs per micro-batch on the rank */
} lcost_t;

static void attn_proj_fwd(const kctx_t *k, acc_t *a, const xshape_t *s)
{
    double T = s->T, t = s->t, h = s->h;
    if (s->mla) { /* the down-projections are replicated over tp */
        mm(k, a, T, h, s->ql);
        vec(k, a, T * s->ql, 5, 2 * s->E * T * s->ql);
        mm(k, a, T, s->ql, s->q / t);
        mm(k, a, T, h, s->kl + s->dr);
        vec(k, a, T * s->kl, 5, 2 * s->E * T * s->kl);
        mm(k, a, T, s->kl, s->a * (s->qkd - s->dr + s->vdh) / t);
        return;
    }
    mm(k, a, T, h, (s->q + s->kw + s->vw) / t);
}

static void attn_proj_bwd(const kctx_t *k, acc_t *a, const xshape_t *s, int weight)
{
    double T = s->T, t = s->t, h = s->h;
    if (s->mla) {
        double up = s->a * (s->qkd - s->dr + s->vdh) / t;
        if (weight) {
            mm(k, a, h, T, s->ql);
            mm(k, a, s->ql, T, s->q / t);
            mm(k, a, h, T, s->kl + s->dr);
            mm(k, a, s->kl, T, up);
        } else {
            mm(k, a, T, s->q / t, s->ql);
            vec(k, a, T * s->ql, 8, 3 * s->E * T * s->ql);
            mm(k, a, T, s->ql, h);
            mm(k, a, T, up, s->kl);
            vec(k, a, T * s->kl, 8, 3 * s->E * T * s->kl);
            mm(k, a, T, s->kl + s->dr, h);
        }
        return;
    }
    if (weight)
        mm(k, a, h, T, (s->q + s->kw + s->vw) / t);
    else
        mm(k, a, T, (s->q + s->kw + s->vw) / t, h);
}

/* Attention core forward (scores, softmax, dropout, probabilities x V). */
static void core_fwd(const kctx_t *k, acc_t *a, const xshape_t *s, double keys, double len,
                     int causal)
{
    double t = s->t, T = s->T, E = s->E;
    if (s->flash) { /* fused; causal (and windowed) kernels skip the masked blocks */
        fused(k, a, 2 * T * keys * (s->q + s->o) / t,
              E * (T * (s->q + s->kw + s->vw) / t + T * s->o / t), len, s->qkd, causal, 0);
        return;
    }
    double es = T * (s->a / t) * s->s; /* score elements: local queries x all keys */
    double fq = 2 * T * s->s * s->q / t, fv = 2 * T * s->s * s->o / t;
    a->flops += fq;
    launch(a, hpgo_gpu_op_time(k->g, k->attn_dtype, HPGO_OP_MATRIX, fq,
                               E * (T * s->q / t + T * s->kw / t + es)));
    /* eager PyTorch masks the scores in a kernel of its own (masked_fill_,
     * in place) before torch.softmax; Megatron's fused kernel scales,
     * masks and normalises in one */
    if (k->ks == HPGO_KS_EAGER)
        vec(k, a, es, 1, 2 * E * es);
    vec(k, a, es, 5, 2 * E * es);
    if (s->dropout)
        vec(k, a, es, 2, (2 * E + 1) * es);
    a->flops += fv;
    launch(a, hpgo_gpu_op_time(k->g, k->attn_dtype, HPGO_OP_MATRIX, fv,
                               E * (es + T * s->vw / t + T * s->o / t)));
}

static void core_bwd(const kctx_t *k, acc_t *a, const xshape_t *s, double keys, double len,
                     int causal)
{
    double t = s->t, T = s->T, E = s->E;
    if (s->flash) {
        /* five GEMMs against the forward's two (FlashAttention-2) */
        fused(k, a, 2.5 * 2 * T * keys * (s->q + s->o) / t,
              E * (2 * T * (s->q + s->kw + s->vw) / t + 2 * T * s->o / t), len, s->qkd, causal, 1);
        return;
    }
    double es = T * (s->a / t) * s->s;
    double fq = 2 * T * s->s * s->q / t, fv = 2 * T * s->s * s->o / t;
    for (int i = 0; i < 4; i++) { /* dQ, dK (q width), dProbs, dV (v width) */
        double fl = i < 2 ? fq : fv;
        a->flops += fl;
        launch(a, hpgo_gpu_op_time(k->g, k->attn_dtype, HPGO_OP_MATRIX, fl,
                                   E * (es + T * s->q / t + T * s->kw / t)));
    }
    if (s->dropout)
        vec(k, a, es, 2, (2 * E + 1) * es);
    vec(k, a, es, 5, 3 * E * es);
    if (k->ks == HPGO_KS_EAGER) /* the mask's backward: the gradient filled where masked */
        vec(k, a, es, 1, 2 * E * es);
}

/* A tp-split dense MLP of inner size f on T tokens: forward, input and
 * weight gradients. */
/* The MLP's activation on n inner elements, forward / backward: one fused
 * kernel (Megatron's bias_swiglu / bias_gelu, Inductor), or eager PyTorch's
 * silu + mul (2 kernels, ~10 B per element; backward 3 kernels) -- spec
 * stack-mechanisms 2.1. */
static void act_fwd(const kctx_t *k, acc_t *a, const xshape_t *s, double n)
{
    if (s->swiglu && k->ks == HPGO_KS_EAGER) {
        vec(k, a, n, 4, 2 * s->E * n); /* silu(gate) */
        vec(k, a, n, 1, 3 * s->E * n); /* * up */
        return;
    }
    vec(k, a, n, 8, (s->swiglu ? 3 : 2) * s->E * n);
}

static void act_bwd(const kctx_t *k, acc_t *a, const xshape_t *s, double n)
{
    if (s->swiglu && k->ks == HPGO_KS_EAGER) {
        vec(k, a, n, 1, 3 * s->E * n); /* d(up) = g * silu */
        vec(k, a, n, 1, 3 * s->E * n); /* d(silu) = g * up */
        vec(k, a, n, 6, 3 * s->E * n); /* silu backward */
        return;
    }
    vec(k, a, n, 8, (s->swiglu ? 5 : 3) * s->E * n);
}

static void mlp_fwd(const kctx_t *k, acc_t *a, const xshape_t *s, double T, double f, double t)
{
    double fN = (s->swiglu ? 2 : 1) * f / t;
    mm(k, a, T, s->h, fN);
    act_fwd(k, a, s, T * f / t);
    mm(k, a, T, f / t, s->h);
}

static void mlp_bwd(const kctx_t *k, acc_t *a, const xshape_t *s, double T, double f, double t,
                    int weight)
{
    double fN = (s->swiglu ? 2 : 1) * f / t;
    if (weight) {
        mm(k, a, s->h, T, fN);
        mm(k, a, f / t, T, s->h);
        return;
    }
    mm(k, a, T, s->h, f / t); /* fc2 dgrad: (T x h) . (h x f/t) */
    act_bwd(k, a, s, T * f / t);
    mm(k, a, T, fN, s->h);
}

/* The routed experts of one rank: E / ep grouped GEMMs of rx ep / E
 * tokens each (small GEMMs run at the efficiency of their size). */
static void experts_pass(const kctx_t *k, acc_t *a, const xshape_t *s, int pass)
{
    double n = s->ex / s->ep, me = s->rx / n;
    acc_t one = {0, 0, 0};
    if (pass == 0)
        mlp_fwd(k, &one, s, me, s->fe, s->etp);
    else
        mlp_bwd(k, &one, s, me, s->fe, s->etp, pass == 2);
    a->t += n * one.t;
    a->flops += n * one.flops;
    a->n += n * one.n;
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

/* torchtitan's op-level selective activation checkpointing (mode
 * "selective", selective_ac_option "op": _apply_ac_to_transformer_block of
 * torchtitan/parallelisms/parallelize_llama.py at commit 9dec370, the
 * benchmarks' version; torchtitan/distributed/activation_checkpoint.py
 * since): the ops of its save list -- aten.mm except every second one of a
 * block (a per-block counter), SDPA's flash and memory-efficient attention,
 * the tensor-parallel reduce-scatter, the fp8 amax -- keep their outputs
 * (CheckpointPolicy.MUST_SAVE), every other op of the block is recomputed
 * in the backward (PREFER_RECOMPUTE).  A Llama block runs its matmuls as wq,
 * wk, wv, wo, w1, w3, w2 (FeedForward: w2(silu(w1 x) * w3 x)), so the
 * outputs of wq, wv, w1 and w2 are saved and wk, wo, w3 recomputed with the
 * norms, rotary embeddings, residual adds and the SwiGLU (a GeLU MLP: fc1
 * saved, fc2 not needed again).  torch.compile of the block: AOTAutograd's
 * partitioner keeps what the backward reads -- the block's input (the
 * checkpoint's), q, v, the attention output and its log-sum-exp (fp32 per
 * head), fc1's output and, with sequence parallelism, the output
 * projection's reduce-scatter (w2's output is the block's output, never
 * read back).  Eager checkpointing caches every saved output: also w2's
 * (h, before its reduce-scatter) and its reduce-scatter.  Bytes per token
 * on the rank. */
static double op_sac_stored(const xshape_t *s)
{
    double t = s->t, E = s->E, h = s->h, rep_sp = s->sp ? t : 1;
    double b = E * h / rep_sp + E * (s->q + s->vw + s->o + s->f) / t + 4 * s->a / t;
    if (s->sp)
        b += E * h / t;
    if (s->ks == HPGO_KS_EAGER)
        b += E * h + (s->sp ? E * h / t : 0);
    return b;
}

/* Stored bytes of one layer per micro-batch on the rank (spec 3.3
 * generalised; MoE: router probabilities in fp32, the routed token copies
 * and each expert's MLP tensors, shared experts as a dense MLP): total and
 * the part the weight gradient still needs. */
static void layer_act(const xshape_t *s, int kind, double *total, double *held_w)
{
    double T = s->T, t = s->t, h = s->h, E = s->E, ge = s->ge;
    double rep_sp = s->sp ? t : 1;
    double masks = s->dropout ? 2 * h : 0;
    /* selective recomputation with fused kernels (Megatron-Core's
     * recompute_modules layernorm, moe_act, mla_up_proj): the norms'
     * outputs, the routed experts' fc2 inputs and the latent attention's
     * up-projected q, k, v are recomputed instead of stored */
    int mod = s->rc == HPGO_RC_SELECTIVE && s->flash;
    /* norm inputs (E each), attention and MLP GEMM inputs (ge each) */
    double norms = s->pb ? 1 : 2; /* a parallel block has one norm and one GEMM input */
    double rep = (norms * E * h + masks) / rep_sp;
    if (s->fp32_norm) /* the unfused norm keeps its fp32 input and its 16-bit result instead */
        rep += norms * 4 * h / rep_sp;
    if (!mod) /* the column-parallel GEMMs' inputs, gathered when async TP stores them so */
        rep += norms * ge * h / (s->gathered ? 1 : rep_sp);
    double mla = s->mla ? E * (s->ql + s->kl + s->dr) + (mod ? 0 : ge * (s->ql + s->kl)) : 0; /* latents, all T */
    double score = s->flash ? 4 * s->a : E * s->a * s->s + (s->dropout ? (1 + E) * s->a * s->s : 0);
    double attn = (mod && s->mla ? 0 : E * (s->q + s->kw + s->vw)) + ge * s->o;
    /* per inner element: the activation function's inputs, then the fc2
     * input; a fused SwiGLU (with the fused kernels of `flash`, as
     * Megatron's bias_swiglu) keeps only its input (gate and up) and
     * recomputes the SiLU in the backward, the unfused one also stores it */
    double act_in = s->swiglu ? (s->fused_act ? 2 * E : 3 * E) : E;
    double mlp_t = act_in + ge;
    double mlp = 0, routed = 0, router = 0;
    if (kind & K_MOE) {
        mlp = mlp_t * s->fsh;
        router = 4 * s->ex / t; /* per token of T: tl tokens, fp32 */
        routed = s->rx * (ge * h + (mod ? act_in : mlp_t) * s->fe / s->etp);
    } else {
        mlp = mlp_t * s->f;
    }
    if (s->rc == HPGO_RC_FULL) {
        *total = T * E * h / rep_sp;
        *held_w = *total;
        return;
    }
    if (s->rc == HPGO_RC_OP) {
        *total = *held_w = T * op_sac_stored(s);
        return;
    }
    if (s->rc == HPGO_RC_SELECTIVE && !s->flash)
        score = 0;
    double par = (attn + mlp) / t;
    *total = T * (rep + mla + par + score / t + router) + routed;
    *held_w = T * (rep - masks / rep_sp + mla + par) + routed;
}

/* Whether a layer's kernel set checkpoints with PyTorch's non-reentrant
 * torch.utils.checkpoint (torchtitan's ptd_checkpoint_wrapper): the
 * torch.compile sets (shape() folds them into compile) and torchtitan's
 * eager block (eager with its fp32 norm).  "eager" stands for
 * Megatron-DeepSpeed (its reentrant CheckpointFunction reruns the whole
 * forward), "te" for Megatron-Core (likewise). */
static int torch_checkpoint(const xshape_t *s)
{
    return s->ks == HPGO_KS_COMPILE || (s->ks == HPGO_KS_EAGER && s->fp32_norm);
}

/* Probability that none of k experts drawn without replacement from M
 * falls among m given ones: C(M - m, k) / C(M, k) (a product for small k,
 * log-gamma beyond, so the work stays bounded for any model). */
static double none_of(double M, double m, double k)
{
    if (M - m < k)
        return 0;
    if (k > 64)
        return exp(lgamma(M - m + 1) - lgamma(M - m - k + 1) - lgamma(M + 1) + lgamma(M - k + 1));
    double p = 1;
    for (double i = 0; i < k; i++)
        p *= (M - m - i) / (M - i);
    return p;
}

/* C(n, r) / C(N, r') ratios below use this in log space. */
static double lchoose(double n, double r) { return lgamma(n + 1) - lgamma(r + 1) - lgamma(n - r + 1); }

/* Expected nodes (of `nodes`, each holding an equal contiguous block of
 * the experts) that one token's k experts reach under uniform routing --
 * within topk_groups of the model's expert groups when it limits routing
 * and the groups align with the nodes (DeepSeek-V3: 4 of 8 groups, one
 * group per node at EP 64); otherwise as unrestricted. */
static double nodes_touched(const hpgo_xformer_t *x, double nodes)
{
    double E = (double)x->experts, k = (double)x->topk, m = E / nodes;
    double g = (double)x->route_groups, tg = (double)x->route_topk_groups;
    double untouched = none_of(E, m, k);
    if (g > 1 && tg < g) {
        double eg = E / g, M = tg * eg;
        if (fmod(g, nodes) == 0) { /* q whole groups on each node: j of them chosen */
            double q = g / nodes;
            untouched = 0;
            for (double j = 0; j <= q && j <= tg; j++)
                if (tg - j <= g - q)
                    untouched += exp(lchoose(q, j) + lchoose(g - q, tg - j) - lchoose(g, tg)) *
                                 none_of(M, j * eg, k);
        } else if (fmod(nodes, g) == 0) { /* each group spans nodes / g nodes */
            untouched = (1 - tg / g) + tg / g * none_of(M, m, k);
        }
    }
    return nodes * (1 - untouched);
}

/* Compute x and communication y side by side, the compute slowed by sl
 * while the communication runs. */
static double pair_time(double x, double y, double sl)
{
    double rest = x - y / sl;
    return y + (rest > 0 ? rest : 0);
}

/* ---- pointwise kernels by kernel set (spec stack-mechanisms 2.1) ---- */

/* torchtitan's RMSNorm of 2024 run eager (models/norms.py at 9dec370,
 * norm_type "rmsnorm": x.float(), x * rsqrt(x.pow(2).mean(-1) + eps),
 * .type_as(x), * weight) over n tokens of 16-bit input: one kernel per op --
 * the cast up (2 B read, 4 written), pow (4 + 4), the row mean (4), the
 * per-row add and rsqrt, the scaling (4 + 4), the cast back (4 + 2), the
 * weight (2 + 2): 36 B an element in 8 kernels. */
static void norm_unfused_fwd(const kctx_t *k, acc_t *a, const xshape_t *s, double n)
{
    double e = n * s->h, E = s->E;
    vec(k, a, e, 0, (E + 4) * e);
    vec(k, a, e, 1, 8 * e);
    vec(k, a, e, 1, 4 * e);
    vec(k, a, n, 1, 8 * n);
    vec(k, a, n, 1, 8 * n);
    vec(k, a, e, 1, 8 * e);
    vec(k, a, e, 0, (4 + E) * e);
    vec(k, a, e, 1, 2 * E * e);
}

/* Its backward as autograd runs those ops: the weight's mul (the input
 * gradient, 2 + 2; the weight gradient's product, 2 + 2 + 2, and its
 * reduction over the tokens, 2), the cast's gradient up (2 + 4), the
 * scaling's two gradients (g x rsqrt, 4 + 4; g x x and its row sum, 4 + 4 +
 * 4, 4), rsqrt's per row, mean's expansion (4 written), pow's x.pow(1) x 2
 * x g (4 + 4, 4 + 4, 4 + 4 + 4), the two fp32 input gradients added (4 + 4
 * + 4) and cast down (4 + 2): 92 B an element in 14 kernels. */
static void norm_unfused_bwd(const kctx_t *k, acc_t *a, const xshape_t *s, double n)
{
    double e = n * s->h, E = s->E;
    vec(k, a, e, 1, 2 * E * e);
    vec(k, a, e, 1, 3 * E * e);
    vec(k, a, e, 1, E * e);
    vec(k, a, e, 0, (E + 4) * e);
    vec(k, a, e, 1, 8 * e);
    vec(k, a, e, 1, 12 * e);
    vec(k, a, e, 1, 4 * e);
    vec(k, a, n, 2, 8 * n);
    vec(k, a, e, 1, 4 * e);
    vec(k, a, e, 0, 8 * e);
    vec(k, a, e, 1, 8 * e);
    vec(k, a, e, 1, 12 * e);
    vec(k, a, e, 1, 12 * e);
    vec(k, a, e, 0, (4 + E) * e);
}

/* Norm of n tokens: Transformer Engine's fused norm (one kernel, 4 B per
 * element), PyTorch's fused RMSNorm / LayerNorm (>= 2.9: one kernel);
 * torch.compile fuses the residual add before it into the same kernel
 * (read x and the branch, write the sum and the norm: 8 B). */
static void norm_fwd(const kctx_t *k, acc_t *a, const xshape_t *s, double n)
{
    double e = n * s->h;
    if (s->fp32_norm) {
        norm_unfused_fwd(k, a, s, n);
        return;
    }
    vec(k, a, e, 5, (k->ks == HPGO_KS_COMPILE ? 4 : 2) * s->E * e);
}

/* Its backward; compile adds the residual gradient in the same kernel,
 * eager PyTorch reduces the weight gradient in a second kernel. */
static void norm_bwd(const kctx_t *k, acc_t *a, const xshape_t *s, double n)
{
    double e = n * s->h;
    if (s->fp32_norm) {
        norm_unfused_bwd(k, a, s, n);
        return;
    }
    vec(k, a, e, 8, (k->ks == HPGO_KS_COMPILE ? 4 : 3) * s->E * e);
    if (k->ks == HPGO_KS_EAGER)
        vec(k, a, e, 2, s->E * e);
}

/* Dropout + residual add of n tokens, forward or backward: Megatron's
 * jit-fused bias_dropout_add (one kernel, 6 B per element + the mask
 * forward, 4 B + the mask backward); fused into the next norm by
 * torch.compile; eager PyTorch: a dropout kernel, then an add. */
static void resid(const kctx_t *k, acc_t *a, const xshape_t *s, double n, int bwd)
{
    double e = n * s->h, E = s->E;
    if (k->ks == HPGO_KS_COMPILE)
        return;
    if (k->ks == HPGO_KS_EAGER) {
        if (s->dropout)
            vec(k, a, e, 2, (2 * E + 1) * e);
        vec(k, a, e, 1, 3 * E * e);
        return;
    }
    vec(k, a, e, 2, ((bwd ? 2 : 3) * E + (s->dropout ? 1 : 0)) * e);
}

/* Rotary embeddings of q and k (n elements on the rank), forward or
 * backward alike: Transformer Engine's fused rope (one kernel each for q
 * and k, 4 B per element), one Triton kernel under torch.compile, eager
 * PyTorch's complex-multiply path (upcast, multiply, downcast: 4 kernels
 * each, ~20 B per element). */
static void rope(const kctx_t *k, acc_t *a, const xshape_t *s, double nq, double nk)
{
    double E = s->E;
    if (k->ks == HPGO_KS_COMPILE) {
        vec(k, a, nq + nk, 6, 2 * E * (nq + nk));
        return;
    }
    int per = k->ks == HPGO_KS_EAGER ? 4 : 1;
    double b = k->ks == HPGO_KS_EAGER ? 10 * E / per : 2 * E;
    for (int i = 0; i < per; i++) {
        vec(k, a, nq, 6.0 / per, b * nq);
        vec(k, a, nk, 6.0 / per, b * nk);
    }
}

/* ---- torchao's Float8Linear as torchtitan ran it (fp8, PyTorch kernel sets) ---- */

/* torchao at eab345c (2024-12-23, the torchao of torchtitan's December 2024
 * benchmarks; torchao/float8/float8_linear.py) with tensorwise dynamic
 * scaling, every scale computed from the tensor it scales: Float8Linear
 * casts its input (e4m3) and weight (e4m3) in the forward and runs
 * manual_float8_matmul_with_args_in_float8 -- torch._scaled_mm, which
 * saves the fp8 input and the fp8 weight for the backward -- and casts the
 * output gradient (e5m2) in the backward (NoopFwToFloat8BwDynamic); the
 * input- and weight-gradient GEMMs reuse those casts.  A cast is
 * hp_tensor_to_float8_dynamic: tensor_to_amax (max(abs(x)) over the whole
 * tensor), amax_to_scale (a few one-element ops), then
 * _ToFloat8ConstrFunc (x.to(float32) * scale, clamp, .to(float8)).
 * _scaled_mm wants its left operand row-major and its right one
 * column-major (float8_ops.py preprocess_addmm copies them otherwise).
 * Where the amax comes from: */
enum { AMAX_KNOWN = 0, AMAX_FUSED = 1, AMAX_PASS = 2 };

/* One cast of n elements of hp bytes each to fp8.  Eager PyTorch runs
 * every op as its own kernel: abs (hp read, hp written), max (hp), then
 * to(float32) (hp + 4), * scale (8), clamp (8) and to(float8) (4 + 1), a
 * row-major result only, and six one-element kernels (the max's second
 * pass and the scale's ops: twelve kernels a cast, as measured on an H100,
 * profiles/h100-sxm5-float8-casts.json).  Under torch.compile,
 * as torchao's own roofline model of that version prices it
 * (torchao/float8/roofline_utils.py get_tensor_memory_traffic_bytes,
 * "dynamic"): the amax's first reduction stage fused into the kernel that
 * produced the tensor when that kernel is Inductor's (AMAX_FUSED) or a
 * read of its own (AMAX_PASS: the producer is an extern kernel -- SDPA, a
 * GEMM -- or another compiled graph), a one-element second stage, and one
 * cast kernel that reads the tensor and writes it in fp8 row-major and
 * column-major (the two layouts the GEMMs need), with one more fp8 read
 * Inductor's generated kernel makes (pytorch/pytorch#130015, the roofline's
 * model_torch_compile_limitations): hp + 3 bytes an element.  AMAX_KNOWN:
 * the scale is at hand (precomputed, or a recomputation that saved it). */
static void tao_cast(const kctx_t *k, acc_t *a, double n, double hp, int amax)
{
    if (k->ks == HPGO_KS_EAGER) {
        if (amax != AMAX_KNOWN) {
            vec(k, a, n, 1, 2 * hp * n); /* abs */
            vec(k, a, n, 1, hp * n);     /* max */
            for (int i = 0; i < 6; i++)
                vec(k, a, 1, 1, 16);
        }
        vec(k, a, n, 0, (hp + 4) * n); /* to(float32) */
        vec(k, a, n, 1, 8 * n);        /* * scale */
        vec(k, a, n, 2, 8 * n);        /* clamp */
        vec(k, a, n, 0, 5 * n);        /* to(float8) */
        return;
    }
    if (amax == AMAX_PASS)
        vec(k, a, n, 1, hp * n);
    if (amax != AMAX_KNOWN)
        vec(k, a, 1, 1, 16);
    vec(k, a, n, 3, (hp + 3) * n);
}

/* A copy of n fp8 elements into the other layout (1 B read, 1 written). */
static void tao_transpose(const kctx_t *k, acc_t *a, double n) { vec(k, a, n, 0, 2 * n); }

/* Where the amax of linear i's output gradient comes from (of n, in
 * tao_linears' order): wv's from SDPA's backward and w2's from the next
 * block's graph, a pass of their own, as are wq's and wk's without rotary
 * embeddings; the others from an Inductor kernel (rotary backward, norm,
 * activation), fused. */
static int go_amax(const xshape_t *s, int i, int n)
{
    return i == 2 || i == n - 1 || (i < 2 && !s->rope) ? AMAX_PASS : AMAX_FUSED;
}

/* The weight matrices of a dense block on the rank, torchtitan's order
 * (wq, wk, wv, wo, w1, w3, w2; no w3 for a GeLU MLP), and the elements of
 * each one's input and output on the rank (T: tokens; inputs gathered under
 * sequence parallelism). */
static int tao_linears(const xshape_t *s, double *w, double *in, double *out)
{
    double T = s->T, t = s->t, h = s->h, f = s->f;
    int n = 0;
    const double widths[3] = {s->q, s->kw, s->vw};
    for (int i = 0; i < 3; i++, n++)
        w[n] = h * widths[i] / t, in[n] = T * h, out[n] = T * widths[i] / t;
    w[n] = s->o * h / t, in[n] = T * s->o / t, out[n] = T * h, n++;
    for (int i = 0; i < (s->swiglu ? 2 : 1); i++, n++)
        w[n] = h * f / t, in[n] = T * h, out[n] = T * f / t;
    w[n] = f * h / t, in[n] = T * f / t, out[n] = T * h, n++;
    return n;
}

/* Parameters of a dense block's Float8Linear weights on the rank. */
static double tao_params(const xshape_t *s)
{
    double w[7], in[7], out[7], p = 0;
    int n = tao_linears(s, w, in, out);
    for (int i = 0; i < n; i++)
        p += w[i];
    return p;
}

/* torchao's rowwise recipe (Float8LinearConfig.from_recipe_name("rowwise"),
 * torchao 0.18.0, the torchao torchtitan 0.3.0 runs; Float8LinearConverter
 * offers it and rowwise_with_gw_hp only): e4m3 for the input, the weight and
 * the output gradient, one scale per row of the axis the GEMM reduces over
 * (rounded down to a power of two).  matmul_with_hp_or_float8_args saves
 * the 16-bit input and weight (save_for_backward(input_hp, weight_hp_t)),
 * casts both along the reduced axis for the output GEMM, and in the
 * backward casts the output gradient and the weight for the input gradient
 * and the output gradient and the input again along the token axis for the
 * weight gradient: each tensor cast along both of its axes, each cast
 * computed from the 16-bit tensor.  Priced as torchao's own roofline model
 * of the recipe prices them (torchao/testing/training/roofline_utils.py
 * get_tensor_memory_traffic_ovhd_s, "rowwise"): a cast along the rows is one
 * kernel, the row's amax and the cast fused (hp read, unless the kernel that
 * produced the tensor is Inductor's and takes the cast in, and 1 B written);
 * a cast along the columns first transposes the 16-bit tensor (hp read, hp
 * written) and then casts its rows (hp read, 1 B written).  The GEMMs run
 * on the fp8 curve (the rowwise _scaled_mm is not measured here; torchao's
 * roofline prices both recipes at the fp8 peak).  Eager, each cast is
 * tao_cast's op-by-op sequence (abs, an amax along the axis, the scale's
 * ops, to(float32), the multiplication, clamp, to(float8)). */
static void tao_row_cast(const kctx_t *k, acc_t *a, double n, double hp, int fused)
{
    if (k->ks == HPGO_KS_EAGER) {
        tao_cast(k, a, n, hp, AMAX_PASS);
        return;
    }
    vec(k, a, n, 3, (fused ? 0 : hp) * n + n);
}

static void tao_col_cast(const kctx_t *k, acc_t *a, double n, double hp)
{
    if (k->ks == HPGO_KS_EAGER) {
        tao_cast(k, a, n, hp, AMAX_PASS);
        return;
    }
    vec(k, a, n, 0, 2 * hp * n);
    vec(k, a, n, 3, (hp + 1) * n);
}

/* The forward's rowwise casts of a dense block (recompute: again in the
 * backward under op-level checkpointing, the same kernels): the inputs as
 * tao_fwd_casts shares them (wq, wk, wv read one tensor, w1 and w3 one),
 * fused into the norms' and the activation's kernels, the attention
 * output its own read; every weight along its rows.  Under tensor
 * parallelism the inputs arrive gathered in 16 bits (torchtitan 0.3 has no
 * float8 tensor-parallel classes) and a row-parallel weight (wo, w2) is
 * split along the axis its scales reduce over: one all-reduce of its row
 * maxima each. */
static void tao_row_fwd_casts(const kctx_t *k, acc_t *a, const xshape_t *s, double *ar)
{
    double T = s->T, t = s->t, h = s->h, E = s->E;
    int eager = k->ks == HPGO_KS_EAGER, tp = t > 1;
    int nqkv = eager ? 3 : 1, nfc1 = eager && s->swiglu ? 2 : 1;
    for (int i = 0; i < nqkv; i++)
        tao_row_cast(k, a, T * h, E, 1);
    tao_row_cast(k, a, T * s->o / t, E, 0);
    for (int i = 0; i < nfc1; i++)
        tao_row_cast(k, a, T * h, E, 1);
    tao_row_cast(k, a, T * s->f / t, E, 1);
    double w[7], in[7], out[7];
    int n = tao_linears(s, w, in, out);
    for (int i = 0; i < n; i++)
        tao_row_cast(k, a, w[i], E, 0);
    *ar = tp ? 2 : 0;
}

/* The backward's rowwise casts: each linear's output gradient along its
 * rows (fused where tao_bwd_casts fuses the amax) for the input gradient
 * and along its columns for the weight gradient, each weight along its
 * columns for the input gradient, and each distinct saved input along its
 * columns for the weight gradient.  Eager, _scaled_mm's operands are
 * copied into the layouts it wants, as under tensorwise.  A
 * column-parallel weight's columns are split over tp: an all-reduce of its
 * maxima each. */
static void tao_row_bwd_casts(const kctx_t *k, acc_t *a, const xshape_t *s, double *ar)
{
    double w[7], in[7], out[7], T = s->T, t = s->t, h = s->h, E = s->E;
    int n = tao_linears(s, w, in, out), eager = k->ks == HPGO_KS_EAGER;
    if (k->gwhp) {
        /* rowwise_with_gw_hp: the output gradient along its rows and the
         * weight tensorwise (its scale from the forward's row scales, as the
         * roofline has it: one kernel, hp read, 1 B written) for the input
         * gradient; the weight gradient multiplies the 16-bit output
         * gradient and saved input (kwgrad), no cast.  Eager, the weight's
         * fp8 copy is copied into the column-major layout _scaled_mm wants.
         * Every sharded weight's scale is one all-reduce over tp. */
        for (int i = 0; i < n; i++) {
            tao_row_cast(k, a, out[i], E, go_amax(s, i, n) == AMAX_FUSED);
            if (eager) {
                tao_cast(k, a, w[i], E, AMAX_PASS);
                tao_transpose(k, a, w[i]);
            } else {
                vec(k, a, w[i], 3, (E + 1) * w[i]);
            }
        }
        *ar = t > 1 ? n : 0;
        return;
    }
    for (int i = 0; i < n; i++) {
        tao_row_cast(k, a, out[i], E, go_amax(s, i, n) == AMAX_FUSED);
        tao_col_cast(k, a, out[i], E);
        tao_col_cast(k, a, w[i], E);
        if (eager) {
            tao_transpose(k, a, w[i]);
            tao_transpose(k, a, out[i]);
            tao_transpose(k, a, in[i]);
        }
    }
    int nqkv = eager ? 3 : 1, nfc1 = eager && s->swiglu ? 2 : 1;
    for (int i = 0; i < nqkv + nfc1; i++)
        tao_col_cast(k, a, T * h, E);
    tao_col_cast(k, a, T * s->o / t, E);
    tao_col_cast(k, a, T * s->f / t, E);
    *ar = t > 1 ? n - 2 : 0;
}

/* The rowwise recipe's backward GEMMs without fast accumulation (torchao's
 * default Float8GemmConfig for the input and weight gradients) run
 * cuBLAS's tensorwise _scaled_mm with unit scales and multiply the output
 * by the row scales after it (float8_ops.py addmm_float8_unwrapped: "the
 * rowwise CUTLASS-based kernel is so slow without fast-accum"): a pass over
 * each weight gradient (16-bit, read and written; FSDP2's hook takes it
 * outside the compiled graph), and, eager, over each input gradient
 * (compiled, the multiplication fuses into the sum and the norm's backward
 * that read it).  The forward GEMM uses fast accumulation and the rowwise
 * kernel itself.  rowwise_with_gw_hp's input gradient is tensorwise in the
 * weight, its weight gradient 16-bit: neither is rescaled. */
static void tao_row_rescale(const kctx_t *k, acc_t *bw, acc_t *bi, const xshape_t *s)
{
    double w[7], in[7], out[7], E = s->E;
    int n = tao_linears(s, w, in, out);
    for (int i = 0; i < n; i++) {
        vec(k, bw, w[i], 1, 2 * E * w[i]);
        if (k->ks == HPGO_KS_EAGER)
            vec(k, bi, in[i], 1, 2 * E * in[i]);
    }
}

/* The forward's casts of a dense block (recompute: what op-level
 * checkpointing redoes in the backward -- every cast, its amax saved, as
 * torchtitan's save list keeps abs and max).  The attention's input is
 * cast once under torch.compile (the casts of wq, wk and wv read the same
 * tensor with the same ops: AOTAutograd's common-subexpression pass merges
 * them; with tensor parallelism PrepareFloat8ModuleInput casts it once on
 * the sequence shard before the fp8 all-gather, float8_tensor_parallel.py),
 * three times in eager mode; likewise the MLP's input for w1 and w3.  The
 * norms' and the activation's outputs come from Inductor kernels (amax
 * fused), the attention output from SDPA (its own pass).  Weights: the
 * gathered 16-bit weight (FSDP2's copy-out, outside the graph: its own
 * pass) at every forward, unless FSDP2 gathered it in fp8.  Under tensor
 * parallelism each amax of a sharded DTensor is all-reduced over tp: *ar
 * counts them. */
static void tao_fwd_casts(const kctx_t *k, acc_t *a, const xshape_t *s, int recompute,
                          double *ar)
{
    if (k->rowwise) {
        tao_row_fwd_casts(k, a, s, ar);
        if (recompute)
            *ar = 0;
        return;
    }
    double T = s->T, tl = s->tl, t = s->t, h = s->h, E = s->E;
    int eager = k->ks == HPGO_KS_EAGER, tp = t > 1;
    int fused = recompute ? AMAX_KNOWN : AMAX_FUSED, own = recompute ? AMAX_KNOWN : AMAX_PASS;
    int nqkv = eager && !tp ? 3 : 1, nfc1 = eager && !tp && s->swiglu ? 2 : 1;
    for (int i = 0; i < nqkv; i++)
        tao_cast(k, a, tl * h, E, fused);
    tao_cast(k, a, T * s->o / t, E, own);
    for (int i = 0; i < nfc1; i++)
        tao_cast(k, a, tl * h, E, fused);
    tao_cast(k, a, T * s->f / t, E, fused);
    *ar = recompute || !tp ? 0 : 4;
    if (k->fp8ag)
        return;
    double w[7], in[7], out[7];
    int n = tao_linears(s, w, in, out);
    for (int i = 0; i < n; i++)
        tao_cast(k, a, w[i], E, own);
    if (!recompute && tp)
        *ar += n;
}

/* The input-gradient pass's casts of a dense block: each linear's output
 * gradient (e5m2; wq's and wk's from the rotary backward and wo's from the
 * second norm's backward and the residual, fused; wv's from SDPA's backward
 * and w2's from the next block's graph, their own pass; w1's and w3's from
 * the activation's backward, fused), cast before the fp8 all-gather of
 * Float8RowwiseParallel's output gradient under tensor parallelism.
 * Compiled, the casts wrote both layouts; FSDP2's fp8-gathered weight is
 * row-major and its input-gradient GEMM wants it column-major: one copy
 * per weight.  Eager, preprocess_addmm copies the weight, the output
 * gradient and the input into the layouts the two GEMMs want. */
static void tao_bwd_casts(const kctx_t *k, acc_t *a, const xshape_t *s, double *ar)
{
    if (k->rowwise) {
        tao_row_bwd_casts(k, a, s, ar);
        return;
    }
    double w[7], in[7], out[7];
    int n = tao_linears(s, w, in, out), eager = k->ks == HPGO_KS_EAGER;
    for (int i = 0; i < n; i++) {
        int row = i == 3 || i == n - 1; /* wo, w2: the output gradient is sequence-split */
        double go = row ? out[i] / (s->sp ? s->t : 1) : out[i];
        tao_cast(k, a, go, s->E, go_amax(s, i, n));
        if (eager) {
            tao_transpose(k, a, w[i]);
            tao_transpose(k, a, out[i]);
            tao_transpose(k, a, in[i]);
        } else if (k->fp8ag) {
            tao_transpose(k, a, w[i]);
        }
    }
    *ar = s->t > 1 ? n : 0;
}

/* What op-level checkpointing (op_sac_stored) recomputes in a block's
 * backward: both norms (compile fuses the residual add into the second),
 * wk, the rotary embeddings, wo (unless its reduce-scatter's output was
 * saved and the partitioner reads that instead), w3 and the SwiGLU. */
static void op_sac_recompute(const kctx_t *k, acc_t *a, const xshape_t *s)
{
    double T = s->T, t = s->t, h = s->h;
    norm_fwd(k, a, s, s->tl);
    mm(k, a, T, h, s->kw / t);
    if (s->rope)
        rope(k, a, s, T * s->q / t, T * s->kw / t);
    if (!(s->sp && s->ks != HPGO_KS_EAGER))
        mm(k, a, T, s->o / t, h);
    resid(k, a, s, s->tl, 0);
    norm_fwd(k, a, s, s->tl);
    if (s->swiglu)
        mm(k, a, T, h, s->f / t);
    act_fwd(k, a, s, T * s->f / t);
    if (k->tao) {
        double ar;
        tao_fwd_casts(k, a, s, 1, &ar);
    }
    host_bound(a);
}

/* ---- tensor-parallel communication and its overlap (spec stack-mechanisms 1) ---- */

/* Seconds of one GEMM (m x kk) . (kk x n) alone. */
static double gemm_time(const kctx_t *k, double m, double kk, double n)
{
    acc_t a = {0, 0, 0};
    mm(k, &a, m, kk, n);
    return a.t;
}

/* Measured slowdown of a bf16 GEMM while other kernels hold n SMs of an
 * H100 SXM5 (profiles/h100-sxm5-sm-margin.json, benchmarks/gpu_sm_margin.py:
 * the median over tensor-parallel GEMMs and their overlap chunks): far
 * above the proportional n_SM / (n_SM - n), as wave quantisation and the
 * lost SMs' share of each wave add up. */
static const double SM_HELD[9] = {0, 1, 2, 4, 8, 16, 24, 32, 48};
static const double SM_SLOW_H100[9] = {1, 1.112, 1.323, 1.418, 1.42, 1.425, 1.375, 1.553, 1.537};

/* Slowdown of a GEMM while communication kernels hold `held` SMs: the
 * measured table on the Hopper parts (told apart by their bf16 peak, as the
 * attention tables), proportional to the SMs left elsewhere (1 when the SM
 * count is unknown). */
static double sm_slowdown(const hpgo_gpu_t *g, double held)
{
    double n = (double)g->sms;
    if (held <= 0 || n <= 2 * held)
        return 1;
    if (hopper_peak(g) && held <= SM_HELD[8]) {
        int i = 0;
        while (held > SM_HELD[i + 1])
            i++;
        double u = (held - SM_HELD[i]) / (SM_HELD[i + 1] - SM_HELD[i]);
        return SM_SLOW_H100[i] + u * (SM_SLOW_H100[i + 1] - SM_SLOW_H100[i]);
    }
    return n / (n - held);
}

typedef struct gdims {
    double m, kk, n;
} gdims_t;

/* One of n row chunks of a GEMM (its input quantized once, beforehand):
 * its FLOPs at the curve's efficiency for the chunk's size, and 1 / n of
 * the whole GEMM's memory traffic -- each chunk reads the whole weight
 * again, but a chunk of a transformer GEMM stays above the GPU's ridge
 * point, so the re-reads stream under its compute and are not charged
 * (the model otherwise adds a kernel's memory time to its compute). */
static double chunk_time(const kctx_t *k, gdims_t d, double n)
{
    double fl = 2 * d.m * d.kk * d.n / n;
    double ob = k->dtype == HPGO_DT_FP8 ? 1 : k->e;
    double bytes = ob * (d.m * d.kk + d.kk * d.n) + k->e * d.m * d.n;
    return hpgo_gpu_op_time(k->g, k->dtype, HPGO_OP_MATRIX, fl, 0) +
           hpgo_gpu_op_time(k->g, k->dtype, HPGO_OP_MATRIX, 0, bytes) / n + KERNEL_GAP;
}

/* fp8: the quantization of the whole GEMM input, before it is split. */
static double quant_time(const kctx_t *k, gdims_t d)
{
    const kctx_t kn = kwgrad(k);
    return gemm_time(k, d.m, d.kk, d.n) - gemm_time(&kn, d.m, d.kk, d.n);
}

/* Seconds of a Transformer Engine userbuffers all-gather or reduce-scatter
 * of `bytes` (the whole buffer) inside the tensor-parallel group's NVLink
 * domain: one kernel in which every rank writes its part to each peer
 * (allgather2_userbuff_inplace) or reads its slice from each peer and sums
 * it (reducescatter2_userbuff_stridedoutput: userbuffers.cu's
 * userbuffers_fp16_sum_inplace_gpu_rr_rs_oop, TE 1.8), after one flag
 * exchange -- the ring's (t - 1) / t of the bytes at the link's collective
 * bandwidth, one link latency instead of the ring's t - 1 steps (op: the
 * collective NCCL would run where the group leaves the node). */
static double ub_coll(const hpgo_cluster_t *c, int op, const xshape_t *s, double bytes)
{
    const hpgo_level_t *l = &c->levels[0];
    double t = s->t;
    if (t <= 1)
        return 0;
    if (hpgo_cost_level_between(c, 0, (int64_t)t - 1) > 0) /* beyond one node: NCCL's ring */
        return tp_coll(c, op, s, bytes);
    return l->latency + (t - 1) / t * bytes / (l->coll_bandwidth * l->efficiency);
}

/* Chunk GEMMs as PyTorch's async TP issues them, against the whole GEMM:
 * one TP-8 rank's GEMMs of torchtitan's June 2025 Llama 3 8B and 70B runs
 * cut into 8 row chunks alternating between two streams
 * (_pipelined_multi_all_gather_and_consume, _pipelined_produce_and_all2all),
 * timed on one H100 SXM5 without communication (benchmarks/gpu_tp_chunks.py,
 * profiles/h100-sxm5-tp-chunks.json): the median over the all-gather side's
 * consumer GEMMs (QKV, FC1) and over the reduce-scatter side's producers
 * (output projection, FC2).  The curve prices 8 chunks at the whole GEMM's
 * time within 1 % for these shapes; measured, the consumers took 1.05-1.15
 * times as long and the producers 0.90-1.10 (two streams overlap the
 * thin-K producers).  Hopper parts only, as the measured SM table. */
static const double ASYNC_CHUNKS_H100[2] = {1.142, 0.973};

static double async_chunks(const hpgo_gpu_t *g, int rs_side)
{
    return hopper_peak(g) ? ASYNC_CHUNKS_H100[rs_side ? 1 : 0] : 1;
}

/* Exposed seconds of an all-gather of X bytes pipelined with the GEMM it
 * feeds (m rows gathered): Transformer Engine's ring exchange
 * (UbufP2PCommOverlap::split_overlap_ag in TE 1.8, the version Megatron-Core
 * r0.8.0 ran; CommOverlapP2PBase::split_overlap_ag today) or PyTorch's
 * _pipelined_multi_all_gather_and_consume -- t chunk GEMMs of m / t rows,
 * the local chunk first, each next chunk sent while the previous one
 * computes.  Both send by copy engine: TE's initialize_ub passes
 * use_ce=True for every ring exchange (TE 1.8 module/base.py add_ub), so
 * userbuffers_send / userbuffers_recv issue a cudaMemcpyAsync and a
 * one-thread flag kernel (signalonly: <<<1, 1>>>), and the chunk GEMMs run
 * on all SMs (set_sm_margin 0); PyTorch pulls from the peers' symmetric
 * buffers by copy engine.  No SM is held, so the chunks are not slowed (the
 * measured SM_SLOW_H100 table is of kernels whose blocks fill an SM).  The
 * gathered input stays in the userbuffer: TE's B_copy copies only the local
 * chunk out, by copy engine beside the last GEMM (hidden).  With
 * `copy_in` the rank's own chunk is first copied into the communication
 * buffer (X / t read and written, exposed): TE's copy_input_to_ubuf of the
 * output gradient before a backward ring exchange (its forward norm writes
 * into the userbuffer directly), PyTorch's copy of the local shard into its
 * symmetric buffer before every fused all-gather. */
static double ring_ag(const kctx_t *k, const hpgo_cluster_t *c, const xshape_t *s, gdims_t d,
                      double X, int copy_in, double cs)
{
    double t = s->t, g = cs * chunk_time(k, d, t);
    double whole = gemm_time(k, d.m, d.kk, d.n);
    double C = hpgo_cost_p2p(c, 0, X / t);
    double tot = quant_time(k, d) + g + (t - 1) * (g > C ? g : C);
    if (copy_in)
        tot += hpgo_gpu_op_time(k->g, k->dtype, HPGO_OP_VECTOR, 0, 2 * X / t);
    return tot > whole ? tot - whole : 0;
}

/* Exposed seconds of a GEMM (m rows) followed by the reduce-scatter of its
 * X-byte output, pipelined as Transformer Engine's split_overlap_rs
 * (UbufCommOverlap in TE 1.8; initialize_ub's defaults for proj_fprop and
 * fc2_fprop: "pipeline", num_splits 4, num_sm 16, set_sm_margin 0): the
 * GEMM in TE_RS_SPLITS chunks, the first alone, each later one beside the
 * reduce-scatter kernel of the chunk before (COMM_SMS SMs on a
 * high-priority stream: the chunk slowed by the SMs held while it runs),
 * the last chunk's reduce-scatter after the last GEMM (on UB_MAX_SM = 32
 * SMs, nothing beside it: exposed). */
static double pipe_rs(const kctx_t *k, const hpgo_cluster_t *c, const xshape_t *s, gdims_t d,
                      double X)
{
    double n = TE_RS_SPLITS, g = chunk_time(k, d, n);
    double whole = gemm_time(k, d.m, d.kk, d.n);
    double r = ub_coll(c, HPGO_COLL_REDUCE_SCATTER, s, X / n);
    double tot = quant_time(k, d) + g + (n - 1) * pair_time(g, r, sm_slowdown(k->g, COMM_SMS)) + r;
    return tot > whole ? tot - whole : 0;
}

/* The same by point-to-point sends (PyTorch's
 * _pipelined_produce_and_all2all; TE's CommOverlapP2PBase::split_overlap_rs):
 * t chunk GEMMs, each finished partial sent by copy engine beside the next,
 * then a kernel summing the t partials ((t + 1) X / t bytes), exposed. */
static double p2p_rs(const kctx_t *k, const hpgo_cluster_t *c, const xshape_t *s, gdims_t d,
                     double X, double cs)
{
    double t = s->t, g = cs * chunk_time(k, d, t), whole = gemm_time(k, d.m, d.kk, d.n);
    double C = hpgo_cost_p2p(c, 0, X / t);
    double tot = quant_time(k, d) + t * (g > C ? g : C) +
                 hpgo_gpu_op_time(k->g, k->dtype, HPGO_OP_VECTOR, X / s->E, (t + 1) * X / t);
    return tot > whole ? tot - whole : 0;
}

/* A collective issued on a side stream beside an unrelated GEMM (NCCL with
 * async_op=True, TE's bulk overlap) contends with it for SMs and memory:
 * measured across A100, H100, MI250 and MI210, such overlap beat running
 * the two one after the other by 10.2 % on average, the compute running
 * 18.9 % slower (arXiv 2507.03114; spec stack-mechanisms 1.4). */
#define BULK_OVERLAP_GAIN 0.102

/* Exposed seconds of a collective of `comm` seconds run beside a GEMM of
 * `gemm` seconds: the longer of the GEMM slowed by the SMs the collective
 * holds while it runs, and the measured share of the serial time. */
static double bulk(const hpgo_gpu_t *g, double gemm, double comm)
{
    double t = pair_time(gemm, comm, sm_slowdown(g, COMM_SMS));
    double measured = (1 - BULK_OVERLAP_GAIN) * (gemm + comm);
    return (t > measured ? t : measured) - gemm;
}

/* One column-parallel / row-parallel GEMM pair of a layer (attention: QKV
 * and output projection; MLP: FC1 and FC2): its forward GEMMs (col_f,
 * row_f), the row-parallel input gradient (row_d) and the column-parallel
 * input and weight gradients (col_d, col_w).  Adds the exposed seconds of
 * its tensor-parallel collectives to *f and *b.
 * Without overlap (Megatron / TE with sequence parallelism, spec 1.1): the
 * forward all-gather and reduce-scatter and the backward all-gather of the
 * output gradient are exposed; the backward all-gather of the saved norm
 * output runs beside the input-gradient GEMM and the reduce-scatter of the
 * input gradient beside the weight-gradient GEMM (async_op=True), slowing
 * them by the SMs NCCL holds.  Without sequence parallelism: the forward
 * all-reduce exposed, the backward one beside the weight gradient
 * (Megatron's LinearWithGradAccumulationAndAsyncCommunication).
 * "te": ring-exchange all-gathers into the forward column GEMM and the
 * backward row input gradient, pipelined reduce-scatter after the forward
 * row GEMM, the backward pair as bulk overlaps.  "async": the matched
 * all-gather -> mm and mm -> reduce-scatter of the forward and backward
 * graphs fused (pull by copy engine), the column GEMM's gathered input
 * saved for its weight gradient (no backward all-gather).
 * Op-level selective checkpointing (recompute selective-op) saves the
 * reduce-scatters but not the all-gathers (torchtitan's _save_list names
 * reduce_scatter_tensor, not all_gather_into_tensor; everything off the
 * list is PREFER_RECOMPUTE, and the partitioner recomputes a collective
 * the user's checkpoint region tags so: force_save_collectives in
 * torch/_functorch/partitioners.py spares exactly those).  Each pair's
 * all-gather is therefore run again in the backward, where it feeds the
 * recomputed column GEMM `rc_col` (wk for the attention, w3 for a gated
 * MLP; n = 0 when no recomputed GEMM reads it) and the weight gradients:
 * exposed as the forward's unfused all-gather, or fused with `rc_col`
 * under async TP (fuse_all_gather_matmul matches an all-gather that is
 * the first operand of an mm); no other backward gather follows. */
static void tp_pair(const hpgo_cluster_t *c, const hpgo_parplan_t *p, const kctx_t *k,
                    const xshape_t *s, gdims_t col_f, gdims_t row_f, gdims_t row_d, gdims_t col_d,
                    gdims_t col_w, gdims_t rc_col, double X, double *f, double *b)
{
    const kctx_t kw = kwgrad(k);
    const hpgo_gpu_t *g = k->g;
    /* torchao's float8 tensor parallelism (Float8ColwiseParallel,
     * Float8RowwiseParallel, PrepareFloat8ModuleInput) casts before it
     * gathers: the forward input and the backward output gradient cross in
     * fp8, 1 B an element; reduce-scatters stay 16-bit.  The gathered fp8
     * input is saved, so no backward re-gather.  Transformer Engine under
     * fp8 gathers in fp8 too (TE 1.13 - 2.x): LayerNormLinear's norm writes
     * its output in fp8, into the userbuffer under --tp-comm-overlap, and
     * gather_along_first_dim gathers that; the backward casts the output
     * gradient to fp8 before its gather (grad_output_preprocess) and
     * re-gathers the saved fp8 norm output for the weight gradient; every
     * all-gather userbuffer is fp8 ("AllGather buffers use fp8 when using
     * fp8 recipe", module/base.py initialize_ub).  Its reduce-scatters stay
     * 16-bit (an fp8 buffer only where a recipe sets fp8_buf). */
    double Xg = (k->tao && !k->rowwise) || (k->ks == HPGO_KS_TE && k->dtype == HPGO_DT_FP8)
                    ? X / s->E
                    : X;
    double cd = gemm_time(k, col_d.m, col_d.kk, col_d.n);
    double cw = gemm_time(&kw, col_w.m, col_w.kk, col_w.n);
    if (!s->sp) {
        double ar = tp_coll(c, HPGO_COLL_ALLREDUCE, s, X);
        *f += ar;
        *b += bulk(g, cw, ar);
        return;
    }
    double ag = tp_coll(c, HPGO_COLL_ALLGATHER, s, Xg);
    double rs = tp_coll(c, HPGO_COLL_REDUCE_SCATTER, s, X);
    /* the all-gather op-level checkpointing runs again, and the copy of its
     * result into sequence order under PyTorch's batch-first layout */
    int op_ag = s->rc == HPGO_RC_OP;
    /* full recomputation re-gathers the input in its forward, op-level
     * checkpointing in its backward: no other backward gather */
    int no_regather = s->rc == HPGO_RC_FULL || op_ag;
    double regather = no_regather || (k->tao && !k->rowwise) ? 0 : bulk(g, cd, ag);
    double ag_copy = k->ks != HPGO_KS_TE && s->b > 1
                         ? hpgo_gpu_op_time(g, k->dtype, HPGO_OP_VECTOR, 0, 2 * Xg) + KERNEL_GAP
                         : 0;
    switch (p->tp_overlap) {
    case HPGO_TPO_TE:
        /* the forward's gathered input is gathered again in the backward
         * (bulk), so only the backward's gathered output gradient, reused by
         * the weight gradient, is copied out of the userbuffer; NVIDIA's fp8
         * recipes (Megatron-Bridge training/comm_overlap.py) reduce-scatter
         * by ring exchange on 1 SM, the bf16 ones pipelined */
        /* the bulk overlaps are userbuffers collectives too (16 SMs) */
        regather = no_regather ? 0 : bulk(g, cd, ub_coll(c, HPGO_COLL_ALLGATHER, s, Xg));
        *f += ring_ag(k, c, s, col_f, Xg, 0, 1) +
              (k->dtype == HPGO_DT_FP8 ? p2p_rs(k, c, s, row_f, X, 1) : pipe_rs(k, c, s, row_f, X));
        *b += ring_ag(k, c, s, row_d, Xg, 1, 1) + regather +
              bulk(g, cw, ub_coll(c, HPGO_COLL_REDUCE_SCATTER, s, X)) + (op_ag ? ag : 0);
        break;
    case HPGO_TPO_ASYNC: {
        /* _pipelined_multi_all_gather_and_consume first copies the local
         * shard into its symmetric buffer (exposed: "giving up the chance to
         * overlap" it).  In the backward the column side's input gradient is
         * the sum of the gradients through each linear that reads the
         * gathered input (torchtitan's wq, wk, wv and w1, w3): an add, not a
         * matmul, so fuse_matmul_reduce_scatter does not match it
         * (micro_pipeline_tp.py _find_producer_matmul takes mm, _scaled_mm
         * or a reshaped one) and its reduce-scatter stays NCCL's, issued
         * after the weight gradients, exposed.  Its chunk GEMMs run at the
         * measured async_chunks. */
        double cag = async_chunks(g, 0), crs = async_chunks(g, 1);
        *f += ring_ag(k, c, s, col_f, Xg, 1, cag) + p2p_rs(k, c, s, row_f, X, crs);
        *b += ring_ag(k, c, s, row_d, Xg, 1, cag) + rs;
        if (op_ag)
            *b += rc_col.n > 0 ? ring_ag(k, c, s, rc_col, Xg, 1, cag) : ag + ag_copy;
        break;
    }
    default: {
        /* PyTorch's tensor parallelism (DTensor, torchtitan's Shard(1)
         * sequence parallelism) holds activations batch-first, [b, s, h], and
         * NCCL gathers and scatters along dim 0, so the functional
         * collectives (torch/distributed/_functional_collectives.py) move
         * the data around each one: a reduce-scatter on the sequence dim
         * first copies its input's chunks into one contiguous tensor
         * (torch.cat of torch.chunk, unconditionally), and an all-gather
         * copies its dim-0 result into the sequence order
         * (_maybe_view_chunk_cat: a view only when b = 1).  Each copy reads
         * and writes the whole tensor on the compute stream, after or before
         * its collective.  The backward runs the duals: the forward
         * reduce-scatter's gradient is gathered (copied as above), and a
         * re-gather copies again; the forward all-gather's gradient is
         * scattered from a sum of GEMM outputs, an add into which
         * torch.compile fuses the concatenation (eager PyTorch copies).
         * Megatron's [s, b, h] needs none.  Async TP (above) has none
         * either: the compiler restrides the fused ops' operands
         * (restride_A_shard_for_fused_all_gather_matmul) and fuses the
         * unfused scatter's concatenation into its add. */
        double cg = ag_copy, cr = 0;
        if (k->ks != HPGO_KS_TE)
            cr = hpgo_gpu_op_time(g, k->dtype, HPGO_OP_VECTOR, 0, 2 * X) + KERNEL_GAP;
        *f += ag + rs + cg + cr;
        *b += ag + regather + bulk(g, cw, rs) + cg + (regather > 0 ? cg : 0) +
              (k->ks == HPGO_KS_EAGER ? cr : 0) + (op_ag ? ag + ag_copy : 0);
    }
    }
}

/* ---- context parallelism (spec stack-mechanisms 4) ---- */

/* Bytes _templated_ring_attention (forward) or its backward holds at its
 * fullest beyond the layer's own tensors (torch/distributed/tensor/
 * experimental/_attention.py at the torch of 2024-12-23), for N output and
 * Nkv K + V elements on the rank (K and V repeated to the query heads),
 * kv the gathered K/V, E bytes an element; the larger of the two passes
 * (one runs at a time: the forward's rotater and merger are freed when it
 * returns, and full recomputation runs the forward again before the
 * backward gathers anew).
 * Forward, at a merging step after the first: the gathered K/V (the
 * all-gather rotater keeps its one buffer until the call returns; the
 * contiguous copies of K and V made at step 0 are dropped once key and
 * value are views of it), _SDPAMerger's fp32 output, the step's 16-bit
 * block output and its fp32 copy, and out - sigmoid(lse diff) x (out -
 * block_out): its product and result beside the old output -- 16 B + E an
 * output element.
 * Backward, at a step after the first on a rank > 0 (i <= rank: the
 * partial update of dK/dV): the gathered K/V, the concatenation of the
 * step's K and V handed to the rotater (kept in next_kv to the next step),
 * the fp32 dQ, SDPA's 16-bit gradients (dQ whole, dK/dV of half the keys),
 * and four fp32 dK/dV buffers: the one the permute received (the rotater
 * still holds it), _partial_update's new concatenation, the concatenation
 * sent (next_grad_kv) and the permute's output allocated beside them. */
static double torch_cp_buffers(double E, double N, double Nkv, double kv)
{
    double fwd = kv + (16 + E) * N;
    double bwd = kv + E * Nkv + 4 * N + E * (N + 0.5 * Nkv) + 16 * Nkv;
    return fwd > bwd ? fwd : bwd;
}

/* PyTorch's context parallelism around SDPA (cp_comm torch_sdpa; torch.
 * distributed.tensor.experimental._attention: _templated_ring_attention and
 * its backward, rotate_method "allgather", torchtitan's default at 9dec370
 * with the SDPA back ends limited to flash and memory-efficient): the
 * sequence in 2c chunks as the p2p ring (load balanced), c SDPA calls a pass
 * -- step 0 the causal diagonal on the local chunks, steps 1 .. c-1 half
 * blocks without a mask (every local query against the first half of a
 * remote K/V, or the second half of the queries against all of it), each
 * the work of step 0.  K and V are all-gathered once, issued at step 0 and
 * waited at step 1 (what exceeds step 0 is exposed); each step's output
 * and log-sum-exp are merged into an fp32 copy (convert_to_f32: a cast,
 * three elementwise passes, a concatenation when only the second half was
 * updated -- one fused pass under torch.compile), and K and V are
 * concatenated for the rotater at every step; the backward gathers K/V
 * again, accumulates dQ, dK, dV in fp32 and passes the dK/dV accumulator
 * around the ring (one permute per step, waited a step later; the last
 * after the loop, exposed).  K and V are exchanged as SDPA gets them:
 * torchtitan's Llama (models/llama/model.py at 9dec370) repeats them to the
 * query heads first. */
static void torch_cp_core(const hpgo_cluster_t *c, const hpgo_parplan_t *p, const kctx_t *k,
                          const xshape_t *s, double keys, double len, acc_t *fw, acc_t *bw,
                          double *xf, double *xb, double *buf)
{
    double cp = s->c, E = s->E, t = s->t, T = s->T;
    acc_t d = {0, 0, 0}, o = {0, 0, 0}, db = {0, 0, 0}, ob = {0, 0, 0};
    core_fwd(k, &d, s, keys / cp, len / cp, 1);
    core_fwd(k, &o, s, keys / cp, len / cp, 0);
    core_bwd(k, &db, s, keys / cp, len / cp, 1);
    core_bwd(k, &ob, s, keys / cp, len / cp, 0);
    double N = T * s->q / t, Nkv = 2 * T * s->q / t; /* output, K + V elements on the rank */
    double kv = E * Nkv * cp;                         /* the gathered K and V */
    double ag = hpgo_cost_collective(c, HPGO_COLL_ALLGATHER, p->cp, p->tp, kv, HPGO_ALGO_AUTO);
    int32_t lvl = hpgo_cost_level_between(c, 0, (int64_t)(p->cp - 1) * p->tp);
    double dkv = hpgo_cost_p2p(c, lvl, 4 * Nkv); /* the fp32 dK/dV accumulator */
    /* merges and accumulations, per step after the first (half the steps of
     * a rank update half the rows, and then concatenate the whole) */
    acc_t mf = {0, 0, 0}, mb = {0, 0, 0};
    double Ns = 0.75 * N;
    /* every step but the last concatenates K and V for the rotater, though
     * the all-gather rotater sends only the first (both passes) */
    vec(k, &mf, Nkv, 0, 2 * E * Nkv);
    vec(k, &mb, Nkv, 0, 2 * E * Nkv);
    if (k->ks == HPGO_KS_EAGER) {
        vec(k, &mf, Ns, 0, 6 * Ns);        /* out.to(fp32) */
        vec(k, &mf, Ns, 1, 12 * Ns);       /* out - block_out */
        vec(k, &mf, Ns, 1, 8 * Ns);        /* x sigmoid(lse difference) */
        vec(k, &mf, Ns, 1, 12 * Ns);       /* out - that */
        vec(k, &mf, 0.5 * N, 0, 4 * N);    /* torch.cat of the halves, every other step */
        vec(k, &mb, Ns, 1, 10 * Ns);       /* dQ += (fp32) */
        vec(k, &mb, Nkv, 1, 10 * Nkv);     /* dK, dV += (fp32) */
        vec(k, &mb, Nkv, 0, 8 * Nkv);      /* torch.cat of dK, dV for the permute */
    } else {
        vec(k, &mf, Ns, 4, 10 * Ns + 4 * N * 0.5);
        vec(k, &mb, Ns, 1, 10 * Ns);
        vec(k, &mb, Nkv, 1, 18 * Nkv);
    }
    fw->t += d.t + (cp - 1) * (o.t + mf.t);
    fw->flops += d.flops + (cp - 1) * o.flops;
    fw->n += d.n + (cp - 1) * (o.n + mf.n);
    bw->t += db.t + (cp - 1) * (ob.t + mb.t);
    bw->flops += db.flops + (cp - 1) * ob.flops;
    bw->n += db.n + (cp - 1) * (ob.n + mb.n);
    double step_b = ob.t + mb.t;
    *xf += ag > d.t ? ag - d.t : 0;
    *xb += (ag > db.t ? ag - db.t : 0) + (cp - 1) * (dkv > step_b ? dkv - step_b : 0) + dkv;
    *buf += torch_cp_buffers(E, N, Nkv, kv);
}

/* The attention core of a layer under context parallelism, forward and
 * backward compute into fw / bw, the exposed exchange into *xf / *xb, the
 * receive buffers into *buf.
 * p2p (Megatron-Core / TE AttnFuncWithCPAndKVP2P): the sequence in 2c
 * chunks, rank r holding chunks r and 2c - 1 - r, so each of the c ring
 * steps does the same block work (load balanced): step 0 the causal
 * diagonal on local K/V, steps 1 .. c-1 unmasked blocks on the K/V received
 * at the step before while the next are sent; kernels of s / c tokens;
 * forward = step 0 + sum max(step, send), backward = sum max(2.5 x step,
 * send of K/V and dK/dV) + the last dK/dV hop, exposed.
 * all_gather (Llama 3; torchtitan's default rotate; TE's
 * AttnFuncWithCPAndKVAllGather, not overlapped): K and V of the whole
 * sequence gathered before the attention, gathered again and their
 * gradients reduce-scattered in the backward.
 * a2a (Ulysses): all-to-alls of q, k, v before and of the output after a
 * full-sequence attention over heads / c (the backward mirrors them). */
static void cp_core(const hpgo_xformer_t *x, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                    const kctx_t *k, const xshape_t *s, double keys, double len, acc_t *fw,
                    acc_t *bw, double *xf, double *xb, double *buf)
{
    (void)x;
    double cp = s->c, E = s->E, t = s->t, T = s->T;
    if (p->cp_comm == HPGO_CP_P2P) {
        acc_t d = {0, 0, 0}, o = {0, 0, 0}, db = {0, 0, 0}, ob = {0, 0, 0};
        xshape_t st = *s; /* one step: the local queries against 1 / c of the keys */
        core_fwd(k, &d, &st, keys / cp, len / cp, 1);
        core_fwd(k, &o, &st, keys / cp, len / cp, 0);
        core_bwd(k, &db, &st, keys / cp, len / cp, 1);
        core_bwd(k, &ob, &st, keys / cp, len / cp, 0);
        double B = E * T * (s->kw + s->vw) / t; /* this rank's K and V */
        int32_t lvl = hpgo_cost_level_between(c, 0, (int64_t)(p->cp - 1) * p->tp);
        double C = hpgo_cost_p2p(c, lvl, B), C2 = hpgo_cost_p2p(c, lvl, 2 * B);
        double fcomp = d.t + (cp - 1) * o.t;
        double ftot = d.t + (cp - 1) * (o.t > C ? o.t : C);
        /* output and log-sum-exp correction after each step (fp32 out) */
        acc_t corr = {0, 0, 0};
        vec(k, &corr, T * s->o / t, 4, 3 * 4 * T * s->o / t);
        fcomp += (cp - 1) * corr.t, ftot += (cp - 1) * corr.t;
        double bcomp = db.t + (cp - 1) * ob.t;
        double btot = (db.t > C ? db.t : C) + (cp - 2) * (ob.t > C2 ? ob.t : C2) +
                      (ob.t > C ? ob.t : C) + C;
        fw->t += fcomp, fw->flops += d.flops + (cp - 1) * o.flops;
        fw->n += d.n + (cp - 1) * (o.n + 1);
        bw->t += bcomp, bw->flops += db.flops + (cp - 1) * ob.flops;
        bw->n += db.n + (cp - 1) * ob.n;
        *xf += ftot - fcomp;
        *xb += btot - bcomp;
        *buf += 4 * B; /* double-buffered K/V, and K/V with dK/dV in the backward */
        return;
    }
    if (p->cp_comm == HPGO_CP_TORCH_SDPA) {
        torch_cp_core(c, p, k, s, keys, len, fw, bw, xf, xb, buf);
        return;
    }
    acc_t f1 = {0, 0, 0}, b1 = {0, 0, 0};
    core_fwd(k, &f1, s, keys, len, 1);
    core_bwd(k, &b1, s, keys, len, 1);
    fw->t += f1.t, fw->flops += f1.flops, fw->n += f1.n;
    bw->t += b1.t, bw->flops += b1.flops, bw->n += b1.n;
    if (p->cp_comm == HPGO_CP_ALLGATHER) {
        double kv = E * T * cp * (s->kw + s->vw) / t;
        double ag = hpgo_cost_collective(c, HPGO_COLL_ALLGATHER, p->cp, p->tp, kv, HPGO_ALGO_AUTO);
        double rs = hpgo_cost_collective(c, HPGO_COLL_REDUCE_SCATTER, p->cp, p->tp, kv,
                                         HPGO_ALGO_AUTO);
        *xf += ag;
        *xb += ag + rs;
        *buf += 2 * kv; /* gathered K/V, and their gradients */
        return;
    }
    double qkv = E * T * (s->q + s->kw + s->vw) / t, out = E * T * s->o / t;
    double a2a = hpgo_cost_collective(c, HPGO_COLL_ALLTOALL, p->cp, p->tp, qkv, HPGO_ALGO_AUTO) +
                 hpgo_cost_collective(c, HPGO_COLL_ALLTOALL, p->cp, p->tp, out, HPGO_ALGO_AUTO);
    *xf += a2a;
    *xb += a2a;
    *buf += 2 * (qkv + out);
}

/* One layer of the given kind, priced on one rank. */
static void layer_cost(const hpgo_xformer_t *x, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                       const kctx_t *k, const xshape_t *s, int kind, lcost_t *o)
{
    memset(o, 0, sizeof *o);
    double T = s->T, tl = s->tl, h = s->h, E = s->E, X = E * T * h;
    double keys = attn_keys(x, s, kind, 1);
    /* the kernel's sequence: the window, or the whole sequence */
    double len = (kind & K_WINDOW) ? (double)x->window : s->s;
    int moe = (kind & K_MOE) != 0;
    kctx_t kq;
    if (k->tao && (moe || s->mla || s->pb)) {
        /* torchao's casts are priced per linear of a dense block (tao_*);
         * mixture-of-experts, latent-attention and parallel blocks keep the
         * per-GEMM quantization passes */
        kq = *k;
        kq.tao = 0;
        kq.quant = 1;
        k = &kq;
    }
    const kctx_t kb = k16(k), kw = kwgrad(k);
    acc_t core = {0, 0, 0}, cb = {0, 0, 0};
    double cp_f = 0, cp_b = 0;
    if (p->cp > 1) {
        cp_core(x, c, p, k, s, keys, len, &core, &cb, &cp_f, &cp_b, &o->buf);
    } else {
        core_fwd(k, &core, s, keys, len, 1);
        core_bwd(k, &cb, s, keys, len, 1);
    }
    double f_mlp = 0, b_mlp = 0; /* a MoE layer's expert-side compute, forward and backward */
    double nqkv = (s->q + s->kw + s->vw) / s->t, nq = T * s->q / s->t, nk = T * s->kw / s->t;
    double fN = (s->swiglu ? 2 : 1) * s->f / s->t;

    /* forward */
    norm_fwd(k, &o->fw, s, tl); /* norm 1 */
    if (s->pb) /* QKV and FC1 as one GEMM */
        mm(k, &o->fw, T, h, nqkv + fN);
    else
        attn_proj_fwd(k, &o->fw, s);
    if (x->qk_norm)
        vec(k, &o->fw, T * (s->q + s->kw) / s->t, 5, 2 * s->E * T * (s->q + s->kw) / s->t);
    if (s->rope)
        rope(k, &o->fw, s, nq, nk);
    o->fw.t += core.t, o->fw.flops += core.flops, o->fw.n += core.n;
    mm(k, &o->fw, T, s->o / s->t, h);
    if (!s->pb) {
        resid(k, &o->fw, s, tl, 0);
        norm_fwd(k, &o->fw, s, tl); /* norm 2 */
    }
    /* input gradient (reverse order) and weight gradient */
    resid(k, &o->bi, s, tl, 1);
    if (moe) {
        double n_tl = tl * s->ex;
        mm(&kb, &o->fw, tl, h, s->ex); /* router */
        vec(k, &o->fw, n_tl, 8, 2 * 4 * n_tl);
        double moved = s->rx * h, f0 = o->fw.t, b0 = o->bi.t;
        vec(k, &o->fw, moved, 1, 2 * E * moved); /* permute */
        experts_pass(k, &o->fw, s, 0);
        vec(k, &o->fw, moved, 2, 3 * E * moved); /* unpermute, weighted sum */
        if (s->fsh > 0)
            mlp_fwd(k, &o->fw, s, T, s->fsh, s->t);
        f_mlp = o->fw.t - f0;
        vec(k, &o->bi, moved, 2, 3 * E * moved);
        experts_pass(k, &o->bi, s, 1);
        vec(k, &o->bi, moved, 1, 2 * E * moved);
        mm(&kb, &o->bi, tl, s->ex, h);
        vec(k, &o->bi, n_tl, 8, 3 * 4 * n_tl);
        if (s->fsh > 0)
            mlp_bwd(k, &o->bi, s, T, s->fsh, s->t, 0);
        experts_pass(&kw, &o->bw, s, 2);
        mm(&kb, &o->bw, h, tl, s->ex);
        if (s->fsh > 0)
            mlp_bwd(&kw, &o->bw, s, T, s->fsh, s->t, 1);
        b_mlp = o->bi.t - b0 + o->bw.t;
    } else if (s->pb) { /* FC1 ran with QKV; its weight gradient runs with QKV's below */
        act_fwd(k, &o->fw, s, T * s->f / s->t);
        mm(k, &o->fw, T, s->f / s->t, h);
        mm(k, &o->bi, T, h, s->f / s->t);
        act_bwd(k, &o->bi, s, T * s->f / s->t);
        mm(&kw, &o->bw, s->f / s->t, T, h);
    } else {
        mlp_fwd(k, &o->fw, s, T, s->f, s->t);
        mlp_bwd(k, &o->bi, s, T, s->f, s->t, 0);
        mlp_bwd(&kw, &o->bw, s, T, s->f, s->t, 1);
    }
    resid(k, &o->fw, s, tl, 0);
    if (!s->pb) {
        norm_bwd(k, &o->bi, s, tl); /* norm 2 */
        resid(k, &o->bi, s, tl, 1);
    }
    mm(k, &o->bi, T, h, s->o / s->t);
    o->bi.t += cb.t, o->bi.flops += cb.flops, o->bi.n += cb.n;
    if (s->rope)
        rope(k, &o->bi, s, nq, nk);
    if (x->qk_norm)
        vec(k, &o->bi, T * (s->q + s->kw) / s->t, 8, 3 * s->E * T * (s->q + s->kw) / s->t);
    if (s->pb) {
        mm(k, &o->bi, T, nqkv + fN, h);
        mm(&kw, &o->bw, h, T, nqkv + fN);
    } else {
        attn_proj_bwd(k, &o->bi, s, 0);
        attn_proj_bwd(&kw, &o->bw, s, 1);
    }
    norm_bwd(k, &o->bi, s, tl); /* norm 1 */
    mm(&kw, &o->bw, s->o / s->t, T, h);
    if (k->tao) {
        /* torchao's casts, and the one-element all-reduce of each amax of a
         * tensor-parallel DTensor (its scale must be the whole tensor's) */
        double arf, arb, one = s->t > 1 ? tp_coll(c, HPGO_COLL_ALLREDUCE, s, 4) : 0;
        tao_fwd_casts(k, &o->fw, s, 0, &arf);
        tao_bwd_casts(k, &o->bi, s, &arb);
        if (k->rowwise && !k->gwhp)
            tao_row_rescale(k, &o->bw, &o->bi, s);
        o->tp_f += arf * one;
        o->tp_b += arb * one;
        o->lin_p = tao_params(s);
    }
    host_bound(&o->fw);
    host_bound(&o->bi);
    host_bound(&o->bw);

    /* tensor-parallel collectives: one column / row GEMM pair for the
     * attention and one for a tp-split MLP (a MoE layer's routed tokens stay
     * sequence-split: only its shared experts need one); a parallel block
     * gathers its input once and reduce-scatters the sum of both branches
     * once.  Latent attention's pair is priced without overlap. */
    if (s->t > 1) {
        double o_t = s->o / s->t;
        gdims_t af = {T, h, nqkv}, ar = {T, o_t, h}, ard = {T, h, o_t}, acd = {T, nqkv, h},
                acw = {h, T, nqkv};
        double fm = moe ? s->fsh : s->f, fNm = (s->swiglu ? 2 : 1) * fm / s->t;
        gdims_t mf = {T, h, fNm}, mr = {T, fm / s->t, h}, mrd = {T, h, fm / s->t},
                mcd = {T, fNm, h}, mcw = {h, T, fNm};
        /* the column GEMMs op-level checkpointing recomputes (op_sac_recompute) */
        gdims_t none = {0, 0, 0}, ark = {T, h, s->kw / s->t},
                mr3 = {T, h, s->swiglu ? fm / s->t : 0};
        if (s->pb) {
            gdims_t pf = {T, h, nqkv + fN}, pcd = {T, nqkv + fN, h}, pcw = {h, T, nqkv + fN};
            tp_pair(c, p, k, s, pf, mr, mrd, pcd, pcw, none, X, &o->tp_f, &o->tp_b);
        } else {
            hpgo_parplan_t base = *p;
            base.tp_overlap = HPGO_TPO_NONE;
            tp_pair(c, s->mla ? &base : p, k, s, af, ar, ard, acd, acw, ark, X, &o->tp_f,
                    &o->tp_b);
            if (!moe || s->fsh > 0)
                tp_pair(c, p, k, s, mf, mr, mrd, mcd, mcw, mr3, X, &o->tp_f, &o->tp_b);
        }
        if (p->tp_overlap == HPGO_TPO_TE && s->sp) /* userbuffers: ~10 of (s b / c, h) */
            o->buf += 10 * X;
    }
    o->tp_f += cp_f;
    o->tp_b += cp_b;
    if (moe) {
        /* token dispatch and combine: an all-to-all over the ep group each
         * (per rank: its routed token copies; the busiest rank's share),
         * with an all-gather / reduce-scatter over etp around the experts;
         * the backward runs their duals */
        int64_t gs, gst;
        hpgo_parplan_ep_group(p, &gs, &gst);
        double send = s->rx / s->etp * h * E;
        double a2a = 0, nodes = 1;
        int64_t fan[HPGO_CLUSTER_MAX_LEVELS];
        if (gs > 1 && hpgo_group_fanout(c, gs, gst, fan, NULL) == HPGO_OK)
            for (int32_t l = 1; l < c->n_levels; l++)
                nodes *= (double)fan[l];
        if (p->dispatcher == HPGO_DISPATCH_DEDUP && nodes > 1) /* inside a node: the same */
            a2a = hpgo_cost_dispatch_dedup(c, gs, gst, send, s->k, nodes_touched(x, nodes));
        else if (gs > 1)
            a2a = hpgo_cost_collective(c, HPGO_COLL_ALLTOALL, gs, gst, send, HPGO_ALGO_AUTO);
        double eg = 0;
        if (s->etp > 1)
            eg = hpgo_cost_collective(c, HPGO_COLL_ALLGATHER, (int64_t)s->etp, 1, s->rx * h * E, HPGO_ALGO_AUTO) +
                 hpgo_cost_collective(c, HPGO_COLL_REDUCE_SCATTER, (int64_t)s->etp, 1, s->rx * h * E, HPGO_ALGO_AUTO);
        o->ep_f = o->ep_b = 2 * a2a + eg;
        if (p->overlap_ep) {
            /* Megatron's combined 1F1B (and DualPipe): in the steady state
             * the forward of one micro-batch runs beside the backward of
             * another, each communication phase of one next to a compute
             * phase of the other -- attention and router beside the
             * backward combine, the dispatch beside the experts' backward,
             * the experts beside the backward dispatch, the combine beside
             * the attention's backward; a pair takes the longer of the two,
             * what exceeds the compute is exposed */
            double cf = o->ep_f / 2, cbk = o->ep_b / 2;
            double comp = o->fw.t + o->bi.t + o->bw.t;
            double fa = o->fw.t - f_mlp, ba = o->bi.t + o->bw.t - b_mlp;
            /* while a communication kernel runs it holds SMs the compute
             * beside it lacks (DeepEP 20, Megatron's default and DeepSeek-V3's
             * report; NCCL's all-to-all 16 on a DGX H100): compute x beside
             * communication y takes y + max(0, x - y / slowdown) */
            double sms = (double)c->gpu.sms, held = p->dispatcher == HPGO_DISPATCH_DEDUP ? 20 : 16;
            double sl = sms > 2 * held ? sms / (sms - held) : 1;
            double paired = pair_time(fa, cbk, sl) + pair_time(b_mlp, cf, sl) +
                            pair_time(f_mlp, cbk, sl) + pair_time(ba, cf, sl);
            double exposed = paired > comp ? paired - comp : 0;
            /* ... of which the schedule realises a share (the plan's;
             * Megatron's measured HPGO_EP_OVERLAP_MEGATRON): the rest
             * stays exposed */
            double alone = 2 * (cf + cbk);
            if (exposed < alone)
                exposed = alone - p->overlap_share * (alone - exposed);
            o->ep_f = o->ep_b = cf + cbk > 0 ? exposed / 2 : 0;
        }
        if (gs > 1) /* the permuted copies sent, and the expert outputs received back */
            o->buf += 2 * send;
    }
    if (k->dtype == HPGO_DT_FP8 && !k->tao) {
        /* Transformer Engine's per-GEMM scaling state: an amax history, a
         * scale and its inverse (fp32) for the input, the weight and the
         * output gradient of every fp8 GEMM */
        double gemms = (s->mla ? 4 : 1) + 1;
        if (moe)
            gemms += (s->fsh > 0 ? 2 : 0) + 2 * s->ex / s->ep;
        else
            gemms += 2;
        o->fp8_state = gemms * 3 * (HPGO_FP8_AMAX_HISTORY + 2) * 4;
    }
    if (s->rc == HPGO_RC_FULL) {
        o->rc_t = o->fw.t + o->tp_f + o->ep_f, o->rc_fl = o->fw.flops;
        if (torch_checkpoint(s) && !moe && !s->pb) {
            /* PyTorch's non-reentrant checkpoint stops recomputing once
             * every tensor the backward saved is back (early stop, on by
             * default; under torch.compile the partitioner leaves out the
             * same ops): no backward reads the MLP's last GEMM's output or
             * the residual sum after it, so neither runs again (measured:
             * 6 of a Llama block's 7 forward GEMMs run again,
             * profiles/h100-sxm5-float8-steps.json).  Its tensor-parallel
             * collective stays priced. */
            acc_t last = {0, 0, 0};
            mm(k, &last, s->T, s->f / s->t, s->h);
            resid(k, &last, s, tl, 0);
            o->rc_t -= last.t, o->rc_fl -= last.flops;
        }
    } else if (s->rc == HPGO_RC_OP) {
        acc_t r = {0, 0, 0};
        op_sac_recompute(k, &r, s);
        o->rc_t = r.t, o->rc_fl = r.flops;
    } else if (s->rc == HPGO_RC_SELECTIVE && !s->flash) {
        o->rc_t = core.t, o->rc_fl = core.flops;
    } else if (s->rc == HPGO_RC_SELECTIVE) {
        /* the modules of layer_act: two norms, the routed experts'
         * activation, the latent attention's norms and up-projections */
        acc_t r = {0, 0, 0};
        vec(k, &r, 2 * tl * h, 5, 4 * E * tl * h);
        if (moe)
            vec(k, &r, s->rx * s->fe / s->etp, 8, (s->swiglu ? 3 : 2) * E * s->rx * s->fe / s->etp);
        if (s->mla) {
            vec(k, &r, T * (s->ql + s->kl), 5, 2 * E * T * (s->ql + s->kl));
            mm(k, &r, T, s->ql, s->q / s->t);
            mm(k, &r, T, s->kl, s->a * (s->qkd - s->dr + s->vdh) / s->t);
        }
        o->rc_t = r.t, o->rc_fl = r.flops;
    }
    layer_act(s, kind, &o->act, &o->act_w);
    if (k->tao && !k->fp8ag && !k->rowwise &&
        (s->rc == HPGO_RC_NONE || s->rc == HPGO_RC_SELECTIVE)) {
        /* _scaled_mm's autograd function saves each weight's fp8 cast until
         * the block's backward; a checkpointed block recomputes the casts
         * instead.  Under fp8_all_gather the saved weight is FSDP2's
         * gathered fp8 parameter itself (fsdp_post_all_gather wraps the
         * all-gather output; resharding frees its storage and the backward's
         * all-gather refills it): no copy beyond the gather buffers */
        o->act += o->lin_p;
        o->act_w += o->lin_p;
    }
    if (s->rc == HPGO_RC_FULL || s->rc == HPGO_RC_OP) {
        /* a block's backward works on what it recomputed beside what it stored */
        xshape_t s2 = *s;
        double w2;
        s2.rc = HPGO_RC_NONE;
        layer_act(&s2, kind, &o->full_act, &w2);
        if (s->rc == HPGO_RC_OP)
            o->full_act = o->full_act > o->act ? o->full_act - o->act : 0;
    }
    o->lp = attn_params(x, s);
    if (moe) {
        double all, routed;
        moe_params(x, s, &all, &routed);
        o->lp += all;
        o->ep_p = routed;
    } else {
        o->lp += dense_mlp_params(x, s, s->f);
    }
    o->mfl = layer_model_flops(x, s, kind) * T / s->t;
}

/* Everything a transformer stage is made of, for one micro-batch on one
 * tp rank: each kind of layer, and the edges' (embedding, head, MTP) extras. */
typedef struct xpieces {
    xshape_t s;
    double X;                       /* bytes of one activation tensor (s b h) */
    lcost_t lk[N_KINDS];
    lcost_t lk_store[N_KINDS];      /* the same without recomputation (recompute_layers > 0) */
    int has[N_KINDS];
    acc_t ef, eb, hf, hb, hw;       /* embedding forward / backward, head forward / B / W */
    double emb_tp_f, emb_tp_b, head_tp_f, head_tp_b, emb_p, head_p;
    lcost_t mtp;                    /* one multi-token-prediction module (x->mtp of them) */
} xpieces_t;

static int xformer_pieces(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                          xpieces_t *x_out, hpgo_err_t *err)
{
    const hpgo_xformer_t *x = &w->x;
    xshape_t s;
    shape(x, p, w->precision, &s);
    int dt = (int)dtype_of(w->precision);
    int f8 = dt == HPGO_DT_FP8, tao = f8 && p->kernels != HPGO_KS_TE;
    kctx_t k = {&c->gpu, dt, f8 ? HPGO_DT_BF16 : dt, s.E, f8 && !tao, tao, p->fp8_all_gather != 0,
                tao && p->fp8_recipe != HPGO_F8R_TENSORWISE,
                tao && p->fp8_recipe == HPGO_F8R_ROWWISE_GW_HP, s.ks,
                p->attention == HPGO_ATT_FLASH2 || p->kernels == HPGO_KS_COMPILE_BLOCKS ||
                        p->kernels == HPGO_KS_COMPILE_FA2
                    ? HPGO_ATT_FLASH2
                    : p->attention};
    const kctx_t kb = k16(&k);
    if (c->gpu.peak[k.dtype] <= 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "the %s GPU has no %s rate",
                            c->gpu.name, w->precision == HPGO_PREC_FP8 ? "fp8" : "fp32");
    if (x->heads % p->tp != 0 || (x->kv_heads % p->tp != 0 && p->tp % x->kv_heads != 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp=%d must divide the %lld heads (and divide or be a multiple of "
                            "the %lld kv heads)",
                            (int)p->tp, (long long)x->heads, (long long)x->kv_heads);
    int any_dense = x->experts == 0 || x->dense_first > 0 || x->moe_every > 1;
    if (any_dense && x->ffn % p->tp != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "tp=%d must divide ffn=%lld", (int)p->tp,
                            (long long)x->ffn);
    if (p->cp > 1 && x->seq % (2 * p->cp) != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "context parallelism splits the sequence in 2 x cp chunks: seq=%lld "
                            "is not a multiple of %d",
                            (long long)x->seq, 2 * (int)p->cp);
    if (p->cp > 1 && p->cp_comm == HPGO_CP_A2A && (x->heads / p->tp) % p->cp != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "cp_comm a2a (Ulysses) splits the heads: cp=%d must divide the %lld "
                            "heads per tp rank",
                            (int)p->cp, (long long)(x->heads / p->tp));
    if (p->fp8_all_gather && !f8)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "fp8_all_gather (torchao's float8 all-gather) needs precision fp8");
    if (p->recompute == HPGO_RC_OP &&
        (x->experts > 0 || x->mla || x->parallel_block || !x->flash))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "recompute selective-op (torchtitan's op-level checkpointing) is "
                            "priced for dense blocks with fused attention: no experts, latent "
                            "attention or parallel block, flash on");
    if (s.sp && fmod(s.T, s.t) != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "sequence parallelism needs micro_batch x seq / cp divisible by tp");
    if (x->experts > 0) {
        int32_t etp = hpgo_parplan_etp(p);
        if (p->tp > 1 && !s.sp)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "a mixture-of-experts model with tp=%d needs sequence_parallel "
                                "(as Megatron-Core: routed tokens stay sequence-split)",
                                (int)p->tp);
        if (x->experts % p->ep != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "ep=%d must divide the %lld experts",
                                (int)p->ep, (long long)x->experts);
        if (x->expert_ffn % etp != 0 || (x->shared_experts > 0 && x->shared_ffn * x->shared_experts % p->tp != 0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "etp=%d must divide expert_ffn=%lld (and tp=%d the shared experts' ffn)",
                                (int)etp, (long long)x->expert_ffn, (int)p->tp);
        if (etp > hpgo_cluster_unit(c, 0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "etp=%d is larger than a node: expert tensor parallelism stays inside a node",
                                (int)etp);
    } else if (p->ep != 1 || (p->etp != 0 && p->etp != p->tp)) {
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "ep and etp need a mixture-of-experts model (this one is dense): "
                            "use ep=1");
    }
    double E = s.E, X = E * s.T * s.h;
    int64_t L = x->layers;
    memset(x_out, 0, sizeof *x_out);
    int uniform = x->experts == 0 && (x->window == 0 || x->window >= x->seq);
    for (int64_t i = 0; i < (uniform ? 1 : L); i++) {
        int kd = layer_kind(x, i);
        if (!x_out->has[kd]) {
            x_out->has[kd] = 1;
            layer_cost(x, c, p, &k, &s, kd, &x_out->lk[kd]);
        }
        /* all layers of a kind are alike, and a model has at most a few kinds */
        if (x_out->has[0] + x_out->has[1] + x_out->has[2] + x_out->has[3] == N_KINDS)
            break;
    }
    if (p->recompute_layers > 0 && p->recompute == HPGO_RC_FULL) {
        xshape_t s2 = s;
        s2.rc = HPGO_RC_NONE;
        for (int kd = 0; kd < N_KINDS; kd++)
            if (x_out->has[kd])
                layer_cost(x, c, p, &k, &s2, kd, &x_out->lk_store[kd]);
    }

    /* edges: embedding on model stage 0, final norm + logits + loss on the last */
    acc_t ef = {0, 0, 0}, eb = {0, 0, 0}, hf = {0, 0, 0}, hb = {0, 0, 0}, hw = {0, 0, 0};
    vec(&k, &ef, s.tl * s.h, 1, (E + (s.dropout ? 1 + E : 0)) * s.tl * s.h + 8 * s.T);
    vec(&k, &eb, s.tl * s.h, 1, 3 * E * s.tl * s.h);
    double emb_tp_f = s.t > 1 ? (s.sp ? tp_coll(c, HPGO_COLL_REDUCE_SCATTER, &s, X)
                                      : tp_coll(c, HPGO_COLL_ALLREDUCE, &s, X))
                              : 0;
    double emb_tp_b = s.sp ? tp_coll(c, HPGO_COLL_ALLGATHER, &s, X) : 0;
    /* the final norm: eager under compile-blocks (outside the compiled
     * blocks), as torchtitan's fp32 module under eager-unfused-norm */
    xshape_t sn = s;
    sn.fp32_norm = s.fp32_norm || p->kernels == HPGO_KS_COMPILE_BLOCKS;
    if (sn.fp32_norm)
        norm_unfused_fwd(&k, &hf, &sn, s.tl);
    else
        vec(&k, &hf, s.tl * s.h, 5, 2 * E * s.tl * s.h);
    mm(&kb, &hf, s.T, s.h, s.V / s.t);
    double lg = s.T * s.V / s.t; /* logits on the rank */
    if (p->kernels == HPGO_KS_TE && p->cross_entropy == HPGO_CE_UNFUSED) {
        /* Megatron's vocab_parallel_cross_entropy without
         * --cross-entropy-loss-fusion (megatron/core/tensor_parallel/
         * cross_entropy.py at core_r0.8.0, the default of Megatron-LM's
         * command line then and now), eager PyTorch on the [T, V / t] logits:
         * the fp32 copy (2 read + 4 written), max (4), the in-place
         * subtraction of the max (4 + 4), exp in place (4 + 4), the sum (4),
         * the in-place division into the saved softmax (4 + 4): 38 B a logit;
         * backward: an in-place multiplication by the loss gradient (4 + 4)
         * and the cast of the fp32 gradient back to the bf16 logits (4 + 2):
         * 14 B.  The target's masks, gathers and index updates are small
         * kernels on the T tokens (14 forward, 5 backward, by the code). */
        vec(&k, &hf, lg, 0, 6 * lg);
        vec(&k, &hf, lg, 1, 4 * lg);
        vec(&k, &hf, lg, 1, 8 * lg);
        vec(&k, &hf, lg, 1, 8 * lg);
        vec(&k, &hf, lg, 1, 4 * lg);
        vec(&k, &hf, lg, 1, 8 * lg);
        for (int i = 0; i < 14; i++)
            vec(&k, &hf, s.T, 1, 8 * s.T);
        vec(&k, &hb, lg, 1, 8 * lg);
        vec(&k, &hb, lg, 0, 6 * lg);
        for (int i = 0; i < 5; i++)
            vec(&k, &hb, s.T, 1, 8 * s.T);
    } else if (p->kernels == HPGO_KS_TE) {
        /* Transformer Engine's fused cross-entropy (triton/cross_entropy.py):
         * an online-softmax pass, a pass writing the gradient into the bf16
         * logits, an in-place scale in the backward: ~10 B per logit */
        vec(&k, &hf, lg, 5, 2 * lg);
        vec(&k, &hf, lg, 5, 4 * lg);
        vec(&k, &hb, lg, 1, 4 * lg);
    } else if (p->kernels == HPGO_KS_COMPILE || p->kernels == HPGO_KS_COMPILE_FA2 ||
               p->cross_entropy == HPGO_CE_FUSED) {
        /* torchtitan's pred.float() + cross_entropy compiled: the cast fused
         * into one reduction pass (2 B read) keeping the log-sum-exp; the
         * partitioner recomputes the softmax in the backward from the bf16
         * logits (2 B read, 2 B gradient written).  flash-attn's
         * CrossEntropyLoss (ops/triton/cross_entropy.py, v2.4: one forward
         * kernel reading the logits and saving the log-sum-exp, one backward
         * kernel writing their gradient) moves the same bytes. */
        vec(&k, &hf, lg, 5, 2 * lg);
        vec(&k, &hb, lg, 5, 4 * lg);
    } else {
        /* eager: the fp32 copy (2 + 4), log-softmax (4 + 4 read, 4 written),
         * nll; backward: nll's fp32 gradient (4), log-softmax backward
         * (4 + 4 + 4), the cast back (4 + 2) */
        vec(&k, &hf, lg, 0, 6 * lg);
        vec(&k, &hf, lg, 5, 12 * lg);
        vec(&k, &hf, s.T / s.t, 1, 8 * s.T / s.t);
        vec(&k, &hb, lg, 0, 4 * lg);
        vec(&k, &hb, lg, 3, 12 * lg);
        vec(&k, &hb, lg, 0, 6 * lg);
    }
    mm(&kb, &hb, s.T, s.V / s.t, s.h);
    if (sn.fp32_norm)
        norm_unfused_bwd(&k, &hb, &sn, s.tl);
    else
        vec(&k, &hb, s.tl * s.h, 8, 3 * E * s.tl * s.h);
    mm(&kb, &hw, s.h, s.T, s.V / s.t);
    host_bound(&ef), host_bound(&eb), host_bound(&hf), host_bound(&hb), host_bound(&hw);
    double head_tp_f = s.sp ? tp_coll(c, HPGO_COLL_ALLGATHER, &s, X) : 0;
    head_tp_f += 3 * tp_coll(c, HPGO_COLL_ALLREDUCE, &s, 4 * s.T); /* max, sum, target logit */
    double head_tp_b = s.sp ? tp_coll(c, HPGO_COLL_REDUCE_SCATTER, &s, X)
                            : (s.t > 1 ? tp_coll(c, HPGO_COLL_ALLREDUCE, &s, X) : 0);
    double emb_p = s.V * s.h / s.t + (x->learned_pos ? s.s * s.h : 0);
    double head_p = (x->layernorm ? 2 : 1) * s.h;
    int K = p->pp * p->vstages;
    if (!x->tied || K > 1)
        head_p += s.V * s.h / s.t; /* untied, or the tied copy Megatron keeps on the last stage */

    if (x->mtp > 0) {
        /* a multi-token-prediction module (DeepSeek-V3, Megatron's MTP on the
         * last stage): two norms, a projection of [hidden; embedding] (2h ->
         * h), one layer like the model's last, and the shared head again */
        lcost_t one;
        layer_cost(x, c, p, &k, &s, layer_kind(x, L - 1), &one);
        mm(&kb, &one.fw, s.T, 2 * s.h, s.h / s.t);
        vec(&k, &one.fw, 2 * s.tl * s.h, 5, 4 * E * s.tl * s.h);
        one.fw.t += ef.t + hf.t, one.fw.flops += hf.flops;
        mm(&kb, &one.bi, s.T, s.h / s.t, 2 * s.h);
        one.bi.t += eb.t + hb.t, one.bi.flops += hb.flops;
        mm(&kb, &one.bw, 2 * s.h, s.T, s.h / s.t);
        one.bw.t += hw.t, one.bw.flops += hw.flops;
        one.tp_f += head_tp_f + emb_tp_f;
        one.tp_b += head_tp_b + emb_tp_b;
        one.act += s.T * (2 * E * s.h / (s.sp ? s.t : 1) + s.ge * 2 * s.h);
        one.act_w += s.T * s.ge * 2 * s.h;
        one.lp += 2 * s.h * s.h / s.t + 3 * s.h + (K > 1 ? s.V * s.h / s.t : 0); /* + embedding copy */
        one.mfl += 3 * (2 * 2 * s.h * s.h + 2 * s.h * s.V) * s.T / s.t;
        x_out->mtp = one;
    }

    x_out->s = s;
    x_out->X = X;
    x_out->ef = ef, x_out->eb = eb, x_out->hf = hf, x_out->hb = hb, x_out->hw = hw;
    x_out->emb_tp_f = emb_tp_f, x_out->emb_tp_b = emb_tp_b;
    x_out->head_tp_f = head_tp_f, x_out->head_tp_b = head_tp_b;
    x_out->emb_p = emb_p, x_out->head_p = head_p;
    return HPGO_OK;
}

/* Seconds of one layer's passes for one micro-batch (forward, input and
 * weight gradients, with communication and recomputation). */
static double lcost_seconds(const lcost_t *l)
{
    return l->fw.t + l->tp_f + l->ep_f + l->bi.t + l->tp_b + l->ep_b + l->rc_t + l->bw.t;
}

/* Add n layers of one kind to a stage. */
static void add_layers(hpgo_stage_cost_t *o, const lcost_t *l, double n)
{
    if (n <= 0)
        return;
    o->f += n * (l->fw.t + l->tp_f + l->ep_f);
    o->b += n * (l->bi.t + l->tp_b + l->ep_b + l->rc_t);
    o->w += n * l->bw.t;
    o->tp_f += n * l->tp_f;
    o->tp_b += n * l->tp_b;
    o->ep_f += n * l->ep_f;
    o->ep_b += n * l->ep_b;
    o->recompute += n * l->rc_t;
    o->act_layers += n * l->act;
    o->act += n * l->act;
    o->act_w += n * l->act_w;
    if (l->full_act + l->buf > o->transient)
        o->transient = l->full_act + l->buf;
    o->fp8_state += n * l->fp8_state;
    o->fp8_linear_params += n * l->lin_p;
    o->params += n * l->lp;
    o->expert_params += n * l->ep_p;
    o->model_flops += n * l->mfl;
    o->hw_flops += n * (l->fw.flops + l->bi.flops + l->bw.flops + l->rc_fl);
}

/* Whether two plans price a transformer's layers and edges alike (the
 * fields xformer_pieces reads). */
static int same_pieces(const hpgo_parplan_t *a, const hpgo_parplan_t *b)
{
    return a->tp == b->tp && a->cp == b->cp && a->dp == b->dp && a->ep == b->ep &&
           a->etp == b->etp && a->ep_outer == b->ep_outer && a->overlap_ep == b->overlap_ep &&
           (!a->overlap_ep || a->overlap_share == b->overlap_share) &&
           a->dispatcher == b->dispatcher &&
           a->micro_batch == b->micro_batch && a->sequence_parallel == b->sequence_parallel &&
           a->kernels == b->kernels && a->tp_overlap == b->tp_overlap && a->cp_comm == b->cp_comm &&
           a->recompute_layers == b->recompute_layers &&
           a->recompute_method == b->recompute_method &&
           a->recompute == b->recompute && a->attention == b->attention &&
           a->optimizer_impl == b->optimizer_impl && a->cross_entropy == b->cross_entropy &&
           a->fp8_all_gather == b->fp8_all_gather && a->fp8_recipe == b->fp8_recipe &&
           (a->pp * a->vstages > 1) == (b->pp * b->vstages > 1);
}

/* The pieces of the plan: the cache's when it holds them, else priced (and
 * kept in the cache when there is one). */
static int cached_pieces(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                         hpgo_work_cache_t *cache, xpieces_t *local, const xpieces_t **out,
                         hpgo_err_t *err)
{
    if (cache && cache->valid && same_pieces(&cache->key, p)) {
        *out = cache->pieces;
        return HPGO_OK;
    }
    xpieces_t *xp = local;
    if (cache) {
        if (!cache->pieces && !(cache->pieces = malloc(sizeof(xpieces_t))))
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory");
        xp = cache->pieces;
        cache->valid = 0;
    }
    int rc = xformer_pieces(w, c, p, xp, err);
    if (rc != HPGO_OK)
        return rc;
    if (cache) {
        cache->key = *p;
        cache->valid = 1;
    }
    *out = xp;
    return HPGO_OK;
}

void hpgo_work_cache_free(hpgo_work_cache_t *cache)
{
    if (!cache)
        return;
    free(cache->pieces);
    cache->pieces = NULL;
    cache->valid = 0;
}

/* Peak bytes per logit on the rank of torchtitan's eager loss,
 * cross_entropy(pred.float(), labels) on the bf16 logits (train.py at
 * commit 9dec370; the loss was compiled only from 2025).  One rank (ATen's
 * log_softmax / nll_loss): the forward holds the bf16 logits, their fp32
 * copy and the fp32 log-softmax (10 B); the training loop deletes the
 * logits before the backward, whose log-softmax backward then reads the
 * saved log-softmax and the fp32 gradient nll_loss_backward wrote and
 * writes a third fp32 tensor (12 B, the peak).  Under tensor parallelism
 * the loss is vocabulary-parallel (torch/distributed/tensor/parallel/
 * loss.py, torchtitan's default loss_parallel): its _log_softmax keeps the
 * fp32 copy, the shifted logits and exp() (or the result) beside the bf16
 * logits (14 B); _nll_loss_and_log_softmax_backward holds the saved
 * log-softmax, the zeroed grad_input, exp(x) and their sum (16 B, the
 * peak). */
static double eager_loss_bytes(double tp)
{
    return tp > 1 ? 16 : 12;
}

/* Bytes per logit the caching allocator reserves beyond eager_loss_bytes
 * (c10/cuda/CUDACachingAllocator.cpp: a request takes the smallest cached
 * free block that holds it, adjacent free blocks merge, and a request no
 * free block holds maps new memory; so does the stock allocator with a new
 * segment).  Without pipelining the training loop frees the 16-bit logits
 * (`del pred`, train.py) and cross_entropy its fp32 copy before the
 * backward: on one rank they leave 6 B a logit free beside the saved fp32
 * log-softmax; nll_loss_backward's zeroed fp32 gradient takes 4 of them and
 * the log-softmax backward's fp32 result (4 B) finds only 2, so it is mapped
 * anew.  Under loss parallelism (torch/distributed/tensor/parallel/loss.py)
 * the 16-bit logits, the fp32 copy and the shifted logits leave 10 B (exp()
 * is freed before the result takes its block); the fused backward's zeroed
 * grad_input and exp(x) take 8 and grad_input + exp(x) finds only 2.  Either
 * way the reserved peak is 2 B a logit above the allocated one.  Not so under
 * pipelining (the stage keeps the logits, and what is freed is used up), or
 * when the forward left a free block of 4 B a logit (the largest layer
 * working set, `work`, freed and cached, is at least `fp32_logits` bytes). */
static double eager_loss_hole(int pipelined, double work, double fp32_logits)
{
    return pipelined || work >= fp32_logits ? 0 : 2;
}

/* Bytes per element of its input that torchtitan's final RMSNorm saves for
 * the backward when it runs eager (models/norms.py at 9dec370, outside the
 * compiled blocks: x.float() * rsqrt(mean(x^2) + eps), cast back, times the
 * weight): the fp32 input (read by pow's and mul's backward), the 16-bit
 * normalized value (mul by the weight) and the 16-bit output (the output
 * layer's input). */
static double eager_norm_bytes(void)
{
    return 4 + 2 + 2;
}

/* Bytes FSDP2 keeps gathered through the whole step for a model stage whose
 * embedding / output-layer parameters are emb_params: the module fully_shard
 * wraps last (torchtitan's apply_fsdp: each block, then the whole model part,
 * which owns the embedding, the final norm and the output layer) is the root,
 * and the root is not resharded after forward "since for training, the
 * parameters would be freed and all-gathered immediately" (FSDPState.
 * _lazy_init sets its group's post_forward_mesh_info to None): its 16-bit
 * unsharded parameters live from the root's forward to its post-backward.
 * Only where FSDP2 shards (the torch.compile kernel sets, as memory.c's
 * FSDP2 states; a shard group above 1) and reshards after forward (without,
 * memory.c counts every parameter gathered). */
/* torch.distributed.pipelining's receive buffers (stage.py, PipelineStage
 * _prepare_forward_infra and _create_grad_recv_info): at its first step a
 * stage allocates one buffer per micro-batch for its input (all but the
 * first stage) and one for the gradient of its output (all but the last),
 * `x` bytes each, and keeps them.  The input buffer is the tensor the
 * stage's first layer stores for its backward, so a micro-batch in flight
 * adds no second copy of it (taken out of the stage's stored bytes).  The
 * outputs kept in output_chunks and the inputs' gradients, which grow
 * during the step, are counted by the engine as they appear. */
static void torch_stage_buffers(hpgo_stage_cost_t *o, double x, int has_in, int has_out,
                                double m)
{
    o->held += m * x * ((has_in ? 1 : 0) + (has_out ? 1 : 0));
    if (has_in && o->act >= x)
        o->act -= x;
}

static double fsdp2_root_bytes(const hpgo_parplan_t *p, int32_t precision, double emb_params)
{
    /* also on a shard group of one: FSDP2 casts its fp32 shard into the
     * 16-bit unsharded parameter all the same (tests/test_torch_memory.py) */
    int fsdp2 = p->zero >= 3 && precision != HPGO_PREC_FP32 && p->kernels != HPGO_KS_TE;
    if (!fsdp2 || !p->reshard_after_forward)
        return 0;
    return 2 * emb_params;
}

static int xformer_costs(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                         const int32_t *split, hpgo_stage_cost_t *out, hpgo_work_cache_t *cache,
                         hpgo_err_t *err)
{
    xpieces_t local;
    const xpieces_t *xp;
    int rc = cached_pieces(w, c, p, cache, &local, &xp, err);
    if (rc != HPGO_OK)
        return rc;
    const xshape_t s = xp->s;
    const double X = xp->X;
    int K = p->pp * p->vstages;
    for (int kk = 0; kk < K; kk++) {
        hpgo_stage_cost_t *o = &out[kk];
        memset(o, 0, sizeof *o);
        o->first_layer = split[kk];
        o->n_layers = split[kk + 1] - split[kk];
        double count[N_KINDS] = {0, 0, 0, 0};
        if (xp->has[0] && !xp->has[1] && !xp->has[2] && !xp->has[3])
            count[0] = o->n_layers; /* a dense model: one kind */
        else
            for (int32_t i = split[kk]; i < split[kk + 1]; i++)
                count[layer_kind(&w->x, i)]++;
        int32_t nrc = p->recompute == HPGO_RC_FULL ? p->recompute_layers : 0;
        if (nrc > 0 && p->recompute_method == HPGO_RCM_BLOCK) {
            /* Megatron's block method: the first nrc layers of the model
             * stage recompute, the others store everything */
            double rcount[N_KINDS] = {0, 0, 0, 0};
            int32_t end = split[kk] + (nrc < o->n_layers ? nrc : o->n_layers);
            for (int32_t i = split[kk]; i < end; i++)
                rcount[layer_kind(&w->x, i)]++;
            for (int kd = 0; kd < N_KINDS; kd++) {
                add_layers(o, &xp->lk[kd], rcount[kd]);
                add_layers(o, &xp->lk_store[kd], count[kd] - rcount[kd]);
            }
        } else {
            for (int kd = 0; kd < N_KINDS; kd++)
                add_layers(o, &xp->lk[kd], count[kd]);
        }
        if (nrc > 1 && p->recompute_method == HPGO_RCM_UNIFORM && o->n_layers > 0) {
            /* uniform: the input of each group of nrc layers is stored and
             * the group recomputed at once, its nrc layers' activations
             * live together during its backward */
            int32_t g = nrc < o->n_layers ? nrc : o->n_layers;
            double groups = ceil((double)o->n_layers / nrc), r = groups / o->n_layers;
            o->act *= r, o->act_w *= r, o->act_layers *= r;
            for (int kd = 0; kd < N_KINDS; kd++)
                if (count[kd] > 0 && g * xp->lk[kd].full_act + xp->lk[kd].buf > o->transient)
                    o->transient = g * xp->lk[kd].full_act + xp->lk[kd].buf;
        }
        o->send_bytes = kk + 1 < K ? X / s.t : 0;
        o->regather = (kk > 0 && !s.sp) ? tp_coll(c, HPGO_COLL_ALLGATHER, &s, X) : 0;
        if (kk == 0) {
            o->f += xp->ef.t + xp->emb_tp_f;
            o->b += xp->eb.t + xp->emb_tp_b;
            o->tp_f += xp->emb_tp_f;
            o->tp_b += xp->emb_tp_b;
            o->act += (8 * s.T + (s.dropout ? s.T * s.h : 0)) / (s.sp ? s.t : 1);
            o->params += xp->emb_p;
            o->emb_params += xp->emb_p;
        }
        if (kk == K - 1) {
            o->f += xp->hf.t + xp->head_tp_f;
            o->b += xp->hb.t + xp->head_tp_b;
            o->w += xp->hw.t;
            o->tp_f += xp->head_tp_f;
            o->tp_b += xp->head_tp_b;
            o->params += xp->head_p;
            o->emb_params += xp->head_p;
            /* final norm + the logits: fp32 (Megatron); the bf16 logits and
             * their gradient (torch.compile); eager_loss_bytes (eager, and the
             * uncompiled loss of compile-blocks) -- spec stack-mechanisms 2.3 */
            int eager_loss = p->kernels == HPGO_KS_EAGER || p->kernels == HPGO_KS_COMPILE_BLOCKS ||
                             p->kernels == HPGO_KS_EAGER_UNFUSED_NORM;
            double per_logit = eager_loss ? eager_loss_bytes(s.t) : 4;
            double norm = 4; /* bytes the final norm saves per element of its input */
            if (p->cross_entropy == HPGO_CE_UNFUSED)
                /* the bf16 logits beside their fp32 copy (forward); the saved
                 * fp32 softmax beside the bf16 gradient (backward) */
                per_logit = 6;
            else if (eager_loss) {
                if (p->cross_entropy == HPGO_CE_FUSED)
                    /* a fused loss kernel holds the 16-bit logits and, in the
                     * backward, their gradient */
                    per_logit = 4;
                else if (!(hpgo_alloc_frag(c, p->kernels) > 0))
                    /* the hole is part of the reserve where one is priced */
                    per_logit += eager_loss_hole(K > 1, o->transient, 4 * s.T * s.V / s.t);
                norm = eager_norm_bytes();
            }
            double head = (norm * s.T * s.h + per_logit * s.T * s.V) / s.t;
            /* without pipelining the head's forward and backward run back to
             * back (torchtitan's train.py: model(), loss_fn, del pred,
             * loss.backward(); Megatron's forward_backward_no_pipelining): its
             * tensors are freed before the last layer's backward starts and
             * allocated after the last layer's forward ended, so the head's
             * working set and a layer's are never held together.  Under
             * pipelining another chunk's passes can run between them
             * (interleaving, GPipe), and both are counted. */
            o->layer_transient = o->transient;
            o->head_transient = head;
            if (K == 1)
                o->transient = head > o->transient ? head : o->transient;
            else
                o->transient += head;
            if (K > 1 && p->kernels != HPGO_KS_TE)
                /* torch.distributed.pipelining keeps every micro-batch's
                 * output of the last stage, the 16-bit logits, to merge them
                 * when the step ends (PipelineStage.forward_one_chunk appends
                 * them to output_chunks, cleared by the next step) */
                o->transient += 2 * (double)hpgo_parplan_microbatches(p) * s.T * s.V / s.t;
            o->model_flops += 3 * 2 * s.h * s.V / s.t * s.T;
            o->hw_flops += xp->hf.flops + xp->hb.flops + xp->hw.flops;
            add_layers(o, &xp->mtp, (double)w->x.mtp);
        }
        o->held = fsdp2_root_bytes(p, w->precision, o->emb_params);
        if (K > 1 && p->kernels != HPGO_KS_TE)
            torch_stage_buffers(o, X / (s.sp ? s.t : 1), kk > 0, kk + 1 < K,
                                (double)hpgo_parplan_microbatches(p));
        if (p->optimizer_impl == HPGO_OPT_DEEPSPEED_BF16 && w->precision != HPGO_PREC_FP32) {
            /* DeepSpeed's BF16_Optimizer after every micro-batch's backward
             * (bf16_optimizer.py clear_lp_grads, update_hp_grads; the
             * pipeline engine calls both around each backward pass): the
             * 16-bit gradients zeroed (2 B), cast to fp32 (2 B read, 4
             * written) and added into the fp32 ones (8 read, 4 written) */
            acc_t g = {0, 0, 0};
            const kctx_t k = {.g = &c->gpu, .dtype = HPGO_DT_BF16, .attn_dtype = HPGO_DT_BF16,
                              .e = 2, .ks = p->kernels};
            vec(&k, &g, o->params, 1, 20 * o->params);
            o->w += g.t;
        }
    }
    return HPGO_OK;
}

/* ---- chain (profile) ---------------------------------------------------- */

static int chain_costs_at(const hpgo_work_t *w, const hpgo_parplan_t *p, double samples,
                          const int32_t *split, hpgo_stage_cost_t *out, hpgo_err_t *err);

static int chain_costs(const hpgo_work_t *w, const hpgo_parplan_t *p, const int32_t *split,
                       hpgo_stage_cost_t *out, hpgo_err_t *err)
{
    return chain_costs_at(w, p, (double)p->micro_batch, split, out, err);
}

/* The chain's stages for micro-batches of `samples` samples (a fraction
 * for a replica's share of one: the times scale linearly). */
static int chain_costs_at(const hpgo_work_t *w, const hpgo_parplan_t *p, double samples,
                          const int32_t *split, hpgo_stage_cost_t *out, hpgo_err_t *err)
{
    const hpgo_chain_t *c = &w->chain;
    if (p->tp != 1 || p->sequence_parallel)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "a profiled layer chain has no tensor-parallel split: tp must be 1 "
                            "and sequence_parallel off");
    if (p->recompute == HPGO_RC_SELECTIVE || p->recompute == HPGO_RC_OP)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "selective recomputation needs a transformer model (a profile has "
                            "no attention core to recompute); use 'none' or 'full'");
    double r = samples / c->batch;
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
    return hpgo_work_stage_costs_cached(w, c, p, out, NULL, err);
}

int hpgo_work_stage_costs_cached(const hpgo_work_t *w, const hpgo_cluster_t *c,
                                 const hpgo_parplan_t *p, hpgo_stage_cost_t *out,
                                 hpgo_work_cache_t *cache, hpgo_err_t *err)
{
    int rc = hpgo_work_check(w, err);
    if (rc == HPGO_OK)
        rc = hpgo_cluster_check(c, err);
    if (rc == HPGO_OK)
        rc = hpgo_parplan_check(p, err);
    if (rc != HPGO_OK)
        return rc;
    if (p->n_groups > 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "an uneven plan's stages are priced group by group "
                            "(hpgo_work_stage_cost_range, as the engine does)");
    int64_t need = (int64_t)p->tp * p->pp * p->dp * p->cp;
    int64_t have = hpgo_cluster_gpus(c);
    if (need > have)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the plan needs tp x cp x pp x dp = %lld GPUs, the cluster has %lld",
                            (long long)need, (long long)have);
    if (p->cp > 1 && w->kind != HPGO_WORK_TRANSFORMER)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "context parallelism splits attention: it needs a transformer model");
    if (p->fp8_all_gather && w->kind != HPGO_WORK_TRANSFORMER)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "fp8_all_gather gathers Float8Linear weights: it needs a transformer "
                            "model");
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
    if (p->ep > 1 || hpgo_parplan_etp(p) != p->tp) {
        int64_t gs, gst;
        hpgo_parplan_ep_group(p, &gs, &gst);
        if ((rc = hpgo_group_fanout(c, gs, gst, fan, err)) != HPGO_OK)
            return rc;
        hpgo_parplan_edp_group(p, &gs, &gst);
        if ((rc = hpgo_group_fanout(c, gs, gst, fan, err)) != HPGO_OK ||
            (rc = hpgo_group_fanout(c, hpgo_parplan_etp(p), 1, fan, err)) != HPGO_OK)
            return rc;
    }
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
        return xformer_costs(w, c, p, split, out, cache, err);
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
                          double *out, double *first, double *last, hpgo_work_cache_t *cache,
                          hpgo_err_t *err)
{
    *first = *last = 0;
    if (w->kind == HPGO_WORK_TRANSFORMER) {
        xpieces_t local;
        const xpieces_t *xp;
        int rc = cached_pieces(w, c, p, cache, &local, &xp, err);
        if (rc != HPGO_OK)
            return rc;
        double t[N_KINDS];
        for (int kd = 0; kd < N_KINDS; kd++)
            t[kd] = lcost_seconds(&xp->lk[kd]);
        for (int64_t i = 0; i < w->x.layers; i++)
            out[i] = t[layer_kind(&w->x, i)];
        *first = xp->ef.t + xp->emb_tp_f + xp->eb.t + xp->emb_tp_b;
        *last = xp->hf.t + xp->head_tp_f + xp->hb.t + xp->head_tp_b + xp->hw.t +
                (double)w->x.mtp * lcost_seconds(&xp->mtp);
        return HPGO_OK;
    }
    const hpgo_chain_t *ch = &w->chain;
    double r = (double)p->micro_batch / ch->batch;
    for (int32_t i = 0; i < ch->n; i++)
        out[i] = (ch->fwd[i] * (p->recompute == HPGO_RC_FULL ? 2 : 1) + ch->bwd[i]) * r;
    return HPGO_OK;
}

/* The whole-model shape: tp 1, one sequence, bf16. */
static void whole_shape(const hpgo_xformer_t *x, xshape_t *s)
{
    hpgo_parplan_t one;
    memset(&one, 0, sizeof one);
    one.tp = one.pp = one.dp = one.cp = one.ep = one.vstages = 1;
    one.micro_batch = 1;
    shape(x, &one, HPGO_PREC_BF16, s);
}

void hpgo_work_params(const hpgo_work_t *w, hpgo_params_t *out)
{
    memset(out, 0, sizeof *out);
    if (w->kind != HPGO_WORK_TRANSFORMER) {
        double t = 0;
        for (int32_t i = 0; i < w->chain.n; i++)
            t += w->chain.params[i];
        out->total = out->active = t;
        return;
    }
    const hpgo_xformer_t *x = &w->x;
    xshape_t s;
    whole_shape(x, &s);
    double V = (double)x->vocab, h = s.h;
    double attn = attn_params(x, &s), dense = attn + dense_mlp_params(x, &s, s.f);
    double moe_all = 0, routed = 0;
    if (x->experts > 0)
        moe_params(x, &s, &moe_all, &routed);
    double moe = attn + moe_all, moe_active = moe - routed + s.k * expert_params(x, &s);
    int64_t n_moe = 0;
    for (int64_t i = 0; i < x->layers; i++)
        n_moe += hpgo_work_is_moe_layer(x, i);
    double n_dense = (double)(x->layers - n_moe);
    out->input_embedding = V * h + (x->learned_pos ? s.s * h : 0);
    out->output_layer = x->tied ? 0 : V * h;
    double edges = out->input_embedding + out->output_layer + (x->layernorm ? 2 : 1) * h;
    out->total = edges + n_dense * dense + (double)n_moe * moe;
    out->experts = (double)n_moe * routed;
    out->active = edges + n_dense * dense + (double)n_moe * moe_active;
    if (x->mtp > 0) {
        int last_moe = hpgo_work_is_moe_layer(x, x->layers - 1);
        /* as a checkpoint stores it: norms (2 + the block's final one),
         * the 2h -> h projection, one layer, its embedding and head copies */
        out->mtp = (double)x->mtp * ((last_moe ? moe : dense) + 3 * h + 2 * h * h + 2 * V * h);
    }
}

double hpgo_work_model_flops(const hpgo_work_t *w, int64_t global_batch)
{
    if (w->kind != HPGO_WORK_TRANSFORMER)
        return 0;
    const hpgo_xformer_t *x = &w->x;
    xshape_t s;
    whole_shape(x, &s);
    double kf[N_KINDS], per_tok = 0;
    for (int kd = 0; kd < N_KINDS; kd++)
        kf[kd] = layer_model_flops(x, &s, kd);
    for (int64_t i = 0; i < x->layers; i++)
        per_tok += kf[layer_kind(x, i)];
    double head = 3 * 2 * s.h * (double)x->vocab;
    per_tok += head;
    if (x->mtp > 0)
        per_tok += (double)x->mtp * (kf[layer_kind(x, x->layers - 1)] + 3 * 2 * 2 * s.h * s.h + head);
    return per_tok * s.s * (double)global_batch;
}

int hpgo_work_stage_cost_range(const hpgo_work_t *w, const hpgo_cluster_t *c,
                               const hpgo_parplan_t *p, int32_t first, int32_t end,
                               double samples, hpgo_stage_cost_t *out, hpgo_err_t *err)
{
    int rc = hpgo_work_check(w, err);
    if (rc == HPGO_OK)
        rc = hpgo_cluster_check(c, err);
    if (rc != HPGO_OK)
        return rc;
    int64_t L = hpgo_work_layers(w);
    if (first < 0 || end <= first || end > L)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "layers [%d, %d) are not a stage of a %lld-layer model", (int)first,
                            (int)end, (long long)L);
    if (!(samples > 0) || !isfinite(samples) || samples > (double)((int64_t)1 << 40))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "a stage's micro-batch must be > 0 samples, got %g", samples);
    int64_t whole = (int64_t)llround(samples);
    if (w->kind == HPGO_WORK_TRANSFORMER && fabs(samples - (double)whole) > 1e-9 * samples)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "%g samples: a transformer replica takes whole sequences (give "
                            "shares x micro_batch in whole samples)",
                            samples);
    /* the stage between the layers before it and those after it: the
     * embedding is priced on a stage starting at layer 0, the head on one
     * ending at the last layer, a send on any other */
    int32_t split[4], n = 0, mid;
    split[n++] = 0;
    if (first > 0)
        split[n++] = first;
    mid = n - 1;
    split[n++] = end;
    if (end < L)
        split[n++] = (int32_t)L;
    hpgo_parplan_t q = *p;
    q.pp = n - 1, q.vstages = 1, q.dp = 1, q.cp = 1, q.ep = 1, q.etp = 0, q.shard_size = 0;
    if (q.schedule == HPGO_PS_INTERLEAVED || q.schedule == HPGO_PS_ZBV)
        q.schedule = HPGO_PS_1F1B;
    q.micro_batch = whole > 0 ? whole : 1;
    q.global_batch = q.micro_batch;
    q.n_split = n, q.split = split;
    q.n_groups = 0, q.groups = NULL;
    if ((rc = hpgo_parplan_check(&q, err)) != HPGO_OK)
        return rc;
    if (q.tp > hpgo_cluster_unit(c, 0) || hpgo_cluster_unit(c, 0) % q.tp != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp=%d must divide the %lld GPUs of a node (tensor parallelism "
                            "stays inside a node)",
                            (int)q.tp, (long long)hpgo_cluster_unit(c, 0));
    hpgo_stage_cost_t sc[3];
    if (w->kind == HPGO_WORK_TRANSFORMER)
        rc = xformer_costs(w, c, &q, split, sc, NULL, err);
    else
        rc = chain_costs_at(w, &q, samples, split, sc, err);
    if (rc == HPGO_OK)
        *out = sc[mid];
    return rc;
}
