"""HPGO-compatible results: the reference cases of ../shared/reference."""
import ast
import csv

import pytest

import hpgo
from conftest import shared_path


def reference_rows():
    p = shared_path("reference", "hpgo_cases.csv")
    with open(p, newline="") as f:
        return list(csv.DictReader(f))


def model_for(row):
    path = shared_path("profiles", row["profile"])
    pbs, gbs = int(row["pbs"]), int(row["gbs"])
    m = hpgo.model_from_torch_graph(path, pbs, pbs)
    m.min_micro_batch_size = int(row["min_micro_batch_size"])
    m.optimizer_memory_scaling = int(row["optimizer_memory_scaling"])
    if row["peak_activation_per_batch"] != "(profile default)":
        m.peak_activation_per_batch = float(row["peak_activation_per_batch"])
    return m.normalized_copy(gbs)


def rel(a, b):
    return abs(a - b) / abs(b)


def test_reference_cases():
    rows = reference_rows()
    assert rows
    for row in rows:
        seps = ast.literal_eval(row["seps"])
        m = model_for(row)
        d = hpgo.Devices(seps[-1], seps)
        assert rel(hpgo.dp_speedup(d, m), float(row["dp_speedup"])) <= 1e-12, row["profile"]
        assert rel(hpgo.dp_cur_ga_p3_speedup(d, m), float(row["dp_cur_ga_p3_speedup"])) <= 1e-12
        assert (
            rel(
                hpgo.dp_cur_ga_inner_overlap_speedup(d, m),
                float(row["dp_cur_ga_inner_overlap_speedup"]),
            )
            <= 1e-12
        )
        got = hpgo.AsyncOrchestrate(m, d).py_orchestrate()
        ref_speedup, ref_stages = ast.literal_eval(row["py_orchestrate"])
        assert rel(got[0], ref_speedup) <= 1e-12, row["profile"]
        assert got[1] == ref_stages, row["profile"]


def test_dapple_readme_call_prints_the_tuple():
    import HPGO

    path = shared_path("profiles", "dapple_profiling_results", "xlnet-36-pbs-1.txt")
    expected = (
        "(14.816194280556266, [(0, 22, 1, [0, 1, 2, 3, 4, 5, 6, 7]), "
        "(22, 40, 1, [8, 9, 10, 11, 12, 13, 14, 15])])"
    )
    for mod in (HPGO, hpgo, HPGO.Layerwise):
        conductor = mod.conductor_from_torch_graph_and_seps(str(path), 1, 128, [8, 16])
        assert str(conductor.py_orchestrate()) == expected


def test_readme_candidate_list():
    p = shared_path("reference", "hpgo_xlnet36_readme_candidates.csv")
    with open(p, newline="") as f:
        ref = list(csv.DictReader(f))
    c = hpgo.conductor_from_torch_graph_and_seps(
        shared_path("profiles", "xlnet_36", "graph.txt"), 1, 128, [8, 16]
    )
    c.orchestrate()
    assert len(c.res) == len(ref)
    for cand, r in zip(c.res, ref):
        assert cand.label == r["candidate"]
        assert cand.rp == int(r["rp"])
        assert rel(cand.speedup, float(r["speedup"])) <= 1e-12
        assert str(cand.stages) == r["stages"]
    best = max(range(len(c.res)), key=lambda k: (c.res[k].speedup, k))
    assert c.py_orchestrate() == (c.res[best].speedup, c.res[best].stages)


def test_spec_worked_example():
    """spec section 10: hand-checked xlnet-36 numbers."""
    m = hpgo.model_from_torch_graph(shared_path("profiles", "xlnet_36", "graph.txt"), 1, 128)
    assert m.total_time == pytest.approx(38.49088, rel=1e-12)
    assert m.total_params == pytest.approx(2.003e9, rel=1e-12)
    d = hpgo.devices_from_seps([8, 16])
    assert hpgo.dp_speedup(d, m) == pytest.approx(10.523664032393222, rel=1e-12)
