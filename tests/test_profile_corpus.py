"""Malformed and unusual profiles: the committed corpus in tests/corpus/ and
large inputs generated on the fly.  Every malformed file must give a
ValueError whose message starts with "<file>:<line>: " (or "<file>: " for
problems of the whole graph) and names the problem."""
from pathlib import Path

import pytest

from hpgo import _core

CORPUS = Path(__file__).resolve().parent / "corpus"
META = "forward_compute_time=1.0, backward_compute_time=2.0, activation_size=3.0, parameter_size=4.0"

# file -> (line or None, text the message must contain)
BAD = {
    "bad_empty.txt": (1, "empty profile"),
    "bad_blank_only.txt": (1, "empty profile"),
    "bad_truncated_meta.txt": (3, "META has 2 items"),
    "bad_truncated_line.txt": (3, "node line has 2 fields"),
    "bad_only_id.txt": (4, "node line has 1 field"),
    "bad_five_fields.txt": (4, "node line has 5 fields"),
    "bad_desc_with_separator.txt": (4, "META has 1 item"),
    "bad_meta_three_items.txt": (4, "META has 3 items"),
    "bad_meta_five_items.txt": (4, "META has 5 items"),
    "bad_meta_no_equals.txt": (4, "META item 1 ('forward_compute_time 1.0') is not key=value"),
    "bad_meta_semicolons.txt": (4, "META has 1 item"),
    "bad_nonnumeric.txt": (4, "forward_compute_time value 'fast' is not a number"),
    "bad_empty_value.txt": (4, "forward_compute_time value '' is not a number"),
    "bad_negative.txt": (4, "backward_compute_time value '-2.0' is negative"),
    "bad_nan.txt": (4, "activation_size value 'nan' is NaN"),
    "bad_inf.txt": (4, "parameter_size value 'inf' is infinite"),
    "bad_overflow.txt": (4, "forward_compute_time value '1e400' is infinite"),
    "bad_hex_number.txt": (4, "'0x10' is not a number"),
    "bad_underscores.txt": (4, "'1__0' is not a number"),
    "bad_list_item.txt": (4, "activation_size list value 'x' is not a number"),
    "bad_list_empty.txt": (4, "activation_size list value '' is not a number"),
    "bad_list_negative.txt": (4, "activation_size list value '-5.0' is negative"),
    "bad_stage_id.txt": (4, "4th field 'stage_id=two' is not stage_id=<int>"),
    "bad_duplicate_id.txt": (4, "duplicate node id 'node2' (first declared on line 2)"),
    "bad_edge_unknown_dst.txt": (6, "edge destination 'node9' is not a node declared"),
    "bad_edge_unknown_src.txt": (6, "edge source 'nodeX' is not a node declared"),
    "bad_edge_forward_reference.txt": (6, "edge destination 'node4' is not a node declared"),
    "bad_edge_three_fields.txt": (6, "edge line (it starts with white space) has 3 fields"),
    "bad_edge_one_field.txt": (6, "has 1 field separated by ' -- ', expected 2"),
    "bad_edge_before_nodes.txt": (4, "edge destination 'node2' is not a node declared"),
    "bad_cycle.txt": (8, "cycle: edge 'node3 -- node4' is on the cycle "
                         "node3 -> node4 -> node5 -> node3"),
    "bad_self_loop.txt": (6, "cycle: edge 'node3 -- node3'"),
    "bad_nul_byte.txt": (2, "NUL byte at column 118"),
    "bad_control_char.txt": (3, "control character 0x1B at column 1"),
    "bad_latin1.txt": (3, "invalid UTF-8 byte 0xE9 at column 13"),
    "bad_utf16.txt": (1, "invalid UTF-8 byte 0xFF at column 1"),
    "bad_binary_garbage.bin": (2, "invalid UTF-8 byte"),
    "bad_amoebanet_perf_style.txt": (1, "node line has 1 field"),
    "bad_no_edges.txt": (None, "profile has no edges after removing the input node(s)"),
    "bad_only_input_edges.txt": (None, "profile has no edges after removing the input node(s)"),
    "bad_first_source_isolated.txt": (None, "first source node 'node1' (line 1) has no outgoing"),
}


def read(name, **kw):
    return _core.read_profile(str(CORPUS / name), **kw)


def test_every_bad_file_has_an_expectation():
    files = sorted(p.name for p in CORPUS.iterdir() if p.name.startswith("bad_"))
    assert files == sorted(BAD)
    assert len(files) >= 25


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_profile(name):
    line, text = BAD[name]
    path = str(CORPUS / name)
    with pytest.raises(ValueError) as ei:
        _core.read_profile(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}:{line}: " if line else f"{path}: "), msg
    assert text in msg


# ------------------------------------------------------------------ accepted inputs

@pytest.mark.parametrize("name", ["ok_crlf_no_final_newline.txt", "ok_cr_only.txt",
                                  "ok_messy_whitespace.txt", "ok_stage_id.txt"])
def test_line_endings_whitespace_and_stage_ids_do_not_change_the_result(name):
    assert read(name) == read("ok_lf.txt")


def test_lf_reference_result():
    r = read("ok_lf.txt")
    st = r["states"]
    assert [n[0] for n in r["nodes"]] == ["node1", "node2", "node3", "node4"]
    assert st["labels"] == ["Layer_2", "Layer_3", "Layer_4"]
    assert st["ct"] == [0.004, 0.004 + 0.004, 0.004 + 0.004 + 0.004]  # Input dropped
    assert st["sets"] == [[1], [2], [3]]
    assert st["preds"] == [[], [0], [0, 1]]


def test_list_activation_is_summed():
    r = read("ok_list_activation.txt")
    assert r["nodes"][3][4] == 9175040.0 + 262144.0 + 262144.0
    assert r["states"]["oa"][-1] == 9175040.0 + 262144.0 + 262144.0


def test_number_forms_and_key_names_not_checked():
    assert read("ok_number_forms.txt")["nodes"][3] == \
        ("node4", "L", float("1_000.5"), float(" 2.5e-3 "), float("+1E3"), float(".5"))


def test_duplicate_edges_are_kept():
    r = read("ok_duplicate_edges.txt")
    assert r["edges"] == [(0, 1), (0, 1), (1, 2), (1, 3), (1, 3), (2, 3)]
    st = r["states"]
    # node2 still feeds node4, so it stays in X of the state cut after node3
    assert st["sets"] == [[1], [1, 2], [3]]
    assert st["oa"] == [1000.0, 2000.0, 1000.0]
    assert st["ct"] == read("ok_lf.txt")["states"]["ct"]


def test_unused_getitem_sink_is_dropped():
    st = read("ok_getitem_sink.txt")["states"]
    assert st["labels"] == ["Layer_2", "Layer_3"]


def test_unicode_desc_and_label_order():
    r = read("ok_unicode_desc.txt")
    assert r["nodes"][3][1] == "Schicht-Ü-层_4"
    assert r["states"]["labels"][-1] == "Schicht-Ü-层_4"


def test_states_false_skips_graph_checks():
    # parsing alone does not look for cycles; building the states does
    r = read("bad_cycle.txt", states=False)
    assert r["states"] is None and len(r["edges"]) == 5


# ------------------------------------------------------------------ large inputs

def write_graph(path, n_nodes, edges):
    with open(path, "w") as f:
        for start in range(0, n_nodes, 100000):
            f.write("".join(f"n{i} -- d{i} -- {META}\n"
                            for i in range(start, min(n_nodes, start + 100000))))
        f.write("".join(f"\tn{a} -- n{b}\n" for a, b in edges))
    return path


def test_100mb_single_line(tmp_path):
    p = tmp_path / "line.txt"
    p.write_bytes(b"x" * 100_000_000)
    with pytest.raises(ValueError) as ei:
        _core.read_profile(p)
    assert str(ei.value).startswith(f"{p}:1: node line has 1 field")
    assert len(str(ei.value)) < 700


def test_long_description_is_accepted(tmp_path):
    desc = "D" * 5_000_000
    p = tmp_path / "long.txt"
    p.write_text(f"a -- {desc} -- {META}\nb -- B -- {META}\n\ta -- b\n")
    st = _core.read_profile(p)["states"]
    assert st["labels"] == [desc, "B"]


def test_node_limit(tmp_path):
    p = tmp_path / "many.txt"
    with open(p, "w") as f:
        for start in range(0, 1_000_001, 100000):
            f.write("".join(f"n{i} -- d -- a=0, b=0, c=0, d=0\n"
                            for i in range(start, min(1_000_001, start + 100000))))
    with pytest.raises(ValueError) as ei:
        _core.read_profile(p, states=False)
    assert str(ei.value).startswith(f"{p}:1000001: more than 1000000 node lines")


def test_state_limit(tmp_path):
    p = write_graph(tmp_path / "chain.txt", 10001, [(i, i + 1) for i in range(10000)])
    with pytest.raises(ValueError, match="more than 10000 antichain states"):
        _core.read_profile(p)


def test_bitset_limit(tmp_path):
    p = write_graph(tmp_path / "chain.txt", 50000, [(i, i + 1) for i in range(49999)])
    with pytest.raises(ValueError, match=r"50000 nodes after clean-up.*reachability bitsets"):
        _core.read_profile(p)


def test_work_limit_for_very_wide_graphs(tmp_path):
    k = 5000
    edges = [(i, k) for i in range(k)] + [(i, k + 1) for i in range(k)]
    p = write_graph(tmp_path / "wide.txt", k + 2, edges)
    with pytest.raises(ValueError, match="set operations: the graph is too wide"):
        _core.read_profile(p)


def test_long_chain_sums_in_file_order(tmp_path):
    n = 1500
    lines = [f"n{i} -- L{i} -- forward_compute_time={i % 7}.{i % 13}, "
             f"backward_compute_time=0.{i % 11}, activation_size={i}, parameter_size={2 * i}"
             for i in range(n)]
    lines += [f"\tn{i} -- n{i + 1}" for i in range(n - 1)]
    p = tmp_path / "chain.txt"
    p.write_text("\n".join(lines))
    r = _core.read_profile(p)
    st, nodes = r["states"], r["nodes"]
    assert len(st["ct"]) == n
    ct = act = 0.0
    for s in range(n):
        ct += (nodes[s][2] + nodes[s][3]) / 1000.0
        act += nodes[s][4]
        assert st["ct"][s] == ct and st["act"][s] == act
        assert st["sets"][s] == [s] and st["oa"][s] == float(s)
    assert st["preds"][n - 1] == list(range(n - 1))
