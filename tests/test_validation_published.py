"""The training-step model against published H100 and B200 runs (hpgo.validation):
Megatron-Bridge's performance summaries for MoE and FP8 pretraining (with
the recomputation, dispatcher and all-to-all overlap of their recipes) and
the Qwen3-235B-A22B runs of NVIDIA's Megatron-MoE-ModelZoo.

What is checked is what docs/moe.md reports: every published configuration
fits in memory with some recomputation; the dense FP8 Llama runs, simulated
as published, are within 15 % of the published tokens/s per GPU (10 % on the
GPU calibrated to measured kernels); Qwen3-235B-A22B's and DeepSeek-V3's
overlapped runs and ModelZoo's cross-node DeepEP run without overlap within
15 %; the all-to-all overlap credited at the share Megatron-Bridge's A/B runs
measure; the
fine-grained in-node MoE runs (many small experts, where the published runs
reach 12-25 % MFU) are predicted faster than published -- the model's known
limit, stated in the docs."""
import dataclasses
from pathlib import Path

import pytest

from hpgo import calibrate, validation

CHECKS = {(c.run.release, c.run.model): c for c in validation.check()}
ZOO = validation.check(validation.MEGATRON_MOE_MODELZOO_H100)
KERNELS = Path(__file__).resolve().parents[1] / "profiles" / "h100-sxm5-kernels.json"


def test_every_published_configuration_fits_with_some_recomputation():
    assert len(CHECKS) == len(validation.MEGATRON_BRIDGE_H100) == 18
    for c in list(CHECKS.values()) + ZOO:
        assert c.fits_somehow, c
        assert c.memory_fitting_gib <= 80e9 / 2 ** 30
        assert c.fits == (c.recompute == (c.run.recompute or "none"))
    assert sum(c.fits for c in CHECKS.values()) == 17
    assert all(c.fits for c in ZOO)


def test_megatron_bridge_recipes_reduce_gradients_in_16_bits():
    """Megatron-Bridge's performance recipes turn grad_reduce_in_fp32 off:
    the rows run Megatron's 16-bit gradient buffer (Megatron-FSDP's row keeps
    its own path), which takes 2 bytes a parameter less than fp32 gradients."""
    for r in validation.MEGATRON_BRIDGE_H100:
        assert r.bf16_grads
        assert r.plan().optimizer_impl == ("megatron" if r.fsdp else "megatron_bf16_grads")
    for r in validation.MEGATRON_MOE_MODELZOO_H100 + validation.MCORE_MOE_TRACKER_H100:
        assert r.plan().optimizer_impl == "megatron"
    run = [r for r in validation.MEGATRON_BRIDGE_H100 if r.model == "llama3-70b"][0]
    bf16, fp32 = validation.check((run, dataclasses.replace(run, bf16_grads=False)))
    assert fp32.memory_gib - bf16.memory_gib > 4


@pytest.mark.parametrize("key", [("25.11", "llama3-70b"), ("26.02", "llama3-70b"),
                                 ("26.02.01", "llama3-70b"), ("26.04", "llama3-70b"),
                                 ("26.04.01", "llama3-70b"), ("25.11", "llama3-405b"),
                                 ("26.02", "llama3-405b"), ("26.04.01", "llama3-405b")])
def test_dense_fp8_llama_runs_within_15_percent(key):
    # the preset's fp8 GEMM curve is 25-35 % faster than the H100 measured here
    # (docs/training-model.md, "Measured GPU curves"): the 405B rows, whose
    # userbuffer overlap is priced as Transformer Engine runs it, sit up to 17 %
    # fast on it and within 10 % on the measured curves (below)
    bound = 0.20 if "405b" in key[1] else 0.15
    assert abs(CHECKS[key].error) < bound, CHECKS[key]


def test_overlapped_coarse_moe_runs_within_15_to_20_percent():
    c = CHECKS["26.02", "qwen3-235b-a22b"]
    assert c.run.overlap_moe_comm and abs(c.error) < 0.15, c
    c = CHECKS["25.09", "deepseek-v3"]  # on the preset's curves; within 5 % calibrated
    assert c.run.overlap_moe_comm and abs(c.error) < 0.2, c
    # the same layout without the overlap (the 25.11 recipe) is predicted slower
    assert CHECKS["25.11", "qwen3-235b-a22b"].error < -0.15


def _gain(runs):
    off, on = validation.check(runs)
    assert not off.run.overlap_moe_comm and on.run.overlap_moe_comm
    return on.tokens_per_gpu / off.tokens_per_gpu


def test_overlap_credits_the_measured_share_of_the_ideal_pairing():
    ab = validation.MEGATRON_BRIDGE_EP_OVERLAP_H100
    assert len(ab) == 4
    for off, on in (ab[:2], ab[2:]):
        measured = on.tokens_per_gpu / off.tokens_per_gpu
        model = _gain((off, on))
        # the calibration pairs: the modelled gain within 3 % of the measured one
        assert model == pytest.approx(measured, rel=0.03), (off, model, measured)
        assert 1 < model
    # held out: ModelZoo's cross-node DeepEP pair gains less than the model
    # says (1.12x against 1.25x), but the share cuts the ideal 1.44x by most of the gap
    zoo = _gain(validation.MEGATRON_MOE_MODELZOO_H100[:2])
    assert 19.7 / 17.6 < zoo < 1.3
    # the runs without overlap check the model independently of the share
    for c in validation.check((ab[0], ab[2])):
        assert abs(c.error) < 0.3 and c.fits, c


@pytest.mark.parametrize("key", [("25.11", "qwen3-30b-a3b"), ("26.02", "qwen3-30b-a3b"),
                                 ("25.11", "gpt-oss-120b"), ("26.02", "gpt-oss-120b")])
def test_fine_grained_moe_is_predicted_faster_than_published(key):
    assert CHECKS[key].error > 0.15, CHECKS[key]


def test_modelzoo_deepep_run_without_overlap_within_15_percent():
    base, overlap, fsdp, tp4 = ZOO
    assert base.run.dispatcher == "deepep" and not base.run.overlap_moe_comm
    assert abs(base.error) < 0.15, base
    assert abs(fsdp.error) < 0.15, fsdp
    # the model's overlap still hides more than the published 11 % (docs/moe.md)
    assert 0.15 < overlap.error < 0.3
    assert overlap.run.tokens_per_gpu / base.run.tokens_per_gpu == pytest.approx(19.7 / 17.6)
    # the same run with NCCL's all-to-all would be far slower in the model
    plain = validation.check((dataclasses.replace(base.run, dispatcher="alltoall"),))[0]
    assert plain.tokens_per_gpu < 0.85 * base.tokens_per_gpu


def test_release_tracker_rows():
    rows = validation.MCORE_MOE_TRACKER_H100
    # tokens/s from TFLOP/s with the FLOPs per token Megatron-Bridge's tables imply
    assert rows[0].tokens_per_gpu == pytest.approx(1297 * 368 / 338)
    assert rows[1].tokens_per_gpu == pytest.approx(320e12 / 1.48e11)
    for c in validation.check(rows):  # preset curves: within 25 %, and they fit
        assert c.fits and abs(c.error) < 0.25, c


def test_plans_of_published_runs():
    run = validation.MEGATRON_BRIDGE_H100[-1]
    p = run.plan()
    assert (p.tp, p.pp, p.dp, p.ep, p.etp, p.virtual_stages) == (2, 8, 64, 64, 1, 4)
    assert p.expert_data_parallel == 2
    assert p.schedule == "interleaved-1f1b" and p.sequence_parallel and p.zero == 1
    assert (p.moe_dispatcher, p.overlap_moe_comm, p.recompute) == ("deepep", True, "selective")
    text = repr(CHECKS[("25.11", "gpt-oss-120b")])
    assert "does not fit" in text and "recompute=full" in text
    assert validation.MEGATRON_MOE_MODELZOO_H100[2].plan().zero == 3


def test_calibrated_gpu_brings_dense_runs_within_10_percent():
    if not KERNELS.exists():
        pytest.skip("profiles/h100-sxm5-kernels.json is not in this checkout")
    gpu = calibrate.fit(calibrate.load(KERNELS), "dgx-h100")
    rows = {(c.run.release, c.run.model): c for c in validation.check(gpu=gpu)}
    for key, c in rows.items():
        if key[1].startswith("llama"):
            assert abs(c.error) < 0.10, c
    assert sum(abs(c.error) < 0.15 for c in rows.values()) >= 13
    assert abs(rows["25.09", "deepseek-v3"].error) < 0.05
    ab = validation.check(validation.MEGATRON_BRIDGE_EP_OVERLAP_H100, gpu=gpu)
    assert all(abs(c.error) < 0.15 for c in ab), ab
    # the release tracker's best configurations (set nothing in the model)
    best = validation.check(validation.MCORE_MOE_TRACKER_H100, gpu=gpu)
    assert len(best) == 3 and all(abs(c.error) < 0.10 and c.fits for c in best), best


def test_dgx_b200_runs_simulate_on_the_b200_preset_and_fit():
    """Megatron-Bridge's DGX B200 rows run on the dgx-b200 preset (its GPU,
    its 148 SMs) and fit as published; the dense ones come out faster than
    measured by what docs/training-model.md reports (the preset's GEMM rates
    are the datasheet's and a published bf16 ceiling, none measured here),
    and GPT-OSS-120B's in-node fine-grained runs far faster -- the model's
    known limit on such runs (docs/moe.md), larger on a B200."""
    checks = validation.check(validation.MEGATRON_BRIDGE_B200)
    assert len(checks) == 9
    for c in checks:
        assert c.run.system == "dgx-b200" and c.fits and "B200" in repr(c)
        assert c.memory_gib < 180e9 / 2 ** 30
        if c.run.model.startswith("llama"):
            assert 0.10 < c.error < 0.35, c
        else:
            assert c.run.model == "gpt-oss-120b" and c.run.recompute == "selective"
            assert c.error > 0.15, c
    # its own figures disagree: the same layout at 8,213 (25.11, batch 512) and 13,722
    # (26.02.01, batch 1,280), 67 % apart where hpgo's two differ by 14 %
    oss = {c.run.release: c for c in checks if c.run.model == "gpt-oss-120b"}
    assert oss["26.02.01"].run.ep == oss["25.11"].run.ep == 8
    assert oss["26.02.01"].run.tokens_per_gpu / oss["25.11"].run.tokens_per_gpu > 1.6
    # the same configurations on the H100 preset are another prediction
    h100 = validation.check(tuple(dataclasses.replace(r, system="dgx-h100", gpus=r.gpus)
                                  for r in validation.MEGATRON_BRIDGE_B200[:1]))
    assert h100[0].tokens_per_gpu < checks[0].tokens_per_gpu / 1.5


def _attention_bound(gpu):
    import hpgo
    m = hpgo.transformer(hidden=1024, ffn=1024, heads=8, layers=2, seq=32768, vocab=1000,
                         flash=True)
    c = dataclasses.replace(hpgo.Cluster.preset("dgx-b200", nodes=1), gpu=gpu)
    p = hpgo.ParallelPlan(global_batch=1, micro_batch=1, recompute="none")
    return hpgo.simulate(m, c, p, timeline=False).compute_time


def test_b200_attention_runs_at_the_hopper_fractions_not_the_gemm_curve():
    """The B200's fused attention is priced at the H100 tables' fractions of
    its peak (cuDNN's best on a B200 is about 55 % of it, FlashAttention-4's
    paper), not at its GEMM curve's 78 %: an attention-bound step runs
    longer than with an attention curve at the GEMM share, and a GPU the
    core does not take for a B200 (no SM count) keeps the GEMM curve."""
    import hpgo
    b200 = hpgo.Cluster.preset("dgx-b200", nodes=1).gpu
    assert b200.multiprocessors == 148
    gemm_share = dict(b200.matrix_efficiency)[16e9]
    as_gemm = dataclasses.replace(b200, attention_efficiency=((0.0, gemm_share),))
    t, t_gemm = _attention_bound(b200), _attention_bound(as_gemm)
    assert t > 1.25 * t_gemm
    unknown = dataclasses.replace(b200, multiprocessors=0)
    assert _attention_bound(unknown) == pytest.approx(t_gemm, rel=1e-9)
