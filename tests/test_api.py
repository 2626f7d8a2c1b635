"""The HPGO-compatible Python API: objects, fields, printing, bad arguments,
documented results where HPGO panics, GIL release and thread safety."""
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import hpgo
from conftest import ROOT, chain_model, shared_path

SHIPPED = ROOT / "profiles" / "transformer36-v100" / "graph.txt"


def test_import_names():
    import HPGO
    import HPGO.Layerwise
    import HPGO.Utils

    assert HPGO is hpgo
    assert HPGO.Layerwise.conductor_from_torch_graph_and_seps is hpgo.conductor_from_torch_graph_and_seps
    assert callable(HPGO.Utils.pipeline_length_recursive)
    for attr in ("__title__", "__version__", "__author__", "__license__", "__copyright__"):
        assert isinstance(getattr(HPGO, attr), str)


def test_model_fields_and_settings():
    m = chain_model(20, pbs=2, gbs=2)
    assert m.num_layers == 20 and m.pbs == 2 and m.gbs == 2
    assert m.min_micro_batch_size == 1 and m.optimizer_memory_scaling == 1
    assert m.peak_activation_per_batch == pytest.approx(20e6 / 2)
    layers = m.layers
    assert len(layers) == 20 and layers[3].id == 3 and layers[3].name is None
    assert layers[3].desc == "layer_3"
    assert layers[3].compute_time == pytest.approx(0.01)
    assert sum(layer.compute_time for layer in layers) == pytest.approx(m.total_time)
    m.optimizer_memory_scaling = 2
    m.min_micro_batch_size = 32
    m.peak_activation_per_batch = 7e7
    m1 = m.normalized_copy(64)
    assert (m1.gbs, m1.min_micro_batch_size, m1.optimizer_memory_scaling) == (64, 32, 2)
    assert m1.peak_activation_per_batch == 7e7
    assert m1.total_time == pytest.approx(m.total_time * 32)
    assert m.gbs == 2  # the original is not modified
    assert "Model(layers=20" in repr(m1) and "gbs=64" in repr(m1)
    # matrix entries follow HPGO's layout: row 0 is the prefix, row r >= 1 is r..c
    assert m1.ct(0, 4) == pytest.approx(m1.ct(1, 4) + m1.ct(0, 0))
    assert m1.ct(5, 4) < 0  # sentinel (-1 scaled)
    with pytest.raises(IndexError):
        m1.ct(0, 20)
    assert m1.preds(3) == [0, 1, 2]


@pytest.mark.parametrize(
    "attr,value,exc",
    [
        ("min_micro_batch_size", 0, ValueError),
        ("min_micro_batch_size", -3, ValueError),
        ("min_micro_batch_size", 1.5, TypeError),
        ("optimizer_memory_scaling", -1, ValueError),
        ("optimizer_memory_scaling", "2", TypeError),
        ("peak_activation_per_batch", 0, ValueError),
        ("peak_activation_per_batch", float("nan"), ValueError),
        ("peak_activation_per_batch", float("inf"), ValueError),
        ("peak_activation_per_batch", None, TypeError),
    ],
)
def test_model_setter_validation(attr, value, exc):
    m = chain_model(5)
    before = getattr(m, attr)
    with pytest.raises(exc) as e:
        setattr(m, attr, value)
    assert attr in str(e.value) or exc is TypeError
    assert getattr(m, attr) == before


def test_devices():
    d = hpgo.Devices(16, [8, 16])
    assert (d.num_gpus, d.machines, d.seps) == (16, 2, [8, 16])
    assert repr(d) == "Devices(num_gpus=16, seps=[8, 16])"
    f = hpgo.devices_from_seps(list(range(1, 17)))
    assert f.machines == 16 and f.num_gpus == 16
    seps = [4, 8]
    hpgo.devices_from_seps(seps)
    assert seps == [4, 8]


@pytest.mark.parametrize(
    "args,exc,words",
    [
        ((16, []), ValueError, "empty"),
        ((16, [8, 8, 16]), ValueError, "increasing"),
        ((16, [16, 8]), ValueError, "increasing"),
        ((16, [0, 16]), ValueError, "increasing"),
        ((16, [8, 12]), ValueError, "must equal"),
        ((0, [0]), ValueError, ""),
        ((100000, [100000]), ValueError, "limit"),
        ((16, "8,16"), TypeError, ""),
        ((16, [8.0, 16]), TypeError, "int"),
        ((16, None), TypeError, ""),
    ],
)
def test_devices_bad_arguments(args, exc, words):
    with pytest.raises(exc) as e:
        hpgo.Devices(*args)
    assert words in str(e.value)


def test_dp_family_on_chain_model():
    m = chain_model(30, gbs=128)
    d = hpgo.devices_from_seps([8, 16])
    dp = hpgo.dp_speedup(d, m)
    t1, p = m.total_time, m.total_params
    assert dp == pytest.approx(t1 / (t1 / 16 + p * 2 * (15 / 16) / 3e9), rel=1e-14)
    p3 = hpgo.dp_p3_speedup(d, m)
    assert 0 < dp <= p3 <= 16
    assert hpgo.current_ga_iter_size(d, m) == 8  # fits: bpd = 128 // 16
    assert 0 < hpgo.dp_cur_ga_inner_overlap_speedup(d, m) <= hpgo.dp_cur_ga_p3_speedup(d, m)
    assert hpgo.dp_opt_ga_p3_speedup(d, m) > 0
    with pytest.raises(TypeError):
        hpgo.dp_speedup(m, d)
    with pytest.raises(TypeError):
        hpgo.dp_speedup(d)


def test_model_that_does_not_fit_raises_planning_error():
    m = chain_model(10, gbs=256, par=5e9)  # 55 GB of parameters
    d = hpgo.devices_from_seps([8, 16])
    assert m.max_single_gpu_batch_size() == 0
    with pytest.raises(hpgo.PlanningError, match="does not fit"):
        hpgo.dp_cur_ga_p3_speedup(d, m)
    with pytest.raises(ValueError):  # PlanningError is a ValueError too
        hpgo.current_ga_iter_size(d, m)
    assert hpgo.dp_speedup(d, m) > 0  # the memory model does not matter here


def test_orchestrate_candidates_and_best():
    m = chain_model(40, gbs=256)
    d = hpgo.devices_from_seps([8, 16])
    c = hpgo.AsyncOrchestrate(m, d)
    assert c.m is m and c.d is d and c.res == []
    c.orchestrate()
    labels = [x.label for x in c.res] + [s[0] for s in c.skipped]
    assert labels[:15] == ["i=%d" % i for i in range(2, 17)]
    assert "straight i=2" in labels and "straight i=16" in labels and "bipartition" in labels
    best = c.py_orchestrate()
    assert isinstance(best, tuple) and isinstance(best[0], float)
    assert best[0] == max(x.speedup for x in c.res)
    for a, b, u, gpus in best[1]:
        assert 0 <= a <= b <= 39 and u >= 1 and gpus == sorted(gpus)
    # every GPU is used at most once across stages
    used = [g for st in best[1] for g in st[3]]
    assert len(used) == len(set(used))
    assert "AsyncOrchestrate(" in repr(c)


def test_one_gpu_is_a_documented_result():
    m = chain_model(10, gbs=32)
    c = hpgo.AsyncOrchestrate(m, hpgo.devices_from_seps([1]))
    speedup, stages = c.py_orchestrate()
    assert speedup == pytest.approx(1.0)
    assert stages == [(0, 9, 1, [0])]


def test_straight_pipeline_needs_enough_states():
    m = chain_model(5, gbs=512, step=1.0)
    c = hpgo.AsyncOrchestrate(m, hpgo.devices_from_seps([8, 16]))
    c.orchestrate()
    skipped = dict(c.skipped)
    assert "straight i=16" in skipped and "states" in skipped["straight i=16"]
    assert c.py_orchestrate()[0] > 0


def test_tiny_model_block_time_below_1ms():
    m = chain_model(10, gbs=1, step=1e-6, act=1.0)
    c = hpgo.AsyncOrchestrate(m, hpgo.devices_from_seps([8, 16]))
    # HPGO panics ("ppl time error"); hpgo skips those candidates and keeps
    # the two-stage split, which has no such check
    speedup, stages = c.py_orchestrate()
    assert [x.label for x in c.res] == ["bipartition"]
    assert len(stages) == 2
    assert len(c.skipped) == 17
    assert sum("1 ms" in r for _, r in c.skipped) == 16  # straight i=16: too few states


def test_bad_orchestrate_arguments():
    m = chain_model(5)
    d = hpgo.devices_from_seps([8])
    with pytest.raises(TypeError):
        hpgo.AsyncOrchestrate(d, m)
    with pytest.raises(ValueError):
        hpgo.AsyncOrchestrate(m, d, threads=-1)
    with pytest.raises(ValueError, match="pbs"):
        hpgo.conductor_from_torch_graph_and_seps(str(SHIPPED), 0, 128, [8, 16])
    with pytest.raises(ValueError, match="gbs"):
        hpgo.model_from_torch_graph(str(SHIPPED), 1, -5)
    with pytest.raises(TypeError):
        hpgo.model_from_torch_graph(str(SHIPPED), "1", 5)
    with pytest.raises(FileNotFoundError):
        hpgo.model_from_torch_graph("/nonexistent/graph.txt", 1, 1)


def test_model_from_states_validation():
    with pytest.raises(ValueError):
        hpgo.model_from_states([], [], [], [], [], [], 1, 1)
    with pytest.raises(ValueError, match="ascending"):
        hpgo.model_from_states([1, 2], [1, 2], [1, 2], [1, 1], [[], [1]], ["a", "b"], 1, 1)
    with pytest.raises(ValueError, match="finite"):
        hpgo.model_from_states([1, float("nan")], [1, 2], [1, 2], [1, 1], [[], [0]], ["a", "b"], 1, 1)
    with pytest.raises(ValueError, match="items"):
        hpgo.model_from_states([1, 2], [1], [1, 2], [1, 1], [[], [0]], ["a", "b"], 1, 1)


def test_shipped_profile_plans():
    if not SHIPPED.exists():
        pytest.skip("shipped profile not generated yet")
    c = hpgo.conductor_from_torch_graph_and_seps(str(SHIPPED), 1, 128, [8, 16])
    speedup, stages = c.py_orchestrate()
    assert 1.0 < speedup <= 16.0
    assert stages[0][0] == 0


def test_gil_is_released_while_planning():
    m = chain_model(220, gbs=4096)
    d = hpgo.devices_from_seps([8, 16])
    c = hpgo.AsyncOrchestrate(m, d, exhaustive=True, threads=1)
    ticks = 0
    done = threading.Event()

    def spin():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.02)
    start_ticks = ticks
    t0 = time.perf_counter()
    c.orchestrate()
    elapsed = time.perf_counter() - t0
    during = ticks - start_ticks
    done.set()
    t.join()
    assert elapsed > 0.05, "planning too quick to observe the GIL"
    # with the GIL held the spinning thread could not run at all
    assert during >= 10


def test_gil_is_released_while_reading():
    path = shared_path("profiles", "gnmt_16", "graph.txt")
    ticks = 0
    done = threading.Event()

    def spin():
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.01)
    before = ticks
    for _ in range(3):
        hpgo.model_from_torch_graph(path, 64, 64)
    during = ticks - before
    done.set()
    t.join()
    assert during > 0


CONCURRENCY = textwrap.dedent(
    """
    import sys, threading
    sys.path.insert(0, {tests!r})
    import hpgo
    from conftest import chain_model
    m = chain_model(60, gbs=512)
    d = hpgo.devices_from_seps([8, 16])
    expect = hpgo.AsyncOrchestrate(m, d).py_orchestrate()
    shared = hpgo.AsyncOrchestrate(m, d, threads=2)
    out, errors = [None] * 32, []
    def work(k):
        try:
            if k % 2:
                out[k] = shared.py_orchestrate()
            else:
                mm = m.normalized_copy(512)
                mm.min_micro_batch_size = 1
                out[k] = hpgo.AsyncOrchestrate(mm, hpgo.devices_from_seps([8, 16])).py_orchestrate()
            hpgo.dp_cur_ga_p3_speedup(d, m)
        except Exception as e:
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(k,)) for k in range(32)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors
    assert all(o == expect for o in out), out
    print("OK", len(out))
    """
)


def test_32_threads_plan_concurrently_with_identical_results():
    code = CONCURRENCY.format(tests=str(Path(__file__).resolve().parent))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "OK 32" in r.stdout


def test_thread_count_does_not_change_results():
    m = chain_model(50, gbs=1024)
    d = hpgo.devices_from_seps([4, 8, 12, 16])
    results = []
    for threads in (1, 2, 5):
        c = hpgo.AsyncOrchestrate(m, d, threads=threads)
        c.orchestrate()
        results.append((list(c.res), list(c.skipped)))
    assert results[0] == results[1] == results[2]


def test_core_never_includes_python_h():
    for p in (ROOT / "csrc").rglob("*.[ch]"):
        if "module" in p.parts:
            continue
        assert "Python.h" not in p.read_text(), p


def test_pipeline_length_recursive():
    from hpgo.Utils import pipeline_length_recursive

    # one element: M forwards and backwards back to back
    assert pipeline_length_recursive([1.0], [2.0], [0.5], 3) == pytest.approx(9.5)
    with pytest.raises(ValueError):
        pipeline_length_recursive([1.0], [2.0, 1.0], [0.0], 3)
    with pytest.raises(ValueError):
        pipeline_length_recursive([1.0], [2.0], [0.0], 0)


def test_memory_limit_skips_a_candidate_deterministically():
    m = chain_model(120, gbs=4096)
    d = hpgo.devices_from_seps([8, 16])
    full = hpgo.AsyncOrchestrate(m, d)
    full.orchestrate()
    small = hpgo.AsyncOrchestrate(m, d, max_memory=4096)
    small.orchestrate()
    limited = [lab for lab, why in small.skipped if "max_memory" in why]
    assert limited, small.skipped
    # every candidate that fits is identical to the unlimited search
    kept = {c.label: c for c in small.res}
    for c in full.res:
        if c.label not in limited:
            assert kept[c.label] == c
    again = hpgo.AsyncOrchestrate(m, d, max_memory=4096)
    again.orchestrate()
    assert again.skipped == small.skipped and again.res == small.res
    with pytest.raises(ValueError):
        hpgo.AsyncOrchestrate(m, d, max_memory=-1)


@pytest.mark.parametrize("n_states,gbs,seps", [
    (16, 64, list(range(2, 25, 2))),       # twelve machines of 2
    (20, 128, [5, 6, 14, 20, 21, 30]),     # uneven machines, one of a single GPU
    (12, 256, [3, 8, 10, 16, 24, 27, 32]),
])
def test_pruned_equals_exhaustive_on_many_machines(n_states, gbs, seps):
    # uniform layers tie everywhere, the hardest case for the bound, and many
    # machines make the allocation search (per-machine counts, memoised
    # across keys) differ most from HPGO's literal walk
    m = chain_model(n_states, gbs=gbs)
    d = hpgo.devices_from_seps(seps)
    a = hpgo.AsyncOrchestrate(m, d)
    a.orchestrate()
    b = hpgo.AsyncOrchestrate(m, d, exhaustive=True)
    b.orchestrate()
    assert list(a.res) == list(b.res)
    assert list(a.skipped) == list(b.skipped)
    assert len(a.res) > len(seps)


def test_pruned_equals_exhaustive_where_rounding_beats_data_parallel():
    # A hybrid DP candidate keeps its data-parallel start unless a pipeline
    # is strictly faster, which with exact arithmetic never happens (the
    # slowest stage takes at least the average) but with floating point
    # happens by a few ulps.  The pruned search drops every cell at or above
    # the start's value; on random small models it must still find exactly
    # those pipelines.
    import itertools
    import random

    rng = random.Random(1)
    wins = 0
    for _ in range(400):
        n = rng.randint(2, 6)
        per = [rng.choice([0.1, 0.2, 0.3, 0.7, 0.05, 0.15, 1.1, 0.6]) for _ in range(n)]
        ct = list(itertools.accumulate(per))
        m = hpgo.model_from_states(ct, [float(s + 1) for s in range(n)],
                                   [float(s + 1) for s in range(n)], [1.0] * n,
                                   [list(range(s)) for s in range(n)],
                                   ["l%d" % s for s in range(n)], 1, rng.choice([8, 16, 24, 48, 96]))
        d = hpgo.devices_from_seps(rng.choice([[2], [4], [2, 4], [4, 8], [3, 6], [8]]))
        a = hpgo.AsyncOrchestrate(m, d, threads=1)
        a.orchestrate()
        b = hpgo.AsyncOrchestrate(m, d, threads=1, exhaustive=True)
        b.orchestrate()
        assert list(a.res) == list(b.res), (per, d)
        wins += sum(1 for c in a.res if c.label.startswith("i=") and len(c.stages) > 1)
    assert wins > 0


def test_straight_pipeline_on_sparse_state_graphs():
    # A straight pipeline of i stages needs a chain of i states, each a
    # predecessor of the next, ending at the last state.  The planner decides
    # that up front; check both answers against the state graph.
    import itertools
    import random

    rng = random.Random(7)
    decided = {"planned": 0, "refused": 0}
    for _ in range(150):
        n = rng.randint(2, 14)
        ct = list(itertools.accumulate(rng.uniform(0.01, 0.2) for _ in range(n)))
        preds = [sorted(rng.sample(range(s), rng.randint(1, s))) if s else [] for s in range(n)]
        m = hpgo.model_from_states(ct, [1e6 * (s + 1) for s in range(n)],
                                   [4e6 * (s + 1) for s in range(n)], [1e6] * n, preds,
                                   ["l%d" % s for s in range(n)], 1, rng.choice([64, 256, 1024]))
        d = hpgo.devices_from_seps(rng.choice([[4], [8], [2, 4], [4, 8], [8, 16], [3, 6, 9, 12]]))
        a = hpgo.AsyncOrchestrate(m, d, threads=1)
        a.orchestrate()
        lengths = []  # lengths[j]: the numbers of stages a chain ending at state j can have
        for j in range(n):
            lengths.append({1} | {x + 1 for k in preds[j] for x in lengths[k]})
        for c in a.res:
            if c.label.startswith("straight"):
                assert len(c.stages) == int(c.label.split("=")[1])
                # HPGO's stage tuples: (first state, next stage's first state,
                # ...); the last stage's second field is the last state
                ends = [s[1] - 1 for s in c.stages[:-1]] + [n - 1]
                assert c.stages[0][0] == 0 and c.stages[-1][1] == n - 1
                for k, nxt, end in zip(ends, c.stages[1:], ends[1:]):
                    assert nxt[0] == k + 1 and k in preds[end], c.stages
                decided["planned"] += 1
        for label, why in a.skipped:
            if label.startswith("straight") and "no chain" in why:
                assert int(label.split("=")[1]) not in lengths[n - 1]
                decided["refused"] += 1
    assert decided["planned"] > 10 and decided["refused"] > 10, decided
