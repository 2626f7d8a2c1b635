"""Model and hardware FLOPs are counted once, consistently: hardware FLOPs
(what the kernels execute, recomputation included) are never below model
FLOPs, and MFU never exceeds 100 %, for every attention kernel and FLOP
convention (flash or not, causal_flops or not), on random plans."""
import random

import pytest

import hpgo


def check(res, peak_ratio=1.0):
    # MFU is over the bf16 dense peak (fp32 for fp32 runs); fp8 GEMMs may run
    # up to the fp8 peak, peak_ratio x faster
    assert res.hw_flops >= res.model_flops * (1 - 1e-12)
    assert res.hfu >= res.mfu * (1 - 1e-12)
    assert 0 < res.mfu <= peak_ratio


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_long_sequence_mfu_below_one(flash, causal):
    # attention dominates at 131,072 tokens: a full-square count over a
    # causal kernel showed MFU 126 %
    m = hpgo.transformer(hidden=1024, ffn=4096, heads=8, layers=4, seq=131072, vocab=1000,
                         flash=flash, causal_flops=causal)
    r = hpgo.autoplan(m, hpgo.Cluster.preset("dgx-h100", nodes=1), 8, top=5)
    assert len(r) > 0
    for rp in r:
        check(rp.result)


def test_megatron_22b_with_flash_at_131072_tokens():
    m = hpgo.transformer("megatron-22b", seq=131072, flash=True)
    r = hpgo.autoplan(m, hpgo.Cluster.preset("dgx-h100", nodes=8), 64, top=3)
    for rp in r:
        check(rp.result)


@pytest.mark.parametrize("seed", range(40))
def test_random_plans_hfu_at_least_mfu_and_mfu_at_most_one(seed):
    rng = random.Random(seed)
    heads = rng.choice([8, 16, 32])
    h = heads * rng.choice([64, 128])
    kw = dict(hidden=h, ffn=rng.choice([2, 4]) * h, heads=heads, layers=rng.choice([4, 8, 16]),
              seq=rng.choice([1024, 8192, 32768, 131072]), vocab=rng.choice([1000, 50000]),
              flash=rng.random() < 0.5, causal_flops=rng.random() < 0.5,
              mlp=rng.choice(["gelu", "swiglu"]), kv_heads=rng.choice([heads, 1]))
    if rng.random() < 0.3:
        kw.update(window=rng.choice([256, 4096]), window_every=rng.choice([1, 2]))
    if rng.random() < 0.3:
        kw.update(experts=8, topk=2, expert_ffn=h)
    m = hpgo.transformer(**kw)
    c = hpgo.Cluster.preset(rng.choice(["dgx-a100-80gb", "dgx-h100"]), nodes=rng.choice([1, 2]))
    precision = rng.choice(["bf16", "fp8"])
    r = hpgo.autoplan(m, c, rng.choice([16, 32]), top=8, max_micro_batch=2, precision=precision)
    g = c.gpu
    ratio = max(1.0, g.fp8_flops / g.bf16_flops) if precision == "fp8" else 1.0
    for rp in r:
        check(rp.result, ratio)
