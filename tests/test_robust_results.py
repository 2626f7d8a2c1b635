"""No silent wrong results (issue 16, item 5): plans that do not tile the
model are refused where they enter, generators are read once, degenerate
settings raise PlanningError, and non-finite results raise."""
import json

import pytest

import hpgo

P = "profiles/transformer36-v100/graph.txt"


@pytest.fixture(scope="module")
def model():
    return hpgo.model_from_torch_graph(P, 1, 128)


@pytest.fixture(scope="module")
def plan(model):
    return hpgo.best_plan(model, 1, 128, [8, 16])


def _edit(plan, k, **kw):
    d = json.loads(plan.to_json())
    d["stages"][k].update(kw)
    return d


def test_plan_json_must_tile_the_states(plan, tmp_path):
    assert [(s.first_state, s.last_state) for s in plan.stages] == [(0, 19), (20, 38)]
    cases = [
        (_edit(plan, 1, first_state=19), "stages overlap"),
        (_edit(plan, 1, first_state=21), "states 20..20 are in no stage"),
        (_edit(plan, 0, first_state=3), "states 0..2 are in no stage"),
        (_edit(plan, 1, last_state=40), "num_states is 39"),
        (_edit(plan, 1, last_state=30), "num_states is 39"),
        (_edit(plan, 1, first_state=30, last_state=25), "covers no state"),
    ]
    for i, (d, msg) in enumerate(cases):
        with pytest.raises(ValueError, match=msg):
            hpgo.Plan.from_dict(d)
        f = tmp_path / f"bad{i}.json"
        f.write_text(json.dumps(d))
        with pytest.raises(ValueError, match=f"bad{i}.json"):
            hpgo.Plan.load(f)
    assert hpgo.Plan.from_dict(json.loads(plan.to_json())) == plan


@pytest.mark.parametrize("edit, exc, msg", [
    (lambda st: [(0, 20, *st[0][2:]), (19, 38, *st[1][2:])], ValueError, "stages overlap"),
    (lambda st: [(0, 20, *st[0][2:]), (21, 38, *st[1][2:])], ValueError, "in no stage"),
    (lambda st: [(0, 20, *st[0][2:]), (20, 19, *st[1][2:])], ValueError, "covers no state"),
    (lambda st: [(1, 20, *st[0][2:]), (20, 38, *st[1][2:])], ValueError, "not 0"),
    (lambda st: [(0, 20, *st[0][2:]), (20, 45, *st[1][2:])], IndexError, "out of range"),
    (lambda st: [(0, 20, *st[0][2:]), (20, 30, *st[1][2:])], ValueError, "model has 39"),
])
def test_simulate_plan_refuses_plans_that_do_not_tile(model, edit, exc, msg):
    speedup, stages = hpgo.AsyncOrchestrate(model, hpgo.Devices(16, [8, 16])).py_orchestrate()
    assert hpgo.simulate_plan(model, (speedup, stages)).iteration_time > 0
    with pytest.raises(exc, match=msg):
        hpgo.simulate_plan(model, (speedup, edit(stages)))


def test_generators_are_read_once():
    kw = dict(layers=8, width=256, pp_batch=512)
    a = hpgo.distir_figure3(devices=(x for x in (2, 4)), dp_batches=iter([512]),
                            pp_microbatches=(k for k in (4,)), **kw)
    b = hpgo.distir_figure3(devices=(2, 4), dp_batches=[512], pp_microbatches=[4], **kw)
    assert a == b and a.dp[512] and a.pp[4]
    g = hpgo.grid_search(256, 64, 4, devices=(d for d in (1, 2)))
    assert g == hpgo.grid_search(256, 64, 4, devices=[1, 2])
    m = hpgo.model_from_torch_graph(P, 1, 128)
    r1 = hpgo.sweep(m, 1, (g for g in (64, 128)), [8, 16])
    assert [r.gbs for r in r1] == [64, 128]


def test_min_micro_batch_size_above_the_batch_is_a_planning_error(model):
    m = model.normalized_copy(128)
    m.min_micro_batch_size = 256
    with pytest.raises(hpgo.PlanningError, match="no micro-batch"):
        hpgo.AsyncOrchestrate(m, hpgo.Devices(16, [8, 16])).py_orchestrate()
    with pytest.raises(hpgo.PlanningError):
        hpgo.best_plan(P, 1, 128, [8, 16], min_micro_batch_size=256)
    row = hpgo.sweep(m, 1, [128], [8, 16])[0]
    assert row.hybrid is None and "no micro-batch" in row.error
    m.min_micro_batch_size = 16  # 128 / 8 replicas / 16 = 1 micro-batch: plans
    assert hpgo.AsyncOrchestrate(m, hpgo.Devices(16, [8, 16])).py_orchestrate()[0] > 0


@pytest.mark.parametrize("call", [
    lambda: hpgo.simulate_pipeline([hpgo.Stage(1e308, 1e308)] * 2, 4),
    lambda: hpgo.replan([1e308] * 4, [1e308] * 4, current=[2, 2]),
    lambda: hpgo.replan([1e308] * 4, [1e308] * 4, current=[2, 2], method="dp"),
    lambda: hpgo.pipeline_score([1e308, 1e308], [1e308, 1e308]),
])
def test_non_finite_results_raise(call):
    with pytest.raises(ValueError, match="not finite"):
        call()
