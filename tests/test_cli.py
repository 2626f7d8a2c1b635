"""The hpgo command line: plan, sweep, simulate (profile has its own tests)."""
import io
import json
import subprocess
import sys

import pytest

import hpgo
from conftest import ROOT
from hpgo import cli
from hpgo.plan import Plan
from optional_deps import need

XLNET = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")


def run(*args, timeout=120):
    """The real console entry point in a subprocess (python -m hpgo.cli)."""
    return subprocess.run([sys.executable, "-m", "hpgo.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_import_hpgo_does_not_import_matplotlib_or_pandas():
    code = ("import sys, hpgo, hpgo.plan, hpgo.dot, hpgo.cli, hpgo.plot; "
            "print('matplotlib' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


# ---------------------------------------------------------------- argument parsing


@pytest.mark.parametrize("text,want", [
    ("128", [128]), ("32,64,128", [32, 64, 128]), ("32:256", [32, 64, 128, 256]),
    ("32:200", [32, 64, 128]), ("16,24,32:128:32", [16, 24, 32, 64, 96, 128]),
    ("64,32:128", [64, 32, 128]), (" 8 , 16 ", [8, 16]),
])
def test_parse_gbs(text, want):
    assert cli.parse_gbs(text) == want


@pytest.mark.parametrize("text", ["", "a", "32:", "0", "-4", "64:32", "1:2:3:4", "8,,16", "1.5"])
def test_parse_gbs_errors(text):
    with pytest.raises(cli.CliError):
        cli.parse_gbs(text)


def test_parse_ints():
    assert cli.parse_ints("8,16") == [8, 16]
    for bad in ("8,x", "0", ""):
        with pytest.raises(cli.CliError):
            cli.parse_ints(bad)


# ---------------------------------------------------------------- plan


def test_plan_table_matches_the_planner(capsys):
    ref = hpgo.conductor_from_torch_graph_and_seps(XLNET, 1, 128, [8, 16]).py_orchestrate()
    assert cli.main(["plan", XLNET, "--pbs", "1", "--gbs", "128", "--seps", "8,16"]) == 0
    out = capsys.readouterr().out
    assert f"speedup {ref[0]:.4f}" in out
    for i, (a, b, u, g) in enumerate(ref[1]):
        last = b if i == len(ref[1]) - 1 else b - 1
        assert any(line.split()[:2] == [str(i), f"{a}-{last}"] for line in out.splitlines())


def test_plan_json_hpgo_and_save(tmp_path, capsys):
    ref = hpgo.conductor_from_torch_graph_and_seps(XLNET, 1, 64, [4, 8]).py_orchestrate()
    base = ["plan", XLNET, "--pbs", "1", "--gbs", "64", "--seps", "4,8"]
    assert cli.main(base + ["--json", "-o", str(tmp_path / "p.json")]) == 0
    printed = Plan.from_json(capsys.readouterr().out)
    assert printed.to_hpgo() == ref
    assert Plan.load(tmp_path / "p.json") == printed
    assert cli.main(base + ["--hpgo"]) == 0
    assert capsys.readouterr().out.strip() == repr(ref)
    assert cli.main(base + ["--candidates"]) == 0
    out = capsys.readouterr().out
    assert "candidates" in out and "bipartition" in out


def test_plan_dot_and_plot(tmp_path, capsys):
    base = ["plan", XLNET, "--pbs", "1", "--gbs", "64", "--seps", "4,8"]
    assert cli.main(base + ["--dot", str(tmp_path / "g.dot")]) == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    need("matplotlib")
    assert cli.main(base + ["--plot", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_profile_folder_is_accepted(capsys):
    folder = str(ROOT / "profiles" / "transformer36-v100")
    assert cli.main(["plan", folder, "--pbs", "1", "--gbs", "64", "--seps", "8", "--hpgo"]) == 0
    assert capsys.readouterr().out.strip() == repr(
        hpgo.conductor_from_torch_graph_and_seps(XLNET, 1, 64, [8]).py_orchestrate())


# ---------------------------------------------------------------- sweep


def test_sweep_csv_equals_hpgo_sweep(tmp_path, capsys):
    out_csv = tmp_path / "s.csv"
    assert cli.main(["sweep", XLNET, "--pbs", "1", "--gbs", "32:128", "--seps", "8,16",
                     "--seps", "4,8", "--csv", str(out_csv)]) == 0
    ref = hpgo.sweep(XLNET, 1, [32, 64, 128], [[8, 16], [4, 8]])
    assert out_csv.read_text() == ref.to_csv()
    table = capsys.readouterr().out.splitlines()
    # the rows, a note on the memory columns, then one on why the best hybrid can sit
    # below DP + P3
    assert len(table) == 2 + len(ref) + 2 + 3 and "docs/concepts.md" in table[-1]
    assert table[2 + len(ref) + 1].startswith("GiB, fits: the hybrid plan's peak memory")
    assert table[2].split()[:6] == ["32", "8,16", f"{ref[0].dp:.3f}", f"{ref[0].dp_overlap:.3f}",
                                    f"{ref[0].dp_p3:.3f}", f"{ref[0].hybrid:.3f}"]


def test_sweep_json(capsys):
    assert cli.main(["sweep", XLNET, "--pbs", "1", "--gbs", "32,64", "--seps", "8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["gbs"] for r in rows] == [32, 64]
    assert rows == json.loads(json.dumps(hpgo.sweep(XLNET, 1, [32, 64], [8]).to_dicts()))


def test_chunked_sweep_equals_one_sweep():
    calls = []
    got = cli.run_sweep_chunked(XLNET, 1, [16, 32, 64, 128, 256], [[8, 16], [8]], chunk=2,
                                callback=lambda d, t: calls.append((d, t)))
    ref = hpgo.sweep(XLNET, 1, [16, 32, 64, 128, 256], [[8, 16], [8]])
    assert got.to_dicts() == ref.to_dicts()
    assert calls == [(2, 5), (4, 5), (5, 5)]


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def sweep_args(*extra):
    return cli.build_parser().parse_args(
        ["sweep", XLNET, "--pbs", "1", "--gbs", "16:256", "--seps", "8,16", *extra])


def test_progress_bar_only_on_a_terminal():
    out, err = io.StringIO(), FakeTTY()
    assert cli.run_sweep(sweep_args(), out=out, err=err) == 0
    text = err.getvalue()
    assert "\r[" in text and "5/5" in text and "0/5" in text
    assert text.endswith("\r\x1b[K")   # the bar is cleared at the end
    assert "\r" not in out.getvalue()
    out2, err2 = io.StringIO(), io.StringIO()
    assert cli.run_sweep(sweep_args(), out=out2, err=err2) == 0
    assert err2.getvalue() == ""
    assert out2.getvalue() == out.getvalue()
    err3 = FakeTTY()
    assert cli.run_sweep(sweep_args("--no-progress"), out=io.StringIO(), err=err3) == 0
    assert err3.getvalue() == ""
    err4 = io.StringIO()
    assert cli.run_sweep(sweep_args("--progress"), out=io.StringIO(), err=err4) == 0
    assert "5/5" in err4.getvalue()


def test_sweep_plot(tmp_path):
    need("matplotlib")
    assert cli.main(["sweep", XLNET, "--pbs", "1", "--gbs", "32,64", "--seps", "8,16",
                     "--plot", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------- simulate


def test_simulate_trace_equals_simulate_plan(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert cli.main(["simulate", XLNET, "--pbs", "1", "--gbs", "64", "--seps", "4,8",
                     "--trace", str(trace), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    m = hpgo.model_from_torch_graph(XLNET, 1, 64)
    ref = hpgo.simulate_plan(m, hpgo.conductor_from_torch_graph_and_seps(XLNET, 1, 64, [4, 8])
                             .py_orchestrate(), seps=[4, 8])
    assert summary["iteration_time"] == ref.iteration_time
    assert [s["bubble"] for s in summary["stages"]] == ref.bubble
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(1 for e in events if e["ph"] == "X") == len(ref.timeline)


def test_simulate_saved_plan_and_schedule(tmp_path, capsys):
    p = tmp_path / "p.json"
    assert cli.main(["plan", XLNET, "--pbs", "1", "--gbs", "64", "--seps", "4,8", "-o", str(p)]) == 0
    capsys.readouterr()
    assert cli.main(["simulate", XLNET, "--plan", str(p), "--schedule", "gpipe", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    m = hpgo.model_from_torch_graph(XLNET, 1, 64)
    ref = Plan.load(p).simulate(m, schedule="gpipe")
    assert got["iteration_time"] == ref.iteration_time
    assert got["config"]["schedule"] == "gpipe"


def test_simulate_mlp(tmp_path, capsys):
    assert cli.main(["simulate", "--mlp", "--batch-size", "512", "--width", "256", "--layers", "8",
                     "--pp", "2", "--microbatches", "4"]) == 0
    out = capsys.readouterr().out
    ref = hpgo.simulate_mlp(batch_size=512, width=256, layers=8, pp=2, microbatches=4)
    assert f"iteration {ref.iteration_time * 1e3:.3f} ms" in out
    need("matplotlib")
    assert cli.main(["simulate", "--mlp", "--layers", "4", "--width", "256", "--batch-size", "64",
                     "--dp", "2", "--gantt", str(tmp_path / "g.png")]) == 0
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------- help and errors


def test_help_for_every_command():
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("plan", "sweep", "simulate", "profile"):
        assert cmd in r.stdout
        rc = run(cmd, "--help")
        assert rc.returncode == 0 and rc.stdout.startswith(f"usage: hpgo {cmd}"), cmd
    assert "A:B" in run("sweep", "--help").stdout


@pytest.mark.parametrize("args,words", [
    ([], "required"),
    (["nonsense"], "invalid choice"),
    (["plan", XLNET, "--pbs", "1", "--gbs", "128"], "--seps"),
    (["plan", XLNET, "--pbs", "x", "--gbs", "128", "--seps", "8"], "--pbs"),
    (["plan", "no/such/graph.txt", "--pbs", "1", "--gbs", "128", "--seps", "8,16"], "no such profile"),
    (["plan", XLNET, "--pbs", "1", "--gbs", "12a", "--seps", "8,16"], "expected N"),
    (["plan", XLNET, "--pbs", "1", "--gbs", "32,64", "--seps", "8,16"], "one global batch size"),
    (["plan", XLNET, "--pbs", "0", "--gbs", "128", "--seps", "8,16"], "--pbs"),
    (["plan", XLNET, "--pbs", "1", "--gbs", "128", "--seps", "16,8"], "must increase"),
    (["plan", str(ROOT / "README.md"), "--pbs", "1", "--gbs", "128", "--seps", "8"], "README.md"),
    (["sweep", XLNET, "--pbs", "1", "--gbs", "64:32", "--seps", "8"], "below start"),
    (["sweep", XLNET, "--pbs", "1", "--gbs", "32", "--seps", "8", "--threads", "-1"], "--threads"),
    (["simulate", XLNET], "--pbs, --gbs and --seps"),
    (["simulate", "--mlp", XLNET], "--mlp"),
    (["simulate", "--mlp", "--dp", "0"], "dp"),
    (["simulate", XLNET, "--plan", "missing.json"], "missing.json"),
    (["simulate", XLNET, "--pbs", "1", "--gbs", "64", "--seps", "8", "--schedule", "zigzag"],
     "invalid choice"),
    # a model preset where a profile or --model belongs
    (["plan", "llama3-8b", "--pbs", "1", "--gbs", "8", "--seps", "8"], "--model llama3-8b"),
    (["simulate", "llama3-8b", "--cluster", "dgx-h100", "--tp", "8", "--global-batch", "8"],
     "give it as --model llama3-8b"),
    (["autoplan", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "8"],
     "give the model as --model llama3-8b"),
    (["autoplan", "no-such-thing", "--cluster", "dgx-h100", "--global-batch", "8"],
     "--model --hf-config --profile is required"),
])
def test_bad_arguments_give_one_line(args, words):
    r = run(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hpgo")
    assert words in lines[0], lines[0]


def test_malformed_profile_is_one_line_naming_file_and_line(tmp_path):
    g = tmp_path / "graph.txt"
    g.write_text(
        "node1 -- Input -- forward_compute_time=0, backward_compute_time=0, activation_size=1, parameter_size=0\n"
        "node2 -- a -- forward_compute_time=fast, backward_compute_time=0.01, activation_size=4, parameter_size=8\n"
        "\tnode1 -- node2\n")
    for cmd in (["plan"], ["sweep"], ["simulate"]):
        r = run(*cmd, g, "--pbs", "1", "--gbs", "4", "--seps", "8")
        assert r.returncode == 2 and "Traceback" not in r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert f"{g}:2:" in line, line


def test_profile_subcommand_still_works():
    r = run("profile", "zoo", "--list")
    assert r.returncode == 0 and "resnet50" in r.stdout
    r = run("profile", "zoo", "no-such-model", "-o", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
