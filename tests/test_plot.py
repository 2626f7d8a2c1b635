"""hpgo.plot: each figure returns its Figure, draws into a given Axes and
shows the numbers it was given."""
import pytest

from optional_deps import need

matplotlib = need("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import hpgo  # noqa: E402
from conftest import ROOT  # noqa: E402
from hpgo import plot  # noqa: E402
from hpgo.plan import STAGE_COLORS, best_plan  # noqa: E402

XLNET = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def lines_by_label(ax):
    return {ln.get_label(): ln for ln in ax.get_lines()}


def bar_boxes(ax):
    """(x, width, y, height, facecolor) of every broken_barh box."""
    out = []
    for coll in ax.collections:
        fcs = coll.get_facecolors()
        for k, path in enumerate(coll.get_paths()):
            v = path.vertices
            x0, x1 = v[:, 0].min(), v[:, 0].max()
            y0, y1 = v[:, 1].min(), v[:, 1].max()
            fc = tuple(fcs[k % len(fcs)]) if len(fcs) else None
            out.append((x0, x1 - x0, y0, y1 - y0, fc))
    return out


def test_speedup_vs_gbs_draws_the_sweep(tmp_path):
    gbs = [16, 32, 64, 128]
    res = hpgo.sweep(XLNET, 1, gbs, [8, 16])
    fig = plot.speedup_vs_gbs(res)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    lines = lines_by_label(ax)
    for key, label in [("dp", "DP (no overlap)"), ("dp_overlap", "DP + overlap"),
                       ("dp_p3", "DP + P3"), ("hybrid", "best hybrid (hpgo)")]:
        pts = [(r.gbs, getattr(r, key)) for r in res if getattr(r, key) is not None]
        ln = lines[label]
        assert list(ln.get_xdata()) == [p[0] for p in pts]
        assert list(ln.get_ydata()) == pytest.approx([p[1] for p in pts])
    assert ax.get_xscale() == "log"
    # the linear-speedup line at 16 GPUs
    assert any(list(ln.get_ydata()) == [16, 16] for ln in ax.get_lines())
    fig.savefig(tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:8] == PNG


def test_speedup_vs_gbs_layouts_and_missing_values():
    res = hpgo.sweep(XLNET, 1, [32, 64], [[4, 8], [8, 16]])
    fig = plot.speedup_vs_gbs(res)      # one panel per layout, titled with it
    assert len(fig.axes) == 2
    assert [a.get_title() for a in fig.axes] == ["seps [4, 8] (8 GPUs)", "seps [8, 16] (16 GPUs)"]
    for a in fig.axes:
        assert "best hybrid (hpgo)" in lines_by_label(a)
    _, ax = plt.subplots()                # into one given axes: a shade and labels per layout
    plot.speedup_vs_gbs(res, ax=ax)
    labels = set(lines_by_label(ax))
    assert "best hybrid (hpgo) [4, 8]" in labels and "best hybrid (hpgo) [8, 16]" in labels
    fig = plot.speedup_vs_gbs(res, seps=[4, 8])
    assert "best hybrid (hpgo)" in lines_by_label(fig.axes[0])
    with pytest.raises(ValueError, match="not in the sweep"):
        plot.speedup_vs_gbs(res, seps=[2])
    with pytest.raises(ValueError):
        plot.speedup_vs_gbs([])
    rows = [dict(gbs=32, seps=(8,), dp=1.0, dp_p3=None, dp_overlap=2.0, hybrid=3.0,
                 stages=[(0, 1, 1, [0])]),
            dict(gbs=64, seps=(8,), dp=2.0, dp_p3=4.0, dp_overlap=3.0, hybrid=None, stages=None)]
    ax = plot.speedup_vs_gbs(rows).axes[0]
    lines = lines_by_label(ax)
    assert list(lines["DP + P3"].get_xdata()) == [64]
    assert list(lines["best hybrid (hpgo)"].get_xdata()) == [32]


def test_a_hybrid_plan_that_does_not_fit_is_crossed_out(tmp_path):
    rows = hpgo.sweep(XLNET, 1, [32, 64], [8, 16])
    ax = plot.speedup_vs_gbs(rows).axes[0]
    assert not any("does not fit" in k for k in lines_by_label(ax))   # every plan fits
    big = hpgo.model_from_states([1.0, 2.0, 3.0, 4.0], [2e9] * 4, [5e9] * 4, [2e9] * 4,
                                 [[], [0], [1], [2]], ["a", "b", "c", "d"], 1, 64)
    over = hpgo.sweep(big, 1, [64, 128], [8, 16])
    assert all(r.fits is False for r in over)
    fig = plot.speedup_vs_gbs(over)
    crossed = lines_by_label(fig.axes[0])["hybrid does not fit (1F1B peak over the GPU)"]
    assert list(crossed.get_xdata()) == [64, 128]
    assert list(crossed.get_ydata()) == [r.hybrid for r in over]
    fig.savefig(tmp_path / "over.png")
    assert (tmp_path / "over.png").read_bytes().startswith(PNG)


def test_the_note_under_the_sweep_figure_clears_its_x_label():
    rows = hpgo.sweep(XLNET, 1, [16, 32, 64, 128, 256], [8, 16])   # hybrid under DP + P3
    fig = plot.speedup_vs_gbs(rows)
    fig.canvas.draw()
    (note,) = [t for t in fig.texts if "optimistic bound" in t.get_text()]
    r = fig.canvas.get_renderer()
    below = note.get_window_extent(r)
    xlabel = fig.axes[0].xaxis.label.get_window_extent(r)
    assert below.y1 <= xlabel.y0   # under the label, not across it


def test_draws_into_given_axes():
    res = hpgo.sweep(XLNET, 1, [32, 64], [8, 16])
    fig, axes = plt.subplots(1, 2)
    assert plot.speedup_vs_gbs(res, ax=axes[1]) is fig
    assert not axes[0].get_lines() and axes[1].get_lines()
    with pytest.raises(TypeError):
        plot.speedup_vs_gbs(res, ax="not axes")


def test_speedup_vs_devices_figure3():
    f3 = hpgo.distir_figure3()
    fig = plot.speedup_vs_devices(f3)
    assert len(fig.axes) == 2
    dp, pp = (lines_by_label(a) for a in fig.axes)
    for b, ys in f3.dp.items():
        assert list(dp[f"batch {b}"].get_xdata()) == list(f3.devices)
        assert list(dp[f"batch {b}"].get_ydata()) == pytest.approx(ys)
    for k, ys in f3.pp.items():
        assert list(pp[f"K = {k}"].get_ydata()) == pytest.approx(ys)
    # the linear line is y = x up to where it leaves the panel, labelled there
    ax = fig.axes[0]
    ideal = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert len(ideal) == 1 and list(ideal[0].get_xdata()) == pytest.approx(ideal[0].get_ydata())
    assert max(ideal[0].get_ydata()) <= ax.get_ylim()[1] * (1 + 1e-9)
    assert any(t.get_text().startswith("linear") for t in ax.texts)
    fig = plot.speedup_vs_devices(f3, part="pp")
    assert len(fig.axes) == 1
    fig2, axes = plt.subplots(1, 2)
    assert plot.speedup_vs_devices(f3, ax=list(axes)) is fig2
    with pytest.raises(ValueError):
        plot.speedup_vs_devices(f3, ax=axes[0])
    with pytest.raises(ValueError):
        plot.speedup_vs_devices(f3, part="xy")


def test_speedup_vs_devices_mapping():
    fig = plot.speedup_vs_devices({"mine": {1: 1.0, 4: 3.0, 2: 1.8}}, ideal=False)
    ln = lines_by_label(fig.axes[0])["mine"]
    assert list(ln.get_xdata()) == [1, 2, 4] and list(ln.get_ydata()) == [1.0, 1.8, 3.0]
    fig = plot.speedup_vs_devices({"a": [1.0, 2.0]}, devices=[1, 2])
    assert list(lines_by_label(fig.axes[0])["a"].get_ydata()) == [1.0, 2.0]
    with pytest.raises(ValueError):
        plot.speedup_vs_devices({"a": [1.0, 2.0]})
    with pytest.raises(ValueError):
        plot.speedup_vs_devices({"a": [1.0]}, devices=[1, 2])


def test_grid_search_scatter_marks_the_best():
    rows = hpgo.grid_search(batch_size=1024, width=512, layers=8, devices=[1, 2, 4, 8])
    fig = plot.grid_search_scatter(rows)
    ax = fig.axes[0]
    base = next(r.throughput for r in rows if r.devices == 1)
    best = {}
    for r in rows:
        if r.devices not in best or r.throughput > best[r.devices].throughput:
            best[r.devices] = r
    # the best line joins the best configuration of every device count
    (line,) = [ln for ln in ax.get_lines()]
    assert list(line.get_xdata()) == sorted(best)
    assert list(line.get_ydata()) == pytest.approx([best[w].throughput / base for w in sorted(best)])
    # every configuration is a point, plus the ringed best ones
    n_points = sum(len(c.get_offsets()) for c in ax.collections)
    assert n_points == len(rows) + len(best)
    texts = [t.get_text() for t in ax.texts]
    for w, b in best.items():
        assert any(t.startswith(f"({b.dp},{b.tp},{b.pp},{b.microbatches})") for t in texts)
    fig = plot.grid_search_scatter([r for r in rows if r.devices > 1], annotate=False)
    assert "throughput" in fig.axes[0].get_ylabel() and not fig.axes[0].texts
    with pytest.raises(ValueError):
        plot.grid_search_scatter([])
    with pytest.raises(TypeError):
        plot.grid_search_scatter([object()])


def test_gantt_one_box_per_event():
    m = hpgo.model_from_torch_graph(XLNET, 1, 32)
    plan = best_plan(m, 1, 32, [2, 4])
    r = plan.simulate(m)
    fig = plot.gantt(r, unit="s")
    ax = fig.axes[0]
    boxes = bar_boxes(ax)
    assert len(boxes) == len(r.timeline)
    assert sorted((round(b[0], 12), round(b[1], 12)) for b in boxes) == sorted(
        (round(e.start, 12), round(e.duration, 12)) for e in r.timeline)
    colours = {plot.CATEGORY_COLORS[c] for c in ("forward", "backward", "communication")}
    assert {b[4] for b in boxes} == {to_rgba(c) for c in colours}
    # forward boxes of device 0 sit on row 0, in its compute band
    fwd = [e for e in r.timeline if e.device == 0 and e.name == "forward"]
    rows0 = [b for b in boxes if b[4] == to_rgba(plot.CATEGORY_COLORS["forward"]) and b[2] < 0.5]
    assert len(rows0) == len(fwd)
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "device 0 · stage 0"
    # the frame ends a little after the iteration, so that no op is cut by it
    assert ax.get_xlim()[1] == pytest.approx(r.iteration_time * 1.02)
    assert "iteration" in ax.get_title()


def test_gantt_device_subset_units_and_errors():
    r = hpgo.simulate_mlp(batch_size=256, width=256, layers=4, pp=2, microbatches=2)
    fig = plot.gantt(r, devices=[2, 1])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["device 2 · stage 1", "device 1 · stage 0"]
    assert len(bar_boxes(ax)) == sum(1 for e in r.timeline if e.device in (1, 2))
    assert "(µs)" in ax.get_xlabel() or "(ms)" in ax.get_xlabel()
    with pytest.raises(ValueError, match="not in the simulation"):
        plot.gantt(r, devices=[99])
    with pytest.raises(ValueError, match="unit"):
        plot.gantt(r, unit="hours")
    with pytest.raises(ValueError, match="timeline"):
        plot.gantt(hpgo.simulate_mlp(batch_size=256, width=256, layers=4, timeline=False))
    with pytest.raises(TypeError):
        plot.gantt(object())


@pytest.mark.parametrize("name,cat", [("forward", "forward"), ("backward", "backward"),
                                      ("MatMulGrad", "backward"), ("send", "communication"),
                                      ("recv", "communication"), ("all_reduce", "communication"),
                                      ("MPIAllreduce", "communication"), ("MatMul", "forward")])
def test_event_category(name, cat):
    assert plot.event_category(name) == cat


def test_plan_diagram_boxes_and_idle_gpus():
    m = hpgo.model_from_torch_graph(XLNET, 1, 128)
    plan = best_plan(m, 1, 128, [8, 16])
    fig = plot.plan_diagram(plan)
    ax = fig.axes[0]
    boxes = [b for b in bar_boxes(ax)]
    assert len(boxes) == sum(len(s.gpus) for s in plan.stages)
    for s in plan.stages:
        mine = [b for b in boxes if b[4] == to_rgba(STAGE_COLORS[s.index])]
        assert sorted(round(b[2] + 0.4) for b in mine) == list(s.gpus)
        assert {(b[0], b[1]) for b in mine} == {(s.first_state, s.num_states)}
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"GPU {g}" for g in range(16)]
    # a candidate on 15 of 16 GPUs leaves one idle GPU, hatched
    cand = next(p for p in hpgo.candidate_plans(m, 1, 128, [8, 16]) if p.num_gpus == 15)
    ax = plot.plan_diagram(cand).axes[0]
    idle = [c for c in ax.collections if c.get_hatch()]
    assert len(idle) == 1
    # HPGO's tuple with seps of our own
    t = hpgo.conductor_from_torch_graph_and_seps(XLNET, 1, 128, [8, 16]).py_orchestrate()
    ax = plot.plan_diagram(t, seps=[4, 8, 12, 16]).axes[0]
    assert len([a for a in ax.texts if a.get_text().startswith("machine")]) == 4
    with pytest.raises(ValueError):
        plot.plan_diagram(t, seps=[4, 8])
