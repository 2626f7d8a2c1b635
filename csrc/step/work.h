/* work.h - the model of the work of one training step: what each layer
 * computes, stores and holds, and how it shards over tensor and sequence
 * parallelism; priced on a cluster as per-model-stage costs.
 *
 * Two kinds of models:
 * - a transformer description (hidden, ffn, heads, kv heads, layers, seq,
 *   vocab, MLP kind, mixture-of-experts and attention variants, ...): every
 *   kernel of a Megatron-style layer is listed with its FLOPs and HBM bytes
 *   (spec/training-model.md sections 2, 3.3, 4.8, 6.1) and timed on the
 *   cluster's GPU; tensor-, context- and expert-parallel collectives come
 *   from cost.h;
 * - a layer chain with measured per-layer times (a PipeDream profile):
 *   times scale linearly with the micro-batch; tensor parallelism 1.
 *
 * Units: seconds, bytes, parameters as counts.  Models are plain values,
 * read-only here; thread-safe. */
#ifndef HPGO_WORK_H
#define HPGO_WORK_H

#include <stdint.h>

#include "cluster.h"
#include "err.h"
#include "parplan.h"

#define HPGO_WORK_MAX_LAYERS 1000000
/* Length of the amax history of an fp8 tensor (Transformer Engine's
 * DelayedScaling default; Megatron-Core defaults to 1). */
#define HPGO_FP8_AMAX_HISTORY 1024

enum { HPGO_WORK_TRANSFORMER = 0, HPGO_WORK_CHAIN = 1 };
enum { HPGO_MLP_GELU = 0, HPGO_MLP_SWIGLU = 1 };
/* Training precision: weights and activations in 16 bits with fp32 master
 * weights and gradients (bf16 / fp16), fp8 GEMMs on top of that, or fp32. */
enum { HPGO_PREC_BF16 = 0, HPGO_PREC_FP16 = 1, HPGO_PREC_FP8 = 2, HPGO_PREC_FP32 = 3 };

typedef struct hpgo_xformer {
    int64_t hidden, ffn, heads, kv_heads, head_dim, layers, vocab, seq;
    int32_t mlp;            /* HPGO_MLP_* */
    int32_t tied;           /* input and output embeddings shared */
    int32_t bias;           /* linear layers have biases (GPT) */
    int32_t layernorm;      /* 1: LayerNorm (weight + bias), 0: RMSNorm */
    int32_t dropout;        /* dropout layers (masks stored) */
    int32_t flash;          /* fused attention: no s x s tensors stored */
    int32_t causal_flops;   /* model FLOPs halve the attention core (current Megatron) */
    int32_t learned_pos;    /* learned position embeddings (GPT) */
    /* mixture of experts; experts = 0: every MLP is dense */
    int64_t experts;        /* routed experts per MoE layer (E) */
    int64_t topk;           /* experts per token (k) */
    int64_t expert_ffn;     /* inner size of one routed expert */
    int64_t shared_experts; /* always-active experts per MoE layer */
    int64_t shared_ffn;     /* inner size of one shared expert */
    int64_t dense_first;    /* the first layers keep the dense MLP of size ffn */
    int64_t moe_every;      /* layer i >= dense_first is MoE when (i + 1) % moe_every == 0 (0, 1: all) */
    int32_t expert_bias;    /* expert linear layers have biases (GPT-OSS) */
    int32_t router_bias;    /* the router has a bias per expert */
    double capacity;        /* capacity factor padding the experts' inputs (0: dropless) */
    double imbalance;       /* routed tokens on the busiest rank / the mean (0, 1: balanced) */
    int64_t route_groups;   /* experts in this many equal groups, a token routed within ... */
    int64_t route_topk_groups; /* ... this many of them (DeepSeek's n_group, topk_group; 0 or
                                  route_groups <= 1: unrestricted) */
    /* attention variants */
    int32_t attn_bias;      /* 1: q, k, v and output projections have biases (GPT-OSS);
                               2: q, k and v only (Qwen2) */
    int32_t qk_norm;        /* per-head RMSNorm of queries and keys (Qwen3) */
    int32_t sinks;          /* a learned sink logit per head (GPT-OSS) */
    int64_t window;         /* sliding-window width (0: full attention everywhere) ... */
    int64_t window_every;   /* ... on layers i % window_every == 0 (0, 1: every layer) */
    int32_t mla;            /* multi-head latent attention (DeepSeek-V2/V3); head_dim unused */
    int64_t q_lora, kv_lora, qk_nope, qk_rope, v_head; /* its ranks and per-head sizes */
    int64_t mtp;            /* multi-token-prediction modules, on the last stage */
    int32_t parallel_block; /* attention and MLP side by side on one norm (GPT-J, PaLM) */
} hpgo_xformer_t;

typedef struct hpgo_chain {
    int32_t n;            /* layers, in topological order */
    double batch;         /* samples the times and activations were measured at */
    const double *fwd;    /* seconds per layer at `batch` */
    const double *bwd;
    const double *params; /* parameters (count) */
    const double *act;    /* bytes stored for the backward pass at `batch` */
    const double *out;    /* bytes of the layer's output at `batch` */
} hpgo_chain_t;

typedef struct hpgo_work {
    int32_t kind;      /* HPGO_WORK_* */
    int32_t precision; /* HPGO_PREC_* */
    hpgo_xformer_t x;
    hpgo_chain_t chain;
} hpgo_work_t;

/* Costs of one model stage (a chunk of consecutive layers) for one
 * micro-batch on one GPU of its tensor-parallel group. */
typedef struct hpgo_stage_cost {
    int32_t first_layer, n_layers;
    double f, b, w;          /* seconds: forward, input gradient (with recomputation), weight gradient */
    double tp_f, tp_b;       /* seconds of tensor-parallel communication inside f and b */
    double recompute;        /* seconds of recomputation inside b */
    double act;              /* bytes stored after the forward, per micro-batch */
    double act_w;            /* bytes still held after the input gradient, until the weight gradient */
    double act_layers;       /* part of act stored by the transformer layers (no edge extras) */
    double transient;        /* bytes needed once while the stage computes (full-recompute working set, logits) */
    double head_transient;   /* the output layer and loss's part of it (0 on stages without them) */
    double layer_transient;  /* the layers' part (where head_transient > 0) */
    double params;           /* parameters on the GPU (after tp sharding, before ZeRO) */
    double emb_params;       /* part of params that is embedding / output layer */
    double send_bytes;       /* bytes each GPU sends to the next stage per micro-batch (and the gradient back) */
    double regather;         /* seconds the receiver spends re-assembling it (all-gather), 0 with SP */
    double expert_params;    /* part of params in routed experts (sharded over ep x etp, reduced over edp) */
    double ep_f, ep_b;       /* seconds of expert-parallel all-to-all (and etp gathers) inside f and b */
    double fp8_state;        /* bytes of fp8 scaling state (persistent; 0 unless fp8) */
    double held;             /* other bytes held through the step (FSDP2's gathered root
                                parameters) */
    double fp8_linear_params; /* part of params in torchao's Float8Linear weights (fp8 under a
                                 PyTorch kernel set; 0 otherwise): FSDP2 gathers them in fp8
                                 under fp8_all_gather */
    double model_flops;      /* per micro-batch per GPU, model FLOPs (no recomputation) */
    double hw_flops;         /* per micro-batch per GPU, executed FLOPs */
} hpgo_stage_cost_t;

/* A cache of the priced layers of one model on one cluster, for callers
 * that price many plans of the same pair (autoplan): plans that differ
 * only in pp (beyond 1), vstages, schedule, ZeRO, split or global batch
 * reuse the layers' prices.  Zero-initialise it; use it with one (model,
 * cluster) pair only and from one thread; free with hpgo_work_cache_free.
 * hpgo_work_stage_costs_cached with a NULL cache is hpgo_work_stage_costs. */
typedef struct hpgo_work_cache {
    void *pieces;        /* owned */
    hpgo_parplan_t key;  /* the plan they were priced for */
    int valid;
} hpgo_work_cache_t;
int hpgo_work_stage_costs_cached(const hpgo_work_t *w, const hpgo_cluster_t *c,
                                 const hpgo_parplan_t *p, hpgo_stage_cost_t *out,
                                 hpgo_work_cache_t *cache, hpgo_err_t *err);
void hpgo_work_cache_free(hpgo_work_cache_t *cache);

/* HPGO_E_INVALID naming the first bad field of the model. */
int hpgo_work_check(const hpgo_work_t *w, hpgo_err_t *err);

/* Number of layers of the model. */
int64_t hpgo_work_layers(const hpgo_work_t *w);

/* Check the plan against the model and the cluster (divisibility, GPU
 * count, schedule requirements), then fill out[k] for the pp * vstages
 * model stages.  HPGO_E_INVALID with a message naming the conflict. */
int hpgo_work_stage_costs(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                          hpgo_stage_cost_t *out, hpgo_err_t *err);

/* One model stage of layers [first, end) of the model, priced as inside a
 * pipeline (the embedding when first is 0; the head, and no send, when
 * end is the model's last layer) for one micro-batch of `samples` samples
 * on one GPU of a tensor-parallel group of c: the plan's tp and per-GPU
 * settings apply, its pp, dp, cp, split and batch sizes do not.  A chain
 * takes any samples > 0 (its times scale linearly), a transformer whole
 * sequences.  What the engine prices an uneven plan's stage groups with.
 * HPGO_E_INVALID naming the conflict. */
int hpgo_work_stage_cost_range(const hpgo_work_t *w, const hpgo_cluster_t *c,
                               const hpgo_parplan_t *p, int32_t first, int32_t end,
                               double samples, hpgo_stage_cost_t *out, hpgo_err_t *err);

/* The default split of `layers` layers into K model stages (K + 1
 * boundaries): even, the remainder on the middle stages first. */
void hpgo_work_even_split(int64_t layers, int32_t K, int32_t *split);

/* Seconds of forward + backward (with recomputation) of each layer for one
 * micro-batch on one GPU under the plan's tp, sequence parallelism,
 * recomputation and micro-batch (out: hpgo_work_layers(w) entries), and
 * the extra seconds of the first and the last model stage (embedding; final
 * norm, logits and loss).  The plan must have passed
 * hpgo_work_stage_costs's checks.  Used to balance layer splits.  cache:
 * NULL, or as for hpgo_work_stage_costs_cached. */
int hpgo_work_layer_times(const hpgo_work_t *w, const hpgo_cluster_t *c, const hpgo_parplan_t *p,
                          double *out, double *first, double *last, hpgo_work_cache_t *cache,
                          hpgo_err_t *err);

/* Model FLOPs of one iteration of the whole global batch (3 x forward, the
 * convention of Korthikanti et al. and Megatron; the attention core halved
 * when causal_flops is set); for chains, 0 (unknown). */
double hpgo_work_model_flops(const hpgo_work_t *w, int64_t global_batch);

/* Parameters of the whole model (counts, the real vocabulary, no padding,
 * no tp): total (multi-token-prediction modules apart), the input
 * embedding and the output layer (one matrix when tied: counted in
 * input_embedding, output_layer 0), the routed experts, the parameters one
 * token uses (active: routed experts top-k of E, embeddings included), and
 * the multi-token-prediction modules as a checkpoint stores them (with
 * their own embedding and output-layer copies). */
typedef struct hpgo_params {
    double total, input_embedding, output_layer, experts, active, mtp;
} hpgo_params_t;
void hpgo_work_params(const hpgo_work_t *w, hpgo_params_t *out);

/* Whether layer i of a transformer has a mixture-of-experts MLP. */
int hpgo_work_is_moe_layer(const hpgo_xformer_t *x, int64_t i);

/* Bytes per parameter of weights, gradients and optimizer state for the
 * precision and the optimizer's gradient path (HPGO_OPT_*): bf16 / fp16
 * 2 + 4 + 12 as Megatron with fp32 main gradients and Adam; fp8: 2 more for
 * the fp8 weight copies; fp32: 4 + 4 + 8; Apex's DistributedFusedAdam as
 * NeMo configures it: 16-bit gradients (2), fp32 moments and the master as
 * int16 remainders of the bf16 weight (10), an fp32 master with fp8 weights
 * (12); Megatron's with --grad-reduce-in-bf16: 16-bit gradients (2), the
 * optimizer's state as Megatron's (12; its fp32 copy of the gradient shard
 * exists only during the step).  The gradient bytes are also what a
 * gradient collective moves. */
void hpgo_work_state_bytes(int32_t precision, int32_t fp8_params, int32_t optimizer_impl,
                           double *weights, double *grads, double *optimizer);

#endif
