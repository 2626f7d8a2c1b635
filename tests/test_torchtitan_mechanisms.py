"""torchtitan's own mechanisms in the work model: op-level selective
activation checkpointing (recompute="selective-op") and the eager loss of
the 2024 torchtitan the published benchmarks ran (kernels="compile-blocks")
(docs/training-model.md, "torchtitan as its benchmarks ran")."""
import dataclasses

import pytest

import hpgo

H100 = hpgo.Cluster.preset("dgx-h100", nodes=1)
LLAMA8 = hpgo.transformer("llama3-8b")


def plan(**kw):
    base = dict(dp=8, zero=3, micro_batch=2, global_batch=16, kernels="compile")
    base.update(kw)
    return hpgo.ParallelPlan(**base)


def stage(p, m=LLAMA8, precision="bf16"):
    return hpgo.simulate(m, H100, p, precision=precision, timeline=False).stages[0]


def peak(p, m=LLAMA8, precision="bf16"):
    r = hpgo.simulate(m, H100, p, precision=precision, timeline=False)
    return max(x.total for x in r.memory)


def test_op_checkpointing_stores_the_saved_ops_outputs():
    """Per token of a Llama block: the block's input, wq's and wv's outputs,
    the attention output and its fp32 log-sum-exp, w1's output (compiled);
    eager checkpointing also caches w2's output."""
    m = LLAMA8
    T = 2 * m.seq
    h, q, kv, f, a = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn, m.heads
    want = T * (2 * (h + q + kv + q + f) + 4 * a)
    st = stage(plan(recompute="selective-op"))
    assert st["activation_bytes_layers"] / st["layers"] == pytest.approx(want, rel=1e-12)
    st = stage(plan(recompute="selective-op", kernels="eager"))
    assert st["activation_bytes_layers"] / st["layers"] == pytest.approx(want + 2 * T * h,
                                                                      rel=1e-12)


def test_op_checkpointing_sits_between_none_and_full():
    """It stores about half of what no recomputation does and recomputes
    every second matmul of the block (wk, wo, w3: about a third of its
    forward GEMM FLOPs) with the pointwise ops, not the attention."""
    none, op, full = (stage(plan(recompute=r)) for r in ("none", "selective-op", "full"))
    assert full["activation_bytes_layers"] < op["activation_bytes_layers"] \
        < 0.6 * none["activation_bytes_layers"]
    assert none["recompute"] == 0 < op["recompute"] < 0.6 * full["recompute"]
    m = LLAMA8
    h, kv, f = m.hidden, m.kv_heads * m.head_dim, m.ffn
    T, L = 2 * m.seq, op["layers"]
    gemm = 2 * T * (h * kv + h * h + h * f)  # wk, wo, w3
    extra = (op["hw_flops"] - none["hw_flops"]) / L
    assert extra == pytest.approx(gemm, rel=0.01)


def test_op_checkpointing_stores_the_same_under_fp8():
    """Saved matmul outputs are 16-bit whatever the GEMMs' precision, so fp8
    and bf16 store the same (torchtitan measured 76.8 and 77.0 GiB)."""
    a = stage(plan(recompute="selective-op"))
    b = stage(plan(recompute="selective-op"), precision="fp8")
    assert a["activation_bytes_layers"] == pytest.approx(b["activation_bytes_layers"], rel=1e-12)
    # Megatron's selective recomputation stores the GEMM inputs, 1 byte each in fp8
    a = stage(plan(recompute="selective"))
    b = stage(plan(recompute="selective"), precision="fp8")
    assert b["activation_bytes_layers"] < a["activation_bytes_layers"]


def test_op_checkpointing_refuses_models_it_is_not_priced_for():
    moe = hpgo.transformer("mixtral-8x7b")
    with pytest.raises(ValueError, match="selective-op"):
        hpgo.simulate(moe, hpgo.Cluster.preset("dgx-h100", nodes=2),
                      hpgo.ParallelPlan(dp=16, zero=3, global_batch=16,
                                        recompute="selective-op"), timeline=False)
    with pytest.raises(ValueError, match="recompute"):
        hpgo.autoplan(LLAMA8, H100, global_batch=16, recompute="selective-op")


def test_eager_loss_peak_bytes_per_logit():
    """compile-blocks runs the blocks as compile does and the loss eager:
    the peak holds 12 B per logit (fp32 log-softmax, its gradient and the
    log-softmax backward's output) where the compiled loss holds 4; 16 B
    per logit on the rank under tensor (loss) parallelism (the block its
    backward maps anew is in the allocator's reserve, which scales the
    difference of the peaks), and the eager final norm saves 8 B an element
    of its input where the compiled one saves 4."""
    m = LLAMA8
    V = -(-m.vocab // 128) * 128
    T = 2 * m.seq
    a, b = stage(plan()), stage(plan(kernels="compile-blocks"))
    assert b["activation_bytes"] == a["activation_bytes"]
    extra = (12 - 4) * T * V + (8 - 4) * T * m.hidden
    assert b["transient_bytes"] - a["transient_bytes"] == pytest.approx(extra, rel=1e-12)
    ra, rb = (hpgo.simulate(m, H100, p, timeline=False).memory[0]
              for p in (plan(), plan(kernels="compile-blocks")))
    assert (rb.total - rb.reserved) - (ra.total - ra.reserved) == pytest.approx(extra, rel=1e-9)
    tp = dict(tp=8, dp=1, zero=0, sequence_parallel=True, micro_batch=1, global_batch=1)
    a, b = stage(plan(**tp)), stage(plan(**tp, kernels="compile-blocks"))
    Vt = -(-m.vocab // (128 * 8)) * 128 * 8 / 8
    assert b["transient_bytes"] - a["transient_bytes"] == pytest.approx(
        (16 - 4) * m.seq * Vt + (8 - 4) * m.seq * m.hidden / 8, rel=1e-12)


def test_compile_blocks_prices_the_blocks_as_compile_and_the_loss_eager():
    """On an A100 (whose attention is priced on FlashAttention-2 either way)
    a first pipeline stage costs the same under both kernel sets; the last
    one, holding the loss, is slower with the eager loss."""
    a100 = hpgo.Cluster.preset("dgx-a100-80gb", nodes=1)
    p = plan(pp=2, dp=4, global_batch=16)
    a = hpgo.simulate(LLAMA8, a100, p, timeline=False).stages
    b = hpgo.simulate(LLAMA8, a100, p.with_(kernels="compile-blocks"), timeline=False).stages
    for key in ("forward", "backward_input", "backward_weight"):
        assert a[0][key] == b[0][key]
    assert b[1]["forward"] > a[1]["forward"] and b[1]["backward_input"] > a[1]["backward_input"]
    assert b[1]["forward"] < hpgo.simulate(LLAMA8, a100, p.with_(kernels="eager"),
                                           timeline=False).stages[1]["forward"]


def test_compile_blocks_runs_attention_on_flash_attention_2_on_hopper():
    """PyTorch's SDPA of late 2024 picked its FlashAttention-2 kernels on
    Hopper (cuDNN was opt-in): the block is slower than with cuDNN's rate,
    by the attention core alone (the GEMMs and the FLOPs are the same)."""
    p = plan(pp=2, dp=4, global_batch=16)
    a = hpgo.simulate(LLAMA8, H100, p, timeline=False).stages[0]
    b = hpgo.simulate(LLAMA8, H100, p.with_(kernels="compile-blocks"), timeline=False).stages[0]
    assert a["hw_flops"] == b["hw_flops"]
    assert b["forward"] > a["forward"] and b["backward_input"] > a["backward_input"]
    assert b["backward_weight"] == a["backward_weight"]  # the attention core has no weights
    # FA2's causal forward + backward rate at 8k tokens is 308 TFLOP/s against
    # cuDNN's forward 529 (the tables of work.c): the core takes longer by
    # about (529 / 308 - 1) of its cuDNN time, a few ms per layer here
    slower = (b["forward"] - a["forward"]) / b["layers"]
    assert 0.5e-3 < slower < 5e-3


def test_fsdp2_states_are_16_bytes_a_parameter():
    """torchtitan's FSDP2: the fp32 parameter is the only sharded copy (4 B),
    its fp32 gradient 4 B, AdamW's moments 8 B -- also in fp8 (torchao keeps
    no fp8 weight); a distributed optimizer (zero 1) keeps 2 + 4 + 12 B.  (Two
    micro-batches: the second one's peak finds the gradients made.)"""
    for precision in ("bf16", "fp8"):
        r = hpgo.simulate(LLAMA8, H100, plan(micro_batch=1), precision=precision,
                          timeline=False)
        mem = r.memory[0]
        shard = r.devices[0]["params"] / 8
        assert mem.weights == pytest.approx(4 * shard, rel=1e-12)
        assert mem.gradients == pytest.approx(4 * shard, rel=1e-12)
        assert mem.optimizer == pytest.approx(8 * shard, rel=1e-12)
    r = hpgo.simulate(LLAMA8, H100, plan(kernels="te"), timeline=False)
    shard = r.devices[0]["params"] / 8
    assert r.memory[0].weights == pytest.approx(2 * shard, rel=1e-12)
    assert r.memory[0].optimizer == pytest.approx(12 * shard, rel=1e-12)


def test_one_micro_batch_step_peaks_at_its_loss_before_any_gradient():
    """A PyTorch step of one micro-batch without a pipeline (torchtitan zeroes
    the gradients with set_to_none before the forward; FSDP2 makes the
    sharded ones during the backward) peaks at the loss with no gradient:
    its peak is that moment's, or the layers' working set with every
    gradient, whichever is larger.  Megatron's persistent gradient buffer,
    accumulated micro-batches and PyTorch DDP's buckets keep them counted."""
    one = hpgo.simulate(LLAMA8, H100, plan(), timeline=False)
    st = one.stages[0]
    mem = one.memory[0]
    assert mem.gradients == 0
    # the loss's moment is the larger one here: its working set is the stage's
    assert st["transient_bytes"] == pytest.approx(mem.activations - st["activation_bytes"],
                                                  rel=1e-9)
    # two micro-batches, Megatron's buffer, DDP's buckets: gradients held at the peak
    for p in (plan(micro_batch=1), plan(kernels="te"), plan(zero=1)):
        r = hpgo.simulate(LLAMA8, H100, p, timeline=False)
        assert r.memory[0].gradients > 0, p
    # a plan of one GPU (the profiled step) frees them too; one with a
    # pipeline does not
    solo = hpgo.simulate(LLAMA8.with_(layers=4), H100, plan(dp=1, zero=0, global_batch=2),
                         timeline=False)
    assert solo.memory[0].gradients == 0
    piped = hpgo.simulate(LLAMA8, H100, plan(pp=2, dp=4, global_batch=8), timeline=False)
    assert all(m.gradients > 0 for m in piped.memory)


def test_pipelining_keeps_every_micro_batchs_logits_on_the_last_stage():
    """torch.distributed.pipelining appends each micro-batch's output to
    output_chunks for the step's end: on the last stage the 16-bit logits
    of all m micro-batches stay (2 B each per micro-batch)."""
    m = LLAMA8
    V = -(-m.vocab // 128) * 128
    for mb in (4, 8):
        p = plan(pp=2, dp=4, micro_batch=1, global_batch=4 * mb)
        a = hpgo.simulate(m, H100, p, timeline=False).stages
        t = hpgo.simulate(m, H100, p.with_(kernels="te"), timeline=False).stages
        extra = a[1]["transient_bytes"] - t[1]["transient_bytes"]
        assert extra == pytest.approx(2 * mb * m.seq * V, rel=1e-12)
        assert a[0]["transient_bytes"] == t[0]["transient_bytes"]


def test_validation_reads_the_torchtitan_stack_from_the_notes():
    from hpgo import validation
    row = validation.MeasuredRun(
        source_id="TT-X", model="m", params_b=8, layers=32, hidden=4096, ffn=14336, heads=32,
        kv_heads=8, vocab=128256, mlp="swiglu", seq=8192, gpu="h100", gpus=8, gpus_per_node=8,
        internode_gbps=400, precision="bf16", tp=1, pp=1, dp=8, cp=1, vp=1, mbs=2, gbs=16,
        recompute="selective", sequence_parallel=False, zero=3, tflops_per_gpu=None, mfu=None,
        tokens_per_s_per_gpu=1.0, iter_s=None, metric="tokens_per_s_per_gpu", flops_def="",
        arch="llama", gpu_mem_gb=96, split=None, measured_mem_gib=None,
        notes="FSDP + torch.compile; op-level selective AC (torchtitan's SAC)")
    r = validation._with_stack(row, [row])
    assert (r.kernels, r.recompute) == ("compile-blocks", "selective-op")
    other = validation._with_stack(dataclasses.replace(row, source_id="Y-1"), [])
    assert (other.kernels, other.recompute) == ("compile", "selective-op")


def test_torchtitan_export_of_op_checkpointing():
    p = plan(recompute="selective-op", kernels="compile-blocks")
    text = p.torchtitan_config(LLAMA8)
    assert "SelectiveAC.Config()" in text and 'components = ["model"]' in text


def test_torchtitan_export_says_whether_it_compiles():
    """An eager plan exports with torch.compile off; the fp32 RMSNorm module
    of torchtitan's 2024 code (eager-unfused-norm) has no torchtitan form."""
    assert "config.compile.enable = False" in plan(kernels="eager").torchtitan_config(LLAMA8)
    assert "config.compile.enable = True" in plan().torchtitan_config(LLAMA8)
    with pytest.raises(ValueError, match="nn.RMSNorm"):
        plan(kernels="eager-unfused-norm").torchtitan_config(LLAMA8)


def test_eager_unfused_norm_prices_torchtitans_fp32_rmsnorm_op_by_op():
    """torchtitan's RMSNorm of 2024 run eager: 8 kernels and 36 B an element
    forward, 14 kernels and 92 B backward, where PyTorch's fused norm moves
    2 and 4 B (+2 for its weight gradient) in one and two kernels; the
    norms are the only difference from "eager" in the layers (plus the final
    norm, the foreach AdamW and, without recomputation, the fp32 input and
    16-bit result each norm keeps; and the checkpoint: torchtitan's stops
    before the MLP's last GEMM and the residual after it, test_stacks)."""
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    p = hpgo.ParallelPlan(global_batch=2, micro_batch=2, kernels="eager", recompute="full")
    a, b = (hpgo.simulate(LLAMA8, c, p.with_(kernels=k), timeline=False).stages[0]
            for k in ("eager", "eager-unfused-norm"))
    T, h, f = 2 * LLAMA8.seq, LLAMA8.hidden, LLAMA8.ffn
    e = T * h
    # a layer has two norms; full recomputation runs each forward twice
    fwd = 2 * (c.kernel_time(0, 36 * e) - c.kernel_time(0, 2 * 2 * e))
    assert (b["forward"] - a["forward"]) / b["layers"] > 0.9 * fwd
    grew = ((b["backward_input"] - b["recompute"]) - (a["backward_input"] - a["recompute"])) \
        / b["layers"]
    assert grew > 0.9 * 2 * (c.kernel_time(0, 92 * e) - c.kernel_time(0, 8 * e))
    skipped = c.kernel_time(2 * T * f * h, 2 * (T * f + f * h + T * h), dtype="bf16") + \
        c.kernel_time(e, 6 * e, kind="vector")
    assert (b["recompute"] - a["recompute"]) / b["layers"] + skipped == pytest.approx(fwd,
                                                                                    rel=0.1)
    none = p.with_(recompute="none")
    a, b = (hpgo.simulate(LLAMA8, c, none.with_(kernels=k), timeline=False).stages[0]
            for k in ("eager", "eager-unfused-norm"))
    assert (b["activation_bytes_layers"] - a["activation_bytes_layers"]) / b["layers"] == \
        pytest.approx(2 * 4 * e, rel=1e-9)


def test_fsdp_reduce_scatters_layer_by_layer_during_the_backward():
    """Without pipelining each micro-batch's gradients are reduce-scattered
    layer by layer as the backward completes them (FSDP2's post-backward
    hook per block): after the last backward only about one layer's scatter
    is left, not the stage's."""
    r = hpgo.simulate(LLAMA8, H100, plan(), timeline=False)
    d = r.devices[0]
    layers = r.stages[0]["layers"]
    per_layer = (r.stages[0]["params"] - r.stages[0]["embedding_params"]) / layers
    one = H100.collective_time("reduce_scatter", 8, 4 * per_layer)
    whole = H100.collective_time("reduce_scatter", 8, 4 * r.stages[0]["params"])
    tail = d["sync_end"] - d["compute_end"]
    assert 0 < tail < 3 * one < whole / 5


def test_compile_fa2_is_compiled_loss_with_flash_attention_2():
    """torchtitan from April to October 2025: the loss compiled (as
    "compile"), attention on FlashAttention-2 (as "compile-blocks")."""
    p = plan(pp=2, dp=4, global_batch=16)
    c, b, f = (hpgo.simulate(LLAMA8, H100, p.with_(kernels=k), timeline=False).stages
               for k in ("compile", "compile-blocks", "compile-fa2"))
    for key in ("forward", "backward_input", "backward_weight"):
        assert f[0][key] == b[0][key]
    assert f[0]["forward"] > c[0]["forward"]
    assert f[1]["transient_bytes"] == c[1]["transient_bytes"] < b[1]["transient_bytes"]
    with pytest.raises(ValueError, match="kernels"):
        hpgo.autoplan(LLAMA8, H100, global_batch=16, kernels="compile-fa2")


def test_torchtitan_offers_op_checkpointing_but_the_search_keeps_to_its_three():
    from hpgo import frameworks
    p = plan(recompute="selective-op")
    assert frameworks.problems("torchtitan", p) == []
    assert any("selective-op" in x for x in frameworks.problems("megatron", p))
    spaces = frameworks.search_spaces("torchtitan", {"recompute": None})
    assert {s["recompute"] for s in spaces} == {"none", "full"}
