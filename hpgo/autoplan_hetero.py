"""The plan search on a cluster of several GPU types or with slowed GPUs
(``hpgo.autoplan`` calls it for a cluster with ``parts`` or ``speeds``).

The C core (``csrc/search/hetplan.c``) searches uneven pipeline plans:
which GPU types hold which stages, each type's stages, replicas and
tensor parallelism, the micro-batch, schedule, recomputation and ZeRO
stage, each replica's share of a micro-batch by its speed and the layer
split (even, or balanced on each stage's own GPUs), scored by the step
engine with memory checked on each stage's GPU type; on several types also
stages whose replicas span every type (data parallelism over every GPU with
shares by speed, and pipelines of such stages); exact over that space
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
from .parallel import (PRECISIONS, RECOMPUTE_MODES, SCHEDULES, ParallelPlan, StageGroup,
                       _headroom_cluster, simulate)
from .workmodel import Transformer, model_id

__all__ = ["hetero_search", "stage_gpu_name", "proportional_dp"]

_SCHED_NAMES = {v: k for k, v in SCHEDULES.items()}
_RC_NAMES = {v: k for k, v in RECOMPUTE_MODES.items()}



def _group(c: Any, layers: tuple, part: int, gtp: int, dp: int, shares: Any,
           parts: Any = None) -> StageGroup:
    """A search result's stage group; ``parts`` (one a replica, in runs)
    for a group whose replicas span GPU types."""
    if parts is None:
        return StageGroup(layers=layers, dp=dp, tp=gtp, gpu=stage_gpu_name(c, part),
                          shares=shares)
    kinds: list = []
    counts: list = []
    for q in parts:
        if kinds and kinds[-1] == q:
            counts[-1] += 1
        else:
            kinds.append(q)
            counts.append(1)
    return StageGroup(layers=layers, dp=dp, tp=gtp,
                      gpu=tuple(stage_gpu_name(c, q) for q in kinds),
                      replicas=tuple(counts), shares=shares)

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
            _fixed("schedule", schedule, SCHEDULES),
            _fixed("recompute", recompute, RECOMPUTE_MODES),
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
        stages = tuple(_group(c, (split[k], split[k + 1]), *g) for k, g in enumerate(groups))
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
                    accumulation: int = 1, overhead_bytes: float | None = None,
                    headroom: float | None = None) -> dict[str, Any]:
    """Data parallelism over every GPU of ``cluster`` with each GPU's share
    of the batch proportional to its speed, under the step model (HAP's
    DP-CP and Metis's data-parallel baseline).

    A GPU's speed is its type's samples per second (the step engine's
    compute time of one sample on that type) times its speed factor; each
    of the ``accumulation`` micro-batches (gradient accumulation) shares
    its global_batch / accumulation samples out in whole samples in that
    proportion (the smallest largest samples / speed).  Each part runs as
    one uneven stage of all its GPUs with those shares (the engine prices
    its forward and backward, memory and optimizer step on the part); the
    gradient all-reduce spans every GPU, a ring whose slowest link is the
    join between parts (within one type: the part's own all-reduce):
    2 (n - 1) / n x gradient bytes / (join bandwidth x efficiency) +
    2 (n - 1) x join latency over n GPUs.

    Returns ``time`` (compute, then the all-reduce, then the optimizer
    step), ``time_overlapped`` (the all-reduce beside the last
    micro-batch's backward, bucket by bucket as DDP does: only what that
    backward cannot cover is exposed, and the backward runs slower beside
    what it covers, as the engine prices it), ``fits``, ``samples`` per GPU
    and micro-batch, and the pieces."""
    from .parallel import _as_model

    m = _as_model(model, None)
    c = cluster
    if precision is None:
        precision = "bf16" if isinstance(m, Transformer) else "fp32"
    kinds = c.kinds
    B = int(global_batch)
    a = int(accumulation)
    total = sum(q.gpus for q in kinds)
    if a < 1 or B % a or B // a < total:
        raise ValueError(f"accumulation {a} must divide the global batch {B} and leave each of "
                         f"the {total} GPUs a sample a micro-batch")
    U = B // a
    rate = []
    for q in kinds:
        one = ParallelPlan(micro_batch=1, global_batch=1, recompute=recompute)
        r = simulate(m, q, one, precision=precision, timeline=False,
                     overhead_bytes=overhead_bytes, headroom=headroom)
        rate.append(1.0 / r.compute_time)
    w = []
    for k, q in enumerate(kinds):
        sp = _part_speeds(c, k)
        w += [rate[k] * sp.get(i, 1.0) for i in range(q.gpus)]
    n = [max(1, math.floor(U * x / sum(w))) for x in w]
    while sum(n) > U:
        i = max((j for j in range(len(n)) if n[j] > 1), key=lambda j: (n[j] / w[j], -j))
        n[i] -= 1
    while sum(n) < U:
        i = min(range(len(n)), key=lambda j: ((n[j] + 1) / w[j], j))
        n[i] += 1
    parts: list[dict[str, Any]] = []
    at = 0
    compute = opt = 0.0
    last_bwd = INF = float("inf")
    fits = True
    grad_bytes = 0.0
    for k, q in enumerate(kinds):
        mine = n[at:at + q.gpus]
        at += q.gpus
        Mk = sum(mine)
        even = len(set(mine)) == 1
        stage = StageGroup(layers=(0, m.layers), dp=q.gpus, tp=1,
                           shares=None if even else tuple(x / Mk for x in mine))
        plan = ParallelPlan(stages=(stage,), micro_batch=Mk, global_batch=Mk * a,
                            recompute=recompute, zero=zero)
        r = simulate(m, q.with_speed(_part_speeds(c, k)), plan, precision=precision,
                     timeline=False, overhead_bytes=overhead_bytes, headroom=headroom)
        dev = r.devices[0]
        st = r.stages[0]
        fits = fits and r.fits
        compute = max(compute, dev["compute_end"])
        opt = max(opt, dev["optimizer"])
        last_bwd = min(last_bwd, st["backward_input"] + st["backward_weight"])
        grad_bytes = dev["params"] * (4 if precision == "fp32" else 2)
        parts.append({"gpu": q.gpu.name, "gpus": q.gpus, "samples": Mk,
                      "most_per_gpu": max(mine), "fits": r.fits, "own_step": r.iteration_time})
    if len(kinds) > 1:
        j = c.join
        assert j is not None
        cbw = j.collective_bandwidth if j.collective_bandwidth is not None else j.bandwidth
        ring = (2 * (total - 1) / total * grad_bytes / (cbw * j.efficiency)
                + 2 * (total - 1) * j.latency)
    else:
        ring = max(0.0, float(parts[0]["own_step"]) - compute - opt)
    last_bwd = 0.0 if last_bwd == INF else min(last_bwd, compute)
    # the backward beside the all-reduce runs slower, as the engine prices
    # compute beside a data-parallel collective (DP_OVERLAP_SLOWDOWN)
    beside = last_bwd + min(ring, last_bwd) * (1 - 1 / DP_OVERLAP_SLOWDOWN)
    return {"time": compute + ring + opt,
            "time_overlapped": compute - last_bwd + max(beside, ring) + opt,
            "compute": compute, "all_reduce": ring, "optimizer": opt, "fits": fits,
            "samples": n, "accumulation": a, "parts": parts}


# csrc/step/engine.c's DP_OVERLAP_SLOWDOWN: compute beside a data-parallel
# collective runs this much slower (arXiv 2507.03114)
DP_OVERLAP_SLOWDOWN = 1.189


def _part_speeds(c: Cluster, k: int) -> dict[int, float]:
    """The slowed GPUs of part ``k``, in the part's own numbering."""
    first = sum(q.gpus for q in c.kinds[:k])
    n = c.kinds[k].gpus
    return {i - first: v for i, v in c.speeds if first <= i < first + n}


def best_proportional_dp(model: Any, cluster: Cluster, global_batch: int, **kw: Any
                         ) -> dict[str, Any] | None:
    """The fastest :func:`proportional_dp` that fits, over recomputation
    (none, selective, full; none and full for a profiled model), ZeRO 0 to
    3 and gradient accumulation (the divisors of the global batch that
    leave every GPU a sample), by ``time_overlapped``; None when none
    fits."""
    from .parallel import _as_model

    m = _as_model(model, None)
    modes = ("none", "selective", "full") if isinstance(m, Transformer) else ("none", "full")
    best = None
    B = int(global_batch)
    accs = [a for a in range(1, B + 1) if B % a == 0 and B // a >= cluster.gpus]
    for rc in modes:
        for z in (0, 1, 2, 3):
            for a in accs:
                d = proportional_dp(m, cluster, B, recompute=rc, zero=z, accumulation=a, **kw)
                d.update(recompute=rc, zero=z)
                if d["fits"]:
                    if best is None or d["time_overlapped"] < best["time_overlapped"]:
                        best = d
                    break   # more accumulation only adds steps once it fits
    return best


def compare(model: Any, cluster: Cluster, global_batch: int, **kw: Any) -> dict[str, Any]:
    """autoplan's best plan on ``cluster`` beside the best plan of the
    homogeneous search on each of its parts alone (the whole part; with
    slowed GPUs, the part run at its speeds by the even plan) and beside
    speed-proportional data parallelism (:func:`best_proportional_dp`), all
    under the same step model.  Seconds per iteration; None where nothing
    fits.  ``kw`` goes to every search (``top``, ``max_micro_batch``, ...)."""
    from .autoplan import autoplan

    het = autoplan(model, cluster, global_batch, top=1, **kw)
    out: dict[str, Any] = {"autoplan": het.best.iteration_time if len(het) else None,
                           "plan": het.best.label() if len(het) else None,
                           "search_seconds": het.search_seconds, "parts": []}
    for k, q in enumerate(cluster.kinds):
        sub = autoplan(model, q, global_batch, top=1, **kw)
        t = None
        label = None
        if len(sub):
            label = sub.best.label()
            sp = _part_speeds(cluster, k)
            if sp:   # the homogeneous plan on the part as it is, slowed GPUs included
                r = simulate(model, q.with_speed(sp), sub.best.plan, timeline=False)
                t = r.iteration_time if r.fits else None
            else:
                t = sub.best.iteration_time
        out["parts"].append({"gpu": q.gpu.name, "gpus": q.gpus, "time": t, "plan": label})
    dp = best_proportional_dp(model, cluster, global_batch)
    out["dp"] = None if dp is None else dp["time_overlapped"]
    out["dp_detail"] = dp
    return out
