"""Figures of plans, sweeps and simulations (matplotlib, an optional extra).

Every function returns the matplotlib ``Figure`` it drew on and draws into
``ax`` when one is given (a new figure otherwise).  In Jupyter a figure the
function made itself is shown once, as the cell's value: it is closed in
pyplot so the inline backend does not show it a second time (end the cell
with it, or ``display(fig)``; ``fig.savefig`` works either way).

* :func:`speedup_vs_gbs`: DAPPLE's batch-size study from a
  :class:`hpgo.SweepResult`: DP, DP + P3, DP + overlap and the best hybrid
  plan against the global batch size.
* :func:`speedup_vs_devices`: DistIR's Figure 3 layout, speedup against the
  number of devices, one line per batch size / micro-batch count.
* :func:`grid_search_scatter`: DistIR's Figure 4 layout, every configuration
  of a grid search with the best one per device count.
* :func:`gantt`: the schedule of a simulated iteration, one row per device,
  forward / backward / communication coloured.
* :func:`plan_diagram`: a plan's stages as coloured layer ranges over
  machines and GPUs.

``pip install -e '.[plot]' from the hpgo clone``; matplotlib is imported on first use only.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .plan import STAGE_COLORS, Plan

__all__ = [
    "CATEGORY_COLORS",
    "event_category",
    "speedup_vs_gbs",
    "speedup_vs_devices",
    "grid_search_scatter",
    "gantt",
    "plan_diagram",
    "step_gantt",
    "memory_breakdown",
    "time_vs_memory",
]

#: Colours of the Gantt chart's event categories.
CATEGORY_COLORS = {
    "forward": "#4e79a7",
    "backward": "#f28e2b",
    "communication": "#e15759",
    "other": "#bab0ac",
}

_SERIES = (  # SweepRow field, legend label, colour, marker, line style
    ("dp", "DP (no overlap)", "#9c9c9c", "o", ":"),
    ("dp_overlap", "DP + overlap", "#76b7b2", "s", "--"),
    ("dp_p3", "DP + P3", "#59a14f", "^", "-."),
    ("hybrid", "best hybrid (hpgo)", "#e15759", "D", "-"),
)
_COMM_WORDS = ("send", "recv", "reduce", "gather", "scatter", "broadcast", "all2all",
               "alltoall", "transfer", "copy")


def _mpl():
    try:
        import matplotlib
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("hpgo.plot needs matplotlib: pip install -e '.[plot]' from the "
                          "hpgo clone") from e
    return matplotlib, plt


def _axes(ax: Any, figsize: Tuple[float, float]) -> Tuple[Any, Any]:
    _, plt = _mpl()
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    if not hasattr(ax, "get_figure"):
        raise TypeError(f"ax must be a matplotlib Axes, not {type(ax).__name__}")
    return ax.get_figure(), ax


def _inline_backend() -> bool:
    matplotlib, _ = _mpl()
    return "inline" in str(matplotlib.get_backend()).lower()


def _finish(fig: Any, own: bool) -> Any:
    """Return ``fig``; one this module made is closed in pyplot under
    Jupyter's inline backend, so it is shown once (as the returned value),
    not also by the backend at the end of the cell."""
    if own and _inline_backend():
        _mpl()[1].close(fig)
    return fig


def _get(row: Any, key: str) -> Any:
    if isinstance(row, Mapping):
        return row.get(key)
    return getattr(row, key, None)


def _log2_axis(ax: Any, values: Iterable[float], axis: str = "x") -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    vals = sorted({v for v in values if v and v > 0})
    if len(vals) > 10:
        # many values (a fine sweep): label the powers of two in range only
        lo, hi = vals[0], vals[-1]
        p = 1
        while p * 2 <= lo:
            p *= 2
        vals = []
        while p <= hi * 1.0001:
            if p >= lo / 1.0001:
                vals.append(p)
            p *= 2
        vals = vals or [lo, hi]
    if axis == "x":
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(vals))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{v:g}" for v in vals])
    else:
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_locator(FixedLocator(vals))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_yticklabels([f"{v:g}" for v in vals])


# ---------------------------------------------------------------- sweep


def speedup_vs_gbs(result: Iterable[Any], *, seps: Optional[Sequence[int]] = None,
                   ax: Any = None, ideal: bool = True, annotate: bool = True,
                   title: Optional[str] = None) -> Any:
    """DAPPLE's batch-size study: speedup over one GPU against the global
    batch size for DP (no overlap), DP + overlap, DP + P3 and the best
    hybrid plan.

    ``result``: a :class:`hpgo.SweepResult` (or rows / dicts with its
    fields).  With several layouts in it, ``seps`` picks one; without,
    each layout gets its own panel (side by side, same y scale), or, drawn
    into one given ``ax``, its own shade and legend entries.
    ``ideal`` draws the GPU count as a dashed line; ``annotate`` writes
    the number of pipeline stages where it changes along the hybrid line.  Missing
    values (a plan that does not fit) are left out of the lines.
    """
    rows = list(result)
    if not rows:
        raise ValueError("the sweep result has no rows")
    layouts: List[Tuple[int, ...]] = []
    for r in rows:
        s = tuple(_get(r, "seps") or ())
        if s not in layouts:
            layouts.append(s)
    if seps is not None:
        want = tuple(seps)
        if want not in layouts:
            raise ValueError(f"seps {list(want)} is not in the sweep (it has "
                             f"{', '.join(str(list(x)) for x in layouts)})")
        layouts = [want]
    if ax is None and len(layouts) > 1:
        _, plt = _mpl()
        ncol = min(3, len(layouts))
        nrow = -(-len(layouts) // ncol)
        # each panel its own y scale: a layout of 8 GPUs is not drawn on 16's axis
        fig, axes = plt.subplots(nrow, ncol, figsize=(5.6 * ncol, 4.2 * nrow),
                                 layout="constrained", squeeze=False)
        flat = list(axes.flat)
        for a, lay in zip(flat, layouts):
            speedup_vs_gbs(rows, seps=lay, ax=a, ideal=ideal, annotate=annotate,
                           title=f"seps {list(lay)} ({lay[-1] if lay else '?'} GPUs)")
            a.tick_params(axis="y", labelleft=True)
        for a in flat[len(layouts):]:
            a.set_visible(False)
        if title:
            fig.suptitle(title, fontsize=11)
        if any(_get(r, "hybrid") is not None and _get(r, "dp_p3") is not None
               and _get(r, "hybrid") < _get(r, "dp_p3") for r in rows):
            fig.supxlabel("DP + P3 is an optimistic bound, not a plan; the best hybrid is HPGO's "
                          "plan, priced by its pipeline formula (docs/concepts.md)",
                          fontsize=7, color="#555555")
        return _finish(fig, True)
    own = ax is None
    fig, ax = _axes(ax, (7.0, 4.2))
    all_gbs: List[int] = []
    for li, lay in enumerate(layouts):
        mine = sorted((r for r in rows if tuple(_get(r, "seps") or ()) == lay),
                      key=lambda r: _get(r, "gbs"))
        xs = [_get(r, "gbs") for r in mine]
        all_gbs += xs
        suffix = f" {list(lay)}" if len(layouts) > 1 else ""
        alpha = 1.0 if li == 0 else max(0.35, 1.0 - 0.25 * li)
        for key, label, color, marker, ls in _SERIES:
            pts = [(x, _get(r, key)) for x, r in zip(xs, mine) if _get(r, key) is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, marker=marker, color=color,
                    alpha=alpha, label=label + suffix, markersize=5)
            over = [(x, _get(r, key)) for x, r in zip(xs, mine)
                    if key == "hybrid" and _get(r, key) is not None and _get(r, "fits") is False]
            if over:   # a plan over the GPU's memory is drawn, and crossed out
                ax.plot([p[0] for p in over], [p[1] for p in over], "x", color="#c00000",
                        markersize=9, mew=2, alpha=alpha,
                        label="hybrid does not fit (1F1B peak over the GPU)" + suffix)
            if key == "hybrid" and annotate:
                # write the stage count where it changes, not at every point
                prev = None
                last_x, below = None, False
                for x, r in zip(xs, mine):
                    st, y = _get(r, "stages"), _get(r, "hybrid")
                    if st is None or y is None or len(st) == prev:
                        continue
                    prev = len(st)
                    # a label close to the previous one (log x) goes to the other side
                    below = (not below) if last_x is not None and x < last_x * 1.6 else False
                    ax.annotate(f"{len(st)} stage{'s' if len(st) > 1 else ''}", (x, y),
                                textcoords="offset points", xytext=(0, -13 if below else 7),
                                ha="left" if last_x is None else "center", fontsize=7,
                                color=color)
                    last_x = x
        if ideal and lay:
            ax.axhline(lay[-1], color="#444444", lw=0.8, ls=(0, (4, 4)), alpha=alpha)
            # above the line, where no estimate can be (none beats linear)
            ax.annotate(f"{lay[-1]} GPUs (linear)", (0.0, lay[-1]),
                        xycoords=("axes fraction", "data"), xytext=(4, 2),
                        textcoords="offset points", ha="left", va="bottom", fontsize=8,
                        color="#444444")
    _log2_axis(ax, all_gbs)
    ax.set_xlabel("global batch size")
    ax.set_ylabel("speedup over 1 GPU")
    top = max([lay[-1] for lay in layouts if lay and ideal] + [ax.get_ylim()[1]])
    ax.set_ylim(0, top * 1.12)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if title is None and len(layouts) == 1:
        title = f"speedup against global batch size, seps {list(layouts[0])}"
    if own and any(_get(r, "hybrid") is not None and _get(r, "dp_p3") is not None
                   and _get(r, "hybrid") < _get(r, "dp_p3") for r in rows):
        # a figure-level label: the constrained layout keeps it clear of the x label
        fig.supxlabel("DP + P3 is an optimistic bound, not a plan; the best hybrid is HPGO's "
                      "plan, priced by its pipeline formula (docs/concepts.md)",
                      fontsize=7, color="#555555")
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, own)


# ---------------------------------------------------------------- DistIR figures


def _series(data: Any, devices: Optional[Sequence[int]]) -> Dict[str, Tuple[List[int], List[float]]]:
    if not isinstance(data, Mapping):
        raise TypeError("data must be a Figure3 or a mapping of label -> speedups")
    out = {}
    for label, ys in data.items():
        if isinstance(ys, Mapping):
            pts = sorted((int(k), float(v)) for k, v in ys.items())
            out[str(label)] = ([p[0] for p in pts], [p[1] for p in pts])
        else:
            ys = [float(y) for y in ys]
            if devices is None:
                raise ValueError("devices is needed when the speedups are plain sequences")
            if len(ys) != len(devices):
                raise ValueError(f"series {label!r} has {len(ys)} values for "
                                 f"{len(devices)} device counts")
            out[str(label)] = (list(devices), ys)
    if not out:
        raise ValueError("no series to plot")
    return out


def _devices_panel(ax: Any, series: Mapping[str, Tuple[List[int], List[float]]], ideal: bool,
                   title: Optional[str], legend_title: Optional[str]) -> None:
    _, plt = _mpl()
    cmap = plt.get_cmap("viridis")
    xs_all: List[int] = []
    n = len(series)
    for i, (label, (xs, ys)) in enumerate(series.items()):
        xs_all += xs
        ax.plot(xs, ys, "-o", color=cmap(0.15 + 0.7 * i / max(1, n - 1)), label=label,
                markersize=4)
    ys_all = [y for _, ys in series.values() for y in ys]
    _log2_axis(ax, xs_all)
    top = max(ys_all) * 1.12 if ys_all else None
    if ideal and xs_all:
        # the linear line stops where it leaves the panel (the data's range sets the
        # y axis) and is labelled there, not in the legend
        lo, hi = min(xs_all), max(xs_all)
        end = hi if top is None else min(hi, top)
        if end > lo:
            # y = x is a curve on a log2 x axis: draw it through many points
            pts = [lo * (end / lo) ** (i / 64) for i in range(65)]
            ax.plot(pts, pts, color="#888888", ls="--", lw=0.8)
            ax.annotate("linear" + (" (continues)" if end < hi else ""), (end, end),
                        textcoords="offset points", xytext=(-3, -2), ha="right", va="top",
                        fontsize=7, color="#666666")
    if top is not None:
        ax.set_ylim(0, top)
    ax.set_xlabel("number of devices")
    ax.set_ylabel("speedup over 1 device")
    ax.grid(True, alpha=0.3)
    # below the panel: inside it would cover the lines or the linear one
    ax.legend(fontsize=8, title=legend_title, title_fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.2), ncol=min(4, max(1, n)), frameon=False)
    if title:
        ax.set_title(title, fontsize=10)


def speedup_vs_devices(data: Any, devices: Optional[Sequence[int]] = None, *,
                       part: str = "both", ax: Any = None, ideal: bool = True,
                       title: Optional[str] = None) -> Any:
    """Speedup against the number of devices (DistIR's Figure 3 layout).

    ``data``: the :func:`hpgo.distir_figure3` result (panels: data
    parallelism, one line per batch size; pipeline parallelism, one line
    per micro-batch count; ``part`` = "dp", "pp" or "both", which needs two
    axes when ``ax`` is given), or a mapping ``label -> {devices: speedup}``
    (or ``label -> speedups`` with ``devices``) for one panel of your own.
    ``ideal`` adds the linear-speedup line.
    """
    if hasattr(data, "dp") and hasattr(data, "pp") and hasattr(data, "devices"):
        if part not in ("dp", "pp", "both"):
            raise ValueError(f"part must be 'dp', 'pp' or 'both', got {part!r}")
        devs = list(data.devices)
        dp = {f"batch {b}": (devs, list(v)) for b, v in data.dp.items()}
        pp = {f"K = {k}": (devs, list(v)) for k, v in data.pp.items()}
        panels: List[Tuple[Dict[str, Tuple[List[int], List[float]]], str, Optional[str]]] = []
        if part in ("dp", "both"):
            panels.append((dp, "data parallelism", None))
        if part in ("pp", "both"):
            panels.append((pp, f"pipeline parallelism, batch {data.pp_batch}", "micro-batches"))
        own = ax is None
        if ax is None:
            _, plt = _mpl()
            fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.4),
                                     layout="constrained", squeeze=False)
            axes = list(axes[0])
        else:
            axes = list(ax) if isinstance(ax, (list, tuple)) or hasattr(ax, "flat") else [ax]
            if hasattr(ax, "flat"):
                axes = list(ax.flat)
            if len(axes) != len(panels):
                raise ValueError(f"part={part!r} draws {len(panels)} panel(s); got {len(axes)} axes")
            fig = axes[0].get_figure()
        for a, (series, t, lt) in zip(axes, panels):
            _devices_panel(a, series, ideal, t, lt)
        if title:
            fig.suptitle(title, fontsize=11)
        return _finish(fig, own)
    own = ax is None
    fig, ax = _axes(ax, (5.5, 4.0))
    _devices_panel(ax, _series(data, devices), ideal, title, None)
    return _finish(fig, own)


def _kind(r: Any) -> str:
    parts = [n for n, v in (("D", r.dp), ("H", r.tp), ("P", r.pp)) if v > 1]
    return "+".join(parts) if parts else "sequential"


_KIND_ORDER = ("sequential", "D", "H", "P", "D+H", "D+P", "H+P", "D+H+P")
_KIND_COLORS = dict(zip(_KIND_ORDER, ("#000000", "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1",
                                      "#76b7b2", "#edc948", "#e15759")))


def grid_search_scatter(rows: Iterable[Any], *, ax: Any = None, baseline: Optional[float] = None,
                        annotate: bool = True, title: Optional[str] = None) -> Any:
    """Every configuration of a grid search (DistIR's Figure 4 layout).

    ``rows``: :func:`hpgo.grid_search`'s :class:`hpgo.sim.GridRow` list.
    y is the speedup over ``baseline`` (default: the throughput of the
    first one-device row; throughput in samples/s when there is none), x
    the device count; points are coloured by which of data (D), horizontal
    (H) and pipeline (P) parallelism they use, and the best configuration
    per device count is ringed, joined and (``annotate``) labelled
    (D, H, P, K).
    """
    rows = list(rows)
    if not rows:
        raise ValueError("no grid-search rows to plot")
    for r in rows:
        for attr in ("devices", "dp", "tp", "pp", "microbatches", "throughput"):
            if not hasattr(r, attr):
                raise TypeError(f"rows must be hpgo GridRow objects (missing {attr!r})")
    if baseline is None:
        one = [r.throughput for r in rows if r.devices == 1]
        baseline = one[0] if one else None
    scale = (lambda t: t / baseline) if baseline else (lambda t: t)
    own = ax is None
    fig, ax = _axes(ax, (6.5, 4.5))
    kinds: Dict[str, List[Any]] = {}
    for r in rows:
        kinds.setdefault(_kind(r), []).append(r)
    order = [k for k in _KIND_ORDER if k in kinds]
    for j, k in enumerate(order):
        # a small deterministic shift per kind keeps overlapping points apart
        shift = 2 ** ((j - (len(order) - 1) / 2) * 0.06)
        ax.scatter([r.devices * shift for r in kinds[k]], [scale(r.throughput) for r in kinds[k]],
                   s=18, color=_KIND_COLORS[k], alpha=0.75, label=k, linewidths=0)
    best: Dict[int, Any] = {}
    for r in rows:
        if r.devices not in best or r.throughput > best[r.devices].throughput:
            best[r.devices] = r
    bx = sorted(best)
    ax.plot(bx, [scale(best[w].throughput) for w in bx], "-", color="#333333", lw=1, zorder=1)
    ax.scatter(bx, [scale(best[w].throughput) for w in bx], s=110, facecolors="none",
               edgecolors="#000000", linewidths=1.4, label="best per device count", zorder=3)
    if annotate:
        for w in bx:
            b = best[w]
            ax.annotate(f"({b.dp},{b.tp},{b.pp},{b.microbatches})\n{scale(b.throughput):.2f}"
                        + ("x" if baseline else ""),
                        (w, scale(b.throughput)), textcoords="offset points", xytext=(0, 9),
                        ha="center", fontsize=7)
    _log2_axis(ax, [r.devices for r in rows])
    ax.set_xlabel("number of devices")
    ax.set_ylabel("speedup over 1 device" if baseline else "throughput (samples/s)")
    ax.margins(y=0.15)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", title="(D, H, P, K) = data, horizontal, "
              "pipeline, micro-batches", title_fontsize=7)
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, own)


# ---------------------------------------------------------------- Gantt chart


def event_category(name: str) -> str:
    """Gantt colour class of an event name: "communication" (send, recv,
    all-reduce, gathers, ...), "backward" ("backward" or a *Grad op),
    "forward" or "other" (optimizer steps)."""
    low = name.lower()
    if any(w in low for w in _COMM_WORDS):
        return "communication"
    if low == "backward" or low.endswith("grad") or "backward" in low:
        return "backward"
    if low in ("optimizer", "update", "step", "sgd", "adam"):
        return "other"
    return "forward"


def _time_unit(t: float) -> Tuple[str, float]:
    if t < 1e-3:
        return "µs", 1e6
    if t < 1.0:
        return "ms", 1e3
    return "s", 1.0


def gantt(result: Any, *, ax: Any = None, devices: Optional[Sequence[int]] = None,
          annotate: bool = True, title: Optional[str] = None,
          unit: Optional[str] = None) -> Any:
    """The schedule of a simulated iteration as a Gantt chart.

    ``result``: a :class:`hpgo.SimulationResult` simulated with its
    timeline.  One row per device (``devices`` picks some, in that order;
    default all), labelled with its stage; compute in the upper band,
    asynchronous transfers (lane 1) in a thin lower band; forward,
    backward and communication in :data:`CATEGORY_COLORS`; with
    ``annotate`` each forward / backward box wide enough shows its
    micro-batch.  ``unit``: "s", "ms" or "µs" (default: from the
    iteration time).
    """
    for attr in ("timeline", "devices", "iteration_time"):
        if not hasattr(result, attr):
            raise TypeError("result must be an hpgo.SimulationResult")
    events = result.timeline
    if not events:
        raise ValueError("the result has no timeline: simulate with timeline=True")
    stage_of = {d.device: d.stage for d in result.devices}
    present = sorted({e.device for e in events} | set(stage_of))
    if devices is None:
        rows = present
    else:
        rows = list(devices)
        bad = [d for d in rows if d not in present]
        if bad:
            raise ValueError(f"devices {bad} are not in the simulation (it has {present[0]}.."
                             f"{present[-1]})")
    if not rows:
        raise ValueError("no device to draw")
    end = max(max(e.end for e in events), result.iteration_time)
    if unit is None:
        unit, k = _time_unit(end)
    else:
        factors = {"s": 1.0, "ms": 1e3, "µs": 1e6, "us": 1e6}
        if unit not in factors:
            raise ValueError(f"unit must be 's', 'ms' or 'µs', got {unit!r}")
        k = factors[unit]
    has_lane1 = any(e.lane == 1 for e in events)
    own = ax is None
    fig, ax = _axes(ax, (10.0, max(2.5, 0.38 * len(rows) + 1.4)))
    ypos = {d: i for i, d in enumerate(rows)}
    # compute band and transfer band inside each row of height 1
    bands = {0: (-0.42, 0.62 if has_lane1 else 0.84), 1: (0.24, 0.18)}
    bars: Dict[Tuple[int, int, str], List[Tuple[float, float]]] = {}
    for e in events:
        if e.device not in ypos:
            continue
        bars.setdefault((e.device, 1 if e.lane else 0, event_category(e.name)), []).append(
            (e.start * k, e.duration * k))
    used = set()
    # white edges separate boxes; they would hide boxes narrower than a few pixels
    wide = sum(e.duration for e in events) / len(events) > end / 150
    for (dev, lane, cat), spans in sorted(bars.items()):
        y0, h = bands[lane]
        ax.broken_barh(spans, (ypos[dev] + y0, h), facecolors=CATEGORY_COLORS[cat],
                       edgecolor="white" if wide else "none", linewidth=0.3 if wide else 0)
        used.add(cat)
    if annotate:
        min_w = end * k / 70.0
        for e in events:
            if (e.device in ypos and e.lane == 0 and e.microbatch >= 0
                    and e.duration * k >= min_w
                    and event_category(e.name) in ("forward", "backward")):
                y0, h = bands[0]
                ax.text((e.start + e.duration / 2) * k, ypos[e.device] + y0 + h / 2,
                        str(e.microbatch), ha="center", va="center", fontsize=6, color="white")
    labels = []
    for d in rows:
        st = stage_of.get(d, -1)
        labels.append(f"device {d}" + (" (host)" if st < 0 else f" · stage {st}"))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    # a little room after the last op, so that it is not cut by the frame; panels sharing
    # the x axis keep the longest one's range
    right = end * k * 1.02
    if len(ax.get_shared_x_axes().get_siblings(ax)) > 1 and getattr(ax, "_hpgo_gantt", False) \
            is False and any(getattr(a, "_hpgo_gantt", False)
                             for a in ax.get_shared_x_axes().get_siblings(ax)):
        right = max(right, ax.get_xlim()[1])
    ax._hpgo_gantt = True
    ax.set_xlim(0, right)
    ax.axvline(result.iteration_time * k, color="#333333", lw=0.8, ls="--")
    ax.set_xlabel(f"time ({unit})")
    # every Gantt panel keeps its time ticks, also above another with sharex=True
    ax.tick_params(axis="x", labelbottom=True)
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(color=CATEGORY_COLORS[c], label=c) for c in CATEGORY_COLORS if c in used]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0),
              frameon=False)
    if title is None:
        cfg = getattr(result, "config", {}) or {}
        bits = [f"iteration {result.iteration_time * k:.4g} {unit}"]
        if "schedule" in cfg:
            bits.insert(0, f"{cfg['schedule']} schedule")
        if "microbatches" in cfg:
            bits.append(f"{cfg['microbatches']} micro-batches")
        title = ", ".join(bits)
    elif title:
        title = f"{title}: iteration {result.iteration_time * k:.4g} {unit}"
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, own)


# ---------------------------------------------------------------- plan diagram


def plan_diagram(plan: Any, *, seps: Optional[Sequence[int]] = None, ax: Any = None,
                 title: Optional[str] = None, num_gpus: Optional[int] = None) -> Any:
    """A plan's stages as coloured layer ranges over machines and GPUs.

    ``plan``: a :class:`hpgo.plan.Plan` or HPGO's ``(speedup, stages)``.
    One row per GPU (grouped by machine with ``seps``, default the plan's),
    x the layer states; each stage is a bar of its colour over its states on
    each of its GPUs.  GPUs the plan leaves idle are hatched.
    """
    p = plan if isinstance(plan, Plan) else Plan.from_hpgo(plan)
    if seps is None:
        seps = p.seps
    gpus_used = sorted({g for s in p.stages for g in s.gpus})
    n = max(gpus_used) + 1
    if seps:
        seps = [int(x) for x in seps]
        if any(b <= a for a, b in zip(seps, seps[1:])) or seps[0] < 1:
            raise ValueError(f"seps must be increasing positive ints, got {seps}")
        if seps[-1] < n:
            raise ValueError(f"the plan uses GPU {n - 1} but seps {seps} has {seps[-1]} GPUs")
        n = seps[-1]
    if num_gpus is not None:
        n = max(n, int(num_gpus))
    n_states = n_states_total = p.stages[-1].last_state + 1
    own = ax is None
    fig, ax = _axes(ax, (9.0, max(2.6, 0.24 * n + 1.6)))
    from matplotlib.patches import Patch

    handles = []
    for s in p.stages:
        color = STAGE_COLORS[s.index % len(STAGE_COLORS)]
        x0: float = s.first_state
        w: float = s.last_state + 1 - s.first_state
        # a stage of a few states among hundreds would be a sliver: draw it at least 1.5 %
        # of the axis wide (its states are in the legend and the x ticks)
        wmin = 0.015 * n_states_total
        if w < wmin:
            x0, w = max(0.0, min(x0 + w / 2 - wmin / 2, n_states_total - wmin)), wmin
        for g in s.gpus:
            ax.broken_barh([(x0, w)], (g - 0.4, 0.8), facecolors=color, edgecolor="#555555",
                           linewidth=0.5)
        # one label per run of consecutive GPUs
        runs: List[List[int]] = []
        for g in s.gpus:
            if runs and g == runs[-1][-1] + 1:
                runs[-1].append(g)
            else:
                runs.append([g])
        box = dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.8)
        for run in runs:
            y = (run[0] + run[-1]) / 2
            if w >= 0.06 * n_states_total:
                ax.text(x0 + w / 2, y, f"stage {s.index}", ha="center", va="center",
                        fontsize=8, bbox=box)
            else:
                # a narrow stage: the label sits beside it on a leader line, on the
                # side with more room
                right = x0 + w / 2 < n_states_total / 2
                ax.annotate(f"stage {s.index}", (x0 + w / 2, y),
                            xytext=(28 if right else -28, 0), textcoords="offset points",
                            ha="left" if right else "right", va="center", fontsize=8,
                            bbox=dict(box, ec="#555555", lw=0.5),
                            arrowprops=dict(arrowstyle="-", color="#333333", lw=0.7))
        name = f"stage {s.index}: states {s.first_state}-{s.last_state}"
        if s.first_layer:
            name += f" ({s.first_layer}" + (f" .. {s.last_layer})" if s.last_layer != s.first_layer
                                            else ")")
        handles.append(Patch(facecolor=color, edgecolor="#555555", label=name))
    idle = [g for g in range(n) if g not in set(gpus_used)]
    for g in idle:
        ax.broken_barh([(0, n_states)], (g - 0.4, 0.8), facecolors="none", edgecolor="#bbbbbb",
                       hatch="///", linewidth=0.5)
    if idle:
        handles.append(Patch(facecolor="none", edgecolor="#bbbbbb", hatch="///", label="idle GPU"))
    ticks = list(range(n))
    labels = [f"GPU {g}" for g in ticks]
    if seps:
        start = 0
        for m, end in enumerate(seps):
            if m > 0:
                ax.axhline(start - 0.5, color="#222222", lw=1.2)
            ax.annotate(f"machine {m}", (1.0, (start + end - 1) / 2), xycoords=("axes fraction", "data"),
                        xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                        rotation=90 if end - start > 2 else 0)
            start = end
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7 if n > 16 else 8)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, n_states)
    cuts = sorted({0, n_states} | {s.first_state for s in p.stages})
    shown: List[int] = []
    for c in reversed(cuts):  # drop ticks closer than 4 % to the one on their right
        if not shown or shown[-1] - c >= 0.04 * n_states or c == 0:
            shown.append(c)
    if len(shown) > 1 and shown[-1] == 0 and shown[-2] < 0.04 * n_states:
        shown.pop(-2)
    ax.set_xticks(sorted(shown))
    ax.set_xlabel("layer states (planner's units, in order)")
    ax.legend(handles=handles[:12], fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14 if n > 6 else -0.25),
              ncol=2 if len(handles) > 1 else 1, frameon=False)
    if title is None:
        title = (f"plan: speedup {p.speedup:.3f}, {p.num_stages} stage"
                 f"{'s' if p.num_stages != 1 else ''} x {p.rp} replica{'s' if p.rp != 1 else ''}"
                 + (f" ({p.label})" if p.label else ""))
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, own)


# ---------------------------------------------------------------- training steps


_STEP_COLORS = {"forward": "#4e79a7", "backward_input": "#f28e2b", "backward_weight": "#59a14f",
                "backward": "#f28e2b", "send": "#e15759", "all_reduce": "#b07aa1",
                "reduce_scatter": "#b07aa1", "optimizer": "#bab0ac"}


def _what(plans: Any) -> str:
    """'MODEL on CLUSTER (N GPUs), global batch B' of a ranking or results."""
    m = getattr(plans, "model", None)
    c = getattr(plans, "cluster", None)
    if m is not None and c is not None:
        return (f"{getattr(m, 'name', '') or 'model'} on {c.name} ({c.gpus} GPUs), global "
                f"batch {getattr(plans, 'global_batch', '?')}")
    first = next(iter(plans), None)
    res = getattr(first, "result", first)
    if res is not None and hasattr(res, "model"):
        return f"{str(res.model).split('#')[0]} on {res.cluster}"
    return ""


def step_gantt(result: Any, *, ax: Any = None, title: Optional[str] = None) -> Any:
    """The schedule of an :func:`hpgo.simulate` result (with its timeline):
    one row per pipeline device, compute in the upper band (forward,
    input-gradient and weight-gradient passes), transfers and gradient
    synchronisation in a thin lower band."""
    events = getattr(result, "events", None)
    if not hasattr(result, "plan") or not hasattr(result, "devices"):
        raise TypeError("result must be an hpgo.StepResult")
    if events is None:
        raise ValueError("the result has no timeline: simulate with timeline=True")
    n = len(result.devices)
    end = result.iteration_time
    unit, k = _time_unit(end)
    own = ax is None
    fig, ax = _axes(ax, (10.0, max(2.5, 0.38 * n + 1.4)))
    bars: Dict[Tuple[int, str, bool], List[Tuple[float, float]]] = {}
    for start, dur, dev, kind, lane, _stage, _mb, _peer in events:
        bars.setdefault((dev, kind, lane == 0), []).append((start * k, dur * k))
    for (dev, kind, compute), spans in bars.items():
        y, h = (dev - 0.42, 0.62) if compute else (dev + 0.24, 0.18)
        ax.broken_barh(spans, (y, h), facecolors=_STEP_COLORS.get(kind, "#bab0ac"),
                       edgecolor="white" if compute else "none", linewidth=0.3)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"device {d}" for d in range(n)])
    ax.set_xlim(0, end * k * 1.01)
    ax.set_xlabel(f"time ({unit})")
    from matplotlib.patches import Patch

    shown = [("forward", "forward"), ("backward_input", "input gradient"),
             ("backward_weight", "weight gradient"), ("send", "transfer"),
             ("all_reduce", "gradient sync")]
    kinds = {kind for (_d, kind, _c) in bars}
    if "backward" in kinds:
        shown[1] = ("backward", "backward")
    ax.legend(handles=[Patch(color=_STEP_COLORS[c], label=lbl) for c, lbl in shown
                       if c in kinds or (c == "all_reduce" and "reduce_scatter" in kinds)],
              loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=5, frameon=False)
    p = result.plan
    ax.set_title(title or f"{str(result.model).split('#')[0]} on {result.cluster}, global batch "
                          f"{p.global_batch}: {p.describe(global_batch=False)}\n"
                          f"{result.microbatches} micro-batches, {result.iteration_time:.3g} s "
                          "per iteration", fontsize=10)
    return _finish(fig, own)


def memory_breakdown(plans: Any, *, ax: Any = None, title: Optional[str] = None) -> Any:
    """Stacked bars of the fullest GPU's memory (weights, gradients,
    optimizer state, activations, other) for each plan of an
    :func:`hpgo.autoplan` ranking (or a list of :class:`hpgo.StepResult`),
    with the GPU's capacity as a line."""
    items = list(plans)
    if not items:
        raise ValueError("no plan to draw")
    mems, labels = [], []
    for i, it in enumerate(items):
        res = getattr(it, "result", it)
        if not hasattr(res, "memory"):
            raise TypeError("expected RankedPlan or StepResult items")
        mems.append(max(res.memory, key=lambda m: m.total))
        label = it.label() if hasattr(it, "label") else res.plan.describe(global_batch=False)
        labels.append(f"#{getattr(it, 'rank', i + 1)} {label}")
    own = ax is None
    # horizontal bars: each plan's description is its label, read left to right
    fig, ax = _axes(ax, (11.0, max(3.4, 0.34 * len(items) + 2.2)))
    if own:
        fig.set_layout_engine("constrained")
    g = 2.0 ** 30
    left = [0.0] * len(items)
    colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#bab0ac"]
    ys = list(range(len(items)))
    for part, color in zip(("weights", "gradients", "optimizer", "activations", "other"), colors):
        vals = [getattr(m, part) / g for m in mems]
        ax.barh(ys, vals, left=left, color=color, label=part, height=0.7)
        left = [b + v for b, v in zip(left, vals)]
    cap = mems[0].capacity / g
    ax.axvline(cap, color="black", linestyle="--", linewidth=1, label="GPU memory")
    room = getattr(mems[0], "headroom", 0.0) / g
    if room:
        ax.axvline(cap - room, color="black", linestyle=":", linewidth=1,
                   label=f"usable ({room / cap * 100:g} % kept free)")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7.5)
    ax.set_ylim(len(items) - 0.5, -0.5)
    ax.set_xlabel("GiB on the fullest GPU")
    ax.set_xlim(0, max(max(left), cap) * 1.05)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=4, frameon=False,
              fontsize="small")
    what = _what(plans)
    ax.set_title(title or ("memory of the ranked plans" + (f"\n{what}" if what else "")),
                 fontsize=10, loc="left", pad=34)
    return _finish(fig, own)


def time_vs_memory(plans: Any, *, ax: Any = None, title: Optional[str] = None) -> Any:
    """Iteration time against the fullest GPU's memory for the plans of a
    ranking, with the Pareto front (no other plan both faster and smaller)
    drawn as a line and its plans labelled with their rank."""
    items = list(plans)
    if not items:
        raise ValueError("no plan to draw")
    pts = []
    for i, it in enumerate(items):
        res = getattr(it, "result", it)
        mem = max(res.memory, key=lambda m: m.total).total / 2.0 ** 30
        pts.append((mem, res.iteration_time, getattr(it, "rank", i + 1)))
    front, best = [], float("inf")
    for mem, t, r in sorted(pts):
        if t < best:
            front.append((mem, t, r))
            best = t
    own = ax is None
    fig, ax = _axes(ax, (6.5, 4.2))
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], color="#bab0ac", label="plans")
    ax.plot([p[0] for p in front], [p[1] for p in front], "o-", color="#e15759",
            label="Pareto front")
    for mem, t, r in front:
        ax.annotate(f"#{r}", (mem, t), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("GiB on the fullest GPU")
    ax.set_ylabel("seconds per iteration")
    ax.legend(frameon=False)
    what = _what(plans)
    ax.set_title(title or ("time against memory" + (f": {what}" if what else "")), fontsize=10)
    return _finish(fig, own)


def memory_timeline(result: Any, *, devices: Optional[Sequence[int]] = None, ax: Any = None,
                    title: Optional[str] = None) -> Any:
    """The memory a simulated training step holds over time on each pipeline
    device (:meth:`hpgo.StepResult.memory_timeline`: model states, then the
    activations each forward allocates and each backward frees, and each op's
    working set), with the GPU's memory and the usable part (less the
    headroom) as lines."""
    if not hasattr(result, "memory_timeline"):
        raise TypeError("result must be an hpgo.StepResult")
    n = len(result.devices)
    devs = list(range(n)) if devices is None else list(devices)
    for d in devs:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < n:
            raise ValueError(f"devices must be in 0..{n - 1}, got {d!r}")
    own = ax is None
    fig, ax = _axes(ax, (9.0, 4.2))
    _, plt = _mpl()
    cmap = plt.get_cmap("viridis")
    g = 2.0 ** 30
    unit, k = _time_unit(result.iteration_time)
    for i, d in enumerate(devs):
        pts = result.memory_timeline(d)
        xs = [0.0] + [t * k for t, _b in pts] + [result.iteration_time * k]
        ys = [0.0] + [b / g for _t, b in pts] + [pts[-1][1] / g]
        ax.step(xs, ys, where="post", color=cmap(0.1 + 0.8 * i / max(1, len(devs) - 1)),
                lw=1.2, label=f"device {d}: peak {result.memory[d].total / g:.1f} GiB")
    caps = {result.memory[d].capacity for d in devs}
    if len(caps) == 1:
        m = result.memory[devs[0]]
        ax.axhline(m.capacity / g, color="black", ls="--", lw=1, label="GPU memory")
        if getattr(m, "headroom", 0.0):
            ax.axhline((m.capacity - m.headroom) / g, color="black", ls=":", lw=1,
                       label=f"usable ({m.headroom / m.capacity * 100:g} % kept free)")
    else:
        # stages on GPU types with different memories (uneven plans on mixed
        # clusters): each device's own capacity, in its colour
        for i, d in enumerate(devs):
            m = result.memory[d]
            col = cmap(0.1 + 0.8 * i / max(1, len(devs) - 1))
            ax.axhline(m.capacity / g, color=col, ls="--", lw=1,
                       label=f"device {d}: GPU memory {m.capacity / g:.1f} GiB")
            if getattr(m, "headroom", 0.0):
                ax.axhline((m.capacity - m.headroom) / g, color=col, ls=":", lw=1,
                           label=f"device {d}: usable ({m.headroom / m.capacity * 100:g} % "
                                 "kept free)")
    ax.set_xlim(0, result.iteration_time * k * 1.02)
    ax.set_ylim(0, max(max(caps), max(result.memory[d].total for d in devs)) / g * 1.08)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("GiB held")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    p = result.plan
    import textwrap
    ax.set_title(title or textwrap.fill(f"memory over one step: {str(result.model).split('#')[0]}"
                                        f" on {result.cluster}, {p.describe()}", 110),
                 fontsize=9)
    return _finish(fig, own)
