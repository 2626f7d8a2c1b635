"""graph.txt / JSON writer and reader (hpgo.graphfile)."""
import math

import pytest

from hpgo.graphfile import (Node, Profile, ProfileFormatError, format_graph, parse_graph, read_graph,
                            read_json, write_profile)


def small():
    nodes = [Node("Input", 0, 0, 100, 0), Node("a -- b\nc", 1.5, 2.25, 400, 64),
             Node("join", 0.125, 0.5, 40, 8), Node("side", 3, 4, 16, 0)]
    return Profile(nodes, [(0, 1), (1, 2), (0, 3), (3, 2)], {"batch_size": 4})


def test_format_is_pipedream_graph_txt():
    text = format_graph(small())
    lines = text.splitlines()
    assert lines[0].startswith("node1 -- Input -- forward_compute_time=")
    node_lines = [ln for ln in lines if not ln[0] in " \t"]
    edge_lines = [ln for ln in lines if ln[0] in " \t"]
    assert len(node_lines) == 4 and len(edge_lines) == 4
    for ln in node_lines:
        parts = ln.split(" -- ")
        assert len(parts) == 3, ln           # the separator never leaks into DESC
        meta = parts[2].split(", ")
        assert [m.split("=")[0] for m in meta] == [
            "forward_compute_time", "backward_compute_time", "activation_size", "parameter_size"]
    assert edge_lines[0] == "\tnode1 -- node2"
    assert "\n" not in node_lines[1].split(" -- ")[1]


def test_round_trip_numbers(tmp_path):
    p = small()
    g, j = write_profile(tmp_path / "x", p)
    q = read_graph(g)
    for a, b in zip(p.nodes, q.nodes):
        assert math.isclose(a.fwd_ms, b.fwd_ms, abs_tol=1e-6)
        assert math.isclose(a.bwd_ms, b.bwd_ms, abs_tol=1e-6)
        assert a.act_bytes == b.act_bytes and a.param_bytes == b.param_bytes
    assert q.edges == p.edges
    r = read_json(j)
    assert r.meta["batch_size"] == 4 and r.edges == p.edges
    assert [n.desc for n in r.nodes] == [n.desc for n in q.nodes]


def test_write_to_txt_path_puts_json_beside(tmp_path):
    g, j = write_profile(tmp_path / "sub" / "m.txt", small())
    assert g.endswith("m.txt") and j.endswith("m.json")
    assert (tmp_path / "sub" / "m.json").is_file()


@pytest.mark.parametrize("mutate, msg", [
    (lambda p: p.edges.append((2, 1)), "cycle"),
    (lambda p: p.edges.append((0, 9)), "out of range"),
    (lambda p: p.edges.append((1, 1)), "self loop"),
    (lambda p: setattr(p.nodes[1], "fwd_ms", float("nan")), "finite"),
    (lambda p: setattr(p.nodes[2], "act_bytes", -1.0), ">= 0"),
    (lambda p: setattr(p.nodes[0], "desc", "Embedding"), "Input"),
    (lambda p: setattr(p.nodes[3], "desc", "Input2"), "only the first"),
    (lambda p: p.edges.append((3, 0)), "Input node must have no incoming"),
])
def test_validate_rejects(mutate, msg):
    p = small()
    mutate(p)
    with pytest.raises(ProfileFormatError, match=msg):
        format_graph(p)


def test_parse_crlf_lists_and_errors():
    text = ("node1 -- Input -- f=0, b=0, a=[1; 2], p=0\r\n"
            "node2 -- L -- f=1e-3, b=2, a=3, p=4\r\n\r\n"
            "\tnode1 -- node2\r\n")
    p = parse_graph(text, "t.txt")
    assert p.nodes[0].act_bytes == 3.0 and p.nodes[1].fwd_ms == 0.001
    assert p.edges == [(0, 1)]
    with pytest.raises(ProfileFormatError, match="t.txt:2"):
        parse_graph("node1 -- Input -- f=0, b=0, a=0, p=0\nnode2 -- L -- f=1, b=2, a=3\n", "t.txt")
    with pytest.raises(ProfileFormatError, match="t.txt:2: edge names undeclared"):
        parse_graph("node1 -- Input -- f=0, b=0, a=0, p=0\n\tnode1 -- node7\n", "t.txt")
    with pytest.raises(ProfileFormatError, match="bad number"):
        parse_graph("node1 -- Input -- f=x, b=0, a=0, p=0\n", "t.txt")
