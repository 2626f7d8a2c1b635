"""Re-planning a pipeline when its stages slow down (DynPipe).

DynPipe (Yuan et al., IEEE TPDS 2025) watches the per-stage compute times of
an asynchronous 1F1B pipeline (PipeDream), flags stages whose time leaves a
ratio band around a baseline, and re-partitions the layers among the stages
for the measured slowdowns.  This module offers the same pieces as pure
functions over numbers, with the C core doing the work (GIL released):

* :func:`pipeline_score`: DynPipe's 1F1B score (seconds per micro-batch) of
  per-stage times;
* :func:`replan`: the re-partitioner (DynPipe's top-k candidate cuts, or an
  exact search of every split under the same score) plus the cost-benefit
  switch rule with a migration cost;
* :class:`StragglerDetector`: the trigger (window, baseline, ratio band,
  patience, re-baseline after a switch) over a stream of per-stage times;
* :func:`split_batch` / :func:`slice_table`: the uneven per-replica batch
  split of a data-parallel stage and the sender -> receiver slice table;
* :func:`read_layer_profile` / :func:`chain_from_model` /
  :func:`chain_from_profile`: per-layer chains;
* :func:`stage_slowdowns`: per-stage slowdowns from a cluster's per-GPU
  speeds; :func:`to_parallel_plan` (:meth:`hpgo.ParallelPlan.from_replan`):
  a split as a plan of stage groups the step engine runs.

Times are seconds, sizes bytes, bandwidths bytes/s.
"""
from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from numbers import Real
from typing import Iterable, List, Optional, Sequence, Tuple

from . import _args, _files
from . import _core
from .sim import FORWARD_FRACTION, HPGO_NVLINK_BW

__all__ = [
    "LayerChain",
    "ReplanResult",
    "StragglerEvent",
    "StragglerDetector",
    "pipeline_score",
    "replan",
    "split_batch",
    "slice_table",
    "read_layer_profile",
    "chain_from_model",
    "chain_from_profile",
    "to_parallel_plan",
    "stage_slowdowns",
]

METHODS = {"topk": 0, "dp": 1}


def _floats(name: str, values, length: Optional[int] = None, positive=False) -> List[float]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of numbers, not {type(values).__name__}")
    out = []
    for i, v in enumerate(values):
        f = _args.real(f"{name}[{i}]", v)
        if not math.isfinite(f) or f < 0 or (positive and f == 0):
            raise ValueError(f"{name}[{i}] must be finite and {'> 0' if positive else '>= 0'}, got {v!r}")
        out.append(f)
    if length is not None and len(out) != length:
        raise ValueError(f"{name} needs {length} values, got {len(out)}")
    return out


def _ints(name: str, values) -> List[int]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of ints, not {type(values).__name__}")
    return [_args.index(f"{name}[{i}]", v) for i, v in enumerate(values)]


def _number(name: str, v, *, positive=False, allow_inf=False) -> float:
    f = _args.real(name, v)
    if math.isnan(f) or f < 0 or (positive and f == 0) or (math.isinf(f) and not allow_inf):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'} and finite, got {v!r}")
    return f


def _int(name: str, v, lo: int, hi: int = _args.INT32_MAX) -> int:
    return _args.index(name, v, lo, hi)


@dataclass(frozen=True)
class LayerChain:
    """A chain of layers: per micro-batch forward / backward seconds, the
    seconds to send each layer's output to the next stage, parameter bytes."""

    forward: Tuple[float, ...]
    backward: Tuple[float, ...]
    comm: Tuple[float, ...]
    param_bytes: Tuple[float, ...]
    names: Tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.forward)


def read_layer_profile(path) -> LayerChain:
    """Read a per-layer CSV with columns ``fwd_ms``, ``bwd_ms`` and
    ``out_comm_s_at_1GBps`` (the layout of ``dynpipe_vgg16_layer_profile.csv``;
    optional ``layer`` names and ``param_bytes``).  Milliseconds become
    seconds; the transfer column is already seconds (an empty last cell is 0).
    Errors name the file and line (``ValueError``)."""
    path = os.fspath(path)
    fwd, bwd, comm, par, names = [], [], [], [], []
    rd = csv.DictReader(io.StringIO(_files.read_text(path, "layer profile"), newline=""))
    try:
        need = {"fwd_ms", "bwd_ms", "out_comm_s_at_1GBps"}
        if not rd.fieldnames or not need.issubset(rd.fieldnames):
            raise ValueError(f"{path}:1: header must name the columns {sorted(need)}")
        for row in rd:
            line = rd.line_num
            try:
                f = float(row["fwd_ms"]) / 1e3
                b = float(row["bwd_ms"]) / 1e3
                c = float(row["out_comm_s_at_1GBps"] or 0.0)
                p = float(row.get("param_bytes") or 0.0)
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: not a number in {row}") from None
            if not all(math.isfinite(x) and x >= 0 for x in (f, b, c, p)):
                raise ValueError(f"{path}:{line}: values must be finite and >= 0")
            fwd.append(f)
            bwd.append(b)
            comm.append(c)
            par.append(p)
            names.append(row.get("layer") or str(len(names)))
    except csv.Error as e:  # an oversized field, a NUL byte, ...
        raise ValueError(f"{path}:{rd.line_num}: malformed CSV: {e}") from None
    if not fwd:
        raise ValueError(f"{path}: no layers")
    return LayerChain(tuple(fwd), tuple(bwd), tuple(comm), tuple(par), tuple(names))


def chain_from_model(model, *, forward_fraction: float = FORWARD_FRACTION,
                     bandwidth: float = HPGO_NVLINK_BW,
                     batch_fraction: float = 1.0) -> LayerChain:
    """A chain from a :class:`hpgo.Model`'s layers in file order: each layer's
    ``compute_time`` (seconds, forward + backward) split by ``forward_fraction``
    (default :data:`hpgo.sim.FORWARD_FRACTION` = 1/2, the share
    :func:`hpgo.simulate_plan` uses too),
    its ``output_activation_size`` sent at ``bandwidth`` bytes/s, its
    ``parameter_size`` moved on a switch; times and activations are scaled by
    ``batch_fraction`` (micro-batch / profile batch)."""
    ff = _number("forward_fraction", forward_fraction)
    if ff > 1:
        raise ValueError("forward_fraction must be in [0, 1]")
    bw = _number("bandwidth", bandwidth, positive=True)
    bf = _number("batch_fraction", batch_fraction, positive=True)
    layers = list(model.layers)
    if not layers:
        raise ValueError("the model has no layers")
    return LayerChain(
        tuple(l.compute_time * bf * ff for l in layers),
        tuple(l.compute_time * bf * (1 - ff) for l in layers),
        tuple(l.output_activation_size * bf / bw for l in layers),
        tuple(float(l.parameter_size) for l in layers),
        tuple(str(l.desc) for l in layers),
    )


def chain_from_profile(model, cluster, *, micro_batch: int = 1, level: int = 0) -> LayerChain:
    """A chain priced as the step engine prices a pipeline of ``model`` (an
    :func:`hpgo.profile_model`) on ``cluster``: each layer's forward and
    backward seconds for a ``micro_batch`` of samples, its output sent
    between neighbouring stages as :meth:`hpgo.Cluster.p2p_time` prices it at
    ``level`` (0: GPUs of one node), its parameters in bytes (4 per
    parameter, fp32 as the profiles)."""
    from .workmodel import ProfiledModel
    if not isinstance(model, ProfiledModel):
        raise TypeError(f"model must be an hpgo.profile_model(...), not {type(model).__name__}")
    mb = _int("micro_batch", micro_batch, 1)
    k = mb / float(model.batch)
    lv = _int("level", level, 0)
    if lv >= len(cluster.levels):
        raise ValueError(f"level must be below the cluster's {len(cluster.levels)} levels")
    return LayerChain(
        tuple(x * k for x in model.forward),
        tuple(x * k for x in model.backward),
        tuple(cluster.p2p_time(o * k, lv) for o in model.outputs),
        tuple(4.0 * p for p in model.params),
        tuple(str(d) for d in model.descs),
    )


def stage_slowdowns(cluster, n_stages: int, *, dp: int = 1) -> List[float]:
    """DynPipe's per-stage slowdowns from a cluster's per-GPU speeds
    (:meth:`hpgo.Cluster.with_speed`): stage s on GPUs s dp .. s dp + dp - 1,
    as :meth:`hpgo.ParallelPlan.from_replan` places them, slowed by its
    slowest GPU (1 / the smallest speed factor; a stage waits for its
    slowest replica)."""
    from .cluster import Cluster
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be an hpgo.Cluster, not {type(cluster).__name__}")
    S = _int("n_stages", n_stages, 1)
    d = _int("dp", dp, 1)
    if S * d > cluster.gpus:
        raise ValueError(f"{S} stages of {d} GPUs need {S * d} GPUs; the cluster has "
                         f"{cluster.gpus}")
    speed = dict(cluster.speeds)
    return [1.0 / min(speed.get(g, 1.0) for g in range(s * d, (s + 1) * d)) for s in range(S)]


def to_parallel_plan(result, global_batch: int, *, dp: int = 1, micro_batch: int = 1,
                     schedule: str = "1f1b", model: Optional[str] = None,
                     which: str = "chosen"):
    """The :class:`hpgo.ParallelPlan` of a re-plan's split (see
    :meth:`hpgo.ParallelPlan.from_replan`)."""
    from .parallel import ParallelPlan, StageGroup
    if isinstance(result, ReplanResult):
        splits = {"chosen": result.chosen, "proposal": result.stages, "current": result.current,
                  "searched": result.searched}
        if which not in splits:
            raise ValueError(f"which must be one of {sorted(splits)}, got {which!r}")
        counts = splits[which]
    else:
        counts = result
    try:
        counts = [int(c) for c in counts]
    except (TypeError, ValueError):
        raise ValueError("not a re-planning result: expected layers per stage") from None
    if not counts or min(counts) < 1:
        raise ValueError("every stage of the split needs at least one layer")
    groups, start = [], 0
    for n in counts:
        groups.append(StageGroup((start, start + n), dp=dp))
        start += n
    return ParallelPlan(global_batch=global_batch, micro_batch=micro_batch, schedule=schedule,
                        model=model, stages=tuple(groups))


def pipeline_score(forward: Sequence[float], backward: Sequence[float],
                   comm: Optional[Sequence[float]] = None, *, microbatches: int = 99) -> float:
    """Seconds per micro-batch of PipeDream's asynchronous 1F1B for per-stage
    forward / backward seconds and the S-1 boundary transfer seconds, scored
    as DynPipe does (average spacing of stage 0's forward starts over
    ``microbatches`` micro-batches, which must exceed twice the stages)."""
    f = _floats("forward", forward)
    b = _floats("backward", backward, len(f))
    if not f:
        raise ValueError("need at least one stage")
    c = None if comm is None else _floats("comm", comm, len(f) - 1)
    mb = _int("microbatches", microbatches, 1)
    return _core.replan_score(f, b, c, mb)


@dataclass(frozen=True)
class ReplanResult:
    """Proposal of :func:`replan`.  Times are seconds per micro-batch under
    the given slowdowns; ``switch`` applies the cost-benefit rule.  The
    proposal never scores worse than the current split: ``kept_current``
    says the search (whose best split, ``searched``, scored ``search_time``)
    found nothing strictly faster, and ``stages`` is then the current split."""

    stages: Tuple[int, ...]        # proposed layers per stage
    current: Tuple[int, ...]       # layers per stage now
    current_time: float
    predicted_time: float
    moved_bytes: float
    drain_time: float
    migration_cost: float          # seconds
    gain: float                    # seconds saved over the remaining iterations
    switch: bool
    candidates: int
    kept_current: bool = False
    searched: Tuple[int, ...] = ()  # the search's own best split (DynPipe's choice for topk)
    search_time: float = math.nan   # its score
    exact: bool = False             # dp: ``searched`` is a best split of all under the score

    @property
    def chosen(self) -> Tuple[int, ...]:
        """The split to run: the proposal when switching pays, else the current one."""
        return self.stages if self.switch else self.current

    @property
    def chosen_time(self) -> float:
        return self.predicted_time if self.switch else self.current_time

    @property
    def speedup(self) -> float:
        """current_time / predicted_time of the proposal."""
        return self.current_time / self.predicted_time if self.predicted_time > 0 else math.inf


def replan(chain_or_forward, backward=None, *, current: Sequence[int],
           slowdown: Optional[Sequence[float]] = None, comm=None, param_bytes=None,
           method: str = "topk", top_k: int = 2, include_current: bool = False,
           microbatches: int = 99, bandwidth: float = 1e9, optimizer_factor: float = 2.0,
           fixed_cost: float = 0.0, remaining_iterations: float = math.inf,
           microbatches_per_iteration: float = 1.0,
           timeout: Optional[float] = None) -> ReplanResult:
    """Re-partition a chain of layers for per-stage slowdowns.

    ``replan(chain, current=[10, 28], slowdown=[1.89, 1.0])`` with a
    :class:`LayerChain`, or ``replan(forward, backward, current=..., comm=...)``
    with per-layer lists (seconds per micro-batch).  ``slowdown[s]``
    multiplies the compute of whatever layers stage s (its device) runs; an
    :class:`hpgo.Cluster` with slowed GPUs (``with_speed``) stands for its
    :func:`stage_slowdowns`.

    ``method="topk"`` is DynPipe's ``calculate_new_placement`` (cuts after the
    ``top_k`` layers of each current stage with the largest f + b + adjacent
    transfers; every choice scored by :func:`pipeline_score`);
    ``method="dp"`` searches every split: a chain DP on a non-overlapped
    model and a local search on the score give the incumbent of a branch and
    bound with a proven bound, so ``exact`` says the split is a best one
    under the score (it is unless the search ran past its budget,
    ``HPGO_REPLAN_EXACT_BUDGET``).  dp is therefore never slower than topk,
    and they agree exactly when a best split is among topk's candidates or
    is the current split (docs/replanning-and-heterogeneous.md).  Whatever the method, when the search finds nothing that
    scores strictly better than ``current``, the current split is proposed
    (``kept_current``); ``include_current`` is kept for compatibility and no
    longer changes anything.

    Switch rule: ``switch`` is true iff the proposal is faster and
    (current - predicted) * microbatches_per_iteration * remaining_iterations
    exceeds the migration cost = moved parameter bytes * (1 + optimizer_factor)
    / bandwidth + (S - 1) * current_time (drain) + fixed_cost.

    ``timeout``: seconds the search may take (``TimeoutError`` past it; None
    = no limit); Ctrl-C stops it too.
    """
    if isinstance(chain_or_forward, LayerChain):
        if backward is not None:
            raise TypeError("pass either a LayerChain or forward and backward lists")
        ch = chain_or_forward
        fwd, bwd = list(ch.forward), list(ch.backward)
        comm = list(ch.comm) if comm is None else comm
        param_bytes = list(ch.param_bytes) if param_bytes is None else param_bytes
    else:
        if backward is None:
            raise TypeError("replan() needs a LayerChain or forward and backward lists")
        fwd = _floats("forward", chain_or_forward)
        bwd = _floats("backward", backward, len(fwd))
    L = len(fwd)
    if L == 0:
        raise ValueError("the chain has no layers")
    cur = _ints("current", current)
    S = len(cur)
    if S == 0:
        raise ValueError("current must list at least one stage")
    if any(n < 1 for n in cur):
        raise ValueError(f"every stage of current needs at least one layer, got {cur}")
    if sum(cur) != L:
        raise ValueError(f"current covers {sum(cur)} layers but the chain has {L}")
    from .cluster import Cluster
    if isinstance(slowdown, Cluster):
        slowdown = stage_slowdowns(slowdown, S)
    sd = [1.0] * S if slowdown is None else _floats("slowdown", slowdown, S, positive=True)
    c = None if comm is None else _floats("comm", comm, None)
    if c is not None and len(c) == L - 1:
        c = c + [0.0]
    if c is not None and len(c) != L:
        raise ValueError(f"comm needs {L} (or {L - 1}) values, got {len(c)}")
    p = None if param_bytes is None else _floats("param_bytes", param_bytes, L)
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    k = _int("top_k", top_k, 1)
    mb = _int("microbatches", microbatches, 1)
    if mb <= 2 * S:
        raise ValueError(f"microbatches must exceed twice the number of stages ({2 * S}), got {mb}")
    bw = _number("bandwidth", bandwidth, positive=True)
    of = _number("optimizer_factor", optimizer_factor)
    fc = _number("fixed_cost", fixed_cost)
    rem = _number("remaining_iterations", remaining_iterations, allow_inf=True)
    mbpi = _number("microbatches_per_iteration", microbatches_per_iteration, positive=True)
    r = _core.replan_run(fwd, bwd, c, p, cur, sd, METHODS[method], k, bool(include_current),
                         mb, bw, of, fc, rem, mbpi, timeout)
    return ReplanResult(
        stages=tuple(r["counts"]), current=tuple(cur), current_time=r["current_time"],
        predicted_time=r["new_time"], moved_bytes=r["moved_bytes"],
        drain_time=r["drain_time"], migration_cost=r["migration_cost"], gain=r["gain"],
        switch=r["switch"], candidates=r["candidates"], kept_current=r["kept_current"],
        searched=tuple(r["search_counts"]), search_time=r["search_time"], exact=r["exact"])


@dataclass(frozen=True)
class StragglerEvent:
    """A fired trigger: the sample index (0-based, counted since the detector
    was made), ``kind`` ("slowdown" or "speedup") and per-stage ratios to the
    baseline (1.0 inside the band)."""

    index: int
    kind: str
    ratios: Tuple[float, ...]


class StragglerDetector:
    """DynPipe's trigger over a stream of per-stage times.

    Samples (one value per stage, e.g. each stage's compute seconds of one
    iteration) are summed over ``window`` samples (DynPipe: 50 iterations).
    The first ``warmup_windows`` windows are skipped, the next one is the
    baseline (DynPipe: iteration 100), and every later window gives
    rho_s = window_s / baseline_s.  A window with some rho_s outside the open
    band ``(low, high)`` (DynPipe's public code: (0.5, 2); its experiments
    fired at 1.74 and 0.62) is flagged; ``patience`` consecutive flagged
    windows fire an event.  With ``rebaseline`` (the default) the detector
    then warms up again and takes a new baseline, so the new layout is
    judged against itself (hysteresis: a slowdown fires once, its end fires
    as a speed-up).
    """

    def __init__(self, n_stages: int = 1, *, window: int = 50, warmup_windows: int = 1,
                 band: Tuple[float, float] = (0.5, 2.0), patience: int = 1,
                 rebaseline: bool = True):
        n = _int("n_stages", n_stages, 1)
        w = _int("window", window, 1)
        wu = _int("warmup_windows", warmup_windows, 0)
        pa = _int("patience", patience, 1)
        try:
            low, high = band
        except (TypeError, ValueError):
            raise TypeError("band must be a pair (low, high)") from None
        low = _number("band low", low)
        high = _number("band high", high)
        if not (low < 1 < high):
            raise ValueError(f"band must satisfy low < 1 < high, got {band!r}")
        self.n_stages = n
        self.window, self.warmup_windows, self.band, self.patience = w, wu, (low, high), pa
        self.rebaseline = bool(rebaseline)
        self._t = _core.Trigger(n, w, wu, low, high, pa, self.rebaseline)
        self._count = 0

    def push(self, sample) -> Optional[StragglerEvent]:
        """Feed one sample (a number for one stage, or one value per stage)."""
        if isinstance(sample, Real) and not isinstance(sample, bool):
            sample = [sample]
        vals = _floats("sample", sample, self.n_stages)
        r = self._t.push(vals)
        idx = self._count
        self._count += 1
        if r is None:
            return None
        kind, ratios = r
        return StragglerEvent(idx, "slowdown" if kind > 0 else "speedup", tuple(ratios))

    def feed(self, samples: Iterable) -> List[StragglerEvent]:
        """Push every sample; return the events in order."""
        out = []
        for s in samples:
            e = self.push(s)
            if e is not None:
                out.append(e)
        return out

    def reset(self) -> None:
        """Forget the baseline (call after switching to a new split)."""
        self._t.reset()


def split_batch(batch: int, weights: Sequence[float]) -> List[int]:
    """Split ``batch`` samples among replicas in proportion to ``weights``
    (throughputs, e.g. ``1 / slowdown``; DynPipe's public code passes the
    slowdown itself, which favours the slow rank): round half to even, then
    spread the rounding difference (floor division to all, +1 to the first
    ones).  The result sums to ``batch`` and is never negative."""
    b = _int("batch", batch, 0, _args.INT64_MAX)
    w = _floats("weights", weights, positive=True)
    if not w:
        raise ValueError("weights must name at least one replica")
    return _core.split_batch(b, w)


def slice_table(send: Sequence[int], recv: Sequence[int]) -> List[List[int]]:
    """Samples replica i of the sending stage passes to replica j of the
    receiving stage (north-west corner fill); rows sum to ``send``, columns to
    ``recv``.  Gradients use the transpose."""
    s = _ints("send", send)
    r = _ints("recv", recv)
    if not s or not r:
        raise ValueError("both stages need at least one replica")
    if any(x < 0 for x in s + r):
        raise ValueError("sample counts must be >= 0")
    if sum(s) != sum(r):
        raise ValueError(f"the senders hold {sum(s)} samples but the receivers expect {sum(r)}")
    return _core.slice_table(s, r)
