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
