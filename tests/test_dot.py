"""hpgo.dot: the layer graph as Graphviz DOT, nodes coloured by stage."""
import re
import shutil

import pytest

import hpgo
from conftest import ROOT
from hpgo import _core, dot
from hpgo.plan import STAGE_COLORS, Plan, best_plan
from optional_deps import need

RESNET = str(ROOT / "profiles" / "resnet50-v100" / "graph.txt")
XLNET = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")

NODE = re.compile(r'^\s*n(\d+) \[(.*)\];$')
EDGE = re.compile(r'^\s*n(\d+) -> n(\d+);$')


def parse(text):
    nodes, edges = {}, []
    for line in text.splitlines():
        m = NODE.match(line)
        if m:
            nodes[int(m.group(1))] = m.group(2)
        m = EDGE.match(line)
        if m:
            edges.append((int(m.group(1)), int(m.group(2))))
    return nodes, edges


@pytest.mark.parametrize("path,pbs,gbs", [(RESNET, 32, 256), (RESNET, 32, 64), (XLNET, 1, 128)])
def test_nodes_edges_and_stage_colours(path, pbs, gbs):
    prof = _core.read_profile(path)
    plan = best_plan(path, pbs, gbs, [8, 16])
    text = dot.profile_dot(path, plan)
    assert text.startswith("digraph ") and text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    nodes, edges = parse(text)
    assert sorted(nodes) == list(range(len(prof["nodes"])))
    assert edges == [tuple(e) for e in prof["edges"]]
    stages = dot.node_stages(path, plan)
    for i, attrs in nodes.items():
        if stages[i] is None:
            assert "dashed" in attrs  # the dropped Input node
        else:
            assert f'fillcolor="{STAGE_COLORS[stages[i] % len(STAGE_COLORS)]}"' in attrs
    # every stage that owns nodes gets a cluster
    for s in plan.stages:
        if s.index in stages:
            assert f"subgraph cluster_stage{s.index} {{" in text
    # the node-to-stage map follows the state ranges: a node's first state is in its stage
    sets = prof["states"]["sets"]
    for k, members in enumerate(sets):
        st = next(s.index for s in plan.stages if s.first_state <= k <= s.last_state)
        for n in members:
            assert stages[n] <= st


def test_stages_are_monotone_along_a_chain():
    plan = best_plan(XLNET, 1, 128, [8, 16])
    st = [s for s in dot.node_stages(XLNET, plan) if s is not None]
    assert st == sorted(st) and set(st) == {0, 1}


def test_without_plan_and_options():
    text = dot.profile_dot(XLNET, rankdir="LR", times=False, name='my "model"')
    assert "rankdir=LR" in text and "cluster" not in text
    assert 'digraph "my \\"model\\""' in text
    assert " ms" not in text
    with pytest.raises(ValueError):
        dot.profile_dot(XLNET, rankdir="sideways")


def test_labels_are_escaped(tmp_path):
    g = tmp_path / "graph.txt"
    g.write_text(
        "node1 -- Input -- forward_compute_time=0, backward_compute_time=0, activation_size=1, parameter_size=0\n"
        'node2 -- conv "a\\b" -- forward_compute_time=1, backward_compute_time=2, activation_size=4, parameter_size=8\n'
        "node3 -- fc -- forward_compute_time=1, backward_compute_time=2, activation_size=4, parameter_size=8\n"
        "\tnode1 -- node2\n\tnode2 -- node3\n")
    text = dot.profile_dot(g, Plan.from_hpgo((1.0, [(0, 1, 1, [0]), (1, 1, 1, [1])])))
    assert 'label="conv \\"a\\\\b\\"' in text
    nodes, edges = parse(text)
    assert len(nodes) == 3 and edges == [(0, 1), (1, 2)]


def test_plan_of_another_profile_is_refused():
    plan = best_plan(XLNET, 1, 128, [8, 16])
    with pytest.raises(ValueError, match="do not match"):
        dot.profile_dot(RESNET, plan)


def test_hpgo_tuple_accepted():
    t = hpgo.conductor_from_torch_graph_and_seps(XLNET, 1, 128, [8, 16]).py_orchestrate()
    assert dot.profile_dot(XLNET, t) == dot.profile_dot(XLNET, Plan.from_hpgo(t))


def test_write_dot(tmp_path):
    out = dot.write_dot(XLNET, tmp_path / "g.dot")
    assert out.read_text() == dot.profile_dot(XLNET)


def test_render_without_graphviz_writes_dot(tmp_path, monkeypatch):
    monkeypatch.setattr(dot, "can_render", lambda: False)
    plan = best_plan(XLNET, 1, 128, [8, 16])
    written, rendered = dot.render(XLNET, tmp_path / "g.svg", plan)
    assert not rendered and written == tmp_path / "g.dot"
    # render() wraps a deep graph in columns; the DOT text is what it would render
    assert written.read_text() == dot.profile_dot(XLNET, plan, wrap="auto")
    assert not (tmp_path / "g.svg").exists()


def test_collapsed_chains_keep_every_layer_and_the_stage_colours():
    prof = _core.read_profile(RESNET)
    plan = best_plan(RESNET, 32, 256, [8, 16])
    text = dot.profile_dot(RESNET, plan, collapse=True)
    nodes, edges = parse(text)
    counts = [int(m) for m in re.findall(r"\((\d+) layers\)", text)]
    assert sum(counts) + (len(nodes) - len(counts)) == len(prof["nodes"])
    assert len(nodes) < len(prof["nodes"]) // 3
    # a merged node never mixes stages: every fill colour is one stage's
    stages = dot.node_stages(RESNET, plan)
    used = {STAGE_COLORS[s % len(STAGE_COLORS)] for s in stages if s is not None}
    assert set(re.findall(r'fillcolor="(#[0-9a-f]+)"', text)) - {"#ffffff", "#eeeeee"} == used
    # edges join merged nodes in data-flow order, once each
    assert len(edges) == len(set(edges)) and all(a < b for a, b in edges)


def test_wrapped_layout_and_compact_render(tmp_path, monkeypatch):
    text = dot.profile_dot(XLNET, wrap=3)
    assert text.count("constraint=false") == 2      # a chain cut into three columns
    assert dot.profile_dot(XLNET, wrap="auto") != dot.profile_dot(XLNET)
    with pytest.raises(ValueError, match="wrap"):
        dot.profile_dot(XLNET, wrap=0)
    monkeypatch.setattr(dot, "can_render", lambda: False)
    plan = best_plan(RESNET, 32, 256, [8, 16])
    written, _ = dot.render(RESNET, tmp_path / "r.png", plan)
    assert written.read_text() == dot.profile_dot(RESNET, plan, collapse=True, wrap="auto")
    written, _ = dot.render(RESNET, tmp_path / "r.png", plan, compact=False, wrap=1)
    assert written.read_text() == dot.profile_dot(RESNET, plan)


def test_render_with_graphviz(tmp_path):
    need("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed")
    plan = best_plan(XLNET, 1, 128, [8, 16])
    written, rendered = dot.render(XLNET, tmp_path / "g.svg", plan)
    assert rendered and written == tmp_path / "g.svg"
    svg = written.read_text()
    assert "<svg" in svg and "Layer_17" in svg and STAGE_COLORS[1] in svg
    written, rendered = dot.render(XLNET, tmp_path / "g.png", plan)
    assert rendered and written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
