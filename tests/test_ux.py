"""The first hour of a new user: shipped example profiles, CLI hints and
checks, progress lines, the import error of an unbuilt checkout."""
import io
import json
import os
import subprocess
import sys

import pytest

import hpgo
from conftest import ROOT
from hpgo import cli, examples
from hpgo import progress as hprogress

XLNET = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "hpgo.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


# ---------------------------------------------------------------- hpgo.examples


def test_example_names_resolve_to_the_generated_profiles():
    for name in examples.SHIPPED:
        assert (ROOT / "profiles" / name / "graph.txt").is_file(), name
        assert examples.path(name).is_file()
    p = examples.path("transformer36")
    assert p.is_absolute() and p.name == "graph.txt"
    assert p.read_bytes() == (ROOT / "profiles" / "transformer36-v100" / "graph.txt").read_bytes()
    assert examples.path("bert48") == examples.path("BERT-48-V100")
    assert examples.batch_size("transformer36") == 1
    assert examples.batch_size("resnet50") == 32
    assert "transformer36-v100" in examples.names()
    with pytest.raises(ValueError, match="available: .*transformer36-v100"):
        examples.path("no-such-model")
    with pytest.raises(TypeError):
        examples.path(36)


def test_setup_ships_the_listed_profiles():
    text = (ROOT / "setup.py").read_text()
    assert "SHIPPED" in text and "BuildPyWithProfiles" in text
    manifest = (ROOT / "MANIFEST.in").read_text()
    for folder in ("tests", "profiles", "csrc", "examples"):
        assert f"graft {folder}" in manifest


def test_cli_example_plans_from_any_directory(tmp_path):
    r = run("plan", "--example", "transformer36", "--gbs", "128", "--seps", "8,16", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "speedup 14.8545" in r.stdout and r.stderr == ""
    # every plan shown says whether it fits in the GPUs' memory
    assert "memory: peak 4.05 of 14.90 GiB on a GPU under 1F1B with 16 micro-batches (fits)" \
        in r.stdout


# ---------------------------------------------------------------- wrong inputs


def test_seps_separated_by_spaces_are_one_layout(capsys):
    assert cli.main(["plan", XLNET, "--pbs", "1", "--gbs", "128", "--seps", "8", "16"]) == 0
    spaced = capsys.readouterr().out
    assert cli.main(["plan", XLNET, "--pbs", "1", "--gbs", "128", "--seps", "8,16"]) == 0
    assert capsys.readouterr().out == spaced
    assert cli._join_seps(["sweep", "p", "--seps", "8", "16", "--seps=4", "8", "--gbs", "64"]) == [
        "sweep", "p", "--seps", "8,16", "--seps=4,8", "--gbs", "64"]


def test_pbs_defaults_to_profile_json_and_a_different_one_warns(capsys):
    assert cli.main(["plan", XLNET, "--gbs", "128", "--seps", "8,16"]) == 0
    cap = capsys.readouterr()
    assert "pbs 1," in cap.out and cap.err == ""
    assert cli.main(["plan", XLNET, "--pbs", "4", "--gbs", "128", "--seps", "8,16"]) == 0
    err = capsys.readouterr().err
    assert "warning: --pbs 4 differs from the batch size 1 recorded in" in err


def test_pbs_is_needed_without_profile_json(tmp_path):
    g = tmp_path / "graph.txt"
    g.write_bytes((ROOT / "profiles" / "transformer36-v100" / "graph.txt").read_bytes())
    r = run("plan", g, "--gbs", "128", "--seps", "8,16")
    assert r.returncode == 2 and "--pbs is needed" in r.stderr


def test_simulate_a_saved_plan_uses_its_profile_and_refuses_another(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert cli.main(["plan", XLNET, "--pbs", "1", "--gbs", "64", "--seps", "4,8",
                     "-o", str(plan)]) == 0
    capsys.readouterr()
    assert hpgo.Plan.load(plan).profile == os.path.abspath(XLNET)   # found from anywhere
    r = run("simulate", "--plan", plan, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "iteration" in r.stdout
    other = ROOT / "profiles" / "resnet50-v100" / "graph.txt"
    r = run("simulate", other, "--plan", plan, "--pbs", "32")
    assert r.returncode == 2 and "another profile" in r.stderr, r.stderr
    model = hpgo.model_from_torch_graph(str(other), 32, 64)
    with pytest.raises(ValueError, match="another profile"):
        hpgo.Plan.load(plan).simulate(model)


def test_zoo_list_option_given_an_int_says_what_it_wants():
    r = run("profile", "zoo", "resnet50", "--set", "layers=3", "-o", "unused")
    assert r.returncode == 2
    assert "option layers must be 4 positive integers, one per stage (e.g. layers=3,4,6,3)" in r.stderr
    from hpgo import zoo

    with pytest.raises(ValueError, match="4 positive integers"):
        zoo.build("resnet50", 1, layers=[3, 4, 6])
    assert zoo.param_count("resnet50", layers=[3, 4, 6, 3]) == 25557032


def test_dot_says_which_renderer_part_is_missing(monkeypatch):
    from hpgo import dot
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    why = dot.missing_renderer()
    assert "dot program" in why
    try:
        import graphviz  # noqa: F401
        assert "Python package is installed" in why
    except ImportError:
        assert "pip install graphviz" in why


# ---------------------------------------------------------------- progress


def test_progress_line_has_an_eta():
    buf = io.StringIO()
    bar = hprogress.Progress(4, stream=buf, desc="sweep", unit="cases", min_interval=0)
    bar.start -= 10.0        # pretend 10 s went by
    bar.update(1)
    text = buf.getvalue()
    assert "1/4 cases" in text and " 25%" in text and "<00:30" in text
    bar.close()
    assert buf.getvalue().endswith("\r\x1b[K")
    assert hprogress.format_time(3723) == "1:02:03"
    assert hprogress.wanted(None, io.StringIO()) is False   # not a terminal, not Jupyter
    with pytest.raises(TypeError):
        hprogress.wanted("yes")


def test_sweep_with_progress_gives_identical_rows(capsys):
    gbs = [32] + list(range(64, 2049, 64))
    quiet = hpgo.sweep(XLNET, 1, gbs, [[8, 16], [8]], progress=False)
    shown = hpgo.sweep(XLNET, 1, gbs, [[8, 16], [8]], progress=True, threads=1)
    assert shown == quiet
    assert [r.candidates for r in shown] == [r.candidates for r in quiet]
    err = capsys.readouterr().err
    assert f"{2 * len(gbs)}/{2 * len(gbs)} cases" in err and "sweep [" in err


def test_grid_search_with_progress_gives_identical_rows(capsys):
    kw = dict(batch_size=2048, width=1024, layers=16, devices=[1, 2, 4, 8])
    assert hpgo.grid_search(**kw, progress=True) == hpgo.grid_search(**kw, progress=False)
    assert "grid search [" in capsys.readouterr().err


def test_cli_progress_bar_has_an_eta():
    class TTY(io.StringIO):
        def isatty(self):
            return True

    args = cli.build_parser().parse_args(
        ["sweep", XLNET, "--pbs", "1", "--gbs", "16:256", "--seps", "8,16"])
    err = TTY()
    assert cli.run_sweep(args, out=io.StringIO(), err=err) == 0
    assert "5/5 global batch sizes 100%" in err.getvalue() and "<00:00" in err.getvalue()


# ---------------------------------------------------------------- import from the source root


def test_unbuilt_checkout_import_says_what_to_do(tmp_path):
    # a copy of the package without its extension, imported from its parent (-S: no
    # site-packages, so neither an installed nor an editable hpgo comes first)
    import shutil

    pkg = tmp_path / "hpgo"
    shutil.copytree(ROOT / "hpgo", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    r = subprocess.run([sys.executable, "-S", "-c", "import hpgo"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={k: v for k, v in os.environ.items()
                                                    if k != "PYTHONPATH"})
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: hpgo's C extension (hpgo._core) is not built"), last
    assert "pip install -e ." in last and "another directory" in last


# ---------------------------------------------------------------- Jupyter display


def test_reprs_are_short_and_html_tables_are_compact():
    plan = hpgo.best_plan(XLNET, 1, 128, [8, 16])
    r = repr(plan)
    assert r.startswith("<hpgo.Plan speedup 14.8545") and "\n" not in r and len(r) < 200
    h = plan._repr_html_()
    assert h.startswith("<table") and "Embed-Token .. Layer_17" in h and "speedup 14.8545" in h
    plans = hpgo.candidate_plans(XLNET, 1, 128, [8, 16])
    assert repr(plans).startswith(f"<hpgo.PlanList {len(plans)} plans; best: speedup 14.8545")
    assert len(plans) == 18 and plans._repr_html_().count("<tr>") == 1 + 10 + 1 + 5
    assert str(plans) == plans.table()
    gbs = list(range(16, 16 * 385, 16))
    rows = hpgo.sweep(XLNET, 1, gbs, [[8, 16], [8]], progress=False)
    assert len(rows) == 768
    assert repr(rows) == "<hpgo.SweepResult 768 rows: 384 global batch sizes 16..6144 x seps 8,16; 8>"
    h = rows._repr_html_()
    assert len(h) < 5000 and "753 more rows" in h and h.count("<tr>") == 1 + 10 + 1 + 5
    assert str(rows).splitlines()[0].split()[:2] == ["gbs", "seps"]
    model = hpgo.model_from_torch_graph(XLNET, 1, 128)
    sim = plan.simulate(model)
    h = sim._repr_html_()
    assert "SimulationResult: iteration" in h and h.count("<tr>") == 1 + len(sim.stages)
    assert "<script" not in h and "&lt;" not in repr(plan)


def test_html_escapes_and_cuts():
    from hpgo._display import html_table

    h = html_table(["a<b"], [[f"<{i}>"] for i in range(30)], caption="x & y", head=3, tail=2)
    assert "a&lt;b" in h and "&lt;0&gt;" in h and "&lt;29&gt;" in h and "&lt;5&gt;" not in h
    assert "25 more rows" in h and "x &amp; y" in h


# ---------------------------------------------------------------- figures


@pytest.fixture
def plt():
    from optional_deps import need

    need("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_figures_made_here_are_closed_under_the_inline_backend(plt, monkeypatch):
    from hpgo import plot

    res = hpgo.sweep(XLNET, 1, [32, 64], [8, 16], progress=False)
    fig = plot.speedup_vs_gbs(res)
    assert plt.fignum_exists(fig.number)          # a script's plt.show() still shows it
    monkeypatch.setattr(plot, "_inline_backend", lambda: True)
    fig = plot.speedup_vs_gbs(res)
    assert not plt.fignum_exists(fig.number)      # Jupyter: shown once, as the cell's value
    own, ax = plt.subplots()
    assert plot.speedup_vs_gbs(res, ax=ax) is own and plt.fignum_exists(own.number)


def test_figure3_axes_fit_the_data(plt):
    from hpgo import plot

    f3 = hpgo.distir_figure3()
    fig = plot.speedup_vs_devices(f3)
    top = max(max(v) for v in f3.dp.values())
    assert top < fig.axes[0].get_ylim()[1] < top * 1.2
    top = max(max(v) for v in f3.pp.values())
    assert top < fig.axes[1].get_ylim()[1] < top * 1.2


def test_narrow_stage_is_labelled_and_gantt_panels_keep_ticks(plt):
    from hpgo import plot

    model = hpgo.model_from_torch_graph(XLNET, 1, 128)
    n = model.num_layers
    p = hpgo.Plan.from_hpgo((10.0, [(0, n - 2, 1, list(range(8))),
                                    (n - 2, n - 1, 1, list(range(8, 16)))]), model, [8, 16])
    fig = plot.plan_diagram(p)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "stage 0" in texts and "stage 1" in texts
    plan = hpgo.best_plan(XLNET, 1, 128, [8, 16])
    fig, axes = plt.subplots(2, 1, sharex=True)
    plot.gantt(plan.simulate(model), devices=[0, 8], ax=axes[0])
    plot.gantt(plan.simulate(model, schedule="gpipe"), devices=[0, 8], ax=axes[1])
    fig.canvas.draw()
    assert any(t.get_visible() and t.get_text() for t in axes[0].get_xticklabels())


def test_progress_waits_for_its_delay():
    buf = io.StringIO()
    bar = hprogress.Progress(3, stream=buf, delay=60.0)
    bar.update(1)
    bar.update(3)
    bar.close()
    assert buf.getvalue() == ""
