"""What PyTorch's training loop holds at its memory peak: the head's and a
layer's working sets apart without pipelining, the caching allocator's
measured reserve, FSDP2's gathered root, and the buffers of
PyTorch's context parallelism around SDPA (docs/training-model.md,
"torchtitan as its benchmarks ran" and "Attention, tensor-parallel
overlap, context parallelism, recomputation")."""
import dataclasses

import pytest

import hpgo

H100 = hpgo.Cluster.preset("dgx-h100", nodes=1)
LLAMA8 = hpgo.transformer("llama3-8b")


def stages(m=LLAMA8, precision="bf16", **kw):
    base = dict(dp=8, zero=1, micro_batch=1, global_batch=8, recompute="full", kernels="te")
    base.update(kw)
    p = hpgo.ParallelPlan(**base)
    return hpgo.simulate(m, H100, p, precision=precision, timeline=False).stages


def test_head_and_layer_working_sets_are_not_held_together_without_pipelining():
    """Without pipelining the head's forward and backward run back to back,
    after the last layer's forward and before its backward: the peak holds
    the larger of the two working sets.  Under pipelining (another chunk's
    passes may run between them) both are counted."""
    # Llama 3 8B at 8K tokens: the head's logits outweigh a layer; with a
    # vocabulary of 8,192 at 32K tokens a layer outweighs the head
    small = dataclasses.replace(LLAMA8, seq=32768, vocab=8192)
    for m, head_larger in ((LLAMA8, True), (small, False)):
        first, last = stages(m, pp=2, dp=4)
        layer = first["transient_bytes"]
        head = last["transient_bytes"] - layer
        assert layer > 0 and head > 0 and (head > layer) == head_larger
        one = stages(m)[0]["transient_bytes"]
        assert one == pytest.approx(max(layer, head), rel=1e-12)
        assert one < layer + head


def test_torchtitans_block_prices_the_allocators_measured_reserve():
    """Under torchtitan's 2024 kernel sets (compile-blocks, eager-unfused-norm)
    the caching allocator with expandable segments reserves the measured share
    of its reserved peak beyond the allocated bytes -- 0.115, between what
    torchtitan's block reserved on one H100 (10.8-12.2 %) -- which covers the
    block the eager loss's backward maps anew: the loss adds its 12 B a logit
    and nothing apart.  Other kernel sets keep the cluster's share (0 in the
    presets; plain PyTorch steps reserved 0.6-7.9 %, within the headroom), and
    the eager set without a reserve prices that block, 2 B a logit; a
    cluster's larger share wins everywhere."""
    f = hpgo.cluster.ALLOCATOR_FRAGMENTATION
    kw = dict(recompute="full", zero=3)
    V = -(-LLAMA8.vocab // 128) * 128
    T = LLAMA8.seq
    a, b = stages(kernels="compile", **kw), stages(kernels="compile-blocks", **kw)
    assert b[0]["transient_bytes"] - a[0]["transient_bytes"] == \
        pytest.approx((12 - 4) * T * V + (8 - 4) * T * LLAMA8.hidden, rel=1e-12)
    e = stages(kernels="eager", **kw)
    assert e[0]["transient_bytes"] - b[0]["transient_bytes"] == pytest.approx(2 * T * V, rel=1e-12)

    def mem(cluster=H100, **p):
        # ZeRO 1: nothing held beside the 2 GB of `other` outside the allocator
        base = dict(dp=8, zero=1, micro_batch=1, global_batch=16, recompute="full")
        base.update(p)
        return hpgo.simulate(LLAMA8, cluster, hpgo.ParallelPlan(**base), timeline=False).memory[0]

    def allocated(m):
        return m.weights + m.gradients + m.optimizer + m.activations + m.other - 2e9

    for k in ("compile-blocks", "eager-unfused-norm"):
        m = mem(kernels=k)
        assert m.reserved == pytest.approx(allocated(m) * f / (1 - f), rel=1e-9), k
    for k in ("compile", "eager", "te"):
        assert mem(kernels=k).reserved == 0, k
    more = dataclasses.replace(H100, allocator_fragmentation=0.2)
    for k in ("compile-blocks", "compile", "te"):
        m = mem(more, kernels=k)
        assert m.reserved == pytest.approx(allocated(m) * 0.2 / 0.8, rel=1e-9), k


def test_fsdp2_keeps_its_root_gathered_through_the_step():
    """FSDP2 does not reshard the root (embedding, final norm, output layer
    in torchtitan) after forward: its 16-bit parameters are held the whole
    step, in `other`, also on a shard group of one (FSDP2 casts the fp32
    shard into its unsharded parameter all the same); without resharding
    every parameter is counted gathered already."""
    def other(m, **kw):
        base = dict(dp=8, zero=3, micro_batch=1, global_batch=8, kernels="compile")
        base.update(kw)
        r = hpgo.simulate(m, H100, hpgo.ParallelPlan(**base), timeline=False)
        return r.memory[0].other
    big = dataclasses.replace(LLAMA8, vocab=LLAMA8.vocab + 128 * 64)
    dv = 128 * 64 * LLAMA8.hidden * 2  # embedding and untied output layer
    assert other(big) - other(LLAMA8) == pytest.approx(2 * dv, rel=1e-9)
    # without resharding after forward: every parameter gathered, the root among them
    assert other(big, reshard_after_forward=False) - other(LLAMA8, reshard_after_forward=False) \
        == pytest.approx(2 * dv, rel=1e-9)
    # a shard group of one (what torchtitan runs without sharding) holds them too
    assert other(big, shard_size=1) - other(LLAMA8, shard_size=1) == pytest.approx(2 * dv,
                                                                                rel=1e-9)
    assert other(big, dp=1, global_batch=1) - other(LLAMA8, dp=1, global_batch=1) == \
        pytest.approx(2 * dv, rel=1e-9)
    # Megatron's distributed optimizer and ZeRO-3 outside FSDP2 keep no root
    assert other(big, kernels="te") == pytest.approx(other(LLAMA8, kernels="te"), rel=1e-12)


def test_torch_cp_holds_the_gathered_kv_and_the_fp32_gradient_buffers():
    """_templated_ring_attention's backward holds the gathered K/V (repeated
    to the query heads), the concatenation handed to the rotater, the fp32
    dQ, SDPA's 16-bit gradients and four fp32 dK/dV buffers (received,
    partially updated, concatenated, the permute's output): against the p2p
    ring's double-buffered K/V the layer's working set differs by that."""
    m = dataclasses.replace(LLAMA8, seq=65536)
    kw = dict(cp=2, dp=2, pp=2, zero=1, kernels="compile", recompute="full", global_batch=4)
    torch = stages(m, cp_comm="torch_sdpa", **kw)[0]["transient_bytes"]
    p2p = stages(m, cp_comm="p2p", **kw)[0]["transient_bytes"]
    E, T = 2, m.seq // 2
    N = T * m.heads * m.head_dim            # output elements on the rank
    Nkv = 2 * N                             # K and V repeated to the query heads
    kv = E * Nkv * 2                        # gathered over cp = 2
    want_torch = kv + E * Nkv + 4 * N + E * (N + 0.5 * Nkv) + 16 * Nkv
    want_p2p = 4 * E * T * 2 * m.kv_heads * m.head_dim
    assert torch - p2p == pytest.approx(want_torch - want_p2p, rel=1e-12)


def test_torchtitan_cp_peak_is_the_loss_at_every_cp_degree():
    """torchtitan's Table 2 (Llama 3.1 8B, 32,768 tokens per GPU, FSDP x CP
    = 8, full AC, eager loss) measured 83.9 / 84.2 / 84.0 / 84.5 GiB from CP 1
    to CP 8: the peak is the loss's, the same at every degree, while the
    attention's gathered K/V grows with it -- a layer's working set, freed
    before the loss, does not add to it."""
    c = hpgo.Cluster.preset("grand-teton-h100", nodes=1)
    c2 = hpgo.Cluster.preset("grand-teton-h100", nodes=2)
    peaks, layers = [], []
    for cp in (1, 2, 4, 8):
        m = dataclasses.replace(LLAMA8, seq=32768 * cp)
        p = hpgo.ParallelPlan(dp=8 // cp, cp=cp, zero=3, micro_batch=1, global_batch=8 // cp,
                              recompute="full", kernels="compile-blocks", attention="flash2",
                              cp_comm="torch_sdpa")
        r = hpgo.simulate(m, c, p, precision="fp8", timeline=False)
        peaks.append(r.memory[0].total)
        assert r.fits
        # a layer's working set alone: the first of two pipeline stages
        first = hpgo.simulate(m, c2, p.with_(pp=2), precision="fp8", timeline=False).stages[0]
        layers.append(first["transient_bytes"])
    assert max(peaks) == pytest.approx(min(peaks), rel=1e-9)
    assert layers[0] < layers[1] < layers[2] < layers[3]
    # the gathered K/V (repeated to 32 heads, 16-bit): 32K x 4096 x 2 x 2 B per CP rank
    kv = 32768 * 4096 * 2 * 2
    assert layers[3] - layers[1] == pytest.approx((8 - 2) * kv, rel=1e-12)
