"""What every answer says about the published runs of its stack
(hpgo.validation.checked_note, hpgo/checked_runs.json): the shipped errors are
the ones the checks give today, each simulation quotes its stack's, and the
file is read with clear errors."""
import json
import pathlib

import pytest

import hpgo
from hpgo import graphfile, validation
from hpgo.cli import main

from conftest import shared_path

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_shipped_errors_are_what_the_checks_give():
    """Every run the shipped file quotes, simulated now as published, gives
    the shipped error (to the file's 4 decimals), and no checked run is
    missing: regenerate with benchmarks/validate_published.py
    --write-checked hpgo/checked_runs.json after a change to the model."""
    got = validation.checked_runs(shared_path("reference", "published_runs.csv"),
                                  ROOT / "benchmarks" / "further_published_runs.csv",
                                  shared_path("reference", "korthikanti2022.csv"))
    shipped = {(b.stack, run): err for b in validation.checked_bands() for run, err in b.runs}
    now = {(key, run): err for key, run, err in got}
    assert set(now) == set(shipped), "regenerate hpgo/checked_runs.json"
    for k, err in now.items():
        assert err == pytest.approx(shipped[k], abs=6e-5), (k, "regenerate hpgo/checked_runs.json")


def test_each_band_is_one_stack_and_its_figures_come_from_its_runs():
    bands = validation.checked_bands()
    keys = [b.stack for b in bands]
    assert len(keys) == len(set(keys))
    stacks = {(k.stack, k.gpus, k.precision) for k in keys}
    # the stacks the published runs cover
    assert ("Megatron-LM / NeMo", "Hopper", "fp8") in stacks
    assert ("PyTorch (torchtitan, OLMo-core)", "Hopper", "16-bit") in stacks
    assert ("Megatron-LM / NeMo", "Ampere", "16-bit") in stacks
    assert ("PyTorch eager", "Volta", "16-bit") in stacks
    for b in bands:
        errs = [e for _, e in b.runs]
        assert b.low == min(errs) and b.high == max(errs) and b.low <= b.high
        assert min(abs(e) for e in errs) <= b.median <= max(abs(e) for e in errs)
        text = str(b)
        assert text.startswith(f"checked on {len(b.runs)} published ")
        assert f"{b.median * 100:.1f} %" in text and f"{b.high * 100:+.1f} %" in text


def _sim(model, cluster, plan, precision="bf16"):
    return hpgo.simulate(model, cluster, plan, precision=precision, timeline=False)


def test_a_simulation_quotes_its_stacks_published_runs():
    m = hpgo.transformer("llama3-8b")
    p = hpgo.ParallelPlan(global_batch=16, dp=8, micro_batch=2, recompute="full")
    h100 = hpgo.Cluster.preset("dgx-h100", nodes=1)
    band = {(b.stack.stack, b.stack.gpus, b.stack.precision, b.stack.moe): b
            for b in validation.checked_bands()}
    r = _sim(m, h100, p)
    assert r.checked == str(band["Megatron-LM / NeMo", "Hopper", "16-bit", False])
    assert r.checked in r.assumptions() and "assumes:" in r._repr_html_()
    assert _sim(m, h100, p, "fp8").checked == str(band["Megatron-LM / NeMo", "Hopper", "fp8", False])
    # the same plan on torchtitan's kernels and on its 500 W H100s
    tt = hpgo.ParallelPlan(global_batch=16, dp=8, micro_batch=2, zero=3, kernels="compile",
                           recompute="full")
    teton = hpgo.Cluster.preset("grand-teton-h100", nodes=1)
    assert _sim(m, teton, tt).checked == str(
        band["PyTorch (torchtitan, OLMo-core)", "Hopper", "16-bit", False])
    # an H200 is the same die; an A100's runs are another band
    assert _sim(m, hpgo.Cluster.preset("dgx-h200", nodes=1), p).checked == r.checked
    a100 = _sim(m, hpgo.Cluster.preset("dgx-a100-80gb", nodes=1), p)
    assert a100.checked == str(band["Megatron-LM / NeMo", "Ampere", "16-bit", False])
    # a mixture-of-experts model is its own band
    moe = hpgo.transformer("qwen3-30b-a3b")
    pm = hpgo.ParallelPlan(global_batch=16, dp=8, ep=8, micro_batch=1, recompute="full")
    assert _sim(moe, h100, pm, "fp8").checked == str(band["Megatron-LM / NeMo", "Hopper", "fp8", True])


def test_what_no_published_run_is_like_says_so_or_nothing():
    m = hpgo.transformer("llama3-8b")
    p = hpgo.ParallelPlan(global_batch=16, dp=8, micro_batch=2, recompute="full")
    got = _sim(m, hpgo.Cluster.preset("h100-pcie", nodes=1), p).checked
    assert got.startswith("not checked against published runs on ") and "H100-PCIe" in got
    # the V100's published runs are Megatron-LM v1.0's, eager PyTorch on a DGX-2H:
    # a DGX-1's V100 is the same generation, Megatron-Core's fused kernels are not checked there
    for preset in ("dgx1-v100", "dgx2h-v100"):
        v100 = hpgo.Cluster.preset(preset, nodes=1)
        assert (_sim(m, v100, p, "fp16").checked ==
                "no published dense 16-bit Megatron-LM / NeMo runs on Volta GPUs checked")
        eager = hpgo.ParallelPlan(global_batch=16, dp=8, micro_batch=2, recompute="full",
                                  kernels="eager")
        assert _sim(m, v100, eager, "fp16").checked.startswith(
            "checked on 2 published dense 16-bit PyTorch eager runs on Volta GPUs")
    # the B200's published runs are fp8 ones
    b200 = hpgo.Cluster.preset("dgx-b200", nodes=1)
    assert _sim(m, b200, p, "fp8").checked.startswith("checked on 4 published dense fp8 ")
    assert (_sim(m, b200, p).checked ==
            "no published dense 16-bit Megatron-LM / NeMo runs on Blackwell GPUs checked")
    # a stack with no published run on that generation
    ds = hpgo.ParallelPlan(global_batch=16, dp=8, micro_batch=2, recompute="full",
                           optimizer_impl="deepspeed_bf16")
    got = _sim(m, hpgo.Cluster.preset("dgx-h100", nodes=1), ds).checked
    assert got == "no published dense 16-bit DeepSpeed runs on Hopper GPUs checked"
    # fp32 and models that are not transformers: no published run is like them
    assert _sim(m, hpgo.Cluster.preset("dgx-h100", nodes=1), p, "fp32").checked is None
    chain = hpgo.profile_model(graphfile.chain(
        [("Input", 0, 0, 0, 0)] + [(f"l{i}", 1.0, 2.0, 1e6, 4e6) for i in range(4)],
        {"batch_size": 1}))
    r = hpgo.simulate(chain, hpgo.Cluster.preset("dgx-h100", nodes=1),
                      hpgo.ParallelPlan(global_batch=8, dp=2), timeline=False)
    assert r.checked is None and "checked" not in r.assumptions()


def test_cli_and_autoplan_print_it(capsys):
    assert main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--dp", "8",
                 "--global-batch", "16", "--micro-batch", "2", "--recompute", "full"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("assumes:"))
    assert "checked on " in line and "Megatron-LM / NeMo runs on Hopper GPUs" in line
    assert main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--dp", "8",
                 "--global-batch", "16", "--micro-batch", "2", "--recompute", "full",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["checked"] in line
    r = hpgo.autoplan("llama3-8b", hpgo.Cluster.preset("dgx-h100", nodes=1), 16, top=2)
    assert r.table().splitlines()[-1] == r[0].result.checked
    assert r[0].result.checked in r._repr_html_() or "checked on" in r._repr_html_()
    assert all(row["checked"] == r[0].result.checked for row in r.rows())


def _write(tmp_path, doc):
    p = tmp_path / "checked.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


@pytest.mark.parametrize("doc, match", [
    ("{", "not valid JSON"),
    ({"format": "other", "bands": []}, "format must be"),
    ({"format": "hpgo-checked-runs-1", "bands": {}}, "'bands' must be a list"),
    ({"format": "hpgo-checked-runs-1", "bands": [{"stack": "x"}]}, r"bands\[0\] is malformed"),
    ({"format": "hpgo-checked-runs-1",
      "bands": [{"stack": "x", "gpus": "Hopper", "precision": "fp8", "moe": False, "runs": []}]},
     r"bands\[0\].runs must hold"),
    ({"format": "hpgo-checked-runs-1",
      "bands": [{"stack": "x", "gpus": "Hopper", "precision": "fp8", "moe": False,
                 "runs": [["a", "fast"]]}]}, r"bands\[0\] is malformed"),
])
def test_a_malformed_file_names_the_file_and_the_field(tmp_path, doc, match):
    p = _write(tmp_path, doc)
    with pytest.raises(ValueError, match=match) as e:
        validation.checked_bands(p)
    assert str(p) in str(e.value)


def test_a_written_file_reads_back(tmp_path, monkeypatch):
    """write_checked writes what checked_bands reads, and a failed write
    leaves the old file."""
    key = validation.Stack("Megatron-LM / NeMo", "Hopper", "fp8", False)
    monkeypatch.setattr(validation, "checked_runs",
                        lambda *a: [(key, "run-a", 0.05), (key, "run-b", -0.021)])
    p = tmp_path / "c.json"
    bands = validation.write_checked(p, "r", "f", "k")
    back = validation.checked_bands(p)
    assert back == bands and back[0].runs == (("run-a", 0.05), ("run-b", -0.021))
    assert back[0].median == pytest.approx(0.0355)
    old = p.read_text()
    monkeypatch.setattr(validation, "checked_runs", lambda *a: [(key, "run-c", float("nan"))])
    with pytest.raises(ValueError):
        validation.write_checked(p, "r", "f", "k")
    assert p.read_text() == old


def test_time_and_cost_to_train_at_the_checked_errors(capsys):
    """With tokens= and price=, the days and the cost at the lowest and the
    highest error of the stack's published runs: days x (1 + error), the
    model's own figures unchanged."""
    m = hpgo.transformer("llama3-8b")
    p = hpgo.ParallelPlan(global_batch=16, dp=8, micro_batch=2, recompute="full")
    h100 = hpgo.Cluster.preset("dgx-h100", nodes=1)
    r = hpgo.simulate(m, h100, p, tokens=1e11, price=2.0, timeline=False)
    band = validation.checked_band(p, h100, "bf16", m)
    assert r.checked_errors == (band.low, band.high) and band.low < 0 < band.high
    lo, hi = r.days_band
    assert lo == pytest.approx(r.days * (1 + band.low)) and hi == pytest.approx(r.days * (1 + band.high))
    assert lo < r.days < hi
    clo, chi = r.cost_band
    assert clo == pytest.approx(r.cost * (1 + band.low)) and chi == pytest.approx(r.cost * (1 + band.high))
    assert f"{lo:,.1f}-{hi:,.1f} days" in r.train_summary() and f"${chi:,.0f}" in r.summary()
    # the plain figures are the model's, as without a band
    plain = hpgo.simulate(m, h100, p, timeline=False)
    assert r.iteration_time == plain.iteration_time
    assert r.days == pytest.approx(1e11 / plain.tokens_per_second / 86400)
    # without tokens, or without price, or with no checked run: nothing to band
    assert plain.days_band is None and plain.cost_band is None
    assert hpgo.simulate(m, h100, p, tokens=1e11, timeline=False).cost_band is None
    pcie = hpgo.simulate(m, hpgo.Cluster.preset("h100-pcie", nodes=1), p, tokens=1e11,
                         timeline=False)
    assert pcie.checked_errors is None and pcie.days_band is None
    assert "checked runs" not in pcie.train_summary()
    # the command line prints and writes them
    args = ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--dp", "8",
            "--global-batch", "16", "--micro-batch", "2", "--recompute", "full",
            "--tokens", "1e11", "--price", "2"]
    assert main(args) == 0
    assert f"{lo:,.1f}-{hi:,.1f} days" in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["days_band"] == pytest.approx([lo, hi]) and d["cost_band"] == pytest.approx([clo, chi])
    # autoplan: the rows carry them, the line under the table gives plan 1's
    a = hpgo.autoplan(m, h100, 16, top=2, tokens=1e11, price=2.0)
    best = a[0].result
    assert a.rows()[0]["days_band"] == best.days_band
    last = a.table().splitlines()[-1]
    assert last.startswith(best.checked) and (
        f"plan 1 trains in {best.days_band[0]:,.1f}-{best.days_band[1]:,.1f} days" in last)
    assert f"{best.days_band[0]:,.1f}-{best.days_band[1]:,.1f} days" in a._repr_html_()
