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
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import _core
from . import _files
from .cluster import Cluster
from .timeline import Timeline
from .workmodel import ProfiledModel, Transformer, model_id, profile_model

__all__ = ["ParallelPlan", "StepResult", "MemoryBreakdown", "simulate", "SCHEDULES",
           "RECOMPUTE_MODES", "PRECISIONS"]

SCHEDULES = {"gpipe": _core.SCHEDULE_GPIPE, "1f1b": _core.SCHEDULE_1F1B,
             "interleaved-1f1b": _core.SCHEDULE_INTERLEAVED, "zb-h1": _core.SCHEDULE_ZBH1,
             "zb-v": _core.SCHEDULE_ZBV}
RECOMPUTE_MODES = {"none": _core.RECOMPUTE_NONE, "selective": _core.RECOMPUTE_SELECTIVE,
                   "full": _core.RECOMPUTE_FULL}
PRECISIONS = {"bf16": _core.PRECISION_BF16, "fp16": _core.PRECISION_FP16,
              "fp8": _core.PRECISION_FP8, "fp32": _core.PRECISION_FP32}
#: MoE token dispatchers (csrc/parplan.h HPGO_DISPATCH_)
DISPATCHERS = {"alltoall": 0, "deepep": 1}
DISPATCHERS_BY_CODE = {v: k for k, v in DISPATCHERS.items()}
# Share of what ideal phase-by-phase pairing hides that Megatron's 1F1B
# all-to-all overlap realises, measured (csrc/parplan.h; docs/moe.md)
MEGATRON_OVERLAP_SHARE = _core.EP_OVERLAP_MEGATRON


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


def _int(name: str, v: Any, lo: int = 1, hi: int = 1 << 40) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    i = v.__index__()
    if not lo <= i <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {i}")
    return int(i)


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

    def __post_init__(self) -> None:
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
        for f in ("sequence_parallel", "overlap_grad_reduce", "fp8_params"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(f"{f} must be a bool")
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

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def microbatches(self) -> int:
        """Micro-batches per iteration and pipeline."""
        return self.global_batch // (self.micro_batch * self.dp)

    def with_(self, **changes: Any) -> "ParallelPlan":
        return dataclasses.replace(self, **changes)

    def _tuple(self) -> tuple:
        return (self.tp, self.pp, self.dp, self.cp, self.ep, self.virtual_stages, self.micro_batch,
                self.global_batch, SCHEDULES[self.schedule], RECOMPUTE_MODES[self.recompute],
                int(self.sequence_parallel), self.zero, int(self.overlap_grad_reduce),
                self.split, self.etp or 0, int(self.ep_placement == "outer"),
                int(bool(self.overlap_moe_comm)), DISPATCHERS[self.moe_dispatcher],
                int(self.fp8_params), overlap_share(self.overlap_moe_comm))

    @property
    def expert_data_parallel(self) -> int:
        """GPUs holding a copy of each expert shard: tp cp dp / (etp ep)."""
        return self.tp * self.cp * self.dp // ((self.etp or self.tp) * self.ep)

    # -- conversions ----------------------------------------------------------
    @classmethod
    def from_hpgo(cls, result: Any, global_batch: int, *, micro_batch: int | None = None,
                  model: str | None = None) -> "ParallelPlan":
        """The plan of an HPGO result: ``py_orchestrate()``'s ``(speedup,
        stages)`` tuple, an :class:`hpgo.Plan`, or a stage list of
        ``(start, end, units, gpus)``.  Every stage must have the same number
        of replicas (the neutral plan has one dp); the stage boundaries are
        HPGO's state indices, kept as the layer split."""
        stages = result
        if hasattr(result, "stages") and not isinstance(result, tuple):
            stages = [(s.start, s.end, getattr(s, "units", 1), list(s.gpus)) for s in result.stages]
        elif isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], list):
            stages = result[1]
        try:
            stages = [(int(s[0]), int(s[1]), list(s[3])) for s in stages]
        except (TypeError, ValueError, IndexError):
            raise ValueError("not an HPGO result: expected (speedup, [(start, end, units, gpus), ...])") from None
        if not stages:
            raise ValueError("an HPGO result with no stages")
        reps = {len(g) for _, _, g in stages}
        if len(reps) != 1:
            raise ValueError(f"the stages have different replica counts {sorted(reps)}: the neutral "
                             "plan has one data-parallel size (simulate it with hpgo.simulate_plan)")
        dp = reps.pop()
        split = tuple([stages[0][0]] + [e for _, e, _ in stages])
        mb = micro_batch if micro_batch is not None else max(1, global_batch // dp)
        return cls(global_batch=global_batch, pp=len(stages), dp=dp, micro_batch=mb,
                   split=split, model=model)

    @classmethod
    def from_replan(cls, result: Any, global_batch: int, *, dp: int = 1, micro_batch: int = 1,
                    schedule: str = "1f1b", model: str | None = None) -> "ParallelPlan":
        """The plan of a DynPipe re-planning result (:func:`hpgo.replan`): one
        pipeline stage per entry of its chosen split (layers per stage), as a
        layer split.  HAP's heterogeneous plans (uneven shares per device)
        have no neutral form."""
        counts = getattr(result, "chosen", result)
        try:
            counts = [int(c) for c in counts]
        except (TypeError, ValueError):
            raise ValueError("not a re-planning result: expected layers per stage") from None
        if not counts or min(counts) < 1:
            raise ValueError("every stage of the split needs at least one layer")
        split = [0]
        for c in counts:
            split.append(split[-1] + c)
        return cls(global_batch=global_batch, pp=len(counts), dp=dp, micro_batch=micro_batch,
                   schedule=schedule, split=tuple(split), model=model)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["split"] = list(self.split) if self.split is not None else None
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

    # -- exports ------------------------------------------------------------
    def _check_layers(self, model: Any) -> None:
        if model is not None and self.virtual_stages > 1 and \
                getattr(model, "layers", 0) % (self.pp * self.virtual_stages):
            raise ValueError("Megatron-LM needs the layers to divide evenly over pp x "
                             "virtual_stages")

    def megatron_args(self, model: Transformer | None = None, *, precision: str = "bf16") -> str:
        """Megatron-LM command-line arguments of this plan (and of the
        model's shape when a transformer is given)."""
        if precision not in ("bf16", "fp16", "fp8"):
            raise ValueError("Megatron-LM trains in bf16, fp16 or fp8")
        self._check_layers(model)
        a = [f"--tensor-model-parallel-size {self.tp}"] + \
            ([f"--context-parallel-size {self.cp}"] if self.cp > 1 else []) + \
            ([f"--expert-model-parallel-size {self.ep}"] if self.ep > 1 else []) + \
            ([f"--expert-tensor-parallel-size {self.etp}"]
             if self.etp is not None and self.etp != self.tp else []) + [
             f"--pipeline-model-parallel-size {self.pp}",
             f"--micro-batch-size {self.micro_batch}", f"--global-batch-size {self.global_batch}"]
        if self.virtual_stages > 1 and self.schedule == "interleaved-1f1b" and model is not None:
            a.append(f"--num-layers-per-virtual-pipeline-stage "
                     f"{model.layers // (self.pp * self.virtual_stages)}")
        if self.sequence_parallel:
            a.append("--sequence-parallel")
        if self.recompute == "selective":
            if isinstance(model, Transformer) and model.flash:
                # with fused attention hpgo's selective recomputation is
                # Megatron-Core's module list (docs/moe.md)
                mods = ["layernorm"] + (["moe_act"] if model.experts else []) + \
                    (["mla_up_proj"] if model.mla else [])
                a.append("--recompute-granularity selective --recompute-modules " + " ".join(mods))
            else:
                a.append("--recompute-activations")
        elif self.recompute == "full":
            a.append("--recompute-granularity full --recompute-method uniform "
                     "--recompute-num-layers 1")
        if self.zero == 1 or self.zero == 2:
            a.append("--use-distributed-optimizer")
        elif self.zero == 3:
            a.append("--use-torch-fsdp2")
        if self.overlap_grad_reduce and self.dp > 1:
            a.append("--overlap-grad-reduce" + (" --overlap-param-gather" if self.zero else ""))
        a.append({"bf16": "--bf16", "fp16": "--fp16", "fp8": "--bf16 --fp8-format hybrid"}[precision])
        if precision == "fp8" and self.fp8_params:
            a.append("--fp8-param-gather")
        if isinstance(model, Transformer):
            a += [f"--num-layers {model.layers}", f"--hidden-size {model.hidden}",
                  f"--ffn-hidden-size {model.ffn}", f"--num-attention-heads {model.heads}",
                  f"--seq-length {model.seq}", f"--max-position-embeddings {model.seq}"]
            if model.kv_heads != model.heads:
                a.append(f"--group-query-attention --num-query-groups {model.kv_heads}")
            if model.mlp == "swiglu":
                a.append("--swiglu")
            if model.norm == "rmsnorm":
                a.append("--normalization RMSNorm")
            if not model.bias:
                a.append("--disable-bias-linear")
            if not model.tied:
                a.append("--untie-embeddings-and-output-weights")
            if not model.learned_pos:
                a.append("--position-embedding-type rope")
            if not model.dropout:
                a.append("--attention-dropout 0.0 --hidden-dropout 0.0")
            if model.flash:
                a.append("--use-flash-attn")
            if model.experts:
                a.append(f"--num-experts {model.experts} --moe-router-topk {model.topk} "
                         f"--moe-ffn-hidden-size {model.expert_ffn} --moe-grouped-gemm "
                         + ("--moe-token-dispatcher-type flex --moe-enable-deepep"
                            if self.moe_dispatcher == "deepep"
                            else "--moe-token-dispatcher-type alltoall"))
                if model.routing_groups > 1:
                    a.append(f"--moe-router-num-groups {model.routing_groups} "
                             f"--moe-router-group-topk {model.routing_group_topk}")
                if model.shared_experts:
                    a.append(f"--moe-shared-expert-intermediate-size "
                             f"{model.shared_experts * model.shared_ffn}")
                if model.dense_first or model.moe_every > 1:
                    pattern = [int(i >= model.dense_first and (i + 1) % model.moe_every == 0)
                               for i in range(model.layers)]
                    a.append(f"--moe-layer-freq \"[{','.join(map(str, pattern))}]\"")
                if self.overlap_moe_comm:
                    a.append("--overlap-moe-expert-parallel-comm")
                if model.capacity_factor:
                    a.append(f"--moe-expert-capacity-factor {model.capacity_factor:g}")
            if model.mla:
                a.append(f"--multi-latent-attention --q-lora-rank {model.q_lora} "
                         f"--kv-lora-rank {model.kv_lora} --qk-head-dim {model.qk_nope} "
                         f"--qk-pos-emb-head-dim {model.qk_rope} --v-head-dim {model.v_head}")
            if model.qk_norm:
                a.append("--qk-layernorm")
            if model.mtp:
                a.append(f"--mtp-num-layers {model.mtp}")
        notes = []
        if self.schedule in ("zb-h1", "zb-v"):
            notes.append(f"# {self.schedule}: not in upstream Megatron-LM (Sea AI Lab's "
                         "zero-bubble fork, or torchtitan)")
        if self.schedule == "gpipe":
            notes.append("# gpipe: Megatron-LM runs 1F1B (same time, less memory)")
        if self.split is not None and model is not None:
            notes.append("# uneven layer split " + ",".join(map(str, self.split)) +
                         ": see --decoder-first-pipeline-num-layers / "
                         "--decoder-last-pipeline-num-layers")
        return " \\\n".join(a) + ("\n" + "\n".join(notes) if notes else "")

    def deepspeed_config(self, *, precision: str = "bf16") -> dict:
        """A DeepSpeed configuration (JSON-ready dict): batch sizes, ZeRO
        stage, precision, activation checkpointing.  DeepSpeed takes tp and pp
        from the model code (Megatron-DeepSpeed's --tensor-model-parallel-size,
        PipelineModule(num_stages=pp))."""
        if precision not in ("bf16", "fp16", "fp32"):
            raise ValueError("DeepSpeed precision: bf16, fp16 or fp32")
        cfg: dict[str, Any] = {
            "train_batch_size": self.global_batch,
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": self.microbatches,
            "zero_optimization": {"stage": self.zero,
                                  "overlap_comm": bool(self.overlap_grad_reduce)},
        }
        if precision != "fp32":
            cfg[precision] = {"enabled": True}
        if self.recompute != "none":
            cfg["activation_checkpointing"] = {"partition_activations": self.sequence_parallel,
                                               "contiguous_memory_optimization": False}
        return cfg

    def torchtitan_toml(self, model: Transformer | None = None) -> str:
        """The [parallelism], [training] and [activation_checkpoint] sections
        of a torchtitan job file."""
        sched = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B",
                 "zb-h1": "InterleavedZeroBubble", "zb-v": "ZBVZeroBubble"}[self.schedule]
        fsdp = self.zero >= 2
        lines = ["[parallelism]",
                 f"data_parallel_replicate_degree = {1 if fsdp else self.dp}",
                 f"data_parallel_shard_degree = {self.dp if fsdp else 1}",
                 f"tensor_parallel_degree = {self.tp}",
                 f"pipeline_parallel_degree = {self.pp}",
                 f'pipeline_parallel_schedule = "{sched}"',
                 f"pipeline_parallel_microbatch_size = {self.micro_batch}",
                 f"context_parallel_degree = {self.cp}"]
        if self.ep > 1:
            lines.append(f"expert_parallel_degree = {self.ep}")
        if self.etp is not None and self.etp != self.tp:
            lines.append(f"expert_tensor_parallel_degree = {self.etp}")
        lines += ["",
                 "[training]",
                 f"global_batch_size = {self.global_batch}",
                 f"local_batch_size = {self.global_batch // self.dp}"]
        if model is not None and isinstance(model, Transformer):
            lines.append(f"seq_len = {model.seq}")
        lines += ["", "[activation_checkpoint]", f'mode = "{self.recompute}"']
        return "\n".join(lines) + "\n"

    def split_points(self, model: ProfiledModel | Transformer) -> list[tuple[int, int, str]]:
        """(model stage, first layer, that layer's name) of every model stage:
        the split points for torch.distributed.pipelining."""
        n = model.layers
        K = self.pp * self.virtual_stages
        if self.split is not None:
            b = list(self.split)
        else:
            base, extra = divmod(n, K)
            counts = [base] * K
            for k in list(range(1, K - 1)) + [0, K - 1]:
                if extra == 0:
                    break
                counts[k] += 1
                extra -= 1
            b = [0]
            for c in counts:
                b.append(b[-1] + c)
        if len(b) != K + 1 or b[-1] != n:
            raise ValueError(f"the plan's split does not cover the model's {n} layers")
        names = getattr(model, "descs", ()) or tuple(f"layers.{i}" for i in range(n))
        return [(k, b[k], names[b[k]]) for k in range(K)]

    def describe(self, *, global_batch: bool = True) -> str:
        """The plan in one line: "tp=8 pp=8 dp=1 mb=1 gb=64 1f1b v=3 sp ..."."""
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
        if self.fp8_params:
            parts.append("fp8-params")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"ParallelPlan({self.describe()})"


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

    def __repr__(self) -> str:
        g = 2.0 ** 30
        return (f"MemoryBreakdown({self.total / g:.1f} of {self.capacity / g:.1f} GiB, "
                f"{'fits' if self.fits else 'DOES NOT FIT'}: weights {self.weights / g:.1f}, "
                f"gradients {self.gradients / g:.1f}, optimizer {self.optimizer / g:.1f}, "
                f"activations {self.activations / g:.1f}, other {self.other / g:.1f})")


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

    @property
    def bubble(self) -> float:
        """Idle share of the busiest-device's iteration (1 - its busy time / iteration)."""
        return min(d["bubble"] for d in self.devices)

    @property
    def peak_memory(self) -> float:
        return max(m.total for m in self.memory)

    def summary(self) -> str:
        g = 2.0 ** 30
        worst = max(range(len(self.memory)), key=lambda i: self.memory[i].total)
        m = self.memory[worst]
        rate = (f"{self.tokens_per_second:,.0f} tokens/s" if self.tokens_per_second
                else f"{self.samples_per_second:,.1f} samples/s")
        mfu = f", MFU {self.mfu * 100:.1f} %" if self.mfu else ""
        verdict = "fits" if self.fits else "DOES NOT FIT"
        return (f"{self.plan!r} on {self.cluster}: {self.iteration_time:.4g} s/iteration, {rate}"
                f"{mfu}; peak memory {m.total / g:.1f} of {m.capacity / g:.1f} GiB on device "
                f"{worst} ({verdict})")

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
                f"<th>bubble</th><th>in flight</th><th>GiB</th><th>fits</th></tr>{rows}{more}</table>")

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


def simulate(model: Any, cluster: Cluster | str, plan: ParallelPlan, *,
             precision: str | None = None, timeline: bool = True,
             overhead_bytes: float | None = None, profile_batch: float | None = None) -> StepResult:
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
    for another model."""
    m = _as_model(model, profile_batch)
    c = Cluster.preset(cluster) if isinstance(cluster, str) else cluster
    if not isinstance(c, Cluster):
        raise TypeError(f"cluster must be an hpgo.Cluster or a preset name, not {type(cluster).__name__}")
    if not isinstance(plan, ParallelPlan):
        raise TypeError(f"plan must be an hpgo.ParallelPlan, not {type(plan).__name__}")
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
    if overhead_bytes is not None and not (isinstance(overhead_bytes, (int, float)) and
                                           not isinstance(overhead_bytes, bool) and
                                           0 <= overhead_bytes < float("inf")):
        raise ValueError(f"overhead_bytes must be a finite number >= 0 (bytes), got "
                         f"{overhead_bytes!r}")
    d = _core._step_simulate(m._tuple(PRECISIONS[precision]), c._tuple(), plan._tuple(), timeline,
                             overhead_bytes)
    mems = tuple(MemoryBreakdown(**dev.pop("memory")) for dev in d["devices"])
    is_t = isinstance(m, Transformer)
    return StepResult(
        plan=plan, model=mid, cluster=c.name, iteration_time=d["iteration_time"],
        compute_time=d["compute_time"], samples_per_second=d["samples_per_second"],
        tokens_per_second=d["tokens_per_second"] if is_t else None,
        mfu=d["mfu"] if is_t else None, hfu=d["hfu"] if is_t else None,
        model_flops=d["model_flops"], hw_flops=d["hw_flops"], gpus=d["gpus"],
        microbatches=d["microbatches"], fits=d["fits"], devices=tuple(d["devices"]),
        memory=mems, stages=tuple(d["stages"]),
        events=Timeline(d["events"]) if d["events"] is not None else None)
