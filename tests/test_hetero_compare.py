"""autoplan on three mixed clusters (H100 + A100, A100 + V100, one GPU slowed
1.5x) against the best plan of the homogeneous search on each GPU type alone
and against speed-proportional data parallelism, under the same step model
(docs/heterogeneous.md has the table)."""
import pytest

import hpgo
from hpgo.autoplan_hetero import best_proportional_dp, compare, proportional_dp

GPT3_1_3B = hpgo.transformer(hidden=2048, layers=24, heads=16, ffn=8192, seq=2048, vocab=50257,
                             name="gpt3-1.3b")
GPT3_2_7B = hpgo.transformer(hidden=2560, layers=32, heads=32, ffn=10240, seq=2048, vocab=50257,
                             name="gpt3-2.7b")


def h100_a100():
    return hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 2),
                                hpgo.Cluster.preset("dgx-a100-80gb", 2),
                                bandwidth=25e9, latency=20e-6, efficiency=0.85)


def wins(d):
    assert d["autoplan"] is not None
    for p in d["parts"]:
        assert p["time"] is None or d["autoplan"] < p["time"], p
    assert d["dp"] is None or d["autoplan"] < d["dp"]


def test_h100_a100_llama():
    d = compare("llama3-8b", h100_a100(), 128)
    wins(d)
    assert d["dp"] is not None and d["autoplan"] < 0.9 * min(p["time"] for p in d["parts"])


def test_a100_v100_gpt():
    c = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-a100-40gb", 2),
                             hpgo.Cluster.preset("dgx1-v100", 4),
                             bandwidth=6.25e9, latency=20e-6, efficiency=0.9)
    d = compare(GPT3_2_7B, c, 256)
    wins(d)
    # both types hold stages
    assert "V100" in d["plan"] and "A100" in d["plan"]


def test_one_gpu_slowed():
    c = hpgo.Cluster.preset("dgx-a100-80gb", 2).with_speed({3: 1 / 1.5})
    d = compare("llama3-8b", c, 128)
    wins(d)
    best = hpgo.autoplan("llama3-8b", c, 128, top=1).best
    # the stage holding GPU 3 gets fewer layers than the others
    n = [g.layers[1] - g.layers[0] for g in best.plan.stages]
    assert best.plan.stages[0].dp * best.plan.stages[0].tp > 3 and n[0] == min(n) < max(n)


def test_data_parallelism_across_types():
    """A small model on a fast join: the search's own data parallelism across
    the two types (one stage group spanning both, shares by speed) is its
    best plan, no slower than the closed-form proportional baseline."""
    d = compare(GPT3_1_3B, h100_a100(), 256)
    wins(d)
    assert "x8 + A100" in d["plan"] and d["plan"].startswith("pp=1")


def test_proportional_dp_shares_and_refusals():
    c = h100_a100()
    d = proportional_dp(GPT3_1_3B, c, 256, zero=1, recompute="full")
    h, a = d["samples"][0], d["samples"][-1]
    assert sum(d["samples"]) == 256 and h > a   # an H100 takes more samples than an A100
    assert d["time_overlapped"] <= d["time"]
    with pytest.raises(ValueError, match="leave each of the 32 GPUs a sample"):
        proportional_dp(GPT3_1_3B, c, 16)
    assert best_proportional_dp("llama3-70b", c, 32) is None   # nothing fits


def test_proportional_dp_prices_the_overlap_as_the_engine_does():
    """The closed-form baseline's backward beside the all-reduce slows by the
    engine's DP_OVERLAP_SLOWDOWN (csrc/step/engine.c), the same constant."""
    import re

    from csrc_paths import src
    from hpgo import autoplan_hetero
    text = src("engine.c").read_text()
    c_value = float(re.search(r"#define DP_OVERLAP_SLOWDOWN ([0-9.]+)", text).group(1))
    assert autoplan_hetero.DP_OVERLAP_SLOWDOWN == c_value
