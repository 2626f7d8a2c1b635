"""Sharded data parallelism as the frameworks run it (FSDP2 / ZeRO), the
caching allocator's reserve, offloading, losses at scale (NCCL's latency
model, stragglers) and the GPU presets: each mechanism against its formula
(docs/training-model.md, "Sharding, offloading and scale")."""
import dataclasses
import json
import math

import pytest

import hpgo

GB = 1e9
M = hpgo.transformer("llama3-8b", seq=2048)


def sim(plan, cluster=None, **kw):
    c = cluster or hpgo.Cluster.preset("dgx-h100", nodes=2)
    return hpgo.simulate(M, c, plan, timeline=False, **kw)


def layer_params(r, k=0):
    st = r.stages[k]
    return (st["params"] - st["embedding_params"]) / st["layers"]


def test_fsdp_buffers_reshard_and_accumulation():
    # one pipeline stage, one micro-batch: FSDP2 holds three layers' gathered
    # 16-bit weights (current, prefetched, all-gather buffer) and the layer's
    # unsharded gradient + two fp32 reduce-scatter inputs (2 + 2 x 4 bytes)
    base = hpgo.ParallelPlan(global_batch=16, dp=16, zero=3, recompute="full")
    r = sim(base)
    lp = layer_params(r)
    assert r.memory[0].other == pytest.approx(2e9 + 3 * 2 * lp + (2 + 2 * 4) * lp)
    # without resharding after forward every layer stays gathered (+ the buffer)
    nr = sim(base.with_(reshard_after_forward=False))
    dense = r.devices[0]["params"]
    assert nr.memory[0].other == pytest.approx(2e9 + 2 * dense + 2 * lp + 10 * lp)
    # ... and the backward needs no second all-gather: never slower
    assert nr.iteration_time <= r.iteration_time
    # under pipelining with several micro-batches the gradients accumulate
    # unsharded in fp32 until the stage's last backward
    p1 = hpgo.ParallelPlan(global_batch=8, pp=2, dp=8, zero=3, recompute="full")
    p4 = p1.with_(global_batch=32)
    r1, r4 = sim(p1), sim(p4)
    assert r4.memory[0].other - r1.memory[0].other == pytest.approx(4 * r4.devices[0]["params"])
    # ... reduce-scattered once per step, not once per micro-batch
    per_mb = sim(p4.with_(pp=1, dp=16, global_batch=64))
    assert per_mb.microbatches == 4 and r4.microbatches == 4


def test_zero2_bucket_and_hybrid_sharding():
    z2 = sim(hpgo.ParallelPlan(global_batch=16, dp=16, zero=2, recompute="full"))
    z1 = sim(hpgo.ParallelPlan(global_batch=16, dp=16, zero=1, recompute="full"))
    # DeepSpeed's two 16-bit buckets of 5e8 elements (overlap_comm) and the
    # fp32 copy of one that its fp32 reduction casts
    assert z2.memory[0].other - z1.memory[0].other == pytest.approx(2 * 5e8 * 2 + 5e8 * 4)
    # fp32 training: the buckets hold fp32 gradients already, no copy
    b2 = sim(hpgo.ParallelPlan(global_batch=16, dp=16, zero=2, recompute="full"),
             precision="fp32")
    assert b2.memory[0].other - sim(hpgo.ParallelPlan(global_batch=16, dp=16, zero=1,
                                                      recompute="full"),
                                    precision="fp32").memory[0].other == \
        pytest.approx(2 * 5e8 * 4)
    full = hpgo.ParallelPlan(global_batch=16, dp=16, zero=3, recompute="full")
    hyb = full.with_(shard_size=8)
    rf, rh = sim(full), sim(hyb)
    params = rf.devices[0]["params"]
    assert rf.memory[0].optimizer == pytest.approx(12 * params / 16)
    assert rh.memory[0].optimizer == pytest.approx(12 * params / 8)
    assert rh.memory[0].weights == pytest.approx(2 * params / 8)
    # all-gathers inside the node, reduce-scatter inside it + an all-reduce of
    # the shard across the two nodes: priced apart from full sharding
    assert rh.iteration_time != rf.iteration_time
    # a shard group of all replicas is full sharding
    whole = sim(full.with_(shard_size=16))
    assert whole.iteration_time == rf.iteration_time and whole.memory == rf.memory
    assert "shard=8" in hyb.describe() and "shard" not in full.describe()
    with pytest.raises(ValueError, match="shard_size 3 must divide"):
        full.with_(shard_size=3)
    with pytest.raises(ValueError, match="needs zero >= 1"):
        full.with_(zero=0, shard_size=8)


def test_allocator_reserve():
    plan = hpgo.ParallelPlan(global_batch=16, dp=16, zero=3, recompute="full")
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    assert c.allocator_fragmentation == 0.0
    m0 = sim(plan, c).memory[0]
    assert m0.reserved == 0
    f = hpgo.cluster.ALLOCATOR_FRAGMENTATION
    assert f == pytest.approx(9.2 / 80)
    m1 = sim(plan, dataclasses.replace(c, allocator_fragmentation=f)).memory[0]
    allocated = m0.total - 2e9  # the CUDA context and NCCL are not the allocator's
    assert m1.reserved == pytest.approx(allocated * f / (1 - f))
    assert m1.total == pytest.approx(m0.total + m1.reserved)
    with pytest.raises(ValueError, match="allocator_fragmentation"):
        dataclasses.replace(c, allocator_fragmentation=0.95)


def test_offloading_prices_and_memory():
    c = hpgo.Cluster.preset("dgx-a100-80gb")
    plan = hpgo.ParallelPlan(global_batch=8, dp=8, zero=1, recompute="full")
    on = sim(plan.with_(offload_optimizer=True), c)
    off = sim(plan, c)
    shard = off.devices[0]["params"] / 8
    assert on.memory[0].optimizer == 0
    assert on.memory[0].host == pytest.approx(off.memory[0].optimizer) == pytest.approx(12 * shard)
    # CPU Adam: 28 B a parameter over the node's CPU memory shared by 8 GPUs,
    # 2 + 2 B over the GPU's PCIe link
    t_cpu = 28 * shard / (c.host_memory_bandwidth / 8) + 4 * shard / c.host_bandwidth
    t_ag = on.devices[0]["optimizer"] - t_cpu
    assert 0 <= t_ag < 0.2 * t_cpu
    # activations: that share of what is stored beyond one micro-batch
    p = hpgo.ParallelPlan(global_batch=32, pp=2, dp=4)
    a0 = sim(p, c)
    a1 = sim(p.with_(offload_activations=0.5), c)
    assert a1.memory[0].activations < a0.memory[0].activations
    assert a1.memory[0].host == pytest.approx(a0.memory[0].activations - a1.memory[0].activations)
    assert a1.iteration_time >= a0.iteration_time
    with pytest.raises(ValueError, match=r"offload_activations must be in \[0, 1\]"):
        p.with_(offload_activations=1.5)
    # what a node's 8 GPUs offload must fit its CPU memory
    small = dataclasses.replace(c, host_memory_bytes=8 * on.memory[0].host * 0.99)
    r = sim(plan.with_(offload_optimizer=True), small)
    assert not r.fits and r.memory[0].total <= r.memory[0].capacity
    assert "CPU memory" in repr(r.memory[0])
    assert sim(plan.with_(offload_optimizer=True),
               dataclasses.replace(small, host_memory_bytes=8 * on.memory[0].host)).fits
    bare = hpgo.Cluster.preset("grand-teton-h100")
    with pytest.raises(ValueError, match="host_bandwidth"):
        sim(plan.with_(offload_optimizer=True), bare)
    d = plan.with_(offload_optimizer=True, offload_activations=0.25,
                   reshard_after_forward=False).to_dict()
    back = hpgo.ParallelPlan.from_dict(json.loads(json.dumps(d)))
    assert back.offload_activations == 0.25 and back.offload_optimizer
    assert not back.reshard_after_forward


def test_nccl_latency_model():
    # NCCL's tuning model (src/graph/tuning.cc), Simple protocol, microseconds
    c = dataclasses.replace(hpgo.Cluster.preset("dgx-h100", nodes=4), nccl_latency=True)
    tiny = 1.0
    assert c.collective_time("all_gather", 8, tiny) == pytest.approx((8.4 + 7 * 3.4) * 1e-6,
                                                                     rel=1e-3)
    # 16 GPUs on two nodes: 15 steps, one of them across the network
    assert c.collective_time("reduce_scatter", 16, tiny) == pytest.approx(
        (8.4 + 14 * 3.4 + 14) * 1e-6, rel=1e-3)
    # all-reduce: the lower of the ring (x 1.4 across nodes) and the tree
    ring = (8.4 + (62 - 6) * 3.4 + 6 * 14) * 1.4
    tree = 8.4 + 2 * (7 * 4.0 + 2 * 14)
    assert c.collective_time("all_reduce", 32, tiny) == pytest.approx(min(ring, tree) * 1e-6,
                                                                      rel=1e-3)
    # a flat ring over many nodes: latency linear in ranks (spec 5.1)
    big = c.with_nodes(1024)
    t = big.collective_time("all_gather", 1024, tiny, stride=8)
    assert t == pytest.approx((8.4 + 1023 * 14) * 1e-6, rel=1e-3)
    # the bandwidth term is the same model's
    off = dataclasses.replace(c, nccl_latency=False)
    S = 1e9
    assert c.collective_time("all_gather", 8, S) - c.collective_time("all_gather", 8, tiny) == \
        pytest.approx(off.collective_time("all_gather", 8, S) -
                      off.collective_time("all_gather", 8, tiny), rel=1e-6)


def test_straggler_expected_maximum():
    # E[max of n standard normals] (spec 5.3: 1.42 for 8, 3.25 for 1024, 3.97 for 16384)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    plan = hpgo.ParallelPlan(global_batch=8, dp=8, zero=1)
    base = sim(plan, c).iteration_time
    for nodes, gpus, e in ((1, 8, 1.42360), (128, 1024, 3.24824), (2048, 16384, 3.97135)):
        cl = dataclasses.replace(hpgo.Cluster.preset("dgx-h100", nodes=nodes), jitter=0.01)
        p = plan.with_(dp=gpus, global_batch=gpus)
        t0 = sim(p, dataclasses.replace(cl, jitter=0.0)).iteration_time
        t1 = sim(p, cl).iteration_time
        assert t1 / t0 == pytest.approx(1 + 0.01 * e, abs=2e-5)
    assert base > 0
    with pytest.raises(ValueError, match="jitter"):
        dataclasses.replace(c, jitter=-1.0)


def test_gpu_presets_with_their_published_figures():
    names = set(hpgo.Cluster.presets())
    assert {"dgx1-v100-16gb", "dgx2h-v100", "grand-teton-h100", "h100-pcie",
            "dgx-b200"} <= names
    b = hpgo.Cluster.preset("dgx-b200")
    assert b.gpu.bf16_flops == 2250e12 and b.gpu.fp8_flops == 4500e12
    assert b.gpu.memory_bytes == 180e9 and b.gpu.memory_bandwidth == 8e12
    assert b.gpu.matrix_efficiency[0][1] == pytest.approx(1745 / 2250)
    gt = hpgo.Cluster.preset("grand-teton-h100")
    assert gt.gpu.memory_bytes == 96e9 and gt.gpu.memory_bandwidth == 2.4e12
    assert gt.host_bandwidth == 0  # not published
    pc = hpgo.Cluster.preset("h100-pcie")
    assert pc.gpu.multiprocessors == 114 and pc.gpu.bf16_flops == 756e12
    assert pc.gpu.memory_bandwidth == 2.0e12
    d2 = hpgo.Cluster.preset("dgx2h-v100", nodes=2)
    assert d2.gpus_per_node == 16 and d2.gpus == 32
    assert d2.gpu.bf16_flops == pytest.approx(2.1e15 / 16) and d2.gpu.memory_bytes == 32e9
    assert hpgo.Cluster.preset("dgx1-v100-16gb").gpu.memory_bytes == 16e9
    h = hpgo.Cluster.preset("dgx-h100")
    assert h.host_memory_bytes == 2e12 and h.host_bandwidth == 64e9
    # the cluster file carries the host side and the runtime
    x = dataclasses.replace(h, jitter=0.02, nccl_latency=True, allocator_fragmentation=0.1)
    back = hpgo.Cluster.from_dict(json.loads(json.dumps(x.to_dict())))
    assert back == x
    # an older cluster file (no such fields) loads with the defaults
    old = {k: v for k, v in h.to_dict().items() if k in ("format", "name", "gpu", "levels")}
    assert hpgo.Cluster.from_dict(old).jitter == 0.0
    # every preset simulates a step
    for n in ("dgx2h-v100", "h100-pcie", "dgx-b200", "grand-teton-h100"):
        c = hpgo.Cluster.preset(n)
        r = hpgo.simulate(M, c, hpgo.ParallelPlan(global_batch=c.gpus, dp=c.gpus, zero=3,
                                                   recompute="full"),
                          precision="fp16" if "v100" in n else "bf16", timeline=False)
        assert r.iteration_time > 0 and math.isfinite(r.mfu)


def test_autoplan_command_line_sharding_and_offloading_flags():
    import subprocess
    import sys
    base = [sys.executable, "-m", "hpgo", "autoplan", "--model", "llama3-8b", "--cluster",
            "dgx-a100-40gb", "--global-batch", "16", "--json", "--top", "2"]
    out = subprocess.run(base + ["--offload-optimizer", "yes", "--reshard-after-forward", "no",
                                 "--zero", "3", "--shard-size", "4"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    plans = json.loads(out.stdout)["plans"]
    assert plans and all(p["plan"]["offload_optimizer"] and not p["plan"]["reshard_after_forward"]
                         and p["plan"]["shard_size"] == 4 for p in plans)
    bad = subprocess.run(base + ["--offload-activations", "lots"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode != 0 and "--offload-activations" in bad.stderr


def test_spine_oversubscription():
    c = hpgo.Cluster.preset("dgx-h100", nodes=8)
    sp = c.with_spine(4, 7)
    assert [lv.size for lv in sp.levels] == [8, 4, 2] and sp.gpus == c.gpus
    assert sp.levels[2].bandwidth == pytest.approx(50e9 / 7)
    # a data-parallel group inside a pod is unchanged, one across pods slower
    S = 1e9
    assert sp.collective_time("all_reduce", 4, S, stride=8) == \
        pytest.approx(c.collective_time("all_reduce", 4, S, stride=8))
    assert sp.collective_time("all_reduce", 8, S, stride=8) > \
        c.collective_time("all_reduce", 8, S, stride=8)
    with pytest.raises(ValueError, match="pod_nodes must divide"):
        c.with_spine(3, 7)
    with pytest.raises(ValueError, match="oversubscription"):
        c.with_spine(4, 0.5)
