"""Uneven plans: hpgo.StageGroup, ParallelPlan(stages=...), the step engine
running them, and HPGO's plans converted exactly (docs/uneven-plans.md)."""
import dataclasses
from pathlib import Path

import pytest

import hpgo
from conftest import shared_path

ROOT = Path(__file__).resolve().parents[1]
XF = hpgo.transformer("llama3-8b")
A100 = hpgo.Cluster.preset("dgx-a100-80gb", nodes=2)
PROF = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")


def G(a, b, **kw):
    return hpgo.StageGroup(layers=(a, b), **kw)


# ---- the plan ------------------------------------------------------------------------------

def test_stage_groups_derive_pp_and_split():
    p = hpgo.ParallelPlan(global_batch=64, micro_batch=8,
                          stages=[G(0, 10, dp=6), G(10, 32, dp=2, shares=[0.75, 0.25])])
    assert p.pp == 2 and p.split == (0, 10, 32) and p.tp == p.dp == 1
    assert p.gpus == 8 and p.uneven and p.microbatches == 8
    assert isinstance(p.stages, tuple) and p.stages[1].shares == (0.75, 0.25)
    d = p.describe()
    assert "[0, 10) dp=6 tp=1" in d and "shares 0.75/0.25" in d and "mb=8" in d


@pytest.mark.parametrize("kw,words", [
    (dict(layers=(3, 3)), "hold no layer"),
    (dict(layers=(0,)), "pair"),
    (dict(layers=(0, 4), dp=0), "dp must be in"),
    (dict(layers=(0, 4), tp=2048), "tp must be in"),
    (dict(layers=(0, 4), dp=2, shares=(0.5,)), "shares has 1 entries for dp=2"),
    (dict(layers=(0, 4), dp=2, shares=(0.7, 0.7)), "sum to 1"),
    (dict(layers=(0, 4), dp=2, shares=(1.0, 0.0)), r"in \(0, 1\]"),
    (dict(layers=(0, 4), dp=2, shares=("a", 0.5)), "share must be a number"),
    (dict(layers=(0, 4), gpu=99), "gpu"),
    (dict(layers=(0, 4), first_gpu=-3), "first_gpu"),
    (dict(layers=(0, 4), dp=2, gpus=(0,)), "gpus has 1 entries for dp x tp = 2"),
    (dict(layers=(0, 4), dp=2, gpus=(3, 3)), "gpus lists a GPU twice"),
    (dict(layers=(0, 4), dp=2, gpus=(3, 4), first_gpu=0), "first_gpu or gpus"),
])
def test_stage_group_refuses_bad_fields(kw, words):
    with pytest.raises((TypeError, ValueError), match=words):
        hpgo.StageGroup(**kw)


@pytest.mark.parametrize("kw,words", [
    (dict(tp=2), "with stages, tp must be 1"),
    (dict(dp=2), "with stages, dp must be 1"),
    (dict(virtual_stages=2, schedule="interleaved-1f1b"), "virtual_stages must be 1"),
    (dict(schedule="zb-v"), "schedule must be gpipe, 1f1b or zb-h1"),
    (dict(pp=3), "pp=3 but 2 stage groups"),
    (dict(split=(0, 5, 32)), "differs from the stages' layers"),
    (dict(stages=[G(0, 10), G(12, 32)]), r"stages\[1\].layers start at 12"),
    (dict(stages=[G(1, 10), G(10, 32)]), "starts at layer 0"),
    (dict(stages=[]), "at least one"),
    (dict(stages=[G(0, 10), {"layers": [10, 32], "colour": 1}]), r"stages\[1\]: unknown fields"),
    (dict(stages=[G(0, 10), {"layers": [10, 32], "dp": 0}]), r"stages\[1\]: dp must be in"),
    (dict(zero=1, shard_size=4), r"stages\[0\]: shard_size 4 must divide its dp=2"),
])
def test_plan_with_stages_refuses_conflicts(kw, words):
    base = dict(global_batch=64, micro_batch=8, stages=[G(0, 10, dp=2), G(10, 32, dp=2)])
    base.update(kw)
    with pytest.raises((TypeError, ValueError), match=words):
        hpgo.ParallelPlan(**base)


def test_json_round_trip(tmp_path):
    p = hpgo.ParallelPlan(global_batch=64, micro_batch=8, zero=1,
                          stages=[G(0, 10, dp=6, gpu="A100", gpus=(2, 3, 4, 5, 8, 9)),
                                  G(10, 32, dp=2, tp=2, gpu=1, shares=[0.625, 0.375])])
    d = p.to_dict()
    assert d["stages"][1] == {"layers": [10, 32], "dp": 2, "tp": 2, "gpu": 1,
                              "shares": [0.625, 0.375], "first_gpu": None, "gpus": None}
    assert hpgo.ParallelPlan.from_dict(d) == p
    f = tmp_path / "plan.json"
    p.save(f)
    assert hpgo.ParallelPlan.load(f) == p
    assert d["stages"][0]["gpus"] == [2, 3, 4, 5, 8, 9]
    assert "on GPUs 2-5,8-9" in p.describe()
    bad = dict(d, stages=[dict(d["stages"][0], dp="six"), d["stages"][1]])
    with pytest.raises(ValueError, match=r"plan: stages\[0\]: dp must be an int"):
        hpgo.ParallelPlan.from_dict(bad)
    with pytest.raises(ValueError, match="stages must be a list"):
        hpgo.ParallelPlan.from_dict(dict(d, stages="x"))


def test_even_and_uneven_forms_convert():
    p = hpgo.ParallelPlan(global_batch=64, tp=2, pp=4, dp=2, micro_batch=2)
    u = hpgo.ParallelPlan.from_even(p, XF)
    assert u.micro_batch == 4 and [g.dp for g in u.stages] == [2] * 4
    assert u.to_even() == p.with_(split=u.split)
    with pytest.raises(ValueError, match="no even form"):
        u.with_(stages=(G(0, 8, dp=2, tp=2), G(8, 16, dp=1, tp=2), *u.stages[2:])).to_even()


@pytest.mark.parametrize("export", [
    lambda p: p.megatron_args(XF), lambda p: p.deepspeed_json(), lambda p: p.torchtitan_config(XF),
    lambda p: hpgo.simulate(XF, A100, p, framework="megatron")])
def test_exports_refuse_uneven_plans_by_name(export):
    p = hpgo.ParallelPlan(global_batch=64, micro_batch=8, stages=[G(0, 16, dp=4), G(16, 32, dp=2)])
    with pytest.raises(ValueError, match="one data-parallel size for every stage|one device mesh"):
        export(p)


# ---- the engine ----------------------------------------------------------------------------

EVEN = [
    dict(tp=2, pp=4, dp=2, micro_batch=2),
    dict(tp=1, pp=2, dp=8, micro_batch=1, zero=1),
    dict(tp=4, pp=2, dp=2, micro_batch=2, zero=3, schedule="gpipe"),
    dict(tp=2, pp=4, dp=2, micro_batch=2, zero=2, sequence_parallel=True, recompute="selective"),
    dict(tp=8, pp=2, dp=1, micro_batch=1, schedule="zb-h1", recompute="full"),
]


@pytest.mark.parametrize("kw", EVEN)
def test_even_plan_equals_its_uneven_form_bit_for_bit(kw):
    p = hpgo.ParallelPlan(global_batch=64, **kw)
    u = hpgo.ParallelPlan.from_even(p, XF)
    a, b = hpgo.simulate(XF, A100, p), hpgo.simulate(XF, A100, u)
    assert a.iteration_time == b.iteration_time and a.hw_flops == b.hw_flops
    assert a.mfu == b.mfu and a.stages == b.stages
    assert [m.total for m in a.memory] == [m.total for m in b.memory]
    assert list(a.events) == list(b.events)


@pytest.mark.parametrize("dp,pp,mb", [(8, 2, 1), (4, 4, 2), (2, 8, 1)])
def test_even_profile_plan_equals_its_uneven_form(dp, pp, mb):
    m = hpgo.profile_model(PROF, 1)
    p = hpgo.ParallelPlan(global_batch=128, pp=pp, dp=dp, micro_batch=mb)
    u = hpgo.ParallelPlan.from_even(p, m)
    a = hpgo.simulate(m, "dapple-v100", p, timeline=False)
    b = hpgo.simulate(m, "dapple-v100", u, timeline=False)
    assert a.iteration_time == b.iteration_time and a.stages == b.stages


def test_the_slowest_replica_sets_the_stage():
    m = hpgo.profile_model(PROF, 1)
    even = hpgo.ParallelPlan(global_batch=128, micro_batch=8,
                             stages=[G(0, 20, dp=8), G(20, 39, dp=8)])
    skew = even.with_(stages=(even.stages[0], G(20, 39, dp=8, shares=[0.3] + [0.1] * 7)))
    a = hpgo.simulate(m, "dapple-v100", even, timeline=False)
    b = hpgo.simulate(m, "dapple-v100", skew, timeline=False)
    # the replica with 0.3 of the samples takes 0.3 / 0.125 of the even replica's time
    assert b.stages[1]["forward"] == pytest.approx(a.stages[1]["forward"] * 0.3 / 0.125)
    assert b.stages[1]["activation_bytes"] > a.stages[1]["activation_bytes"]
    assert b.stages[0] == a.stages[0]
    assert b.iteration_time > a.iteration_time


def test_uneven_replicas_synchronise_over_their_own_group():
    m = hpgo.profile_model(PROF, 1)
    p = hpgo.ParallelPlan(global_batch=128, micro_batch=16,
                          stages=[G(0, 20, dp=14), G(20, 39, dp=2)])
    r = hpgo.simulate(m, "dapple-v100", p)
    assert r.gpus == 16 and r.fits in (True, False)
    sync = [e for e in r.events if e[4] == 3]
    assert {e[2] for e in sync} == {0, 1}
    # the whole gradient is all-reduced whatever the share: a group of 2 on one node
    # is faster than 14 across two
    t = {d: sum(e[1] for e in sync if e[2] == d) for d in (0, 1)}
    assert t[0] > 0 and t[1] > 0
    # the stages' devices run their own replicas' shares: 16 / 14 and 16 / 2 samples
    eight = hpgo.simulate(m, "dapple-v100", hpgo.ParallelPlan(
        global_batch=128, micro_batch=16, stages=[G(0, 20, dp=8), G(20, 39, dp=8)]),
        timeline=False)
    assert r.stages[1]["forward"] == pytest.approx(eight.stages[1]["forward"] * 4)
    assert r.stages[0]["forward"] == pytest.approx(eight.stages[0]["forward"] * 8 / 14)


def test_resharding_moves_what_each_replica_needs():
    m = hpgo.profile_model(PROF, 1)
    a = hpgo.simulate(m, "dapple-v100", hpgo.ParallelPlan(
        global_batch=128, micro_batch=8, stages=[G(0, 20, dp=4), G(20, 39, dp=4)]))
    b = hpgo.simulate(m, "dapple-v100", hpgo.ParallelPlan(
        global_batch=128, micro_batch=8, stages=[G(0, 20, dp=4), G(20, 39, dp=2)]))
    send_a = max(e[1] for e in a.events if e[4] == 1)
    send_b = max(e[1] for e in b.events if e[4] == 1)
    # a receiver of 2 gets the samples of two senders: twice the bytes through its port
    assert send_b == pytest.approx(2 * send_a)


@pytest.mark.parametrize("stages,words", [
    ([G(0, 16, dp=8), G(16, 32, dp=16)], "hold 24 GPUs, the cluster 16"),
    ([G(0, 16, dp=4, tp=2, first_gpu=8), G(16, 32, dp=4, tp=2)],
     "stage 1 needs dp x tp = 8 GPUs of part 0 from its GPU 16"),
    ([G(0, 16, dp=2, gpus=(0, 9)), G(16, 32, dp=2, gpus=(1, 9))], "GPU 9 is in two stage groups"),
    ([G(0, 16, dp=2, tp=2, gpus=(0, 1, 3, 4)), G(16, 32, dp=2)], "tp=2 consecutive, aligned"),
    ([G(0, 16, dp=2, gpus=(0, 99)), G(16, 32, dp=2)], "GPU 99 is not on part 0"),
    ([G(0, 16, dp=4, first_gpu=0), G(16, 32, dp=4, first_gpu=2)], "GPU 2 is in two stage groups"),
    ([G(0, 16, dp=3), G(16, 32, dp=2)], "whole sequences"),
    ([G(0, 16, dp=2, gpu=1), G(16, 32, dp=2)], "gpu: part 1 is not one of the cluster"),
    ([G(0, 16, dp=2, gpu="H100"), G(16, 32, dp=2)], "gpu 'H100' is none of the cluster's parts"),
    ([G(0, 16, dp=1, tp=2), G(16, 32, dp=1, tp=2, first_gpu=3)], "start at a multiple of tp"),
    ([G(0, 16, dp=2), G(16, 33, dp=2)], "end at 32 layers"),
])
def test_engine_refuses_bad_groups(stages, words):
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=2)
    p = hpgo.ParallelPlan(global_batch=64, micro_batch=8, stages=stages)
    with pytest.raises(ValueError, match=words):
        hpgo.simulate(XF, c, p)


def test_gpu_type_names_resolve_on_a_one_type_cluster():
    p = hpgo.ParallelPlan(global_batch=64, micro_batch=4,
                          stages=[G(0, 16, dp=2, gpu="a100"), G(16, 32, dp=2, gpu=0)])
    r = hpgo.simulate(XF, A100, p, timeline=False)
    assert r.iteration_time > 0 and all(d["part"] == 0 and d["speed"] == 1 for d in r.devices)
    assert "stage [" in r.summary()


# ---- HPGO's plans --------------------------------------------------------------------------

def test_hpgo_plan_on_the_shipped_profile_maps_states_to_layers():
    res = hpgo.conductor_from_torch_graph_and_seps(PROF, 1, 128, [8, 16]).py_orchestrate()
    m = hpgo.profile_model(PROF, 1)
    p = hpgo.ParallelPlan.from_hpgo(res, 128, model=m)
    assert p.stages[0].layers[0] == 0 and p.stages[-1].layers[1] == m.layers
    assert [g.dp for g in p.stages] == [len(s[3]) for s in res[1]]
    assert p.model == hpgo.model_id(m)
    assert hpgo.simulate(m, "dapple-v100", p, timeline=False).iteration_time > 0
    # without the profile an uneven result is refused, naming the way out
    with pytest.raises(ValueError, match="pass model="):
        hpgo.ParallelPlan.from_hpgo((1.0, [(0, 3, 14, list(range(14))), (3, 5, 2, [14, 15])]), 64)


DAPPLE = [  # profile, profile batch, DAPPLE global batch
    ("resnet50", 32, 256), ("vgg19", 32, 256), ("bert_large", 2, 128), ("xlnet_36", 1, 128),
    ("amoebanet_36", 8, 512),
]


@pytest.mark.parametrize("name,pbs,gbs", DAPPLE)
def test_hpgo_plans_of_dapples_study_simulate_and_autoplan_is_no_slower(name, pbs, gbs):
    path = str(shared_path("profiles", name, "graph.txt"))
    from hpgo import uneven
    row = uneven.compare_hpgo(path, pbs, gbs)
    plan = row["hpgo_plan"]
    assert plan.stages[-1].layers[1] == hpgo.profile_model(path, pbs).layers
    assert sum(g.dp for g in plan.stages) == 16
    assert row["engine"].iteration_time > 0
    assert row["hpgo_estimate"] > 0
    assert row["autoplan"].iteration_time <= row["engine"].iteration_time
    # HPGO's GPUs are kept: every stage on the GPUs HPGO gave it (listed, or the run of GPUs
    # after the previous stage's)
    nxt = 0
    for g, (_, _, _, ids) in zip(plan.stages, row["hpgo"][1]):
        mine = g.gpus if g.gpus is not None else tuple(range(nxt, nxt + g.dp))
        nxt = mine[-1] + 1 if g.gpus is None else nxt
        assert mine == tuple(sorted(ids))


# ---- GPU types and speeds ------------------------------------------------------------------

def test_stages_on_two_gpu_types_are_priced_on_their_own_gpu():
    mixed = hpgo.Cluster.combine("dgx-h100", "dgx-a100-80gb", bandwidth=25e9, latency=5e-6)
    p = hpgo.ParallelPlan(global_batch=64, micro_batch=4, sequence_parallel=True,
                          stages=[G(0, 18, dp=2, tp=2, gpu="h100"),
                                  G(18, 32, dp=2, tp=2, gpu="a100")])
    r = hpgo.simulate(XF, mixed, p)
    assert [d["part"] for d in r.devices] == [0, 1]
    alone = {}
    for name in ("dgx-h100", "dgx-a100-80gb"):
        q = p.with_(stages=tuple(dataclasses.replace(g, gpu=None) for g in p.stages))
        alone[name] = hpgo.simulate(XF, hpgo.Cluster.preset(name, nodes=1), q, timeline=False)
    assert r.stages[0] == alone["dgx-h100"].stages[0]
    assert r.stages[1] == alone["dgx-a100-80gb"].stages[1]
    assert r.memory[1].capacity == alone["dgx-a100-80gb"].memory[1].capacity
    # the activations cross between the parts over the join
    send = [e for e in r.events if e[4] == 1]
    want = 5e-6 + r.stages[0]["send_bytes"] / 25e9
    assert send and all(e[1] == pytest.approx(want) for e in send)
    # MFU against the peaks of the GPUs the plan runs on
    peak = (4 * mixed.parts[0].gpu.peak("bf16") + 4 * mixed.parts[1].gpu.peak("bf16")) / 8
    assert r.mfu == pytest.approx(r.model_flops / (r.iteration_time * 8 * peak))


def test_a_slowed_gpu_slows_its_replica_and_shares_by_speed_recover():
    c = hpgo.Cluster.preset("dapple-v100")
    slow = c.with_speed({1: 1 / 1.5})
    m = hpgo.profile_model(PROF, 1)
    p = hpgo.ParallelPlan(global_batch=128, micro_batch=8, stages=[G(0, 20, dp=8), G(20, 39, dp=8)])
    a = hpgo.simulate(m, c, p, timeline=False)
    b = hpgo.simulate(m, slow, p, timeline=False)
    assert b.devices[0]["speed"] == pytest.approx(1 / 1.5) and b.devices[1]["speed"] == 1
    assert b.stages[0]["forward"] == pytest.approx(a.stages[0]["forward"] * 1.5)
    assert b.stages[1] == a.stages[1] and b.iteration_time > a.iteration_time
    # shares proportional to speed: the slowed replica takes 1/1.5 of the others' samples
    w = [1.0, 1 / 1.5] + [1.0] * 6
    shares = tuple(x / sum(w) for x in w)
    q = p.with_(stages=(dataclasses.replace(p.stages[0], shares=shares), p.stages[1]))
    s = hpgo.simulate(m, slow, q, timeline=False)
    assert s.stages[0]["forward"] == pytest.approx(a.stages[0]["forward"] * 8 / sum(w))
    assert s.iteration_time < b.iteration_time


def test_an_even_plan_runs_at_its_slowest_gpu():
    c = hpgo.Cluster.preset("dapple-v100")
    m = hpgo.profile_model(PROF, 1)
    p = hpgo.ParallelPlan(global_batch=128, pp=2, dp=8, micro_batch=1)
    a = hpgo.simulate(m, c, p, timeline=False)
    b = hpgo.simulate(m, c.with_speed({12: 0.5}), p, timeline=False)
    assert b.stages[0] == a.stages[0]
    assert b.stages[1]["forward"] == pytest.approx(2 * a.stages[1]["forward"])
    assert [d["speed"] for d in b.devices] == [1, 0.5]


def test_hpgo_cuts_that_are_no_layer_boundary_are_refused():
    from hpgo import uneven
    path = str(shared_path("profiles", "resnet50", "graph.txt"))
    # the first states are prefixes of the chain; the last state covers every layer
    assert uneven.layer_boundaries(path, [0, 1, 2, 239]) == [1, 2, 3, 176]
    # state 11's cover is not a prefix of the chain's layer order
    with pytest.raises(ValueError, match="not a prefix of the profile's layer order"):
        uneven.layer_boundaries(path, [11])
    with pytest.raises(ValueError, match="not a state"):
        uneven.layer_boundaries(path, [240])
    with pytest.raises(ValueError, match="model must be the profile HPGO planned"):
        uneven.layer_boundaries(hpgo.transformer("llama3-8b"), [0])


# ---- one simulator -------------------------------------------------------------------------

def test_engine_and_pipeline_simulator_agree_where_they_compute_the_same_thing():
    """DAPPLE's 1F1B (one op order, schedule.h), non-blocking sends over one
    machine's links, no parameters to synchronise: the step engine and the
    older pipeline simulator give the same timeline, event for event."""
    from hpgo import graphfile
    from hpgo.sim import Stage, simulate_pipeline
    fw, bw, out = [1.0, 2.0, 1.5, 0.5], [2.0, 3.0, 2.5, 1.0], [3e6, 1e7, 2e6, 0.0]
    chain = hpgo.profile_model(graphfile.chain(
        [("Input", 0, 0, 0, 0)] + [(f"l{i}", fw[i], bw[i], out[i], 0) for i in range(4)],
        {"batch_size": 1}))
    p = hpgo.ParallelPlan(pp=4, micro_batch=1, global_batch=8, kernels="compile")
    r = hpgo.simulate(chain, "dapple-v100", p)
    s = simulate_pipeline([Stage(f / 1e3, b / 1e3, send_bytes=o) for f, b, o in zip(fw, bw, out)],
                          8, "1f1b", link_bandwidth=hpgo.Cluster.preset("dapple-v100").levels[0]
                          .bandwidth)
    kinds = ("forward", "backward", "send")
    mine = sorted((e[2], e[0], e[1], e[3], e[6]) for e in r.events if e[3] in kinds)
    older = sorted((e.device, e.start, e.duration, e.name, e.microbatch) for e in s.timeline
                   if e.name in kinds)
    assert len(mine) == 4 * 8 * 2 + 3 * 8 * 2 and mine == older
    assert r.iteration_time == s.iteration_time


def test_each_device_is_judged_against_its_own_gpu_memory():
    """A stage on a 32 GB V100 beside one on an 80 GB H100: each device's
    breakdown states its own GPU's memory, and the summary names the device
    closest to its own usable memory, not merely the one holding most."""
    c = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 1),
                             hpgo.Cluster.preset("dgx1-v100", 1), bandwidth=12.5e9)
    m = hpgo.transformer("llama3-8b", seq=4096)
    plan = hpgo.ParallelPlan(global_batch=64, micro_batch=8, stages=(
        hpgo.StageGroup(layers=(0, 28), dp=8, gpu="H100"),
        hpgo.StageGroup(layers=(28, 32), dp=8, gpu="V100")))
    r = hpgo.simulate(m, c, plan, timeline=False)
    assert r.memory[0].capacity == c.parts[0].gpu.memory_bytes
    assert r.memory[1].capacity == c.parts[1].gpu.memory_bytes
    assert r.memory[1].usable < r.memory[0].usable
    ratios = [mm.total / mm.usable for mm in r.memory]
    worst = ratios.index(max(ratios))
    assert f"on device {worst}" in r.summary()
    assert all(mm.fits == (mm.total <= mm.usable) for mm in r.memory)
