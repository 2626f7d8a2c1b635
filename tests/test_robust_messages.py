"""Limits and planners name what applies: a long chain or a dense DAG is not
"too wide"; the HAP planner names the layer no allowed strategy covers; the
straggler detector never reports infinite ratios; sweep takes NumPy batch
sizes; transformer_chain refuses a chain past the HAP planner's layer limit
before building it."""
import pytest

import hpgo
from hpgo import graphfile
from hpgo import hetero as H
from hpgo.dynpipe import StragglerDetector


def test_long_chain_names_the_reachability_limit(tmp_path):
    n = 45000
    nodes = [("Input", 0, 0, 0, 0)] + [(f"l{i}", 1.0, 2.0, 1e6, 1e6) for i in range(n)]
    p = tmp_path / "graph.txt"
    graphfile.write_graph(p, graphfile.chain(nodes, {"batch_size": 4}))
    with pytest.raises(ValueError) as e:
        hpgo.model_from_torch_graph(str(p), 1, 4)
    msg = str(e.value)
    assert "too wide" not in msg and "reachability" in msg and "45000 nodes" in msg, msg


def test_dense_dag_names_the_reachability_limit(tmp_path):
    n = 2000
    lines = [f"node{i} -- l{i} -- forward_compute_time=1.0, backward_compute_time=2.0, "
             f"activation_size=1000000.0, parameter_size=1000000.0" for i in range(n)]
    lines += [f"\tnode{i} -- node{j}" for i in range(n) for j in range(i + 1, n)]
    p = tmp_path / "graph.txt"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as e:
        hpgo.model_from_torch_graph(str(p), 1, 4)
    msg = str(e.value)
    assert "too wide" not in msg and "reachability" in msg, msg


def test_hap_names_the_uncovered_layer():
    c = H.hap_cluster("V100", 1, "P100", 1)
    with pytest.raises(hpgo.PlanningError) as e:
        H.plan(H.transformer_chain(1, 4, 4), c, strategies=["dp"])
    msg = str(e.value)
    assert "layer 1 (attention)" in msg and "att_r/att_gb/att_heads" in msg, msg
    assert msg.endswith("allowed: dp"), msg
    with pytest.raises(hpgo.PlanningError) as e:
        H.plan(H.transformer_chain(1, 4, 4), c, strategies=["dp", "att_gb"])
    msg = str(e.value)
    assert "layer 4 (element-wise)" in msg and "ew_r/ew_gb/ew_gf" in msg, msg


def test_straggler_ratios_are_finite():
    d = StragglerDetector(2, window=2, warmup_windows=0)
    ev = d.feed([[1e-320, 1e-320]] * 2 + [[1, 1]] * 4)  # a subnormal baseline: no signal
    assert ev == []
    d = StragglerDetector(2, window=2, warmup_windows=0)
    ev = d.feed([[1e-300, 1e-300]] * 2 + [[1e10, 1]] * 2)
    assert ev and all(r < float("inf") for r in ev[0].ratios)
    d = StragglerDetector(1, window=2, warmup_windows=0)
    with pytest.raises(ValueError, match="overflow"):
        d.feed([1e308, 1e308])


def test_sweep_takes_numpy_batch_sizes():
    np = pytest.importorskip("numpy")
    m = hpgo.model_from_torch_graph("profiles/transformer36-v100/graph.txt", 1, 128)
    a = hpgo.sweep(m, 1, np.arange(64, 256, 64), [8, 16])
    b = hpgo.sweep(m, 1, [64, 128, 192], [8, 16])
    assert a == b
    assert len(hpgo.sweep(m, 1, np.int64(64), [8, 16])) == 1


def test_transformer_chain_past_the_layer_limit_is_refused_at_once():
    # refused before building 60 million layers in Python
    with pytest.raises(ValueError, match="HPGO_HAP_MAX_LAYERS"):
        H.transformer_chain(10 ** 7)
    assert len(H.transformer_chain(1000)) == 6000
