"""`hpgo profile zoo|torch` command line (hpgo.profile_cli)."""
import pytest

from hpgo.cli import main
from hpgo.graphfile import read_graph, read_json


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_zoo_to_folder(tmp_path, capsys):
    rc, out, err = run(capsys, "profile", "zoo", "resnet50", "--device", "V100", "--batch-size", "32",
                       "-o", str(tmp_path / "r"))
    assert rc == 0 and "25,557,032 parameters" in out and err == ""
    p = read_graph(tmp_path / "r" / "graph.txt")
    assert len(p.nodes) == 176
    meta = read_json(tmp_path / "r" / "profile.json").meta
    assert meta["batch_size"] == 32 and meta["device"]["name"] == "V100" and meta["dtype"] == "fp32"


def test_zoo_options_and_list(tmp_path, capsys):
    rc, _, _ = run(capsys, "profile", "zoo", "gpt", "--set", "layers=3", "--set", "hidden=128",
                   "--set", "heads=4", "--set", "seq=64", "--device", "H100", "--dtype", "bf16",
                   "-o", str(tmp_path / "g.txt"))
    assert rc == 0
    p = read_graph(tmp_path / "g.txt")
    assert sum(n.desc.startswith("layer_") for n in p.nodes) == 3
    rc, out, _ = run(capsys, "profile", "zoo", "--list")
    assert rc == 0 and "amoebanet-36" in out and "H100" in out


@pytest.mark.parametrize("argv, msg", [
    (["zoo", "resnet5", "-o", "x"], "unknown zoo model 'resnet5'"),
    (["zoo", "resnet50", "--device", "P100", "-o", "x"], "unknown device 'P100'"),
    (["zoo", "resnet50", "--dtype", "bf16", "-o", "x"], "no published bf16"),
    (["zoo", "resnet50"], "-o/--output is required"),
    (["zoo", "gpt", "--set", "layers", "-o", "x"], "KEY=VALUE"),
    (["zoo", "resnet50", "--batch-size", "0", "-o", "x"], "--batch-size"),
    (["torch", "nosuchmodule_xyz:f", "-o", "x"], "cannot import"),
    (["torch", "hpgo.profiler.examples", "-o", "x"], "MODULE:FUNCTION"),
])
def test_errors_are_one_line(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "profile", *argv)
    assert rc == 2 and msg in err and err.count("\n") == 1 and err.startswith("hpgo profile: error:")
    assert not (tmp_path / "x").exists()


def test_torch_factory(tmp_path, capsys):
    pytest.importorskip("torch")
    rc, out, err = run(capsys, "profile", "torch", "hpgo.profiler.examples:branchy", "--arg", "width=16",
                       "--warmup", "0", "--repeat", "1", "--threads", "1", "-o", str(tmp_path / "b"))
    assert rc == 0, err
    meta = read_json(tmp_path / "b" / "profile.json").meta
    assert meta["model"] == "branchy" and meta["batch_size"] == 32 and meta["device_type"] == "cpu"
    f = tmp_path / "m.py"
    f.write_text("import torch\ndef build():\n    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())\n")
    rc, _, err = run(capsys, "profile", "torch", f"{f}:build", "--input-shape", "5,8", "--repeat", "1",
                     "--warmup", "0", "-o", str(tmp_path / "m"))
    assert rc == 0, err
    assert read_json(tmp_path / "m" / "profile.json").meta["batch_size"] == 5
    rc, _, err = run(capsys, "profile", "torch", f"{f}:build", "-o", str(tmp_path / "n"))
    assert rc == 2 and "--input-shape" in err
