"""hpgo.plan: planner results as records, tables, JSON and pandas."""
import ast
import csv
import json
from pathlib import Path

import pytest

import hpgo
from conftest import ROOT, chain_model, shared_path
from hpgo.plan import Plan, PlanList, PlanStage, _ranges, best_plan, candidate_plans, machine_of
from optional_deps import need

XLNET = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")
RESNET = str(ROOT / "profiles" / "resnet50-v100" / "graph.txt")


@pytest.mark.parametrize("path,pbs,gbs,seps", [
    (XLNET, 1, 128, [8, 16]), (XLNET, 1, 32, [4, 8]), (RESNET, 32, 256, [8, 16]),
    (RESNET, 32, 64, [2, 4, 6, 8]),
])
def test_best_plan_is_py_orchestrate(path, pbs, gbs, seps):
    ref = hpgo.conductor_from_torch_graph_and_seps(path, pbs, gbs, seps).py_orchestrate()
    p = best_plan(path, pbs, gbs, seps)
    assert p.to_hpgo() == ref
    assert (p.pbs, p.gbs, p.seps, p.profile) == (pbs, gbs, tuple(seps), path)
    m = hpgo.model_from_torch_graph(path, pbs, gbs)
    assert p.num_states == m.num_layers
    # stages tile the states and their compute adds up to the model's
    assert p.stages[0].first_state == 0 and p.stages[-1].last_state == m.num_layers - 1
    for a, b in zip(p.stages, p.stages[1:]):
        assert b.first_state == a.last_state + 1
    assert sum(s.compute_time for s in p.stages) == pytest.approx(m.total_time, rel=1e-9)
    for s in p.stages:
        assert s.machines == tuple(machine_of(g, seps) for g in s.gpus)
        assert s.first_layer == m.layers[s.first_state].desc
        assert s.last_layer == m.layers[s.last_state].desc
        assert s.parameter_bytes == m.pa(s.first_state, s.last_state)


def test_reference_cases_from_shared():
    p = shared_path("reference", "hpgo_cases.csv")
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        seps = ast.literal_eval(row["seps"])
        kw = dict(min_micro_batch_size=int(row["min_micro_batch_size"]),
                  optimizer_memory_scaling=int(row["optimizer_memory_scaling"]))
        if row["peak_activation_per_batch"] != "(profile default)":
            kw["peak_activation_per_batch"] = float(row["peak_activation_per_batch"])
        got = best_plan(shared_path("profiles", row["profile"]), int(row["pbs"]), int(row["gbs"]),
                        seps, **kw)
        ref_speedup, ref_stages = ast.literal_eval(row["py_orchestrate"])
        assert got.to_hpgo()[1] == ref_stages, row["profile"]
        assert got.speedup == pytest.approx(ref_speedup, rel=1e-12)


def test_candidates_in_hpgo_order_and_best_rule():
    m = hpgo.model_from_torch_graph(XLNET, 1, 128)
    d = hpgo.devices_from_seps([8, 16])
    ao = hpgo.AsyncOrchestrate(m, d)
    ao.orchestrate()
    plans = candidate_plans(m, 1, 128, d)
    assert [p.label for p in plans] == [c.label for c in ao.res]
    assert [p.to_hpgo() for p in plans] == [(c.speedup, c.stages) for c in ao.res]
    assert [p.rp for p in plans] == [c.rp for c in ao.res]
    assert plans.best().to_hpgo() == ao.py_orchestrate()
    rows = plans.rows()
    assert len(rows) == len(plans) and rows[0]["candidate"] == 0
    text = plans.table()
    assert len(text.splitlines()) == len(plans) + 2
    assert "bipartition" in text


def test_best_takes_the_last_on_ties():
    a = Plan.from_hpgo((2.0, [(0, 3, 1, [0])]), label="a")
    b = Plan.from_hpgo((2.0, [(0, 3, 1, [1])]), label="b")
    c = Plan.from_hpgo((1.0, [(0, 3, 1, [2])]), label="c")
    assert PlanList([a, b, c]).best().label == "b"
    assert PlanList([b, a]).best().label == "a"
    with pytest.raises(ValueError):
        PlanList().best()


def test_json_round_trip_and_save_load(tmp_path):
    p = best_plan(RESNET, 32, 256, [8, 16])
    assert Plan.from_json(p.to_json()) == p
    d = json.loads(p.to_json())
    assert d["format"] == "hpgo-plan/1"
    assert d["stages"][0]["gpus"] == list(p.stages[0].gpus)
    f = tmp_path / "plan.json"
    p.save(f)
    q = Plan.load(f)
    assert q == p and q.to_hpgo() == p.to_hpgo()
    assert q.table() == p.table()


@pytest.mark.parametrize("text,msg", [
    ("{", "invalid JSON"),
    ("[]", "JSON object"),
    ('{"format": "other"}', "not an hpgo plan"),
    ('{"format": "hpgo-plan/1", "speedup": 1.0, "rp": 1}', "'stages'"),
    ('{"format": "hpgo-plan/1", "speedup": 1.0, "rp": 1, "stages": []}', "non-empty"),
    ('{"format": "hpgo-plan/1", "speedup": 1.0, "rp": 1, "stages": [{"first_state": 0}]}',
     "last_state"),
    ('{"format": "hpgo-plan/1", "speedup": 1.0, "rp": 0, "stages": '
     '[{"first_state": 0, "last_state": 2, "units": 1, "gpus": [0]}]}', "rp"),
    ('{"format": "hpgo-plan/1", "speedup": "fast", "rp": 1, "stages": '
     '[{"first_state": 0, "last_state": 2, "units": 1, "gpus": [0]}]}', "speedup"),
    ('{"format": "hpgo-plan/1", "speedup": 1.0, "rp": 1, "stages": '
     '[{"first_state": 3, "last_state": 2, "units": 1, "gpus": [0]}]}', "covers no state"),
])
def test_load_errors_name_the_file(tmp_path, text, msg):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises((ValueError, TypeError)) as e:
        Plan.load(f)
    assert str(e.value).startswith(str(f) + ": ")
    assert msg in str(e.value)


def test_from_hpgo_checks_input():
    with pytest.raises(TypeError):
        Plan.from_hpgo("not a plan")
    with pytest.raises(ValueError):
        Plan.from_hpgo((1.0, []))
    with pytest.raises(TypeError):
        Plan.from_hpgo((1.0, [(0, 3, 1)]))
    with pytest.raises(ValueError, match="covers no state"):
        Plan.from_hpgo((1.0, [(2, 2, 1, [0]), (2, 5, 1, [1])]))
    with pytest.raises(TypeError):
        Plan.from_hpgo((1.0, [(0, 3, 1, [0])]), rp=1.5)


def test_hpgo_tuple_conventions():
    # the stage end is exclusive except for the last stage
    p = Plan.from_hpgo((3.0, [(0, 4, 2, [0, 1, 2, 3]), (4, 9, 1, [4, 5])]), devices=[4, 8])
    assert [(s.first_state, s.last_state) for s in p.stages] == [(0, 3), (4, 9)]
    assert p.rp == 2 and p.num_gpus == 6 and p.num_stages == 2
    assert p.stages[0].machines == (0, 0, 0, 0) and p.stages[1].machines == (1, 1)
    assert p.to_hpgo() == (3.0, [(0, 4, 2, [0, 1, 2, 3]), (4, 9, 1, [4, 5])])
    assert isinstance(p.stages[0], PlanStage) and p.stages[0].num_states == 4


def test_inputs_are_not_modified():
    m = chain_model(40, gbs=64)
    before = (m.gbs, m.min_micro_batch_size, m.optimizer_memory_scaling, m.peak_activation_per_batch)
    seps = [4, 8]
    p = best_plan(m, 1, 128, seps, min_micro_batch_size=2, optimizer_memory_scaling=3)
    assert p.gbs == 128 and p.min_micro_batch_size == 2
    assert (m.gbs, m.min_micro_batch_size, m.optimizer_memory_scaling,
            m.peak_activation_per_batch) == before
    assert seps == [4, 8]


def test_table_is_readable():
    p = best_plan(XLNET, 1, 128, [8, 16])
    t = p.table()
    assert f"speedup {p.speedup:.4f}" in t
    assert "Embed-Token .. Layer_17" in t
    assert "8: 0-7" in t and "8: 8-15" in t
    assert str(p) == t


def test_table_with_its_model_says_whether_the_plan_fits():
    m = hpgo.model_from_torch_graph(XLNET, 1, 128)
    p = best_plan(m, 1, 128, [8, 16])
    r = p.simulate(m, "1f1b")
    line = p.table(m).splitlines()[2]
    assert line.strip() == (f"memory: peak {r.peak_memory / 2**30:.2f} of {r.gpu_memory / 2**30:.2f}"
                            f" GiB on a GPU under 1F1B with {r.config['microbatches']} "
                            "micro-batches (fits)") and r.fits
    assert p.table(m).replace(line + "\n", "") == p.table()
    # HPGO's planner returns plans over its 16 GB GPU: the table says so
    big = hpgo.model_from_states([1.0, 2.0, 3.0, 4.0], [2e9] * 4, [5e9] * 4, [2e9] * 4,
                                 [[], [0], [1], [2]], ["a", "b", "c", "d"], 1, 64)
    q = best_plan(big, 1, 64, [8, 16])
    assert q.table(big).splitlines()[2].endswith("(DOES NOT FIT)")
    with pytest.raises(ValueError, match="another profile"):
        q.table(m)   # a model of another profile is refused, not simulated
    # the candidate list too: one GiB / fits pair a plan
    plans = candidate_plans(m, 1, 128, [8, 16])
    lines = plans.table(m).splitlines()
    assert lines[0].split()[-2:] == ["GiB", "fits"] and len(lines) == 2 + len(plans)
    for ln, c in zip(lines[2:], plans):
        r = c.simulate(m, "1f1b")
        assert ln.split()[-2:] == [f"{r.peak_memory / 2**30:.2f}", "yes" if r.fits else "NO"]
    assert "GiB" not in plans.table()   # without the model: HPGO's columns alone
    # the model at another batch would give another plan's memory: refused
    half = hpgo.model_from_torch_graph(XLNET, 1, 64)
    for call in (lambda: p.table(half), lambda: plans.table(half)):
        with pytest.raises(ValueError, match="global batch 128, the model is at 64"):
            call()


def test_ranges():
    assert _ranges([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert _ranges([5]) == "5"
    assert _ranges([]) == ""


def test_to_pandas():
    need("pandas")
    p = best_plan(XLNET, 1, 128, [8, 16])
    df = p.to_pandas()
    assert list(df["stage"]) == [0, 1]
    assert list(df["first_state"]) == [s.first_state for s in p.stages]
    assert df["compute_time"].sum() == pytest.approx(sum(s.compute_time for s in p.stages))
    cands = candidate_plans(XLNET, 1, 128, [8, 16]).to_pandas()
    assert cands["speedup"].max() == p.speedup
    assert cands.loc[cands["speedup"].idxmax(), "label"] == p.label


def test_sweep_to_pandas_matches_rows():
    need("pandas")
    res = hpgo.sweep(XLNET, 1, [32, 64], [[4, 8], [8, 16]])
    df = res.to_pandas()
    assert len(df) == 4
    assert list(df["hybrid"]) == [r.hybrid for r in res]
