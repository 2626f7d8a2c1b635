"""From a practitioner's question to an answer: memory headroom, days and
dollars, MFU against the precision's peak, the cluster file format and its
schema, clusters from a GPU type, ``hpgo simulate`` for any plan,
``hpgo cluster``, HF configs' sequence length and the CLI's hygiene."""
import argparse
import json
import math
import random

import pytest

import hpgo
from hpgo import _schema
from hpgo.cli import build_parser, main
from hpgo.cluster import GPU_TYPES, resolve
from hpgo.parallel import DEFAULT_HEADROOM

GIB = 2.0 ** 30


def key(plans):
    return [(rp.plan, rp.iteration_time) for rp in plans]


# ---- memory headroom ------------------------------------------------------------


def test_headroom_keeps_a_share_of_memory_free():
    m = hpgo.transformer("llama3-8b")
    plan = hpgo.ParallelPlan(global_batch=8, dp=8, zero=3, recompute="full")
    r0 = hpgo.simulate(m, "dgx-h100", plan, headroom=0)
    total = r0.memory[0].total
    cap = r0.memory[0].capacity
    # a headroom just below / above the free share flips the verdict
    free = 1 - total / cap
    assert r0.fits and free > 0
    ok = hpgo.simulate(m, "dgx-h100", plan, headroom=free * 0.9)
    bad = hpgo.simulate(m, "dgx-h100", plan, headroom=free * 1.1)
    assert ok.fits and not bad.fits
    assert bad.memory[0].total == total and bad.memory[0].capacity == cap
    assert bad.memory[0].usable == pytest.approx(cap * (1 - free * 1.1))
    assert bad.memory[0].margin == pytest.approx(bad.memory[0].usable - total)
    assert "DOES NOT FIT" in bad.summary() and "kept free" in bad.summary()
    # the default is the allocator's reserve, and the times do not change
    d = hpgo.simulate(m, "dgx-h100", plan)
    assert d.headroom == DEFAULT_HEADROOM and 0 < DEFAULT_HEADROOM < 0.2
    assert d.iteration_time == r0.iteration_time
    assert d.memory[0].headroom == pytest.approx(DEFAULT_HEADROOM * cap)


@pytest.mark.parametrize("bad,exc", [(1.0, ValueError), (-0.1, ValueError),
                                     (float("nan"), ValueError), ("0.1", TypeError),
                                     (True, TypeError)])
def test_bad_headroom_is_refused(bad, exc):
    plan = hpgo.ParallelPlan(global_batch=8, dp=8)
    with pytest.raises(exc, match="headroom"):
        hpgo.simulate("llama3-8b", "dgx-h100", plan, headroom=bad)
    with pytest.raises(exc, match="headroom"):
        hpgo.autoplan("llama3-8b", "dgx-h100", 8, headroom=bad)


@pytest.mark.parametrize("seed", range(6))
def test_search_with_headroom_equals_exhaustive(seed):
    rng = random.Random(500 + seed)
    heads = rng.choice([4, 8])
    h = heads * 64
    model = hpgo.transformer(hidden=h, ffn=4 * h, heads=heads, layers=rng.choice([4, 8]),
                             seq=rng.choice([512, 1024]), vocab=32000)
    cluster = hpgo.Cluster.preset("dgx-a100-40gb", nodes=rng.choice([1, 2]))
    cluster = cluster.with_gpu(memory_bytes=rng.choice([3e9, 6e9, 16e9]))
    room = rng.choice([0.0, 0.05, 0.3])
    gb = rng.choice([8, 16, 32])
    for objective in ("time", "cost"):
        fast = hpgo.autoplan(model, cluster, gb, top=8, headroom=room, objective=objective)
        slow = hpgo.autoplan(model, cluster, gb, top=8, headroom=room, objective=objective,
                             exhaustive=True)
        assert key(fast) == key(slow)
        for rp in fast:
            assert rp.memory.total <= rp.memory.capacity * (1 - room) * (1 + 1e-12)
            assert rp.result.headroom == room


def test_headroom_rejects_plans_near_the_limit():
    m = hpgo.transformer("llama3-8b")
    c = hpgo.Cluster.preset("dgx-h100")
    none = hpgo.autoplan(m, c, 64, top=50, headroom=0)
    some = hpgo.autoplan(m, c, 64, top=50, headroom=0.2)
    assert max(rp.memory.total / rp.memory.capacity for rp in some) <= 0.8
    assert max(rp.memory.total / rp.memory.capacity for rp in none) > 0.8
    assert "20 % of memory kept free" in some.table()


# ---- days, dollars, rates -------------------------------------------------------


def test_days_gpu_hours_and_cost():
    plan = hpgo.ParallelPlan(global_batch=64, dp=8, zero=1)
    r = hpgo.simulate("llama3-8b", "dgx-h100", plan, tokens=1e12, price=2.5)
    seconds = 1e12 / r.tokens_per_second
    assert r.days == pytest.approx(seconds / 86400)
    assert r.gpu_hours == pytest.approx(seconds * 8 / 3600)
    assert r.cost == pytest.approx(r.gpu_hours * 2.5)
    assert r.tokens_per_gpu == pytest.approx(r.tokens_per_second / 8)
    assert r.tflops_per_gpu == pytest.approx(r.model_flops / r.iteration_time / 8 / 1e12)
    assert "$" in r.summary() and "days" in r.summary()
    plain = hpgo.simulate("llama3-8b", "dgx-h100", plan)
    assert plain.days is None and plain.cost is None and plain.train_summary() is None
    for bad in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="tokens"):
            hpgo.simulate("llama3-8b", "dgx-h100", plan, tokens=bad)
        with pytest.raises(ValueError, match="price"):
            hpgo.simulate("llama3-8b", "dgx-h100", plan, price=bad)


def test_mfu_is_against_the_precision_peak_and_bf16_stays_available():
    m = hpgo.transformer("llama3-8b").with_(layers=8)
    plan = hpgo.ParallelPlan(global_batch=8, dp=8)
    bf = hpgo.simulate(m, "dgx-h100", plan, precision="bf16")
    f8 = hpgo.simulate(m, "dgx-h100", plan, precision="fp8")
    gpu = hpgo.Cluster.preset("dgx-h100").gpu
    assert bf.mfu == pytest.approx(bf.mfu_bf16)
    assert f8.mfu == pytest.approx(f8.mfu_bf16 * gpu.bf16_flops / gpu.fp8_flops)
    assert f8.mfu == pytest.approx(f8.tflops_per_gpu * 1e12 / gpu.fp8_flops)
    assert "of fp8 peak" in f8.summary() and "bf16-peak MFU" in f8.assumptions()


def test_deadline_ranking_is_exact_and_cheapest():
    m = hpgo.transformer(hidden=1024, ffn=4096, heads=8, layers=8, seq=1024, vocab=32000)
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=2)
    tokens = 2e9
    free = hpgo.autoplan(m, c, 64, objective="cost", tokens=tokens, top=3)
    # a deadline between the fastest and the cheapest plan's days
    fastest = hpgo.autoplan(m, c, 64, tokens=tokens, top=1)[0]
    limit = (fastest.days + free[0].days) / 2
    r = hpgo.autoplan(m, c, 64, objective="cost", tokens=tokens, price=2.0, max_days=limit,
                      top=5)
    assert len(r) and all(rp.days <= limit for rp in r)
    # brute force: every plan of every GPU count, filtered and sorted by cost
    every = []
    g = c.gpus
    while True:
        every += list(hpgo.autoplan(m, c, 64, gpus=g, top=1000, exhaustive=True, tokens=tokens))
        if g % 2:
            break
        g //= 2
    ok = sorted((rp.iteration_time * rp.gpus for rp in every if rp.days <= limit))
    assert [rp.iteration_time * rp.gpus for rp in r] == pytest.approx(ok[:5])
    assert r[0].cost == pytest.approx(r[0].gpu_hours * 2.0)
    # the front: nothing on it is beaten on both time and cost, the fastest is on it
    front = r.pareto()
    assert front[0].iteration_time == pytest.approx(min(rp.iteration_time for rp in every))
    for a in front:
        assert not any(b.iteration_time < a.iteration_time and
                       b.iteration_time * b.gpus < a.iteration_time * a.gpus for b in every)
    assert "Pareto" in r.pareto_table()
    # an impossible deadline says so
    none = hpgo.autoplan(m, c, 64, objective="cost", tokens=tokens, max_days=1e-9)
    assert not len(none) and "within" in none.table()
    with pytest.raises(ValueError, match="tokens"):
        hpgo.autoplan(m, c, 64, max_days=3)


# ---- cluster files ---------------------------------------------------------------


def test_every_preset_and_the_schema_example_pass_the_schema(tmp_path):
    schema = _schema.load_schema("cluster")
    for name in hpgo.Cluster.presets():
        c = hpgo.Cluster.preset(name, nodes=2)
        _schema.check(c.to_dict(), schema)
        p = tmp_path / f"{name}.json"
        c.save(p)
        assert hpgo.Cluster.load(p) == c
    for ex in schema["examples"]:
        assert hpgo.Cluster.from_dict(ex).gpus == 32

    def props(s):
        for k, v in s.get("properties", {}).items():
            yield k, v
            yield from props(v)
            yield from props(v.get("items", {}))
    # the schema documents every field
    assert all("description" in v for _k, v in props(schema))


@pytest.mark.parametrize("edit,words", [
    (lambda d: d["gpu"].update(memory_bytes=-1), "gpu.memory_bytes: must be > 0"),
    (lambda d: d["gpu"].update(memory_bytes="80GB"), "gpu.memory_bytes: must be a number"),
    (lambda d: d["gpu"].update(memory_bytes=True), "gpu.memory_bytes: must be a number"),
    (lambda d: d["gpu"].pop("bf16_flops"), "gpu: missing field 'bf16_flops'"),
    (lambda d: d["levels"][1].update(bandwith=1e9), "levels[1]: unknown field 'bandwith'"),
    (lambda d: d["levels"][0].update(size=0), "levels[0].size: must be >= 1"),
    (lambda d: d["levels"][0].update(size=2.5), "levels[0].size: must be an integer"),
    (lambda d: d["gpu"]["matrix_efficiency"][0].__setitem__(1, 1.5),
     "gpu.matrix_efficiency[0][1]: must be <= 1"),
    (lambda d: d.update(levels=[]), "levels: needs at least 1"),
    (lambda d: d.update(format="hpgo-cluster-2"), "not an hpgo-cluster-1"),
])
def test_bad_cluster_files_name_the_file_and_field(tmp_path, edit, words):
    d = hpgo.Cluster.preset("dgx-h100", nodes=2).to_dict()
    d = json.loads(json.dumps(d))
    edit(d)
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        hpgo.Cluster.load(p)
    assert str(p) in str(e.value) and words in str(e.value)


def test_the_checker_refuses_keywords_it_does_not_check_and_non_finite_numbers():
    with pytest.raises(ValueError, match="not supported"):
        _schema.check(1, {"type": "number", "multipleOf": 2})
    with pytest.raises(ValueError, match="finite"):
        _schema.check(float("nan"), {"type": "number"}, "f.json")


def test_cluster_from_a_gpu_type_and_network_speed():
    c = hpgo.Cluster.build("a100-40gb", nodes=4, gpus_per_node=8, inter_node_gbps=200,
                           per_node=True)
    assert (c.gpus, c.nodes, c.gpus_per_node) == (32, 4, 8)
    assert c.gpu.memory_bytes == 40e9
    assert c.levels[1].bandwidth == pytest.approx(200e9 / 8 / 8)   # bytes/s per GPU
    per_gpu = hpgo.Cluster.build("a100-40gb", nodes=4, inter_node_gbps=200)
    assert per_gpu.levels[1].bandwidth == pytest.approx(25e9)
    assert hpgo.Cluster.build("h100", nodes=2).levels == \
        hpgo.Cluster.preset("dgx-h100", nodes=2).levels
    with pytest.raises(ValueError, match="unknown GPU 'b300'"):
        hpgo.Cluster.build("b300")
    with pytest.raises(ValueError, match="inter_node_gbps"):
        hpgo.Cluster.build("h100", inter_node_gbps=0)
    assert set(GPU_TYPES) >= {"a100-40gb", "a100-80gb", "h100", "h200", "v100"}


def test_missing_cluster_file_is_not_an_unknown_preset(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such cluster file"):
        resolve(str(tmp_path / "nofile.json"))
    with pytest.raises(ValueError, match="unknown cluster preset 'dgx-b300'.*dgx-h100"):
        resolve("dgx-b300")
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", "nofile.json",
                 "--global-batch", "8"]) == 2


# ---- hpgo simulate for any plan ---------------------------------------------------


def test_simulate_any_plan_from_the_command_line(capsys, tmp_path):
    argv = ["simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "8",
            "--tp", "8", "--pp", "4", "--dp", "2", "--global-batch", "512",
            "--schedule", "interleaved-1f1b", "--vp", "5", "--sequence-parallel",
            "--tokens", "1e12", "--price", "2.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for words in ("llama3-70b, seq 8,192, bf16 on dgx-h100", "global batch 512",
                  "3.3 % of memory kept free", "tp=8 pp=4 dp=2", "fits", "days", "$",
                  "GiB used/usable", "assumes:"):
        assert words in out, words
    assert len([ln for ln in out.splitlines() if ln[:1].isdigit()]) == 4   # one row per stage
    trace = tmp_path / "t.json"
    assert main(argv + ["--json", "--trace", str(trace)]) == 0
    d = json.loads(capsys.readouterr().out)
    plan = hpgo.ParallelPlan(global_batch=512, tp=8, pp=4, dp=2, virtual_stages=5,
                             schedule="interleaved-1f1b", sequence_parallel=True)
    r = hpgo.simulate("llama3-70b", hpgo.Cluster.preset("dgx-h100", nodes=8), plan)
    assert d["iteration_time"] == pytest.approx(r.iteration_time)
    assert d["fits"] == r.fits and len(d["devices"]) == 4 and d["seq"] == 8192
    assert json.loads(trace.read_text())["traceEvents"]


def test_simulate_a_plan_autoplan_saved(capsys, tmp_path):
    p = tmp_path / "plan.json"
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100",
                 "--global-batch", "64", "--top", "2", "-o", str(p)]) == 0
    table = capsys.readouterr().out
    assert main(["simulate", "--plan", str(p), "--cluster", "dgx-h100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    best = hpgo.ParallelPlan.load(p)
    assert d["plan"] == best.to_dict()
    assert f"{d['iteration_time']:.4g}" in table.splitlines()[3]
    # a field changed on the command line
    assert main(["simulate", "--plan", str(p), "--cluster", "dgx-h100", "--zero", "0",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["zero"] == 0


@pytest.mark.parametrize("extra,words", [
    (["--tp", "0"], "--tp must be >= 1"),
    (["--nodes", "2", "--tp", "8", "--pp", "4", "--dp", "2"], "give --nodes 8"),
    (["--schedule", "pipedream"], "pipedream"),
    (["--zero", "5"], "--zero must be 0, 1, 2 or 3"),
    (["--memory-headroom", "1.5"], "headroom"),
    (["--tokens", "-1"], "tokens"),
    (["--gpu", "h100", "--inter-node-gbps", "0"], "--inter-node-gbps must be > 0"),
    (["--inter-node-gbps", "100"], "with --gpu TYPE"),
    (["--gantt", "/no/such/folder/g.png"], "no such folder"),
])
def test_simulate_wrong_inputs_are_one_line(capsys, extra, words):
    base = ["simulate", "--model", "llama3-8b", "--global-batch", "8"]
    if "--gpu" not in extra:
        base += ["--cluster", "dgx-h100"]
    assert main(base + extra) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_simulate_sizes_a_preset_to_the_plan(capsys, tmp_path):
    """Without --nodes a preset (or --gpu) cluster has the nodes the plan needs."""
    assert main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--tp", "8",
                 "--pp", "4", "--dp", "2", "--global-batch", "16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpus"] == 64
    assert main(["simulate", "--model", "llama3-8b", "--gpu", "h100", "--tp", "8", "--dp", "3",
                 "--global-batch", "24", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 24
    # a cluster file keeps its nodes
    f = tmp_path / "one-node.json"
    hpgo.Cluster.preset("dgx-h100", nodes=1).save(f)
    assert main(["simulate", "--model", "llama3-8b", "--cluster", str(f), "--tp", "8",
                 "--dp", "2", "--global-batch", "16"]) == 2
    assert "give --nodes 2" in capsys.readouterr().err


def test_options_are_not_abbreviated(capsys):
    """autoplan's --gpus is not simulate's --gpus-per-node cut short."""
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
              "--global-batch", "8"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --gpus" in err and err.count("\n") == 1


def test_simulate_profile_plans_and_mlp_still_work(capsys):
    assert main(["simulate", "--example", "transformer36", "--gbs", "128", "--seps", "8,16"]) == 0
    assert "planner speedup" in capsys.readouterr().out
    assert main(["simulate", "--mlp", "--pp", "2", "--microbatches", "4"]) == 0
    assert "D=1 H=1 P=2 K=4" in capsys.readouterr().out
    assert main(["simulate", "--example", "transformer36", "--gbs", "128", "--seps", "8,16",
                 "--schedule", "zb-v"]) == 2


# ---- hpgo cluster -----------------------------------------------------------------


def test_hpgo_cluster_lists_writes_checks_and_builds(capsys, tmp_path):
    assert main(["cluster"]) == 0
    out = capsys.readouterr().out
    assert "dgx-h100" in out and "a100-40gb" in out
    f = tmp_path / "mine.json"
    assert main(["cluster", "dgx-a100-40gb", "--nodes", "4", "-o", str(f)]) == 0
    assert "25 GB/s per GPU (200 Gb/s)" in capsys.readouterr().out
    assert hpgo.Cluster.load(f) == hpgo.Cluster.preset("dgx-a100-40gb", nodes=4)
    assert main(["cluster", str(f)]) == 0
    d = json.loads(f.read_text())
    d["gpu"]["memory_bytes"] = "40GB"
    f.write_text(json.dumps(d))
    assert main(["cluster", str(f)]) == 2
    assert f"{f}: gpu.memory_bytes: must be a number" in capsys.readouterr().err
    assert main(["cluster", "--gpu", "a100-40gb", "--nodes", "4", "--inter-node-gbps", "200",
                 "--per-node", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["levels"][1]["bandwidth"] == pytest.approx(3.125e9)
    assert main(["cluster", "--schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"].startswith("hpgo cluster file")
    # a cluster built from flags plans as a file would
    assert main(["autoplan", "--model", "llama3-8b", "--gpu", "a100-40gb", "--nodes", "4",
                 "--inter-node-gbps", "200", "--per-node", "--global-batch", "64",
                 "--top", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 32


# ---- HF configs' sequence length --------------------------------------------------

LLAMA31_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
              "vocab_size": 128256, "max_position_embeddings": 131072, "hidden_act": "silu",
              "tie_word_embeddings": False,
              "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192, "rope_type": "llama3"}}


def test_hf_config_plans_at_the_pretraining_length(tmp_path, capsys):
    assert hpgo.transformer.from_hf_config(LLAMA31_8B).seq == 8192
    assert hpgo.transformer.from_hf_config(LLAMA31_8B, seq=131072).seq == 131072
    other = dict(LLAMA31_8B, model_type="mistral", rope_scaling=None)
    with pytest.raises(ValueError, match=r"give seq= \(--seq\).*131,072"):
        hpgo.transformer.from_hf_config(other)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA31_8B))
    assert main(["autoplan", "--hf-config", str(p), "--cluster", "dgx-h100",
                 "--global-batch", "64", "--top", "1"]) == 0
    assert "seq 8,192" in capsys.readouterr().out
    p.write_text(json.dumps(other))
    assert main(["autoplan", "--hf-config", str(p), "--cluster", "dgx-h100",
                 "--global-batch", "64"]) == 2
    assert "--seq" in capsys.readouterr().err
    assert main(["autoplan", "--hf-config", str(tmp_path / "none.json"), "--cluster",
                 "dgx-h100", "--global-batch", "64"]) == 2
    assert "no such config file" in capsys.readouterr().err


# ---- CLI hygiene ------------------------------------------------------------------


def test_every_option_has_help_text():
    missing = []

    def walk(p, name):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for n, sp in a.choices.items():
                    walk(sp, f"{name} {n}")
            elif a.help is None:
                missing.append(f"{name} {a.option_strings or a.dest}")
    walk(build_parser(), "hpgo")
    assert not missing


def test_outputs_are_checked_before_the_work(tmp_path, capsys):
    assert main(["sweep", "--example", "resnet50", "--gbs", "32:4096", "--seps", "8,16",
                 "--csv", str(tmp_path)]) == 2
    assert f"--csv '{tmp_path}' is a folder" in capsys.readouterr().err
    assert main(["plan", "--example", "transformer36", "--gbs", "128", "--seps", "8,16",
                 "-o", str(tmp_path / "no" / "p.json")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100",
                 "--global-batch", "8", "-o", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_fixed_choices_out_of_range_are_named(capsys):
    base = ["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "8"]
    assert main(base + ["--zero", "4"]) == 2
    assert "--zero must be 0, 1, 2 or 3, got 4" in capsys.readouterr().err
    assert main(base + ["--gpus", "0"]) == 2
    assert "--gpus must be >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="zero must be 0, 1, 2 or 3"):
        hpgo.autoplan("llama3-8b", "dgx-h100", 8, zero=4)
    with pytest.raises(ValueError, match="gpus must be >= 1"):
        hpgo.autoplan("llama3-8b", "dgx-h100", 8, gpus=0)


def test_calibrate_refuses_a_profile_of_another_gpu_before_printing(capsys):
    from hpgo import examples

    prof = str(examples.kernels("h100-sxm5"))
    assert main(["calibrate", prof, "--cluster", "dgx-a100-80gb"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "measured on NVIDIA H100" in cap.err and "A100" in cap.err


def test_tables_say_their_assumptions(capsys):
    r = hpgo.autoplan("llama3-8b", "dgx-h100", 64, top=2, precision="fp8")
    head = r.table().splitlines()[1]
    for words in ("llama3-8b", "seq 8,192", "fp8", "dgx-h100", "H100", "preset curves",
                  "global batch 64", "kept free"):
        assert words in head, words
    assert "MFU fp8" in r.table()
    cal = hpgo.calibrate.cluster(hpgo.calibrate.load(hpgo.examples.kernels("h100-sxm5")),
                                 "dgx-h100")
    assert "measured curves" in hpgo.autoplan("llama3-8b", cal, 64, top=1).table()
    assert math.isfinite(r[0].result.tflops_per_gpu)


# ---- batches as users state them ---------------------------------------------------


def test_max_batch_ranks_every_dp_exactly(capsys):
    m = hpgo.transformer(hidden=512, ffn=2048, heads=8, layers=4, seq=512, vocab=1000)
    c = hpgo.Cluster.preset("dgx-a100-40gb", nodes=3).with_gpu(memory_bytes=4e9)
    B = 50
    r = hpgo.autoplan(m, c, B, max_batch=True, top=12)
    assert r.max_batch and "at most 50" in r.table()
    for rp in r:
        assert rp.plan.global_batch == B // rp.plan.dp * rp.plan.dp
    assert any(B % rp.plan.dp for rp in r)           # dp not dividing 50 is ranked too
    # brute force: every dp of the 24 GPUs at its own batch, every plan, by time per sample
    every = []
    for dp in (k for k in range(1, 25) if 24 % k == 0 and B >= k):
        every += list(hpgo.autoplan(m, c, B // dp * dp, dp=dp, top=1000, exhaustive=True))
    per = sorted(rp.iteration_time / rp.plan.global_batch for rp in every)
    assert [rp.iteration_time / rp.plan.global_batch for rp in r] == pytest.approx(per[:12])
    with pytest.raises(ValueError, match="objective='time'"):
        hpgo.autoplan(m, c, B, max_batch=True, objective="cost")
    assert main(["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "3",
                 "--max-global-batch", "500", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "at most 500" in out and " batch " in out.splitlines()[2]


# ---- notebooks ---------------------------------------------------------------------


def test_the_notebook_extra_installs_what_every_notebook_imports():
    import ast
    import sys

    from conftest import ROOT

    text = (ROOT / "pyproject.toml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("notebook = "))
    extra = {x.split(">")[0].split("=")[0].strip('" ') for x in line.split("[", 1)[1]
             .rstrip("]").split(",")}
    assert {"nbclient", "ipykernel", "jupyterlab"} <= extra    # runs, and a front end
    used = set()
    for nb in (ROOT / "examples").glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.Import):
                    used |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    used.add(node.module.split(".")[0])
            if ".to_pandas()" in src:
                used.add("pandas")
    third = {m for m in used if m not in sys.stdlib_module_names and m not in ("hpgo", "HPGO")}
    assert third and third <= extra, third - extra


def test_install_hints_work_from_a_clone():
    from hpgo import plot

    import importlib
    import hpgo.plan as plan_mod

    for mod in (plot, plan_mod, importlib.import_module("hpgo.sweep")):
        src = open(mod.__file__).read()
        assert "pip install 'hpgo[" not in src and "pip install -e '.[" in src


# ---- memory over a step -------------------------------------------------------------


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("gpipe", 1), ("interleaved-1f1b", 2),
                                        ("zb-h1", 1), ("zb-v", 2)])
def test_memory_timeline_peaks_at_the_memory_models_figure(schedule, v):
    plan = hpgo.ParallelPlan(global_batch=16, pp=4, dp=2, schedule=schedule, virtual_stages=v,
                             zero=1, recompute="selective")
    r = hpgo.simulate("llama3-8b", "dgx-h100", plan)
    for d in range(4):
        tl = r.memory_timeline(d)
        assert [t for t, _b in tl] == sorted(t for t, _b in tl)
        assert max(b for _t, b in tl) == pytest.approx(r.memory[d].total, rel=1e-12)
        m = r.memory[d]
        assert tl[-1][1] == pytest.approx(m.weights + m.gradients + m.optimizer + m.other)
        assert min(b for _t, b in tl) >= 0
    with pytest.raises(ValueError, match="device"):
        r.memory_timeline(4)
    with pytest.raises(ValueError, match="timeline"):
        hpgo.simulate("llama3-8b", "dgx-h100", plan, timeline=False).memory_timeline(0)


def test_memory_snapshot_is_pytorchs_format(tmp_path):
    import pickle

    plan = hpgo.ParallelPlan(global_batch=8, pp=2, dp=4, schedule="1f1b", zero=1)
    r = hpgo.simulate("llama3-8b", "dgx-h100", plan)
    f = tmp_path / "snap.pickle"
    snap = r.to_memory_snapshot(f)
    assert pickle.loads(f.read_bytes()) == snap
    assert len(snap["device_traces"]) == len(snap["segments"]) == 2
    for d, (trace, seg) in enumerate(zip(snap["device_traces"], snap["segments"])):
        live = {}
        for e in trace:
            assert set(e) == {"action", "addr", "size", "stream", "time_us", "frames"}
            if e["action"] == "alloc":
                assert e["addr"] not in live
                live[e["addr"]] = e["size"]
            elif e["action"] == "free_completed":
                assert live.pop(e["addr"]) == e["size"]
        # what is still held at the end is the segment's blocks: the model states
        assert sorted(live.items()) == sorted((b["address"], b["size"]) for b in seg["blocks"])
        m = r.memory[d]
        assert sum(live.values()) == pytest.approx(m.weights + m.gradients + m.optimizer + m.other,
                                                   abs=8)
        assert all(b["state"] == "active_allocated" for b in seg["blocks"])


def test_memory_timeline_from_the_command_line_and_plot(tmp_path, capsys):
    f = tmp_path / "snap.pickle"
    assert main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--pp", "2",
                 "--dp", "4", "--global-batch", "8", "--memory-snapshot", str(f)]) == 0
    import pickle

    assert len(pickle.loads(f.read_bytes())["device_traces"]) == 2
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    from hpgo import plot

    r = hpgo.simulate("llama3-8b", "dgx-h100", hpgo.ParallelPlan(global_batch=8, pp=2, dp=4))
    fig = plot.memory_timeline(r)
    ax = fig.axes[0]
    steps = [ln for ln in ax.lines if ln.get_label().startswith("device")]
    assert len(steps) == 2
    assert max(steps[0].get_ydata()) == pytest.approx(r.memory[0].total / 2 ** 30)


def test_a_plan_on_part_of_the_cluster_says_so(capsys):
    # a plan smaller than the cluster runs on part of it: the answer says how much
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    part = hpgo.simulate("llama3-8b", c, hpgo.ParallelPlan(global_batch=16, tp=8))
    whole = hpgo.simulate("llama3-8b", c, hpgo.ParallelPlan(global_batch=16, tp=8, dp=2))
    assert part.gpus == 8 and part.cluster_gpus == 16
    assert "on dgx-h100 (8 of its 16 GPUs):" in part.summary()
    assert "of its" not in whole.summary() and "on dgx-h100:" in whole.summary()
    from hpgo import cli
    assert cli.main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes",
                     "2", "--tp", "8", "--global-batch", "16"]) == 0
    assert "(8 of the 16 GPUs, 16 micro-batches)" in capsys.readouterr().out
