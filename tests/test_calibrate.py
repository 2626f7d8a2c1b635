"""GPU calibration: the optional fp8 and attention curves of a GPU, the
kernel-time API, fitting curves to a kernel profile (hpgo.calibrate) and
the H100 and H200 profiles measured with hpgo profile kernels."""
import dataclasses
import json
import math
from pathlib import Path

import pytest

import hpgo
from hpgo import calibrate, validation

ROOT = Path(__file__).resolve().parents[1]
H100_KERNELS = ROOT / "profiles" / "h100-sxm5-kernels.json"
H100 = hpgo.Cluster.preset("dgx-h100")
# the H100 on Calculon's published curves (capped at its MAMF, 794.5 / 989),
# without the optional fp8 and attention curves the preset carries
CALCULON = H100.with_gpu(
    matrix_efficiency=((128e9, 794.5 / 989), (16e9, 794.5 / 989), (1e9, 0.6), (0.0, 0.1)),
    fp8_matrix_efficiency=(), attention_efficiency=())


# -- kernel time and the optional curves ---------------------------------------
def _eff(steps, x):
    return next(e for t, e in steps if x >= t)


def test_kernel_time_is_compute_at_its_curve_plus_memory_traffic():
    g = CALCULON.gpu
    for flops, nbytes in ((3e12, 4e8), (5e9, 2e7), (1e8, 3e5)):
        want = (flops / (g.bf16_flops * _eff(g.matrix_efficiency, flops))
                + nbytes / (g.memory_bandwidth * _eff(g.memory_efficiency, nbytes)))
        assert CALCULON.kernel_time(flops, nbytes) == pytest.approx(want, rel=1e-12)
    v = CALCULON.kernel_time(2e9, 1e8, kind="vector")
    assert v == pytest.approx(2e9 / (g.vector_flops * _eff(g.vector_efficiency, 2e9))
                              + 1e8 / (g.memory_bandwidth * _eff(g.memory_efficiency, 1e8)))
    # fp8 runs at twice the bf16 peak on the same curve; without an attention
    # curve, attention is priced as a GEMM
    assert CALCULON.kernel_time(1e12, dtype="fp8") == pytest.approx(CALCULON.kernel_time(1e12) / 2, rel=1e-4)
    assert CALCULON.kernel_time(1e12, kind="attention") == CALCULON.kernel_time(1e12)


def test_optional_curves_apply_to_their_kernels_only():
    c = CALCULON.with_gpu(fp8_matrix_efficiency=((0.0, 0.4),), attention_efficiency=((0.0, 0.25),))
    g = c.gpu
    assert c.kernel_time(1e12, dtype="fp8") == pytest.approx(1e12 / (g.fp8_flops * 0.4))
    assert c.kernel_time(1e12, kind="attention") == pytest.approx(1e12 / (g.bf16_flops * 0.25))
    assert c.kernel_time(1e12) == CALCULON.kernel_time(1e12)          # bf16 GEMMs unchanged
    # the step model uses them: fp8 training slows down, bf16 does not
    m, p = hpgo.transformer("llama3-8b", seq=4096), hpgo.ParallelPlan(global_batch=8, micro_batch=1)
    one = hpgo.Cluster.preset("dgx-h100", nodes=1)
    slow = dataclasses.replace(one, gpu=g)
    t = {(cl.name, prec): hpgo.simulate(m, cl, p, precision=prec, timeline=False).iteration_time
         for cl in (one, dataclasses.replace(slow, name="slow")) for prec in ("bf16", "fp8")}
    assert t["slow", "fp8"] > 1.3 * t[one.name, "fp8"]
    assert t["slow", "bf16"] > t[one.name, "bf16"]               # only through attention
    assert t["slow", "bf16"] < 1.3 * t[one.name, "bf16"]


def test_optional_curves_round_trip_and_old_descriptions_still_load(tmp_path):
    c = CALCULON.with_gpu(attention_efficiency=((1e9, 0.5), (0.0, 0.1)))
    assert hpgo.Cluster.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert hpgo.Cluster.from_dict(json.loads(json.dumps(H100.to_dict()))) == H100
    old = CALCULON.to_dict()
    del old["gpu"]["fp8_matrix_efficiency"], old["gpu"]["attention_efficiency"]
    assert hpgo.Cluster.from_dict(old) == CALCULON
    c.save(tmp_path / "c.json")
    assert hpgo.Cluster.load(tmp_path / "c.json") == c


@pytest.mark.parametrize("bad, match", [
    (dict(fp8_matrix_efficiency=((1.0, 0.5),)), "last step"),
    (dict(attention_efficiency=((0.0, 1.5),)), "efficiency"),
    (dict(attention_efficiency=((0.0, 0.5), (1.0, 0.4))), "decrease|last step"),
])
def test_bad_optional_curves_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        H100.with_gpu(**bad)


@pytest.mark.parametrize("args, match", [
    (dict(flops=-1.0), "finite"), (dict(flops=math.inf), "finite"), (dict(nbytes=math.nan), "finite"),
    (dict(dtype="int4"), "dtype"), (dict(kind="conv"), "kind"),
])
def test_bad_kernel_time_arguments(args, match):
    a = {"flops": 1e9, "nbytes": 0.0, **args}
    with pytest.raises(ValueError, match=match):
        H100.kernel_time(a.pop("flops"), a.pop("nbytes"), **a)


def test_kernel_time_refuses_a_data_type_the_gpu_lacks():
    a100 = hpgo.Cluster.preset("dgx-a100-80gb")
    with pytest.raises(ValueError, match="no matrix rate"):
        a100.kernel_time(1e9, dtype="fp8")


# -- fitting ----------------------------------------------------------------------
TRUE = H100.with_gpu(
    memory_efficiency=tuple(zip(calibrate.MEMORY_STEPS, (0.85, 0.7, 0.6, 0.3, 0.1, 0.02))),
    matrix_efficiency=tuple(zip(calibrate.MATRIX_STEPS, (0.72, 0.68, 0.6, 0.45, 0.2, 0.08, 0.03))),
    fp8_matrix_efficiency=tuple(zip(calibrate.MATRIX_STEPS, (0.65, 0.6, 0.45, 0.3, 0.1, 0.04, 0.02))),
    attention_efficiency=tuple(zip(calibrate.ATTENTION_STEPS, (0.55, 0.4, 0.2, 0.12, 0.05, 0.02))))


def synthetic(cluster=TRUE):
    """A kernel profile whose times are the model's on `cluster`."""
    s = []
    for p in range(16, 32):
        s.append({"op": "copy", "dtype": "bf16", "flops": 0, "bytes": 2.0 ** p,
                  "seconds": cluster.kernel_time(0, 2.0 ** p)})
    for m in (64, 256, 1024, 4096, 16384):
        for k in (768, 2048, 8192):
            for n in (1024, 4096, 14336):
                fl = 2.0 * m * k * n
                for dt, isz in (("bf16", 2), ("fp8", 1)):
                    b = isz * (m * k + k * n) + 2 * m * n
                    s.append({"op": "gemm", "dtype": dt, "flops": fl, "bytes": b,
                              "seconds": cluster.kernel_time(fl, b, dtype=dt)})
    for seq in (256, 1024, 2048, 4096, 8192, 16384):
        for heads in (8, 32):
            fl = 2.0 * heads * seq * seq * 128
            for op, f in (("attention_fwd", 1.0), ("attention_bwd", 2.5)):
                s.append({"op": op, "dtype": "bf16", "name": "x cudnn", "flops": f * fl,
                          "bytes": 1e7, "seconds": cluster.kernel_time(f * fl, 1e7, kind="attention")})
                s.append({"op": op, "dtype": "bf16", "name": "x flash", "flops": f * fl,
                          "bytes": 1e7, "seconds": 3 * cluster.kernel_time(f * fl, 1e7, kind="attention")})
    return {"format": calibrate.FORMAT, "device": "synthetic", "samples": s}


def test_fit_recovers_the_curves_that_produced_the_times():
    prof = calibrate.from_dict(synthetic())
    gpu = calibrate.fit(prof, H100)
    assert gpu.memory_efficiency == TRUE.gpu.memory_efficiency
    for f in ("matrix_efficiency", "fp8_matrix_efficiency", "attention_efficiency"):
        for (t, e), (t0, e0) in zip(getattr(gpu, f), getattr(TRUE.gpu, f)):
            assert t == t0 and e == pytest.approx(e0, abs=2e-4), f     # cuDNN samples only
    assert gpu.name.endswith("(measured)") and gpu.bf16_flops == H100.gpu.bf16_flops
    for row in calibrate.compare(prof, gpu):
        if row.op != "attention_fwd" and row.op != "attention_bwd":
            assert row.median == pytest.approx(1.0, abs=2e-3), row
    # against Calculon's curves the same kernels are far off
    assert max(abs(r.median - 1) for r in calibrate.compare(prof, CALCULON)) > 0.3


def test_fit_and_compare_leave_their_inputs_unchanged():
    d = synthetic()
    before = json.dumps(d)
    prof = calibrate.from_dict(d)
    calibrate.fit(prof, H100)
    calibrate.compare(prof, H100)
    assert json.dumps(d) == before


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update(format="x"), "format"),
    (lambda d: d.update(samples=[]), "non-empty"),
    (lambda d: d["samples"].__setitem__(3, 7), "sample 3: must be an object"),
    (lambda d: d["samples"][5].update(seconds=0), "sample 5: seconds"),
    (lambda d: d["samples"][5].update(seconds="1"), "sample 5: seconds must be a number"),
    (lambda d: d["samples"][2].update(flops=-1), "sample 2: flops"),
    (lambda d: d["samples"][2].update(dtype="int8"), "sample 2: unknown dtype"),
    (lambda d: d["samples"][2].update(op=None), "sample 2"),
])
def test_malformed_profiles_name_the_problem(mutate, match):
    d = synthetic()
    mutate(d)
    with pytest.raises(ValueError, match=match):
        calibrate.from_dict(d)


def test_a_profile_without_copies_or_gemms_cannot_be_fitted():
    d = synthetic()
    d["samples"] = [s for s in d["samples"] if s["op"] != "copy"]
    with pytest.raises(ValueError, match="no copy samples"):
        calibrate.fit(calibrate.from_dict(d))
    d = synthetic()
    d["samples"] = [s for s in d["samples"] if s["op"] == "copy"]
    with pytest.raises(ValueError, match="no bf16 GEMM"):
        calibrate.fit(calibrate.from_dict(d))


def test_load_names_the_file_of_a_broken_profile(tmp_path):
    p = tmp_path / "k.json"
    p.write_text('{"format": "hpgo-gpu-kernels/1",\n "samples": [\n')
    with pytest.raises(ValueError, match="k.json"):
        calibrate.load(p)
    with pytest.raises((OSError, ValueError), match="missing.json"):
        calibrate.load(tmp_path / "missing.json")


def test_command_line(tmp_path, capsys):
    p = tmp_path / "k.json"
    p.write_text(json.dumps(synthetic()))
    out = tmp_path / "cluster.json"
    assert calibrate.main([str(p), "--nodes", "2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fitted curves" in text and "measured/model" in text
    c = hpgo.Cluster.load(out)
    assert c.gpus == 16 and c.name == "dgx-h100-measured" and c.gpu.attention_efficiency
    assert calibrate.main([str(tmp_path / "nope.json")]) == 2
    assert "error:" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    assert calibrate.main([str(tmp_path / "bad.json")]) == 2


# -- the measured H100 and H200 ----------------------------------------------------
MEASURED = [("h100-sxm5", "dgx-h100"), ("h200-sxm", "dgx-h200")]


def _measured(name, preset):
    path = ROOT / "profiles" / f"{name}-kernels.json"
    if not path.exists():
        pytest.skip(f"profiles/{path.name} is not in this checkout")
    prof = calibrate.load(path)
    return path, prof, calibrate.fit(prof, preset)


@pytest.fixture(scope="module")
def h100():
    _, prof, gpu = _measured("h100-sxm5", "dgx-h100")
    return prof, gpu


@pytest.mark.parametrize("name, preset", MEASURED)
def test_measured_curves_predict_their_gpus_kernels(name, preset):
    _, prof, gpu = _measured(name, preset)
    rows = {(r.op, r.dtype): r for r in calibrate.compare(prof, gpu)}
    for key in (("gemm", "bf16"), ("gemm", "fp8"), ("copy", "bf16")):
        assert rows[key].median == pytest.approx(1.0, abs=0.05), rows[key]
    # held out: the MoE presets' expert GEMMs (bf16 batched) within 10 %
    assert rows["grouped", "bf16"].median == pytest.approx(1.0, abs=0.10)
    # what was measured: fp8 GEMMs reach less of their peak than bf16 ones
    # (the preset assumes the same fraction), fused attention less than a GEMM
    assert gpu.fp8_matrix_efficiency[0][1] < gpu.matrix_efficiency[0][1]
    assert gpu.attention_efficiency[0][1] < 0.7
    calc = hpgo.Cluster.preset(preset).with_gpu(matrix_efficiency=CALCULON.gpu.matrix_efficiency,
                                                fp8_matrix_efficiency=(), attention_efficiency=())
    pre = {(r.op, r.dtype): r for r in calibrate.compare(prof, calc)}
    assert pre["gemm", "fp8"].median > 1.15 and pre["attention_fwd", "bf16"].median > 1.5
    assert hpgo.examples.kernels(name) == ROOT / "profiles" / f"{name}-kernels.json"


@pytest.mark.parametrize("preset, name", [("dgx-h100", "h100-sxm5"),
                                          ("grand-teton-h100", "h100-sxm5"),
                                          ("dgx-h200", "h200-sxm")])
def test_hopper_presets_carry_the_curves_fitted_to_their_measured_kernels(preset, name):
    """The H100 and H200 presets' matrix, fp8 and attention curves are the
    fit of the shipped kernel profiles (cluster.c MEASURED_H100,
    MEASURED_H200), the GEMM curve capped at its largest bucket (the
    rate of GEMMs run back to back at the power limit); memory and vector
    curves stay Calculon's.  The 500 W part's are the 700 W part's, measured
    at 700 W (its power limit then slows the compute-bound kernels)."""
    _, prof, gpu = _measured(name, "dgx-h200" if name == "h200-sxm" else "dgx-h100")
    g = hpgo.Cluster.preset(preset).gpu
    for f in ("fp8_matrix_efficiency", "attention_efficiency"):
        assert getattr(g, f) == getattr(gpu, f), f
    top = gpu.matrix_efficiency[0][1]
    assert g.matrix_efficiency == tuple((t, min(e, top)) for t, e in gpu.matrix_efficiency)
    assert any(e > top for _, e in gpu.matrix_efficiency)     # the cap binds
    assert g.memory_efficiency == CALCULON.gpu.memory_efficiency
    assert g.vector_efficiency == CALCULON.gpu.vector_efficiency


def test_calibrated_h100_keeps_dense_runs_within_15_percent(h100):
    _, gpu = h100
    rows = validation.check(gpu=gpu)
    dense = [r for r in rows if r.run.model.startswith("llama")]
    assert len(dense) == 9
    for r in dense:
        assert abs(r.error) < 0.15, r
    with pytest.raises(TypeError):
        validation.check(gpu="h100")


@pytest.mark.parametrize("name, preset", MEASURED)
def test_calibrated_model_predicts_a_measured_llama_layer(name, preset):
    """hpgo profile kernels also timed whole Llama-3-8B layers (eager
    PyTorch, bf16, forward + backward, no rotary embeddings): the model's
    layer time with the eager kernel set is within 15 % of them on the
    calibrated GPU, and on the preset too now that attention has its own
    published curve; the fused kernel set ("te") is faster than eager."""
    path, prof, _ = _measured(name, preset)
    layers = [s for s in json.loads(path.read_text())["samples"] if s["op"] == "layer"]
    assert layers
    for s in layers:
        seq = s["shape"][4]
        m = hpgo.transformer("llama3-8b", seq=seq, learned_pos=True)  # no RoPE, as measured
        err = {}
        for label, c in (("preset", hpgo.Cluster.preset(preset, nodes=1)),
                         ("calibrated", calibrate.cluster(prof, preset, nodes=1))):
            t = {}
            for ks in ("eager", "te"):
                p = hpgo.ParallelPlan(global_batch=8, micro_batch=1, pp=8, dp=1, kernels=ks)
                st = hpgo.simulate(m, c, p, precision="bf16", timeline=False).stages[3]
                t[ks] = (st["forward"] + st["backward_input"]
                         + st["backward_weight"]) / st["layers"]
            assert t["te"] < t["eager"], (seq, label, t)
            err[label] = t["eager"] / s["seconds"] - 1
        assert abs(err["calibrated"]) < 0.15, (seq, err)
        assert abs(err["preset"]) < 0.15, (seq, err)


def test_the_measured_h100_is_one_call_away():
    if not H100_KERNELS.exists():
        pytest.skip("profiles/h100-sxm5-kernels.json is not in this checkout")
    p = hpgo.examples.kernels("h100-sxm5")
    assert p.name == "h100-sxm5-kernels.json" and p.is_file()
    assert hpgo.examples.kernels() == p
    with pytest.raises(ValueError, match="available: h100-sxm5, h200-sxm"):
        hpgo.examples.kernels("b200")
    with pytest.raises(TypeError):
        hpgo.examples.kernels(3)


def test_hpgo_calibrate_and_profile_kernels_commands(tmp_path, capsys):
    from hpgo import cli
    p = tmp_path / "k.json"
    p.write_text(json.dumps(synthetic()))
    out = tmp_path / "c.json"
    assert cli.main(["calibrate", str(p), "--cluster", "dgx-h100", "--nodes", "4",
                     "-o", str(out)]) == 0
    assert "calibrated:" in capsys.readouterr().out
    c = hpgo.Cluster.load(out)
    assert c.gpus == 32 and c.gpu.fp8_matrix_efficiency
    # the calibrated cluster file drives autoplan like a preset
    assert cli.main(["autoplan", "--model", "llama3-8b", "--cluster", str(out),
                     "--global-batch", "64", "--top", "1"]) == 0
    assert "dgx-h100-measured" in capsys.readouterr().out
    assert cli.main(["calibrate", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err   # one line, as every command words a missing file
    assert err == f"hpgo calibrate: error: No such file or directory: {tmp_path / 'missing.json'}\n"
    try:
        import torch  # noqa: F401
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = None
    if has_cuda is None:   # no PyTorch: a clear message, no traceback
        assert cli.main(["profile", "kernels", "-o", str(tmp_path / "x.json")]) == 2
        assert "needs PyTorch" in capsys.readouterr().err
        assert not (tmp_path / "x.json").exists()


def test_refitting_a_measured_gpu_keeps_one_suffix():
    prof = calibrate.from_dict(synthetic())
    once = calibrate.fit(prof, H100)
    twice = calibrate.fit(prof, once)
    assert once.name == twice.name == H100.gpu.name + " (measured)"
    assert twice.matrix_efficiency == once.matrix_efficiency


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    import subprocess
    import sys
    p = tmp_path / "k.json"
    p.write_text(json.dumps(synthetic()))
    r = subprocess.run(f'"{sys.executable}" -m hpgo.cli calibrate "{p}" | head -1', shell=True,
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.stdout.count("\n") == 1 and "kernels measured" in r.stdout
    assert "error" not in r.stderr and "Traceback" not in r.stderr
