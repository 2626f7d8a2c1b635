"""Planner results as readable, shareable records.

HPGO's planner answers with a tuple of tuples, ``(speedup, [(a, b, units,
[gpu ids]), ...])``, where stage s covers layer states a..b-1 except the last
stage, which covers a..b.  :class:`Plan` turns that (or a
:class:`hpgo.Candidate`) into a frozen record with one :class:`PlanStage`
per stage (inclusive state range, layer names, GPUs, machines, compute time
and parameter bytes), prints as a table, converts to dicts / JSON / pandas,
saves to and loads from JSON and converts back to HPGO's tuple exactly.
:class:`PlanList` holds a candidate list (one Plan per candidate).

Nothing here imports pandas until ``to_pandas()`` is called.
"""
from __future__ import annotations

import bisect
import json
import math
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _args, _core, _files

if TYPE_CHECKING:
    from .sim import SimulationResult

__all__ = [
    "PLAN_FORMAT",
    "STAGE_COLORS",
    "PlanStage",
    "Plan",
    "PlanList",
    "best_plan",
    "candidate_plans",
    "machine_of",
]

#: Value of the ``"format"`` key of a saved plan.
PLAN_FORMAT = "hpgo-plan/1"

#: Stage colours shared by the plan diagram, the Gantt chart and the DOT
#: export (stage s gets ``STAGE_COLORS[s % len(STAGE_COLORS)]``).
STAGE_COLORS = (
    "#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69",
    "#fccde5", "#ffed6f", "#bc80bd", "#ccebc5", "#d9d9d9", "#ffffb3",
)

HpgoStage = Tuple[int, int, int, List[int]]
HpgoPlan = Tuple[float, List[HpgoStage]]
PathLike = Union[str, "os.PathLike[str]"]


def machine_of(gpu: int, seps: Sequence[int]) -> int:
    """Index of the machine holding ``gpu`` when machine k ends before GPU
    ``seps[k]`` (HPGO's cumulative separators, e.g. [8, 16])."""
    return bisect.bisect_right(list(seps), gpu)


@dataclass(frozen=True)
class PlanStage:
    """One pipeline stage.

    ``first_state`` .. ``last_state`` (both inclusive) are indices of the
    model's layer states, ``units`` is HPGO's third tuple element (GPUs per
    replica for DP plans, the GPU count for the bipartition plan), ``gpus``
    the stage's GPU ids over all replicas, ``machines`` the machine of each
    of those GPUs (empty when the layout is unknown).  ``compute_time`` is
    the stage's seconds for the whole global batch on one GPU and
    ``parameter_bytes`` its weights (None when no model was given);
    ``first_layer`` / ``last_layer`` name its first and last state.
    """

    index: int
    first_state: int
    last_state: int
    units: int
    gpus: Tuple[int, ...]
    machines: Tuple[int, ...] = ()
    first_layer: Optional[str] = None
    last_layer: Optional[str] = None
    compute_time: Optional[float] = None
    parameter_bytes: Optional[float] = None

    @property
    def num_states(self) -> int:
        return self.last_state - self.first_state + 1

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "first_state": self.first_state,
            "last_state": self.last_state,
            "units": self.units,
            "gpus": list(self.gpus),
            "machines": list(self.machines),
            "first_layer": self.first_layer,
            "last_layer": self.last_layer,
            "compute_time": self.compute_time,
            "parameter_bytes": self.parameter_bytes,
        }


def _int(name: str, v: Any, minimum: int = 0) -> int:
    return _args.index(name, v, minimum)


def _float(name: str, v: Any) -> float:
    f = _args.real(name, v)
    if math.isnan(f):
        raise ValueError(f"{name} must not be NaN")
    return f


def _opt_float(name: str, v: Any) -> Optional[float]:
    return None if v is None else _float(name, v)


def _opt_str(name: str, v: Any) -> Optional[str]:
    if v is not None and not isinstance(v, str):
        raise TypeError(f"{name} must be a str or None, not {type(v).__name__}")
    return v


def _check_tiling(stages: Sequence["PlanStage"], num_states: Any) -> None:
    """Stages must cover states 0..num_states-1 in order, each starting right
    after the previous one: an overlapping, gapped or out-of-range plan would
    load without complaint and price some other model."""
    expect = 0
    for s in stages:
        if s.first_state < expect:
            raise ValueError(f"stage {s.index} starts at state {s.first_state}, inside the "
                             f"previous stage (which ends at {expect - 1}): stages overlap")
        if s.first_state > expect:
            raise ValueError(f"stage {s.index} starts at state {s.first_state}: states "
                             f"{expect}..{s.first_state - 1} are in no stage")
        expect = s.last_state + 1
    if isinstance(num_states, int) and not isinstance(num_states, bool) and expect != num_states:
        raise ValueError(f"the stages cover states 0..{expect - 1} but num_states is "
                         f"{num_states}")


def _layer_name(model: Any, k: int) -> Optional[str]:
    layers = getattr(model, "layers", None)
    if layers is None or not (0 <= k < len(layers)):
        return None
    lay = layers[k]
    return getattr(lay, "name", None) or getattr(lay, "desc", None)


@dataclass(frozen=True)
class Plan:
    """A hybrid data / pipeline parallel plan.

    ``speedup`` over one GPU (HPGO's analytical score), ``stages``
    (:class:`PlanStage`, pipeline order), ``rp`` pipeline replicas, the
    candidate's ``label`` ("straight i=2", "bipartition", ...) and
    ``block_time`` (s) when known, and what it was planned for: ``profile``
    path, ``pbs``, ``gbs``, ``seps``, ``num_states``.
    """

    speedup: float
    stages: Tuple[PlanStage, ...]
    rp: int
    label: Optional[str] = None
    block_time: Optional[float] = None
    profile: Optional[str] = None
    pbs: Optional[int] = None
    gbs: Optional[int] = None
    seps: Optional[Tuple[int, ...]] = None
    num_states: Optional[int] = None
    min_micro_batch_size: Optional[int] = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ------------------------------------------------------------ building

    @classmethod
    def from_hpgo(cls, result: Any, model: Any = None, devices: Any = None, *,
                  rp: Optional[int] = None, label: Optional[str] = None,
                  block_time: Optional[float] = None,
                  profile: Optional[PathLike] = None) -> "Plan":
        """Build a Plan from HPGO's ``(speedup, [(a, b, units, gpus), ...])``.

        ``model`` (an :class:`hpgo.Model`) adds layer names, compute times,
        parameter bytes, batch sizes and the state count; ``devices`` (an
        :class:`hpgo.Devices` or its seps list) adds machines.  ``rp``
        defaults to len(gpus) // units of the first stage.
        """
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise TypeError("result must be HPGO's (speedup, [(a, b, units, gpus), ...])")
        speedup = _float("speedup", result[0])
        raw = result[1]
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
            raise TypeError("the plan's stages must be a list of (a, b, units, gpus)")
        raw = list(raw)
        if not raw:
            raise ValueError("the plan has no stages")
        seps: Optional[Tuple[int, ...]] = None
        if devices is not None:
            s = getattr(devices, "seps", devices)
            if isinstance(s, (str, bytes)) or not isinstance(s, Iterable):
                raise TypeError("devices must be hpgo.Devices or a list of seps")
            seps = tuple(_int("seps item", x, 1) for x in s)
        n = len(raw)
        stages = []
        for i, st in enumerate(raw):
            if not isinstance(st, (tuple, list)) or len(st) != 4:
                raise TypeError(f"stage {i} must be (first_state, end_state, units, gpus)")
            a = _int(f"stage {i} first state", st[0])
            b = _int(f"stage {i} end state", st[1])
            u = _int(f"stage {i} units", st[2], 1)
            g = st[3]
            if isinstance(g, (str, bytes)) or not isinstance(g, Iterable):
                raise TypeError(f"stage {i} GPUs must be a list of ints")
            gpus = tuple(sorted(_int(f"stage {i} GPU id", x) for x in g))
            last = b if i == n - 1 else b - 1
            if last < a:
                raise ValueError(f"stage {i} covers no state ({a}..{last})")
            ct = pa = None
            if model is not None:
                ct = float(model.ct(a, last))
                pa = float(model.pa(a, last)) if hasattr(model, "pa") else None
            stages.append(PlanStage(
                index=i, first_state=a, last_state=last, units=u, gpus=gpus,
                machines=tuple(machine_of(x, seps) for x in gpus) if seps else (),
                first_layer=_layer_name(model, a), last_layer=_layer_name(model, last),
                compute_time=ct, parameter_bytes=pa))
        if rp is None:
            s0 = stages[0]
            rp = max(1, s0.num_gpus // s0.units)
        rp = _int("rp", rp, 1)
        return cls(
            speedup=speedup, stages=tuple(stages), rp=rp, label=_opt_str("label", label),
            block_time=_opt_float("block_time", block_time),
            profile=None if profile is None else os.fspath(profile),
            pbs=getattr(model, "pbs", None), gbs=getattr(model, "gbs", None), seps=seps,
            num_states=getattr(model, "num_layers", None),
            min_micro_batch_size=getattr(model, "min_micro_batch_size", None))

    @classmethod
    def from_candidate(cls, candidate: Any, model: Any = None, devices: Any = None, *,
                       profile: Optional[PathLike] = None) -> "Plan":
        """Build a Plan from one :class:`hpgo.Candidate` of ``AsyncOrchestrate.res``."""
        for attr in ("speedup", "stages", "rp"):
            if not hasattr(candidate, attr):
                raise TypeError(f"candidate has no {attr!r}: expected an hpgo.Candidate")
        return cls.from_hpgo((candidate.speedup, candidate.stages), model, devices,
                             rp=candidate.rp, label=getattr(candidate, "label", None),
                             block_time=getattr(candidate, "block_time", None), profile=profile)

    # ------------------------------------------------------------ views

    @property
    def num_gpus(self) -> int:
        return len({g for s in self.stages for g in s.gpus})

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def to_hpgo(self) -> HpgoPlan:
        """HPGO's tuple: ``(speedup, [(a, b, units, [gpus]), ...])`` with b
        exclusive except for the last stage (exactly what py_orchestrate
        returned)."""
        n = len(self.stages)
        out = []
        for s in self.stages:
            b = s.last_state if s.index == n - 1 else s.last_state + 1
            out.append((s.first_state, b, s.units, list(s.gpus)))
        return (self.speedup, out)

    def to_dict(self) -> dict:
        """Plain JSON-able dict (``"format": "hpgo-plan/1"``)."""
        return {
            "format": PLAN_FORMAT,
            "speedup": self.speedup,
            "rp": self.rp,
            "label": self.label,
            "block_time": self.block_time,
            "profile": self.profile,
            "pbs": self.pbs,
            "gbs": self.gbs,
            "seps": None if self.seps is None else list(self.seps),
            "num_states": self.num_states,
            "min_micro_batch_size": self.min_micro_batch_size,
            "stages": [s.to_dict() for s in self.stages],
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: PathLike) -> None:
        """Write the plan as JSON (UTF-8), atomically: on any error the file
        that was there is left as it was."""
        _files.atomic_write(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        """Inverse of :meth:`to_dict`; ValueError / TypeError name the bad key."""
        if not isinstance(d, Mapping):
            raise TypeError(f"a plan must be a JSON object, not {type(d).__name__}")
        fmt = d.get("format")
        if fmt != PLAN_FORMAT:
            raise ValueError(f"not an hpgo plan: format is {fmt!r}, expected {PLAN_FORMAT!r}")
        for key in ("speedup", "rp", "stages"):
            if key not in d:
                raise ValueError(f"plan has no {key!r}")
        raw = d["stages"]
        if not isinstance(raw, list) or not raw:
            raise ValueError("plan 'stages' must be a non-empty list")
        stages = []
        for i, s in enumerate(raw):
            if not isinstance(s, Mapping):
                raise TypeError(f"stage {i} must be an object")
            try:
                a = _int(f"stage {i} first_state", s["first_state"])
                last = _int(f"stage {i} last_state", s["last_state"])
                u = _int(f"stage {i} units", s["units"], 1)
                gpus = s["gpus"]
            except KeyError as e:
                raise ValueError(f"stage {i} has no {e.args[0]!r}") from None
            if last < a:
                raise ValueError(f"stage {i} covers no state ({a}..{last})")
            if not isinstance(gpus, list) or not gpus:
                raise ValueError(f"stage {i} 'gpus' must be a non-empty list")
            machines = s.get("machines") or []
            if not isinstance(machines, list):
                raise TypeError(f"stage {i} 'machines' must be a list")
            stages.append(PlanStage(
                index=i, first_state=a, last_state=last, units=u,
                gpus=tuple(_int(f"stage {i} GPU id", g) for g in gpus),
                machines=tuple(_int(f"stage {i} machine", m) for m in machines),
                first_layer=_opt_str(f"stage {i} first_layer", s.get("first_layer")),
                last_layer=_opt_str(f"stage {i} last_layer", s.get("last_layer")),
                compute_time=_opt_float(f"stage {i} compute_time", s.get("compute_time")),
                parameter_bytes=_opt_float(f"stage {i} parameter_bytes",
                                           s.get("parameter_bytes"))))
        _check_tiling(stages, d.get("num_states"))
        seps = d.get("seps")
        if seps is not None and not isinstance(seps, list):
            raise TypeError("plan 'seps' must be a list")
        extra = d.get("extra") or {}
        if not isinstance(extra, Mapping):
            raise TypeError("plan 'extra' must be an object")

        def opt_int(key: str, minimum: int = 1) -> Optional[int]:
            v = d.get(key)
            return None if v is None else _int(key, v, minimum)

        return cls(
            speedup=_float("speedup", d["speedup"]), stages=tuple(stages),
            rp=_int("rp", d["rp"], 1), label=_opt_str("label", d.get("label")),
            block_time=_opt_float("block_time", d.get("block_time")),
            profile=_opt_str("profile", d.get("profile")), pbs=opt_int("pbs"),
            gbs=opt_int("gbs"),
            seps=None if seps is None else tuple(_int("seps item", x, 1) for x in seps),
            num_states=opt_int("num_states"),
            min_micro_batch_size=opt_int("min_micro_batch_size"), extra=dict(extra))

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"line {e.lineno}: invalid JSON: {e.msg}") from None
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        return cls.from_dict(d)

    @classmethod
    def load(cls, path: PathLike) -> "Plan":
        """Read a plan written by :meth:`save`; errors name the file."""
        text = _files.read_text(path, "plan file")
        try:
            return cls.from_json(text)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{os.fspath(path)}: {e}") from None

    def stage_rows(self) -> List[dict]:
        """One flat dict per stage (the rows of :meth:`to_pandas`)."""
        rows = []
        for s in self.stages:
            rows.append({
                "stage": s.index,
                "first_state": s.first_state,
                "last_state": s.last_state,
                "states": s.num_states,
                "first_layer": s.first_layer,
                "last_layer": s.last_layer,
                "units": s.units,
                "gpus": s.num_gpus,
                "gpu_ids": _ranges(s.gpus),
                "machines": _ranges(sorted(set(s.machines))) if s.machines else None,
                "compute_time": s.compute_time,
                "parameter_bytes": s.parameter_bytes,
            })
        return rows

    def to_pandas(self):
        """The stages as a pandas DataFrame (needs pandas, an optional extra)."""
        return _pandas().DataFrame(self.stage_rows())

    def _summary(self) -> str:
        return (f"speedup {self.speedup:.4f} over 1 GPU, {self.num_stages} stage"
                f"{'s' if self.num_stages != 1 else ''}, {self.rp} pipeline replica"
                f"{'s' if self.rp != 1 else ''}, {self.num_gpus} GPUs"
                + (f" ({self.label})" if self.label else ""))

    def _context(self) -> List[str]:
        what = []
        if self.profile:
            what.append(f"profile {self.profile}")
        if self.pbs is not None:
            what.append(f"pbs {self.pbs}")
        if self.gbs is not None:
            what.append(f"gbs {self.gbs}")
        if self.seps is not None:
            what.append("seps " + ",".join(map(str, self.seps)))
        if self.block_time is not None:
            what.append(f"block {self.block_time * 1e3:.3f} ms")
        return what

    _COLUMNS = ["stage", "states", "layers", "units", "GPUs", "machines", "compute s", "params MB"]

    def _body(self) -> List[List[str]]:
        body = []
        for r in self.stage_rows():
            layers = ""
            if r["first_layer"] is not None:
                layers = r["first_layer"] if r["states"] == 1 else f"{r['first_layer']} .. {r['last_layer']}"
            body.append([
                str(r["stage"]), f"{r['first_state']}-{r['last_state']}", _clip(layers, 40),
                str(r["units"]), f"{r['gpus']}: {r['gpu_ids']}", r["machines"] or "",
                "" if r["compute_time"] is None else f"{r['compute_time']:.4f}",
                "" if r["parameter_bytes"] is None else f"{r['parameter_bytes'] / 1e6:.1f}",
            ])
        return body

    def table(self, model: Any = None) -> str:
        """The plan as a readable text table; given the ``model`` it was made
        for, with a line saying whether it fits (its peak memory under
        DAPPLE's 1F1B schedule, :meth:`simulate`)."""
        head = ["plan: " + self._summary()]
        what = self._context()
        if what:
            head.append("      " + ", ".join(what))
        if model is not None:
            r = self._memory(model)
            head.append(f"      memory: peak {r.peak_memory / 2**30:.2f} of "
                        f"{r.gpu_memory / 2**30:.2f} GiB on a GPU under 1F1B with "
                        f"{r.config['microbatches']} micro-batches "
                        f"({'fits' if r.fits else 'DOES NOT FIT'})")
        note = ["", "compute s: the stage's layers for the whole global batch on one GPU, as "
                    "profiled;",
                "block: the slowest pipeline element for one replica's share of the batch "
                "(docs/concepts.md)"]
        return "\n".join(head + [""] + _format_table(self._COLUMNS, self._body()) + note)

    def _memory(self, model: Any) -> "SimulationResult":
        """This plan under DAPPLE's 1F1B on the ``model`` it was made for: its
        peak memory and whether it fits.  A model of another profile or at
        another global batch is refused (its memory would not be this plan's)."""
        self.check_model(model)   # another profile first: the more basic mismatch
        if self.gbs is not None and getattr(model, "gbs", self.gbs) != self.gbs:
            raise ValueError(f"the plan is for global batch {self.gbs}, the model is at "
                             f"{model.gbs}: its memory would not be this plan's")
        return self.simulate(model, "1f1b")

    def __repr__(self) -> str:
        where = ", ".join(w for w in self._context() if not w.startswith("profile "))
        return (f"<hpgo.Plan {self._summary()}" + (f"; {where}" if where else "") + ">")

    def _repr_html_(self) -> str:
        from ._display import html_table

        cap = "Plan: " + self._summary()
        what = self._context()
        if what:
            cap += "; " + ", ".join(what)
        return html_table(self._COLUMNS, self._body(), caption=cap)

    def check_model(self, model: Any) -> None:
        """ValueError unless ``model`` has the layer states this plan was
        made for (its state count, and the last stage ending at the last
        state): a plan of another profile is refused, not simulated."""
        n = getattr(model, "num_layers", None)
        if n is None:
            return
        last = self.stages[-1].last_state
        if self.num_states is not None and self.num_states != n:
            raise ValueError(f"the plan was made for a profile of {self.num_states} layer states "
                             f"but the model has {n}: it belongs to another profile")
        if last != n - 1:
            raise ValueError(f"the plan covers states 0..{last} but the model has {n} "
                             "(0..{}): it belongs to another profile".format(n - 1))

    def simulate(self, model: Any, schedule: str = "1f1b", **kwargs: Any) -> "SimulationResult":
        """Simulate this plan on ``model`` (:func:`hpgo.simulate_plan` with
        this plan's ``rp`` and, when known, its ``seps``); keyword arguments
        go to simulate_plan.  A model of another profile (other state count)
        is refused with ValueError."""
        from .sim import simulate_plan

        self.check_model(model)
        if self.seps is not None:
            kwargs.setdefault("seps", list(self.seps))

        return simulate_plan(model, self.to_hpgo(), rp=self.rp, schedule=schedule, **kwargs)

    def __str__(self) -> str:
        return self.table()


class PlanList(List[Plan]):
    """A list of :class:`Plan` (e.g. every candidate of one orchestration)
    with table conversions.  :meth:`best` picks the highest speedup, the
    last one on ties (HPGO's rule)."""

    def best(self) -> Plan:
        if not self:
            raise ValueError("no plan in the list")
        best = self[0]
        for p in self[1:]:
            if p.speedup >= best.speedup:
                best = p
        return best

    def rows(self) -> List[dict]:
        out = []
        for i, p in enumerate(self):
            out.append({
                "candidate": i,
                "label": p.label,
                "speedup": p.speedup,
                "rp": p.rp,
                "stages": p.num_stages,
                "gpus": p.num_gpus,
                "block_time": p.block_time,
                "cuts": ",".join(str(s.first_state) for s in p.stages[1:]),
            })
        return out

    def to_dicts(self) -> List[dict]:
        return [p.to_dict() for p in self]

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dicts(), indent=indent)

    def to_pandas(self):
        """One row per plan (label, speedup, rp, stages, GPUs, block time, cuts)."""
        return _pandas().DataFrame(self.rows())

    _COLUMNS = ["#", "label", "speedup", "rp", "stages", "GPUs", "block ms", "cuts"]

    def _body(self) -> List[List[str]]:
        return [[str(r["candidate"]), r["label"] or "", f"{r['speedup']:.4f}", str(r["rp"]),
                 str(r["stages"]), str(r["gpus"]),
                 "" if r["block_time"] is None else f"{r['block_time'] * 1e3:.3f}",
                 _clip(r["cuts"], 40)] for r in self.rows()]

    def table(self, model: Any = None) -> str:
        """The plans as a text table; given the ``model`` they were made for,
        with each one's peak memory on a GPU under DAPPLE's 1F1B schedule and
        whether it fits (:meth:`Plan._memory`)."""
        if model is None:
            return "\n".join(_format_table(self._COLUMNS, self._body()))
        sims = [p._memory(model) for p in self]
        body = [row + [f"{r.peak_memory / 2**30:.2f}", "yes" if r.fits else "NO"]
                for row, r in zip(self._body(), sims)]
        return "\n".join(_format_table(self._COLUMNS + ["GiB", "fits"], body))

    def _summary(self) -> str:
        n = len(self)
        if not n:
            return "no plans"
        b = self.best()
        return (f"{n} plan{'s' if n != 1 else ''}; best: speedup {b.speedup:.4f}"
                + (f" ({b.label})" if b.label else "") + f", candidate {max(i for i, p in enumerate(self) if p is b)}")

    def __repr__(self) -> str:
        return f"<hpgo.PlanList {self._summary()}>"

    def __str__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        from ._display import html_table

        return html_table(self._COLUMNS, self._body(), caption="PlanList: " + self._summary())


def _model(profile: Any, pbs: int, gbs: int, min_micro_batch_size: Optional[int],
           optimizer_memory_scaling: Optional[int],
           peak_activation_per_batch: Optional[float]) -> Tuple[Any, Optional[str]]:
    if isinstance(profile, _core.Model):
        m = profile.normalized_copy(gbs)   # never modify the caller's model
        path = None
    else:
        path = os.fspath(profile)
        m = _core.model_from_torch_graph(path, pbs, gbs)
    if min_micro_batch_size is not None:
        m.min_micro_batch_size = min_micro_batch_size
    if optimizer_memory_scaling is not None:
        m.optimizer_memory_scaling = optimizer_memory_scaling
    if peak_activation_per_batch is not None:
        m.peak_activation_per_batch = peak_activation_per_batch
    return m, path


def _devices(seps: Any) -> Any:
    if isinstance(seps, _core.Devices):
        return seps
    if isinstance(seps, (str, bytes)) or not isinstance(seps, Iterable):
        raise TypeError("seps must be a list of ints or hpgo.Devices")
    return _core.devices_from_seps(list(seps))


def candidate_plans(profile: Union[PathLike, Any], pbs: int, gbs: int, seps: Any, *,
                    min_micro_batch_size: Optional[int] = None,
                    optimizer_memory_scaling: Optional[int] = None,
                    peak_activation_per_batch: Optional[float] = None,
                    threads: int = 0, timeout: Optional[float] = None) -> PlanList:
    """Every candidate of one orchestration (HPGO's ``res``, in its order)
    as a :class:`PlanList`.  ``profile``: a graph.txt path or an
    :class:`hpgo.Model` (copied, never modified); ``seps``: [8, 16] or
    :class:`hpgo.Devices`; ``timeout``: seconds the planning may take
    (``TimeoutError`` past it; None = no limit)."""
    m, path = _model(profile, pbs, gbs, min_micro_batch_size, optimizer_memory_scaling,
                     peak_activation_per_batch)
    d = _devices(seps)
    ao = _core.AsyncOrchestrate(m, d, threads=threads, timeout=timeout)
    ao.orchestrate()
    extra = {"skipped": [list(s) for s in ao.skipped]} if ao.skipped else {}
    return PlanList(replace(Plan.from_candidate(c, m, d, profile=path), extra=extra)
                    for c in ao.res)


def best_plan(profile: Union[PathLike, Any], pbs: int, gbs: int, seps: Any, *,
              min_micro_batch_size: Optional[int] = None,
              optimizer_memory_scaling: Optional[int] = None,
              peak_activation_per_batch: Optional[float] = None, threads: int = 0,
              timeout: Optional[float] = None) -> Plan:
    """The plan ``py_orchestrate()`` returns, as a :class:`Plan` (with its
    candidate's label, rp and block time).  Raises
    :class:`hpgo.PlanningError` when no candidate exists."""
    plans = candidate_plans(profile, pbs, gbs, seps, min_micro_batch_size=min_micro_batch_size,
                            optimizer_memory_scaling=optimizer_memory_scaling,
                            peak_activation_per_batch=peak_activation_per_batch, threads=threads,
                            timeout=timeout)
    if not plans:
        raise _core.PlanningError(f"no candidate plan for gbs {gbs} on seps {list(_devices(seps).seps)}")
    return plans.best()


# ------------------------------------------------------------ helpers


def _pandas():
    try:
        import pandas as pd
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("to_pandas() needs pandas: pip install -e '.[pandas]' from the "
                          "hpgo clone") from e
    return pd


def _ranges(ids: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    xs = sorted(ids)
    parts = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _format_table(cols: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    widths = [len(c) for c in cols]
    for r in rows:
        widths = [max(w, len(x)) for w, x in zip(widths, r)]
    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return [line(cols), line(["-" * w for w in widths])] + [line(r) for r in rows]
