"""Exports of a plan (and its model) to the training frameworks.

:meth:`hpgo.ParallelPlan.megatron_args`, :meth:`~hpgo.ParallelPlan.torchtitan_config`
and :meth:`~hpgo.ParallelPlan.deepspeed_json` call these.  Each first checks the plan
against the framework's rules (:mod:`hpgo.frameworks`) and refuses, naming the
rule, a plan the framework would not run; what it writes reproduces the plan
(parallel sizes, virtual stages, the layer split, recomputation, sharding,
overlaps) and, where the framework takes the model's shape as settings, the
model.  docs/exports.md names the versions and shows the launch commands.
"""
from __future__ import annotations

import json
import os
from typing import Any

from . import _files
from . import frameworks as _fw
from .workmodel import Transformer

__all__ = ["megatron_args", "torchtitan_config", "deepspeed_json", "stage_layers",
           "TORCHTITAN_MODELS"]


def stage_layers(plan: Any, model: Any) -> list[int]:
    """Layers of every model stage (pp x virtual_stages, in model order):
    the plan's split, or hpgo's even split with the remainder on the
    middle stages (as the simulator lays it out)."""
    n = model.layers
    K = plan.pp * plan.virtual_stages
    if plan.split is not None:
        b = list(plan.split)
        if len(b) != K + 1 or b[0] != 0 or b[-1] != n or any(y < x for x, y in zip(b, b[1:])):
            raise ValueError(f"the plan's split does not cover the model's {n} layers")
        return [y - x for x, y in zip(b, b[1:])]
    base, extra = divmod(n, K)
    counts = [base] * K
    for k in list(range(1, K - 1)) + [0, K - 1]:
        if extra == 0:
            break
        counts[k] += 1
        extra -= 1
    return counts


# ---------------------------------------------------------------- Megatron

def _vocab_divisor(vocab: int, tp: int) -> int | None:
    # Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by
    # x tp (megatron/training/tokenizer: _vocab_size_with_padding); the largest
    # power of two up to Megatron's default 128 that keeps the real vocabulary
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if vocab % (d * tp) == 0:
            return d
    return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def megatron_args(plan: Any, model: Any = None, *, precision: str = "bf16") -> str:
    """Megatron-LM command-line arguments of ``plan`` and, for a
    transformer, of its whole shape (Megatron-LM core_v0.19.0)."""
    if precision not in ("bf16", "fp16", "fp8"):
        raise ValueError("Megatron-LM trains in bf16, fp16 or fp8")
    t = model if isinstance(model, Transformer) else None
    _fw.check("megatron", plan, t, precision)
    notes: list[str] = []
    a = [f"--tensor-model-parallel-size {plan.tp}", f"--pipeline-model-parallel-size {plan.pp}"]
    if plan.cp > 1:
        a.append(f"--context-parallel-size {plan.cp}")
    if plan.ep > 1:
        a.append(f"--expert-model-parallel-size {plan.ep}")
    if plan.etp is not None and plan.etp != plan.tp or plan.ep > 1:
        a.append(f"--expert-tensor-parallel-size {plan.etp or plan.tp}")
    a.append(f"--micro-batch-size {plan.micro_batch} --global-batch-size {plan.global_batch}")
    K = plan.pp * plan.virtual_stages
    if K > 1 and model is not None:
        counts = stage_layers(plan, model)
        mtp = t.mtp if t is not None else 0
        if len(set(counts)) == 1 and not mtp:
            if plan.virtual_stages > 1:
                a.append(f"--num-layers-per-virtual-pipeline-stage {counts[0]}")
        else:
            # the exact split: one '|'-separated entry per model stage, in
            # model order (stage k on rank k % pp), E embedding, t a layer,
            # m a multi-token-prediction module, L the loss
            # (megatron/core/transformer/pipeline_parallel_layer_layout.py)
            stages = ["t" * c for c in counts]
            stages[0] = "E" + stages[0]
            stages[-1] = stages[-1] + "m" * mtp + "L"
            a.append(f'--pipeline-model-parallel-layout "{"|".join(stages)}"')
    elif plan.virtual_stages > 1:
        a.append(f"--num-virtual-stages-per-pipeline-rank {plan.virtual_stages}")
    if plan.sequence_parallel and plan.tp > 1:
        a.append("--sequence-parallel")
    if plan.recompute == "selective":
        if t is not None and t.flash:
            # with fused attention hpgo's selective recomputation is
            # Megatron-Core's module list (docs/moe.md)
            mods = ["layernorm"] + (["moe_act"] if t.experts else []) + \
                (["mla_up_proj"] if t.mla else [])
            a.append("--recompute-granularity selective --recompute-modules " + " ".join(mods))
        else:
            a.append("--recompute-activations")
    elif plan.recompute == "full":
        a.append(f"--recompute-granularity full --recompute-method "
                 f"{getattr(plan, 'recompute_method', 'uniform')} --recompute-num-layers "
                 f"{getattr(plan, 'recompute_layers', 0) or 1}")
    if getattr(plan, "tp_overlap", "none") == "te":
        a.append("--tp-comm-overlap")
    if plan.cp > 1 and getattr(plan, "cp_comm", "p2p") != "p2p":
        a.append(f"--cp-comm-type {plan.cp_comm}")
    if plan.zero == 1:
        a.append("--use-distributed-optimizer")
        if plan.offload_optimizer:
            # the optimizer state and its step on the host (HybridDeviceOptimizer,
            # the whole state: --optimizer-offload-fraction's default 1.0)
            a.append("--optimizer-cpu-offload --use-precision-aware-optimizer")
        if _fw.hybrid_sharded(plan):
            # the optimizer states sharded inside groups of shard_size replicas,
            # one distributed-optimizer instance a group (param_and_grad_buffer.py:
            # reduce-scatter inside, all-reduce across)
            a.append("--num-distributed-optimizer-instances "
                     f"{plan.dp * plan.cp // plan.shard_size}")
    elif plan.zero == 3:
        # arguments.py under --use-torch-fsdp2: no gradient-accumulation fusion,
        # torch_dist checkpoints; FSDP overlaps its own collectives
        a.append("--use-torch-fsdp2 --no-gradient-accumulation-fusion --ckpt-format torch_dist")
        if not plan.reshard_after_forward:
            # the gathered weights kept from the forward to the backward
            a.append("--torch-fsdp2-no-reshard-after-forward")
    if plan.overlap_grad_reduce and plan.dp * plan.cp > 1 and plan.zero != 3:
        a.append("--overlap-grad-reduce" + (" --overlap-param-gather" if plan.zero else ""))
    # the gradient path (arguments.py validate_args): bf16 accumulates and
    # reduces in fp32 unless --grad-reduce-in-bf16; fp16 in fp16 unless
    # --accumulate-allreduce-grads-in-fp32
    bits16 = getattr(plan, "optimizer_impl", "megatron") == "megatron_bf16_grads"
    if bits16 and precision != "fp16":
        a.append("--grad-reduce-in-bf16")
    elif not bits16 and precision == "fp16":
        a.append("--accumulate-allreduce-grads-in-fp32")
    a.append({"bf16": "--bf16", "fp16": "--fp16", "fp8": "--bf16 --fp8-format hybrid"}[precision])
    if precision == "fp8" and plan.fp8_params:
        a.append("--fp8-param-gather")
    if t is not None:
        a += _megatron_model(plan, t, notes)
    elif model is not None:
        a.append(f"--num-layers {model.layers}")
    if plan.overlap_moe_comm and t is not None and t.experts:
        a.append("--overlap-moe-expert-parallel-comm")
    if plan.schedule == "gpipe" and plan.pp > 1:
        notes.append("# gpipe: Megatron-LM runs 1F1B (same time, less memory)")
    if plan.zero == 3:
        notes.append("# FSDP2 needs CUDA_DEVICE_MAX_CONNECTIONS > 1 (arguments.py)")
    return " \\\n".join(a) + ("\n" + "\n".join(notes) if notes else "")


def _megatron_model(plan: Any, m: Transformer, notes: list[str]) -> list[str]:
    a = [f"--num-layers {m.layers} --hidden-size {m.hidden} --ffn-hidden-size {m.ffn} "
         f"--num-attention-heads {m.heads}"]
    if not m.mla:
        a.append(f"--kv-channels {m.head_dim}")
    if m.kv_heads != m.heads:
        a.append(f"--group-query-attention --num-query-groups {m.kv_heads}")
    a.append(f"--seq-length {m.seq} --max-position-embeddings {m.seq}")
    d = _vocab_divisor(m.vocab, plan.tp)
    if d is None:
        d = 1
        notes.append(f"# Megatron pads the vocabulary ({m.vocab}) to a multiple of tp = {plan.tp}")
    a.append(f"--vocab-size {m.vocab} --make-vocab-size-divisible-by {d}")
    if m.mlp == "swiglu":
        a.append("--swiglu")
    if m.norm == "rmsnorm":
        a.append("--normalization RMSNorm")
    # Megatron's add_bias_linear puts biases on every linear layer (attention,
    # MLP, experts, router); add_qkv_bias on q, k and v alone
    # (transformer_config.py add_bias_linear / add_qkv_bias)
    has_dense = not m.experts or m.dense_first > 0 or m.moe_every > 1
    if m.bias:
        pass  # GPT: every linear layer has a bias (Megatron's default)
    elif m.attn_bias or m.expert_bias:
        if has_dense or not (m.attn_bias and m.expert_bias and m.router_bias):
            raise ValueError("Megatron puts biases on every linear layer or on q, k and v "
                             f"only: this model's (attention {m.attn_bias}, experts "
                             f"{m.expert_bias}, router {m.router_bias}, dense MLPs "
                             f"{has_dense}) are neither")
    else:
        a.append("--disable-bias-linear")
        if m.qkv_bias:
            a.append("--add-qkv-bias")
    if not m.tied:
        a.append("--untie-embeddings-and-output-weights")
    if m.learned_pos:
        a.append("--position-embedding-type learned_absolute")
    else:
        sc = m.rope_scaling_dict
        kind = sc["rope_type"] if sc else None
        if m.mla:
            rope = "yarn" if kind == "yarn" else "rope"
            a.append(f"--position-embedding-type rope --rope-type {rope}")
        elif kind == "yarn":
            a.append("--position-embedding-type yarn")
        else:
            a.append("--position-embedding-type rope")
        if m.rope_theta is not None:
            if not float(m.rope_theta).is_integer():
                raise ValueError(f"Megatron's --rotary-base is an integer, not {m.rope_theta}")
            a.append(f"--rotary-base {int(m.rope_theta)}")
        if kind == "llama3":
            # Megatron's Llama 3.1 scaling has fixed low/high frequency factors 1
            # and 4 and an original length of 8192 (megatron/core/models/common/
            # embeddings/rope_utils.py apply_rope_scaling)
            fixed = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}
            if any(sc.get(k, v) != v for k, v in fixed.items()):
                raise ValueError(f"Megatron's Llama 3 rope scaling fixes {fixed}; this model "
                                 f"has {sc}")
            a.append(f"--use-rope-scaling --rope-scaling-factor {_num(sc['factor'])}")
        elif kind == "yarn":
            a.append(f"--rotary-scaling-factor {_num(sc['factor'])}")
            for k, flag in (("original_max_position_embeddings",
                             "--yarn-original-max-position-embeddings"),
                            ("beta_fast", "--yarn-beta-fast"), ("beta_slow", "--yarn-beta-slow"),
                            ("mscale", "--mscale"), ("mscale_all_dim", "--mscale-all-dim")):
                if k in sc:
                    a.append(f"{flag} {_num(sc[k])}")
            if "truncate" in sc:  # Hugging Face's truncate: round the correction range
                a.append("--yarn-correction-range-round-to-int" if sc["truncate"]
                         else "--no-yarn-correction-range-round-to-int")
        elif kind == "linear":
            raise ValueError("Megatron-LM has no linear rope scaling argument")
    if not m.dropout:
        a.append("--attention-dropout 0.0 --hidden-dropout 0.0")
    # the attention core priced: fused attention (attention="auto") is what
    # Transformer Engine's own choice runs (AttnBackend.auto, the default: cuDNN's
    # FusedAttention on Hopper, FlashAttention on the A100), FlashAttention-2 the
    # flash back end (the flash-attn package); without fused attention the
    # unfused core (scores, softmax and dropout apart)
    if not m.flash:
        a.append("--attention-backend unfused")
    elif getattr(plan, "attention", "auto") == "flash2":
        a.append("--attention-backend flash")
    if m.qk_norm:
        a.append("--qk-layernorm")
    if m.attn_sinks:
        # a learned sink logit per head (transformer_config.py softmax_type)
        a.append("--softmax-type learnable")
    if m.window is not None and m.window < m.seq:
        a.append(f"--window-size {m.window},0")
        if m.window_every > 1:
            # 1 = sliding-window layer (transformer/utils.py is_layer_window_attention)
            pat = [int(i % m.window_every == 0) for i in range(m.layers)]
            a.append(f'--window-attn-skip-freq "[{",".join(map(str, pat))}]"')
    if m.experts:
        a.append(f"--num-experts {m.experts} --moe-router-topk {m.topk} "
                 f"--moe-ffn-hidden-size {m.expert_ffn} --moe-grouped-gemm "
                 + ("--moe-token-dispatcher-type flex --moe-enable-deepep"
                    if plan.moe_dispatcher == "deepep" else "--moe-token-dispatcher-type alltoall"))
        if m.routing_groups > 1:
            a.append(f"--moe-router-num-groups {m.routing_groups} "
                     f"--moe-router-group-topk {m.routing_group_topk}")
        if m.router_bias and not (m.bias or m.attn_bias):
            # DeepSeek-V3's e_score_correction_bias: sigmoid scores with a
            # per-expert bias (transformer_config.py moe_router_enable_expert_bias)
            a.append("--moe-router-score-function sigmoid --moe-router-enable-expert-bias")
        if m.shared_experts:
            a.append(f"--moe-shared-expert-intermediate-size {m.shared_experts * m.shared_ffn}")
        if m.dense_first or m.moe_every > 1:
            pattern = [int(i >= m.dense_first and (i + 1) % m.moe_every == 0)
                       for i in range(m.layers)]
            a.append(f"--moe-layer-freq \"[{','.join(map(str, pattern))}]\"")
        if m.capacity_factor:
            a.append(f"--moe-expert-capacity-factor {m.capacity_factor:g}")
    if m.mla:
        a.append(f"--multi-latent-attention --q-lora-rank {m.q_lora} "
                 f"--kv-lora-rank {m.kv_lora} --qk-head-dim {m.qk_nope} "
                 f"--qk-pos-emb-head-dim {m.qk_rope} --v-head-dim {m.v_head}")
    if m.mtp:
        a.append(f"--mtp-num-layers {m.mtp}")
    return a


# -------------------------------------------------------------- torchtitan

#: torchtitan 0.3.0 models (torchtitan/models/<family>/__init__.py flavors
#: and config_registry.py functions) by the shape hpgo matches them on:
#: (hidden, layers, heads, kv_heads, vocab, experts, topk, expert_ffn)
TORCHTITAN_MODELS: dict[tuple, tuple[str, str, str]] = {
    (4096, 32, 32, 8, 128256, 0, 0, None): ("llama3", "8B", "llama3_8b"),
    (8192, 80, 64, 8, 128256, 0, 0, None): ("llama3", "70B", "llama3_70b"),
    (16384, 126, 128, 8, 128256, 0, 0, None): ("llama3", "405B", "llama3_405b"),
    (2048, 48, 32, 4, 151936, 128, 8, 768): ("qwen3", "30B-A3B", "qwen3_30b_a3b"),
    (4096, 94, 64, 4, 151936, 128, 8, 1536): ("qwen3", "235B-A22B", "qwen3_30b_a3b"),
    (7168, 61, 128, 128, 129280, 256, 8, 2048): ("deepseek_v3", "671B", "deepseek_v3_671b"),
    (2880, 36, 64, 8, 201088, 128, 4, 2880): ("gpt_oss", "120b", "gpt_oss_120b"),
}


def _titan_model(m: Any) -> tuple[str, str, str]:
    if not isinstance(m, Transformer):
        raise ValueError("torchtitan builds its models from its own model code: give the "
                         "hpgo.Transformer (one of torchtitan's models)")
    key = (m.hidden, m.layers, m.heads, m.kv_heads, m.vocab, m.experts, m.topk,
           m.expert_ffn if m.experts else None)
    if key not in TORCHTITAN_MODELS:
        known = ", ".join(f"{f} {v}" for f, v, _ in TORCHTITAN_MODELS.values())
        raise ValueError(f"torchtitan 0.3.0 has no model of this shape (its models: {known}); "
                         "torchtitan's model shapes are code, not configuration")
    return TORCHTITAN_MODELS[key]


_TT_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B",
                 "zb-v": "ZBVZeroBubble"}


def torchtitan_config(plan: Any, model: Any, *, precision: str = "bf16",
                      name: str = "hpgo_plan") -> str:
    """A torchtitan 0.3.0 configuration module: Python source defining
    ``name()`` -> ``Trainer.Config`` (torchtitan's config format: a
    function its ``--module`` / ``--config`` arguments load), starting from
    torchtitan's own configuration of the model and setting the plan."""
    if not name.isidentifier():
        raise ValueError(f"name must be a Python identifier, got {name!r}")
    # the plan as torchtitan runs it and simulate(framework="torchtitan")
    # prices it: its defaults (FSDP2, torch.compile, its resharding policy and
    # float8 recipe) where the plan leaves ParallelPlan's
    plan = _fw.apply_fp8_recipe("torchtitan", _fw.apply_defaults("torchtitan", plan), precision)
    _fw.check("torchtitan", plan, model if isinstance(model, Transformer) else None, precision)
    family, flavor, base = _titan_model(model)
    fsdp = plan.zero == 3
    k = getattr(plan, "shard_size", 0)
    replicate = (plan.dp * plan.cp // k if k else 1) if fsdp else plan.dp
    pipelined = plan.pp > 1
    # local_batch_size: samples per data-parallel rank and optimizer step; with
    # pipeline stages one step runs all micro-batches, without them torchtitan
    # accumulates gradients over global / (local x dp) steps
    local = plan.micro_batch * plan.microbatches if pipelined else plan.micro_batch
    lines = [
        f'"""torchtitan 0.3.0 configuration of the hpgo plan {plan.describe()}',
        f"on {plan.gpus} GPUs for {getattr(model, 'name', '') or 'the model'}",
        f"(torchtitan's {family} {flavor}).  Launch:",
        f"  torchrun --nproc-per-node <GPUs per node> --nnodes <nodes> -m torchtitan.train "
        f"--module {name} --config {name}",
        "Attention: the model's torchtitan default (FlexAttention, or varlen FlashAttention,",
        "masked by document); hpgo priced whole-sequence causal attention on "
        + ("FlashAttention-2" if plan.attention == "flash2"
           or plan.kernels in ("compile-blocks", "compile-fa2") else "cuDNN's fused kernels")
        + " (docs/exports.md).",
        '"""',
        "from torchtitan.config import ParallelismConfig",
        f"from torchtitan.models.{family} import model_registry",
        f"from torchtitan.models.{family}.config_registry import {base}",
    ]
    if precision == "fp8":
        lines.append("from torchtitan.components.quantization import Float8LinearConverter")
    if plan.recompute == "full":
        lines.append("from torchtitan.distributed.activation_checkpoint import FullAC")
    elif plan.recompute == "selective-op":
        lines.append("from torchtitan.distributed.activation_checkpoint import SelectiveAC")
    lines += ["", "", f"def {name}():", f"    config = {base}()"]
    # the float8 recipe (frameworks.apply_fp8_recipe above: rowwise for a plan
    # left at the tensorwise default, Float8LinearConverter's default)
    conv = (f"[Float8LinearConverter.Config(recipe_name={plan.fp8_recipe!r}, "
            "filter_fqns=['lm_head'], "
            f"model_compile_enabled={plan.kernels != 'eager'})]" if precision == "fp8" else "None")
    lines.append(f'    config.model_spec = model_registry("{flavor}", converters={conv})')
    par = {
        # FSDP2 over dp_shard x cp, replicated over dp_replicate (HSDP with
        # shard_size: groups of shard_size replicas, parallel_dims.py)
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": plan.dp // replicate if fsdp else 1,
        "tensor_parallel_degree": plan.tp,
        "enable_sequence_parallel": bool(plan.sequence_parallel),
        "context_parallel_degree": plan.cp,
        "expert_parallel_degree": plan.ep,
        "pipeline_parallel_degree": plan.pp,
    }
    # the plan's resharding where torchtitan's "default" policy (reshard unless
    # pipelined, distributed/fsdp.py) would do otherwise; a plan at
    # ParallelPlan's default has torchtitan's (above)
    rs = plan.reshard_after_forward
    if fsdp and rs != (not pipelined):
        par["fsdp_reshard_after_forward"] = "always" if rs else "never"
    if pipelined:
        counts = stage_layers(plan, model)
        fqns = []
        first = 0
        for k, c in enumerate(counts):
            part = (["tok_embeddings"] if k == 0 else []) + \
                [f"layers.{i}" for i in range(first, first + c)] + \
                (["norm", "lm_head"] if k == len(counts) - 1 else [])
            first += c
            fqns.append(part)
        par["pipeline_parallel_schedule"] = _TT_SCHEDULES[plan.schedule]
        par["pipeline_parallel_microbatch_size"] = plan.micro_batch
        # the exact layer split, one list of module names per model stage
        # (ParallelismConfig.module_fqns_per_model_part)
        par["module_fqns_per_model_part"] = fqns
    lines.append("    config.parallelism = ParallelismConfig(")
    for k, v in par.items():
        lines.append(f"        {k}={v!r},")
    lines.append("    )")
    lines += [f"    config.training.seq_len = {model.seq}",
              f"    config.training.local_batch_size = {local}",
              f"    config.training.global_batch_size = {plan.global_batch}",
              f'    config.training.mixed_precision_param = '
              f'"{"float32" if precision == "fp32" else "bfloat16"}"']
    # hpgo prices the step without CUDA graphs (docs/training-model.md, "Kernel
    # sets"); torchtitan also refuses them under pipelining and with an
    # expert-parallel dispatcher that syncs on the host, its default
    # all-to-all (trainer.py, _validate_cuda_graphs)
    lines.append("    config.training.disable_cuda_graphs = True  # as simulated")
    ac = {"full": "FullAC.Config()", "selective-op": "SelectiveAC.Config()"}
    lines.append("    config.activation_checkpoint = " + ac.get(plan.recompute, "None"))
    # compile-blocks: the blocks compiled, the loss eager (torchtitan's 2024 runs);
    # torchtitan 0.3 runs SDPA on cuDNN first, so compile-fa2 exports as compile
    comps = '["model"]' if plan.kernels == "compile-blocks" else '["model", "loss"]'
    lines += [f"    config.compile.enable = {plan.kernels != 'eager'}",
              f"    config.compile.components = {comps}",
              f"    config.compile.enable_async_tensor_parallel = {plan.tp_overlap == 'async'}",
              "    return config", ""]
    return "\n".join(lines)


# --------------------------------------------------------------- DeepSpeed

def _deepspeed_stage3(plan: Any, model: Any) -> dict[str, int]:
    """ZeRO-3's bucket settings that make DeepSpeed gather and scatter as
    the plan was simulated: a block at a time.

    DeepSpeed's ZeRO-3 (``partitioned_param_coordinator.py``) gathers the
    parameters module by module as each is called, and prefetches the next
    ones in the trace of the first step up to ``stage3_prefetch_bucket_size``
    elements while fewer than ``stage3_max_live_parameters`` are gathered; it
    releases a module's parameters after it ran unless they are used again
    within ``stage3_max_reuse_distance`` elements; it reduce-scatters the
    gradients in buckets of ``reduce_bucket_size`` elements, every
    micro-batch.  hpgo prices ZeRO-3 as FSDP runs it: one block's weights
    gathered ahead of the block that runs (three blocks held at most),
    released after the forward unless ``reshard_after_forward`` is off (then
    held to the backward), one block's gradients reduce-scattered at a time
    (``memory.c``, ``engine.c``).  The sizes below are those of one block on
    one GPU (its tensor-parallel shard).  Parameters below
    ``stage3_param_persistence_threshold`` (DeepSpeed's default 10^5: the
    norms) would stay whole on every GPU; hpgo shards them all, so it is 0."""
    if not isinstance(model, Transformer):
        raise ValueError("a ZeRO-3 plan's DeepSpeed configuration sizes its gather and "
                         "reduce-scatter buckets to one block of the model: pass model= "
                         "(a hpgo.Transformer)")
    final_norm = (2 if model.norm == "layernorm" else 1) * model.hidden
    block = -(-(model.parameters - model.embedding_parameters - final_norm) //
              (model.layers * plan.tp))
    whole = -(-model.parameters // plan.tp)
    if plan.reshard_after_forward:
        live, reuse = 3 * block, 0
    else:
        # every gathered weight kept from its forward to its backward: reused
        # within the two passes over the GPU's parameters
        live, reuse = whole + block, 2 * whole
    return {"reduce_bucket_size": block,
            "stage3_prefetch_bucket_size": block,
            "stage3_max_live_parameters": live,
            "stage3_max_reuse_distance": reuse,
            "stage3_param_persistence_threshold": 0}


def deepspeed_json(plan: Any, path: str | os.PathLike | None = None, *,
                   precision: str = "bf16", model: Any = None) -> str:
    """DeepSpeed configuration JSON (DeepSpeed 0.19.8) for the plan run by
    Megatron-DeepSpeed's pipeline engine: batch sizes, ZeRO stage, precision,
    activation checkpointing; written to ``path`` when given.  Tensor and
    pipeline sizes are the model code's (Megatron-DeepSpeed's
    --tensor-model-parallel-size and PipelineModule(num_stages=pp)).  A
    ZeRO-3 plan needs ``model``: its gather and reduce-scatter buckets are
    set to one block, as the plan was simulated (:func:`_deepspeed_stage3`).
    A plan at ParallelPlan's default ``optimizer_impl`` gets the gradient path
    DeepSpeed runs at its ZeRO stage (:func:`hpgo.frameworks.apply_gradient_path`);
    ``data_types.grad_accum_dtype`` and ``communication_data_type`` name it."""
    if precision not in ("bf16", "fp16", "fp32"):
        raise ValueError("DeepSpeed precision: bf16, fp16 or fp32")
    plan = _fw.apply_gradient_path("deepspeed", plan, precision)
    _fw.check("deepspeed", plan, model if isinstance(model, Transformer) else None, precision)
    zero: dict[str, Any] = {"stage": plan.zero, "overlap_comm": bool(plan.overlap_grad_reduce)}
    if plan.zero >= 3:
        zero.update(_deepspeed_stage3(plan, model))
    cfg: dict[str, Any] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.microbatches,
        "zero_optimization": zero,
    }
    if precision != "fp32":
        cfg[precision] = {"enabled": True}
        # the gradient path simulated (engine.py get_data_types and
        # communication_data_type): fp32 accumulation and reduction (Megatron's
        # path, BF16_Optimizer's), or 16-bit; DeepSpeed's own defaults reduce
        # in the model's 16-bit type and, under ZeRO, accumulate in it
        acc = precision if plan.optimizer_impl == "megatron_bf16_grads" else "fp32"
        cfg["data_types"] = {"grad_accum_dtype": acc}
        cfg["communication_data_type"] = acc
    if plan.recompute == "full":
        cfg["activation_checkpointing"] = {
            "partition_activations": bool(plan.sequence_parallel and plan.tp > 1),
            "contiguous_memory_optimization": False, "cpu_checkpointing": False}
    text = json.dumps(cfg, indent=2) + "\n"
    if path is not None:
        _files.atomic_write(path, text)
    return text
