"""hpgo profile step (hpgo.profiler.step): whole training steps timed on one
GPU, eager and compiled.  The timing itself needs a GPU; here: the CLI's
checks, a CPU smoke run of the eager path (with PyTorch), and the shipped
H100 step profile against hpgo's own description of the same models."""
import json
from pathlib import Path

import pytest

import hpgo
from hpgo import cli
from optional_deps import need


def test_cli_refuses_unknown_modes(capsys):
    assert cli.main(["profile", "step", "-o", "x.json", "--modes", "eager,jit"]) == 2
    assert "--modes takes eager, compile, titan" in capsys.readouterr().err


def test_cli_refuses_no_modes_without_tp_shards(capsys):
    assert cli.main(["profile", "step", "-o", "x.json", "--modes", ""]) == 2
    assert "--modes is empty" in capsys.readouterr().err


def test_cli_refuses_unknown_float8_recipes_and_modes_without_them(capsys):
    assert cli.main(["profile", "step", "-o", "x.json", "--modes", "titan",
                     "--float8", "rowwise,mxfp8"]) == 2
    assert "--float8 takes tensorwise, rowwise, rowwise_with_gw_hp" in capsys.readouterr().err
    assert cli.main(["profile", "step", "-o", "x.json", "--modes", "eager,titan-fsdp",
                     "--float8", "rowwise"]) == 2
    assert "add one of them to --modes" in capsys.readouterr().err


def test_tp_shards_are_a_ranks_share_of_torchtitans_tp8_runs():
    """Each shard divides the heads, KV heads, FFN and vocabulary of its
    model by 8 at head size 128, and runs in one torchtitan mode."""
    from hpgo.profiler import step   # imports nothing heavy until it measures
    full = {"llama3-8b-tp8-4l": (4096, 32, 8, 14336), "llama3-70b-tp8-4l": (8192, 64, 8, 28672),
            "llama3-405b-tp8-4l": (16384, 128, 8, 53248)}
    assert {s[0] for s in step.TP_SHARDS} == set(full)
    for s in step.TP_SHARDS:
        h, a, kv, f = full[s[0]]
        assert (s[1], s[2] * 8, s[3] * 8, s[4] * 8, s[9]) == (h, a, kv, f, 128)
        assert s[6] == -(-128256 // 8) and s[10] in step.TITAN_MODES


def test_cpu_smoke_run_writes_what_it_returns(tmp_path):
    need("torch")
    from hpgo.profiler import step
    out = tmp_path / "steps.json"
    doc = step.measure(str(out), quick=True, modes=("eager",), device="cpu")
    assert json.loads(out.read_text()) == doc
    assert doc["format"] == step.FORMAT and doc["device"] == "cpu"
    (row,) = doc["samples"]
    assert row["mode"] == "eager" and row["steps"] == 3
    assert row["tokens_per_second"] == pytest.approx(row["micro_batch"] * row["seq"]
                                                     / row["step_seconds"])
    assert 0 < row["step_seconds_min"] <= row["step_seconds"]
    assert len(doc["attention"]) == 2
    assert all(a["fwd_bwd_seconds"] > 0 for a in doc["attention"])


def test_cpu_smoke_run_of_the_torchtitan_modes(tmp_path):
    """torchtitan's block (op-level checkpointing, compiled, flash SDPA, eager
    loss) with and without FSDP2 on a group of one, and the context-parallel
    blocks, on the CPU: every row written with its compile count and the
    forward + backward part."""
    need("torch")
    from hpgo.profiler import step
    out = tmp_path / "titan.json"
    doc = step.measure(str(out), quick=True, modes=("titan", "titan-fsdp", "titan-eager"),
                       device="cpu", cp_blocks=True, long_attention=False)
    assert json.loads(out.read_text()) == doc
    assert [r["mode"] for r in doc["samples"]] == ["titan", "titan-fsdp", "titan-eager"]
    assert all(r["fwd_bwd_seconds"] > 0 for r in doc["samples"])
    assert all(r["compiled_graphs"] >= 1 for r in doc["samples"][:2])
    assert "compiled_graphs" not in doc["samples"][2]
    assert doc["attention"] == [] and "titan modes" in doc["recipe"]
    kinds = [b["kind"] for b in doc["cp_blocks"]]
    assert kinds == ["diagonal", "all-queries-half-keys", "half-queries-all-keys",
                     "merge-half-rows"]
    with pytest.raises(ValueError, match="--power reads an NVIDIA GPU"):
        step.measure(str(tmp_path / "p.json"), quick=True, modes=("eager",), device="cpu",
                     power=True)
    with pytest.raises(ValueError, match="modes must be some of"):
        step.measure(str(tmp_path / "p.json"), quick=True, modes=("jit",), device="cpu")


def test_cpu_smoke_run_of_torchaos_float8_recipe(tmp_path):
    """The titan block again with its linears as torchao's Float8Linear
    (rowwise recipe), on the CPU: the bf16 row first, then the float8 one
    naming its recipe, linears and torchao version; every row keeps its
    last loss."""
    need("torch")
    need("torchao")
    import math
    from hpgo.profiler import step
    out = tmp_path / "f8.json"
    doc = step.measure(str(out), quick=True, modes=("titan",), device="cpu",
                       long_attention=False, float8=("rowwise",))
    assert json.loads(out.read_text()) == doc
    bf16, f8 = doc["samples"]
    assert "float8" not in bf16 and f8["float8"] == "rowwise"
    assert f8["float8_linears"] == 7 * f8["layers"] and f8["torchao"]
    assert all(math.isfinite(r["loss"]) for r in doc["samples"])
    assert "Float8LinearConfig.from_recipe_name" in doc["recipe"]
    with pytest.raises(ValueError, match="float8 recipes run in the titan or titan-full"):
        step.measure(str(tmp_path / "x.json"), quick=True, modes=("eager",), device="cpu",
                     float8=("rowwise",))
    with pytest.raises(ValueError, match="float8 runs one of"):
        step.measure_one(step.QUICK[0], 128, 2, "eager", None, float8="rowwise")


def _model(s):
    return hpgo.transformer(hidden=s["hidden"], ffn=s["ffn"], heads=s["heads"],
                            kv_heads=s["kv_heads"], layers=s["layers"], vocab=s["vocab"],
                            seq=s["seq"], tied=s["tied"], mlp="swiglu", norm="rmsnorm",
                            bias=False, learned_pos=False, dropout=False, flash=True,
                            causal_flops=True)


@pytest.mark.parametrize("name", ["h100-sxm5", "h100-sxm5-expandable"])
def test_shipped_h100_step_profile(name):
    from hpgo.profiler import step
    doc = json.loads(hpgo.examples.steps(name).read_text())
    assert doc["format"] == step.FORMAT and "H100" in doc["device"]
    got = {(s["name"], s["seq"], s["mode"]) for s in doc["samples"]}
    want = {(m[0], seq, mode) for m in step.MODELS for seq, _ in m[8]
            for mode in ("eager", "compile")}
    assert got == want
    for s in doc["samples"]:
        # the timed model is the one hpgo describes with the same shape
        assert _model(s).parameters == s["parameters"], s["name"]
        assert s["fwd_bwd_seconds"] + s["optimizer_seconds"] == pytest.approx(s["step_seconds"],
                                                                              rel=0.02)
        assert s["peak_reserved_bytes"] >= s["peak_allocated_bytes"]
        if s["mode"] == "compile":
            assert s["compiled_graphs"] == 2     # one block graph for every block, one loss


def test_steps_lookup_refuses_paths():
    with pytest.raises(ValueError, match="no step profile"):
        hpgo.examples.steps("../h100-sxm5")


def _reserve(name):
    import statistics
    doc = json.loads(hpgo.examples.steps(name).read_text())
    share = [(s["peak_reserved_bytes"] - s["peak_allocated_bytes"]) / s["peak_reserved_bytes"]
             for s in doc["samples"]]
    return doc, round(statistics.median(share), 3)


def test_default_headroom_is_the_measured_allocator_reserve():
    """hpgo.parallel.DEFAULT_HEADROOM: the caching allocator's reserve at the
    step's peak, (reserved - allocated) / reserved, median over the shipped
    H100 step profile with expandable segments (as the frameworks' launchers
    run); the stock allocator's, which the docs give, is larger."""
    from hpgo.parallel import DEFAULT_HEADROOM
    doc, share = _reserve("h100-sxm5-expandable")
    assert doc["allocator_conf"] == "expandable_segments:True"
    assert DEFAULT_HEADROOM == share == 0.033
    stock_doc, stock = _reserve("h100-sxm5")
    assert stock_doc["allocator_conf"] == "" and stock == 0.057
    assert "median 5.7 %" in (Path(__file__).resolve().parents[1] / "docs" / "autoplan.md").read_text()
