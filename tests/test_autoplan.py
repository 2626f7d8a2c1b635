"""hpgo.autoplan: exact under the model (pruned search = exhaustive search on
random small cases), only plans that fit, fixed choices respected, never
slower than published or HPGO configurations simulated by the same engine."""
import dataclasses
import random

import pytest

import hpgo
from hpgo import graphfile

from conftest import shared_path


def key(plans):
    return [(rp.plan, rp.iteration_time) for rp in plans]


def random_transformer(rng):
    heads = rng.choice([4, 8, 16])
    h = heads * rng.choice([32, 64, 128])
    return hpgo.transformer(hidden=h, ffn=rng.choice([2, 4]) * h, heads=heads,
                            kv_heads=rng.choice([heads, heads // 2, 1]),
                            layers=rng.choice([4, 6, 8, 12]), seq=rng.choice([512, 1024, 2048]),
                            vocab=rng.choice([1000, 32000]), mlp=rng.choice(["gelu", "swiglu"]),
                            flash=rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(12))
def test_pruned_search_equals_exhaustive(seed):
    rng = random.Random(seed)
    model = random_transformer(rng)
    preset = rng.choice(["dgx-a100-40gb", "dgx-h100", "dgx1-v100"])
    cluster = hpgo.Cluster.preset(preset, nodes=rng.choice([1, 2, 4]))
    # squeeze memory so that the memory bound matters too
    cluster = cluster.with_gpu(memory_bytes=rng.choice([4e9, 16e9, 80e9]))
    gb = rng.choice([8, 16, 32, 48])
    top = rng.choice([1, 5, 20])
    # the training stack every plan is priced on (kernel set, tp overlap, cp exchange)
    stack = rng.choice([{}, {"tp_overlap": "te"}, {"kernels": "eager"},
                        {"kernels": "compile", "tp_overlap": "async", "cp_comm": "all_gather"},
                        {"cp_comm": "a2a"}])
    fast = hpgo.autoplan(model, cluster, gb, top=top, threads=rng.choice([1, 2]), **stack)
    slow = hpgo.autoplan(model, cluster, gb, top=top, exhaustive=True, threads=1, **stack)
    assert key(fast) == key(slow)
    assert all(rp.plan.kernels == stack.get("kernels", "te") for rp in slow)
    assert slow.stats["bounds_broken"] == 0
    assert slow.stats["simulated"] == slow.stats["candidates"] - slow.stats["rejected"]
    assert fast.stats["simulated"] <= slow.stats["simulated"]


@pytest.mark.parametrize("seed", range(9))
def test_pruned_equals_exhaustive_with_an_optimizer_gradient_path(seed):
    # 16-bit gradients (Megatron's --grad-reduce-in-bf16, NeMo's Apex
    # optimizer) and DeepSpeed's BF16_Optimizer: their model states and
    # passes go through the memory and time bounds, and only the ZeRO stages
    # they run are ranked
    rng = random.Random(900 + seed)
    model = random_transformer(rng)
    cluster = hpgo.Cluster.preset(rng.choice(["dgx-a100-40gb", "dgx-h100"]),
                                  nodes=rng.choice([1, 2]))
    cluster = cluster.with_gpu(memory_bytes=rng.choice([4e9, 16e9, 80e9]))
    gb, top = rng.choice([8, 16, 32]), rng.choice([1, 5, 20])
    impl = ("megatron_bf16_grads", "apex_bf16", "deepspeed_bf16")[seed % 3]
    fast = hpgo.autoplan(model, cluster, gb, top=top, optimizer_impl=impl,
                         threads=rng.choice([1, 2]))
    slow = hpgo.autoplan(model, cluster, gb, top=top, optimizer_impl=impl, exhaustive=True,
                         threads=1)
    assert key(fast) == key(slow)
    assert slow.stats["bounds_broken"] == 0
    for rp in slow:
        assert rp.plan.optimizer_impl == impl
        assert rp.plan.zero in {"megatron_bf16_grads": (0, 1), "apex_bf16": (1,)}.get(
            impl, (0, 1, 2, 3))


@pytest.mark.parametrize("seed", range(4))
def test_pruned_equals_exhaustive_under_the_rowwise_float8_recipes(seed):
    # torchao's rowwise recipes: their casts, 16-bit stored inputs, 16-bit
    # tensor-parallel gathers (and 16-bit weight gradients) go through the
    # time and memory bounds
    rng = random.Random(1900 + seed)
    model = random_transformer(rng)
    cluster = hpgo.Cluster.preset("dgx-h100", nodes=rng.choice([1, 2]))
    cluster = cluster.with_gpu(memory_bytes=rng.choice([8e9, 24e9, 80e9]))
    gb, top = rng.choice([8, 16, 32]), rng.choice([1, 5, 20])
    recipe = ("rowwise", "rowwise_with_gw_hp")[seed % 2]
    kw = dict(top=top, precision="fp8", kernels=rng.choice(["compile", "eager"]),
              fp8_recipe=recipe)
    fast = hpgo.autoplan(model, cluster, gb, threads=rng.choice([1, 2]), **kw)
    slow = hpgo.autoplan(model, cluster, gb, exhaustive=True, threads=1, **kw)
    assert key(fast) == key(slow)
    assert slow.stats["bounds_broken"] == 0
    assert all(rp.plan.fp8_recipe == recipe for rp in slow)


def test_sixteen_bit_gradients_fit_plans_that_fp32_gradients_do_not():
    # Llama 3.1 405B as NVIDIA's recipe runs it (TP 8, CP 2, PP 9, VP 7, no
    # recomputation) fits only with the 2 bytes a parameter 16-bit gradients
    # save; autoplan then finds it
    m = hpgo.transformer("llama3-405b", seq=8192).with_(vocab=51200)
    c = hpgo.Cluster.preset("dgx-h100", nodes=72)
    fixed = dict(tp=8, cp=2, pp=9, virtual_stages=7, recompute="none", schedule="interleaved-1f1b",
                 tp_overlap="te", zero=1)
    assert len(hpgo.autoplan(m, c, 252, top=1, **fixed)) == 0
    r = hpgo.autoplan(m, c, 252, top=1, optimizer_impl="megatron_bf16_grads", **fixed)
    assert len(r) == 1 and r[0].result.fits
    assert r[0].plan.optimizer_impl == "megatron_bf16_grads"
    with pytest.raises(ValueError, match="zero"):
        hpgo.autoplan(m, c, 252, optimizer_impl="apex_bf16", zero=2)
    with pytest.raises(ValueError, match="does not run optimizer_impl"):
        hpgo.autoplan("llama3-8b", "dgx-h100", 64, optimizer_impl="apex_bf16",
                      framework="torchtitan")


@pytest.mark.parametrize("seed", range(8))
def test_pruned_equals_exhaustive_with_sharding_and_offloading_searched(seed):
    # reshard after forward, offloaded optimizer and activations searched,
    # hybrid sharding, straggler jitter, NCCL latency and the allocator's
    # reserve: every new price and memory term goes through the bounds
    rng = random.Random(500 + seed)
    model = random_transformer(rng)
    preset = rng.choice(["dgx-a100-40gb", "dgx-h100", "dgx1-v100", "dgx-b200"])
    cluster = hpgo.Cluster.preset(preset, nodes=rng.choice([1, 2, 4]))
    cluster = cluster.with_gpu(memory_bytes=rng.choice([2e9, 4e9, 16e9]))
    cluster = dataclasses.replace(cluster, jitter=rng.choice([0.0, 0.02]),
                                  nccl_latency=rng.random() < 0.5,
                                  allocator_fragmentation=rng.choice([0.0, 0.115]))
    gb = rng.choice([8, 16, 32])
    top = rng.choice([1, 5, 20])
    kw = dict(reshard_after_forward=None, offload_optimizer=None, offload_activations=None,
              shard_size=rng.choice([0, 0, 2]))
    fast = hpgo.autoplan(model, cluster, gb, top=top, threads=rng.choice([1, 2]), **kw)
    slow = hpgo.autoplan(model, cluster, gb, top=top, exhaustive=True, threads=1, **kw)
    assert key(fast) == key(slow)
    assert fast.stats["simulated"] <= slow.stats["simulated"]
    for rp in fast:
        assert rp.result.fits
        assert rp.plan.shard_size in (0, kw["shard_size"])


def test_autoplan_searches_offloading_where_memory_needs_it():
    # a 1.3B model with Adam on 8 GPUs of 20 GB: weights and gradients (6 B a
    # parameter) fit, the optimizer state (12 B) does not without sharding;
    # ZeRO-Offload-style plans appear when searched
    m = hpgo.transformer(hidden=2048, ffn=8192, heads=16, layers=24, seq=2048, vocab=32000)
    c = hpgo.Cluster.preset("dgx-a100-40gb").with_gpu(memory_bytes=20e9)
    kw = dict(zero=0, tp=1, pp=1, top=3)
    assert len(hpgo.autoplan(m, c, 8, **kw)) == 0
    found = hpgo.autoplan(m, c, 8, offload_optimizer=None, offload_activations=None,
                          recompute="full", **kw)
    assert len(found) > 0 and all(rp.plan.offload_optimizer for rp in found)
    assert found[0].result.memory[0].host > 0
    with pytest.raises(ValueError, match="host_bandwidth"):
        hpgo.autoplan(m, hpgo.Cluster.preset("grand-teton-h100"), 8, offload_optimizer=True)


@pytest.mark.parametrize("seed", range(4))
def test_pruned_equals_exhaustive_on_profiled_chains(seed):
    rng = random.Random(100 + seed)
    n = rng.randint(4, 24)
    nodes = [("Input", 0, 0, 0, 0)] + [
        (f"l{i}", rng.uniform(0.1, 3), rng.uniform(0.2, 6), rng.uniform(1e5, 1e8),
         rng.uniform(0, 4e8)) for i in range(n)]
    model = hpgo.profile_model(graphfile.chain(nodes, {"batch_size": 4}))
    cluster = hpgo.Cluster.preset("dapple-v100").with_gpu(memory_bytes=rng.choice([3e9, 16e9]))
    for objective in ("time", "cost"):
        fast = hpgo.autoplan(model, cluster, 64, top=8, objective=objective)
        slow = hpgo.autoplan(model, cluster, 64, top=8, objective=objective, exhaustive=True)
        assert key(fast) == key(slow)
        assert slow.stats["bounds_broken"] == 0


def test_plans_fit_are_ranked_and_respect_fixed_choices():
    m = hpgo.transformer("llama3-8b")
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=4)
    r = hpgo.autoplan(m, c, 256, top=15)
    assert len(r) == 15 and all(rp.fits for rp in r)
    times = [rp.iteration_time for rp in r]
    assert times == sorted(times)
    assert all(rp.plan.gpus == 32 for rp in r)
    # each ranked plan is what hpgo.simulate says about it
    again = hpgo.simulate(m, c, r[0].plan, timeline=False)
    assert again.iteration_time == r[0].iteration_time
    f = hpgo.autoplan(m, c, 256, tp=2, schedule="1f1b", zero=1, recompute="full", top=5)
    assert all((rp.plan.tp, rp.plan.schedule, rp.plan.zero, rp.plan.recompute) ==
               (2, "1f1b", 1, "full") for rp in f)
    assert f[0].iteration_time >= r[0].iteration_time
    txt = r.table()
    assert "MFU" in txt and "GiB" in txt and str(r[0].plan.tp) in txt
    assert "vs #2" in r.explain()
    assert "<table>" in r._repr_html_()


def test_cost_objective_may_use_fewer_gpus():
    m = hpgo.transformer("llama2-7b")
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=4)
    t = hpgo.autoplan(m, c, 64, top=3)
    cost = hpgo.autoplan(m, c, 64, top=3, objective="cost")
    best_cost = cost[0].iteration_time * cost[0].plan.gpus
    assert best_cost <= t[0].iteration_time * t[0].plan.gpus * (1 + 1e-12)
    assert {rp.plan.gpus for rp in cost} <= {32, 16, 8, 4, 2, 1}


def test_table_names_the_gpus_each_plan_uses():
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    part = hpgo.autoplan("llama3-8b", c, 64, gpus=8, top=2).table()
    assert "(8 of 16 GPUs)" in part.splitlines()[0] and " GPUs " not in part.splitlines()[2]
    cost = hpgo.autoplan("llama3-8b", c, 64, objective="cost", top=12)
    lines = cost.table().splitlines()
    assert len({rp.plan.gpus for rp in cost}) > 1  # several counts ranked: a column says which
    assert lines[2].split()[:2] == ["#", "GPUs"]
    assert [int(x.split()[1]) for x in lines[3:3 + len(cost)]] == [rp.plan.gpus for rp in cost]
    assert lines[-1].startswith("checked on ")       # the published runs of its stack
    # the cost objective always shows the column, one GPU count or several
    tiny = hpgo.transformer(hidden=512, ffn=2048, heads=8, layers=4, seq=512, vocab=1000)
    one = hpgo.autoplan(tiny, c, 64, objective="cost", gpus=1, top=1)
    assert one.table().splitlines()[2].split()[:2] == ["#", "GPUs"]


def test_fp8_params_needs_fp8():
    with pytest.raises(ValueError, match="precision='fp8'"):
        hpgo.autoplan("llama3-8b", "dgx-h100", 64, fp8_params=True)
    r = hpgo.autoplan("llama3-8b", "dgx-h100", 64, precision="fp8", fp8_params=True, top=1)
    assert r[0].plan.fp8_params and "fp8-params" in r.table()


def test_nothing_fits_is_an_empty_ranking_that_says_why():
    r = hpgo.autoplan("llama3-405b", hpgo.Cluster.preset("dgx-h100", nodes=1), 64)
    assert len(r) == 0
    assert "no plan fits" in r.table() and "no plan fits" in r._repr_html_()
    with pytest.raises(ValueError, match="no plan fits"):
        r.best


@pytest.mark.parametrize("model,fixed,words", [
    ("llama3-8b", dict(tp=3), "tp=3 does not divide a node's 8 GPUs"),
    ("llama3-8b", dict(tp=4, pp=16), "tp x pp = 64 needs more than the 16 GPUs"),
    ("llama3-8b", dict(tp=2, pp=3), "tp x pp = 6 does not divide the 16 GPUs"),
    ("llama3-8b", dict(pp=40), "pp=40 exceeds the model's 32 layers"),
    ("llama3-8b", dict(dp=3), "dp=3 does not divide the global batch 16"),
    ("llama3-8b", dict(cp=3), "cp=3: the search tries powers of two"),
    ("llama3-8b", dict(micro_batch=5), "micro_batch=5 does not divide the 16 samples"),
    ("llama3-8b", dict(dp=16, micro_batch=2), "the 1 sample per data-parallel replica"),
    ("llama3-8b", dict(ep=2), "ep=2: the model has no experts"),
    ("mixtral-8x7b", dict(ep=3), "ep=3 does not divide the 8 experts"),
])
def test_an_empty_search_names_the_fixed_choice_that_rules_it_out(model, fixed, words):
    r = hpgo.autoplan(model, hpgo.Cluster.preset("dgx-h100", nodes=2), 16, **fixed)
    assert len(r) == 0 and r.stats["candidates"] == 0
    assert words in r.table()
    with pytest.raises(ValueError) as e:
        r.best
    assert words in str(e.value)
    # a notebook shows the reason too, not only an empty table
    import html
    assert "<b>no plan fits</b>: " in r._repr_html_() and html.escape(words) in r._repr_html_()


def test_every_conflict_named_rules_out_every_plan():
    # the diagnosis is sound: each fixed size it names, fixed alone, leaves
    # the enumeration without a candidate (a grid of single fixed sizes)
    from hpgo.autoplan import _fixed_conflicts
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    named = unexplained = 0
    for model in ("llama3-8b", "mixtral-8x7b"):
        m = hpgo.transformer(model)
        for key, values in (("tp", range(1, 17)), ("cp", (1, 2, 3, 4, 6, 8, 128)),
                            ("pp", (1, 2, 3, 5, 16, 32, 33, 56, 57)), ("dp", (1, 2, 3, 5, 32)),
                            ("micro_batch", (1, 3, 16, 17)), ("ep", (2, 3, 8, 32))):
            for v in values:
                why = _fixed_conflicts(m, c.gpus, c.gpus_per_node, 48, {key: v}, 16)
                r = hpgo.autoplan(m, c, 48, top=1, **{key: v})
                if why:
                    named += 1
                    assert r.stats["candidates"] == 0, (model, key, v, why)
                elif r.stats["candidates"] == 0:
                    unexplained += 1
    # and it is complete on this grid: every empty search is explained
    assert named >= 50 and unexplained == 0


def test_nothing_fits_suggests_only_what_was_not_searched():
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    searched = hpgo.autoplan("llama3-405b", c, 64, offload_optimizer=None,
                             offload_activations=None)
    assert len(searched) == 0 and searched.untried == ()
    assert "recompute=" not in searched.table() and "zero=3" not in searched.table()
    fixed = hpgo.autoplan("llama3-70b", c, 64, zero=1, recompute="selective")
    assert len(fixed) == 0
    assert fixed.untried == ("recompute='full'", "zero=3", "offload_optimizer=True",
                             "offload_activations=1")
    with pytest.raises(ValueError, match=r"or recompute='full', zero=3, offload"):
        fixed.best
    # DeepSpeed searches every ZeRO stage it offers, and offers no offloading here;
    # a cluster without a host link offloads nothing
    assert hpgo.autoplan("llama3-70b", c, 64, framework="deepspeed").untried == ()
    teton = hpgo.Cluster.preset("grand-teton-h100", nodes=1)
    assert hpgo.autoplan("llama3-405b", teton, 64, zero=1).untried == ("zero=3",)


@pytest.mark.parametrize("model,nodes,tp,pp,v,b,mbs", [
    # Korthikanti et al. 2022's published configurations (DGX A100 80 GB, SP + selective)
    ("megatron-22b", 1, 8, 1, 1, 4, 4),
    ("gpt3-175b", 8, 8, 8, 3, 64, 1),
    ("megatron-530b", 35, 8, 35, 3, 280, 1),
    ("megatron-1t", 64, 8, 64, 1, 512, 1),
])
def test_at_least_as_fast_as_the_published_configuration(model, nodes, tp, pp, v, b, mbs):
    m = hpgo.transformer(model)
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=nodes)
    pub = hpgo.ParallelPlan(tp=tp, pp=pp, virtual_stages=v, micro_batch=mbs, global_batch=b,
                            schedule="interleaved-1f1b" if v > 1 else "1f1b",
                            recompute="selective", sequence_parallel=True)
    published = hpgo.simulate(m, c, pub, precision="fp16", timeline=False)
    assert published.fits
    best = hpgo.autoplan(m, c, b, precision="fp16", top=1)[0]
    assert best.iteration_time <= published.iteration_time * (1 + 1e-12)


def test_at_least_as_fast_as_megatrons_gpt3_run_on_1024_gpus():
    m = hpgo.transformer("gpt3-175b")
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=128)
    pub = hpgo.simulate(m, c, hpgo.ParallelPlan(tp=8, pp=16, dp=8, global_batch=1536,
                                                recompute="full"), timeline=False)
    best = hpgo.autoplan(m, c, 1536, top=1)[0]
    assert best.iteration_time <= pub.iteration_time


DAPPLE = [  # profile, profile batch, DAPPLE global batch
    ("resnet50", 32, 256), ("vgg19", 32, 256), ("bert_large", 2, 128), ("xlnet_36", 1, 128),
    ("amoebanet_36", 8, 512),
]


@pytest.mark.parametrize("name,pbs,gbs", DAPPLE)
def test_dapple_profiles_no_slower_than_hpgo_and_data_parallelism(name, pbs, gbs):
    path = str(shared_path("profiles", name, "graph.txt"))
    cluster = hpgo.Cluster.preset("dapple-v100")
    model = hpgo.profile_model(path, pbs)
    best = hpgo.autoplan(model, cluster, gbs, top=1)
    assert len(best) == 1
    t = best[0].iteration_time
    dp = hpgo.simulate(model, cluster, hpgo.ParallelPlan(dp=16, global_batch=gbs,
                                                        micro_batch=gbs // 16), timeline=False)
    if dp.fits:
        assert t <= dp.iteration_time
    # HPGO's best plan (its stages and replicas; hpgo's split of the layers)
    res = hpgo.conductor_from_torch_graph_and_seps(path, pbs, gbs, [8, 16]).py_orchestrate()
    reps = {len(s[3]) for s in res[1]}
    if len(reps) == 1:
        dp_h = reps.pop()
        shape = hpgo.ParallelPlan(pp=len(res[1]), dp=dp_h, global_batch=gbs,
                                  micro_batch=max(1, min(pbs, gbs // dp_h)))
        h = hpgo.simulate(model, cluster, shape, timeline=False)
        if h.fits:
            assert t <= h.iteration_time


def test_branchy_profile_hpgo_cannot_import():
    # inception_v3 has 221,564 HPGO states; as a layer chain it plans at once
    path = str(shared_path("profiles", "inception_v3", "graph.txt"))
    r = hpgo.autoplan(path, "dapple-v100", 256, profile_batch=32, top=3)
    assert len(r) == 3 and r[0].fits


def test_command_line(capsys, tmp_path):
    from hpgo.cli import main
    assert main(["autoplan", "--model", "gpt3-175b", "--cluster", "dgx-a100-80gb", "--nodes", "8",
                 "--global-batch", "64", "--top", "3", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "3 best of" in out and "MFU" in out and "vs #2" in out
    assert main(["autoplan", "--model", "gpt3-175b", "--cluster", "dgx-a100-80gb", "--nodes", "8",
                 "--global-batch", "64", "--megatron-args"]) == 0
    assert "--tensor-model-parallel-size" in capsys.readouterr().out
    c = tmp_path / "c.json"
    hpgo.Cluster.preset("dgx-h100", nodes=2).save(c)
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", str(c), "--global-batch", "32",
                 "--json", "--tp", "2"]) == 0
    import json
    d = json.loads(capsys.readouterr().out)
    assert d["gpus"] == 16 and all(p["plan"]["tp"] == 2 for p in d["plans"])
    # nothing fits: says why, exit 1; bad input: one line, exit 2
    assert main(["autoplan", "--model", "llama3-405b", "--cluster", "dgx-h100",
                 "--global-batch", "8"]) == 1
    assert "no plan fits" in capsys.readouterr().out
    # what it left out, in this command's options
    assert main(["autoplan", "--model", "llama3-405b", "--cluster", "dgx-h100", "--nodes", "2",
                 "--global-batch", "64", "--zero", "1", "--recompute", "selective"]) == 1
    assert ("or --recompute full, --zero 3, --offload-optimizer yes, --offload-activations 1"
            in capsys.readouterr().out)
    assert main(["autoplan", "--model", "nope", "--cluster", "dgx-h100", "--global-batch", "8"]) == 2
    assert "unknown transformer preset" in capsys.readouterr().err
    # a preset without --nodes grows to the --gpus asked for
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "24",
                 "--global-batch", "48", "--json", "--top", "1"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpus"] == 24 and d["plans"][0]["gpus"] == 24
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "1",
                 "--gpus", "16", "--global-batch", "48"]) == 2
    assert "gpus must be in 1..8" in capsys.readouterr().err
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100",
                 "--global-batch", "48", "--fp8-params"]) == 2
    assert "precision='fp8'" in capsys.readouterr().err
    # the all-to-all overlap, at Megatron's measured share or one given
    for flag, shown in ((["--overlap-moe-comm"], "ep-overlap "), (["--overlap-moe-comm", "0.8"],
                                                                  "ep-overlap=0.8")):
        assert main(["autoplan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16",
                     "--global-batch", "64", "--top", "1", "--ep", "8", *flag]) == 0
        assert shown in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["autoplan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100",
              "--global-batch", "64", "--overlap-moe-comm", "1.5"])
    assert "(0, 1]" in capsys.readouterr().err


def test_python_dash_m_runs_the_command_line():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "hpgo", "autoplan", "--model", "nope", "--cluster",
                        "dgx-h100", "--global-batch", "8"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("hpgo autoplan: error:")


def test_exports():
    m = hpgo.transformer("llama3-70b")
    p = hpgo.ParallelPlan(tp=8, pp=4, dp=2, virtual_stages=5, global_batch=256,
                          schedule="interleaved-1f1b", sequence_parallel=True, zero=1,
                          recompute="selective")
    args = p.megatron_args(m)
    for flag in ("--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 4",
                 "--num-layers-per-virtual-pipeline-stage 4", "--sequence-parallel",
                 "--use-distributed-optimizer",
                 "--recompute-granularity selective --recompute-modules layernorm",
                 "--num-query-groups 8", "--swiglu", "--global-batch-size 256"):
        assert flag in args
    # DeepSpeed's pipeline engine runs neither interleaving nor selective recomputation
    with pytest.raises(ValueError, match="schedule 'interleaved-1f1b' is not offered"):
        p.deepspeed_config()
    ds = p.with_(schedule="1f1b", virtual_stages=1, recompute="full").deepspeed_config()
    assert ds["train_batch_size"] == 256 and ds["gradient_accumulation_steps"] == 128
    assert ds["zero_optimization"]["stage"] == 1
    tt = p.with_(zero=3, recompute="full").torchtitan_config(m)
    assert "pipeline_parallel_schedule='Interleaved1F1B'" in tt and "seq_len = 8192" in tt
    pts = p.split_points(m)
    assert [k for k, _, _ in pts] == list(range(20)) and pts[1][1] == 4
    # 81 layers do not divide over 20 stages: the exact split as Megatron's layout
    args = p.megatron_args(m.with_(layers=81))
    assert '--pipeline-model-parallel-layout "Etttt|ttttt|' in args


def test_plots_of_plans_and_steps():
    from optional_deps import need
    need("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    from hpgo import plot
    m = hpgo.transformer("llama2-7b")
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=2)
    r = hpgo.autoplan(m, c, 64, top=6)
    assert len(plot.memory_breakdown(r).axes[0].patches) == 5 * len(r)
    assert plot.time_vs_memory(r).axes[0].get_xlabel().startswith("GiB")
    step = hpgo.simulate(m, c, hpgo.ParallelPlan(pp=4, dp=4, global_batch=64, schedule="zb-h1"))
    fig = plot.step_gantt(step)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"device {d}" for d in range(4)]
    with pytest.raises(ValueError, match="timeline"):
        plot.step_gantt(hpgo.simulate(m, c, step.plan, timeline=False))
    with pytest.raises(TypeError):
        plot.step_gantt(r)


def test_long_sequences_search_context_parallelism_exactly():
    m = hpgo.transformer(hidden=1024, ffn=4096, heads=16, kv_heads=4, layers=8, seq=32768,
                         vocab=32000, mlp="swiglu", flash=True)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2).with_gpu(memory_bytes=24e9)
    fast = hpgo.autoplan(m, c, 16, top=10)
    slow = hpgo.autoplan(m, c, 16, top=10, exhaustive=True)
    assert key(fast) == key(slow)
    assert any(rp.plan.cp > 1 for rp in slow)
    only = hpgo.autoplan(m, c, 16, top=3, cp=4)
    assert all(rp.plan.cp == 4 for rp in only)


def test_pruned_equals_exhaustive_with_as_many_micro_batches_as_stages():
    """Interleaved plans with m = pp: only ranks below pp / 2 hold every
    chunk-micro-batch (the memory bound must follow the schedule's rule; the
    last stage, with the logits, holds fewer)."""
    m = hpgo.transformer("llama3-8b").with_(layers=16, vocab=262144)
    for gib in range(40, 90, 3):
        c = hpgo.Cluster.preset("dgx-h100", nodes=1).with_gpu(memory_bytes=gib * 2 ** 30)
        fast = hpgo.autoplan(m, c, 8, top=10, schedule="interleaved-1f1b", dp=1, tp=1)
        slow = hpgo.autoplan(m, c, 8, top=10, schedule="interleaved-1f1b", dp=1, tp=1,
                             exhaustive=True)
        assert key(fast) == key(slow), gib
