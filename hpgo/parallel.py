"""The neutral parallel plan and the training-step simulator.

A :class:`ParallelPlan` says how one model is trained on a cluster: tensor
(``tp``), pipeline (``pp``) and data (``dp``) parallel sizes, virtual stages,
micro-batch and global batch, schedule, recomputation, sequence
parallelism, ZeRO stage and the layer split.  :func:`simulate` runs one
training step of a model on a cluster with a plan in the C core (one
engine for every schedule) and returns a :class:`StepResult` with the
iteration time, throughput, MFU, per-device busy time and bubbles, the
memory breakdown with its verdict, and the timeline::

    m = hpgo.transformer("gpt3-175b")
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=8)
    p = hpgo.ParallelPlan(tp=8, pp=8, virtual_stages=3, micro_batch=1, global_batch=64,
                          schedule="interleaved-1f1b", recompute="selective",
                          sequence_parallel=True)
    r = hpgo.simulate(m, c, p)
    r.iteration_time, r.mfu, r.fits, r.memory[0]
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import _core
from . import _files
from . import validation as _validation
from .cluster import Cluster
from .timeline import Timeline
from .workmodel import ProfiledModel, Transformer, model_id, profile_model

__all__ = ["ParallelPlan", "StageGroup", "StepResult", "MemoryBreakdown", "simulate",
           "pipeline_split", "SCHEDULES", "RECOMPUTE_MODES", "PRECISIONS", "DEFAULT_HEADROOM", "headroom_fraction"]

SCHEDULES = {"gpipe": _core.SCHEDULE_GPIPE, "1f1b": _core.SCHEDULE_1F1B,
             "interleaved-1f1b": _core.SCHEDULE_INTERLEAVED, "zb-h1": _core.SCHEDULE_ZBH1,
             "zb-v": _core.SCHEDULE_ZBV}
RECOMPUTE_MODES = {"none": _core.RECOMPUTE_NONE, "selective": _core.RECOMPUTE_SELECTIVE,
                   "full": _core.RECOMPUTE_FULL, "selective-op": _core.RECOMPUTE_OP}
PRECISIONS = {"bf16": _core.PRECISION_BF16, "fp16": _core.PRECISION_FP16,
              "fp8": _core.PRECISION_FP8, "fp32": _core.PRECISION_FP32}
#: MoE token dispatchers (csrc/step/parplan.h HPGO_DISPATCH_)
DISPATCHERS = {"alltoall": 0, "deepep": 1}
DISPATCHERS_BY_CODE = {v: k for k, v in DISPATCHERS.items()}
#: kernel sets (csrc/step/parplan.h HPGO_KS_), tensor-parallel overlap (HPGO_TPO_),
#: context-parallel exchange (HPGO_CP_), partial recomputation (HPGO_RCM_)
KERNEL_SETS = {"te": 0, "compile": 1, "eager": 2, "compile-blocks": 3, "compile-fa2": 4,
               "eager-unfused-norm": 5}
TP_OVERLAPS = {"none": 0, "te": 1, "async": 2}
CP_COMMS = {"p2p": 0, "all_gather": 1, "a2a": 2, "torch_sdpa": 3}
ATTENTIONS = {"auto": 0, "flash2": 1}
OPTIMIZER_IMPLS = {"megatron": 0, "deepspeed_bf16": 1, "apex_bf16": 2, "megatron_bf16_grads": 3}
CROSS_ENTROPIES = {"auto": 0, "unfused": 1, "fused": 2}
FP8_RECIPES = {"tensorwise": 0, "rowwise": 1, "rowwise_with_gw_hp": 2}


def _loss_mismatch(cross_entropy: str, kernels: str) -> str | None:
    """Why the loss ``cross_entropy`` does not run on the kernel set
    ``kernels``, or None: Megatron's unfused loss runs on the TE kernel set
    only, a fused loss kernel on a PyTorch one only."""
    if cross_entropy == "unfused" and kernels != "te":
        return ("cross_entropy='unfused' (Megatron's vocab_parallel_cross_entropy) needs "
                f"kernels='te', not {kernels!r}")
    if cross_entropy == "fused" and kernels == "te":
        return ("cross_entropy='fused' needs a PyTorch kernel set (kernels='compile' or "
                "'eager'); kernels='te' runs Transformer Engine's own fused loss")
    return None


# the kernel sets torchao's Float8Linear runs under (every one but "te")
_TORCH_KERNELS = ("compile", "eager", "compile-blocks", "compile-fa2", "eager-unfused-norm")
RECOMPUTE_METHODS = {"uniform": 0, "block": 1}
# Share of what ideal phase-by-phase pairing hides that Megatron's 1F1B
# all-to-all overlap realises, measured (csrc/step/parplan.h; docs/moe.md)
MEGATRON_OVERLAP_SHARE = _core.EP_OVERLAP_MEGATRON


# Share of each GPU's memory a plan must leave free to be called a fit.  The
# memory model counts the bytes tensors hold (PyTorch's "allocated"); the
# caching allocator reserves more, blocks split and cached between uses.
# Measured on an H100 SXM5 (hpgo profile step: ten training steps of
# Llama-style models, eager and compiled, PyTorch 2.11) the reserve at the
# step's peak, as a share of the reserved memory, is 0.6-7.9 %, median 3.3 %,
# with expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
# which torchtitan's and Megatron-Bridge's launchers set;
# profiles/h100-sxm5-expandable-steps.json): the default.  With the stock
# allocator it is 0.6-9.7 %, median 5.7 % (profiles/h100-sxm5-steps.json:
# pass headroom=0.057).  GMLake (Guo et al., ASPLOS'24, arXiv 2401.08156)
# reports more for long fine-tuning runs with recomputation and offloading
# (9.2 GB of an A100-80GB on average, 11.5 %).  A cluster's
# allocator_fragmentation models the reserve inside the estimate instead
# (reported as MemoryBreakdown.reserved); with it set, lower the headroom.
DEFAULT_HEADROOM = 0.033


def headroom_fraction(v: Any, name: str = "headroom") -> float:
    """A headroom as a fraction of each GPU's memory, in [0, 1); None is
    :data:`DEFAULT_HEADROOM`."""
    if v is None:
        return DEFAULT_HEADROOM
    if isinstance(v, (bool, str)) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a fraction of the GPU memory in [0, 1), "
                        f"not {type(v).__name__}")
    f = float(v)
    if not 0.0 <= f < 1.0:
        raise ValueError(f"{name} must be a fraction of the GPU memory in [0, 1), got {v!r}")
    return f


def _positive_real(name: str, v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, (bool, str)) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    f = float(v)
    if not (f > 0 and f < float("inf")):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return f


def overlap_share(v: Any, name: str = "overlap_moe_comm") -> float:
    """The credited share of an ``overlap_moe_comm`` value: 0 for False,
    Megatron's measured share for True, the number itself in (0, 1]."""
    if isinstance(v, bool):
        return MEGATRON_OVERLAP_SHARE if v else 0.0
    if not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a bool or a share in (0, 1], not {type(v).__name__}")
    if not 0 < v <= 1:
        raise ValueError(f"{name} as a share must be in (0, 1], got {v!r}")
    return float(v)


def pipeline_split(layers: int, stages: int, *, first: int | None = None,
                   last: int | None = None, embedding_layer: bool = False,
                   loss_layer: bool = False) -> tuple[int, ...]:
    """The layer boundaries of ``stages`` model stages (``pp x
    virtual_stages``) by the pipeline layout rules of the frameworks, for
    :attr:`ParallelPlan.split` (the embedding is priced on the first model
    stage, the final norm, output layer and loss on the last).

    ``first`` / ``last``: layers of the first / last model stage, the others
    split evenly (Megatron's ``--decoder-first-pipeline-num-layers`` and
    ``--decoder-last-pipeline-num-layers``).  ``embedding_layer`` /
    ``loss_layer``: the embedding / the loss count as one layer of the
    first / last model stage, every stage then holding the same count
    (Megatron's ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split``; torchtitan's default
    ``pipeline_parallel_first_stage_less_layers`` and
    ``..._last_stage_less_layers`` of 1 are both set).  Megatron requires
    the even division; so does this (``ValueError`` otherwise)."""
    layers, stages = _int("layers", layers), _int("stages", stages)
    if (first is not None or last is not None) and (embedding_layer or loss_layer):
        raise ValueError("first/last cannot be combined with embedding_layer/loss_layer "
                         "(as Megatron)")
    counts: list[int]
    if first is not None or last is not None:
        f = _int("first", first, 1) if first is not None else None
        la = _int("last", last, 1) if last is not None else None
        middle = stages - (f is not None) - (la is not None)
        rest = layers - (f or 0) - (la or 0)
        if middle < 0 or (middle == 0 and rest != 0) or (middle > 0 and (rest < middle
                                                                         or rest % middle)):
            raise ValueError(f"{layers} layers: the {middle} stages besides first={first}, "
                             f"last={last} must share {rest} layers evenly")
        per = rest // middle if middle else 0
        counts = [per] * stages
        if f is not None:
            counts[0] = f
        if la is not None:
            counts[-1] = la
    else:
        slots = layers + int(bool(embedding_layer)) + int(bool(loss_layer))
        if slots % stages:
            raise ValueError(f"{layers} layers{' + embedding' if embedding_layer else ''}"
                             f"{' + loss' if loss_layer else ''} do not divide evenly over "
                             f"{stages} model stages")
        per = slots // stages
        counts = [per] * stages
        counts[0] -= int(bool(embedding_layer))
        counts[-1] -= int(bool(loss_layer))
    if min(counts) < 1:
        raise ValueError(f"a model stage would hold no layer: {counts}")
    split = [0]
    for n in counts:
        split.append(split[-1] + n)
    return tuple(split)


def _int(name: str, v: Any, lo: int = 1, hi: int = 1 << 40) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    i = v.__index__()
    if not lo <= i <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {i}")
    return int(i)


def _real(name: str, v: Any) -> float:
    if isinstance(v, (bool, str)) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    return float(v)


@dataclass(frozen=True)
class StageGroup:
    """One pipeline stage of an uneven :class:`ParallelPlan`: its layers
    (``[start, end)`` of the model's layers), its ``dp`` replicas of ``tp``
    GPUs each, the cluster part it runs on (``gpu``: a GPU type name of the
    cluster, a part index, or None for the first part), each replica's
    share of a micro-batch's samples (``shares``: ``dp`` fractions summing
    to 1, None: even; a transformer replica takes whole sequences) and the
    cluster index of its first GPU (None: right after the GPUs of the
    previous stages on the same part), or ``gpus``: all ``dp x tp`` cluster
    GPU indices, replica by replica (each replica's tp GPUs consecutive),
    for placements that are not one run of GPUs (HPGO's).  DAPPLE's stages with their own
    replica counts, HAP's shares by speed and stages on different GPU types
    are stage groups (docs/uneven-plans.md).

    Replicas on several GPU types (data parallelism across types): ``gpu``
    a tuple of GPU types (or part indices) and ``replicas`` the number of
    replicas on each, in order, summing to ``dp`` (``gpu=("h100", "a100"),
    replicas=(8, 16)``: replicas 0-7 on H100, 8-23 on A100), each type's
    replicas at the next free GPUs of its part (or at ``gpus``)."""

    layers: tuple[int, int]
    dp: int = 1
    tp: int = 1
    gpu: str | int | None = None
    shares: tuple[float, ...] | None = None
    first_gpu: int | None = None
    gpus: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        lay = self.layers
        if isinstance(lay, (str, bytes)) or not hasattr(lay, "__len__") or len(lay) != 2:
            raise TypeError("layers must be a pair (start, end) of layer indices")
        a = _int("layers start", lay[0], 0, 1 << 30)
        b = _int("layers end", lay[1], 1, 1 << 30)
        if b <= a:
            raise ValueError(f"layers ({a}, {b}) hold no layer: end must be > start")
        object.__setattr__(self, "layers", (a, b))
        object.__setattr__(self, "dp", _int("dp", self.dp, 1, 1 << 24))
        object.__setattr__(self, "tp", _int("tp", self.tp, 1, 1024))
        g = self.gpu
        if g is not None and not isinstance(g, (str, bytes)) and hasattr(g, "__iter__"):
            kinds = []
            for x in g:
                if isinstance(x, str):
                    if not x.strip():
                        raise ValueError("gpu: each GPU type must be a name or a part index")
                    kinds.append(x)
                else:
                    kinds.append(_int("gpu (a part index)", x, 0, 15))
            if len(kinds) < 1 or len(set(kinds)) != len(kinds):
                raise ValueError(f"gpu {tuple(kinds)}: give each GPU type once")
            object.__setattr__(self, "gpu", tuple(kinds))
            r = self.replicas
            if r is None or isinstance(r, (str, bytes)) or not hasattr(r, "__iter__"):
                raise ValueError("replicas: a group on several GPU types gives the replicas on "
                                 "each, a tuple as long as gpu")
            r = tuple(_int("replicas entry", x, 1, 1 << 24) for x in r)
            if len(r) != len(kinds):
                raise ValueError(f"replicas has {len(r)} entries for {len(kinds)} GPU types")
            if sum(r) != self.dp:
                raise ValueError(f"replicas {r} sum to {sum(r)}, not dp={self.dp}")
            if self.first_gpu is not None:
                raise ValueError("first_gpu: a group on several GPU types is placed per type "
                                 "(give gpus= to place it by hand)")
            object.__setattr__(self, "replicas", r)
        elif self.replicas is not None:
            raise ValueError("replicas needs gpu= a tuple of GPU types (one count per type)")
        elif g is not None and not isinstance(g, str):
            object.__setattr__(self, "gpu", _int("gpu (a part index)", g, 0, 15))
        elif isinstance(g, str) and not g.strip():
            raise ValueError("gpu must be a GPU type name, a part index or None")
        if self.shares is not None:
            sh = self.shares
            if isinstance(sh, (str, bytes)) or not hasattr(sh, "__iter__"):
                raise TypeError("shares must be a sequence of dp fractions or None")
            sh = tuple(_real("share", x) for x in sh)
            if len(sh) != self.dp:
                raise ValueError(f"shares has {len(sh)} entries for dp={self.dp} replicas")
            if not all(0 < x <= 1 for x in sh):
                raise ValueError(f"shares must each be in (0, 1], got {sh}")
            if abs(sum(sh) - 1.0) > 1e-9 * self.dp:
                raise ValueError(f"shares must sum to 1, got {sum(sh)!r}")
            object.__setattr__(self, "shares", sh)
        if self.first_gpu is not None:
            object.__setattr__(self, "first_gpu", _int("first_gpu", self.first_gpu, 0,
                                                       (1 << 24) - 1))
        if self.gpus is not None:
            gs = self.gpus
            if isinstance(gs, (str, bytes)) or not hasattr(gs, "__iter__"):
                raise TypeError("gpus must be a sequence of dp x tp GPU indices or None")
            gs = tuple(_int("gpus entry", x, 0, (1 << 24) - 1) for x in gs)
            if len(gs) != self.dp * self.tp:
                raise ValueError(f"gpus has {len(gs)} entries for dp x tp = {self.dp * self.tp}")
            if len(set(gs)) != len(gs):
                raise ValueError("gpus lists a GPU twice")
            if self.first_gpu is not None and self.first_gpu != gs[0]:
                raise ValueError("give first_gpu or gpus, not both")
            object.__setattr__(self, "gpus", gs)

    @property
    def size(self) -> int:
        """GPUs of the group: dp x tp."""
        return self.dp * self.tp

    def per_type(self) -> tuple:
        """``((gpu, replicas), ...)``: the GPU type (as given) of each run of
        replicas, one pair for a group on one type."""
        if self.replicas is not None:
            return tuple(zip(self.gpu, self.replicas))
        return ((self.gpu, self.dp),)

    @property
    def mixed(self) -> bool:
        """True when the group's replicas span GPU types (``replicas``)."""
        return self.replicas is not None

    def describe(self) -> str:
        """'[0, 14) dp=14 tp=1 on V100' with the shares when uneven."""
        out = f"[{self.layers[0]}, {self.layers[1]}) dp={self.dp} tp={self.tp}"
        if self.replicas is not None:
            out += " on " + " + ".join(
                f"{k if isinstance(k, str) else f'part {k}'} x{n}"
                for k, n in zip(self.gpu, self.replicas))
        elif self.gpu is not None:
            out += f" on {self.gpu if isinstance(self.gpu, str) else f'part {self.gpu}'}"
        if self.gpus is not None:
            out += f" on GPUs {_ranges(self.gpus)}"
        elif self.first_gpu is not None:
            out += f" from GPU {self.first_gpu}"
        if self.shares is not None:
            # runs of equal shares once each: "0.0234 x32/0.00781 x32"
            runs: list[list] = []
            for x in self.shares:
                t = f"{x:.3g}"
                if runs and runs[-1][0] == t:
                    runs[-1][1] += 1
                else:
                    runs.append([t, 1])
            out += " shares " + "/".join(t if n == 1 else f"{t} x{n}" for t, n in runs)
        return out


def _ranges(xs: tuple[int, ...]) -> str:
    """'0-6,8-14' for (0, 1, ..., 6, 8, ..., 14)."""
    out, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(f"{xs[i]}" if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)


def _stage_groups(v: Any) -> tuple[StageGroup, ...]:
    """``stages`` as a tuple of StageGroup (dicts, from JSON, are read by
    field, each error naming ``stages[k]``)."""
    if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__iter__"):
        raise TypeError("stages must be a sequence of hpgo.StageGroup (or None)")
    out = []
    names = {f.name for f in dataclasses.fields(StageGroup)}
    for k, g in enumerate(v):
        try:
            if isinstance(g, Mapping):
                extra = set(g) - names
                if extra:
                    raise ValueError(f"unknown fields {sorted(extra)}")
                body = dict(g)
                if isinstance(body.get("layers"), list):
                    body["layers"] = tuple(body["layers"])
                for f in ("shares", "gpus", "replicas", "gpu"):
                    if isinstance(body.get(f), list):
                        body[f] = tuple(body[f])
                g = StageGroup(**body)
            elif not isinstance(g, StageGroup):
                raise TypeError(f"must be an hpgo.StageGroup, not {type(g).__name__}")
        except (TypeError, ValueError) as e:
            raise type(e)(f"stages[{k}]: {e}") from None
        out.append(g)
    if not out:
        raise ValueError("stages must hold at least one StageGroup")
    return tuple(out)


@dataclass(frozen=True)
class ParallelPlan:
    """How one model is trained on a cluster (see the module docstring).

    ``split`` (optional) gives the ``pp * virtual_stages + 1`` layer
    boundaries of the model stages (default: even, the remainder on the
    middle stages); ``model`` records the identity of the model the plan was
    made for (:func:`hpgo.model_id`), and simulating it on another model is
    refused.  ``cp`` splits each sequence over that many GPUs (ring attention;
    transformers only).  GPUs are laid out as Megatron does: tp fastest, then
    cp, then dp, then pp; gradients are averaged (and ZeRO shards) over dp x cp.

    Mixture-of-experts models regroup the tp x cp x dp GPUs of a pipeline
    stage for their expert layers into ``etp`` (expert tensor parallel;
    ``None``: the same as tp) x ``ep`` (experts divided over it, tokens sent
    to their experts by all-to-all) x expert data parallel (the rest, over
    which expert gradients are reduced).  ``ep_placement="inner"`` puts the
    ep group on the nearest GPUs (Megatron-Core's order); ``"outer"`` on the
    farthest, with the expert data-parallel group inside.
    ``overlap_moe_comm`` hides a MoE layer's all-to-alls behind the compute of
    another micro-batch (Megatron's ``--overlap-moe-expert-parallel-comm``,
    DeepSeek's DualPipe), phase by phase: ``True`` credits the share of that
    ideal pairing Megatron's schedule is measured to realise
    (``MEGATRON_OVERLAP_SHARE``, 0.65), a number in (0, 1] that share
    instead (1: a perfect schedule).
    ``moe_dispatcher``: ``"alltoall"`` sends every routed copy of a token
    (Megatron's alltoall dispatcher, NCCL); ``"deepep"`` sends a token once
    to each node holding one of its experts and forwards it inside the node
    (DeepEP, Megatron's ``flex`` dispatcher), which cuts cross-node traffic
    when the ep group spans nodes (and more under DeepSeek's node-limited
    routing, :attr:`Transformer.routing_groups`).  ``fp8_params`` (fp8
    training) keeps the weights in fp8 only, as Megatron's
    ``--fp8-param-gather``: 2 bytes per parameter (the fp8 weight and its
    transpose) instead of 4 with the 16-bit copy.

    Sharded data parallelism as PyTorch FSDP2 runs it (``zero=3``):
    ``reshard_after_forward=False`` keeps each layer's gathered weights from
    its forward to its backward (no second all-gather, the whole device's
    16-bit weights held; torchtitan's choice under pipelining, Llama 3's);
    ``shard_size=k`` shards the model states inside groups of ``k``
    data-parallel replicas and replicates them across the groups (hybrid
    sharding, FSDP2's HSDP; 0: shard over all ``dp x cp`` replicas).
    Offloading: ``offload_optimizer=True`` keeps the optimizer state on the
    host and steps it there (ZeRO-Offload, Megatron's CPU optimizer);
    ``offload_activations=f`` keeps that share of the stored activations in
    host memory until their backward (over the cluster's host link).

    The training stack (docs/training-model.md, "Stacks"): ``kernels`` is
    the kernel set a layer launches -- ``"te"`` (Megatron-Core with
    Transformer Engine's fused kernels), ``"compile"`` (``torch.compile``),
    ``"compile-blocks"`` (``torch.compile`` of each transformer block, the
    output layer and the loss eager, attention on PyTorch's FlashAttention-2:
    torchtitan until March 2025), ``"compile-fa2"`` (blocks and loss
    compiled, FlashAttention-2: torchtitan until October 2025) or
    ``"eager"`` (eager PyTorch) or ``"eager-unfused-norm"`` (eager PyTorch
    with RMSNorm as separate fp32 ops and foreach AdamW: torchtitan's code of
    2024 without ``torch.compile``); ``tp_overlap`` hides tensor-parallel
    communication behind the GEMMs beyond what every stack overlaps --
    ``"te"`` (Megatron's ``--tp-comm-overlap``, Transformer Engine's
    userbuffers; needs ``kernels="te"``) or ``"async"`` (PyTorch's async
    TP; needs one of the ``torch.compile`` kernel sets), both with ``sequence_parallel``;
    ``cp_comm`` is how context parallelism exchanges K and V --
    ``"p2p"`` (a ring overlapped block by block, Megatron-Core's default),
    ``"all_gather"`` (Llama 3; one exposed gather), ``"a2a"`` (Ulysses) or
    ``"torch_sdpa"`` (PyTorch's context parallelism around SDPA, its
    all-gather rotation); ``recompute="selective-op"`` is torchtitan's
    op-level selective checkpointing (every other matmul's and the
    attention's outputs saved, the rest of a block recomputed; dense blocks
    with fused attention); ``recompute_layers`` (with ``recompute="full"``) recomputes
    groups of that many layers (``recompute_method="uniform"``) or only the
    first that many layers of each model stage (``"block"``), as
    Megatron's ``--recompute-num-layers`` (0: every layer).  ``attention``
    is the fused attention kernel: ``"auto"`` (cuDNN on Hopper,
    FlashAttention-2 on the A100) or ``"flash2"`` (FlashAttention-2,
    PyTorch's SDPA on Hopper before 2.9); ``optimizer_impl`` the
    mixed-precision optimizer's gradient path: ``"megatron"`` or
    ``"deepspeed_bf16"`` (DeepSpeed's BF16_Optimizer: an fp32 add of every
    micro-batch's gradients, ZeRO 1 all-reducing them) or ``"apex_bf16"``
    (Apex's DistributedFusedAdam as NeMo's ``distributed_fused_adam`` with
    ``grad_sync_dtype: bf16``, ZeRO 1 only: an unsharded 16-bit gradient
    buffer reduce-scattered in 16 bits, fp32 moments and the fp32 master kept
    as 16-bit remainders of the bf16 weights -- 2 + 2 + 10 bytes a parameter,
    the moments and remainders sharded; an fp32 master under ``fp8_params``)
    or ``"megatron_bf16_grads"`` (Megatron's with ``--grad-reduce-in-bf16``,
    NeMo 2's performance mode; ZeRO 0 or 1: 16-bit gradients accumulated and
    reduced, 2 + 2 + 12 bytes a parameter); ``cross_entropy``
    the loss over the vocabulary: ``"auto"`` (the kernel set's: Transformer
    Engine's fused kernel under ``kernels="te"``), ``"unfused"``
    (Megatron's fp32 ``vocab_parallel_cross_entropy``, Megatron-LM's default
    without ``--cross-entropy-loss-fusion``; ``kernels="te"`` only) or
    ``"fused"`` (one loss kernel forward and one backward on the 16-bit
    logits, as flash-attn's ``CrossEntropyLoss`` that llm-foundry's MPT
    calls; a PyTorch kernel set only).
    ``fp8_all_gather`` (fp8 under a PyTorch kernel set with ``zero=3``):
    torchao's ``enable_fsdp_float8_all_gather`` with
    ``precompute_float8_dynamic_scale_for_fsdp`` -- each Float8Linear weight
    cast to fp8 on its shard and gathered in 1 byte, its scale from one
    all-reduce per step; ``False`` (torchtitan's default) gathers 16-bit
    weights and casts them at every GEMM.  ``fp8_recipe`` (fp8 under a
    PyTorch kernel set; other precisions ignore it): torchao's Float8Linear
    recipe, ``"tensorwise"`` (one scale a tensor; torchtitan's 2024
    benchmarks) or ``"rowwise"`` (one scale a row, the 16-bit input and
    weight saved and cast again along the other axis in the backward;
    torchtitan 0.3's default, no ``fp8_all_gather``) or
    ``"rowwise_with_gw_hp"`` (rowwise, the weight gradient in 16 bits and the
    weight cast tensorwise for the input gradient; torchtitan 0.3's other).

    Uneven plans (docs/uneven-plans.md): ``stages`` gives each pipeline
    stage a :class:`StageGroup` -- its layers, replicas, tensor
    parallelism, GPU type (cluster part), shares of the samples and
    placement; ``pp`` and ``split`` are then derived, ``tp = dp = 1``, and
    ``micro_batch`` counts the samples of one micro-batch over all replicas
    of a stage.  Exports refuse them (one data-parallel size per framework).
    """

    global_batch: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    virtual_stages: int = 1
    micro_batch: int = 1
    schedule: str = "1f1b"
    recompute: str = "none"
    sequence_parallel: bool = False
    zero: int = 0
    overlap_grad_reduce: bool = True
    split: tuple[int, ...] | None = None
    model: str | None = None
    etp: int | None = None
    ep_placement: str = "inner"
    overlap_moe_comm: bool | float = False
    moe_dispatcher: str = "alltoall"
    fp8_params: bool = False
    reshard_after_forward: bool = True
    shard_size: int = 0
    offload_optimizer: bool = False
    offload_activations: float = 0.0
    kernels: str = "te"
    tp_overlap: str = "none"
    cp_comm: str = "p2p"
    recompute_layers: int = 0
    recompute_method: str = "uniform"
    stages: tuple[StageGroup, ...] | None = None
    attention: str = "auto"
    optimizer_impl: str = "megatron"
    cross_entropy: str = "auto"
    fp8_all_gather: bool = False
    fp8_recipe: str = "tensorwise"

    def __post_init__(self) -> None:
        if self.stages is not None:
            self._uneven()
        for f in ("global_batch", "tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch"):
            object.__setattr__(self, f, _int(f, getattr(self, f)))
        object.__setattr__(self, "zero", _int("zero", self.zero, 0, 3))
        if self.etp is not None:
            object.__setattr__(self, "etp", _int("etp", self.etp, 1, 1024))
        if self.ep_placement not in ("inner", "outer"):
            raise ValueError(f"ep_placement must be 'inner' or 'outer', got {self.ep_placement!r}")
        if self.moe_dispatcher not in DISPATCHERS:
            raise ValueError(f"moe_dispatcher must be one of {', '.join(DISPATCHERS)}, "
                             f"got {self.moe_dispatcher!r}")
        if (self.tp * self.cp * self.dp) % ((self.etp or self.tp) * self.ep):
            raise ValueError(f"etp x ep = {(self.etp or self.tp) * self.ep} must divide "
                             f"tp x cp x dp = {self.tp * self.cp * self.dp} (expert layers "
                             "regroup the GPUs of a pipeline stage)")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {self.schedule!r}")
        if self.recompute not in RECOMPUTE_MODES:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}; "
                             f"got {self.recompute!r}")
        for f in ("sequence_parallel", "overlap_grad_reduce", "fp8_params",
                  "reshard_after_forward", "offload_optimizer", "fp8_all_gather"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(f"{f} must be a bool")
        object.__setattr__(self, "shard_size", _int("shard_size", self.shard_size, 0, 1 << 24))
        if self.shard_size and (self.dp * self.cp) % self.shard_size:
            raise ValueError(f"shard_size {self.shard_size} must divide dp x cp = "
                             f"{self.dp * self.cp} (0: shard over all replicas)")
        if self.shard_size and self.shard_size < self.dp * self.cp and self.zero < 1:
            raise ValueError("shard_size (hybrid sharding) needs zero >= 1")
        oa = self.offload_activations
        if isinstance(oa, bool) or not isinstance(oa, (int, float)):
            raise TypeError("offload_activations must be a number in [0, 1]")
        if not 0.0 <= float(oa) <= 1.0:
            raise ValueError(f"offload_activations must be in [0, 1], got {oa}")
        object.__setattr__(self, "offload_activations", float(oa))
        for f, allowed in (("kernels", KERNEL_SETS), ("tp_overlap", TP_OVERLAPS),
                           ("cp_comm", CP_COMMS), ("recompute_method", RECOMPUTE_METHODS),
                           ("attention", ATTENTIONS), ("optimizer_impl", OPTIMIZER_IMPLS),
                           ("cross_entropy", CROSS_ENTROPIES), ("fp8_recipe", FP8_RECIPES)):
            if getattr(self, f) not in allowed:
                raise ValueError(f"{f} must be one of {', '.join(allowed)}; "
                                 f"got {getattr(self, f)!r}")
        object.__setattr__(self, "recompute_layers",
                           _int("recompute_layers", self.recompute_layers, 0, 1 << 20))
        if self.recompute_layers and self.recompute != "full":
            raise ValueError("recompute_layers needs recompute='full' (Megatron's "
                             "--recompute-num-layers applies to full recomputation)")
        if self.tp_overlap != "none" and self.tp > 1 and not self.sequence_parallel:
            raise ValueError(f"tp_overlap={self.tp_overlap!r} needs sequence_parallel=True")
        if self.tp_overlap == "te" and self.kernels != "te":
            raise ValueError("tp_overlap='te' (Transformer Engine's userbuffers) needs "
                             "kernels='te'")
        why = _loss_mismatch(self.cross_entropy, self.kernels)
        if why is not None:
            raise ValueError(why)
        if self.fp8_all_gather and (self.zero != 3 or self.kernels == "te"):
            raise ValueError("fp8_all_gather (torchao's float8 all-gather in FSDP2) needs "
                             "zero=3 and a PyTorch kernel set (kernels='compile', 'eager', "
                             "'compile-blocks', 'compile-fa2' or 'eager-unfused-norm'); got "
                             f"zero={self.zero}, "
                             f"kernels={self.kernels!r}")
        if self.fp8_recipe != "tensorwise" and (self.kernels not in _TORCH_KERNELS
                                                or self.fp8_all_gather):
            raise ValueError(f"fp8_recipe={self.fp8_recipe!r} (torchao's rowwise float8 recipe) "
                             "needs a PyTorch kernel set (kernels='compile', 'eager', "
                             "'compile-blocks', 'compile-fa2' or 'eager-unfused-norm') and no "
                             "fp8_all_gather (torchao gathers in fp8 under the tensorwise recipe "
                             f"only); got kernels={self.kernels!r}, "
                             f"fp8_all_gather={self.fp8_all_gather}")
        if self.tp_overlap == "async" and self.kernels not in ("compile", "compile-blocks",
                                                               "compile-fa2"):
            raise ValueError("tp_overlap='async' (an Inductor pass) needs kernels='compile', "
                             "'compile-blocks' or 'compile-fa2'")
        overlap_share(self.overlap_moe_comm)
        if not isinstance(self.overlap_moe_comm, bool):
            object.__setattr__(self, "overlap_moe_comm", float(self.overlap_moe_comm))
        if self.split is not None:
            object.__setattr__(self, "split", tuple(_int("split boundary", b, 0, 1 << 30)
                                                     for b in self.split))
        if self.model is not None and not isinstance(self.model, str):
            raise TypeError("model must be a str (hpgo.model_id) or None")
        if self.global_batch % (self.micro_batch * self.dp):
            raise ValueError(f"global_batch {self.global_batch} is not a multiple of "
                             f"micro_batch x dp = {self.micro_batch * self.dp}")

    def _uneven(self) -> None:
        """Checks and derived fields of a plan with stage groups: pp is the
        number of groups, the split their layer ranges, tp = dp = 1."""
        st = _stage_groups(self.stages)
        object.__setattr__(self, "stages", st)
        for f in ("tp", "dp", "cp", "ep", "virtual_stages"):
            if getattr(self, f) != 1:
                raise ValueError(f"with stages, {f} must be 1: each StageGroup gives its own "
                                 "dp and tp (cp, ep and virtual stages are not offered)")
        if self.etp is not None:
            raise ValueError("with stages, etp must be None")
        if self.schedule in ("interleaved-1f1b", "zb-v"):
            raise ValueError(f"with stages, schedule must be gpipe, 1f1b or zb-h1 (one model "
                             f"stage per group), got {self.schedule!r}")
        if self.pp not in (1, len(st)):
            raise ValueError(f"pp={self.pp} but {len(st)} stage groups: with stages, pp is "
                             "their number")
        if st[0].layers[0] != 0:
            raise ValueError(f"stages[0].layers start at {st[0].layers[0]}: the first stage "
                             "starts at layer 0")
        for k in range(1, len(st)):
            if st[k].layers[0] != st[k - 1].layers[1]:
                raise ValueError(f"stages[{k}].layers start at {st[k].layers[0]} but "
                                 f"stages[{k - 1}] ends at {st[k - 1].layers[1]}: the stages "
                                 "cover the layers in order")
        split = (0,) + tuple(g.layers[1] for g in st)
        if self.split is not None and tuple(self.split) != split:
            raise ValueError(f"split {tuple(self.split)} differs from the stages' layers "
                             f"{split}: with stages, leave split out")
        if self.shard_size:
            for k, g in enumerate(st):
                if g.dp % self.shard_size:
                    raise ValueError(f"stages[{k}]: shard_size {self.shard_size} must divide "
                                     f"its dp={g.dp}")
        object.__setattr__(self, "pp", len(st))
        object.__setattr__(self, "split", split)

    @property
    def gpus(self) -> int:
        if self.stages is not None:
            return sum(g.size for g in self.stages)
        return self.tp * self.pp * self.dp * self.cp

    @property
    def uneven(self) -> bool:
        """True for a plan with stage groups (:attr:`stages`)."""
        return self.stages is not None

    def to_even(self) -> "ParallelPlan":
        """The even plan equal to this one (itself when it has no stage
        groups); ValueError when the groups differ in dp, tp, GPU type or
        shares, or are placed by hand."""
        if self.stages is None:
            return self
        g0 = self.stages[0]
        for k, g in enumerate(self.stages):
            if (g.dp, g.tp, g.gpu or 0) != (g0.dp, g0.tp, g0.gpu or 0) or g.first_gpu is not None \
                    or g.gpus is not None or g.replicas is not None \
                    or (g.shares is not None and len(set(g.shares)) > 1):
                raise ValueError(f"stages[{k}] ({g.describe()}) differs from stages[0] "
                                 f"({g0.describe()}): the plan has no even form")
        if self.micro_batch % g0.dp:
            raise ValueError(f"micro_batch {self.micro_batch} does not divide over dp={g0.dp}")
        return dataclasses.replace(self, stages=None, tp=g0.tp, dp=g0.dp,
                                   micro_batch=self.micro_batch // g0.dp)

    @classmethod
    def from_even(cls, plan: "ParallelPlan", model: Any = None) -> "ParallelPlan":
        """The uneven form of an even plan (every stage a group of its dp
        and tp, even shares, micro_batch x dp samples a micro-batch); the
        split is the plan's, or the engine's default even split of
        ``model``'s layers."""
        if plan.stages is not None:
            return plan
        if plan.virtual_stages != 1 or plan.cp != 1 or plan.ep != 1:
            raise ValueError("only plans with one model stage per device, cp 1 and ep 1 have an "
                             "uneven form")
        split = plan.split
        if split is None:
            if model is None:
                raise ValueError("give the model (or a split) to place the layers")
            layers = _as_model(model, None).layers
            split = _even_split(layers, plan.pp)
        groups = tuple(StageGroup(layers=(split[k], split[k + 1]), dp=plan.dp, tp=plan.tp)
                       for k in range(plan.pp))
        return dataclasses.replace(plan, stages=groups, tp=1, dp=1, pp=len(groups),
                                   split=None, micro_batch=plan.micro_batch * plan.dp)

    @property
    def microbatches(self) -> int:
        """Micro-batches per iteration and pipeline."""
        return self.global_batch // (self.micro_batch * self.dp)

    def with_(self, **changes: Any) -> "ParallelPlan":
        return dataclasses.replace(self, **changes)

    def _tuple(self, cluster: Any = None) -> tuple:
        return (self.tp, self.pp, self.dp, self.cp, self.ep, self.virtual_stages, self.micro_batch,
                self.global_batch, SCHEDULES[self.schedule], RECOMPUTE_MODES[self.recompute],
                int(self.sequence_parallel), self.zero, int(self.overlap_grad_reduce),
                self.split, self.etp or 0, int(self.ep_placement == "outer"),
                int(bool(self.overlap_moe_comm)), DISPATCHERS[self.moe_dispatcher],
                int(self.fp8_params), overlap_share(self.overlap_moe_comm),
                int(self.reshard_after_forward), self.shard_size, int(self.offload_optimizer),
                self.offload_activations,
                KERNEL_SETS[self.kernels], TP_OVERLAPS[self.tp_overlap], CP_COMMS[self.cp_comm],
                self.recompute_layers, RECOMPUTE_METHODS[self.recompute_method],
                ATTENTIONS[self.attention], OPTIMIZER_IMPLS[self.optimizer_impl],
                CROSS_ENTROPIES[self.cross_entropy], int(self.fp8_all_gather),
                FP8_RECIPES[self.fp8_recipe],
                self._groups_tuple(cluster))  # the stage groups: always the last item

    def _groups_tuple(self, cluster: Any) -> tuple | None:
        """The stage groups for the C core: (part, tp, dp, first_gpu or -1,
        shares), each GPU type name resolved to the cluster part holding it."""
        if self.stages is None:
            return None
        out = []
        for k, g in enumerate(self.stages):
            if g.replicas is not None:
                parts: list[int] = []
                for kind, n in zip(g.gpu, g.replicas):
                    parts += [_part_index(kind, cluster, k)] * n
                out.append((-1, g.tp, g.dp, -1, g.shares, g.gpus, tuple(parts)))
            else:
                out.append((_part_index(g.gpu, cluster, k), g.tp, g.dp,
                            -1 if g.first_gpu is None else g.first_gpu, g.shares, g.gpus))
        return tuple(out)

    @property
    def expert_data_parallel(self) -> int:
        """GPUs holding a copy of each expert shard: tp cp dp / (etp ep)."""
        return self.tp * self.cp * self.dp // ((self.etp or self.tp) * self.ep)

    # -- conversions ----------------------------------------------------------
    @classmethod
    def from_hpgo(cls, result: Any, global_batch: int, *, micro_batch: int | None = None,
                  model: Any = None) -> "ParallelPlan":
        """The plan of an HPGO result: ``py_orchestrate()``'s ``(speedup,
        stages)`` tuple, an :class:`hpgo.Plan`, or a stage list of
        ``(start, end, units, gpus)``.

        With ``model`` the profile HPGO planned (a ``graph.txt`` path or its
        :func:`hpgo.profile_model`), HPGO's state indices are mapped to the
        profile's layers (:mod:`hpgo.uneven`) and every stage becomes a
        :class:`StageGroup` of its GPUs (uneven replicas kept); the plan
        records the profile's identity.  HPGO runs ``gbs // rp``
        micro-batches per pipeline replica (``rp`` = a stage's GPUs / its
        units; its smallest micro-batch, 1), so the default ``micro_batch``
        (the samples of one micro-batch over a stage's replicas) is ``rp``.

        Without a profile (``model`` None or a model id string) the stages
        must have equal replica counts: the plan is the even one with HPGO's
        state indices kept as the split (a layer chain of those states)."""
        from . import uneven
        stages = uneven.hpgo_stages(result)
        is_profile = isinstance(model, (ProfiledModel, os.PathLike)) or (
            isinstance(model, str) and os.path.isfile(model))
        if not is_profile:
            reps = {len(g) for _, _, _, g in stages}
            if len(reps) != 1:
                raise ValueError(f"the stages have different replica counts {sorted(reps)}: "
                                 "pass model= (the profile HPGO planned) to keep them as stage "
                                 "groups")
            dp = reps.pop()
            split = tuple([stages[0][0]] + [e for _, e, _, _ in stages])
            mb = micro_batch if micro_batch is not None else max(1, global_batch // dp)
            return cls(global_batch=global_batch, pp=len(stages), dp=dp, micro_batch=mb,
                       split=split, model=model)
        pm = model if isinstance(model, ProfiledModel) else profile_model(os.fspath(model), 1)
        cuts = uneven.layer_boundaries(pm, [b - 1 for _, b, _, _ in stages[:-1]])
        bounds = [0] + cuts + [pm.layers]
        rp = len(stages[0][3]) // stages[0][2]
        # HPGO's GPU ids (its seps number them machine after machine, as the
        # cluster does), kept when they are not one run after the previous stage
        groups, nxt = [], 0
        for k, (_, _, _, g) in enumerate(stages):
            gs = sorted(g)
            placed = None if gs == list(range(nxt, nxt + len(gs))) else tuple(gs)
            nxt = gs[-1] + 1 if placed is None else nxt
            groups.append(StageGroup(layers=(bounds[k], bounds[k + 1]), dp=len(g), gpus=placed))
        mb = micro_batch if micro_batch is not None else max(1, rp)
        return cls(global_batch=global_batch, micro_batch=mb, stages=tuple(groups),
                   model=model_id(pm))

    @classmethod
    def from_replan(cls, result: Any, global_batch: int, *, dp: int = 1, micro_batch: int = 1,
                    schedule: str = "1f1b", model: str | None = None,
                    which: str = "chosen") -> "ParallelPlan":
        """The pipeline of a DynPipe re-plan (:func:`hpgo.replan`, or a list
        of layers per stage): one :class:`StageGroup` of ``dp`` replicas per
        stage, on GPUs in stage order (DynPipe's slowdowns are per stage
        position), its layers from the split ``which`` (``"chosen"``,
        ``"proposal"``, ``"current"`` or ``"searched"``).  Simulate it on the
        cluster with the slowed GPUs (``cluster.with_speed({gpu: 1 /
        slowdown})``); where the engine agrees with DynPipe's score and where
        not: docs/replanning-and-heterogeneous.md."""
        from . import dynpipe
        return dynpipe.to_parallel_plan(result, global_batch, dp=dp, micro_batch=micro_batch,
                                        schedule=schedule, model=model, which=which)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["split"] = list(self.split) if self.split is not None else None
        if self.stages is not None:
            d["stages"] = [{"layers": list(g.layers), "dp": g.dp, "tp": g.tp,
                            "gpu": list(g.gpu) if isinstance(g.gpu, tuple) else g.gpu,
                            "shares": list(g.shares) if g.shares is not None else None,
                            "first_gpu": g.first_gpu,
                            "gpus": list(g.gpus) if g.gpus is not None else None,
                            **({"replicas": list(g.replicas)} if g.replicas is not None
                               else {})}
                           for g in self.stages]
        return {"format": "hpgo-parallel-plan-1", **d}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "plan") -> "ParallelPlan":
        if not isinstance(d, Mapping) or d.get("format") != "hpgo-parallel-plan-1":
            raise ValueError(f"{where}: not an hpgo-parallel-plan-1 description")
        body = {k: v for k, v in d.items() if k != "format"}
        known = {f.name for f in dataclasses.fields(cls)}
        extra = set(body) - known
        if extra:
            raise ValueError(f"{where}: unknown plan fields {sorted(extra)}")
        for k, v in body.items():  # JSON types, named with the field
            if k in _TEXT_FIELDS and not isinstance(v, str) and not (k == "model" and v is None):
                raise ValueError(f"{where}: {k} must be a string, not {type(v).__name__} {v!r:.60}")
            if k == "stages" and v is not None and not isinstance(v, list):
                raise ValueError(f"{where}: stages must be a list of stage groups or null, "
                                 f"not {v!r:.60}")
            if k == "split" and v is not None and not (
                    isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                                for x in v)):
                raise ValueError(f"{where}: split must be a list of integers (layer boundaries) "
                                 f"or null, not {v!r:.60}")
        try:
            return cls(**body)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | os.PathLike) -> None:
        _files.atomic_write(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ParallelPlan":
        where = os.fspath(path)
        return cls.from_dict(_files.load_json(where, "plan file"), where=where)

    # -- exports (hpgo/exports.py; the frameworks' rules: hpgo/frameworks.py) --
    def megatron_args(self, model: Transformer | None = None, *, precision: str = "bf16") -> str:
        """Megatron-LM command-line arguments of this plan and, when a
        transformer is given, of its whole shape (Megatron-LM core_v0.19.0;
        docs/exports.md).  Raises ValueError naming the rule for a plan
        Megatron does not run."""
        from . import exports
        return exports.megatron_args(self, model, precision=precision)

    def torchtitan_config(self, model: Transformer, *, precision: str = "bf16",
                          name: str = "hpgo_plan") -> str:
        """A torchtitan 0.3.0 configuration module (Python source defining
        ``name()``; launch with ``-m torchtitan.train --module NAME --config
        NAME``) for one of torchtitan's models (docs/exports.md)."""
        from . import exports
        return exports.torchtitan_config(self, model, precision=precision, name=name)

    def torchtitan_toml(self, model: Transformer) -> str:
        """Deprecated: torchtitan 0.3 reads Python configuration modules
        (:meth:`torchtitan_config`), not TOML job files."""
        import warnings
        warnings.warn("torchtitan 0.3 reads Python configuration modules: use "
                      "ParallelPlan.torchtitan_config", DeprecationWarning, stacklevel=2)
        return self.torchtitan_config(model)

    def deepspeed_json(self, path: str | os.PathLike | None = None, *, precision: str = "bf16",
                       model: Transformer | None = None) -> str:
        """DeepSpeed configuration JSON text (DeepSpeed 0.19.8, Megatron-
        DeepSpeed's pipeline engine), written to ``path`` when given; a
        ZeRO-3 plan needs ``model`` (its buckets are one block)."""
        from . import exports
        return exports.deepspeed_json(self, path, precision=precision, model=model)

    def deepspeed_config(self, *, precision: str = "bf16",
                         model: Transformer | None = None) -> dict:
        """The DeepSpeed configuration of :meth:`deepspeed_json` as a dict."""
        return json.loads(self.deepspeed_json(precision=precision, model=model))

    def split_points(self, model: ProfiledModel | Transformer) -> list[tuple[int, int, str]]:
        """(model stage, first layer, that layer's name) of every model stage:
        the split points for torch.distributed.pipelining."""
        from .exports import stage_layers
        counts = stage_layers(self, model)
        n = model.layers
        names = getattr(model, "descs", ()) or tuple(f"layers.{i}" for i in range(n))
        out, first = [], 0
        for k, c in enumerate(counts):
            out.append((k, first, names[first] if first < n else ""))
            first += c
        return out

    def describe(self, *, global_batch: bool = True) -> str:
        """The plan in one line: "tp=8 pp=8 dp=1 mb=1 gb=64 1f1b v=3 sp ...";
        an uneven plan lists its stage groups (layers, dp x tp, GPU type,
        shares): "pp=2 [[0, 14) dp=14 tp=1 | [14, 20) dp=2 tp=1] mb=64 ..."."""
        if self.stages is not None:
            parts = [f"pp={self.pp}",
                     "[" + " | ".join(g.describe() for g in self.stages) + "]"]
        else:
            parts = [f"tp={self.tp}"] + ([f"cp={self.cp}"] if self.cp > 1 else []) + \
                [f"pp={self.pp}", f"dp={self.dp}"]
        if self.ep > 1 or (self.etp is not None and self.etp != self.tp):
            parts.append(f"ep={self.ep}" + (f" etp={self.etp}" if self.etp is not None and
                                            self.etp != self.tp else "") +
                         (" ep-outer" if self.ep_placement == "outer" else "") +
                         (" ep-overlap" if self.overlap_moe_comm is True else
                          f" ep-overlap={self.overlap_moe_comm:g}" if self.overlap_moe_comm else "") +
                         (" deepep" if self.moe_dispatcher == "deepep" else ""))
        parts.append(f"mb={self.micro_batch}")
        if global_batch:
            parts.append(f"gb={self.global_batch}")
        parts.append(self.schedule)
        if self.virtual_stages > 1:
            parts.append(f"v={self.virtual_stages}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.zero:
            parts.append(f"zero={self.zero}")
        if self.recompute != "none":
            parts.append(f"recompute={self.recompute}")
        if self.recompute_layers:
            parts.append(f"recompute-layers={self.recompute_layers}"
                         + (" block" if self.recompute_method == "block" else ""))
        if self.fp8_params:
            parts.append("fp8-params")
        if not self.reshard_after_forward:
            parts.append("no-reshard")
        if self.shard_size:
            parts.append(f"shard={self.shard_size}")
        if self.offload_optimizer:
            parts.append("offload-optimizer")
        if self.offload_activations:
            parts.append(f"offload-activations={self.offload_activations:g}")
        if self.kernels != "te":
            parts.append(f"kernels={self.kernels}")
        if self.tp_overlap != "none":
            parts.append(f"tp-overlap={self.tp_overlap}")
        if self.cp_comm != "p2p":
            parts.append(f"cp-comm={self.cp_comm}")
        if self.attention != "auto":
            parts.append(f"attention={self.attention}")
        if self.optimizer_impl != "megatron":
            parts.append(f"optimizer={self.optimizer_impl}")
        if self.cross_entropy != "auto":
            parts.append(f"cross-entropy={self.cross_entropy}")
        if self.fp8_all_gather:
            parts.append("fp8-all-gather")
        if self.fp8_recipe != "tensorwise":
            parts.append(f"fp8-recipe={self.fp8_recipe}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"ParallelPlan({self.describe()})"


def _even_split(layers: int, stages: int) -> tuple[int, ...]:
    """The engine's default split (csrc/step/work.c hpgo_work_even_split):
    even, the remainder on the middle stages first, then the first and the
    last."""
    base, extra = divmod(layers, stages)
    n_middle = stages - 2 if stages > 2 else 0
    split = [0]
    for k in range(stages):
        n = base
        middle = 0 < k < stages - 1
        if middle and k - 1 < extra:
            n += 1
        elif not middle and extra > n_middle:
            if k == 0 or (k == stages - 1 and extra - n_middle > 1):
                n += 1
        split.append(split[-1] + n)
    return tuple(split)


def _part_index(gpu: str | int | None, cluster: Any, k: int) -> int:
    """The cluster part a stage group's ``gpu`` names (None: 0), by the
    cluster's own rule (:meth:`hpgo.Cluster.part_index`)."""
    if gpu is None:
        return 0
    if cluster is None:
        if isinstance(gpu, int):
            return gpu
        raise ValueError(f"stages[{k}].gpu {gpu!r}: a GPU type needs the cluster to resolve")
    try:
        return cluster.part_index(gpu)
    except (TypeError, ValueError) as e:
        raise type(e)(f"stages[{k}].{e}") from None


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one GPU holds at its peak, and whether that fits its memory."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float
    total: float
    capacity: float
    margin: float
    fits: bool
    reserved: float = 0.0  # the caching allocator's reserve beyond the allocated bytes
    host: float = 0.0      # bytes offloaded to host memory (optimizer state, activations)
    headroom: float = 0.0

    @property
    def usable(self) -> float:
        """Bytes a plan may use: the capacity less the headroom kept free."""
        return self.capacity - self.headroom

    def __repr__(self) -> str:
        g = 2.0 ** 30
        room = (f" ({self.usable / g:.1f} usable: {self.headroom / self.capacity * 100:g} % "
                "kept free)" if self.headroom and self.capacity else "")
        return (f"MemoryBreakdown({self.total / g:.1f} of {self.capacity / g:.1f} GiB{room}, "
                f"{'fits' if self.fits else 'DOES NOT FIT'}: weights {self.weights / g:.1f}, "
                f"gradients {self.gradients / g:.1f}, optimizer {self.optimizer / g:.1f}, "
                f"activations {self.activations / g:.1f}, other {self.other / g:.1f}, "
                f"allocator reserve {self.reserved / g:.1f}"
                + (f"; on the host {self.host / g:.1f}" if self.host else "")
                + ("; more than the node's CPU memory holds"
                   if self.host and not self.fits and self.total <= self.capacity else "") + ")")


@dataclass(frozen=True)
class StepResult:
    """One simulated training step (all times in seconds).

    ``devices`` has one entry per pipeline device (busy, bubble,
    compute_end, sync_end, optimizer, peak_in_flight, params, memory);
    ``memory[i]`` is device i's :class:`MemoryBreakdown`; ``fits`` is True
    when every device fits.  ``stages`` has the per-model-stage costs of one
    micro-batch.  ``mfu`` / ``hfu`` are None for profiled models (their FLOPs
    are unknown)."""

    plan: ParallelPlan
    model: str
    cluster: str
    iteration_time: float
    compute_time: float
    samples_per_second: float
    tokens_per_second: float | None
    mfu: float | None
    hfu: float | None
    model_flops: float
    hw_flops: float
    gpus: int
    microbatches: int
    fits: bool
    devices: tuple[dict, ...]
    memory: tuple[MemoryBreakdown, ...]
    stages: tuple[dict, ...]
    events: Timeline | None = field(default=None, repr=False)
    precision: str = "bf16"
    peak_flops: float = 0.0
    bf16_peak_flops: float = 0.0
    headroom: float = 0.0
    tokens: float | None = None
    price: float | None = None
    gpu_notes: tuple[str, ...] = ()
    # how far hpgo was from the published runs of this stack (hpgo.validation.checked_note)
    checked: str | None = None
    # the lowest and highest of those errors (simulated / measured tokens/s - 1)
    checked_errors: tuple[float, float] | None = None
    # the GPUs of the whole cluster (0: not known), of which the plan uses ``gpus``
    cluster_gpus: int = 0

    # -- rates and the cost of a training run -------------------------------
    @property
    def tokens_per_gpu(self) -> float | None:
        """Tokens per second per GPU (the unit of NVIDIA's and torchtitan's tables)."""
        return None if self.tokens_per_second is None else self.tokens_per_second / self.gpus

    @property
    def tflops_per_gpu(self) -> float | None:
        """Model TFLOP/s per GPU (model FLOPs, recomputation not counted)."""
        if self.mfu is None or self.iteration_time <= 0:
            return None
        return self.model_flops / self.iteration_time / self.gpus / 1e12

    @property
    def mfu_bf16(self) -> float | None:
        """MFU against the GPU's dense bf16 peak, whatever the precision."""
        if self.mfu is None or not self.bf16_peak_flops or self.iteration_time <= 0:
            return None
        return self.model_flops / (self.iteration_time * self.gpus * self.bf16_peak_flops)

    @property
    def seconds_to_train(self) -> float | None:
        """Seconds to train on ``tokens`` tokens (None without ``tokens=``)."""
        if self.tokens is None or not self.tokens_per_second:
            return None
        return self.tokens / self.tokens_per_second

    @property
    def days(self) -> float | None:
        """Days to train on ``tokens`` tokens (None without ``tokens=``)."""
        t = self.seconds_to_train
        return None if t is None else t / 86400.0

    @property
    def gpu_hours(self) -> float | None:
        """GPU-hours to train on ``tokens`` tokens."""
        t = self.seconds_to_train
        return None if t is None else t * self.gpus / 3600.0

    @property
    def cost(self) -> float | None:
        """``gpu_hours`` x ``price`` (None without both)."""
        h = self.gpu_hours
        return None if h is None or self.price is None else h * self.price

    @property
    def days_band(self) -> tuple[float, float] | None:
        """Days to train on ``tokens`` tokens if this run is as far from its
        measured speed as the published runs of its stack were
        (``checked_errors``): ``days x (1 + error)`` at the lowest and the
        highest error; None without ``tokens=`` or without checked runs.  The
        model is not changed by it: it is the spread of its own checks."""
        return self._at_checked_errors(self.days)

    @property
    def cost_band(self) -> tuple[float, float] | None:
        """``cost`` over the same band as :attr:`days_band`."""
        return self._at_checked_errors(self.cost)

    def _at_checked_errors(self, v: float | None) -> tuple[float, float] | None:
        """``v x (1 + error)`` at the lowest and the highest checked error."""
        if v is None or self.checked_errors is None:
            return None
        lo, hi = self.checked_errors
        return (v * (1 + lo), v * (1 + hi))

    def _band_text(self) -> str | None:
        """:attr:`days_band` (and :attr:`cost_band`) as the summaries print
        them, ``"184.0-218.2 days, $88,338-$104,747"``; None without a band."""
        band, cost = self.days_band, self.cost_band
        if band is None:
            return None
        return (f"{band[0]:,.1f}-{band[1]:,.1f} days"
                + (f", ${cost[0]:,.0f}-${cost[1]:,.0f}" if cost is not None else ""))

    def assumptions(self) -> str:
        """What the figures assume: precision, peak, headroom, tokens, price."""
        prec = self.precision
        plan = self.plan
        if prec == "fp8" and isinstance(plan, ParallelPlan) and plan.stages is None:
            # how the linear layers run in fp8: the kernel set's quantization
            prec += (" (Transformer Engine's per-GEMM quantization)" if plan.kernels == "te"
                     else f" (torchao's {plan.fp8_recipe} Float8Linear in dense blocks)")
        parts = [prec, f"MFU against the {self.precision} dense peak "
                 f"({self.peak_flops / 1e12:,.0f} TFLOP/s per GPU)"]
        bf16 = self.mfu_bf16
        if bf16 is not None and self.precision == "fp8":
            parts.append(f"bf16-peak MFU {bf16 * 100:.1f} %")
        parts.append(f"{self.headroom * 100:g} % of each GPU's memory kept free")
        parts.extend(self.gpu_notes)
        if self.checked:
            parts.append(self.checked)
        if self.tokens is not None:
            parts.append(f"{self.tokens:.3g} tokens")
        if self.price is not None:
            parts.append(f"${self.price:g} per GPU-hour")
        return "; ".join(parts)

    def train_summary(self) -> str | None:
        """'N days, H GPU-hours, $C' for ``tokens=`` (None without)."""
        if self.days is None:
            return None
        out = f"{self.days:,.1f} days, {self.gpu_hours:,.0f} GPU-hours"
        if self.cost is not None:
            out += f", ${self.cost:,.0f}"
        out += f" for {self.tokens:.3g} tokens"
        band = self._band_text()
        if band is not None:
            # what the same run takes at the speeds the checked runs measured
            out += f" ({band} with hpgo's errors on the checked runs)"
        return out

    @property
    def bubble(self) -> float:
        """Idle share of the busiest-device's iteration (1 - its busy time / iteration)."""
        return min(d["bubble"] for d in self.devices)

    @property
    def peak_memory(self) -> float:
        return max(m.total for m in self.memory)

    def summary(self) -> str:
        g = 2.0 ** 30
        # the fullest device against its own usable memory (stages of an
        # uneven plan may sit on GPU types with different memories)
        worst = max(range(len(self.memory)),
                    key=lambda i: self.memory[i].total / max(self.memory[i].usable, 1.0))
        m = self.memory[worst]
        rate = (f"{self.tokens_per_second:,.0f} tokens/s ({self.tokens_per_gpu:,.0f} per GPU)"
                if self.tokens_per_second else f"{self.samples_per_second:,.1f} samples/s")
        mfu = (f", {self.tflops_per_gpu:,.0f} TFLOP/s per GPU, MFU {self.mfu * 100:.1f} % of "
               f"{self.precision} peak" if self.mfu else "")
        verdict = "fits" if self.fits else "DOES NOT FIT"
        room = f" with {self.headroom * 100:g} % kept free" if self.headroom else ""
        train = self.train_summary()
        # an uneven plan's stages have their own GPU types: name the worst one's group
        where = (f" (stage {self.plan.stages[worst].describe()})"
                 if self.plan.stages is not None and worst < len(self.plan.stages) else "")
        part = (f" ({self.gpus:,} of its {self.cluster_gpus:,} GPUs)"
                if 0 < self.gpus < self.cluster_gpus else "")
        return (f"{self.plan!r} on {self.cluster}{part}: {self.iteration_time:.4g} s/iteration, "
                f"{rate}"
                f"{mfu}; peak memory {m.total / g:.1f} of {m.capacity / g:.1f} GiB on device "
                f"{worst}{where} ({verdict}{room})" + (f"; {train}" if train else ""))

    def __repr__(self) -> str:
        return f"StepResult({self.summary()})"

    def _repr_html_(self) -> str:
        import html
        g = 2.0 ** 30
        rows = "".join(
            f"<tr><td>{i}</td><td>{d['busy']:.4g}</td><td>{d['bubble'] * 100:.1f} %</td>"
            f"<td>{d['peak_in_flight']}</td><td>{m.total / g:.1f}</td>"
            f"<td>{'yes' if m.fits else '<b>no</b>'}</td></tr>"
            for i, (d, m) in enumerate(zip(self.devices[:16], self.memory[:16])))
        more = f"<tr><td colspan=6>... {len(self.devices) - 16} more</td></tr>" \
            if len(self.devices) > 16 else ""
        return (f"<p>{html.escape(self.summary())}</p><table><tr><th>device</th><th>busy s</th>"
                f"<th>bubble</th><th>in flight</th><th>GiB</th><th>fits</th></tr>{rows}{more}</table>"
                f"<p><small>assumes: {html.escape(self.assumptions())}</small></p>")

    # -- memory over time -----------------------------------------------------
    def memory_events(self, device: int = 0) -> list[tuple[float, float, str]]:
        """What pipeline device ``device`` allocates and frees over the step,
        op by op: ``(seconds, +bytes or -bytes, what)``, in time order.

        The model states (weights, gradients, optimizer state) and ``other``
        are allocated at 0 and held; a forward pass allocates the activations
        its stage stores for that micro-batch at its start; a backward pass
        frees them at its end (an input-gradient pass all but what the weight
        gradient needs, the weight-gradient pass the rest); every compute op
        holds the device's working set while it runs.  The peak of
        :meth:`memory_timeline` is the memory model's (``memory[device].total``):
        the same rules the engine applies, in time."""
        if self.events is None:
            raise ValueError("this result has no timeline (simulated with timeline=False)")
        if isinstance(device, bool) or not isinstance(device, int) or \
                not 0 <= device < len(self.devices):
            raise ValueError(f"device must be in 0..{len(self.devices) - 1}, got {device!r}")
        mem = self.memory[device]
        work = mem.activations - self._peak_activations(device)
        out: list[tuple[float, float, str]] = [
            (0.0, mem.weights, "weights"), (0.0, mem.gradients, "gradients"),
            (0.0, mem.optimizer, "optimizer state"), (0.0, mem.other, "other")]
        for start, dur, dev, kind, lane, stage, mb, _peer in self.events:
            if dev != device or lane != 0 or kind not in _COMPUTE:
                continue
            st = self.stages[stage]
            act, act_w = st["activation_bytes"], st.get("activation_bytes_w", 0.0)
            what = f"stage {stage} micro-batch {mb}"
            if work > 0:
                out.append((start, work, f"{kind} working set, {what}"))
                out.append((start + dur, -work, f"{kind} working set, {what}"))
            if kind == "forward":
                out.append((start, act, f"activations, {what}"))
            elif kind == "backward":
                out.append((start + dur, -act, f"activations, {what}"))
            elif kind == "backward_input":
                out.append((start + dur, -(act - act_w), f"activations, {what}"))
            elif kind == "backward_weight":
                out.append((start + dur, -act_w, f"activations kept for the weight "
                                                 f"gradient, {what}"))
        # frees before allocations at the same instant, as the engine orders them
        return sorted(out, key=lambda e: (e[0], e[1] > 0))

    def _peak_activations(self, device: int) -> float:
        alive = peak = 0.0
        for _t, b, what in self._activation_steps(device):
            alive += b
            peak = max(peak, alive)
        return peak

    def _activation_steps(self, device: int) -> list[tuple[float, float, str]]:
        steps = []
        for start, dur, dev, kind, lane, stage, mb, _peer in self.events or ():
            if dev != device or lane != 0 or kind not in _COMPUTE:
                continue
            st = self.stages[stage]
            act, act_w = st["activation_bytes"], st.get("activation_bytes_w", 0.0)
            if kind == "forward":
                steps.append((start, act, ""))
            elif kind == "backward":
                steps.append((start + dur, -act, ""))
            elif kind == "backward_input":
                steps.append((start + dur, -(act - act_w), ""))
            elif kind == "backward_weight":
                steps.append((start + dur, -act_w, ""))
        return sorted(steps, key=lambda e: (e[0], e[1] > 0))

    def memory_timeline(self, device: int = 0) -> list[tuple[float, float]]:
        """``(seconds, bytes held)`` after each allocation or free of
        :meth:`memory_events` on ``device``."""
        total, out = 0.0, []
        for t, b, _what in self.memory_events(device):
            total += b
            out.append((t, total))
        return out

    def to_memory_snapshot(self, path: str | os.PathLike | None = None) -> dict:
        """The memory events of every pipeline device in the snapshot format
        of PyTorch's memory visualiser (``torch.cuda.memory._snapshot()``:
        ``segments`` with the blocks still held at the end, ``device_traces``
        with one ``alloc`` / ``free_requested`` / ``free_completed`` entry per
        event, times in microseconds, the op as the frame's name), written
        as a pickle of plain dicts and lists when ``path`` is given (open it
        at pytorch.org/memory_viz)."""
        import pickle

        segments: list[dict] = []
        traces: list[list[dict]] = []
        for d in range(len(self.devices)):
            base = (d + 1) << 40   # each device's own address range
            addr, live, trace = base, {}, []
            for t, b, what in self.memory_events(d):
                size = int(round(abs(b)))
                frame = [{"filename": "hpgo.simulate", "line": 0, "name": what}]
                us = int(round(t * 1e6))
                if b > 0:
                    live.setdefault(what, []).append((addr, size))
                    trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0,
                                  "time_us": us, "frames": frame})
                    addr += max(size, 512)
                elif b < 0 and live.get(what):
                    a, sz = live[what].pop(0)
                    for action in ("free_requested", "free_completed"):
                        trace.append({"action": action, "addr": a, "size": sz, "stream": 0,
                                      "time_us": us, "frames": frame})
            held = [(a, sz, what) for what, blocks in live.items() for a, sz in blocks]
            total = sum(sz for _a, sz, _w in held)
            segments.append({
                "device": d, "address": base, "total_size": max(total, addr - base),
                "allocated_size": total, "active_size": total, "requested_size": total,
                "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                "is_expandable": True, "frames": [],
                "blocks": [{"address": a, "size": sz, "requested_size": sz,
                            "state": "active_allocated",
                            "frames": [{"filename": "hpgo.simulate", "line": 0, "name": w}]}
                           for a, sz, w in sorted(held)]})
            traces.append(trace)
        snap = {"segments": segments, "device_traces": traces}
        if path is not None:
            _files.atomic_write(path, pickle.dumps(snap, protocol=2))
        return snap

    def to_chrome_trace(self, path: str | os.PathLike | None = None) -> dict | None:
        """The timeline as Chrome trace / Perfetto JSON: one process per
        device, one thread per stream (compute, send to the next device, send
        to the previous, gradient sync); each stream's events are disjoint.
        Returns the dict, or with ``path`` streams it to that file (memory
        bounded, see hpgo.timeline) and returns None."""
        if self.events is None:
            raise ValueError("this result has no timeline (simulated with timeline=False)")
        if path is not None:
            self.events.write_chrome_trace(path, len(self.devices))
            return None
        return {"traceEvents": list(self.events.chrome_trace_events(len(self.devices))),
                "displayTimeUnit": "ms"}


#: ParallelPlan fields that JSON holds as strings.
_TEXT_FIELDS = frozenset({"schedule", "recompute", "ep_placement", "moe_dispatcher", "model"})


_COMPUTE = ("forward", "backward", "backward_input", "backward_weight")


def _as_model(model: Any, profile_batch: float | None) -> Transformer | ProfiledModel:
    if isinstance(model, (Transformer, ProfiledModel)):
        return model
    if isinstance(model, (str, os.PathLike)):
        from .workmodel import _PRESETS, _ALIASES
        key = os.fspath(model).strip().lower()
        if isinstance(model, str) and (key in _PRESETS or key in _ALIASES):
            from .workmodel import transformer
            return transformer(model)
        return profile_model(model, profile_batch)
    from .graphfile import Profile
    if isinstance(model, Profile):
        return profile_model(model, profile_batch)
    raise TypeError("model must be an hpgo.Transformer, an hpgo.ProfiledModel, a preset name or a "
                    f"graph.txt path, not {type(model).__name__}")


def _headroom_cluster(c: Cluster, headroom: float) -> Cluster:
    """``c`` with each GPU's memory less the headroom: the C core's verdict
    and autoplan's memory bound then see the usable memory only (the search
    stays exact: it is the same search on a GPU with less memory)."""
    if not headroom:
        return c
    return c._with_memory_factor(1.0 - headroom)


def _with_headroom(mem: dict, capacity: float) -> MemoryBreakdown:
    """The C core's breakdown (judged against the usable memory) restated
    against the whole ``capacity``, with the headroom kept free."""
    usable = mem["capacity"]
    return MemoryBreakdown(**dict(mem, capacity=capacity, headroom=capacity - usable,
                                  margin=usable - mem["total"]))


def _overhead_bytes(v: Any) -> float | None:
    """overhead_bytes: None (the default) or a finite number >= 0."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"overhead_bytes must be a number, not {type(v).__name__}")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"overhead_bytes must be a finite number >= 0 (bytes), got {v!r}")
    return float(v)


def _price(c: Cluster, plan: ParallelPlan, price: Any) -> float | None:
    """Dollars per GPU-hour of ``plan`` on ``c``: ``price`` a number, or a
    mapping GPU type -> dollars (averaged over the GPUs the plan uses)."""
    from .cluster import plan_price

    by: dict[int, int] = {}
    for g in getattr(plan, "stages", None) or ():
        for kind, n in g.per_type():
            k = c.part_index(kind)
            by[k] = by.get(k, 0) + n * g.tp
    return plan_price(c, price, by or {0: plan.gpus})


def simulate(model: Any, cluster: Cluster | str, plan: ParallelPlan, *,
             precision: str | None = None, timeline: bool = True,
             overhead_bytes: float | None = None, profile_batch: float | None = None,
             headroom: float | None = None, tokens: float | None = None,
             price: "float | Mapping[str, float] | None" = None,
             framework: str | None = None) -> StepResult:
    """Simulate one training step of ``model`` on ``cluster`` with ``plan``.

    ``model``: an :func:`hpgo.transformer`, a :func:`hpgo.profile_model`, a
    transformer preset name or a ``graph.txt`` path (with ``profile_batch``
    unless its ``profile.json`` says it).  ``cluster``: an
    :class:`hpgo.Cluster` or a preset name.  ``precision``: ``"bf16"``
    (default for transformers), ``"fp16"``, ``"fp8"`` or ``"fp32"`` (default for
    profiles, which PipeDream measured in fp32).  ``overhead_bytes``: memory
    each GPU needs besides model states and activations (default 2 GB: CUDA
    context and communication buffers).  Raises ValueError naming the
    conflict for a plan the model or cluster cannot run, and for a plan made
    for another model.  A plan with ``stages`` runs each stage on its group's
    GPU type, replicas and shares (docs/uneven-plans.md).

    ``headroom``: the fraction of each GPU's memory a plan must leave free to
    fit (default :data:`DEFAULT_HEADROOM`, 3.3 %: the caching allocator's
    reserve; 0 judges against the whole memory).  ``tokens`` (to train on)
    and ``price`` (dollars per GPU-hour, or a mapping GPU type -> dollars
    per GPU-hour on a cluster of several types) add the days, GPU-hours and
    cost of the run (``days``, ``gpu_hours``, ``cost``).  ``mfu`` is against the dense
    peak of ``precision`` (fp8's for fp8), ``mfu_bf16`` against bf16's.
    ``framework`` (``"megatron"``, ``"torchtitan"``, ``"deepspeed"``) refuses,
    naming the rule, a plan that framework does not run, and sets its runtime
    defaults on the plan (:mod:`hpgo.frameworks`)."""
    m = _as_model(model, profile_batch)
    room = headroom_fraction(headroom)
    tokens = _positive_real("tokens", tokens)
    c = Cluster.preset(cluster) if isinstance(cluster, str) else cluster
    if not isinstance(c, Cluster):
        raise TypeError(f"cluster must be an hpgo.Cluster or a preset name, not {type(cluster).__name__}")
    if not isinstance(plan, ParallelPlan):
        raise TypeError(f"plan must be an hpgo.ParallelPlan, not {type(plan).__name__}")
    if c.parts and getattr(plan, "stages", None) is None:
        # an even plan names no GPU type: on several types it is ambiguous
        raise ValueError(
            f"cluster {c.name} has {len(c.parts)} GPU types: give the plan stages "
            "(ParallelPlan(stages=(hpgo.StageGroup(layers, dp, tp, gpu=TYPE), ...))) or "
            "simulate on one type (cluster.parts[k]); hpgo.autoplan searches both")
    price = _price(c, plan, price)
    mid = model_id(m)
    if plan.model is not None and plan.model != mid:
        raise ValueError(f"this plan was made for model {plan.model}, not {mid}: make a plan for "
                         "this model (or drop plan.model)")
    if precision is None:
        precision = "bf16" if isinstance(m, Transformer) else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    if not isinstance(timeline, bool):
        raise TypeError("timeline must be a bool")
    overhead_bytes = _overhead_bytes(overhead_bytes)
    if framework is not None:
        from . import frameworks as _frameworks
        # the plan as the framework runs it (its defaults where the plan leaves
        # ParallelPlan's), then its rules
        plan = _frameworks.apply_gradient_path(framework, plan, precision)
        plan = _frameworks.apply_fp8_recipe(framework, _frameworks.apply_defaults(framework, plan),
                                            precision)
        _frameworks.check(framework, plan, m if isinstance(m, Transformer) else None, precision)
    d = _core._step_simulate(m._tuple(PRECISIONS[precision]), _headroom_cluster(c, room)._tuple(),
                             plan._tuple(c), timeline, overhead_bytes)
    # each device's memory against its own GPU type's (a stage on a part of a
    # mixed cluster: that part's GPU; a group spanning types: the type shown)
    mems = tuple(_with_headroom(dev.pop("memory"),
                                (c.parts[dev.get("part", 0)].gpu if c.parts else c.gpu).memory_bytes)
                 for dev in d["devices"])
    is_t = isinstance(m, Transformer)
    # MFU and HFU against the dense peak of the precision used (the C core
    # takes bf16's for every 16-bit and 8-bit precision)
    dt = "fp32" if precision == "fp32" else "fp8" if precision == "fp8" else "bf16"
    peak = c.gpu.peak(dt)
    bf16 = c.gpu.peak("bf16")
    if c.parts and plan.stages is not None:
        # several GPU types: the peaks averaged over the GPUs the plan uses
        used = [(c.kinds[c.part_index(kind)].gpu, n * g.tp)
                for g in plan.stages
                for kind, n in g.per_type()]
        tot = sum(k for _, k in used)
        key = "fp32" if precision == "fp32" else "fp8" if precision == "fp8" else "bf16"
        peak = sum(g.peak(key) * k for g, k in used) / tot
        bf16 = sum(g.peak("bf16") * k for g, k in used) / tot
    it, n = d["iteration_time"], d["gpus"]
    if plan.stages is not None and c.parts:
        # stages on several GPU types: the mean peak per GPU of the plan's GPUs
        kinds, per = [], []
        for g in plan.stages:
            for kind, cnt in g.per_type():
                kinds.append(c.parts[c.part_index(kind)].gpu)
                per.append(cnt * g.tp)
        peak = sum(k.peak(dt) * w for k, w in zip(kinds, per)) / n
        bf16 = sum(k.peak("bf16") * w for k, w in zip(kinds, per)) / n
    if is_t and it > 0 and peak > 0:
        d["mfu"] = d["model_flops"] / (it * n * peak)
        d["hfu"] = d["hw_flops"] / (it * n * peak)
    # how far hpgo was from the published runs of this stack, and their errors' range
    note, band = _validation.checked_note_and_band(plan, c, precision, m)
    return StepResult(
        plan=plan, model=mid, cluster=c.name, iteration_time=d["iteration_time"],
        compute_time=d["compute_time"], samples_per_second=d["samples_per_second"],
        tokens_per_second=d["tokens_per_second"] if is_t else None,
        mfu=d["mfu"] if is_t else None, hfu=d["hfu"] if is_t else None,
        model_flops=d["model_flops"], hw_flops=d["hw_flops"], gpus=d["gpus"],
        microbatches=d["microbatches"], fits=d["fits"], devices=tuple(d["devices"]),
        memory=mems, stages=tuple(d["stages"]),
        events=Timeline(d["events"]) if d["events"] is not None else None,
        precision=precision, peak_flops=peak, bf16_peak_flops=bf16, headroom=room,
        tokens=tokens, price=price,
        gpu_notes=tuple(f"{q.gpu.name} held to {q.gpu.power_limit:g} W: compute at "
                        f"{q.clock_factor():.3f} of its curves' clock"
                        for q in (c.parts or (c,)) if q.gpu.power_limit > 0),
        checked=note, checked_errors=None if band is None else (band.low, band.high),
        cluster_gpus=c.gpus)
