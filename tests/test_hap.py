"""HAP on a chain (hpgo.hetero): collective choice, the ratio LP, the form
DP and the baselines, checked against ../shared/data/dynpipe-hap
(spec dynpipe-hap.md sections 2.4, 2.5, 2.7, 2.8)."""
import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_path
from hpgo import hetero as H


def _profiles():
    return json.loads(shared_path("data", "dynpipe-hap", "hap_cluster_profiles.json").read_text())


def test_builtin_constants_are_the_profiled_numbers():
    p = _profiles()
    df = p["device_flops"]
    assert H.DEVICE_FLOPS["V100"] == df["V100_as_profiled"]
    assert H.DEVICE_FLOPS["P100"] == df["P100_as_profiled"]
    assert H.DEVICE_FLOPS["GPU_A"] == df["other_GPU_A"]
    assert H.DEVICE_FLOPS["GPU_B"] == df["other_GPU_B"]
    assert H.DEVICE_FLOPS["GPU_C"] == df["other_GPU_C_used_once"]
    keys = ("all_gather", "all_gather_by_group_call", "all_reduce", "reduce_scatter",
            "reduce_scatter_by_group_call", "all_to_all")
    prof = p["collective_bandwidth_profiles"]
    for ours, theirs in [("hetero-10gbps",
                          "hetero_cluster_2xV100nodes_6xP100nodes_about_10Gbps_interconnect"),
                         ("gpu_a-p100", "profile_used_with_2xGPU_A_plus_2xP100_experiment"),
                         ("homogeneous", "latest_default_in_repo_homogeneous_GPU_B")]:
        assert H.BANDWIDTHS[ours] == tuple(float(prof[theirs][k]) for k in keys)


def _hetero():
    p = _profiles()
    bw = p["collective_bandwidth_profiles"][
        "hetero_cluster_2xV100nodes_6xP100nodes_about_10Gbps_interconnect"]
    f = [p["device_flops"]["V100_as_profiled"]] * 2 + [p["device_flops"]["P100_as_profiled"]] * 6
    return H.cluster(f, all_gather=bw["all_gather"],
                     all_gather_group=bw["all_gather_by_group_call"],
                     all_reduce=bw["all_reduce"], reduce_scatter=bw["reduce_scatter"],
                     reduce_scatter_group=bw["reduce_scatter_by_group_call"],
                     all_to_all=bw["all_to_all"])


def test_collective_crossover_numbers_of_section_2_4():
    """n = 8, B_ag / B_gb = 1.483: crossover max r = 0.185; FLOP/s-proportional
    split r_V = 0.187 makes the grouped broadcast marginally cheaper (1.819 vs
    1.837 ns/byte); a uniform split makes padded 33 % cheaper; reduce-scatter
    crossover 0.214, padded wins at the proportional split."""
    c = _hetero()
    assert round(c.all_gather / c.all_gather_group, 3) == 1.483
    assert round(H.crossover_ratio(8, c.all_gather, c.all_gather_group), 3) == 0.185
    assert round(H.crossover_ratio(8, c.reduce_scatter, c.reduce_scatter_group), 3) == 0.214
    cp = H.plan(H.transformer_chain(2, 8, 16), c, strategies=["dp", "ew_gb"],
                ratios="proportional")
    assert round(cp.ratios[0], 3) == 0.187 and cp.ratios[0] == cp.ratios[1]
    assert math.fsum(cp.ratios) == pytest.approx(1.0, abs=1e-15)
    pad, grp = H.all_gather_cost(cp.ratios, 1.0, c.all_gather, c.all_gather_group)
    assert round(grp * 1e9, 3) == 1.819 and round(pad * 1e9, 3) == 1.837
    assert grp < pad and cp.grouped_all_gather
    pad_u, grp_u = H.all_gather_cost([1 / 8] * 8, 1.0, c.all_gather, c.all_gather_group)
    assert round(1 - pad_u / grp_u, 2) == 0.33
    pad_rs, grp_rs = H.all_gather_cost(cp.ratios, 1.0, c.reduce_scatter, c.reduce_scatter_group)
    assert pad_rs < grp_rs and not cp.grouped_reduce_scatter


def test_example_ratios_are_the_proportional_split():
    p = _profiles()
    ex = p["example_sharding_ratios_found"] if "example_sharding_ratios_found" in p else \
        p["example_device_lists"]["example_sharding_ratios_found"]
    c = H.hap_cluster("GPU_A", 2, "GPU_C", 2, bandwidths="gpu_a-p100")
    layers = H.transformer_chain(1, 16, 8)
    for mode in ("proportional", "optimal"):
        r = H.plan(layers, c, strategies=["dp", "ew_gb"], ratios=mode).ratios
        assert r == pytest.approx(ex["manually_provided_sharding_ratios"], rel=1e-12)


@pytest.mark.parametrize("model", ["bert", "vit", "vgg19"])
@pytest.mark.parametrize("bw", ["hetero-10gbps", "homogeneous"])
def test_hap_beats_the_ddp_baselines(model, bw):
    """C1 analytically: HAP <= DP-CP <= DP-EV, with DP-EV / DP-CP compute =
    sum f / (n min f) (1.199 for 2 V100 + 6 P100)."""
    layers = {"bert": lambda: H.transformer_chain(12, 256, 128),
              "vit": lambda: H.transformer_chain(12, 256, 64),
              "vgg19": lambda: H.vgg19_chain(256)}[model]()
    c = H.hap_cluster("V100", 2, "P100", 6, bandwidths=bw)
    r = H.compare(layers, c)
    assert r["hap"].time <= r["dp-cp"].time * (1 + 1e-12)
    assert r["dp-cp"].time < r["dp-ev"].time
    f = c.flops
    assert r["dp-ev"].compute / r["dp-cp"].compute == pytest.approx(sum(f) / (8 * min(f)),
                                                                     rel=1e-12)
    assert round(sum(f) / (8 * min(f)), 3) == 1.199
    assert r["dp-ev"].all_reduce == pytest.approx(r["dp-cp"].all_reduce, rel=1e-12)
    for p in r.values():
        parts = p.compute + p.all_gather + p.reduce_scatter + p.all_reduce + p.all_to_all
        assert p.time == pytest.approx(parts, rel=1e-12)
    if model == "vgg19" and bw == "hetero-10gbps":
        # weight-heavy late layers: HAP stops all-reducing them
        assert r["hap"].time < 0.8 * r["dp-cp"].time
        assert "dp" in r["hap"].strategies and set(r["hap"].strategies) - {"dp", "ew_gb"}


def test_ratio_lp_is_exact_on_a_forced_program():
    """Column-parallel linears with element-wise layers between them force a
    program whose cost depends on max r (padded gathers) and max r / f; the
    closed-form optimum is no worse than any point of a fine simplex grid."""
    c = H.cluster([3e12, 2e12, 1e12], all_gather=2e9, all_gather_group=1.2e9,
                  all_reduce=1e9, reduce_scatter=2e9, reduce_scatter_group=1.1e9,
                  all_to_all=5e9)
    layers = [H.linear(4096, 1024, 1024), H.elementwise(4096, 1024, 1024, 4096 * 1024 * 50)] * 4
    allowed = ["col", "ew_gf"]
    best = H.plan(layers, c, strategies=allowed)
    assert best.all_gather > 0  # the forced program gathers
    grid = []
    N = 60
    for i in range(N + 1):
        for j in range(N + 1 - i):
            r = [i / N, j / N, (N - i - j) / N]
            grid.append(H.plan(layers, c, strategies=allowed, ratios=r).time)
    assert best.time <= min(grid) * (1 + 1e-12)
    assert best.time >= min(grid) * 0.97


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["V100", "P100", "GPU_A", "GPU_C"]), min_size=1, max_size=9),
       st.integers(1, 3), st.sampled_from(["hetero-10gbps", "homogeneous", "gpu_a-p100"]))
def test_plan_properties(types, blocks, bw):
    counts = {t: types.count(t) for t in sorted(set(types))}
    args = list(itertools.chain.from_iterable(counts.items()))
    c = H.hap_cluster(*args, bandwidths=bw)
    layers = H.transformer_chain(blocks, 16, 32, 64, 256)
    p = H.plan(layers, c)
    assert len(p.strategies) == len(layers) and len(p.ratios) == c.n_devices
    assert math.fsum(p.ratios) == pytest.approx(1.0, abs=1e-12)
    assert all(r >= 0 for r in p.ratios)
    # devices of one type get one share
    for t in counts:
        shares = {p.ratios[i] for i, n in enumerate(c.names) if n == t}
        assert max(shares) - min(shares) <= 1e-15
    assert p == H.plan(layers, c)  # deterministic
    assert p.time <= H.plan(layers, c, strategies=["dp", "ew_gb"],
                            ratios="proportional").time * (1 + 1e-12)
    lens = p.shard_lengths(257)
    assert sum(lens) == 257 and all(abs(x - r * 257) < 1 for x, r in zip(lens, p.ratios))


def test_equal_devices_get_equal_ratios():
    for n in (1, 2, 5, 8):
        c = H.hap_cluster("P100", n)
        for layers in (H.transformer_chain(2, 32, 16), H.vgg19_chain(8)):
            p = H.plan(layers, c)
            assert p.ratios == pytest.approx([1 / n] * n, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10000), st.lists(st.floats(0.01, 10), min_size=1, max_size=16))
def test_shard_lengths_properties(length, w):
    r = [x / math.fsum(w) for x in w]
    if abs(math.fsum(r) - 1) > 1e-9:
        return
    lens = H.shard_lengths(length, r)
    assert sum(lens) == length and all(x >= 0 for x in lens)
    assert all(abs(x - q * length) < 1 for x, q in zip(lens, r))


def test_shard_lengths_examples():
    assert H.shard_lengths(10, [0.5, 0.5]) == [5, 5]
    assert H.shard_lengths(10, [0.25, 0.25, 0.5]) == [3, 2, 5]  # tie: lower index
    assert H.shard_lengths(256, [0.1872] * 2 + [0.1043] * 5 + [1 - 2 * 0.1872 - 5 * 0.1043]) \
        == [48, 48, 27, 27, 27, 27, 26, 26]  # 6 leftover units: largest fractions first


def test_bad_arguments():
    c = H.hap_cluster("V100", 1, "P100", 1)
    layers = H.transformer_chain(1, 4, 4)
    with pytest.raises(ValueError, match="ratios must sum to 1"):
        H.plan(layers, c, ratios=[0.5, 0.6])
    with pytest.raises(ValueError, match="ratios need 2"):
        H.plan(layers, c, ratios=[1.0])
    with pytest.raises(ValueError, match="unknown strategy"):
        H.plan(layers, c, strategies=["magic"])
    with pytest.raises(ValueError, match="ratios must be one of"):
        H.plan(layers, c, ratios="fast")
    with pytest.raises(TypeError, match="HapLayer"):
        H.plan([1, 2], c)
    with pytest.raises(ValueError, match="no layers"):
        H.plan([], c)
    with pytest.raises(TypeError, match="Cluster"):
        H.plan(layers, "cluster")
    with pytest.raises(ValueError, match="unknown device type"):
        H.hap_cluster("TPU", 2)
    with pytest.raises(ValueError, match="m must be finite"):
        H.linear(0, 1, 1)
    with pytest.raises(ValueError, match="flops"):
        H.cluster([1e12, -1.0], all_gather=1e9, all_reduce=1e9)
    with pytest.raises(TypeError, match="all_gather"):
        H.cluster([1e12], all_gather="fast", all_reduce=1e9)
    with pytest.raises(H.PlanningError if hasattr(H, "PlanningError") else ValueError,
                       match="no allowed strategy"):
        H.plan(layers, c, strategies=["dp"])  # element-wise layers have no strategy
    with pytest.raises(ValueError, match="sum to 1"):
        H.shard_lengths(10, [0.3, 0.3])
