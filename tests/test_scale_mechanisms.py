"""Mechanisms of the stacks that are not Megatron-Core with Transformer
Engine: the fused attention kernel a stack runs (``ParallelPlan.attention``),
PyTorch's context parallelism with its all-gather rotation, and the stack
each published run is simulated on (docs/training-model.md, "Training
stacks" and "Validation")."""
import dataclasses
from pathlib import Path

import pytest

import hpgo
from hpgo import calibrate, examples, validation

H100 = hpgo.Cluster.preset("dgx-h100", nodes=1)
REF = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "published_runs.csv"
needs_ref = pytest.mark.skipif(not REF.exists(),
                               reason="../shared/reference is not beside the checkout")


def stage(m, c, p, precision="bf16"):
    return hpgo.simulate(m, c, p, precision=precision, timeline=False).stages[0]


def compute(st):
    return st["forward"] + st["backward_input"] + st["backward_weight"] - st["tp_forward"]


# -- the fused attention kernel --------------------------------------------------------

def test_flash2_prices_attention_at_flashattention2s_rate():
    m = hpgo.transformer("llama3-8b", seq=16384, layers=2)
    p = hpgo.ParallelPlan(global_batch=1)
    # without a measured attention curve the default back end is cuDNN's table
    plain = H100.with_gpu(attention_efficiency=())
    auto, fa2 = (stage(m, plain, p.with_(attention=a)) for a in ("auto", "flash2"))
    # only the attention core changes.  Causal forward FLOPs of one layer:
    # 2 s^2 a d_h; the backward 2.5x.  cuDNN's forward at 16k: 539 TFLOP/s, its
    # backward at 0.84 of that; FlashAttention-2's forward + backward 328,
    # split at the measured backward / forward ratio 0.92
    f = 2 * 16384 ** 2 * 4096
    fa2_f = 328e12 * (1 + 2.5 / 0.92) / 3.5
    want = 2 * (f / fa2_f + 2.5 * f / (0.92 * fa2_f) - f / 539e12 - 2.5 * f / (0.84 * 539e12))
    assert compute(fa2) - compute(auto) == pytest.approx(want, rel=0.05)
    # a curve measured on the default back end (cuDNN in hpgo's H100 profile,
    # which the preset carries) does not stand for FlashAttention-2: flash2
    # keeps its table
    cal = calibrate.cluster(calibrate.load(examples.kernels("h100-sxm5")), "dgx-h100", nodes=1)
    for c in (cal, H100):
        flash = stage(m, c, p.with_(attention="flash2"))
        table = stage(m, c.with_gpu(attention_efficiency=()), p.with_(attention="flash2"))
        assert compute(flash) == pytest.approx(compute(table), rel=1e-9)
        assert compute(stage(m, c, p)) < compute(flash)
    # A100: FlashAttention-2 is already the table both use
    a100 = hpgo.Cluster.preset("dgx-a100-80gb", nodes=1)
    assert compute(stage(m, a100, p)) == compute(stage(m, a100, p.with_(attention="flash2")))


def test_attention_field_is_checked_and_shown():
    p = hpgo.ParallelPlan(global_batch=8, attention="flash2")
    assert "attention=flash2" in p.describe()
    assert "attention" not in hpgo.ParallelPlan(global_batch=8).describe()
    with pytest.raises(ValueError, match="attention"):
        hpgo.ParallelPlan(global_batch=8, attention="cudnn9")


# -- PyTorch's context parallelism -------------------------------------------------------

def _cp(kernels, cp=8, seq=262144, kv_heads=None, c=H100, pp=1):
    m = hpgo.transformer("llama3-8b", seq=seq, layers=2)
    if kv_heads:
        m = m.with_(kv_heads=kv_heads)
    if pp > 1:
        c = c.with_nodes(pp)
    p = hpgo.ParallelPlan(global_batch=8 // cp, cp=cp, dp=8 // cp, pp=pp, recompute="full", zero=3,
                          kernels=kernels,
                          cp_comm="all_gather" if kernels == "te" else "torch_sdpa")
    return hpgo.simulate(m, c, p, timeline=False)


def test_torch_context_parallel_overlaps_the_gather_with_the_first_block():
    # multi-head K/V, so both stacks gather the same bytes; a slow link
    lv = list(H100.levels)
    lv[0] = dataclasses.replace(lv[0], bandwidth=20e9, collective_bandwidth=20e9)
    slow = dataclasses.replace(H100, levels=tuple(lv))
    te = _cp("te", kv_heads=32, c=slow).stages[0]
    torch = _cp("compile", kv_heads=32, c=slow).stages[0]
    # Transformer Engine's all-gather is exposed in full before the attention;
    # PyTorch's runs beside the local (step 0) block
    assert torch["tp_forward"] < te["tp_forward"]
    # on NVLink the gather hides entirely behind the first block
    fast = _cp("compile", kv_heads=32).stages[0]
    assert fast["tp_forward"] == 0


def test_torch_context_parallel_merges_and_buffers():
    # the per-step fp32 merges run once per step after the first: eager's
    # unfused passes cost more than the compiled pass, and both grow with cp
    # at a fixed number of tokens per GPU
    def merge_cost(cp):
        per_tok = {}
        for ks in ("eager", "compile"):
            r = _cp(ks, cp=cp, seq=32768 * cp)
            per_tok[ks] = compute(r.stages[0])
        return per_tok["eager"] - per_tok["compile"]
    assert merge_cost(8) > merge_cost(2) > 0
    # K and V are gathered as SDPA gets them, repeated to the query heads:
    # a GQA model holds the same gathered buffer under PyTorch as an MHA one
    # under Transformer Engine, 4x its own (a layer's working set alone: the
    # first of two pipeline stages, without the head's)
    gqa_torch = _cp("compile", pp=2).stages[0]["transient_bytes"]
    gqa_te = _cp("te", pp=2).stages[0]["transient_bytes"]
    assert gqa_torch > gqa_te
    grows = [_cp("compile", cp=c, seq=32768 * c, pp=2).stages[0]["transient_bytes"]
             for c in (2, 8)]
    assert grows[1] > grows[0]


# -- the stack each published run is simulated on ---------------------------------------

@needs_ref
def test_published_runs_carry_their_stacks():
    by = {r.source_id: r for r in validation.load_runs(REF)}
    # torchtitan: PyTorch's SDPA of 2024-25 (flash back end), PyTorch's CP
    for rid in ("TT-T1-8b-bf16", "TT-T2-cp8", "TT-A-70b-bf16"):
        r = by[rid]
        assert (r.attention, r.cp_comm) == ("flash2", "torch_sdpa"), rid
        assert r.plan("full").attention == "flash2"
    # MegaScale's Megatron-LM baseline (January 2023) and DeepSpeed's pipeline
    # engine reduce the gradients after the backward; Megatron-Core r0.8.0
    # with --overlap-grad-reduce overlaps them
    for rid, ov in (("MS-T2-12288", False), ("MS-F9-2240", False), ("BL-176B", False),
                    ("MG-32B", True)):
        assert by[rid].overlap_grad_reduce is ov, rid
        assert by[rid].plan("none").overlap_grad_reduce is ov
        assert by[rid].optimizer_impl == ("deepspeed_bf16" if rid == "BL-176B" else "megatron")
    assert by["MG-32B"].attention == "auto" and by["MG-32B"].cp_comm == "p2p"


# -- DeepSpeed's BF16_Optimizer -------------------------------------------------------------

def test_deepspeed_bf16_optimizer_gradient_path():
    m = hpgo.transformer("megatron-22b", seq=2048).with_(layers=8)
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=2)
    p = hpgo.ParallelPlan(global_batch=64, tp=2, pp=2, dp=4, micro_batch=2, zero=1,
                          sequence_parallel=True, overlap_grad_reduce=False)
    mg, ds = (hpgo.simulate(m, c, p.with_(optimizer_impl=o))
              for o in ("megatron", "deepspeed_bf16"))
    # every micro-batch's weight-gradient pass adds the 16-bit gradients into
    # the fp32 ones: about 20 bytes per local parameter at the HBM's rate
    for a, b in zip(mg.stages, ds.stages):
        extra = b["backward_weight"] - a["backward_weight"]
        assert extra == pytest.approx(20 * b["params"] / c.gpu.memory_bandwidth, rel=0.35)
    # ZeRO-1 under DeepSpeed's pipeline engine all-reduces the gradients
    def kinds(r):
        return {e[3] for e in r.events}
    assert "reduce_scatter" in kinds(mg) and "reduce_scatter" not in kinds(ds)
    assert "all_reduce" in kinds(ds)
    assert ds.iteration_time > mg.iteration_time
    # fp32 training has no 16-bit gradients to copy
    f32 = [hpgo.simulate(m, c, p.with_(optimizer_impl=o), precision="fp32").stages[0]
           for o in ("megatron", "deepspeed_bf16")]
    assert f32[0]["backward_weight"] == f32[1]["backward_weight"]
    assert "optimizer=deepspeed_bf16" in p.with_(optimizer_impl="deepspeed_bf16").describe()
    with pytest.raises(ValueError, match="optimizer_impl"):
        p.with_(optimizer_impl="apex")


# -- Apex's DistributedFusedAdam (NeMo's distributed_fused_adam) ---------------------------

def test_apex_distributed_fused_adam_model_states():
    """NeMo's recipes run Apex's DistributedFusedAdam with a bf16 gradient
    buffer: per parameter 2 B weights, 2 B unsharded gradients, 10 B of
    optimizer state over the shard group (fp32 moments, the master as int16
    remainders of the bf16 weight; an fp32 master with fp8 weights only),
    where Megatron's distributed optimizer holds 2 + 4 + 12 / N; its
    gradient reduce-scatter moves 16-bit gradients."""
    m = hpgo.transformer("llama3-8b", seq=8192).with_(layers=4)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    p = hpgo.ParallelPlan(global_batch=64, dp=4, cp=2, micro_batch=1, zero=1)
    n = 8  # ZeRO 1 shards over dp x cp
    for prec, f8 in (("bf16", False), ("fp8", True), ("fp8", False)):
        q = p.with_(fp8_params=f8)
        mg = hpgo.simulate(m, c, q, precision=prec, timeline=False)
        ap = hpgo.simulate(m, c, q.with_(optimizer_impl="apex_bf16"), precision=prec,
                           timeline=False)
        params = mg.stages[0]["params"]
        a, b = mg.memory[0], ap.memory[0]
        assert b.weights == pytest.approx(a.weights)
        assert a.gradients == pytest.approx(4 * params)
        assert b.gradients == pytest.approx(2 * params)
        master = 4 if (prec == "fp8" and f8) else 2
        assert a.optimizer == pytest.approx(12 * params / n)
        assert b.optimizer == pytest.approx((8 + master) * params / n)
        assert b.total < a.total
    # ZeRO 1 only: the optimizer shards its state and keeps every gradient
    for z in (0, 2, 3):
        with pytest.raises(ValueError, match="apex_bf16"):
            hpgo.simulate(m, c, p.with_(zero=z, optimizer_impl="apex_bf16"))
    assert "optimizer=apex_bf16" in p.with_(optimizer_impl="apex_bf16").describe()
    # no framework hpgo exports to runs it
    from hpgo import frameworks
    for fw in ("megatron", "torchtitan", "deepspeed"):
        with pytest.raises(ValueError, match="DistributedFusedAdam"):
            frameworks.check(fw, p.with_(optimizer_impl="apex_bf16"), m)


def test_megatron_bf16_gradients():
    """Megatron with --grad-reduce-in-bf16 (NeMo 2's performance mode): the
    gradient buffer in 16 bits (2 B a parameter, not 4), the optimizer's
    state as Megatron's; DDP or the distributed optimizer only; Megatron's
    export says so and the other frameworks refuse it."""
    m = hpgo.transformer("llama3-8b", seq=8192).with_(layers=4)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    p = hpgo.ParallelPlan(global_batch=64, dp=8, micro_batch=1, zero=1)
    for prec in ("bf16", "fp8"):
        mg = hpgo.simulate(m, c, p, precision=prec, timeline=False).memory[0]
        bg = hpgo.simulate(m, c, p.with_(optimizer_impl="megatron_bf16_grads"), precision=prec,
                           timeline=False).memory[0]
        assert bg.gradients == pytest.approx(mg.gradients / 2)
        assert (bg.weights, bg.optimizer) == (pytest.approx(mg.weights),
                                              pytest.approx(mg.optimizer))
    for z in (2, 3):
        with pytest.raises(ValueError, match="megatron_bf16_grads"):
            hpgo.simulate(m, c, p.with_(zero=z, optimizer_impl="megatron_bf16_grads"))
    q = p.with_(optimizer_impl="megatron_bf16_grads")
    assert "--grad-reduce-in-bf16" in q.megatron_args(m)
    assert "--grad-reduce-in-bf16" not in p.megatron_args(m)
    from hpgo import frameworks
    with pytest.raises(ValueError, match="16-bit gradient buffer|gradient buffer"):
        frameworks.check("torchtitan", q, m)
    # DeepSpeed's ZeRO optimizer accumulates and reduces 16-bit gradients
    # (data_types.grad_accum_dtype bf16); without ZeRO it runs BF16_Optimizer
    frameworks.check("deepspeed", q, m)
    with pytest.raises(ValueError, match="need ZeRO 1"):
        frameworks.check("deepspeed", q.with_(zero=0), m)


def test_apex_gradient_reduce_scatter_moves_16_bit_gradients():
    m = hpgo.transformer("llama3-8b", seq=4096).with_(layers=4)
    c = hpgo.Cluster.preset("dgx-h100", nodes=4)
    p = hpgo.ParallelPlan(global_batch=32, dp=32, micro_batch=1, zero=1,
                          overlap_grad_reduce=False)
    def scatter(r):
        return sum(e[1] for e in r.events if e[2] == 0 and e[3] == "reduce_scatter")
    mg = hpgo.simulate(m, c, p)
    for impl in ("apex_bf16", "megatron_bf16_grads"):
        ap = hpgo.simulate(m, c, p.with_(optimizer_impl=impl))
        assert scatter(ap) == pytest.approx(scatter(mg) / 2, rel=0.1)
        assert ap.iteration_time < mg.iteration_time


def test_megatron_refuses_pytorchs_context_parallelism():
    from hpgo import frameworks
    m = hpgo.transformer("llama3-8b", seq=8192)
    p = hpgo.ParallelPlan(global_batch=2, cp=2, cp_comm="torch_sdpa")
    assert any("SDPA" in s for s in frameworks.problems("megatron", p, m))
    assert not any("SDPA" in s for s in frameworks.problems("megatron", p.with_(cp_comm="p2p"), m))
    # torchtitan 0.3 runs FlexAttention's K/V all-gather, not its 2024 SDPA ring
    assert any("flex_cp_allgather" in s for s in frameworks.problems("torchtitan", p, m))
    assert not frameworks.problems("torchtitan", p.with_(cp_comm="all_gather", zero=3), m)
