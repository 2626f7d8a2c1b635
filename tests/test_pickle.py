"""Every value passed to or returned by the planners and simulators pickles
and round-trips exactly (issue 14): what Dask, Ray or a process pool ship."""
import pickle

import pytest

import hpgo
from hpgo import examples

T36 = str(examples.path("transformer36"))
RN50 = str(examples.path("resnet50"))


def rt(x):
    return pickle.loads(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))


def model_numbers(m):
    L = m.num_layers
    return ([m.ct(r, c) for r in range(L + 1) for c in range(L)],
            [m.ac(r, c) for r in range(L + 1) for c in range(L)],
            [m.pa(r, c) for r in range(L + 1) for c in range(L)],
            [m.oa(k) for k in range(L)], [m.preds(j) for j in range(L)], m.layers,
            (m.pbs, m.gbs, m.min_micro_batch_size, m.optimizer_memory_scaling,
             m.peak_activation_per_batch, m.total_time, m.total_params,
             m.max_single_gpu_batch_size()))


@pytest.mark.parametrize("name", ["resnet50", "transformer36", "branchy-mlp-cpu", "tiny-gpt-cpu"])
def test_model_round_trips_exactly_and_compactly(name):
    path = examples.path(name)
    m = hpgo.model_from_torch_graph(path, 32, 256)
    m.optimizer_memory_scaling = 2
    m.min_micro_batch_size = 32
    m.peak_activation_per_batch = 7e7
    # a chain of normalized copies: every scale factor must come back, not just gbs
    for x in (m, m.normalized_copy(4096).normalized_copy(320)):
        blob = pickle.dumps(x)
        y = pickle.loads(blob)
        assert type(y) is hpgo.Model and repr(y) == repr(x)
        assert model_numbers(y) == model_numbers(x)
        assert len(blob) < path.stat().st_size   # per-state numbers, not the text file
        assert pickle.dumps(y) == blob
    d = hpgo.devices_from_seps([8, 16])
    assert (hpgo.AsyncOrchestrate(rt(m), d).py_orchestrate()
            == hpgo.AsyncOrchestrate(m, d).py_orchestrate())


def test_model_from_states_round_trips():
    m = hpgo.model_from_states([1.0, 2.5, 4.0], [10.0, 20.0, 30.0], [5.0, 6.0, 7.0],
                               [1.0, 2.0, 0.0], [[], [0], [0, 1]], ["a", "b", "\u00e9"], 4, 8)
    assert model_numbers(rt(m)) == model_numbers(m)


def test_model_restore_rejects_bad_state():
    fn, (state,) = hpgo.Model.__reduce__(hpgo.model_from_torch_graph(T36, 1, 128))
    bad = list(state)
    bad[6] = b"\x01\x00\x00\x00" * 3      # runs that do not match the offsets
    with pytest.raises(ValueError, match="pickled model"):
        fn(tuple(bad))
    bad = list(state)
    bad[0] = 99
    with pytest.raises(ValueError, match="version"):
        fn(tuple(bad))
    with pytest.raises(TypeError):
        fn("nope")


def test_devices():
    for d in (hpgo.devices_from_seps([8, 16]), hpgo.Devices(12, [4, 8, 12])):
        e = rt(d)
        assert (type(e), e.num_gpus, e.seps, e.machines) == (hpgo.Devices, d.num_gpus, d.seps,
                                                              d.machines)


def test_async_orchestrate_and_candidates():
    m = hpgo.model_from_torch_graph(T36, 1, 128)
    ao = hpgo.AsyncOrchestrate(m, hpgo.devices_from_seps([8, 16]), threads=1, timeout=30.0)
    assert rt(ao).res == []
    ao.orchestrate()
    b = rt(ao)
    assert b.res == ao.res and b.skipped == ao.skipped
    assert all(type(c) is hpgo.Candidate for c in b.res)
    assert rt(ao.res) == ao.res and rt(ao.res[0]) == ao.res[0]
    assert b.py_orchestrate() == ao.py_orchestrate()


def test_sweep_rows():
    rows = hpgo.sweep(RN50, 32, [32, 64, 2048], [[8, 16], [8]], optimizer_memory_scaling=2,
                      min_micro_batch_size=32, peak_activation_per_batch=7e7, progress=False)
    back = rt(rows)
    assert type(back) is hpgo.SweepResult and back == rows
    assert [(r.candidates, r.skipped) for r in back] == [(r.candidates, r.skipped) for r in rows]
    assert rt(rows[0]) == rows[0] and back.table() == rows.table()


def test_plans():
    plan = hpgo.best_plan(T36, 1, 128, [8, 16])
    assert rt(plan) == plan
    plans = hpgo.candidate_plans(T36, 1, 128, [8, 16])
    assert type(rt(plans)) is hpgo.PlanList and rt(plans) == plans
    model = hpgo.model_from_torch_graph(T36, 1, 128)
    assert (rt(plan).simulate(model).iteration_time == plan.simulate(model).iteration_time)


def test_simulation_results():
    model = hpgo.model_from_torch_graph(T36, 1, 128)
    plan = hpgo.best_plan(T36, 1, 128, [8, 16])
    for sim in (plan.simulate(model, schedule="1f1b"), hpgo.simulate_mlp(64, 256, 8, dp=2, pp=2,
                                                                         microbatches=4)):
        back = rt(sim)
        assert repr(back) == repr(sim)
        assert (back.iteration_time, back.throughput, back.stages, back.devices, back.timeline,
                back.peak_memory, back.fits, back.config) == (
            sim.iteration_time, sim.throughput, sim.stages, sim.devices, sim.timeline,
            sim.peak_memory, sim.fits, sim.config)
        assert back.to_chrome_trace() == sim.to_chrome_trace()
        assert repr(rt(back)) == repr(sim)


def test_grid_rows():
    rows = hpgo.grid_search(64, 256, 8, devices=(1, 2, 4), progress=False)
    assert rt(rows) == rows


def test_vocabulary_dataclasses():
    cluster = hpgo.Cluster.preset("dgx-h100", nodes=8)
    assert rt(cluster) == cluster
    llama = hpgo.transformer("llama3-70b")
    assert rt(llama) == llama
    prof = hpgo.profile_model(T36, 1)
    assert rt(prof) == prof
    pp = hpgo.ParallelPlan(tp=8, pp=8, virtual_stages=3, global_batch=64,
                           schedule="interleaved-1f1b", recompute="selective",
                           sequence_parallel=True)
    assert rt(pp) == pp
    step = hpgo.simulate("gpt3-175b", hpgo.Cluster.preset("dgx-a100-80gb", nodes=8), pp)
    assert rt(step) == step and rt(step).summary() == step.summary()
    ranked = hpgo.autoplan("llama3-70b", cluster, global_batch=512, top=3)
    back = rt(ranked)
    assert back == ranked and back.table() == ranked.table()
