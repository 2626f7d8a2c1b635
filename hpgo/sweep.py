"""DAPPLE's batch-size study in one call: :func:`sweep`.

For every global batch size and device layout it computes HPGO's three
data-parallel estimates and the best hybrid plan, spreading the cases over
C threads with the GIL released (``threads=0``: the ``HPGO_NUM_THREADS``
environment variable, else all cores).  Every row equals what the single-case
calls return.
"""
from __future__ import annotations

import csv
import io
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

from . import _args, _files
from . import _core
from . import progress as _progress

__all__ = ["SweepRow", "SweepResult", "sweep"]

Stage = Tuple[int, int, int, List[int]]


@dataclass(frozen=True)
class SweepRow:
    """One (gbs, layout) case: the columns of DAPPLE's planner example."""

    gbs: int
    seps: Tuple[int, ...]
    dp: float                        #: DP, no overlap (dp_speedup)
    dp_p3: Optional[float]           #: DP + P3 (dp_cur_ga_p3_speedup); None if it does not fit
    dp_overlap: Optional[float]      #: DP + normal overlap (dp_cur_ga_inner_overlap_speedup)
    hybrid: Optional[float]          #: best hybrid speedup (py_orchestrate); None: no plan
    stages: Optional[List[Stage]]    #: its stages, HPGO's tuples
    label: Optional[str]             #: which candidate won ("straight i=2", ...)
    rp: Optional[int]                #: its pipeline replicas
    error: Optional[str] = None      #: why dp_p3/dp_overlap or hybrid are missing
    candidates: List[Any] = field(default_factory=list, repr=False, compare=False)
    skipped: List[Tuple[str, str]] = field(default_factory=list, repr=False, compare=False)
    #: the hybrid plan's peak memory on a GPU under DAPPLE's 1F1B schedule
    #: (bytes; None: no plan) and whether it fits HPGO's GPU
    peak_memory: Optional[float] = field(default=None, compare=False)
    fits: Optional[bool] = field(default=None, compare=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["seps"] = list(self.seps)
        d.pop("candidates")
        d.pop("skipped")
        return d


class SweepResult(list):
    """A list of :class:`SweepRow` (gbs-major) with table conversions.

    Prints as a text table (``str``), shows as a compact HTML table in
    Jupyter (first and last rows of a long sweep), and its ``repr`` is one
    line.
    """

    _COLUMNS = ["gbs", "seps", "DP", "DP+overlap", "DP+P3", "hybrid", "stages", "rp", "label",
                "GiB", "fits", "note"]

    def _body(self) -> List[List[str]]:
        def f(v: Optional[float]) -> str:
            return "-" if v is None else f"{v:.3f}"

        return [[str(r.gbs), ",".join(map(str, r.seps)), f(r.dp), f(r.dp_overlap), f(r.dp_p3),
                 f(r.hybrid), "-" if r.stages is None else str(len(r.stages)),
                 "-" if r.rp is None else str(r.rp), r.label or "-",
                 "-" if r.peak_memory is None else f"{r.peak_memory / 2**30:.2f}",
                 "-" if r.fits is None else ("yes" if r.fits else "NO"), (r.error or "")[:60]]
                for r in self]

    def table(self) -> str:
        """Every row as a readable text table."""
        from .plan import _format_table

        lines = _format_table(self._COLUMNS, self._body())
        if any(r.peak_memory is not None for r in self):
            lines += ["", "GiB, fits: the hybrid plan's peak memory on a GPU under DAPPLE's 1F1B "
                          "schedule, against HPGO's GPU"]
        if any(r.hybrid is not None and r.dp_p3 is not None and r.hybrid < r.dp_p3
               for r in self):
            lines += ["", "DP + P3 is an optimistic bound (perfect overlap, no pipeline), not a "
                          "plan; the best hybrid is",
                      "HPGO's plan priced by its pipeline formula, so it can sit below "
                      "(docs/concepts.md)"]
        return "\n".join(lines)

    def _summary(self) -> str:
        if not self:
            return "0 rows"
        gbs = sorted({r.gbs for r in self})
        layouts = []
        for r in self:
            if r.seps not in layouts:
                layouts.append(r.seps)
        g = str(gbs[0]) if len(gbs) == 1 else f"{gbs[0]}..{gbs[-1]}"
        lay = "; ".join(",".join(map(str, s)) for s in layouts[:4]) + (
            f"; ... ({len(layouts)} layouts)" if len(layouts) > 4 else "")
        return (f"{len(self)} row{'s' if len(self) != 1 else ''}: {len(gbs)} global batch "
                f"size{'s' if len(gbs) != 1 else ''} {g} x seps {lay}")

    def __repr__(self) -> str:
        return f"<hpgo.SweepResult {self._summary()}>"

    def __str__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        from ._display import html_table

        return html_table(self._COLUMNS, self._body(), caption="SweepResult: " + self._summary())

    def to_dicts(self) -> List[dict]:
        return [r.to_dict() for r in self]

    def to_csv(self, path: Union[str, os.PathLike, None] = None) -> str:
        """Write (or return) the rows as CSV; seps and stages as Python literals."""
        buf = io.StringIO()
        cols = ["gbs", "seps", "dp", "dp_p3", "dp_overlap", "hybrid", "label", "rp", "stages",
                "peak_memory", "fits", "error"]
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for r in self:
            d = r.to_dict()
            w.writerow(["" if d[c] is None else d[c] for c in cols])
        text = buf.getvalue()
        if path is not None:
            _files.atomic_write(path, text)
        return text

    def to_pandas(self):
        """The rows as a pandas DataFrame (needs pandas, an optional extra)."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install -e '.[pandas]' from "
                              "the hpgo clone") from e
        return pd.DataFrame(self.to_dicts())


def _layouts(seps) -> List[_core.Devices]:
    if isinstance(seps, _core.Devices):
        return [seps]
    if isinstance(seps, (str, bytes)) or not isinstance(seps, Iterable):
        raise TypeError("seps must be a list of ints, a list of such lists, or Devices")
    seps = list(seps)
    if not seps:
        raise ValueError("seps must not be empty")
    if all(hasattr(type(s), "__index__") and not isinstance(s, bool) for s in seps):
        return [_core.devices_from_seps(seps)]
    out = []
    for s in seps:
        if isinstance(s, _core.Devices):
            out.append(s)
        else:
            out.append(_core.devices_from_seps(s))
    return out


def _distributed_sweep(executor, chunksize, model, layouts, gbs_list, threads, exhaustive,
                       timeout, progress) -> list:
    from . import distributed as _dist

    _dist.check_executor(executor)
    size = _dist.check_chunksize(chunksize)
    n = len(gbs_list) * len(layouts)
    if not n:  # nothing to ship: the local call says what it says
        return _core._sweep(model, layouts, gbs_list, threads, exhaustive, timeout)
    if timeout is not None:
        t = _args.real("timeout (seconds or None)", timeout)
        if not t > 0:
            raise ValueError(f"timeout must be > 0 seconds (or None), got {timeout!r}")
        timeout = t
    if size is None:
        size = _dist.default_chunksize(n, executor, 32)
    per = max(1, size // len(layouts))      # whole batch sizes per task: rows stay gbs-major
    spans = _dist.chunks(len(gbs_list), per)
    tasks = [(model, layouts, gbs_list[a:b], threads, exhaustive, timeout) for a, b in spans]
    bar = None
    if _progress.wanted(progress):
        bar = _progress.Progress(n, desc="sweep", unit="cases", delay=0.0 if progress else 0.5)
        bar.update(0)
    try:
        parts = _dist.run(executor, _dist.sweep_task, tasks, what="sweep", timeout=timeout,
                          done=None if bar is None else
                          (lambda i: bar.update(spans[i][1] * len(layouts))))
    finally:
        if bar is not None:
            bar.close()
    return [row for part in parts for row in part]


def sweep(
    profile: Union[str, os.PathLike, "_core.Model"],
    pbs: int,
    gbs: Union[int, Sequence[int]],
    seps,
    *,
    optimizer_memory_scaling: Optional[int] = None,
    min_micro_batch_size: Optional[int] = None,
    peak_activation_per_batch: Optional[float] = None,
    timeout: Optional[float] = None,
    threads: int = 0,
    exhaustive: bool = False,
    progress: Optional[bool] = None,
    executor: Any = None,
    chunksize: Optional[int] = None,
) -> SweepResult:
    """sweep(profile, pbs, gbs, seps, *, optimizer_memory_scaling=None, min_micro_batch_size=None, peak_activation_per_batch=None, threads=0, exhaustive=False, progress=None, executor=None, chunksize=None)

    timeout: seconds the planning may take (TimeoutError past it; None = no
    limit); Ctrl-C stops it too.
    profile: a graph.txt path, or a Model (its settings are used unless given
    here).  gbs: one global batch size or a list.  seps: one layout ([8, 16]),
    a list of layouts, or Devices.  Returns a SweepResult with one SweepRow
    per (gbs, layout), gbs-major.

    progress: draw a progress line with an ETA on stderr (True), never
    (False), or only in a terminal or a Jupyter kernel (None).  With it the
    cases run in about 20 chunks of batch sizes, each one pooled C call; the
    rows are the same as in one call (every case is independent).

    executor: run chunks of global batch sizes as tasks of a
    concurrent.futures executor, a dask.distributed.Client or a
    multiprocessing-style pool (docs/distributed.md); each task plans its
    cases with ``threads`` C threads on its worker.  Rows come back in the
    same order and bit-identical.  chunksize: cases per task (default:
    about four tasks per worker, at least 32 cases each).
    """
    pbs = _args.index("pbs", pbs, 1, 2**32 - 1)
    if isinstance(profile, _core.Model):
        model = profile
        if model.gbs != pbs:
            model = model.normalized_copy(pbs)
    else:
        model = _core.model_from_torch_graph(profile, pbs, pbs)
    if optimizer_memory_scaling is not None or min_micro_batch_size is not None or (
        peak_activation_per_batch is not None
    ):
        model = model.normalized_copy(model.gbs)  # never modify the caller's model
        if optimizer_memory_scaling is not None:
            model.optimizer_memory_scaling = optimizer_memory_scaling
        if min_micro_batch_size is not None:
            model.min_micro_batch_size = min_micro_batch_size
        if peak_activation_per_batch is not None:
            model.peak_activation_per_batch = peak_activation_per_batch
    # a NumPy array's type has __index__ too: only a 0-d one is one batch size
    if hasattr(type(gbs), "__index__") and not isinstance(gbs, bool) and (
            not isinstance(gbs, Iterable) or getattr(gbs, "ndim", None) == 0):
        gbs_list = [gbs]
    elif isinstance(gbs, (str, bytes)) or not isinstance(gbs, Iterable):
        raise TypeError(f"gbs must be an int or a sequence of ints, not {type(gbs).__name__}")
    else:
        gbs_list = list(gbs)
    layouts = _layouts(seps)
    threads = _args.index("threads", threads, 0, _args.INT32_MAX)
    if executor is not None:
        raw = _distributed_sweep(executor, chunksize, model, layouts, gbs_list, threads,
                                 bool(exhaustive), timeout, progress)
    elif chunksize is not None:
        raise ValueError("chunksize= applies only with executor=")
    elif gbs_list and _progress.wanted(progress):
        # asked for: drawn at once; by default (interactive): after half a second
        bar = _progress.Progress(len(gbs_list) * len(layouts), desc="sweep", unit="cases",
                                 delay=0.0 if progress else 0.5)
        bar.update(0)
        chunk = max(1, -(-len(gbs_list) // 20))
        raw = []
        start = time.monotonic()
        try:
            for i in range(0, len(gbs_list), chunk):
                left = None
                if timeout is not None:
                    left = timeout - (time.monotonic() - start)
                    if left <= 0:
                        raise TimeoutError(f"sweep did not finish within timeout={timeout} s")
                raw.extend(_core._sweep(model, layouts, gbs_list[i:i + chunk], threads,
                                        bool(exhaustive), left))
                bar.update(min(len(gbs_list), i + chunk) * len(layouts))
        finally:
            bar.close()
    else:
        raw = _core._sweep(model, layouts, gbs_list, threads, bool(exhaustive), timeout)
    out = SweepResult()
    at: dict = {}   # the model at each global batch, shared by its layouts
    for g, li, dp, p3, ov, gerr, best, res, skipped in raw:
        err = gerr
        if best is None:
            why = "no candidate plan" + (": " + "; ".join(r for _, r in skipped) if skipped else "")
            err = why if err is None else err + "; " + why
        if best is not None and g not in at:
            at[g] = model.normalized_copy(g)
        mem = None if best is None else _memory(at[g], best, layouts[li])
        out.append(
            SweepRow(
                gbs=g,
                seps=tuple(layouts[li].seps),
                dp=dp,
                dp_p3=p3,
                dp_overlap=ov,
                hybrid=None if best is None else best.speedup,
                stages=None if best is None else best.stages,
                label=None if best is None else best.label,
                rp=None if best is None else best.rp,
                error=err,
                candidates=res,
                skipped=skipped,
                peak_memory=None if mem is None else mem.peak_memory,
                fits=None if mem is None else mem.fits,
            )
        )
    return out


def _memory(model: "_core.Model", best: Any, devices: "_core.Devices") -> Any:
    """The hybrid plan simulated under DAPPLE's 1F1B schedule on ``model`` at
    the row's global batch (a few tens of microseconds a row): what its peak
    memory is and whether it fits."""
    from .sim import simulate_plan

    return simulate_plan(model, (best.speedup, best.stages), rp=best.rp,
                         seps=list(devices.seps), schedule="1f1b")
