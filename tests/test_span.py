"""Stage groups whose replicas span GPU types (data parallelism across types)."""
import pytest

import hpgo

G = hpgo.StageGroup
GPT = hpgo.transformer(hidden=2048, layers=24, heads=16, ffn=8192, seq=2048, vocab=50257,
                       name="gpt3-1.3b")


def mixed(join=25e9):
    return hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 1),
                                hpgo.Cluster.preset("dgx-a100-80gb", 2),
                                bandwidth=join, latency=20e-6, efficiency=0.85)


def dp_plan(shares=None, zero=1, mb=48):
    return hpgo.ParallelPlan(global_batch=240, micro_batch=mb, zero=zero, stages=[
        G(layers=(0, 24), dp=24, gpu=("h100", "a100"), replicas=(8, 16), shares=shares)])


def test_one_type_as_a_mixed_group_is_the_plain_group():
    c = hpgo.Cluster.preset("dgx-a100-80gb", 2)
    for zero in (0, 1, 3):
        a = hpgo.ParallelPlan(global_batch=256, micro_batch=32, zero=zero,
                              stages=[G(layers=(0, 24), dp=16)])
        b = hpgo.ParallelPlan(global_batch=256, micro_batch=32, zero=zero,
                              stages=[G(layers=(0, 24), dp=16, gpu=(0,), replicas=(16,))])
        ra, rb = hpgo.simulate(GPT, c, a), hpgo.simulate(GPT, c, b)
        assert ra.iteration_time == rb.iteration_time
        assert ra.memory[0].total == rb.memory[0].total


def test_round_trip_describe_and_validation():
    p = dp_plan()
    assert hpgo.ParallelPlan.from_dict(p.to_dict()) == p
    assert "h100 x8 + a100 x16" in p.stages[0].describe()
    with pytest.raises(ValueError, match="replicas"):
        G(layers=(0, 4), dp=4, gpu=("h100", "a100"))
    with pytest.raises(ValueError, match="sum to 5, not dp=4"):
        G(layers=(0, 4), dp=4, gpu=("h100", "a100"), replicas=(2, 3))
    with pytest.raises(ValueError, match="replicas needs gpu"):
        G(layers=(0, 4), dp=4, replicas=(4,))
    with pytest.raises(ValueError, match="first_gpu"):
        G(layers=(0, 4), dp=4, gpu=(0, 1), replicas=(2, 2), first_gpu=0)
    with pytest.raises(ValueError, match="once"):
        G(layers=(0, 4), dp=4, gpu=(0, 0), replicas=(2, 2))
    # more replicas than a part has
    bad = hpgo.ParallelPlan(global_batch=240, micro_batch=48, stages=[
        G(layers=(0, 24), dp=24, gpu=("h100", "a100"), replicas=(16, 8))])
    with pytest.raises(ValueError, match="replica 8 needs"):
        hpgo.simulate(GPT, mixed(), bad)
    for fw in ("megatron", "torchtitan", "deepspeed"):
        with pytest.raises(ValueError, match="replicas span GPU types"):
            hpgo.simulate(GPT, mixed(), p, framework=fw)


def test_shares_by_speed_memory_per_type_and_the_join():
    c = mixed()
    even = hpgo.simulate(GPT, c, dp_plan())
    # H100 replicas take 3 samples of each 48, A100 ones 1.5 (whole sequences: 4 / 1)
    sh = tuple([4 / 48] * 8 + [1 / 48] * 16)
    fast = hpgo.simulate(GPT, c, dp_plan(shares=sh))
    assert fast.fits and even.fits
    assert fast.iteration_time < even.iteration_time
    # the memory shown is the tighter GPU type's (the H100 holds 4 samples)
    assert fast.devices[0]["part"] == 0
    one = hpgo.simulate(GPT, hpgo.Cluster.preset("dgx-h100", 1), hpgo.ParallelPlan(
        global_batch=256, micro_batch=4, zero=1, dp=8))
    assert fast.memory[0].activations == pytest.approx(one.memory[0].activations, rel=1e-9)
    # the gradient ring crosses the join: a slower join slows the step
    slow = hpgo.simulate(GPT, mixed(join=2e9), dp_plan(shares=sh))
    assert slow.iteration_time > fast.iteration_time
    # peak: 8 H100 and 16 A100
    h, a = hpgo.Cluster.preset("dgx-h100").gpu, hpgo.Cluster.preset("dgx-a100-80gb").gpu
    assert fast.bf16_peak_flops == pytest.approx((8 * h.peak("bf16") + 16 * a.peak("bf16")) / 24)


def test_autoplan_finds_data_parallelism_across_types():
    """With a fast join, plain data parallelism over both types with shares by
    speed is the search's best plan; its replicas on the faster type take
    more samples, and it runs as hpgo.simulate runs it."""
    c = hpgo.Cluster.combine(hpgo.Cluster.build("h100", nodes=1, gpus_per_node=4),
                             hpgo.Cluster.build("a100-80gb", nodes=1, gpus_per_node=4),
                             bandwidth=100e9, latency=20e-6, efficiency=0.85)
    m = hpgo.transformer(hidden=1024, layers=8, heads=16, ffn=4096, seq=1024, vocab=32000)
    best = hpgo.autoplan(m, c, 64, top=1).best
    g = best.plan.stages[0]
    assert best.plan.pp == 1 and g.mixed and g.replicas == (4, 4)
    assert min(g.shares[:4]) > max(g.shares[4:])
    r = hpgo.simulate(m, c, best.plan, timeline=False)
    assert r.iteration_time == best.iteration_time and r.fits
    # no pipeline on the cluster, nor either type alone, is faster
    for k in range(2):
        alone = hpgo.autoplan(m, c.parts[k], 64, top=1).best
        assert alone.iteration_time > best.iteration_time


def test_hap_data_parallel_plan_on_a_mixed_cluster():
    """HAP's data-parallel plan over 8 A100 + 8 V100 runs in the step engine as
    one group spanning both types, its shares HAP's sharding_round of the
    batch; the engine agrees the shares beat even ones, and prices the
    gradient all-reduce as one ring at the join's rate where HAP's table
    measures the hierarchical collective (docs/replanning-and-heterogeneous.md)."""
    from hpgo import hetero as H
    import dataclasses
    hc = H.hap_cluster("a100", 8, "v100-16gb", 8, network_gbps=100, dtype="bf16")
    chain = H.transformer_chain(12, 512, 128, 768, 3072, heads=12)
    dp = H.plan(chain, hc, strategies=H.DDP_STRATEGIES, ratios="proportional")
    m = hpgo.transformer(hidden=768, layers=12, heads=12, ffn=3072, seq=128, vocab=30522)
    p = dp.to_parallel_plan(m, 512, cluster=hc)
    (g,) = p.stages
    assert g.gpu == ("a100", "v100-16gb") and g.replicas == (8, 8)
    assert [round(x * 512) for x in g.shares] == dp.shard_lengths(512)
    c = hpgo.Cluster.combine(hpgo.Cluster.build("a100", nodes=1, gpus_per_node=8),
                             hpgo.Cluster.build("v100-16gb", nodes=1, gpus_per_node=8),
                             bandwidth=100e9 / 8, latency=20e-6, efficiency=0.9)
    r = hpgo.simulate(m, c, p, precision="bf16", timeline=False)
    even = hpgo.simulate(m, c, p.with_(stages=(dataclasses.replace(g, shares=None),)),
                         precision="bf16", timeline=False)
    assert r.fits and r.iteration_time < even.iteration_time
    d = r.devices[0]
    assert d["sync_end"] - d["compute_end"] > dp.all_reduce
    with pytest.raises(ValueError, match="consecutive"):
        dp.to_parallel_plan(m, 512, cluster=dataclasses.replace(
            hc, names=("a100", "v100-16gb") * 8))


def test_memory_is_judged_on_every_type():
    """The memory shown is the type with the least relative margin, against
    its own capacity; a type that overflows makes the plan not fit though
    the other has room."""
    c = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 1),
                             hpgo.Cluster.preset("dgx-a100-40gb", 1), bandwidth=25e9)

    def sim(h, a, mb, rc="none"):
        p = hpgo.ParallelPlan(global_batch=mb * 2, micro_batch=mb, zero=1, recompute=rc,
                              stages=[G(layers=(0, 24), dp=16, gpu=(0, 1), replicas=(8, 8),
                                        shares=(h / mb,) * 8 + (a / mb,) * 8)])
        return hpgo.simulate(GPT, c, p, timeline=False)
    r = sim(1, 3, 32, "full")
    assert r.fits and r.devices[0]["part"] == 1 and r.memory[0].capacity == 40e9
    big = sim(1, 15, 128)
    assert not big.fits and big.devices[0]["part"] == 1
    hbig = sim(15, 1, 128)
    assert not hbig.fits and hbig.devices[0]["part"] == 0 and hbig.memory[0].capacity == 80e9
    # the A100 replicas' activations: 15 samples' against 1 sample's on the H100 side
    assert big.memory[0].activations == pytest.approx(hbig.memory[0].activations, rel=1e-9)
