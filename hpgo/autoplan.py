"""hpgo.autoplan: the best ways to train a model on a cluster, that fit.

::

    plans = hpgo.autoplan("llama3-70b", hpgo.Cluster.preset("dgx-h100", nodes=8),
                          global_batch=512)
    print(plans)                      # ranked table: time, tokens/s, MFU, memory
    best = plans[0]
    best.plan.megatron_args(plans.model)
    print(plans.explain())            # why the winner beats the next plans

The search runs in the C core (``csrc/autoplan.c``) over data x tensor x
pipeline parallelism, virtual stages, micro-batch size, schedule (1F1B,
interleaved 1F1B, ZB-H1, ZB-V), recomputation, sequence parallelism, ZeRO
stage and layer split, simulating with the same engine as
:func:`hpgo.simulate` and keeping only plans that fit in memory.  Lower
bounds skip only candidates that provably cannot fit or cannot be among the
best; ``exhaustive=True`` simulates everything and returns the same plans.
"""
from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass
from typing import Any, Iterator

from . import _args, _core
from .cluster import Cluster
from .parallel import (DISPATCHERS, DISPATCHERS_BY_CODE, PRECISIONS, RECOMPUTE_MODES, SCHEDULES,
                       MemoryBreakdown, ParallelPlan, StepResult, _as_model, overlap_share,
                       simulate)
from .workmodel import ProfiledModel, Transformer, model_id

__all__ = ["autoplan", "RankedPlan", "RankedPlans"]

_SCHED_NAMES = {v: k for k, v in SCHEDULES.items()}
_RC_NAMES = {v: k for k, v in RECOMPUTE_MODES.items()}
_GIB = 2.0 ** 30


@dataclass(frozen=True)
class RankedPlan:
    """One plan of an :func:`autoplan` ranking, with its simulation."""

    rank: int
    plan: ParallelPlan
    result: StepResult
    balanced_split: bool

    @property
    def iteration_time(self) -> float:
        return self.result.iteration_time

    @property
    def tokens_per_second(self) -> float | None:
        return self.result.tokens_per_second

    @property
    def samples_per_second(self) -> float:
        return self.result.samples_per_second

    @property
    def mfu(self) -> float | None:
        return self.result.mfu

    @property
    def fits(self) -> bool:
        return self.result.fits

    @property
    def memory(self) -> MemoryBreakdown:
        """The fullest device's memory."""
        return max(self.result.memory, key=lambda m: m.total)

    @property
    def gpus(self) -> int:
        return self.plan.gpus

    def breakdown(self) -> dict[str, float]:
        """Where the iteration goes on the device that ends last (seconds):
        compute, tensor-parallel communication, recomputation, pipeline
        bubble, exposed data-parallel synchronisation, optimizer step."""
        r = self.result
        p = self.plan
        m = r.microbatches
        ends = [max(d["compute_end"], d["sync_end"]) + d["optimizer"] for d in r.devices]
        i = max(range(len(ends)), key=lambda k: ends[k])
        dev = r.devices[i]
        chunks = [r.stages[c * p.pp + i] if p.schedule != "zb-v"
                  else r.stages[i if c == 0 else 2 * p.pp - 1 - i]
                  for c in range(p.virtual_stages)]
        tp = m * sum(s["tp_forward"] + s["tp_backward"] for s in chunks)
        rc = m * sum(s["recompute"] for s in chunks)
        busy = dev["busy"]
        dp = max(0.0, dev["sync_end"] - dev["compute_end"])
        return {"compute": busy - tp - rc, "tensor-parallel communication": tp,
                "recomputation": rc, "pipeline bubble": max(0.0, dev["compute_end"] - busy),
                "data-parallel sync (exposed)": dp, "optimizer step": dev["optimizer"]}

    def label(self) -> str:
        return self.plan.describe(global_batch=False) + \
            (" balanced split" if self.balanced_split else "")

    def __repr__(self) -> str:
        return f"RankedPlan(#{self.rank}: {self.label()}; {self.result.summary()})"


@dataclass(frozen=True)
class RankedPlans:
    """The best plans, best first (a sequence of :class:`RankedPlan`)."""

    model: Transformer | ProfiledModel
    cluster: Cluster
    global_batch: int
    objective: str
    plans: tuple[RankedPlan, ...]
    stats: dict[str, int]
    search_seconds: float

    def __len__(self) -> int:
        return len(self.plans)

    def __iter__(self) -> Iterator[RankedPlan]:
        return iter(self.plans)

    def __getitem__(self, i: int) -> RankedPlan:
        return self.plans[i]

    @property
    def best(self) -> RankedPlan:
        if not self.plans:
            raise ValueError("no plan fits: " + self._why_none())
        return self.plans[0]

    def _why_none(self) -> str:
        s = self.stats
        if s["candidates"] == 0:
            return ("no plan of the search space matches the fixed choices (sizes must divide "
                    "the GPUs, a node, the heads, the global batch; ep the experts and "
                    "tp x cp x dp / etp): loosen them")
        if s["candidates"] == s["rejected"]:
            return (f"the model or cluster cannot run any of the {s['candidates']} plans "
                    "(hpgo.simulate on one of them says why)")
        return (f"{s['candidates']} plans searched, {s['pruned_memory'] + s['did_not_fit']} "
                "do not fit in memory; try more GPUs, a smaller global batch or micro-batch, "
                "recompute='full' or zero=3")

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for rp in self.plans:
            mem = rp.memory
            out.append({"rank": rp.rank, "plan": rp.label(), "gpus": rp.gpus,
                        "iteration_time": rp.iteration_time,
                        "tokens_per_second": rp.tokens_per_second,
                        "samples_per_second": rp.samples_per_second, "mfu": rp.mfu,
                        "memory_gib": mem.total / _GIB, "capacity_gib": mem.capacity / _GIB,
                        "fits": rp.fits})
        return out

    def table(self) -> str:
        used = sorted({rp.gpus for rp in self.plans})
        gpus = (f"{used[0]} of {self.cluster.gpus}"
                if len(used) == 1 and used[0] != self.cluster.gpus else f"{self.cluster.gpus}")
        head = (f"{len(self.plans)} best of {self.stats['candidates']} plans for "
                f"{getattr(self.model, 'name', '') or 'the model'} on {self.cluster.name} "
                f"({gpus} GPUs), global batch {self.global_batch}; searched in "
                f"{self.search_seconds * 1e3:.0f} ms ({self.stats['simulated']} simulated)")
        if not self.plans:
            return head + "\nno plan fits: " + self._why_none()
        many = len(used) > 1  # the cost objective ranks several GPU counts: show each
        lines = [head, f"{'#':>3}{' GPUs' if many else ''} {'s/iter':>9} "
                 f"{'tokens/s' if self.plans[0].tokens_per_second else 'samples/s':>11} "
                 f"{'MFU':>6} {'GiB':>12}  plan"]
        for r in self.rows():
            rate = r["tokens_per_second"] or r["samples_per_second"]
            mfu = f"{r['mfu'] * 100:5.1f}%" if r["mfu"] is not None else "    - "
            lines.append(f"{r['rank']:>3}{r['gpus']:>5}" if many else f"{r['rank']:>3}")
            lines[-1] += (f" {r['iteration_time']:9.4g} {rate:11,.0f} {mfu} "
                          f"{r['memory_gib']:5.1f}/{r['capacity_gib']:<5.1f}  {r['plan']}"
                          + ("" if r["fits"] else "  DOES NOT FIT"))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        def mfu(x: float | None) -> str:
            return "" if x is None else f"{x * 100:.1f} %"

        rows = "".join(
            f"<tr><td>{r['rank']}</td><td>{r['iteration_time']:.4g}</td>"
            f"<td>{(r['tokens_per_second'] or r['samples_per_second']):,.0f}</td>"
            f"<td>{mfu(r['mfu'])}</td>"
            f"<td>{r['memory_gib']:.1f} / {r['capacity_gib']:.1f}</td>"
            f"<td>{html.escape(r['plan'])}</td></tr>" for r in self.rows())
        return (f"<p>{html.escape(self.table().splitlines()[0])}</p><table><tr><th>#</th>"
                "<th>s/iter</th><th>tokens/s</th><th>MFU</th><th>GiB</th><th>plan</th></tr>"
                f"{rows}</table>")

    def explain(self, i: int = 0, against: int = 3) -> str:
        """Why plan ``i`` beats the next ``against`` plans: the differences in
        compute, bubble, communication, recomputation and memory."""
        if not self.plans:
            return "no plan fits: " + self._why_none()
        me = self.plans[i]
        b = me.breakdown()
        mem = me.memory
        out = [f"#{me.rank} {me.label()}: {me.iteration_time:.4g} s per iteration"
               + (f", MFU {me.mfu * 100:.1f} %" if me.mfu else "")
               + f", {mem.total / _GIB:.1f} of {mem.capacity / _GIB:.1f} GiB on its fullest GPU.",
               "  time on the device that ends last: " + ", ".join(
                   f"{k} {v:.3g} s" for k, v in b.items() if v > 1e-12)]
        for other in self.plans[i + 1:i + 1 + against]:
            ob = other.breakdown()
            diffs = sorted(((ob[k] - b[k], k) for k in b), key=lambda x: -abs(x[0]))
            reasons = [f"{k} {'+' if d > 0 else '-'}{abs(d):.3g} s" for d, k in diffs[:3]
                       if abs(d) > 1e-3 * max(me.iteration_time, 1e-12)]
            om = other.memory
            out.append(f"  vs #{other.rank} {other.label()}: "
                       f"{other.iteration_time - me.iteration_time:+.3g} s "
                       f"({'; '.join(reasons) or 'same components'}); memory "
                       f"{om.total / _GIB:.1f} GiB")
        return "\n".join(out)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(r, plan=rp.plan.to_dict()) for r, rp in zip(self.rows(), self.plans)]


def _bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool, not {type(v).__name__}")
    return v


def _dispatcher(v: Any) -> int:
    if v not in DISPATCHERS:
        raise ValueError(f"moe_dispatcher must be one of {', '.join(DISPATCHERS)}, got {v!r}")
    return DISPATCHERS[v]


def _fixed(name: str, v: Any, table: dict | None = None) -> int:
    if v is None:
        return -1
    if table is not None:
        if v not in table:
            raise ValueError(f"{name} must be one of {', '.join(table)}; got {v!r}")
        return int(table[v])
    if isinstance(v, bool):
        if name == "sequence_parallel":
            return int(v)
        raise TypeError(f"{name} must be an int, not bool")
    if not hasattr(v, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    i = v.__index__()
    lo = 0 if name == "zero" else 1  # a size of 0 would mean "free" to the core
    if not lo <= i <= 1 << 24:
        raise ValueError(f"{name} must be in {lo}..{1 << 24}, got {i}")
    return int(i)


def _overhead(v: Any) -> float | None:
    """overhead_bytes: None (the default) or a finite number >= 0."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"overhead_bytes must be a number, not {type(v).__name__}")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"overhead_bytes must be a finite number >= 0 (bytes), got {v!r}")
    return float(v)


def _distributed_search(executor: Any, mt: tuple, c: Cluster, opts: tuple,
                        timeout: float | None, top: Any) -> dict:
    from . import distributed as _dist

    _dist.check_executor(executor)
    if timeout is not None:
        t = _args.real("timeout (seconds or None)", timeout)
        if not t > 0:
            raise ValueError(f"timeout must be > 0 seconds (or None), got {timeout!r}")
        timeout = t
    # the whole search's checks first, on no candidate: wrong arguments raise
    # here, as locally, instead of in every task (tp = 0 allows nothing)
    probe = list(opts)
    probe[9] = 0
    _core._autoplan(mt, c._tuple(), tuple(probe), timeout)
    # one task per tp the search can use (tp divides a node); with tp fixed,
    # one per pp (pp divides the GPU count, and every GPU count of the cost
    # objective divides the largest).  Not both: each task simulates its own
    # top list, so finer splits cost more simulations in all.
    g, n = c.gpus_per_node, opts[1] or c.gpus
    tps = [opts[9]] if opts[9] >= 0 else [t for t in range(1, g + 1) if g % t == 0]
    pps = [opts[10]]
    if opts[9] >= 0 and opts[10] < 0:
        pps = [p for p in range(1, min(n, 4096) + 1) if n % p == 0]
    tasks = []
    for t in tps:
        for p in pps:
            o = list(opts)
            o[9], o[10] = t, p
            tasks.append((mt, c._tuple(), tuple(o), timeout))
    parts = _dist.run(executor, _dist.autoplan_task, tasks, what="autoplan",
                      timeout=timeout)
    return _dist.merge_ranked(parts, int(top))


def autoplan(model: Any, cluster: Cluster | str, global_batch: int, *, gpus: int | None = None,
             max_gpus: int | None = None, seq: int | None = None, precision: str | None = None,
             top: int = 10, objective: str = "time", exhaustive: bool = False, threads: int = 0,
             max_micro_batch: int = 16, max_virtual_stages: int = 8,
             overhead_bytes: float | None = None, profile_batch: float | None = None,
             tp: int | None = None, pp: int | None = None, dp: int | None = None,
             virtual_stages: int | None = None, micro_batch: int | None = None,
             schedule: str | None = None, recompute: str | None = None,
             sequence_parallel: bool | None = None, zero: int | None = None,
             cp: int | None = None, ep: int | None = None, etp: int | None = None,
             ep_placement: str | None = None, overlap_moe_comm: bool | float = False,
             moe_dispatcher: str = "alltoall", fp8_params: bool = False,
             timeout: float | None = None,
             executor: Any = None) -> RankedPlans:
    """The ``top`` fastest plans (``objective="time"``) or the cheapest in
    GPU-seconds per iteration over the GPU counts ``gpus / 2^k``
    (``objective="cost"``) that fit in memory, best first.

    ``model``: an :func:`hpgo.transformer`, a preset name, a
    :func:`hpgo.profile_model` or a ``graph.txt`` path (``profile_batch=``
    unless its ``profile.json`` says it; any PipeDream graph, branchy ones in
    topological order).  ``cluster``: an :class:`hpgo.Cluster` or a preset
    name.  ``gpus`` (or ``max_gpus``): GPUs to use, default the whole
    cluster.  ``seq`` overrides the model's sequence length.  Fixed choices
    (``tp=8``, ``pp=16``, ``schedule="1f1b"``, ``zero=1``, ...) constrain the
    search.  Mixture-of-experts models add the expert layout: ``ep`` (the
    divisors of tp cp dp / etp that divide the experts), ``etp`` (1 or tp)
    and ``ep_placement`` ("inner" or "outer"), each searched unless fixed;
    ``overlap_moe_comm=True`` prices every plan with the all-to-alls overlapped
    (a number in (0, 1]: with that share of the ideal overlap credited, see
    :class:`ParallelPlan`);
    ``moe_dispatcher`` (``"alltoall"`` or ``"deepep"``) with that dispatcher;
    ``fp8_params=True`` keeps fp8 weights only (see :class:`ParallelPlan`).
    ``timeout`` (seconds) raises TimeoutError past it; Ctrl-C stops the
    search with KeyboardInterrupt.  Raises ValueError for impossible arguments; a search with no
    plan that fits returns an empty ranking whose ``table()`` says why.

    ``executor``: split the search by tensor-parallel size (one task per
    ``tp`` that divides a node; with ``tp=`` fixed, one per ``pp`` that
    divides the GPU count) over a concurrent.futures executor, a
    dask.distributed.Client or a multiprocessing-style pool; the per-task
    top lists merge into exactly the local ranking (``stats`` then sums
    the tasks' counters; docs/distributed.md)."""
    m = _as_model(model, profile_batch)
    if seq is not None:
        if not isinstance(m, Transformer):
            raise ValueError("seq= applies to transformer models only")
        m = m.with_(seq=seq)
    c = Cluster.preset(cluster) if isinstance(cluster, str) else cluster
    if not isinstance(c, Cluster):
        raise TypeError("cluster must be an hpgo.Cluster or a preset name")
    if gpus is not None and max_gpus is not None and gpus != max_gpus:
        raise ValueError("give gpus= or max_gpus=, not both")
    n = gpus if gpus is not None else max_gpus
    if precision is None:
        precision = "bf16" if isinstance(m, Transformer) else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    if _bool("fp8_params", fp8_params) and precision != "fp8":
        raise ValueError("fp8_params=True keeps fp8 weights: it needs precision='fp8', "
                         f"not {precision!r}")
    if objective not in ("time", "cost"):
        raise ValueError(f"objective must be 'time' or 'cost'; got {objective!r}")
    share = overlap_share(overlap_moe_comm)
    for name, v in (("global_batch", global_batch), ("top", top), ("threads", threads),
                    ("max_micro_batch", max_micro_batch),
                    ("max_virtual_stages", max_virtual_stages)):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if not isinstance(exhaustive, bool):
        raise TypeError("exhaustive must be a bool")
    overhead_bytes = _overhead(overhead_bytes)
    opts = (global_batch, 0 if n is None else _fixed("gpus" if gpus is not None else "max_gpus", n),
            _core.OBJECTIVE_TIME if objective == "time" else _core.OBJECTIVE_COST, top,
            int(exhaustive), threads, max_micro_batch, max_virtual_stages, overhead_bytes,
            _fixed("tp", tp), _fixed("pp", pp), _fixed("dp", dp),
            _fixed("virtual_stages", virtual_stages), _fixed("micro_batch", micro_batch),
            _fixed("schedule", schedule, SCHEDULES), _fixed("recompute", recompute, RECOMPUTE_MODES),
            _fixed("sequence_parallel", sequence_parallel), _fixed("zero", zero), _fixed("cp", cp),
            _fixed("ep", ep), _fixed("etp", etp),
            _fixed("ep_placement", ep_placement, {"inner": 0, "outer": 1}),
            int(share > 0), _dispatcher(moe_dispatcher), int(_bool("fp8_params", fp8_params)),
            share)
    t0 = time.perf_counter()
    if executor is not None:
        d = _distributed_search(executor, m._tuple(PRECISIONS[precision]), c, opts, timeout, top)
    else:
        d = _core._autoplan(m._tuple(PRECISIONS[precision]), c._tuple(), opts, timeout)
    elapsed = time.perf_counter() - t0
    mid = model_id(m)
    ranked = []
    for rank, (pt, _t, _score, balanced) in enumerate(d["plans"], 1):
        (p_tp, p_pp, p_dp, p_cp, p_ep, v, mb, gb, sch, rc, sp, z, ov, split, p_etp, outer,
         ep_ov, disp, f8p, _share) = pt
        plan = ParallelPlan(global_batch=gb, tp=p_tp, pp=p_pp, dp=p_dp, cp=p_cp, ep=p_ep,
                            virtual_stages=v, micro_batch=mb, schedule=_SCHED_NAMES[sch],
                            recompute=_RC_NAMES[rc], sequence_parallel=bool(sp), zero=z,
                            overlap_grad_reduce=bool(ov), split=split, model=mid,
                            etp=p_etp or None, ep_placement="outer" if outer else "inner",
                            overlap_moe_comm=overlap_moe_comm if ep_ov else False,
                            moe_dispatcher=DISPATCHERS_BY_CODE[disp],
                            fp8_params=bool(f8p))
        res = simulate(m, c, plan, precision=precision, timeline=False,
                       overhead_bytes=overhead_bytes)
        ranked.append(RankedPlan(rank, plan, res, bool(balanced)))
    stats = {k: int(v) for k, v in d.items() if k != "plans"}
    return RankedPlans(m, c, int(global_batch), objective, tuple(ranked), stats, elapsed)
