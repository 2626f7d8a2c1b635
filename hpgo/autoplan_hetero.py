"""The plan search on a cluster of several GPU types or with slowed GPUs
(``hpgo.autoplan`` calls it for a cluster with ``parts`` or ``speeds``).

The C core (``csrc/search/hetplan.c``) searches uneven pipeline plans:
which GPU types hold which stages, each type's stages, replicas and
tensor parallelism, the micro-batch, schedule, recomputation and ZeRO
stage, each replica's share of a micro-batch by its speed and the layer
split (even, or balanced on each stage's own GPUs), scored by the step
engine with memory checked on each stage's GPU type; exact over that space
with proven bounds (``exhaustive=True`` simulates every plan).  The plans
are :class:`hpgo.ParallelPlan` values with ``stages``
(docs/heterogeneous.md).

:func:`proportional_dp` prices the baseline a heterogeneous cluster is
usually compared with: data parallelism over every GPU, each replica's
share of the batch proportional to its speed, under the same model.
"""
from __future__ import annotations

import math
import time
from typing import Any, Mapping

from . import _core
from .cluster import Cluster, part_prices
from .parallel import (KERNEL_SETS, PRECISIONS, RECOMPUTE_MODES, SCHEDULES, TP_OVERLAPS,
                       ParallelPlan, StageGroup, _headroom_cluster, simulate)
from .workmodel import Transformer, model_id

__all__ = ["hetero_search", "stage_gpu_name", "proportional_dp"]

_SCHED_NAMES = {v: k for k, v in SCHEDULES.items()}
_RC_NAMES = {v: k for k, v in RECOMPUTE_MODES.items()}


def _fixed(name: str, v: Any, table: dict | None = None) -> int:
    from .autoplan import _fixed as fixed
    return fixed(name, v, table)


def stage_gpu_name(c: Cluster, part: int) -> str | int:
    """What a StageGroup calls part ``part`` of ``c``: its GPU type when no
    other part has it, else the part index."""
    kinds = c.kinds
    name = kinds[part].gpu.name
    return name if sum(q.gpu.name == name for q in kinds) == 1 else part


def hetero_search(m: Any, c: Cluster, global_batch: int, *, given: set, top: int,
                  objective: str, exhaustive: bool, threads: int, max_micro_batch: int,
                  overhead_bytes: float | None, precision: str, headroom: float,
                  tokens: float | None, price: Any, tp: int | None, micro_batch: int | None,
                  schedule: str | None, recompute: str | None, zero: int | None,
                  kernels: str, tp_overlap: str, timeout: float | None,
                  reshard_after_forward: Any, shard_size: int, offload_optimizer: Any,
                  offload_activations: Any) -> Any:
    """``hpgo.autoplan`` on a cluster with parts or speeds (its arguments,
    checked there; ``given`` names the options this search does not take)."""
    from .autoplan import RankedPlan, RankedPlans

    if given:
        raise ValueError(
            f"on a cluster of several GPU types or with slowed GPUs the search plans uneven "
            f"pipelines and does not take {', '.join(sorted(given))} (docs/heterogeneous.md)")
    if schedule in ("interleaved-1f1b", "zb-v"):
        raise ValueError(f"schedule={schedule!r}: an uneven plan runs one model stage per "
                         "group (gpipe, 1f1b or zb-h1)")
    if offload_optimizer is None or offload_activations is None or offload_optimizer or \
            offload_activations or shard_size or reshard_after_forward is not True:
        raise ValueError("the heterogeneous search does not offload or shard beyond ZeRO's "
                         "stage (leave offload_*, shard_size and reshard_after_forward)")
    prices = part_prices(c, price) if price is not None else None
    mid = model_id(m)
    base = ParallelPlan(micro_batch=1, global_batch=int(global_batch), kernels=kernels,
                        tp_overlap=tp_overlap if tp_overlap != "none" else "none")
    mt = m._tuple(PRECISIONS[precision])
    cs = _headroom_cluster(c, headroom)
    opts = (global_batch, _core.OBJECTIVE_TIME if objective == "time" else _core.OBJECTIVE_COST,
            top, int(exhaustive), threads, max_micro_batch, overhead_bytes,
            None if prices is None or objective != "cost" else prices,
            _fixed("tp", tp), _fixed("micro_batch", micro_batch),
            _fixed("schedule", schedule, SCHEDULES), _fixed("recompute", recompute, RECOMPUTE_MODES),
            _fixed("zero", zero))
    t0 = time.perf_counter()
    d = _core._hetplan(mt, cs._tuple(), opts, base._tuple(), timeout)
    elapsed = time.perf_counter() - t0
    stats = {k: int(v) for k, v in d.items() if k != "plans"}
    # the ranking's figures count shapes (a plan but its split) as plans;
    # the C core's "candidates" are the plans it built (two splits a shape)
    stats["plans_built"] = stats["candidates"]
    stats["candidates"] = stats["shapes"]
    stats["pruned_memory"] += stats["pruned_shapes_memory"]
    ranked = []
    for rank, (groups, split, mb, sch, rc, sp, z, _t, _s, balanced) in enumerate(d["plans"], 1):
        stages = tuple(StageGroup(layers=(split[k], split[k + 1]), dp=dp, tp=gtp,
                                  gpu=stage_gpu_name(c, part), shares=shares)
                       for k, (part, gtp, dp, shares) in enumerate(groups))
        plan = ParallelPlan(stages=stages, micro_batch=mb, global_batch=int(global_batch),
                            schedule=_SCHED_NAMES[sch], recompute=_RC_NAMES[rc],
                            sequence_parallel=bool(sp), zero=z, model=mid, kernels=kernels,
                            tp_overlap=tp_overlap)
        res = simulate(m, c, plan, precision=precision, timeline=False,
                       overhead_bytes=overhead_bytes, headroom=headroom, tokens=tokens,
                       price=price)
        ranked.append(RankedPlan(rank, plan, res, bool(balanced)))
    return RankedPlans(m, c, int(global_batch), objective, tuple(ranked), stats, elapsed,
                       precision, headroom, tokens,
                       price if not isinstance(price, Mapping) else None)


def proportional_dp(model: Any, cluster: Cluster, global_batch: int, *,
                    precision: str | None = None, recompute: str = "none", zero: int = 0,
                    overhead_bytes: float | None = None, headroom: float | None = None
                    ) -> dict[str, Any]:
    """Data parallelism over every GPU of ``cluster``, each GPU a replica of
    the whole model with a share of the global batch proportional to its
    speed (its GPU type's step time for one sample, times its speed
    factor), under the step model: HAP's and Metis's baseline.

    Each part's replicas are priced by the step engine as a one-stage plan
    on that part (their samples, their own gradient all-reduce); the
    gradient all-reduce across parts is a ring over the parts' join, whose
    per-GPU bandwidth bounds it (cost: 2 (n - 1) / n x the gradient bytes /
    (join bandwidth x efficiency) + 2 (n - 1) join latencies, n the GPUs
    of the ring), after each part's own all-reduce.  Returns the iteration
    time, the samples per GPU type, whether every replica fits, and the
    pieces."""
    from .parallel import _as_model, headroom_fraction

    m = _as_model(model, None)
    c = cluster
    if precision is None:
        precision = "bf16" if isinstance(m, Transformer) else "fp32"
    kinds = c.kinds
    B = int(global_batch)
    n_gpus = [q.gpus for q in kinds]
    total = sum(n_gpus)
    if B < total:
        raise ValueError(f"global batch {B} is smaller than the {total} GPUs")
    # one sample's compute on each type: the engine's time for a replica of 1 sample
    first = 0
    speeds = []
    for k, q in enumerate(kinds):
        sp = [c.speed(first + i) for i in range(q.gpus)]
        first += q.gpus
        speeds.append(sp)
    rate = []
    for k, q in enumerate(kinds):
        plan = ParallelPlan(micro_batch=1, global_batch=1, recompute=recompute)
        r = simulate(m, q, plan, precision=precision, timeline=False,
                     overhead_bytes=overhead_bytes, headroom=headroom)
        rate.append(1.0 / r.compute_time)
    # integer shares of the batch: proportional to rate x speed, largest remainder
    w = [rate[k] * s for k in range(len(kinds)) for s in speeds[k]]
    raw = [B * x / sum(w) for x in w]
    n = [max(1, math.floor(x)) for x in raw]
    while sum(n) < B:
        i = min(range(len(n)), key=lambda j: ((n[j] + 1) / w[j], j))
        n[i] += 1
    while sum(n) > B:
        i = max((j for j in range(len(n)) if n[j] > 1), key=lambda j: (n[j] / w[j], -j))
        n[i] -= 1
    # each part: one stage of all its GPUs, shares by samples
    out_parts = []
    worst = 0.0
    fits = True
    grad_bytes = 0.0
    at = 0
    for k, q in enumerate(kinds):
        mine = n[at:at + q.gpus]
        at += q.gpus
        Mk = sum(mine)
        shares = tuple(x / Mk for x in mine)
        stage = StageGroup(layers=(0, m.layers), dp=q.gpus, tp=1,
                           shares=shares if len(set(mine)) > 1 else None)
        plan = ParallelPlan(stages=(stage,), micro_batch=Mk, global_batch=Mk,
                            recompute=recompute, zero=zero)
        sub = q if not any(i for i, _ in c.speeds) else q  # speeds are applied below
        r = simulate(m, sub.with_speed({i: v for i, v in _part_speeds(c, k).items()}),
                     plan, precision=precision, timeline=False,
                     overhead_bytes=overhead_bytes, headroom=headroom)
        fits = fits and r.fits
        grad_bytes = r.devices[0]["params"] * (4 if precision == "fp32" else 2)
        out_parts.append({"gpu": q.gpu.name, "gpus": q.gpus, "samples": Mk,
                          "iteration_time": r.iteration_time, "fits": r.fits})
        worst = max(worst, r.iteration_time)
    cross = 0.0
    if len(kinds) > 1:
        j = c.join
        ring = total
        cross = (2 * (ring - 1) / ring * grad_bytes / (j.bandwidth * j.efficiency)
                 + 2 * (ring - 1) * j.latency)
    headroom_fraction(headroom)
    return {"iteration_time": worst + cross, "parts": out_parts, "cross_part_allreduce": cross,
            "fits": fits, "samples": n}


def _part_speeds(c: Cluster, k: int) -> dict[int, float]:
    """The slowed GPUs of part ``k``, in the part's own numbering."""
    first = sum(q.gpus for q in c.kinds[:k])
    n = c.kinds[k].gpus
    return {i - first: v for i, v in c.speeds if first <= i < first + n}
