"""Simulated timelines of one training iteration.

Two engines, one result type (:class:`SimulationResult`):

* :func:`simulate_pipeline` / :func:`simulate_plan`: an event simulator of a
  pipelined, replicated plan (any stage list, or a planner result) under the
  GPipe, DAPPLE 1F1B or PipeDream schedule.
* :func:`simulate_mlp` / :func:`simulate_transformer` / :func:`grid_search`:
  DistIR's data (D) / horizontal (H) / pipeline (P) parallel study of an MLP
  or a transformer layer stack, with DistIR's op-level cost model and
  simulator semantics ("distir-2021" reproduces the EuroMLSys'21 Figure 3
  study, "distir-2021-grid" its Figure 4 grid, "distir-2022" the MLSys'22
  cost model).

Times are seconds, sizes bytes.  The C core runs with the GIL released;
batches of points run on a thread pool (``threads=0``: all cores, or the
``HPGO_NUM_THREADS`` environment variable).
"""
from __future__ import annotations

import bisect
import inspect
import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from . import _args, _core, _files

__all__ = [
    "SCHEDULES",
    "COST_MODELS",
    "Stage",
    "Event",
    "StageStats",
    "DeviceStats",
    "SimulationResult",
    "GridRow",
    "Figure3",
    "simulate_pipeline",
    "simulate_plan",
    "simulate_mlp",
    "simulate_transformer",
    "simulate_mlp_batch",
    "grid_search",
    "distir_figure3",
    "default_threads",
    "FORWARD_FRACTION",
    "HPGO_NVLINK_BW",
    "HPGO_ETHERNET_BW",
    "HPGO_ETHERNET_NCCL_BW",
    "HPGO_GPUS_PER_MACHINE",
]

#: Pipeline schedules by name.  The DistIR study accepts "1f1b" (PipeDream's
#: timestep scheduler) and "gpipe" (its FIFO scheduler).
SCHEDULES = {"1f1b": 0, "gpipe": 1, "pipedream": 2}
#: Cost-model flavours of the DistIR study.
COST_MODELS = {"distir-2021": 0, "distir-2021-grid": 1, "distir-2022": 2}
_MODELS = {"mlp": 0, "transformer": 1}

#: HPGO's bandwidths (csrc/hpgo/topo.h), bytes/s: point to point inside a machine
#: (NVLink), point to point across machines (Ethernet), and the all-reduce
#: across machines (NCCL over Ethernet).  An all-reduce inside one machine
#: runs at HPGO_NVLINK_BW x (GPUs // 2).
HPGO_NVLINK_BW = 25e9
#: HPGO's fixed GPU memory (bytes): the default capacity of the memory verdict.
HPGO_GPU_MEMORY = 16e9
HPGO_ETHERNET_BW = 1e9
HPGO_ETHERNET_NCCL_BW = 3e9
#: GPUs per machine assumed by :func:`simulate_plan` when neither ``seps``
#: nor a :class:`hpgo.Plan` with seps says where the machines end (DAPPLE's
#: 8-GPU V100 servers, the layout of HPGO's examples).
HPGO_GPUS_PER_MACHINE = 8
#: Share of a layer's forward + backward compute that is the forward, where
#: a profile gives only the sum (:func:`simulate_plan`,
#: :func:`hpgo.dynpipe.chain_from_model`): 1/2, as in HPGO's recursive
#: pipeline model (F = B = c / 2).
FORWARD_FRACTION = 0.5
#: Events turned into Python objects at a time (between two looks at Ctrl-C).
_TIMELINE_BLOCK = 4096


def default_threads() -> int:
    """Threads a pool of size 0 uses: ``HPGO_NUM_THREADS`` or the online CPUs."""
    return _core.default_threads()


# ---------------------------------------------------------------- results


class Event(NamedTuple):
    """One operation on one device.  ``-1`` in stage / microbatch / layer /
    peer means "none"; lane 0 is the device's compute stream, lane 1 its
    asynchronous transfers."""

    start: float
    duration: float
    device: int
    name: str
    lane: int
    stage: int
    microbatch: int
    layer: int
    peer: int

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class StageStats:
    """Per pipeline stage: ``busy`` compute seconds of its busiest device,
    ``bubble`` = 1 - busy / iteration_time, the most micro-batches in flight,
    and the peak memory of its fullest device split into weights (times the
    stashed versions for PipeDream), gradients, optimizer state and
    activations (everything else)."""

    stage: int
    busy: float
    bubble: float
    max_in_flight: int
    weight_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    activation_bytes: float
    peak_bytes: float


@dataclass(frozen=True)
class DeviceStats:
    """Per device: its stage (-1 for the input host), when its last
    operation ends, its compute seconds and its peak memory."""

    device: int
    stage: int
    end: float
    busy: float
    peak_bytes: float


def _track_label(e: Event) -> str:
    if e.lane == 0:
        return "compute"
    if e.peer >= 0 and e.name in ("send", "recv"):
        return f"{e.name} {'to' if e.name == 'send' else 'from'} device {e.peer}"
    return "transfers"


def _trace_threads(timeline: Sequence[Event]) -> tuple[list[int], dict[tuple[int, int], str]]:
    """Thread id of each event and the name of each (device, thread).

    Events first go to a track by device and label (compute, or one link
    direction); a track is then split greedily, in start order, into
    numbered threads on which every event either nests inside the
    innermost open one or starts after it ends, so that Perfetto's
    slice stacks are well formed whatever the engine overlaps."""
    tracks: dict[tuple[int, str], list[int]] = {}
    for i, e in enumerate(timeline):
        tracks.setdefault((e.device, _track_label(e)), []).append(i)
    tids = [0] * len(timeline)
    names: dict[tuple[int, int], str] = {}
    next_tid: dict[int, int] = {}
    # compute first, so that it keeps thread 0
    for (dev, label), idx in sorted(tracks.items(), key=lambda kv: (kv[0][0],
                                                                    kv[0][1] != "compute",
                                                                    kv[0][1])):
        idx.sort(key=lambda i: (timeline[i].start, -timeline[i].duration, i))
        subs: list[list[float]] = []  # per sub-thread: ends of the open (enclosing) events
        sub_tid: list[int] = []
        for i in idx:
            e = timeline[i]
            start, end = e.start, e.start + e.duration
            eps = 1e-12 * max(1.0, abs(end))
            for k, stack in enumerate(subs):
                while stack and stack[-1] <= start + eps:
                    stack.pop()
                if not stack or end <= stack[-1] + eps:
                    stack.append(end)
                    tids[i] = sub_tid[k]
                    break
            else:
                tid = next_tid.get(dev, 0)
                next_tid[dev] = tid + 1
                subs.append([end])
                sub_tid.append(tid)
                names[(dev, tid)] = label if len(subs) == 1 else f"{label} #{len(subs)}"
                tids[i] = tid
    return tids, names


class _FrozenRaw:
    """The numbers of a C simulation result, as Python values: what an
    unpickled :class:`SimulationResult` reads instead of the C object (the
    same interface, so every property and the trace are bit-identical)."""

    __slots__ = ("iteration_time", "_stages", "_devices", "_events")

    def __init__(self, iteration_time: float, stages: tuple, devices: tuple,
                 events: tuple) -> None:
        self.iteration_time = iteration_time
        self._stages = stages
        self._devices = devices
        self._events = events

    @property
    def n_events(self) -> int:
        return len(self._events)

    def stages(self) -> list:
        return list(self._stages)

    def devices(self) -> list:
        return list(self._devices)

    def events(self) -> list:
        return list(self._events)

    def event_slice(self, start: int, stop: int, short: bool) -> list:
        evs = self._events[max(start, 0):max(stop, 0)]
        return [e[:7] + e[8:] for e in evs] if short else list(evs)


def _restore_simulation(iteration_time: float, stages: tuple, devices: tuple, events: tuple,
                        batch_size: int | None, config: dict) -> "SimulationResult":
    return SimulationResult(_FrozenRaw(iteration_time, stages, devices, events),
                            batch_size=batch_size, config=config)


class SimulationResult:
    """Result of one simulated iteration.

    ``iteration_time`` (s), ``throughput`` (samples/s, when the batch size is
    known), ``stages`` (:class:`StageStats`), ``devices``
    (:class:`DeviceStats`), ``bubble`` (per stage), ``peak_memory`` (bytes,
    max over devices), ``timeline`` (list of :class:`Event`, empty when
    simulated with ``timeline=False``) and :meth:`to_chrome_trace`.
    """

    __slots__ = ("_raw", "batch_size", "config", "_stages", "_devices", "_timeline")

    def __init__(self, raw: Any, *, batch_size: int | None = None,
                 config: Mapping[str, Any] | None = None) -> None:
        self._raw = raw
        self.batch_size = batch_size
        self.config = dict(config or {})
        self._stages: list[StageStats] | None = None
        self._devices: list[DeviceStats] | None = None
        self._timeline: list[Event] | None = None

    def __reduce__(self) -> tuple:
        # the simulator's numbers themselves (floats pickle exactly), not a
        # re-simulation: the result does not keep everything its call took
        r = self._raw
        return (_restore_simulation, (r.iteration_time, tuple(r.stages()), tuple(r.devices()),
                                      tuple(r.events()), self.batch_size, self.config))

    @property
    def iteration_time(self) -> float:
        return self._raw.iteration_time

    @property
    def throughput(self) -> float | None:
        if self.batch_size is None or self.iteration_time <= 0:
            return None
        return self.batch_size / self.iteration_time

    @property
    def stages(self) -> list[StageStats]:
        if self._stages is None:
            self._stages = [StageStats(i, *t) for i, t in enumerate(self._raw.stages())]
        return self._stages

    @property
    def devices(self) -> list[DeviceStats]:
        if self._devices is None:
            self._devices = [DeviceStats(*t) for t in self._raw.devices()]
        return self._devices

    @property
    def bubble(self) -> list[float]:
        return [s.bubble for s in self.stages]

    @property
    def peak_memory(self) -> float:
        return max((d.peak_bytes for d in self.devices), default=0.0)

    @property
    def gpu_memory(self) -> float:
        """The capacity the verdict compares with (bytes; ``gpu_memory=`` of
        the simulation, HPGO's 16 GB by default)."""
        return float(self.config.get("gpu_memory", HPGO_GPU_MEMORY))

    @property
    def fits(self) -> bool:
        """Whether every device's peak memory fits :attr:`gpu_memory`."""
        return self.peak_memory <= self.gpu_memory

    @property
    def timeline(self) -> list[Event]:
        if self._timeline is None:
            # a block at a time, so that Ctrl-C stops a long conversion
            make, raw, n = Event._make, self._raw, self._raw.n_events
            out: list[Event] = []
            for start in range(0, n, _TIMELINE_BLOCK):
                out.extend(map(make, raw.event_slice(start, min(n, start + _TIMELINE_BLOCK),
                                                     False)))
            self._timeline = out
        return self._timeline

    def to_chrome_trace(self, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """The timeline as Chrome trace / Perfetto JSON: one process per
        device (named "device N (stage s)", the DistIR input host "device 0
        (host)"); thread 0 is its compute stream and each link direction
        gets its own thread ("send to device P", "recv from device P"), so
        the complete events of every thread are disjoint or properly nested
        (a transfer thread whose events would still overlap is split into
        numbered threads).  Times in microseconds.  Writes the file when
        ``path`` is given and returns the dict either way."""
        events: list[dict[str, Any]] = []
        for d in self.devices:
            label = f"device {d.device}" + (" (host)" if d.stage < 0 else f" (stage {d.stage})")
            events.append({"name": "process_name", "ph": "M", "pid": d.device, "tid": 0,
                           "args": {"name": label}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": d.device, "tid": 0,
                           "args": {"sort_index": d.device}})
        tids, names = _trace_threads(self.timeline)
        for (dev, tid), name in sorted(names.items()):
            events.append({"name": "thread_name", "ph": "M", "pid": dev, "tid": tid,
                           "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": dev, "tid": tid,
                           "args": {"sort_index": tid}})
        for e, tid in zip(self.timeline, tids):
            args = {k: v for k, v in (("stage", e.stage), ("microbatch", e.microbatch),
                                      ("layer", e.layer), ("peer", e.peer)) if v >= 0}
            events.append({"name": e.name, "ph": "X", "ts": e.start * 1e6,
                           "dur": e.duration * 1e6, "pid": e.device, "tid": tid,
                           "args": args})
        trace = {"traceEvents": events, "displayTimeUnit": "ms",
                 "otherData": {"iteration_time_s": self.iteration_time,
                               **{k: v for k, v in self.config.items()
                                  if isinstance(v, (int, float, str))}}}
        if path is not None:
            _files.atomic_write(path, json.dumps(trace))
        return trace

    def _repr_html_(self) -> str:
        """A compact table for Jupyter: iteration time, throughput, peak
        memory, then per stage busy time, bubble, micro-batches in flight
        and memory (first and last stages of a long pipeline)."""
        from ._display import html_table

        cap = f"SimulationResult: iteration {self.iteration_time * 1e3:.3f} ms"
        if self.throughput is not None:
            cap += f", throughput {self.throughput:.2f} samples/s"
        cap += (f", peak memory {self.peak_memory / 2**30:.2f} GiB of "
                f"{self.gpu_memory / 2**30:.1f} ({'fits' if self.fits else 'DOES NOT FIT'}), "
                f"{len(self.stages)} stage"
                f"{'s' if len(self.stages) != 1 else ''}, {len(self.devices)} devices, "
                f"{self._raw.n_events} events")
        sched = self.config.get("schedule")
        if isinstance(sched, str):
            cap += f", {sched}"
        rows = [[str(s.stage), f"{s.busy * 1e3:.3f}", f"{s.bubble * 100:.1f}%",
                 str(s.max_in_flight), f"{s.weight_bytes / 2**20:.1f}",
                 f"{s.activation_bytes / 2**20:.1f}", f"{s.peak_bytes / 2**30:.3f}"]
                for s in self.stages]
        return html_table(["stage", "busy ms", "bubble", "in flight", "weights MiB",
                           "activations MiB", "peak GiB"], rows, caption=cap)

    def __repr__(self) -> str:
        extra = f", throughput={self.throughput:.6g}" if self.throughput is not None else ""
        return (f"SimulationResult(iteration_time={self.iteration_time:.9g}{extra}, "
                f"stages={len(self.stages)}, devices={len(self.devices)}, "
                f"events={self._raw.n_events}, peak_memory={self.peak_memory / 2**30:.3g} of "
                f"{self.gpu_memory / 2**30:.3g} GiB, {'fits' if self.fits else 'DOES NOT FIT'})")


# ---------------------------------------------------------------- checks


def _check_int(name: str, v: Any, minimum: int = 1) -> int:
    return _args.index(name, v, minimum)


def _check_num(name: str, v: Any, *, positive: bool = False) -> float:
    f = _args.real(name, v)
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and f <= 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    if not positive and f < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return f


def _check_cover(stages: list, model: Any) -> None:
    """The stages must tile the model's states 0..L-1 in order (HPGO's
    convention: stage s covers a..b-1, the last one a..b): no overlap, no
    gap, no reversed or out-of-range stage, which would simulate a plan of
    some other model without complaint."""
    n_states = getattr(model, "num_layers", None)
    expect = 0
    for s, st in enumerate(stages):
        a = _check_int(f"plan stage {s} first state", st[0], 0)
        b = _check_int(f"plan stage {s} end state", st[1], 0)
        if s == 0 and a != 0:
            raise ValueError(f"plan stage 0 starts at state {a}, not 0")
        if a < expect:
            raise ValueError(f"plan stage {s} starts at state {a}, inside stage {s - 1} (which "
                             f"covers up to {expect - 1}): stages overlap")
        if a > expect:
            raise ValueError(f"plan stage {s} starts at state {a}: states {expect}..{a - 1} are "
                             f"in no stage")
        last = b if s == len(stages) - 1 else b - 1
        if last < a:
            raise ValueError(f"plan stage {s} covers no state ({a}..{last}): reversed or empty")
        expect = b
    if isinstance(n_states, int) and last > n_states - 1:
        raise IndexError(f"plan state {last} is out of range: the model has {n_states} states")
    if isinstance(n_states, int) and last < n_states - 1:
        raise ValueError(f"the plan covers states 0..{last} but the model has {n_states} "
                         f"(0..{n_states - 1})")


def _choice(name: str, v: Any, table: Mapping[str, int]) -> int:
    if not isinstance(v, str):
        raise TypeError(f"{name} must be a str, not {type(v).__name__}")
    try:
        return table[v]
    except KeyError:
        raise ValueError(f"unknown {name} {v!r}; choose one of "
                         f"{', '.join(repr(k) for k in table)}") from None


# ---------------------------------------------------------------- pipeline plans


@dataclass(frozen=True)
class Stage:
    """A pipeline stage: ``forward`` / ``backward`` seconds per micro-batch
    on each of its GPUs, ``send_bytes`` each GPU sends to the next stage per
    micro-batch (the gradient coming back has the same size),
    ``param_bytes`` and ``activation_bytes`` (stashed per micro-batch in
    flight) per GPU, and its GPUs: ``gpus`` ids, or ``replicas`` GPUs
    numbered after the previous stage's.  ``link_bandwidth`` (bytes/s of
    the link to the next stage, both directions) and
    ``allreduce_bandwidth`` (of this stage's all-reduce) override the
    pipeline's for this stage when given."""

    forward: float
    backward: float
    send_bytes: float = 0.0
    param_bytes: float = 0.0
    activation_bytes: float = 0.0
    gpus: tuple[int, ...] | None = None
    replicas: int = 1
    link_bandwidth: float | None = None
    allreduce_bandwidth: float | None = None


def _as_stage(i: int, s: Any) -> tuple:
    if isinstance(s, Mapping):
        unknown = set(s) - set(Stage.__dataclass_fields__)
        if unknown:
            raise ValueError(f"stage {i}: unknown keys {sorted(unknown)}")
        try:
            s = Stage(**s)
        except TypeError as e:
            raise TypeError(f"stage {i}: {e}") from None
    if not isinstance(s, Stage):
        raise TypeError(f"stage {i} must be a hpgo.Stage or a mapping, not {type(s).__name__}")
    vals = [_check_num(f"stage {i} {k}", getattr(s, k))
            for k in ("forward", "backward", "send_bytes", "param_bytes", "activation_bytes")]
    bws = tuple(0.0 if getattr(s, k) is None else _check_num(f"stage {i} {k}", getattr(s, k),
                                                            positive=True)
                for k in ("link_bandwidth", "allreduce_bandwidth"))
    if s.gpus is not None:
        if isinstance(s.gpus, (str, bytes)) or not isinstance(s.gpus, Iterable):
            raise TypeError(f"stage {i} gpus must be a sequence of ints")
        gpus = tuple(s.gpus)
        if not gpus:
            raise ValueError(f"stage {i} needs at least one GPU")
        for g in gpus:
            _check_int(f"stage {i} GPU id", g, 0)
        return (*vals, gpus, *bws)
    return (*vals, _check_int(f"stage {i} replicas", s.replicas), *bws)


def simulate_pipeline(stages: Sequence[Stage | Mapping[str, Any]], microbatches: int,
                      schedule: str = "1f1b", *, link_bandwidth: float = HPGO_NVLINK_BW,
                      link_latency: float = 0.0, allreduce_bandwidth: float = HPGO_NVLINK_BW,
                      optimizer_factor: float = 2.0, timeline: bool = True,
                      batch_size: int | None = None,
                      gpu_memory: float = HPGO_GPU_MEMORY) -> SimulationResult:
    """Simulate one iteration of a pipelined, replicated plan.

    ``schedule``: "1f1b" (DAPPLE early backward: warm-up of S-s-1 forwards,
    then one forward / one backward, flush), "gpipe" (all forwards, then all
    backwards) or "pipedream" (1F1B without flush, iterations back to
    back: the iteration time is the steady-state period, measured on a run
    long enough that every op time repeats; weights are stashed once per
    micro-batch in flight; the timeline shows 3 + 2 ceil((S-1)/M)
    iterations, micro-batches numbered across iterations).  Transfers use one link per boundary and
    direction (``link_latency`` + bytes / ``link_bandwidth``, bytes/s) and
    overlap compute; a stage on n > 1 GPUs ends with a blocking ring
    all-reduce of 2 (n-1)/n ``param_bytes`` at ``allreduce_bandwidth``
    (default 25e9, HPGO's NVLink figure, whatever ``link_bandwidth`` is); a
    :class:`Stage` may override both bandwidths for itself.  Memory per GPU = weights + gradients +
    ``optimizer_factor`` x weights + activations in flight; ``fits`` compares its peak with
    ``gpu_memory`` (bytes, HPGO's 16 GB by default).
    """
    sched = _choice("schedule", schedule, SCHEDULES)
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Iterable):
        raise TypeError("stages must be a sequence of hpgo.Stage or mappings")
    raw_stages = [_as_stage(i, s) for i, s in enumerate(stages)]
    if not raw_stages:
        raise ValueError("a plan needs at least one stage")
    m = _check_int("microbatches", microbatches)
    lb = _check_num("link_bandwidth", link_bandwidth, positive=True)
    ll = _check_num("link_latency", link_latency)
    ab = _check_num("allreduce_bandwidth", allreduce_bandwidth, positive=True)
    of = _check_num("optimizer_factor", optimizer_factor)
    gm = _check_num("gpu_memory", gpu_memory, positive=True)
    raw = _core.sim_pipeline(raw_stages, m, sched, lb, ll, ab, of, bool(timeline))
    return SimulationResult(raw, batch_size=batch_size,
                            config={"engine": "pipeline", "schedule": schedule,
                                    "microbatches": m, "stages": len(raw_stages),
                                    "gpu_memory": gm})


def _plan_stages(plan: Any) -> list:
    if (isinstance(plan, tuple) and len(plan) == 2 and isinstance(plan[1], (list, tuple))
            and not isinstance(plan[0], (list, tuple))):
        plan = plan[1]  # HPGO's (speedup, stages)
    if isinstance(plan, (str, bytes)) or not isinstance(plan, Iterable):
        raise TypeError("plan must be HPGO's (speedup, [(a, b, units, gpus), ...]) or the stage list")
    out = list(plan)
    if not out:
        raise ValueError("the plan has no stages")
    for i, st in enumerate(out):
        if not isinstance(st, (tuple, list)) or len(st) != 4:
            raise TypeError(f"plan stage {i} must be (first_state, end_state, units, gpus)")
    return out


def _machines(seps: Any) -> list[int] | None:
    if seps is None:
        return None
    s = getattr(seps, "seps", seps)
    if isinstance(s, (str, bytes)) or not isinstance(s, Iterable):
        raise TypeError("seps must be a list of cumulative GPU counts (e.g. [8, 16]) or "
                        "hpgo.Devices")
    out = [_check_int("seps item", x) for x in s]
    if not out or any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"seps must be strictly increasing cumulative GPU counts, got {out}")
    return out


def simulate_plan(model: Any, plan: Any, rp: int | None = None, schedule: str = "1f1b", *,
                  seps: Any = None, forward_fraction: float = FORWARD_FRACTION,
                  link_bandwidth: float = HPGO_NVLINK_BW,
                  inter_machine_bandwidth: float = HPGO_ETHERNET_BW,
                  link_latency: float = 0.0, allreduce_bandwidth: float | None = None,
                  optimizer_factor: float = 2.0,
                  timeline: bool = True, gpu_memory: float = HPGO_GPU_MEMORY) -> SimulationResult:
    """Simulate a planner result on its model, priced as HPGO prices it.

    ``model`` needs HPGO's ``ct(r, c)`` (seconds of states r..c for the
    global batch on one GPU, row 0 = prefix), ``pa(r, c)`` (parameter
    bytes), ``oa(k)`` (bytes crossing the cut after state k, whole batch),
    ``gbs`` and ``min_micro_batch_size``; ``ac(r, c)`` (activation bytes)
    is used when present.  ``plan`` is
    HPGO's ``(speedup, [(a, b, units, gpus), ...])`` (or the list): stage s
    covers states a..b-1, the last one a..b.  ``rp`` (pipeline replicas)
    defaults to len(gpus) // units of the first stage.  With M = gbs // rp //
    mbs micro-batches, each GPU of a stage gets ct / (units rp M) seconds per
    micro-batch, split ``forward_fraction`` / rest into forward and backward
    (:data:`FORWARD_FRACTION` = 1/2 as HPGO's recursive model), and sends
    oa / (units rp M) bytes.

    Machines: ``seps`` (HPGO's cumulative GPU counts, e.g. [8, 16], or
    :class:`hpgo.Devices`; default: machines of
    :data:`HPGO_GPUS_PER_MACHINE` GPUs).  A boundary whose paired GPUs
    (GPU i of a stage with GPU i mod n of the next) sit on different
    machines runs at ``inter_machine_bandwidth`` (1e9, HPGO's Ethernet),
    otherwise at ``link_bandwidth`` (25e9, HPGO's NVLink).  A stage's
    all-reduce runs at ``allreduce_bandwidth`` when given, else as HPGO
    prices it: :data:`HPGO_ETHERNET_NCCL_BW` (3e9) when its GPUs span
    machines, ``link_bandwidth`` x (GPUs // 2) inside one machine.
    """
    stages = _plan_stages(plan)
    _check_cover(stages, model)
    ff = _check_num("forward_fraction", forward_fraction)
    if ff > 1:
        raise ValueError(f"forward_fraction must be in [0, 1], got {forward_fraction}")
    lb = _check_num("link_bandwidth", link_bandwidth, positive=True)
    xb = _check_num("inter_machine_bandwidth", inter_machine_bandwidth, positive=True)
    ab = None if allreduce_bandwidth is None else _check_num(
        "allreduce_bandwidth", allreduce_bandwidth, positive=True)
    machine_seps = _machines(seps)
    for attr in ("ct", "pa", "oa", "gbs"):
        if not hasattr(model, attr):
            raise TypeError(f"model has no {attr!r}: expected an hpgo.Model-like object")
    gbs = _check_int("model.gbs", model.gbs)
    mbs = getattr(model, "min_micro_batch_size", 1) or 1
    mbs = _check_int("model.min_micro_batch_size", mbs)
    if rp is None:
        a0, b0, u0, g0 = stages[0]
        u0 = _check_int("plan stage 0 units", u0)
        if len(g0) % u0:
            raise ValueError(f"plan stage 0 has {len(g0)} GPUs, not a multiple of its {u0} units")
        rp = len(g0) // u0
    rp = _check_int("rp", rp)
    m = gbs // rp // mbs
    if m == 0:
        raise ValueError(f"gbs // rp // mbs = {gbs} // {rp} // {mbs} = 0 micro-batches")

    def machine(g: int) -> int:
        if machine_seps is None:
            return g // HPGO_GPUS_PER_MACHINE
        return bisect.bisect_right(machine_seps, g)

    has_ac = callable(getattr(model, "ac", None))
    checked = []
    n = len(stages)
    for s, (a, b, units, gpus) in enumerate(stages):
        a = _check_int(f"plan stage {s} first state", a, 0)
        b = _check_int(f"plan stage {s} end state", b, 0)
        units = _check_int(f"plan stage {s} units", units)
        last = b if s == n - 1 else b - 1
        if last < a:
            raise ValueError(f"plan stage {s} covers no state ({a}..{last})")
        gpus = tuple(sorted(gpus))
        if len(gpus) != units * rp:
            raise ValueError(f"plan stage {s} has {len(gpus)} GPUs, expected units*rp = "
                             f"{units}*{rp}")
        if machine_seps is not None and gpus and gpus[-1] >= machine_seps[-1]:
            raise ValueError(f"plan stage {s} uses GPU {gpus[-1]}, outside seps "
                             f"{machine_seps} ({machine_seps[-1]} GPUs)")
        checked.append((a, last, units, gpus))
    out = []
    for s, (a, last, units, gpus) in enumerate(checked):
        share = units * rp * m
        ct = float(model.ct(a, last))
        if ct < 0:
            raise ValueError(f"model.ct({a}, {last}) is negative: not a valid state range")
        per_mb = ct / share
        link = None
        if s < n - 1:
            nxt = checked[s + 1][3]
            crosses = any(machine(g) != machine(nxt[i % len(nxt)]) for i, g in enumerate(gpus))
            link = xb if crosses else lb
        stage_ab = ab
        if stage_ab is None and len(gpus) > 1:
            spans = machine(gpus[0]) != machine(gpus[-1])
            stage_ab = HPGO_ETHERNET_NCCL_BW if spans else lb * (len(gpus) // 2)
        out.append(Stage(
            forward=per_mb * ff, backward=per_mb * (1.0 - ff),
            send_bytes=float(model.oa(last)) / share if s < n - 1 else 0.0,
            param_bytes=float(model.pa(a, last)),
            activation_bytes=float(model.ac(a, last)) / share if has_ac else 0.0,
            gpus=gpus, link_bandwidth=link, allreduce_bandwidth=stage_ab))
    res = simulate_pipeline(out, m, schedule, link_bandwidth=lb, link_latency=link_latency,
                            allreduce_bandwidth=lb if ab is None else ab,
                            optimizer_factor=optimizer_factor, timeline=timeline,
                            batch_size=rp * m * mbs, gpu_memory=gpu_memory)
    res.config.update({"engine": "plan", "rp": rp, "mbs": mbs})
    return res


# ---------------------------------------------------------------- DistIR study


def _distir_config(*, model: str, batch_size: Any, width: Any, layers: Any, dp: Any, tp: Any,
                   pp: Any, microbatches: Any, devices_bandwidth_gbps: Any, cost_model: Any,
                   schedule: Any, input_dim: Any = None, output_dim: Any = None,
                   seq_len: Any = None, heads: Any = None, device_flops: Any = None,
                   memory_bandwidth: Any = None, kernel_launch_overhead: Any = None,
                   dtype_bytes: Any = 4, timeline: Any = False) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "model": _choice("model", model, _MODELS),
        "cost_model": _choice("cost_model", cost_model, COST_MODELS),
        "schedule": _choice("schedule", schedule, {"1f1b": 0, "gpipe": 1}),
        "batch_size": _check_int("batch_size", batch_size),
        "width": _check_int("width", width),
        "layers": _check_int("layers", layers),
        "dp": _check_int("dp", dp),
        "tp": _check_int("tp", tp),
        "pp": _check_int("pp", pp),
        "microbatches": _check_int("microbatches", microbatches),
        "dtype_bytes": _check_int("dtype_bytes", dtype_bytes),
        "timeline": bool(timeline),
    }
    if cfg["model"] == _MODELS["mlp"]:
        if input_dim is not None:
            cfg["input_dim"] = _check_int("input_dim", input_dim)
        if output_dim is not None:
            cfg["output_dim"] = _check_int("output_dim", output_dim)
    else:
        cfg["seq_len"] = _check_int("seq_len", seq_len)
        cfg["heads"] = _check_int("heads", heads)
    for key, name, v in (("link_gbps", "devices_bandwidth_gbps", devices_bandwidth_gbps),
                         ("device_flops", "device_flops", device_flops),
                         ("memory_bandwidth", "memory_bandwidth", memory_bandwidth)):
        if v is not None:
            cfg[key] = _check_num(name, v, positive=True)
    if kernel_launch_overhead is not None:
        cfg["kernel_launch"] = _check_num("kernel_launch_overhead", kernel_launch_overhead)
    return cfg


_CONFIG_KEYS = frozenset(inspect.signature(_distir_config).parameters)


def _distir_result(raw: Any, cfg: Mapping[str, Any], names: Mapping[str, Any]) -> SimulationResult:
    return SimulationResult(raw, batch_size=cfg["batch_size"], config={"engine": "distir", **names})


def simulate_mlp(batch_size: int, width: int, layers: int, dp: int = 1, tp: int = 1,
                 pp: int = 1, microbatches: int = 1, devices_bandwidth_gbps: float | None = None,
                 cost_model: str = "distir-2021", *, schedule: str = "1f1b",
                 input_dim: int | None = None, output_dim: int | None = None,
                 device_flops: float | None = None, memory_bandwidth: float | None = None,
                 kernel_launch_overhead: float | None = None, dtype_bytes: int = 4,
                 timeline: bool = True) -> SimulationResult:
    """Simulate one training iteration of DistIR's MLP (``layers`` weight
    matrices ``width`` wide, ReLU, MSE loss, no biases) split into ``dp``
    replicas x ``tp`` Megatron shards x ``pp`` stages with ``microbatches``
    micro-batches, the way DistIR does it (see the module doc and README).

    Devices: 0 is the host holding the inputs, replica i / shard j / stage k
    is ``1 + i*tp*pp + j*pp + k``.  ``devices_bandwidth_gbps`` (Gbit/s
    between every pair), ``device_flops`` (FLOP/s), ``memory_bandwidth``
    (bytes/s) and ``kernel_launch_overhead`` (s) override the flavour's
    constants.  ``result.throughput`` is samples/s.
    """
    names = dict(model="mlp", batch_size=batch_size, width=width, layers=layers, dp=dp, tp=tp,
                 pp=pp, microbatches=microbatches, cost_model=cost_model, schedule=schedule)
    cfg = _distir_config(model="mlp", batch_size=batch_size, width=width, layers=layers, dp=dp,
                         tp=tp, pp=pp, microbatches=microbatches,
                         devices_bandwidth_gbps=devices_bandwidth_gbps, cost_model=cost_model,
                         schedule=schedule, input_dim=input_dim, output_dim=output_dim,
                         device_flops=device_flops, memory_bandwidth=memory_bandwidth,
                         kernel_launch_overhead=kernel_launch_overhead,
                         dtype_bytes=dtype_bytes, timeline=timeline)
    return _distir_result(_core.sim_distir(cfg), cfg, names)


def simulate_transformer(batch_size: int, seq_len: int, width: int, heads: int, layers: int,
                         dp: int = 1, tp: int = 1, pp: int = 1, microbatches: int = 1,
                         devices_bandwidth_gbps: float | None = None,
                         cost_model: str = "distir-2021", *, schedule: str = "1f1b",
                         device_flops: float | None = None,
                         memory_bandwidth: float | None = None,
                         kernel_launch_overhead: float | None = None, dtype_bytes: int = 4,
                         timeline: bool = True) -> SimulationResult:
    """Simulate a stack of ``layers`` transformer blocks (pre-norm attention
    with ``heads`` heads and a 4x MLP, ``width`` hidden, ``seq_len`` tokens
    per sequence, ``batch_size`` sequences) with the same D/H/P transform,
    cost flavours and semantics as :func:`simulate_mlp`; Megatron splits QKV
    and the first MLP matmul by columns, the projections by rows.
    ``result.throughput`` is sequences/s."""
    names = dict(model="transformer", batch_size=batch_size, seq_len=seq_len, width=width,
                 heads=heads, layers=layers, dp=dp, tp=tp, pp=pp, microbatches=microbatches,
                 cost_model=cost_model, schedule=schedule)
    cfg = _distir_config(model="transformer", batch_size=batch_size, width=width,
                         layers=layers, dp=dp, tp=tp, pp=pp, microbatches=microbatches,
                         devices_bandwidth_gbps=devices_bandwidth_gbps, cost_model=cost_model,
                         schedule=schedule, seq_len=seq_len, heads=heads,
                         device_flops=device_flops, memory_bandwidth=memory_bandwidth,
                         kernel_launch_overhead=kernel_launch_overhead,
                         dtype_bytes=dtype_bytes, timeline=timeline)
    return _distir_result(_core.sim_distir(cfg), cfg, names)


@dataclass(frozen=True)
class GridRow:
    """One simulated configuration: ``devices`` = dp*tp*pp, ``iteration_time``
    (s), ``throughput`` (samples/s, sequences/s for the transformer) and
    ``peak_memory`` (bytes, fullest device)."""

    devices: int
    dp: int
    tp: int
    pp: int
    microbatches: int
    iteration_time: float
    throughput: float
    peak_memory: float


def _rows(raw: list, batch_size: Iterable[int]) -> list[GridRow]:
    out = []
    for (d, h, p, k, t, mem), b in zip(raw, batch_size):
        out.append(GridRow(d * h * p, d, h, p, k, t, b / t if t > 0 else float("inf"), mem))
    return out


def simulate_mlp_batch(configs: Iterable[Mapping[str, Any]], *,
                       threads: int = 0, executor: Any = None,
                       chunksize: int | None = None) -> list[GridRow]:
    """Simulate many configurations at once (no timelines) on a thread pool.
    Each config holds :func:`simulate_mlp` keyword arguments, plus
    ``model="transformer"`` with ``seq_len`` / ``heads`` for the layer
    stack.  Rows come back in input order.  ``executor``: run chunks of
    ``chunksize`` configurations (default: about four per worker, at least
    256 each) as tasks of a concurrent.futures executor, a
    dask.distributed.Client or a multiprocessing-style pool, with the same
    rows (docs/distributed.md)."""
    threads = _check_int("threads", threads, 0)
    if executor is None and chunksize is not None:
        raise ValueError("chunksize= applies only with executor=")
    if isinstance(configs, (str, bytes, Mapping)) or not isinstance(configs, Iterable):
        raise TypeError("configs must be an iterable of mappings (simulate_mlp keyword "
                        f"arguments), not {type(configs).__name__}")
    cfgs, batches = [], []
    for i, c in enumerate(configs):
        if not isinstance(c, Mapping):
            raise TypeError(f"configuration {i} must be a mapping, not {type(c).__name__}")
        missing = [k for k in ("batch_size", "width", "layers") if k not in c]
        if missing:
            raise TypeError(f"configuration {i} lacks {', '.join(missing)}")
        kw = {"dp": 1, "tp": 1, "pp": 1, "microbatches": 1, "devices_bandwidth_gbps": None,
              "cost_model": "distir-2021", "schedule": "1f1b", "model": "mlp"}
        kw.update(c)
        kw.pop("timeline", None)
        unknown = sorted(k for k in kw if k not in _CONFIG_KEYS)
        if unknown:
            raise TypeError(f"configuration {i} has unknown keys {unknown}")
        try:
            cfgs.append(_distir_config(**kw))
        except TypeError as e:
            raise TypeError(f"configuration {i}: {e}") from None
        except ValueError as e:
            raise ValueError(f"configuration {i}: {e}") from None
        batches.append(cfgs[-1]["batch_size"])
    if executor is not None and cfgs:
        from . import distributed as _dist

        _dist.check_executor(executor)
        size = _dist.check_chunksize(chunksize) or _dist.default_chunksize(len(cfgs), executor,
                                                                           256)
        parts = _dist.run(executor, _dist.batch_task,
                          [(cfgs[a:b], threads, a) for a, b in _dist.chunks(len(cfgs), size)],
                          what="simulate_mlp_batch")
        return _rows([r for p in parts for r in p], batches)
    return _rows(_core.distir_batch(cfgs, threads), batches)


def grid_search(batch_size: int, width: int, layers: int,
                devices: Sequence[int] = (1, 2, 4, 8, 16),
                microbatches: Sequence[int] | None = None, cost_model: str = "distir-2021",
                *, model: str = "mlp", seq_len: int | None = None, heads: int | None = None,
                devices_bandwidth_gbps: float | None = None, schedule: str = "1f1b",
                input_dim: int | None = None, output_dim: int | None = None,
                device_flops: float | None = None, memory_bandwidth: float | None = None,
                kernel_launch_overhead: float | None = None, dtype_bytes: int = 4,
                threads: int = 0, progress: bool | None = None, executor: Any = None,
                chunksize: int | None = None) -> list[GridRow]:
    """DistIR's grid search: for each device count W in ``devices``, every
    (dp, tp, pp) with dp*tp*pp = W (dp, then tp ascending) whose pp divides
    ``layers`` and whose shapes divide evenly, with microbatches = 1 when
    pp = 1 and otherwise each of ``microbatches`` (default: DistIR's rule,
    2^1 .. 2^(floor(log2(batch/dp)/2)-1) for the 2021 flavours, 2..128 for
    "distir-2022").  Rows come back in that order; each equals a direct
    :func:`simulate_mlp` / :func:`simulate_transformer` run.  ``progress``:
    a progress line on stderr (True), never (False) or only in a terminal or
    Jupyter kernel (None); it runs one pooled call per device count, with
    the same rows.  ``executor``: run chunks of ``chunksize`` device counts
    (default: about four tasks per worker) as tasks of a concurrent.futures
    executor, a dask.distributed.Client or a multiprocessing-style pool,
    with the same rows in the same order (docs/distributed.md)."""
    if isinstance(devices, int) or not isinstance(devices, Iterable):
        raise TypeError("devices must be a sequence of device counts")
    ws = [_check_int("device count", w) for w in devices]
    mbs = None
    if microbatches is not None:
        if isinstance(microbatches, int) or not isinstance(microbatches, Iterable):
            raise TypeError("microbatches must be a sequence of ints or None")
        mbs = [_check_int("microbatches", k) for k in microbatches]
    threads = _check_int("threads", threads, 0)
    if executor is None and chunksize is not None:
        raise ValueError("chunksize= applies only with executor=")
    base = _distir_config(model=model, batch_size=batch_size, width=width, layers=layers, dp=1,
                          tp=1, pp=1, microbatches=1,
                          devices_bandwidth_gbps=devices_bandwidth_gbps, cost_model=cost_model,
                          schedule=schedule, input_dim=input_dim, output_dim=output_dim,
                          seq_len=seq_len, heads=heads, device_flops=device_flops,
                          memory_bandwidth=memory_bandwidth,
                          kernel_launch_overhead=kernel_launch_overhead,
                          dtype_bytes=dtype_bytes)
    from . import progress as _progress

    if executor is not None and ws:
        from . import distributed as _dist

        _dist.check_executor(executor)
        size = _dist.check_chunksize(chunksize) or _dist.default_chunksize(len(ws), executor, 1)
        spans = _dist.chunks(len(ws), size)
        gbar = None
        if ws and _progress.wanted(progress):
            gbar = _progress.Progress(len(ws), desc="grid search", unit="device counts",
                                      delay=0.0 if progress else 0.5)
            gbar.update(0)
        try:
            parts = _dist.run(executor, _dist.grid_task,
                              [(base, ws[a:b], mbs, threads) for a, b in spans],
                              what="grid_search",
                              done=None if gbar is None else _dist.gbar_done(gbar, spans))
        finally:
            if gbar is not None:
                gbar.close()
        raw = [r for p in parts for r in p]
    elif ws and _progress.wanted(progress):
        bar = _progress.Progress(len(ws), desc="grid search", unit="device counts",
                                 delay=0.0 if progress else 0.5)
        bar.update(0)
        raw = []
        try:
            for i, w in enumerate(ws):
                raw.extend(_core.distir_grid(base, [w], mbs, threads))
                bar.update(i + 1)
        finally:
            bar.close()
    else:
        raw = _core.distir_grid(base, ws, mbs, threads)
    return _rows(raw, [base["batch_size"]] * len(raw))


@dataclass(frozen=True)
class Figure3:
    """DistIR's Figure 3 study: speedups over one device of data
    parallelism (``dp[batch]`` over ``devices``) and pipeline parallelism
    (``pp[microbatches]`` over ``devices``, batch ``pp_batch``)."""

    devices: tuple[int, ...]
    dp: dict[int, tuple[float, ...]]
    pp: dict[int, tuple[float, ...]]
    pp_batch: int
    sequential: dict[int, float]

    def table(self) -> str:
        head = "".join(f"{d:>10}" for d in self.devices)
        lines = [f"Data parallel speedup (rows: batch size; columns: devices)",
                 f"{'batch':>8}{head}"]
        for b, row in self.dp.items():
            lines.append(f"{b:>8}" + "".join(f"{v:>10.4f}" for v in row))
        lines.append("")
        lines.append(f"Pipeline parallel speedup, batch {self.pp_batch} "
                     f"(rows: micro-batches; columns: devices)")
        lines.append(f"{'K':>8}{head}")
        for k, row in self.pp.items():
            lines.append(f"{k:>8}" + "".join(f"{v:>10.4f}" for v in row))
        return "\n".join(lines)


def distir_figure3(cost_model: str = "distir-2021", *, width: int = 4096, layers: int = 64,
                   devices: Sequence[int] = (2, 4, 8, 16, 32),
                   dp_batches: Sequence[int] = (512, 1024, 2048, 4096), pp_batch: int = 4096,
                   pp_microbatches: Sequence[int] = (4, 8, 16, 32),
                   devices_bandwidth_gbps: float | None = None,
                   threads: int = 0) -> Figure3:
    """Reproduce DistIR's Figure 3 (EuroMLSys'21): a 64-layer, 4096-wide
    MLP; data parallelism at batch 512-4096 on 2-32 devices and pipeline
    parallelism at batch 4096 with 4-32 micro-batches.  Speedup = the
    untransformed one-device time / the distributed time.  All points run in
    one pooled batch."""
    seqs = {}
    for name, seq in (("devices", devices), ("dp_batches", dp_batches),
                      ("pp_microbatches", pp_microbatches)):
        if isinstance(seq, (str, bytes)) or not isinstance(seq, Iterable):
            raise TypeError(f"{name} must be a sequence of ints")
        # read once: a generator would be empty the second time
        seqs[name] = [_check_int(name[:-1] if name.endswith("s") else name, v) for v in seq]
    devices, dp_batches, pp_microbatches = (seqs["devices"], seqs["dp_batches"],
                                            seqs["pp_microbatches"])
    pp_batch = _check_int("pp_batch", pp_batch)
    common = {"width": width, "layers": layers, "cost_model": cost_model,
              "devices_bandwidth_gbps": devices_bandwidth_gbps}
    batches = sorted(set(dp_batches) | {pp_batch})
    cfgs = [dict(common, batch_size=b) for b in batches]
    cfgs += [dict(common, batch_size=b, dp=n) for b in dp_batches for n in devices]
    cfgs += [dict(common, batch_size=pp_batch, pp=n, microbatches=k)
             for k in pp_microbatches for n in devices]
    rows = simulate_mlp_batch(cfgs, threads=threads)
    seq = {b: r.iteration_time for b, r in zip(batches, rows)}
    it = iter(rows[len(batches):])
    dp = {b: tuple(seq[b] / next(it).iteration_time for _ in devices) for b in dp_batches}
    pp = {k: tuple(seq[pp_batch] / next(it).iteration_time for _ in devices)
          for k in pp_microbatches}
    return Figure3(tuple(devices), dp, pp, pp_batch, seq)
