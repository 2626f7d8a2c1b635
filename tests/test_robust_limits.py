"""Documented limits hold at their boundaries: a value at the limit works, one
past it gives a ValueError naming the limit, never undefined behaviour.  The
limits table of docs/errors-and-limits.md lists every limit constant of the C
headers with its value (checked here against the headers)."""
import re
from pathlib import Path

import pytest

import hpgo

from csrc_paths import src
from robust_child import run_child

ROOT = Path(__file__).resolve().parents[1]

# constant -> header; the README must show each name and its value
CONSTANTS = {
    "HPGO_MAX_FILE_BYTES": "profile.h",
    "HPGO_MAX_NODES": "profile.h",
    "HPGO_MAX_EDGES": "profile.h",
    "HPGO_MAX_STATES": "profile.h",
    "HPGO_MAX_GPUS": "topo.h",
    "HPGO_MODEL_MAX_TOTAL": "model.h",
    "HPGO_POOL_MAX_THREADS": "pool.h",
    "HPGO_SIM_MAX_STAGES": "pipeline_sim.h",
    "HPGO_SIM_MAX_MICROBATCHES": "timeline.h",
    "HPGO_SIM_MAX_DEVICES": "timeline.h",
    "HPGO_SIM_MAX_EVENTS": "timeline.h",
    "HPGO_DISTIR_MAX_LAYERS": "sim_distir.h",
    "HPGO_DISTIR_MAX_DIM": "sim_distir.h",
    "HPGO_DISTIR_MAX_SEQ": "sim_distir.h",
    "HPGO_DISTIR_MAX_TOKENS": "sim_distir.h",
}


def _value(name, header):
    text = src(header).read_text()
    m = re.search(rf"#define {name} (.+?)(?:/\*.*)?$", text, re.M)
    assert m, f"{name} not in {header}"
    expr = m.group(1).strip().replace("(size_t)", "").replace("(int64_t)", "")
    return eval(expr, {})  # small constant expressions such as ((1 << 30))


def _readme_section():
    text = (ROOT / "docs" / "errors-and-limits.md").read_text()
    start = text.index("## Limits")
    end = text.index("\n## ", start + 10)
    return text[start:end]


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_readme_lists_each_limit_with_its_value(name):
    value = _value(name, CONSTANTS[name])
    section = _readme_section()
    row = next((line for line in section.splitlines() if f"`{name}`" in line), None)
    assert row, f"{name} is not in the README's limits table"
    digits = row.replace(",", "").replace(" ", "")
    forms = {str(value), f"{value:,}".replace(",", ""), f"{value:g}"}
    if isinstance(value, int) and value > 1 and value & (value - 1) == 0:
        forms.add(f"2^{value.bit_length() - 1}")
    assert any(f in digits for f in forms), (name, value, row)


def test_gpu_limit_boundary():
    assert hpgo.Devices(1024, [512, 1024]).num_gpus == 1024
    assert hpgo.Devices(1024, list(range(1, 1025))).machines == 1024
    with pytest.raises(ValueError, match="1025 GPUs is more than the limit of 1024"):
        hpgo.Devices(1025, [1025])
    with pytest.raises(ValueError, match="more than the limit of 1024"):
        hpgo.devices_from_seps(list(range(1, 1026)))


def test_state_limit_boundary():
    n = 10000
    ok = hpgo.model_from_states([float(i + 1) for i in range(n)], [1.0] * n, [1.0] * n, [1.0] * n,
                                [[i - 1] if i else [] for i in range(n)], ["x"] * n, 1, 1)
    assert ok.num_layers == n
    with pytest.raises(ValueError, match="need 1 to 10000 states, got 10001"):
        hpgo.model_from_states([1.0] * (n + 1), [1.0] * (n + 1), [1.0] * (n + 1),
                               [1.0] * (n + 1), [[]] * (n + 1), ["x"] * (n + 1), 1, 1)


def test_batch_size_boundary():
    m = hpgo.model_from_torch_graph(str(ROOT / "profiles" / "mlp-cpu" / "graph.txt"), 1,
                                    2**32 - 1)
    assert m.gbs == 2**32 - 1
    speedup, stages = hpgo.AsyncOrchestrate(m, hpgo.Devices(8, [8])).py_orchestrate()
    assert speedup > 0 and stages
    with pytest.raises(ValueError, match="between 0 and 4294967295"):
        m.normalized_copy(2**32)


def test_simulator_boundaries():
    st = [hpgo.Stage(1e-3, 1e-3)]
    r = hpgo.simulate_pipeline(st, 2**20, timeline=False)
    assert r.iteration_time == pytest.approx(2**20 * 2e-3)
    with pytest.raises(ValueError, match="1048577 micro-batches exceed the limit of 1048576"):
        hpgo.simulate_pipeline(st, 2**20 + 1, timeline=False)
    # every stage needs a GPU, so 1024 stages is the most a plan can have
    r = hpgo.simulate_pipeline(st * 1024, 4, timeline=False)
    assert len(r.stages) == 1024
    with pytest.raises(ValueError, match="more than 1024 GPUs"):
        hpgo.simulate_pipeline(st * 1025, 4, timeline=False)
    assert hpgo.simulate_mlp(1024, 8, 4, dp=1024, timeline=False).iteration_time > 0
    assert hpgo.simulate_mlp(8, 2**20, 1, timeline=False).iteration_time > 0


def test_1024_gpus_one_per_machine_plans_in_bounded_time():
    """The largest cluster (1024 machines of one GPU: 1026 candidates) on a
    two-layer model, in a child with a timeout (README: planning time grows
    steeply with GPUs and layers; bigger cases are measured there)."""
    child = run_child("""
        import time, hpgo
        m = hpgo.model_from_states([1.0, 2.0], [1e6, 2e6], [1e8, 2e8], [1e6, 1e6], [[], [0]],
                                   ['a', 'b'], 32, 4096)
        c = hpgo.AsyncOrchestrate(m, hpgo.Devices(1024, list(range(1, 1025))))
        t = time.perf_counter()
        c.orchestrate()
        result['seconds'] = time.perf_counter() - t
        result['candidates'] = len(c.res) + len(c.skipped)
        result['best'] = c.py_orchestrate()[0]
        """, timeout=900)
    assert child.returncode == 0, child.describe()
    assert child.result["candidates"] == 1026
    assert child.result["best"] > 1
