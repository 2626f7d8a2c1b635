/* parplan.h - the neutral parallel plan every planner produces and every
 * simulator runs: tensor (tp), pipeline (pp), data (dp), context (cp) and
 * expert (ep) parallel sizes, virtual stages per device, micro-batch and
 * global batch, schedule, recomputation, sequence parallelism, ZeRO stage
 * and the layer split of the pp * vstages model stages.
 *
 * GPUs are numbered node-major (cluster.h) and ranks laid out as Megatron
 * does: tp fastest, then cp, then dp, then pp, so a tp group is tp
 * consecutive GPUs, the context-parallel peers of a GPU are tp apart, and
 * its gradients are reduced over the dp x cp GPUs tp apart. */
#ifndef HPGO_PARPLAN_H
#define HPGO_PARPLAN_H

#include <stdint.h>

#include "err.h"

#define HPGO_PLAN_MAX_PP 4096
#define HPGO_PLAN_MAX_STAGES 16384            /* pp * vstages */
#define HPGO_PLAN_MAX_MICROBATCHES (1 << 20)
#define HPGO_PLAN_MAX_OPS ((int64_t)1 << 23)  /* model stages x micro-batches */

enum {
    HPGO_PS_GPIPE = 0,      /* all forwards, then all backwards */
    HPGO_PS_1F1B = 1,       /* DAPPLE / PipeDream-flush */
    HPGO_PS_INTERLEAVED = 2,/* Megatron's interleaved 1F1B over vstages chunks */
    HPGO_PS_ZBH1 = 3,       /* zero bubble H1: weight gradients deferred into the cool-down */
    HPGO_PS_ZBV = 4,        /* zero bubble V: two chunks per device in a V */
    HPGO_PS__COUNT
};
/* OP: torchtitan's op-level selective activation checkpointing (mode
 * "selective", option "op"): the outputs of every other matmul and of the
 * attention are saved, everything else of the block is recomputed (work.c) */
enum { HPGO_RC_NONE = 0, HPGO_RC_SELECTIVE = 1, HPGO_RC_FULL = 2, HPGO_RC_OP = 3 };

/* One pipeline stage of an uneven plan (DAPPLE's stages with their own
 * replica counts, HAP's shares by speed, stages on different GPU types):
 * the stage runs on dp x tp GPUs of cluster part `part` (0 on a one-type
 * cluster), from GPU first_gpu (cluster index; -1: right after the GPUs
 * of the previous stages placed on the same part), tp consecutive GPUs a
 * replica.  Each micro-batch's samples are divided over the dp replicas by
 * `shares` (dp values > 0 summing to 1; NULL: evenly). */
typedef struct hpgo_stage_group {
    int32_t part;
    int32_t tp, dp;
    int64_t first_gpu;
    const double *shares;
    /* NULL, or the dp x tp cluster GPU indices of the group, replica by
     * replica (HPGO's placements: a stage's GPUs need not be consecutive);
     * each replica's tp GPUs consecutive; first_gpu is then ignored */
    const int64_t *gpus;
    /* a group whose replicas span GPU types (data parallelism across
     * types): part is HPGO_PART_MIXED and parts holds each replica's part
     * (dp entries); without gpus, each replica is placed at the next free
     * tp GPUs of its part (first_gpu ignored).  NULL otherwise. */
    const int32_t *parts;
} hpgo_stage_group_t;

#define HPGO_PART_MIXED (-1)

typedef struct hpgo_parplan {
    int32_t tp, pp, dp, cp, ep, vstages; /* cp: sequence split (ring attention) */
    int64_t micro_batch, global_batch; /* sequences (samples) */
    int32_t schedule;                  /* HPGO_PS_* */
    int32_t recompute;                 /* HPGO_RC_* */
    int32_t sequence_parallel;         /* 0 / 1 */
    int32_t zero;                      /* 0..3; 1 = Megatron's distributed optimizer */
    int32_t overlap_grad_reduce;       /* 0 / 1: DP gradient sync overlaps the backward */
    int32_t n_split;                   /* 0, or pp * vstages + 1 */
    const int32_t *split;              /* model stage k holds layers [split[k], split[k+1]) */
    /* expert layers (mixture of experts): the tp x cp x dp GPUs of a
     * pipeline stage are regrouped as etp x ep x edp -- expert tensor
     * parallel (etp, 0: = tp), expert parallel (ep: experts divided over
     * it, tokens exchanged by all-to-all) and expert data parallel (edp =
     * tp cp dp / (etp ep), over which expert gradients are reduced).  Ranks:
     * etp fastest, then ep, then edp (Megatron-Core's order; ep_outer = 1
     * puts edp before ep, so the ep group spans the farthest GPUs). */
    int32_t etp;
    int32_t ep_outer;
    /* 1: a MoE layer's all-to-alls overlap the compute of another
     * micro-batch (Megatron's --overlap-moe-expert-parallel-comm, DeepSeek's
     * DualPipe), each communication phase beside a compute phase of the
     * other (work.c): only what those phases cannot hide is exposed */
    int32_t overlap_ep;
    /* with overlap_ep: the share, in (0, 1], of what that ideal pairing
     * hides that is credited (HPGO_EP_OVERLAP_MEGATRON for Megatron's
     * schedule, 1 for a perfect one) */
    double overlap_share;
    /* MoE token dispatcher: HPGO_DISPATCH_ALLTOALL (an all-to-all of every
     * routed copy, Megatron's alltoall dispatcher) or HPGO_DISPATCH_DEDUP
     * (DeepEP / Megatron's flex dispatcher: a token crosses once to each
     * node holding one of its experts, then is forwarded inside the node) */
    int32_t dispatcher;
    /* 1: fp8 training keeps the weights in fp8 only (Megatron's
     * --fp8-param-gather: no 16-bit copy beside the fp8 weight and its
     * transpose; the optimizer's fp32 master copy stays) */
    int32_t fp8_params;
    /* sharded data parallelism as PyTorch FSDP2 runs it (fully_shard,
     * torch/distributed/fsdp/_fully_shard/_fully_shard.py):
     * reshard_after_forward (ZeRO-3 only; 1 = free each layer's gathered
     * weights after its forward and gather them again in the backward, 0 =
     * keep them gathered until the backward, ZeRO-2-like); shard_size (0 =
     * shard the states over all dp x cp replicas; k = hybrid sharding,
     * FSDP2's HSDP / DeepSpeed's MiCS: shard inside groups of k consecutive
     * replicas, replicate across the dp x cp / k groups, whose shards are
     * all-reduced after the reduce-scatter) */
    int32_t reshard_after_forward;
    int32_t shard_size;
    /* offloading (DeepSpeed ZeRO-Offload, Megatron's HybridDeviceOptimizer):
     * 1 = the optimizer state and its step live on the host (CPU Adam), the
     * gradients go down and the 16-bit weights come back over the host
     * link; offload_activations in [0, 1] = the share of each stored
     * micro-batch's activations kept in host memory until its backward */
    int32_t offload_optimizer;
    double offload_activations;
    /* the kernels the training stack launches (HPGO_KS_*): Megatron-Core
     * with Transformer Engine's fused kernels, torch.compile, eager PyTorch
     * (work.c prices each set's kernel list and host time) */
    int32_t kernels;
    /* tensor-parallel communication overlap beyond what every stack does
     * (HPGO_TPO_*): Transformer Engine's userbuffers (Megatron's
     * --tp-comm-overlap) or PyTorch's async TP */
    int32_t tp_overlap;
    /* how context parallelism exchanges K and V (HPGO_CP_*) */
    int32_t cp_comm;
    /* with full recomputation: 0 = every layer; N > 0 = Megatron's
     * --recompute-num-layers N under recompute_method (HPGO_RCM_*) */
    int32_t recompute_layers;
    int32_t recompute_method;
    /* uneven plans: n_groups = 0 (every stage on tp x dp GPUs of the one
     * type, the even plan) or pp (vstages 1, cp 1, ep 1): stage k on
     * groups[k], over the layers of split[k] .. split[k + 1]; tp and dp
     * above are then 1, and micro_batch counts the samples of one
     * micro-batch over all replicas of a stage (global_batch / micro_batch
     * micro-batches go through the pipeline).  The even plan with dp d and
     * micro-batch b is the uneven one with every group at dp d, even
     * shares, micro_batch b x d.  Borrowed like split. */
    int32_t n_groups;
    const hpgo_stage_group_t *groups;
    /* the fused attention kernel (HPGO_ATT_*): the fastest with a published
     * table for the GPU (cuDNN on Hopper, as Transformer Engine and recent
     * PyTorch run it; FlashAttention-2 on Ampere), or FlashAttention-2
     * (PyTorch's flash back end, SDPA's default choice on Hopper up to 2024
     * and the only one its context parallelism took then) */
    int32_t attention;
    /* the mixed-precision optimizer's gradient path (HPGO_OPT_*): Megatron's
     * (weight-gradient GEMMs accumulate into fp32 gradients, ZeRO-1
     * reduce-scatters them) or DeepSpeed's BF16_Optimizer (each
     * micro-batch's 16-bit gradients added into fp32 ones by a separate
     * pass; its pipeline engine all-reduces them under ZeRO-1) or Apex's
     * DistributedFusedAdam as NeMo's recipes configure it (ZeRO-1 only: a
     * 16-bit gradient buffer reduce-scattered in 16 bits; hpgo_work_state_bytes)
     * or Megatron's with 16-bit gradients (--grad-reduce-in-bf16, NeMo's
     * performance mode; ZeRO 0 or 1) */
    int32_t optimizer_impl;
    /* the loss over the vocabulary (HPGO_CE_*): the kernel set's own,
     * Megatron's unfused fp32 vocab_parallel_cross_entropy (Megatron-LM
     * without --cross-entropy-loss-fusion, its default) under kernels te,
     * or a fused loss kernel on the 16-bit logits under a PyTorch kernel set
     * (flash-attn's Triton CrossEntropyLoss, as llm-foundry's MPT calls it) */
    int32_t cross_entropy;
    /* fp8 under a PyTorch kernel set with FSDP2 (zero 3): 1 = torchao's
     * enable_fsdp_float8_all_gather with
     * precompute_float8_dynamic_scale_for_fsdp (each Float8Linear weight
     * cast to fp8 on its shard before the all-gather, its scale from one
     * all-reduce per step), 0 = gathered in 16 bits and cast at every
     * GEMM (torchtitan's default) */
    int32_t fp8_all_gather;
    /* torchao's Float8Linear recipe under a PyTorch kernel set (HPGO_F8R_*):
     * tensorwise dynamic scaling (one scale a tensor, the fp8 input and
     * weight saved; torchtitan's 2024 benchmarks), rowwise (one scale a
     * row, e4m3 throughout, the 16-bit input and weight saved and cast again
     * along the other axis in the backward; torchtitan 0.3's default), or
     * rowwise_with_gw_hp (the weight gradient in 16 bits, the weight cast
     * tensorwise for the input gradient; torchtitan 0.3's other recipe) */
    int32_t fp8_recipe;
} hpgo_parplan_t;

/* COMPILE_BLOCKS: torch.compile of each transformer block only, the final
 * norm, output layer and loss eager, attention on PyTorch's FlashAttention-2
 * (torchtitan until March 2025: the loss was not compiled, train.py at
 * commit 9dec370); COMPILE_FA2: blocks and loss compiled, attention still on
 * FlashAttention-2 (torchtitan until October 2025 on Hopper);
 * EAGER_UNFUSED_NORM: eager PyTorch with RMSNorm written as separate fp32
 * ops (torchtitan's RMSNorm module of 2024, norm_type "rmsnorm") */
enum {
    HPGO_KS_TE = 0,
    HPGO_KS_COMPILE = 1,
    HPGO_KS_EAGER = 2,
    HPGO_KS_COMPILE_BLOCKS = 3,
    HPGO_KS_COMPILE_FA2 = 4,
    HPGO_KS_EAGER_UNFUSED_NORM = 5
};
enum { HPGO_TPO_NONE = 0, HPGO_TPO_TE = 1, HPGO_TPO_ASYNC = 2 };
/* TORCH_SDPA: PyTorch's context parallelism around SDPA (work.c torch_cp_core) */
enum { HPGO_CP_P2P = 0, HPGO_CP_ALLGATHER = 1, HPGO_CP_A2A = 2, HPGO_CP_TORCH_SDPA = 3 };
enum { HPGO_ATT_AUTO = 0, HPGO_ATT_FLASH2 = 1 };
enum {
    HPGO_OPT_MEGATRON = 0,
    HPGO_OPT_DEEPSPEED_BF16 = 1,
    HPGO_OPT_APEX_BF16 = 2,
    HPGO_OPT_MEGATRON_BF16_GRADS = 3
};
enum { HPGO_CE_AUTO = 0, HPGO_CE_UNFUSED = 1, HPGO_CE_FUSED = 2 };
enum { HPGO_F8R_TENSORWISE = 0, HPGO_F8R_ROWWISE = 1, HPGO_F8R_ROWWISE_GW_HP = 2 };
/* uniform: every layer recomputed, the inputs of groups of N layers
 * stored; block: the first N layers of each model stage recomputed, the
 * others store everything (Megatron's recompute_method) */
enum { HPGO_RCM_UNIFORM = 0, HPGO_RCM_BLOCK = 1 };

enum { HPGO_DISPATCH_ALLTOALL = 0, HPGO_DISPATCH_DEDUP = 1 };

/* Share of the time an ideal phase-by-phase pairing would hide that
 * Megatron's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm)
 * hides in measured runs: Megatron-Bridge's A/B runs of Qwen3-30B-A3B on 16
 * H100 at EP 16 (41.25 -> 31.31 s with the all-to-all dispatcher, 24.71 ->
 * 20.99 s with HybridEP; docs/training/communication-overlap.md, PR 5094)
 * need 0.62 and 0.68 of it.  What the schedule loses -- the host sync of
 * dropless dispatch, stream synchronisation between the paired phases, the
 * unpaired warm-up and cool-down -- is not modelled one by one
 * (docs/moe.md, "Expert-parallel overlap"). */
#define HPGO_EP_OVERLAP_MEGATRON 0.65

/* Checks that depend only on the plan (sizes, schedule, batch arithmetic);
 * the model-dependent ones are in work.c.  HPGO_E_INVALID naming the field. */
int hpgo_parplan_check(const hpgo_parplan_t *p, hpgo_err_t *err);

/* Whether the optimizer's gradient path (HPGO_OPT_*) runs ZeRO stage `zero`:
 * HPGO_OK, or HPGO_E_INVALID with the reason in `err` (which may be NULL). */
int hpgo_parplan_check_optimizer_zero(int32_t optimizer_impl, int32_t zero, hpgo_err_t *err);

/* Replicas the dense model states are sharded over: shard_size, or dp x cp
 * when it is 0. */
int64_t hpgo_parplan_shard(const hpgo_parplan_t *p);

/* Micro-batches per iteration and pipeline: global_batch / (micro_batch * dp). */
int64_t hpgo_parplan_microbatches(const hpgo_parplan_t *p);

/* Expert tensor-parallel size (etp, or tp when 0) and expert data-parallel
 * size tp cp dp / (etp ep) (0 when that does not divide). */
int32_t hpgo_parplan_etp(const hpgo_parplan_t *p);
int64_t hpgo_parplan_edp(const hpgo_parplan_t *p);

/* (size, stride) of the plan's expert-parallel and expert data-parallel
 * groups, in GPUs, inside a pipeline stage's tp cp dp consecutive GPUs. */
void hpgo_parplan_ep_group(const hpgo_parplan_t *p, int64_t *size, int64_t *stride);
void hpgo_parplan_edp_group(const hpgo_parplan_t *p, int64_t *size, int64_t *stride);

#endif
