"""hpgo.autoplan: the best ways to train a model on a cluster, that fit.

::

    plans = hpgo.autoplan("llama3-70b", hpgo.Cluster.preset("dgx-h100", nodes=8),
                          global_batch=512)
    print(plans)                      # ranked table: time, tokens/s, MFU, memory
    best = plans[0]
    best.plan.megatron_args(plans.model)
    print(plans.explain())            # why the winner beats the next plans

The search runs in the C core (``csrc/search/autoplan.c``) over data x tensor x
pipeline parallelism, virtual stages, micro-batch size, schedule (1F1B,
interleaved 1F1B, ZB-H1, ZB-V), recomputation, sequence parallelism, ZeRO
stage and layer split, simulating with the same engine as
:func:`hpgo.simulate` and keeping only plans that fit in memory.  Lower
bounds skip only candidates that provably cannot fit or cannot be among the
best; ``exhaustive=True`` simulates everything and returns the same plans.
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from . import _args, _core
from . import frameworks as _frameworks
from .cluster import Cluster
from .parallel import (ATTENTIONS, CP_COMMS, CROSS_ENTROPIES, DISPATCHERS, DISPATCHERS_BY_CODE,
                       FP8_RECIPES, KERNEL_SETS, OPTIMIZER_IMPLS, PRECISIONS, RECOMPUTE_MODES,
                       SCHEDULES, TP_OVERLAPS,
                       MemoryBreakdown, ParallelPlan, StepResult, _as_model, _headroom_cluster,
                       _loss_mismatch, _overhead_bytes, _positive_real, headroom_fraction,
                       overlap_share, simulate)
from .workmodel import ProfiledModel, Transformer, model_id

__all__ = ["autoplan", "RankedPlan", "RankedPlans", "setup_line"]

_SCHED_NAMES = {v: k for k, v in SCHEDULES.items()}
_RC_NAMES = {v: k for k, v in RECOMPUTE_MODES.items()}
_GIB = 2.0 ** 30


def setup_line(model: Any, cluster: Cluster, *, precision: str, global_batch: int | None = None,
               headroom: float | None = None, max_batch: bool = False) -> str:
    """What a table assumes, in one line: model, sequence length, precision,
    cluster (its GPU, and whether its curves are the preset's or measured),
    global batch and memory headroom."""
    name = getattr(model, "name", "") or "the model"
    seq = f", seq {model.seq:,}" if isinstance(model, Transformer) else ""
    curves = "measured curves" if cluster.gpu.name.endswith("(measured)") else "preset curves"
    kinds = cluster.parts or (cluster,)
    gpus = " + ".join(f"{q.gpus} x {q.gpu.name}, {q.gpu.memory_bytes / 1e9:.0f} GB"
                      + (f" held to {q.gpu.power_limit:g} W (compute at {q.clock_factor():.3f})"
                         if q.gpu.power_limit > 0 else "")
                      for q in kinds)
    slow = f", {len(cluster.speeds)} GPU(s) at another speed" if cluster.speeds else ""
    out = f"{name}{seq}, {precision} on {cluster.name} ({gpus}, {curves}{slow})"
    if global_batch is not None:
        out += f", global batch {'at most ' if max_batch else ''}{global_batch:,}"
    if headroom is not None:
        out += f", {headroom * 100:g} % of memory kept free"
    return out


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
    def days(self) -> float | None:
        """Days to train on the ranking's ``tokens`` (None without)."""
        return self.result.days

    @property
    def cost(self) -> float | None:
        """Dollars to train on ``tokens`` at ``price`` per GPU-hour."""
        return self.result.cost

    @property
    def gpu_hours(self) -> float | None:
        return self.result.gpu_hours

    @property
    def memory(self) -> MemoryBreakdown:
        """The fullest device's memory, against its own usable memory (the
        stages of an uneven plan may sit on GPU types of different memory)."""
        return max(self.result.memory, key=lambda m: m.total / max(m.usable, 1.0))

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
    precision: str = "bf16"
    headroom: float = 0.0
    tokens: float | None = None
    price: float | None = None
    max_days: float | None = None
    front: tuple[RankedPlan, ...] = ()
    max_batch: bool = False
    #: the framework the plans are for (None: any combination hpgo models)
    framework: str | None = None
    #: the memory-saving options the search left out, each as the argument
    #: that would add it (``"recompute='full'"``, ``"zero=3"``, ...): what a
    #: search where no plan fits suggests
    untried: tuple[str, ...] = ()
    #: where the search had no candidate at all, the fixed choices that rule
    #: every plan out, each as a sentence (empty when none is found alone)
    conflicts: tuple[str, ...] = ()

    def pareto(self) -> tuple[RankedPlan, ...]:
        """The time-cost Pareto front: plans no other plan beats on both
        iteration time and GPU-seconds per iteration, fastest first.  With
        ``max_days=`` it is exact over every GPU count searched (the fastest
        plan of each count, whether or not it meets the deadline); otherwise
        it is the front of the ranked plans."""
        if self.front:
            return self.front
        return _pareto(self.plans)

    def setup(self) -> str:
        """What the ranking assumes, in one line (its table's second line)."""
        return setup_line(self.model, self.cluster, precision=self.precision,
                          global_batch=self.global_batch, headroom=self.headroom,
                          max_batch=self.max_batch)

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
        if self.max_days is not None and s.get("over_deadline"):
            return (f"{s['over_deadline']} plans fit but none trains on {self.tokens:.3g} tokens "
                    f"within {self.max_days:g} days; allow more GPUs or days")
        if s["candidates"] == 0 and self.conflicts:
            return "no plan of the search space matches the fixed choices: " + \
                "; ".join(self.conflicts)
        if s["candidates"] == 0:
            return ("no plan of the search space matches the fixed choices (sizes must divide "
                    "the GPUs, a node, the heads, the global batch; ep the experts and "
                    "tp x cp x dp / etp): loosen them")
        if s["candidates"] == s["rejected"]:
            return (f"the model or cluster cannot run any of the {s['candidates']} plans "
                    "(hpgo.simulate on one of them says why)")
        more = f", or {', '.join(self.untried)}" if self.untried else ""
        return (f"{s['candidates']} plans searched, {s['pruned_memory'] + s['did_not_fit']} "
                f"do not fit in memory; try more GPUs, a smaller global batch or "
                f"micro-batch{more}")

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for rp in self.plans:
            mem = rp.memory
            r = rp.result
            out.append({"rank": rp.rank, "plan": rp.label(), "gpus": rp.gpus,
                        "global_batch": rp.plan.global_batch,
                        "iteration_time": rp.iteration_time,
                        "tokens_per_second": rp.tokens_per_second,
                        "tokens_per_gpu": r.tokens_per_gpu,
                        "tflops_per_gpu": r.tflops_per_gpu,
                        "samples_per_second": rp.samples_per_second, "mfu": rp.mfu,
                        "mfu_bf16": r.mfu_bf16, "precision": r.precision,
                        "memory_gib": mem.total / _GIB, "capacity_gib": mem.capacity / _GIB,
                        "usable_gib": mem.usable / _GIB, "fits": rp.fits,
                        "days": r.days, "gpu_hours": r.gpu_hours, "cost": r.cost,
                        "days_band": r.days_band, "cost_band": r.cost_band,
                        "checked": r.checked})
        return out

    def table(self) -> str:
        used = sorted({rp.gpus for rp in self.plans})
        gpus = (f"{used[0]} of {self.cluster.gpus}"
                if len(used) == 1 and used[0] != self.cluster.gpus else f"{self.cluster.gpus}")
        deadline = (f", within {self.max_days:g} days" if self.max_days is not None else "")
        head = (f"{len(self.plans)} best of {self.stats['candidates']} plans "
                f"({'cheapest' if self.objective == 'cost' else 'fastest'}{deadline}) for "
                f"{getattr(self.model, 'name', '') or 'the model'} on {self.cluster.name} "
                f"({gpus} GPUs), global batch {'at most ' if self.max_batch else ''}"
                f"{self.global_batch}; searched in "
                f"{self.search_seconds * 1e3:.0f} ms ({self.stats['simulated']} simulated)")
        if self.framework is not None:
            head += f"; plans {_frameworks.get(self.framework).version} runs"
        head += "\n    " + self.setup()
        if not self.plans:
            return head + "\nno plan fits: " + self._why_none()
        out = head + "\n" + _plan_table(self.rows(), self.objective == "cost" or len(used) > 1,
                                         self.precision, self.max_batch)
        # how far the model was from the published runs of the plans' stack
        if self.plans[0].result.checked:
            out += "\n" + self._checked_line()
        return out

    def _checked_line(self) -> str:
        """The published runs of plan 1's stack, and with tokens= its days
        (and cost) at their lowest and highest error."""
        best = self.plans[0].result
        band = best._band_text()
        return (best.checked or "") + ("" if band is None
                                       else f"; with them plan 1 trains in {band}")

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
                f"{rows}</table><p><small>{html.escape(self.setup())}"
                + (f"; {html.escape(self._checked_line())}"
                   if self.plans and self.plans[0].result.checked else "")
                + "</small></p>"
                + ("" if self.plans else
                   f"<p><b>no plan fits</b>: {html.escape(self._why_none())}</p>"))

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

    def pareto_table(self) -> str:
        """The time-cost Pareto front as a table (:meth:`pareto`)."""
        front = self.pareto()
        rows = [r for r in RankedPlans(self.model, self.cluster, self.global_batch, self.objective,
                                       front, self.stats, 0.0, self.precision, self.headroom,
                                       self.tokens, self.price).rows()]
        for i, r in enumerate(rows, 1):
            r["rank"] = i
        return ("time-cost Pareto front (no plan is both faster and cheaper):\n"
                + _plan_table(rows, True, self.precision))

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(r, plan=rp.plan.to_dict()) for r, rp in zip(self.rows(), self.plans)]


def _plan_table(rows: list[dict[str, Any]], show_gpus: bool, precision: str,
                show_batch: bool = False) -> str:
    """The ranking's rows as text: one column per figure, the plan last."""
    if not rows:
        return "(none)"
    tokens = rows[0]["tokens_per_second"] is not None
    batches = show_batch or len({r["global_batch"] for r in rows}) > 1
    cols: list[tuple[str, Any]] = [("#", lambda r: str(r["rank"]))]
    if show_gpus:
        cols.append(("GPUs", lambda r: str(r["gpus"])))
    if batches:
        cols.append(("batch", lambda r: str(r["global_batch"])))
    cols.append(("s/iter", lambda r: f"{r['iteration_time']:.4g}"))
    if tokens:
        cols += [("tokens/s", lambda r: f"{r['tokens_per_second']:,.0f}"),
                 ("tok/s/GPU", lambda r: f"{r['tokens_per_gpu']:,.0f}"),
                 ("TFLOP/s/GPU", lambda r: f"{r['tflops_per_gpu']:,.0f}"),
                 (f"MFU {precision}", lambda r: f"{r['mfu'] * 100:.1f}%")]
    else:
        cols.append(("samples/s", lambda r: f"{r['samples_per_second']:,.1f}"))
    if rows[0]["days"] is not None:
        cols += [("days", lambda r: f"{r['days']:,.1f}"),
                 ("GPU-hours", lambda r: f"{r['gpu_hours']:,.0f}")]
    if rows[0]["cost"] is not None:
        cols.append(("cost $", lambda r: f"{r['cost']:,.0f}"))
    cols.append(("GiB used/total", lambda r: f"{r['memory_gib']:.1f}/{r['capacity_gib']:.1f}"))
    cells = [[f(r) for _, f in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _) in enumerate(cols)]
    lines = [" ".join(h.rjust(w) for (h, _), w in zip(cols, widths)) + "  plan"]
    for r, c in zip(rows, cells):
        lines.append(" ".join(x.rjust(w) for x, w in zip(c, widths)) + "  " + r["plan"]
                     + ("" if r["fits"] else "  DOES NOT FIT"))
    return "\n".join(lines)


def _pareto(plans: Any) -> tuple[RankedPlan, ...]:
    """Plans not beaten on both iteration time and GPU-seconds, fastest first."""
    out: list[RankedPlan] = []
    best_cost = float("inf")
    for rp in sorted(plans, key=lambda p: (p.iteration_time, p.iteration_time * p.gpus)):
        c = rp.iteration_time * rp.gpus
        if c < best_cost:
            out.append(rp)
            best_cost = c
    return tuple(out)


def _bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool, not {type(v).__name__}")
    return v


def _stack_default(fw: Any, name: str, given: str, unset: str) -> str:
    """The ``name`` of the training stack the plans run: the framework's
    default where the caller left autoplan's own (``unset``;
    :func:`_framework_options` sets the search's the same way)."""
    d = fw.defaults.get(name) if fw is not None else None
    return d if given == unset and isinstance(d, str) else given


def _stack(name: str, v: Any, allowed: dict) -> int:
    if v not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {v!r}")
    return allowed[v]


_KS_NAMES = {v: k for k, v in KERNEL_SETS.items()}
# what the search offers: torchtitan's op-level checkpointing (selective-op)
# and its earlier kernel sets (compile-blocks, compile-fa2, eager-unfused-norm)
# are simulated, not searched
_SEARCH_RECOMPUTE = {k: v for k, v in RECOMPUTE_MODES.items() if k != "selective-op"}
_SEARCH_KERNELS = {k: v for k, v in KERNEL_SETS.items()
                   if k not in ("compile-blocks", "compile-fa2", "eager-unfused-norm")}
_CE_NAMES = {v: k for k, v in CROSS_ENTROPIES.items()}


def _plan_loss(cross_entropy: str, kernels: str) -> str:
    """The loss a plan on ``kernels`` runs when ``cross_entropy`` is asked
    for every plan: Megatron's unfused loss on the TE kernel set only, a
    fused loss kernel on a PyTorch one only (:func:`_loss_mismatch`); the
    kernel set's own otherwise."""
    return "auto" if _loss_mismatch(cross_entropy, kernels) is not None else cross_entropy


_TPO_NAMES = {v: k for k, v in TP_OVERLAPS.items()}
_CP_NAMES = {v: k for k, v in CP_COMMS.items()}


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


def _memory_opts(c: Cluster, reshard: Any, shard_size: Any, off_opt: Any,
                 off_act: Any) -> tuple:
    """autoplan's sharding and offloading options as the C search takes them."""
    def tri(name: str, v: Any, on: int) -> int:
        if v is None:
            return -1
        return on if _bool(name, v) else 1 - on
    if isinstance(shard_size, bool) or not hasattr(shard_size, "__index__") or shard_size < 0:
        raise ValueError(f"shard_size must be an int >= 0, got {shard_size!r}")
    if off_act is None:
        act = -1.0
    else:
        if isinstance(off_act, bool) or not isinstance(off_act, (int, float)):
            raise TypeError("offload_activations must be a number in [0, 1] or None")
        if not 0.0 <= float(off_act) <= 1.0:
            raise ValueError(f"offload_activations must be in [0, 1], got {off_act}")
        act = float(off_act)
    oo = tri("offload_optimizer", off_opt, 1)
    host = c.host_bandwidth > 0 and c.host_memory_bandwidth > 0 and c.host_memory_bytes > 0
    if (oo == 1 or act > 0) and not host:
        raise ValueError(f"offloading needs the cluster's host_memory_bytes, host_bandwidth and "
                         f"host_memory_bandwidth ({c.name} has none)")
    return (tri("reshard_after_forward", reshard, 0), int(shard_size), oo, act)


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
             reshard_after_forward: bool | None = True, shard_size: int = 0,
             offload_optimizer: bool | None = False,
             offload_activations: float | None = 0.0,
             kernels: str = "te", tp_overlap: str = "none", cp_comm: str = "p2p",
             optimizer_impl: str = "megatron", fp8_recipe: str = "tensorwise",
             cross_entropy: str = "auto", attention: str = "auto",
             timeout: float | None = None,
             executor: Any = None, headroom: float | None = None,
             tokens: float | None = None, price: "float | Mapping[str, float] | None" = None,
             max_days: float | None = None, max_batch: bool = False,
             framework: str | None = None) -> RankedPlans:
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
    Sharding and offloading (see :class:`ParallelPlan`): ``reshard_after_forward``
    (ZeRO-3 plans; ``None`` searches both), ``shard_size`` (hybrid sharding of
    every ZeRO plan; plans whose ``dp x cp`` it does not divide are skipped),
    ``offload_optimizer`` (``None`` searches both) and ``offload_activations``
    (a share, or ``None`` to search 0, 0.5 and 1); offloading needs the
    cluster's ``host_bandwidth`` and ``host_memory_bandwidth``.
    ``kernels``, ``tp_overlap`` and ``cp_comm`` name the training stack every
    plan is priced on (not searched; :class:`ParallelPlan`; ``"te"``,
    ``"compile"`` or ``"eager"``: torchtitan's earlier kernel sets and its
    op-level checkpointing are simulated, not searched): ``tp_overlap``
    applies to the plans with sequence parallelism.  ``optimizer_impl`` is
    the optimizer's gradient path every plan is priced on (not searched;
    :class:`ParallelPlan`): ``"megatron_bf16_grads"`` (16-bit gradients,
    Megatron-LM's ``--grad-reduce-in-bf16``, NeMo's and Megatron-Bridge's
    performance recipes) ranks only ZeRO 0 and 1 plans, ``"apex_bf16"``
    (NeMo's Apex optimizer) only ZeRO 1 plans.  ``fp8_recipe`` is torchao's
    float8 recipe of fp8 plans under a PyTorch kernel set (``"tensorwise"``,
    ``"rowwise"`` or ``"rowwise_with_gw_hp"``; ``framework="torchtitan"``
    runs rowwise unless given the other rowwise one).  ``cross_entropy``
    is the loss every plan is priced with (:class:`ParallelPlan`;
    ``"unfused"``, Megatron-LM's default loss, needs ``kernels="te"``, and
    ``framework="megatron"`` prices it unless given).  ``attention`` is
    the fused attention kernel every plan is priced with (``"auto"`` or
    ``"flash2"``, :class:`ParallelPlan`; ``framework="deepspeed"`` prices
    FlashAttention-2 unless given).
    ``timeout`` (seconds) raises TimeoutError past it; Ctrl-C stops the
    search with KeyboardInterrupt.  Raises ValueError for impossible arguments; a search with no
    plan that fits returns an empty ranking whose ``table()`` says why.

    ``executor``: split the search by tensor-parallel size (one task per
    ``tp`` that divides a node; with ``tp=`` fixed, one per ``pp`` that
    divides the GPU count) over a concurrent.futures executor, a
    dask.distributed.Client or a multiprocessing-style pool; the per-task
    top lists merge into exactly the local ranking (``stats`` then sums
    the tasks' counters; docs/distributed.md).

    ``headroom``: the fraction of each GPU's memory a plan must leave free
    (default :data:`hpgo.parallel.DEFAULT_HEADROOM`, 3.3 %, the caching
    allocator's reserve); the search is the same exact search on GPUs with
    that much less memory.  ``tokens`` (to train on) and ``price`` (dollars
    per GPU-hour) add days, GPU-hours and cost to every plan.  ``max_days``
    (needs ``tokens``) keeps only plans that train within that many days:
    with ``objective="cost"`` the cheapest such plans over the GPU counts
    ``gpus / 2^k``, and :meth:`RankedPlans.pareto` the exact time-cost front
    (the fastest plan of each GPU count is searched separately).

    ``max_batch=True`` takes ``global_batch`` as a maximum, as Calculon does:
    each plan runs the largest multiple of its data-parallel size not above
    it, so plans whose dp does not divide it are ranked too (by time per
    sample, since their batches differ; ``plan.global_batch`` says which
    batch each runs).  Objective "time" only.

    ``framework`` (``"megatron"``, ``"torchtitan"``, ``"deepspeed"``; None:
    any combination hpgo models) ranks only plans that framework runs
    (:mod:`hpgo.frameworks`): the search runs once per schedule and ZeRO
    stage (and recomputation mode) the framework offers, with the sizes a
    stage needs fixed, and drops plans breaking its other rules, asking each
    search for more plans until ``top`` remain or none are left; fixed
    choices it does not offer raise ValueError.  It does not combine with
    ``max_batch`` or ``max_days`` (ValueError)."""
    m = _as_model(model, profile_batch)
    room = headroom_fraction(headroom)
    tokens = _positive_real("tokens", tokens)
    price_arg = price   # a number, or a mapping GPU type -> $ per GPU-hour
    price = None if isinstance(price, Mapping) else _positive_real("price", price)
    max_days = _positive_real("max_days", max_days)
    if max_days is not None and tokens is None:
        raise ValueError("max_days= needs tokens= (the tokens to train on)")
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
    if not 1 <= global_batch.__index__() <= 1 << 40:   # the core's bound, named before it
        raise ValueError(f"global_batch must be in 1..2^40, got {global_batch}")
    if not isinstance(exhaustive, bool):
        raise TypeError("exhaustive must be a bool")
    overhead_bytes = _overhead_bytes(overhead_bytes)
    if n is not None and not isinstance(n, bool) and hasattr(n, "__index__") and n.__index__() < 1:
        raise ValueError(f"{'gpus' if gpus is not None else 'max_gpus'} must be >= 1 (None: the "
                         f"whole cluster), got {n}")
    if zero is not None and not isinstance(zero, bool) and hasattr(zero, "__index__") \
            and not 0 <= zero.__index__() <= 3:
        raise ValueError(f"zero must be 0, 1, 2 or 3 (ZeRO stage), got {zero}")
    opts = (global_batch,
            0 if n is None else _fixed("gpus" if gpus is not None else "max_gpus", n),
            _core.OBJECTIVE_TIME if objective == "time" else _core.OBJECTIVE_COST, top,
            int(exhaustive), threads, max_micro_batch, max_virtual_stages, overhead_bytes,
            _fixed("tp", tp), _fixed("pp", pp), _fixed("dp", dp),
            _fixed("virtual_stages", virtual_stages), _fixed("micro_batch", micro_batch),
            _fixed("schedule", schedule, SCHEDULES), _fixed("recompute", recompute, _SEARCH_RECOMPUTE),
            _fixed("sequence_parallel", sequence_parallel), _fixed("zero", zero), _fixed("cp", cp),
            _fixed("ep", ep), _fixed("etp", etp),
            _fixed("ep_placement", ep_placement, {"inner": 0, "outer": 1}),
            int(share > 0), _dispatcher(moe_dispatcher), int(_bool("fp8_params", fp8_params)),
            share, *_memory_opts(c, reshard_after_forward, shard_size, offload_optimizer,
                                 offload_activations),
            _stack("kernels", kernels, _SEARCH_KERNELS),
            _stack("tp_overlap", tp_overlap, TP_OVERLAPS), _stack("cp_comm", cp_comm, CP_COMMS),
            _stack("optimizer_impl", optimizer_impl, OPTIMIZER_IMPLS),
            _stack("fp8_recipe", fp8_recipe, FP8_RECIPES),
            _stack("cross_entropy", cross_entropy, CROSS_ENTROPIES),
            _stack("attention", attention, ATTENTIONS))
    why = _loss_mismatch(cross_entropy, kernels)
    if why is not None:
        raise ValueError(why)
    fw = _frameworks.get(framework)
    # the kernel set and float8 recipe the plans run: the framework's where
    # the caller left autoplan's defaults (_framework_options, apply_fp8_recipe)
    stack_kernels = _stack_default(fw, "kernels", kernels, "te")
    recipe = _frameworks.fp8_recipe_of(fw, precision, fp8_recipe, stack_kernels)
    if recipe != "tensorwise" and stack_kernels == "te":
        raise ValueError(f"fp8_recipe={recipe!r} (torchao's rowwise float8 recipe) needs a "
                         "PyTorch kernel set: kernels='compile' or 'eager'")
    opts = opts[:_O_FP8_RECIPE] + (FP8_RECIPES[recipe],) + opts[_O_FP8_RECIPE + 1:]
    if tp_overlap == "te" and kernels != "te" or tp_overlap == "async" and kernels != "compile":
        raise ValueError(f"tp_overlap={tp_overlap!r} does not run on kernels={kernels!r} "
                         "('te' needs kernels='te', 'async' kernels='compile')")
    if (tokens is not None) and not isinstance(m, Transformer):
        raise ValueError("tokens= needs a transformer model (a profiled model has no tokens)")
    if c.parts or c.speeds:
        if optimizer_impl != "megatron":
            raise ValueError("optimizer_impl= is searched on one GPU type only: the search over "
                             "uneven plans prices Megatron's gradient path")
        if cross_entropy != "auto" or attention != "auto":
            raise ValueError("cross_entropy= and attention= are searched on one GPU type only: "
                             "the search over uneven plans prices the kernel set's own")
        if fp8_recipe != "tensorwise":
            raise ValueError("fp8_recipe= is searched on one GPU type only: the search over "
                             "uneven plans prices the tensorwise recipe")
        # several GPU types or slowed GPUs: the search over uneven plans
        from .autoplan_hetero import hetero_search
        given = {k for k, v in (("gpus", gpus), ("max_gpus", max_gpus), ("pp", pp), ("dp", dp),
                                ("virtual_stages", virtual_stages),
                                ("sequence_parallel", sequence_parallel), ("cp", cp),
                                ("ep", ep), ("etp", etp), ("ep_placement", ep_placement),
                                ("executor", executor), ("max_days", max_days),
                                ("framework", framework)) if v is not None}
        given |= {k for k, v in (("overlap_moe_comm", overlap_moe_comm), ("fp8_params", fp8_params),
                                 ("max_batch", max_batch)) if v}
        return hetero_search(m, c, global_batch, given=given, top=top, objective=objective,
                             exhaustive=exhaustive, threads=threads,
                             max_micro_batch=max_micro_batch, overhead_bytes=overhead_bytes,
                             precision=precision, headroom=room, tokens=tokens, price=price_arg,
                             tp=tp, micro_batch=micro_batch, schedule=schedule,
                             recompute=recompute, zero=zero, kernels=kernels,
                             tp_overlap=tp_overlap, timeout=timeout,
                             reshard_after_forward=reshard_after_forward, shard_size=shard_size,
                             offload_optimizer=offload_optimizer,
                             offload_activations=offload_activations)
    if isinstance(price_arg, Mapping):
        from .cluster import part_prices
        price = (part_prices(c, price_arg) or (None,))[0]
    mt = m._tuple(PRECISIONS[precision])
    cs = _headroom_cluster(c, room)   # the search judges fits against the usable memory
    mid = model_id(m)
    # the loss (on the TE kernel set only) and attention kernel the plans run
    stack_ce = _stack_default(fw, "cross_entropy", cross_entropy, "auto")
    stack_att = _stack_default(fw, "attention", attention, "auto")

    def to_plan(pt: tuple) -> ParallelPlan:
        (p_tp, p_pp, p_dp, p_cp, p_ep, v, mb, gb, sch, rc, sp, z, ov, split, p_etp, outer,
         ep_ov, disp, f8p, _share, reshard, shard, off_opt, off_act, ks, tpo, cpc, _rl,
         _rm) = pt
        return ParallelPlan(global_batch=gb, tp=p_tp, pp=p_pp, dp=p_dp, cp=p_cp, ep=p_ep,
                            virtual_stages=v, micro_batch=mb, schedule=_SCHED_NAMES[sch],
                            recompute=_RC_NAMES[rc], sequence_parallel=bool(sp), zero=z,
                            overlap_grad_reduce=bool(ov), split=split, model=mid,
                            etp=p_etp or None, ep_placement="outer" if outer else "inner",
                            overlap_moe_comm=overlap_moe_comm if ep_ov else False,
                            moe_dispatcher=DISPATCHERS_BY_CODE[disp],
                            fp8_params=bool(f8p), reshard_after_forward=bool(reshard),
                            shard_size=shard, offload_optimizer=bool(off_opt),
                            offload_activations=off_act, kernels=_KS_NAMES[ks],
                            tp_overlap=_TPO_NAMES[tpo], cp_comm=_CP_NAMES[cpc],
                            optimizer_impl=optimizer_impl, fp8_recipe=recipe,
                            cross_entropy=_plan_loss(stack_ce, _KS_NAMES[ks]),
                            attention=stack_att)

    def search(o: tuple) -> dict:
        if executor is not None:
            return _distributed_search(executor, mt, cs, o, timeout, o[3])
        return _core._autoplan(mt, cs._tuple(), o, timeout)

    t0 = time.perf_counter()
    front_raw: list = []
    if fw is not None:
        if _bool("max_batch", max_batch) or max_days is not None:
            raise ValueError("framework= does not combine with max_batch=True or max_days=")
        unset = {k for k, v in (("reshard_after_forward", reshard_after_forward is True),
                                ("kernels", kernels == "te"), ("tp_overlap", tp_overlap == "none"),
                                ("cp_comm", cp_comm == "p2p"),
                                ("cross_entropy", cross_entropy == "auto"),
                                ("attention", attention == "auto")) if v}
        stats, entries = _framework_search(fw, m, precision, opts, int(top), search, to_plan,
                                           dict(schedule=schedule, zero=zero, recompute=recompute,
                                                pp=pp, ep=ep, optimizer_impl=optimizer_impl),
                                           unset)
    else:
        if _bool("max_batch", max_batch):
            if objective != "time" or max_days is not None or executor is not None:
                raise ValueError("max_batch=True ranks by time per sample: it takes "
                                 "objective='time' without max_days= or executor=")
            d = _max_batch_search(mt, cs, opts, timeout, top)
        elif max_days is not None and tokens is not None and isinstance(m, Transformer):
            d, front_raw = _deadline_search(mt, cs, opts, timeout, executor, top,
                                            max_days * 86400.0 * global_batch * m.seq / tokens)
        else:
            d = search(opts)
        stats = {k: int(v) for k, v in d.items() if k != "plans"}
        entries = [(to_plan(e[0]), e[3]) for e in d["plans"]]
    elapsed = time.perf_counter() - t0

    def ranked_plan(rank: int, plan: ParallelPlan, balanced: Any) -> RankedPlan:
        plan = _frameworks.apply_defaults(fw, _frameworks.apply_gradient_path(fw, plan, precision))
        res = simulate(m, c, plan, precision=precision, timeline=False,
                       overhead_bytes=overhead_bytes, headroom=room, tokens=tokens, price=price)
        return RankedPlan(rank, plan, res, bool(balanced))

    ranked = [ranked_plan(rank, plan, balanced) for rank, (plan, balanced) in enumerate(entries, 1)]
    front: tuple = ()
    if max_days is not None:
        front = _pareto(ranked_plan(0, to_plan(pt), balanced)
                        for pt, _t, _s, balanced in front_raw)
    conflicts = () if stats.get("candidates", 1) else _fixed_conflicts(
        m, int(gpus or max_gpus or c.gpus), c.gpus_per_node, int(global_batch),
        dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, virtual_stages=virtual_stages,
             micro_batch=micro_batch), int(max_micro_batch))
    return RankedPlans(m, c, int(global_batch), objective, tuple(ranked), stats, elapsed,
                       precision, room, tokens, price, max_days, front, bool(max_batch),
                       fw.name if fw is not None else None,
                       _untried(fw, c, recompute, zero, offload_optimizer,
                                offload_activations), conflicts)


def _fixed_conflicts(m: Any, n: int, gpn: int, batch: int, fixed: dict,
                     max_micro_batch: int) -> tuple[str, ...]:
    """The fixed sizes that no plan on ``n`` GPUs can take, each checked on
    its own against the rules the core's enumeration applies (a diagnosis of
    an empty search: it never prunes anything)."""
    f = {k: int(v) for k, v in fixed.items() if v is not None}
    xf = isinstance(m, Transformer)
    layers = m.layers if xf else len(m.forward)
    out = []
    tp, cp, pp = f.get("tp"), f.get("cp"), f.get("pp")
    if tp is not None:
        if gpn % tp:   # tensor parallelism stays inside a node
            out.append(f"tp={tp} does not divide a node's {gpn} GPUs")
        elif not xf and tp > 1:
            out.append(f"tp={tp}: a profiled model runs without tensor parallelism")
        elif xf and m.heads % tp:
            out.append(f"tp={tp} does not divide the {m.heads} attention heads")
        elif xf and m.kv_heads % tp and tp % m.kv_heads:
            out.append(f"tp={tp} and the {m.kv_heads} key-value heads: neither divides the other")
        elif xf and (m.experts == 0 or m.dense_first > 0 or m.moe_every > 1) and m.ffn % tp:
            out.append(f"tp={tp} does not divide the MLP's {m.ffn}")
    if cp is not None and cp > 1:
        if cp & (cp - 1) or cp > 64:
            out.append(f"cp={cp}: the search tries powers of two up to 64")
        elif not xf:
            out.append(f"cp={cp}: a profiled model has no sequence to split")
        elif m.seq % (2 * cp):
            out.append(f"cp={cp}: the sequence ({m.seq:,} tokens) is not a multiple of 2 x cp")
    if pp is not None and pp > layers:
        out.append(f"pp={pp} exceeds the model's {layers} layers")
    v = f.get("virtual_stages")
    if pp is not None and v is not None and pp * v > layers:
        out.append(f"pp x virtual_stages = {pp * v} exceeds the model's {layers} layers")
    sizes = [(k, f[k]) for k in ("tp", "cp", "pp", "dp") if k in f]
    prod = 1
    for _k, x in sizes:
        prod *= x
    named = " x ".join(k for k, _ in sizes) + (" = " if len(sizes) > 1 else "=")
    if not out and sizes and prod > n:
        out.append(f"{named}{prod} needs more than the {n} GPUs")
    elif not out and sizes and n % prod:
        out.append(f"{named}{prod} does not divide the {n} GPUs")
    elif not out and len(sizes) == 4 and prod != n:
        out.append(f"tp x cp x pp x dp = {prod}, not the {n} GPUs")
    dp = f.get("dp")
    if dp is not None and batch % dp:
        out.append(f"dp={dp} does not divide the global batch {batch}")
    mb = f.get("micro_batch")
    if mb is not None:
        if mb > max_micro_batch:
            out.append(f"micro_batch={mb} exceeds max_micro_batch={max_micro_batch}")
        elif batch % mb or (dp is not None and not batch % dp and (batch // dp) % mb):
            k = batch // (dp or 1)
            out.append(f"micro_batch={mb} does not divide the {k} sample{'s' * (k != 1)} "
                       f"{'per data-parallel replica' if dp else 'of the global batch'}")
    ep = f.get("ep")
    if ep is not None and ep > 1:
        if not xf or not m.experts:
            out.append(f"ep={ep}: the model has no experts")
        elif m.experts % ep:
            out.append(f"ep={ep} does not divide the {m.experts} experts")
        elif n % ep:   # ep divides tp x cp x dp / etp, a divisor of the GPUs
            out.append(f"ep={ep} does not divide the {n} GPUs")
    return tuple(out)


def _untried(fw: Any, c: Cluster, recompute: str | None, zero: int | None,
             offload_optimizer: Any, offload_activations: Any) -> tuple[str, ...]:
    """The memory-saving choices a search with these fixed ones left out
    (None: searched), those the framework offers (offloading: without a
    framework, on a cluster with a host link)."""
    out = []
    if recompute is not None and recompute != "full" and (fw is None or "full" in fw.recompute):
        out.append("recompute='full'")
    if zero is not None and zero < 3 and (fw is None or 3 in fw.zero):
        out.append("zero=3")
    host = fw is None and c.host_bandwidth > 0 and c.host_memory_bandwidth > 0
    if host and offload_optimizer is False:
        out.append("offload_optimizer=True")
    if host and offload_activations is not None and offload_activations < 1:
        out.append("offload_activations=1")
    return tuple(out)


def _max_batch_search(mt: tuple, c: Cluster, opts: tuple, timeout: float | None,
                      top: Any) -> dict:
    """The ranking when the global batch is a maximum B: a plan with dp data-
    parallel replicas runs floor(B / dp) dp samples.  Every dp is a divisor
    of the GPU count; the plans whose dp divides B run B (one search), and
    each other dp its own batch (one search with that dp fixed).  Each search
    is exact at its batch, where time per sample orders plans as time does,
    so the ``top`` plans by time per sample are among the ``top`` of each
    search: merged by (time per sample, search, rank), they are exact."""
    B = int(opts[0])
    n = int(opts[1] or c.gpus)
    fixed_dp = int(opts[11])
    dps = [fixed_dp] if fixed_dp >= 0 else [k for k in range(1, n + 1) if n % k == 0]
    batches = [(B, -1)] if fixed_dp < 0 else []
    batches += [(B // k * k, k) for k in dps if (fixed_dp >= 0 or B % k) and B >= k]
    merged: list[tuple] = []
    stats: dict[str, int] = {}
    for j, (b, k) in enumerate(batches):
        o = list(opts)
        o[0], o[11] = b, k
        d = _core._autoplan(mt, c._tuple(), tuple(o), timeout)
        for key_, v in d.items():
            if key_ != "plans":
                stats[key_] = stats.get(key_, 0) + int(v)
        for i, entry in enumerate(d["plans"]):
            merged.append((entry[1] / b, j, i, entry))
    merged.sort(key=lambda x: x[:3])
    return dict(stats, plans=[e for *_k, e in merged[:int(top)]])


def _deadline_search(mt: tuple, c: Cluster, opts: tuple, timeout: float | None, executor: Any,
                     top: Any, max_iteration: float) -> tuple[dict, list]:
    """The ranking under a deadline, and the fastest plan of each GPU count.

    A deadline bounds the iteration time (days x 86,400 x tokens per
    iteration / tokens).  At a fixed GPU count the cost (GPU-seconds per
    iteration) orders plans as their time does, so the plans of that count
    that meet the deadline are a prefix of its time ranking, and the
    ``top`` cheapest plans overall are among the ``top`` fastest of each
    count: one exact time search per count (``gpus``, then halves while
    even, as the cost objective's counts), merged by (score, more GPUs first,
    rank), the order of the single cost search.  The fastest plan of each
    count is the only one of that count that can be on the time-cost front."""
    cost = opts[2] == _core.OBJECTIVE_COST
    n = opts[1] or c.gpus
    counts = [n]
    while cost and counts[-1] % 2 == 0:
        counts.append(counts[-1] // 2)
    merged: list[tuple] = []
    fastest: list = []
    stats: dict[str, int] = {}
    for g in counts:
        o = list(opts)
        o[1], o[2] = g, _core.OBJECTIVE_TIME
        if executor is not None:
            d = _distributed_search(executor, mt, c, tuple(o), timeout, top)
        else:
            d = _core._autoplan(mt, c._tuple(), tuple(o), timeout)
        for k, v in d.items():
            if k != "plans":
                stats[k] = stats.get(k, 0) + int(v)
        if d["plans"]:
            fastest.append(d["plans"][0])
        for i, entry in enumerate(d["plans"]):
            t = entry[1]
            if t <= max_iteration:
                merged.append(((t * g if cost else t), -g, i, entry))
            else:
                stats["over_deadline"] = stats.get("over_deadline", 0) + 1
    merged.sort(key=lambda x: x[:3])
    stats.setdefault("over_deadline", 0)
    return dict(stats, plans=[e for *_k, e in merged[:int(top)]]), fastest


# the search's largest top list (csrc/module autoplan glue): past it a framework
# ranking holds the plans found among that many of every sub-search
_MAX_TOP = 1000
# positions in the search options tuple (csrc/module autoplan glue)
_O_TOP, _O_PP, _O_SCHEDULE, _O_RECOMPUTE, _O_ZERO, _O_EP = 3, 10, 14, 15, 17, 19
_O_NO_RESHARD = 26
_O_STACK = {"kernels": (30, KERNEL_SETS), "tp_overlap": (31, TP_OVERLAPS),
            "cp_comm": (32, CP_COMMS), "cross_entropy": (35, CROSS_ENTROPIES),
            "attention": (36, ATTENTIONS)}
_O_OPTIMIZER = 33
_O_FP8_RECIPE = 34


def _framework_options(fw: Any, opts: tuple, unset: set) -> tuple:
    """``opts`` with the framework's runtime defaults that the search prices
    set where the caller left autoplan's own default (``unset``), so that
    the ranking is of the plans as the framework runs them."""
    o = list(opts)
    d = fw.defaults
    if "reshard_after_forward" in unset and "reshard_after_forward" in d:
        v = d["reshard_after_forward"]
        if callable(v):
            # the only policy the C search knows: reshard unless pipelined
            probe = ParallelPlan(global_batch=2, dp=2, zero=3)
            if not (v(probe) and not v(probe.with_(pp=2, dp=1))):
                raise ValueError(f"{fw.name}: reshard_after_forward policy not searchable")
            o[_O_NO_RESHARD] = 2
        else:
            o[_O_NO_RESHARD] = 0 if v else 1
    # the framework's training stack prices every plan (kernels, tp overlap,
    # context-parallel exchange) unless the caller chose one
    for name, (pos, codes) in _O_STACK.items():
        if name in unset and isinstance(d.get(name), str) and d[name] in codes:
            o[pos] = codes[d[name]]
    if o[_O_STACK["tp_overlap"][0]] == TP_OVERLAPS["async"] and \
            o[_O_STACK["kernels"][0]] != KERNEL_SETS["compile"]:
        o[_O_STACK["tp_overlap"][0]] = TP_OVERLAPS["none"]
    # Megatron's unfused loss runs on the TE kernel set only, a fused loss
    # kernel on a PyTorch one
    ce = _plan_loss(_CE_NAMES[o[_O_STACK["cross_entropy"][0]]],
                    _KS_NAMES[o[_O_STACK["kernels"][0]]])
    o[_O_STACK["cross_entropy"][0]] = CROSS_ENTROPIES[ce]
    return tuple(o)


def _framework_search(fw: Any, m: Any, precision: str, opts: tuple, top: int, search: Any,
                      to_plan: Any, fixed: dict, unset: set) -> tuple[dict, list]:
    """The ``top`` best plans ``fw`` runs.  Each sub-search fixes one
    schedule x ZeRO stage (x recomputation mode) the framework offers; their
    plans are disjoint and every plan the framework offers is in one, so
    merging their rankings by score (ties: more GPUs, then tp, cp, pp, each
    search's own order, as hpgo.distributed.merge_ranked) and dropping plans
    that break the framework's other rules ranks exactly the plans it runs
    -- provided no plan a sub-search left out could rank among them: while
    one could (the search returned as many plans as asked, its last ranking
    before the ``top``-th accepted plan or fewer than ``top`` accepted), ask
    every sub-search for four times as many (at most 1000, the search's
    largest list).  The framework's runtime defaults the search prices
    (:func:`_framework_options`) are set for every sub-search."""
    _frameworks.refuse_fixed(fw, fixed, precision)
    spaces = _frameworks.search_spaces(fw, fixed)
    opts = _framework_options(fw, opts, unset)
    model = m if isinstance(m, Transformer) else None
    want = max(top, 1)
    while True:
        keyed, stats, lasts = [], {}, []
        for sp in spaces:
            o = list(opts)
            o[_O_TOP] = want
            o[_O_SCHEDULE] = int(SCHEDULES[sp["schedule"]])
            o[_O_ZERO] = int(sp["zero"])
            if sp.get("recompute") is not None:
                o[_O_RECOMPUTE] = int(RECOMPUTE_MODES[sp["recompute"]])
            if sp.get("pp") is not None:
                o[_O_PP] = int(sp["pp"])
            if sp.get("ep") is not None:
                o[_O_EP] = int(sp["ep"])
            # the gradient path the framework runs at this ZeRO stage, where
            # the caller left ParallelPlan's default
            path = _frameworks.gradient_path_of(fw, int(sp["zero"]), precision,
                                                fixed["optimizer_impl"])
            o[_O_OPTIMIZER] = int(OPTIMIZER_IMPLS[path])
            d = search(tuple(o))
            for rank, entry in enumerate(d["plans"]):
                pt, _t, score, _b = entry
                key = (score, -(pt[0] * pt[1] * pt[2] * pt[3]), pt[0], pt[3], pt[1], rank)
                keyed.append((key, entry))
                if len(d["plans"]) >= want and rank == len(d["plans"]) - 1:
                    # this search has more plans, each ranked after this one
                    lasts.append(key)
            for k, v in d.items():
                if k != "plans":
                    stats[k] = stats.get(k, 0) + v
        keyed.sort(key=lambda e: e[0])
        seen, out = set(), []
        for key, (pt, _t, _s, balanced) in keyed:
            plan = _frameworks.apply_gradient_path(fw, to_plan(pt), precision)
            if plan in seen:
                continue
            seen.add(plan)
            if not _frameworks.problems(fw, plan, model, precision):
                out.append((key, plan, balanced))
        # exact when the top accepted plans all rank before every plan a
        # search left out (those rank after that search's last plan)
        if (len(out) >= top and all(out[top - 1][0] <= k for k in lasts)) or not lasts \
                or want >= _MAX_TOP:
            return stats, [(p, b) for _, p, b in out[:top]]
        want = min(want * 4, _MAX_TOP)
