"""hpgo.autoplan on clusters of several GPU types and with slowed GPUs: the
search over uneven pipeline plans (csrc/search/hetplan.c) equals its
exhaustive enumeration, no bound is broken, and it is cancellable."""
from pathlib import Path

import pytest

import hpgo
from hpgo import graphfile

ROOT = Path(__file__).resolve().parents[1]


def small_model(layers=8):
    return hpgo.transformer(hidden=1024, layers=layers, heads=16, ffn=4096, seq=1024,
                            vocab=32000, name=f"t{layers}")


def h100_a100(per=4):
    return hpgo.Cluster.combine(hpgo.Cluster.build("h100", nodes=1, gpus_per_node=per),
                                hpgo.Cluster.build("a100-80gb", nodes=1, gpus_per_node=per),
                                bandwidth=12.5e9, latency=20e-6, efficiency=0.85)


def a100_v100_small_memory():
    """Memory binds: 4 A100 of 12 GB and 4 V100 of 8 GB for a 1.3B model."""
    a = hpgo.Cluster.build("a100-80gb", nodes=1, gpus_per_node=4).with_gpu(memory_bytes=12e9)
    v = hpgo.Cluster.build("v100-16gb", nodes=1, gpus_per_node=4).with_gpu(memory_bytes=8e9)
    return hpgo.Cluster.combine(a, v, bandwidth=3.125e9)


def chain(n=12):
    nodes = [("Input", 0, 0, 0, 0)] + [(f"l{i}", (1 + i % 3) * 1e3, (2 + i % 3) * 1e3, 1e6,
                                        4e6 * 4) for i in range(n)]
    return hpgo.profile_model(graphfile.chain(nodes, {"batch_size": 1}))


def same(a, b):
    assert [p.label() for p in a] == [p.label() for p in b]
    assert [p.iteration_time for p in a] == [p.iteration_time for p in b]


CASES = [
    ("mixed", lambda: (small_model(), h100_a100(), 16), {}),
    ("memory", lambda: (small_model(24).with_(hidden=2048, ffn=8192), a100_v100_small_memory(),
                        16), {}),
    ("slowed", lambda: (small_model(), hpgo.Cluster.build("a100-80gb", nodes=1, gpus_per_node=4)
                        .with_speed({2: 1 / 1.5}), 12), {}),
    ("mixed-slowed", lambda: (small_model(), h100_a100().with_speed({5: 0.5}), 16), {}),
    ("slow-join", lambda: (small_model(12), hpgo.Cluster.combine(
        hpgo.Cluster.build("v100", nodes=2, gpus_per_node=2),
        hpgo.Cluster.build("a100-80gb", nodes=1, gpus_per_node=4), bandwidth=0.3e9), 32), {}),
    ("span", lambda: (small_model(), hpgo.Cluster.combine(
        hpgo.Cluster.build("h100", nodes=1, gpus_per_node=4),
        hpgo.Cluster.build("a100-80gb", nodes=1, gpus_per_node=4), bandwidth=100e9,
        latency=20e-6, efficiency=0.85), 64), {}),
    ("cost", lambda: (small_model(), h100_a100(), 16),
     {"objective": "cost", "price": {"h100": 4.0, "a100": 1.5}}),
    ("chain", lambda: (chain(), hpgo.Combine if False else
                       hpgo.Cluster.combine(hpgo.Cluster.build("v100", nodes=1, gpus_per_node=2),
                                            hpgo.Cluster.build("a100-80gb", nodes=1,
                                                               gpus_per_node=2),
                                            bandwidth=3e9).with_speed({1: 0.7}), 8), {}),
]


@pytest.mark.parametrize("name, make, kw", CASES, ids=[c[0] for c in CASES])
def test_pruned_equals_exhaustive(name, make, kw):
    model, cluster, gb = make()
    fast = hpgo.autoplan(model, cluster, gb, top=6, **kw)
    full = hpgo.autoplan(model, cluster, gb, top=6, exhaustive=True, **kw)
    assert len(fast) > 0
    same(fast, full)
    assert full.stats["bounds_broken"] == 0 and fast.stats["bounds_broken"] == 0
    assert full.stats["simulated"] == full.stats["plans_built"]
    # the bounds pruned something (the search is not exhaustive in disguise)
    assert fast.stats["simulated"] < full.stats["simulated"]
    for p in fast:
        assert p.plan.stages is not None and p.fits
        assert p.gpus <= cluster.gpus
        # each plan as hpgo.simulate runs it
        r = hpgo.simulate(model, cluster, p.plan, timeline=False)
        assert r.iteration_time == pytest.approx(p.iteration_time, rel=1e-12)


def test_thread_count_does_not_change_the_result():
    model, cluster, gb = small_model(), h100_a100().with_speed({1: 0.6}), 16
    same(hpgo.autoplan(model, cluster, gb, top=5, threads=1),
         hpgo.autoplan(model, cluster, gb, top=5, threads=3))


def test_shares_follow_speed():
    """The stage holding a GPU slowed 2x gives that replica half the samples."""
    c = hpgo.Cluster.build("a100-80gb", nodes=1, gpus_per_node=4).with_speed({1: 0.5})
    best = hpgo.autoplan(small_model(), c, 28, top=1, micro_batch=14, tp=1).best
    for g in best.plan.stages:
        first = best.plan.stages.index(g) * g.dp  # stages placed one after another
        if g.shares is not None and first <= 1 < first + g.dp:
            i = 1 - first
            assert g.shares[i] == min(g.shares)
            assert g.shares[i] * 14 == pytest.approx(
                round(14 * 0.5 / (g.dp - 0.5)), abs=1)
            break
    else:
        pytest.fail(f"no stage shares by speed: {best.label()}")


def test_search_space_holds_each_homogeneous_part():
    """A plan on one GPU type alone is in the space: with the other part's
    GPUs ten thousand times slower the search keeps to the fast one."""
    c = h100_a100()
    slow = c.with_speed({i: 1e-4 for i in range(4, 8)})
    best = hpgo.autoplan(small_model(), slow, 16, top=1).best
    assert {g.gpu for g in best.plan.stages} == {"H100-SXM5-80GB"}


def test_cost_objective_uses_prices():
    m, c = small_model(), h100_a100()
    cheap_a100 = hpgo.autoplan(m, c, 16, top=1, objective="cost",
                               price={"h100": 100.0, "a100": 1.0}).best
    cheap_h100 = hpgo.autoplan(m, c, 16, top=1, objective="cost",
                               price={"h100": 1.0, "a100": 100.0}).best
    assert {g.gpu for g in cheap_a100.plan.stages} == {"A100-SXM4-80GB"}
    assert {g.gpu for g in cheap_h100.plan.stages} == {"H100-SXM5-80GB"}
    # the cost is the GPU-hours at each type's price
    r = cheap_h100.result
    assert r.price == pytest.approx(1.0)


def test_fixed_choices():
    m, c = small_model(), h100_a100()
    r = hpgo.autoplan(m, c, 16, top=3, tp=2, schedule="1f1b", recompute="full", zero=1,
                      micro_batch=8)
    assert len(r) > 0
    for p in r:
        assert all(g.tp == 2 for g in p.plan.stages)
        assert p.plan.schedule == "1f1b" and p.plan.recompute == "full" and p.plan.zero == 1
        assert p.plan.micro_batch == 8


def test_refusals():
    m, c = small_model(), h100_a100()
    with pytest.raises(ValueError, match="does not take dp, pp"):
        hpgo.autoplan(m, c, 16, pp=2, dp=2)
    with pytest.raises(ValueError, match="one model stage per group"):
        hpgo.autoplan(m, c, 16, schedule="interleaved-1f1b")
    with pytest.raises(ValueError, match="no price for A100"):
        hpgo.autoplan(m, c, 16, objective="cost", price={"h100": 2.0})
    five = hpgo.Cluster.combine(*(["dgx-h100"] * 5), bandwidth=1e9)
    with pytest.raises(ValueError, match="at most 4 GPU types"):
        hpgo.autoplan(m, five, 16)
    with pytest.raises(ValueError, match="optimizer_impl"):
        hpgo.autoplan(m, c, 16, optimizer_impl="megatron_bf16_grads")


def test_timeout_stops_the_search():
    big = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 32),
                               hpgo.Cluster.preset("dgx-a100-80gb", 32), bandwidth=25e9)
    with pytest.raises(TimeoutError):
        hpgo.autoplan("llama3-70b", big, 1024, timeout=1e-4, exhaustive=True)


def test_no_fitting_plan_is_a_result():
    c = a100_v100_small_memory()
    r = hpgo.autoplan("llama3-70b", c, 16, top=2)
    assert len(r) == 0 and "do not fit" in r.table()
