"""The training frameworks a plan is exported to, as data.

Each :class:`Framework` says which plans it runs -- the schedules, ZeRO /
FSDP stages, recomputation modes and precisions it offers, and rules on
their combinations, each citing the framework's source (file and check)
-- and its runtime defaults for the mechanisms of the training-step model
(kernel set, overlaps, sharding), keyed by :class:`hpgo.ParallelPlan`
field names.  ``hpgo.autoplan(..., framework="megatron")`` proposes only
plans the framework accepts; the exports (:meth:`ParallelPlan.megatron_args`,
:meth:`~ParallelPlan.torchtitan_config`, :meth:`~ParallelPlan.deepspeed_json`)
refuse plans it does not.

Versions read (docs/exports.md): Megatron-LM ``core_v0.19.0``
(``megatron/training/arguments.py``, ``megatron/core``), torchtitan 0.3.0
(PyPI) with PyTorch 2.13, DeepSpeed 0.19.8 (PyPI) with Megatron-DeepSpeed's
pipeline engine (``deepspeed/runtime/pipe``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["Framework", "Rule", "FRAMEWORKS", "get", "problems", "check", "apply_defaults",
           "apply_gradient_path", "gradient_path_of", "apply_fp8_recipe", "fp8_recipe_of",
           "hybrid_sharded", "runtime_defaults", "search_spaces", "refuse_fixed"]


@dataclass(frozen=True)
class Rule:
    """One combination a framework refuses: ``refuses(plan, model,
    precision)`` is True for a refused plan (``model`` may be None: rules
    on the model shape then pass); ``source`` is the file and check."""

    what: str
    source: str
    refuses: Callable[[Any, Any, str], bool]


@dataclass(frozen=True)
class Framework:
    """A training framework: what it runs (``schedules``, ``zero`` stages,
    ``recompute`` modes, ``precisions``, the optimizers' gradient paths
    ``optimizers`` as ParallelPlan's ``optimizer_impl``, ``rules`` on
    combinations) and its runtime ``defaults`` (ParallelPlan field -> value,
    or a function of the plan where the framework's default depends on it)."""

    name: str
    title: str
    version: str
    schedules: tuple[str, ...]
    zero: tuple[int, ...]
    recompute: tuple[str, ...]
    precisions: tuple[str, ...]
    rules: tuple[Rule, ...]
    defaults: Mapping[str, Any]
    # fixed choices a ZeRO stage needs (searched as their own sub-space)
    zero_needs: Mapping[int, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    launch: str = ""
    optimizers: tuple[str, ...] = ("megatron",)
    # the gradient path (ParallelPlan's optimizer_impl) it runs for a ZeRO
    # stage and precision where the plan leaves ParallelPlan's default
    # (None: the plan's own)
    gradient_path: Callable[[int, str], str] | None = None
    # what to do instead of a ZeRO stage it does not run (appended to the refusal)
    zero_hint: str = ""
    # torchao's float8 recipe it runs fp8 plans on (ParallelPlan's
    # fp8_recipe; None: the plan's own)
    fp8_recipe: str | None = None


# what each optimizer_impl is, for the refusals
_OPTIMIZERS = {"megatron": "the framework's own optimizer",
               "deepspeed_bf16": "DeepSpeed's BF16_Optimizer",
               "apex_bf16": "Apex's DistributedFusedAdam",
               "megatron_bf16_grads": "Megatron's 16-bit gradient buffer"}


def hybrid_sharded(plan: Any) -> bool:
    """Whether the plan shards its ZeRO states in groups smaller than its
    dp x cp replicas (hybrid sharding)."""
    k = getattr(plan, "shard_size", 0)
    return bool(k) and k < plan.dp * plan.cp


# ---------------------------------------------------------------- Megatron

_MLM = "Megatron-LM core_v0.19.0 megatron/training/arguments.py validate_args"
_MCORE = "Megatron-LM core_v0.19.0 megatron/core"

MEGATRON = Framework(
    name="megatron",
    title="Megatron-LM / Megatron-Core",
    version="Megatron-LM core_v0.19.0 (Megatron-Core; Megatron-Bridge takes the same settings)",
    # Megatron-Core's schedules: forward_backward_pipelining_without_interleaving
    # (1F1B) and _with_interleaving (megatron/core/pipeline_parallel/schedules.py,
    # get_forward_backward_func); no GPipe, no zero-bubble schedule
    schedules=("1f1b", "interleaved-1f1b"),
    # 0: DDP; 1: --use-distributed-optimizer (optimizer states sharded, the
    # gradients reduce-scattered once a step from a whole gradient buffer:
    # docs/user-guide/features/dist_optimizer.md's 6 + 12/d bytes a parameter, ZeRO 1, not 2);
    # 3: --use-torch-fsdp2.  ZeRO 2 (gradients sharded, reduce-scattered every
    # micro-batch) is Megatron-FSDP's optim_grads, not exported.
    zero=(0, 1, 3),
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp16", "fp8"),
    zero_needs={3: {"pp": 1, "ep": 1}},
    rules=(
        Rule("Megatron-LM runs one data-parallel size for every stage (and one tensor-parallel "
             "size, one GPU type): an uneven plan's stage groups have no Megatron form",
             "Megatron-LM core_v0.19.0 megatron/core/parallel_state.py "
             "initialize_model_parallel: world = tp x pp x dp x cp, equal groups",
             lambda p, m, pr: getattr(p, "stages", None) is not None),
        Rule("Megatron-LM gives every data-parallel rank the same micro-batch: a stage group "
             "whose replicas span GPU types (shares by speed) has no Megatron-LM form",
             "Megatron-LM core_v0.19.0 megatron/training/arguments.py: --micro-batch-size, one value for every rank",
             lambda p, m, pr: any(getattr(g, "replicas", None) is not None
                                  for g in getattr(p, "stages", None) or ())),
        Rule("Megatron-Core's layers run Transformer Engine's kernels (kernels='te'): the export "
             "selects no other implementation and compiles nothing with torch.compile",
             "Megatron-LM core_v0.19.0 megatron/training/arguments.py: --transformer-impl "
             "defaults to transformer_engine (its 'local' implementation keeps Megatron's own "
             "fused kernels, which no hpgo kernel set prices)",
             lambda p, m, pr: p.kernels != "te"),
        Rule("the CPU optimizer (offload_optimizer, --optimizer-cpu-offload) runs through the "
             "precision-aware distributed optimizer: zero=1",
             f"{_MLM}: 'The optimizer cpu offload must be used in conjunction with "
             "--use-precision-aware-optimizer'; megatron/core/optimizer/optimizer_config.py: "
             "'--use-precision-aware-optimizer only supported with distributed optimizer'",
             lambda p, m, pr: p.offload_optimizer and p.zero != 1),
        Rule("activation offloading (offload_activations) is not exported: Megatron's "
             "--cpu-offloading moves whole layers, without pipelining or recomputation, which "
             "hpgo does not price",
             f"{_MCORE}/transformer/transformer_config.py __post_init__: cpu_offloading "
             "asserts (pipeline_model_parallel_size == 1, no recompute_granularity)",
             lambda p, m, pr: p.offload_activations > 0),
        Rule("fp8 under delayed scaling (the export's --fp8-format hybrid, Megatron's default "
             "recipe) does not recompute the norms and expert activations that selective "
             "recomputation of fused-attention models names (--recompute-modules layernorm, "
             "moe_act)",
             f"{_MCORE}/transformer/transformer_config.py __post_init__: 'Delayed scaling does "
             "not support moe_act and layernorm recompute for fp8'",
             lambda p, m, pr: pr == "fp8" and p.recompute == "selective" and
             m is not None and m.flash),
        Rule("FSDP2 (zero=3) runs without pipeline parallelism",
             f"{_MLM}: assert args.pipeline_model_parallel_size == 1 under --use-torch-fsdp2",
             lambda p, m, pr: p.zero == 3 and p.pp > 1),
        Rule("FSDP2 (zero=3) shards over the whole data-parallel group: no hybrid sharding "
             "(shard_size)", f"{_MCORE}/distributed/torch_fully_sharded_data_parallel.py: "
             "fully_shard on one mesh, DeviceMesh.from_group(data-parallel group with context "
             "parallelism)",
             lambda p, m, pr: p.zero == 3 and hybrid_sharded(p)),
        Rule("FSDP2 (zero=3) runs without expert parallelism",
             f"{_MLM}: assert args.expert_model_parallel_size == 1 under --use-torch-fsdp2",
             lambda p, m, pr: p.zero == 3 and p.ep > 1),
        Rule("FSDP2 (zero=3) needs untied embeddings",
             f"{_MLM}: assert args.untie_embeddings_and_output_weights under --use-torch-fsdp2",
             lambda p, m, pr: p.zero == 3 and m is not None and m.tied),
        Rule("FSDP2 (zero=3) does not train in fp16",
             f"{_MLM}: assert not args.fp16 under --use-torch-fsdp2",
             lambda p, m, pr: p.zero == 3 and pr == "fp16"),
        Rule("fp8 weights only (fp8_params) need the distributed optimizer or FSDP (zero >= 1)",
             f"{_MLM}: --fp8-param-gather only supported with distributed optimizer, torch "
             "fsdp2, megatron fsdp",
             lambda p, m, pr: p.fp8_params and p.zero == 0),
        Rule("the MoE all-to-all overlap runs without full recomputation",
             f"{_MCORE}/transformer/transformer_config.py __post_init__: 'disable full "
             "recomputation when enabling overlap_moe_expert_parallel_comm'",
             lambda p, m, pr: bool(p.overlap_moe_comm) and p.recompute == "full"),
        Rule("the MoE all-to-all overlap takes at most one multi-token-prediction layer",
             f"{_MCORE}/transformer/transformer_config.py __post_init__: 'MTP supports at most "
             "one layer when enabling overlap_moe_expert_parallel_comm'",
             lambda p, m, pr: bool(p.overlap_moe_comm) and m is not None and m.mtp > 1),
        Rule("experts with biases run without expert tensor parallelism (etp = 1)",
             f"{_MCORE}/transformer/transformer_config.py __post_init__: 'Bias in Moe is only "
             "supported when ETP==1'",
             lambda p, m, pr: m is not None and m.experts > 0 and
             (m.bias or m.expert_bias) and (p.etp or p.tp) != 1),
        Rule("the key/value heads divide tp or tp divides them",
             f"{_MCORE}/transformer/transformer_config.py __post_init__: num_query_groups % "
             "tensor_model_parallel_size != 0 and tensor_model_parallel_size % "
             "num_query_groups != 0 raises",
             lambda p, m, pr: m is not None and not m.mla and
             m.kv_heads % p.tp != 0 and p.tp % m.kv_heads != 0),
        Rule("context parallelism is Transformer Engine's (p2p, all_gather, a2a), not "
             "PyTorch's SDPA one",
             "Megatron-LM megatron/training/arguments.py --cp-comm-type: p2p, a2a, allgather "
             "or a2a+p2p",
             lambda p, m, pr: p.cp > 1 and p.cp_comm == "torch_sdpa"),
        Rule("context parallelism splits each sequence into 2 x cp equal chunks",
             f"{_MLM}: assert args.seq_length % (args.context_parallel_size * 2) == 0",
             lambda p, m, pr: p.cp > 1 and m is not None and m.seq % (2 * p.cp) != 0),
        Rule("expert parallelism with tensor parallelism needs sequence parallelism",
             f"{_MCORE}/model_parallel_config.py __post_init__: 'When using expert parallelism "
             "and tensor parallelism for training, sequence parallelism must be used'",
             lambda p, m, pr: p.ep > 1 and p.tp > 1 and not p.sequence_parallel),
    ),
    defaults={
        # Megatron-Core with Transformer Engine (--transformer-impl
        # transformer_engine is the default in arguments.py)
        "kernels": "te",
        # --tp-comm-overlap is off unless given (arguments.py, store_true)
        "tp_overlap": "none",
        # --cp-comm-type default ["p2p"] (arguments.py)
        "cp_comm": "p2p",
        # FSDP2 reshards after forward unless --torch-fsdp2-no-reshard-after-forward
        "reshard_after_forward": True,
        "shard_size": 0,
        "overlap_grad_reduce": True,
        # --recompute-method uniform for full recomputation (the export's choice)
        "recompute_method": "uniform",
        # vocab_parallel_cross_entropy unless --cross-entropy-loss-fusion (off by
        # default, model_parallel_config.py cross_entropy_loss_fusion=False), which
        # the export does not give: its native fusion is not the kernel hpgo prices
        "cross_entropy": "unfused",
    },
    launch="torchrun --nproc-per-node 8 --nnodes N pretrain_gpt.py $(cat megatron.args) "
           "<data, tokenizer and optimizer arguments>",
    # its own gradient path, fp32 or --grad-reduce-in-bf16 (arguments.py);
    # core/optimizer/__init__.py get_megatron_optimizer
    optimizers=("megatron", "megatron_bf16_grads"),
)

# -------------------------------------------------------------- torchtitan

_TT = "torchtitan 0.3.0"

TORCHTITAN = Framework(
    name="torchtitan",
    title="torchtitan (PyTorch FSDP2 / DTensor / torch.distributed.pipelining)",
    version="torchtitan 0.3.0 (PyPI) with PyTorch 2.13",
    # torch/distributed/pipelining/schedules.py get_schedule_class: GPipe,
    # 1F1B (single stage), Interleaved1F1B, InterleavedZeroBubble,
    # ZBVZeroBubble (multi-stage).  hpgo's zb-h1 is single-stage: PyTorch
    # has only the multi-stage (interleaved) zero-bubble schedule.
    schedules=("gpipe", "1f1b", "interleaved-1f1b", "zb-v"),
    # FSDP2 always: models/*/parallelize.py calls apply_fsdp_to_decoder at
    # any shard degree ("with shard_degree=1 it is a no-op for the all-gather
    # but still installs the MixedPrecisionPolicy"), so data_parallel_shard_degree
    # x cp shards and data_parallel_replicate_degree replicates (HSDP); no
    # optimizer-only sharding
    zero=(3,),
    zero_hint="torchtitan wraps every model in FSDP2 (models/llama3/parallelize.py "
              "apply_fsdp_to_decoder at any shard degree); to replicate instead of "
              "sharding, give zero=3 with shard_size=cp (data_parallel_shard_degree 1)",
    # FullAC, and SelectiveAC: chosen ops' outputs saved (every other
    # matmul, the attention), hpgo's "selective-op"; not the attention-core
    # recomputation hpgo's "selective" prices
    # (torchtitan/distributed/activation_checkpoint.py)
    recompute=("none", "selective-op", "full"),
    precisions=("bf16", "fp8", "fp32"),
    rules=(
        Rule("torchtitan runs one device mesh for every stage (one data-parallel and one "
             "tensor-parallel size): an uneven plan's stage groups have no torchtitan form",
             "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py ParallelDims: "
             "world_size = pp x dp_replicate x dp_shard x cp x tp",
             lambda p, m, pr: getattr(p, "stages", None) is not None),
        Rule("torchtitan gives every data-parallel rank the same micro-batch: a stage group "
             "whose replicas span GPU types (shares by speed) has no torchtitan form",
             "torchtitan 0.3.0 torchtitan/config/job_config.py: training.local_batch_size, one value for every rank",
             lambda p, m, pr: any(getattr(g, "replicas", None) is not None
                                  for g in getattr(p, "stages", None) or ())),
        Rule("a single-stage schedule (gpipe, 1f1b) runs one stage per rank, a multi-stage "
             "one at least two", f"{_TT} torchtitan/distributed/pipeline_parallel.py: "
             "'Single stage schedule requires exactly 1 stage per rank' / 'Multi-stage "
             "schedule requires at least 2 stages per rank'",
             lambda p, m, pr: p.pp > 1 and ((p.schedule in ("gpipe", "1f1b"))
                                            != (p.virtual_stages == 1))),
        Rule("activation checkpointing wraps every transformer block alike: no partial "
             "recomputation (recompute_layers)",
             f"{_TT} torchtitan/distributed/activation_checkpoint.py "
             "ActivationCheckpointing.apply: every child of model.layers wrapped by the policy",
             lambda p, m, pr: p.recompute_layers > 0),
        Rule("no optimizer-only or activation offloading: FSDP2's CPU offload "
             "(training.enable_cpu_offload) moves the parameters and gradients too",
             f"{_TT} torchtitan/config/configs.py: enable_cpu_offload, 'CPU offloading of "
             "parameters, gradients, and optimizer states in FSDP', its only offload option",
             lambda p, m, pr: p.offload_optimizer or p.offload_activations > 0),
        Rule("context parallelism all-gathers K and V for FlexAttention: no other exchange "
             "(cp_comm 'all_gather')",
             f"{_TT} torchtitan/distributed/context_parallel/api.py apply_cp_to_forward: "
             "FlexAttention's forward wrapped with flex_cp_allgather (SDPA's ring only for "
             "models that build SDPA, no language model: models/common/config_utils.py)",
             lambda p, m, pr: p.cp > 1 and p.cp_comm not in ("all_gather", "p2p")),
        Rule("GPT-OSS runs variable-length attention, which has no context parallelism",
             f"{_TT} torchtitan/distributed/context_parallel/api.py apply_cp_to_forward: "
             "'Variable-length attention CP is not yet supported' (models/gpt_oss: "
             "attn_backend 'varlen')",
             lambda p, m, pr: p.cp > 1 and m is not None and m.attn_sinks),
        Rule("ZBVZeroBubble runs exactly two stages per rank",
             "torch/distributed/pipelining/schedules.py ScheduleZBVZeroBubble: "
             "n_local_stages != 2 raises",
             lambda p, m, pr: p.schedule == "zb-v" and p.virtual_stages != 2),
        Rule("Interleaved1F1B needs the micro-batches in whole rounds of pp",
             "torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B: "
             "n_microbatches % number_of_rounds != 0 raises",
             lambda p, m, pr: p.schedule == "interleaved-1f1b" and p.pp > 1 and
             p.microbatches % max(1, p.microbatches // p.pp) != 0),
        Rule("expert layers are not tensor parallel under expert parallelism (etp = 1)",
             f"{_TT} torchtitan/distributed/parallel_dims.py: sparse mesh (pp, dp_replicate, "
             "efsdp, ep), efsdp = dp_shard * cp * tp / ep",
             lambda p, m, pr: p.ep > 1 and (p.etp or p.tp) != 1),
        Rule("without expert parallelism, experts follow the tensor-parallel layout (etp = tp)",
             f"{_TT} torchtitan/distributed/parallel_dims.py: no expert tensor-parallel degree",
             lambda p, m, pr: p.ep == 1 and p.etp is not None and p.etp != p.tp),
        Rule("the expert-parallel group borrows from the sharded data-parallel, context and "
             "tensor ranks", f"{_TT} torchtitan/config/configs.py ParallelismConfig."
             "expert_parallel_degree: 'dp_shard * cp * tp == efsdp * ep'",
             # dp_shard x cp is the FSDP group: every dp x cp rank, or the
             # hybrid group of shard_size (dp_shard = shard_size / cp)
             lambda p, m, pr: p.ep > 1 and
             ((p.shard_size or p.dp * p.cp) if p.zero == 3 else p.cp) * p.tp % p.ep != 0),
        Rule("the expert-parallel group is the innermost mesh dimension",
             f"{_TT} torchtitan/distributed/parallel_dims.py: ep last in the sparse mesh",
             lambda p, m, pr: p.ep > 1 and p.ep_placement != "inner"),
        Rule("context parallelism splits each sequence into 2 x cp equal chunks",
             "torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py "
             "_HeadTailLoadBalancer: seq_length % (world_size * 2) != 0 raises (torchtitan's "
             "context_parallel_load_balancer 'headtail')",
             lambda p, m, pr: p.cp > 1 and m is not None and m.seq % (2 * p.cp) != 0),
        Rule("hybrid sharding (shard_size) shards inside whole context-parallel groups: "
             "torchtitan's FSDP mesh is dp_shard x cp, replicated over dp_replicate",
             f"{_TT} torchtitan/distributed/parallel_dims.py: fsdp = dp_shard x cp",
             lambda p, m, pr: p.zero == 3 and hybrid_sharded(p) and p.shard_size % p.cp != 0),
        Rule("one MoE token dispatcher: all-to-all (DeepEP is an experiment)",
             f"{_TT} torchtitan/models/*/__init__.py moe_comm_backend",
             lambda p, m, pr: p.moe_dispatcher != "alltoall"),
        Rule("no fp32 RMSNorm module run op by op (kernels 'eager-unfused-norm'): torchtitan's "
             "models build nn.RMSNorm", f"{_TT} torchtitan/models/common/nn_modules.py: "
             "RMSNorm subclasses nn.RMSNorm (models/norms.py's fp32 module of 2024 is gone)",
             lambda p, m, pr: p.kernels == "eager-unfused-norm"),
        Rule("no fused loss kernel outside the compiled loss (cross_entropy='fused' with kernels "
             "'eager' or 'compile-blocks'): torchtitan calls torch's cross_entropy, fused only "
             "when compile's components include the loss",
             f"{_TT} torchtitan/components/loss.py: cross_entropy_loss, compiled when "
             "compile.components names the loss",
             lambda p, m, pr: (p.cross_entropy == "fused"
                               and p.kernels in ("eager", "compile-blocks"))),
        Rule("no fp8-only weights (torchao's float8 training keeps the high-precision weight)",
             f"{_TT} torchtitan/components/quantization/float8.py",
             lambda p, m, pr: p.fp8_params),
        Rule("no float8 all-gather in FSDP (fp8_all_gather): Float8LinearConverter offers the "
             "rowwise recipes only", f"{_TT} torchtitan/components/quantization/float8.py: "
             "enable_fsdp_float8_all_gather and the tensorwise recipe removed by #3127 "
             "(2026-04-27)",
             lambda p, m, pr: getattr(p, "fp8_all_gather", False)),
    ),
    defaults={
        # data_parallel_shard_degree -1 (every rank left over shards)
        "zero": 3,
        # the export turns torch.compile on ([compile] enable)
        "kernels": "compile",
        # compile.enable_async_tensor_parallel default False
        "tp_overlap": "none",
        # torchtitan's models use FlexAttention, whose context parallelism
        # all-gathers K and V (torchtitan/distributed/context_parallel/api.py
        # flex_cp_allgather)
        "cp_comm": "all_gather",
        # fsdp_reshard_after_forward "default": not pp_enabled
        # (torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy);
        # it matters only where FSDP shards the weights (zero 3)
        "reshard_after_forward": lambda p: p.pp == 1 or p.zero < 3,
        "shard_size": 0,
        "overlap_grad_reduce": True,
    },
    launch="torchrun --nproc-per-node 8 --nnodes N -m torchtitan.train --module hpgo_plan "
           "--config hpgo_plan   # hpgo_plan.py on PYTHONPATH",
    # Float8LinearConverter.Config.recipe_name: "rowwise" (the default) or
    # "rowwise_with_gw_hp"; the tensorwise recipe is gone (#3127)
    fp8_recipe="rowwise",
)

# --------------------------------------------------------------- DeepSpeed

def _ds_gradient_path(zero: int, precision: str) -> str:
    """The gradient path DeepSpeed runs a 16-bit model on (engine.py
    get_data_types, _do_optimizer_sanity_check): bf16 without ZeRO or with
    ZeRO 1 through BF16_Optimizer (fp32 accumulation, an fp32 add after each
    micro-batch); fp16 without ZeRO through its FP16 optimizer (16-bit
    gradients accumulated and all-reduced); otherwise the ZeRO optimizer, which
    the export sets to accumulate and reduce the gradients in fp32 as
    Megatron's path is priced."""
    if precision == "bf16" and zero <= 1:
        return "deepspeed_bf16"
    if precision == "fp16" and zero == 0:
        return "megatron_bf16_grads"
    return "megatron"


def _ds_uneven(plan: Any, model: Any) -> bool:
    """Whether a pipelined plan's stages hold other than L / pp transformer
    layers each (its split, or a model whose layers pp does not divide)."""
    split = getattr(plan, "split", None)
    if split is not None:
        n = split[-1]
        if n % plan.pp or tuple(split) != tuple(range(0, n + 1, n // plan.pp)):
            return True
    return model is not None and model.layers % plan.pp != 0


_DS = "DeepSpeed 0.19.8"

DEEPSPEED = Framework(
    name="deepspeed",
    title="DeepSpeed with Megatron-DeepSpeed's pipeline engine",
    version="DeepSpeed 0.19.8 (PyPI), Megatron-DeepSpeed model code",
    # deepspeed/runtime/pipe/schedule.py TrainSchedule: 1F1B, one stage per rank
    schedules=("1f1b",),
    zero=(0, 1, 2, 3),
    recompute=("none", "full"),
    precisions=("bf16", "fp16", "fp32"),
    zero_needs={2: {"pp": 1}, 3: {"pp": 1}},
    rules=(
        Rule("DeepSpeed's pipeline engine runs one data-parallel size for every stage: an "
             "uneven plan's stage groups have no DeepSpeed form",
             "DeepSpeed 0.19.8 deepspeed/runtime/pipe/topology.py PipeDataParallelTopology "
             "(axes pipe x data, every stage the same data-parallel size)",
             lambda p, m, pr: getattr(p, "stages", None) is not None),
        Rule("DeepSpeed gives every data-parallel rank the same micro-batch: a stage group "
             "whose replicas span GPU types (shares by speed) has no DeepSpeed form",
             "DeepSpeed 0.19.8 deepspeed/runtime/config.py: train_micro_batch_size_per_gpu, one value for every rank",
             lambda p, m, pr: any(getattr(g, "replicas", None) is not None
                                  for g in getattr(p, "stages", None) or ())),
        Rule("ZeRO-2 and ZeRO-3 do not run with pipeline stages",
             f"{_DS} deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: assert "
             "zero_optimization_stage() < ZeroStageEnum.gradients",
             lambda p, m, pr: p.pp > 1 and p.zero >= 2),
        Rule("the pipeline holds an equal number of transformer layers per stage: "
             "Megatron-DeepSpeed's GPTModelPipe partitions by counting them, so the layers "
             "must divide into pp stages and a plan's own layer split has no DeepSpeed form",
             f"{_DS} deepspeed/runtime/pipe/module.py PipelineModule._partition_layers "
             "(partition_method 'type:transformer', GPTModelPipe's: utils.partition_balanced "
             "over the transformer layers)",
             lambda p, m, pr: p.pp > 1 and (_ds_uneven(p, m))),
        Rule("ZeRO partitions over the whole data-parallel group: no hybrid sharding "
             "(shard_size; DeepSpeed's MiCS and hpZ sub-groups are other schemes, not priced)",
             f"{_DS} deepspeed/runtime/zero/config.py: mics_shard_size, zero_hpz_partition_size",
             lambda p, m, pr: hybrid_sharded(p)),
        Rule("full recomputation checkpoints every transformer layer (the export's "
             "activation checkpointing, Megatron-DeepSpeed's --checkpoint-activations): no "
             "partial recomputation (recompute_layers)",
             f"{_DS} deepspeed/runtime/pipe/module.py PipelineModule.forward: every layer in a "
             "checkpointed chunk of activation_checkpoint_interval layers, a model-code "
             "argument the JSON export does not carry",
             lambda p, m, pr: p.recompute_layers > 0),
        Rule("Megatron-DeepSpeed's model code runs its own fused kernels (kernels='eager'): the "
             "JSON export turns on no torch.compile",
             f"{_DS} deepspeed/runtime/config.py: the compile section, off unless given, "
             "which the export does not write",
             # "te" is ParallelPlan's default: a plan left at it takes DeepSpeed's
             # ("eager", apply_defaults)
             lambda p, m, pr: p.kernels not in ("eager", "te")),
        Rule("no fused loss kernel (cross_entropy='fused'): Megatron-DeepSpeed's GPT computes "
             "the loss with Megatron's vocab_parallel_cross_entropy, priced by the eager set's "
             "loss",
             "Megatron-DeepSpeed megatron/model/gpt_model.py: post_language_model_processing",
             lambda p, m, pr: p.cross_entropy == "fused"),
        Rule("offloading (offload_optimizer, offload_activations) is not exported: the JSON "
             "writes no zero_optimization.offload_optimizer or cpu_checkpointing, whose "
             "optimizers and transfers hpgo does not price as DeepSpeed runs them",
             f"{_DS} deepspeed/runtime/zero/offload_config.py (ZeRO-Offload), "
             "deepspeed/runtime/activation_checkpointing/config.py (cpu_checkpointing)",
             lambda p, m, pr: p.offload_optimizer or p.offload_activations > 0),
        Rule("one model chunk per pipeline rank (no virtual stages)",
             f"{_DS} deepspeed/runtime/pipe/module.py PipelineModule(num_stages): one "
             "partition per stage rank",
             lambda p, m, pr: p.virtual_stages != 1),
        Rule("no ring-attention context parallelism (DeepSpeed-Ulysses is all-to-all "
             "sequence parallelism)", f"{_DS} deepspeed/sequence/layer.py "
             "DistributedAttention",
             lambda p, m, pr: p.cp > 1),
        Rule("the expert-parallel group divides the data-parallel group",
             f"{_DS} deepspeed/utils/groups.py _create_expert_data_and_model_parallel: "
             "_ensure_divisibility(dp_world_size, expert_parallel_size_)",
             lambda p, m, pr: p.ep > 1 and p.dp % p.ep != 0),
        Rule("no expert tensor parallelism different from tp",
             f"{_DS} deepspeed/moe/layer.py MoE(enable_expert_tensor_parallelism)",
             lambda p, m, pr: p.etp is not None and p.etp not in (1, p.tp)),
        Rule("all-to-all token dispatch only", f"{_DS} deepspeed/moe/sharded_moe.py _AllToAll",
             lambda p, m, pr: p.moe_dispatcher != "alltoall"),
        Rule("no overlap of the MoE all-to-alls with another micro-batch (the MoE layer "
             "runs them in line)", f"{_DS} deepspeed/moe/sharded_moe.py MOELayer.forward",
             lambda p, m, pr: bool(p.overlap_moe_comm)),
        Rule("no fp8-only weights", f"{_DS} deepspeed/runtime/config.py: no fp8 section",
             lambda p, m, pr: p.fp8_params),
        Rule("BF16_Optimizer (optimizer_impl='deepspeed_bf16') runs bf16 models with ZeRO 0 "
             "or 1 only", f"{_DS} deepspeed/runtime/engine.py _do_optimizer_sanity_check: "
             "BFLOAT16 for a bf16 model with fp32 gradient accumulation and no ZeRO or stage 1",
             lambda p, m, pr: p.optimizer_impl == "deepspeed_bf16" and
             (pr == "fp16" or p.zero >= 2)),
        Rule("16-bit gradients of a bf16 model (optimizer_impl='megatron_bf16_grads') need "
             "ZeRO 1: without ZeRO DeepSpeed refuses them outside a pipeline and runs them "
             "through BF16_Optimizer's fp32 master in one",
             f"{_DS} deepspeed/runtime/engine.py _do_optimizer_sanity_check: 'Bfloat16 "
             "wrapper must use a gradient accumulation type of fp32, enable ZeRO to use "
             "Bfloat16 gradient accumulation' (BFLOAT16 with a warning under pipelining)",
             lambda p, m, pr: p.optimizer_impl == "megatron_bf16_grads" and pr == "bf16" and
             p.zero == 0),
        Rule("ZeRO-3 does not run mixture-of-experts layers",
             f"{_DS} deepspeed/runtime/engine.py _configure_zero_optimizer: assert not "
             "self.has_moe_layers, 'MoE not supported with Stage 3'",
             lambda p, m, pr: p.zero >= 3 and (p.ep > 1 or (m is not None and m.experts > 0))),
    ),
    defaults={
        # Megatron-DeepSpeed's fused kernels (apex/Megatron fused softmax,
        # layernorm) without Transformer Engine or torch.compile
        "kernels": "eager",
        "tp_overlap": "none",
        "cp_comm": "a2a",
        "reshard_after_forward": True,
        "shard_size": 0,
        # zero_optimization.overlap_comm (the export sets it from the plan)
        "overlap_grad_reduce": True,
        # Megatron-DeepSpeed's fused attention is the flash-attn package's
        # FlashAttention-2 (--use-flash-attn-v2); it has no cuDNN attention
        "attention": "flash2",
    },
    launch="deepspeed --num_gpus 8 --num_nodes N pretrain_gpt.py --deepspeed "
           "--deepspeed_config ds_config.json <Megatron-DeepSpeed model arguments>",
    # the mixed-precision paths the export names (data_types.grad_accum_dtype,
    # communication_data_type): fp32 accumulation and reduction under ZeRO
    # ("megatron"), BF16_Optimizer ("deepspeed_bf16"), 16-bit accumulation and
    # reduction ("megatron_bf16_grads")
    optimizers=("megatron", "deepspeed_bf16", "megatron_bf16_grads"),
    gradient_path=_ds_gradient_path,
)

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (MEGATRON, TORCHTITAN, DEEPSPEED)}


def get(framework: Any) -> Framework | None:
    """The framework named ``framework`` (None stays None: no framework)."""
    if framework is None or isinstance(framework, Framework):
        return framework
    if not isinstance(framework, str):
        raise TypeError(f"framework must be a str or None, not {type(framework).__name__}")
    fw = FRAMEWORKS.get(framework.strip().lower())
    if fw is None:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)} (or None), "
                         f"got {framework!r}")
    return fw


def problems(framework: Any, plan: Any, model: Any = None,
             precision: str = "bf16") -> list[str]:
    """Why ``framework`` would not run ``plan`` (empty: it would), each
    reason with its source."""
    fw = get(framework)
    if fw is None:
        return []
    out = []
    if plan.schedule not in fw.schedules and plan.pp > 1:
        out.append(f"schedule {plan.schedule!r} is not offered by {fw.title} "
                   f"(offered: {', '.join(fw.schedules)})")
    if plan.zero not in fw.zero:
        out.append(f"zero={plan.zero} is not offered by {fw.title} (offered: "
                   f"{', '.join(map(str, fw.zero))}){_hint(fw, 'zero')}")
    if plan.recompute not in fw.recompute:
        out.append(f"recompute={plan.recompute!r} is not offered by {fw.title}")
    if precision not in fw.precisions:
        out.append(f"precision {precision!r} is not offered by {fw.title} (offered: "
                   f"{', '.join(fw.precisions)})")
    opt = getattr(plan, "optimizer_impl", "megatron")
    if opt not in fw.optimizers:
        out.append(f"optimizer_impl={opt!r} ({_OPTIMIZERS.get(opt, opt)}) is not offered by "
                   f"{fw.title} (offered: {', '.join(fw.optimizers)})")
    for r in fw.rules:
        if r.refuses(plan, model, precision):
            out.append(f"{r.what} [{r.source}]")
    return out


def check(framework: Any, plan: Any, model: Any = None, precision: str = "bf16") -> None:
    """Raise ValueError naming every rule of ``framework`` the plan breaks."""
    fw = get(framework)
    bad = problems(fw, plan, model, precision)
    if bad:
        raise ValueError(f"{fw.title} does not run {plan.describe()}:\n  - " +  # type: ignore
                         "\n  - ".join(bad))


def runtime_defaults(framework: Any, plan: Any) -> dict[str, Any]:
    """The framework's runtime defaults for ``plan``, keyed by ParallelPlan
    field names (all of them, also fields this ParallelPlan lacks)."""
    fw = get(framework)
    if fw is None:
        return {}
    return {k: (v(plan) if callable(v) else v) for k, v in fw.defaults.items()}


def _hint(fw: Framework, field: str) -> str:
    """What to give instead, appended to the refusal of ``field``'s value."""
    return f": {fw.zero_hint}" if field == "zero" and fw.zero_hint else ""


def apply_defaults(framework: Any, plan: Any) -> Any:
    """``plan`` with the framework's runtime defaults set on the fields the
    ParallelPlan has and leaves at ParallelPlan's own default (a value the
    plan states is kept; :func:`runtime_defaults` lists every field)."""
    fw = get(framework)
    if fw is None:
        return plan
    unset = {f.name: f.default for f in dataclasses.fields(plan)}
    # the fixed values first, then those that depend on the plan, on the plan
    # with the fixed ones set (torchtitan's resharding policy reads the ZeRO
    # stage its default sets)
    for dependent in (False, True):
        changes = {}
        for k, v in fw.defaults.items():
            if callable(v) != dependent or k not in unset or getattr(plan, k) != unset[k]:
                continue
            value = v(plan) if dependent else v
            if value != unset[k]:
                changes[k] = value
        if changes:
            plan = plan.with_(**changes)
    return plan


def apply_gradient_path(framework: Any, plan: Any, precision: str) -> Any:
    """``plan`` with the gradient path the framework runs at its ZeRO stage
    and ``precision`` (:attr:`Framework.gradient_path`), where the plan
    leaves ParallelPlan's default ``optimizer_impl``."""
    default = next((f.default for f in dataclasses.fields(plan) if f.name == "optimizer_impl"),
                   None)
    if default is None:
        return plan
    path = gradient_path_of(framework, plan.zero, precision, plan.optimizer_impl)
    return plan if path == plan.optimizer_impl else plan.with_(optimizer_impl=path)


def apply_fp8_recipe(framework: Any, plan: Any, precision: str) -> Any:
    """``plan`` with the float8 recipe the framework runs (torchtitan 0.3:
    torchao's rowwise) where the precision is fp8 and the plan leaves
    ParallelPlan's default ``fp8_recipe``; call it after
    :func:`apply_defaults` (the recipe needs the framework's kernel set)."""
    default = next((f.default for f in dataclasses.fields(plan) if f.name == "fp8_recipe"), None)
    if default is None:
        return plan
    recipe = fp8_recipe_of(framework, precision, plan.fp8_recipe, plan.kernels,
                           getattr(plan, "fp8_all_gather", False), default)
    return plan if recipe == plan.fp8_recipe else plan.with_(fp8_recipe=recipe)


def fp8_recipe_of(framework: Any, precision: str, recipe: str, kernels: str,
                  fp8_all_gather: bool = False, default: str = "tensorwise") -> str:
    """The float8 recipe a plan with ``recipe`` on ``kernels`` is priced on
    for ``framework``: the framework's own where the precision is fp8 and
    ``recipe`` is ParallelPlan's ``default``, else it (also under a float8
    all-gather or Transformer Engine, which the rules refuse)."""
    fw = get(framework)
    if fw is None or fw.fp8_recipe is None or precision != "fp8" or recipe != default or \
            fp8_all_gather or kernels == "te":
        return recipe
    return fw.fp8_recipe


def gradient_path_of(framework: Any, zero: int, precision: str, optimizer_impl: str) -> str:
    """The gradient path a plan at ZeRO stage ``zero`` with ``optimizer_impl``
    is priced on for ``framework``: the framework's own where
    ``optimizer_impl`` is ParallelPlan's default (``"megatron"``), else it."""
    fw = get(framework)
    if fw is None or fw.gradient_path is None or precision == "fp32" or \
            optimizer_impl != "megatron":
        return optimizer_impl
    return fw.gradient_path(zero, precision)


def search_spaces(framework: Any, fixed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Fixed-choice sub-searches whose union holds every plan the framework
    offers (schedule x ZeRO stage, with the fixed sizes a stage needs),
    intersected with the user's ``fixed`` choices (None: free).  A pipeline
    of one stage runs no schedule: the 1F1B sub-search holds those plans."""
    fw = get(framework)
    if fw is None:
        return [dict(fixed)]
    spaces = []
    schedules = [fixed["schedule"]] if fixed.get("schedule") is not None else \
        [s for s in fw.schedules if s != "gpipe"]  # the search runs gpipe only when fixed
    zeros = [fixed["zero"]] if fixed.get("zero") is not None else list(fw.zero)
    # recomputation modes: split only where the framework lacks one of the
    # three the search offers (selective-op is simulated, not searched)
    searched = ("none", "selective", "full")
    recomputes = [fixed.get("recompute")] if fixed.get("recompute") is not None or \
        set(searched) <= set(fw.recompute) else [r for r in fw.recompute if r in searched]
    for s in schedules:
        for z in zeros:
            for rc in recomputes:
                space = dict(fixed, schedule=s, zero=z, recompute=rc)
                ok = True
                for k, v in fw.zero_needs.get(z, {}).items():
                    if space.get(k) is None:
                        space[k] = v
                    elif space[k] != v:
                        ok = False
                if ok:
                    spaces.append(space)
    return spaces


def refuse_fixed(framework: Any, fixed: Mapping[str, Any], precision: str) -> None:
    """Raise ValueError when a fixed search choice is one the framework
    does not offer (schedule, ZeRO stage, recomputation, precision)."""
    fw = get(framework)
    if fw is None:
        return
    for key, offered in (("schedule", fw.schedules), ("zero", fw.zero),
                         ("recompute", fw.recompute)):
        v = fixed.get(key)
        if v is not None and v not in offered:
            raise ValueError(f"{key}={v!r} is not offered by {fw.title} (offered: "
                             f"{', '.join(map(str, offered))}){_hint(fw, key)}")
    if precision not in fw.precisions:
        raise ValueError(f"precision {precision!r} is not offered by {fw.title} (offered: "
                         f"{', '.join(fw.precisions)})")
    opt = fixed.get("optimizer_impl")
    if opt is not None and opt not in fw.optimizers:
        raise ValueError(f"{fw.title} does not run optimizer_impl={opt!r} "
                         f"({_OPTIMIZERS.get(opt, opt)}; it runs {', '.join(fw.optimizers)})")
