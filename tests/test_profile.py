"""The profile reader and layer-state builder on the real profiles of
../shared/profiles (skipped when it is absent), the read_profile API, GIL
release, and the number syntax (spec/hpgo-compat.md sections 2, 3, 10, 13)."""
import os
import random
import re
import struct
import threading
import time
from pathlib import Path

import pytest

from hpgo import _core

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / ".." / "shared" / "profiles"
needs_shared = pytest.mark.skipif(not PROFILES.is_dir(), reason="../shared is absent")

META = "forward_compute_time=1.0, backward_compute_time=2.0, activation_size=3.0, parameter_size=4.0"

# spec section 3.5, "Observed sizes"
EXPECTED_STATES = {
    "xlnet_36/graph.txt": 41, "xlnet/graph.txt": 29, "bert_48/graph.txt": 55,
    "bert_large/graph.txt": 26, "vgg19/graph.txt": 25, "vgg16/graph.txt": 40,
    "amoebanet_18/graph.txt": 25, "amoebanet_36/graph.txt": 43,
    "gnmt_32_simplified/graph.txt": 63, "resnet50/graph.txt": 240, "resnext50/graph.txt": 240,
    "resnet101/graph.txt": 410, "resnext101/graph.txt": 410, "densenet121/graph.txt": 430,
    "gnmt_16/graph.txt": 1495, "gnmt_large/graph.txt": 1495,
}
# PipeDream's import did not finish in 300 s on these (antichain explosion)
EXPLODING = ["gnmt_32/graph.txt", "inception_v3/graph.txt", "nasnetalarge/graph.txt",
             "nasnetamobile/graph.txt", "dapple_profiling_results/gnmt-32-pbs-64.txt"]
NOT_A_GRAPH = "amoebanet/perf.txt"


def all_profiles():
    if not PROFILES.is_dir():
        return []
    return sorted(str(p.relative_to(PROFILES)) for p in PROFILES.rglob("*") if p.is_file())


def importable():
    return [p for p in all_profiles() if p not in EXPLODING and p != NOT_A_GRAPH]


def load(name):
    return _core.read_profile(str(PROFILES / name))


def cleaned(nodes, edges):
    """Indices of the nodes left by spec 3.1's clean-up."""
    n = len(nodes)
    indeg, outdeg = [0] * n, [0] * n
    for a, b in edges:
        outdeg[a] += 1
        indeg[b] += 1
    alive = [not (indeg[v] == 0 and nodes[v][1].startswith("Input")) for v in range(n)]
    for v in range(n):
        if alive[v] and outdeg[v] == 0 and nodes[v][1].startswith("__getitem__"):
            alive[v] = False
    return [v for v in range(n) if alive[v]]


# ------------------------------------------------------------------ real profiles

@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED_STATES))
def test_state_counts_match_hpgo(name):
    st = load(name)["states"]
    assert len(st["ct"]) == EXPECTED_STATES[name]
    for key in ("act", "par", "oa", "preds", "labels", "sets"):
        assert len(st[key]) == EXPECTED_STATES[name]


@needs_shared
def test_resnet50_ct2_last_bits_follow_file_order_summation():
    ct2 = load("resnet50/graph.txt")["states"]["ct"][2]
    assert struct.pack(">d", ct2).hex().endswith("30c7")


@needs_shared
def test_xlnet36_worked_example():
    prof = load("xlnet_36/graph.txt")
    st = prof["states"]
    # spec section 10: 300.71 ms of compute per pbs=1 batch, Input's 17 ms dropped
    assert st["ct"][-1] == pytest.approx(0.30071, rel=1e-12)
    assert st["par"][-1] == pytest.approx(2.003e9, rel=1e-12)
    assert prof["nodes"][0][1] == "Input" and prof["nodes"][0][2] == 17.0
    assert all(0 not in s for s in st["sets"])


@needs_shared
@pytest.mark.parametrize("name", importable())
def test_state_invariants(name):
    prof = load(name)
    nodes, edges, st = prof["nodes"], prof["edges"], prof["states"]
    keep = cleaned(nodes, edges)
    kept = set(keep)
    L = len(st["ct"])
    assert L >= 1
    # the last state covers the whole cleaned graph
    tot_ct = sum((nodes[v][2] + nodes[v][3]) / 1000.0 for v in keep)
    tot_act = sum(nodes[v][4] for v in keep)
    tot_par = sum(nodes[v][5] for v in keep)
    assert st["ct"][-1] == pytest.approx(tot_ct, rel=1e-12)
    assert st["act"][-1] == pytest.approx(tot_act, rel=1e-12)
    assert st["par"][-1] == pytest.approx(tot_par, rel=1e-12, abs=1e-9)
    assert st["preds"][0] == []
    for s in range(L):
        preds = st["preds"][s]
        assert preds == sorted(set(preds)) and all(p < s for p in preds)
        assert st["oa"][s] >= 0 and st["ct"][s] >= 0
        xs = st["sets"][s]
        assert xs and len(set(xs)) == len(xs) and set(xs) <= kept
        assert st["oa"][s] == pytest.approx(sum(nodes[v][4] for v in xs), rel=1e-12)
        assert st["labels"][s] in {nodes[v][1] for v in xs}
    # predecessor lists are transitively closed
    masks = [sum(1 << p for p in preds) for preds in st["preds"]]
    for s in range(L):
        for p in st["preds"][s]:
            assert masks[p] & ~masks[s] == 0


@needs_shared
def test_crlf_profile_equals_its_lf_version(tmp_path):
    raw = (PROFILES / "xlnet_36/graph.txt").read_bytes()
    assert b"\r\n" in raw and not raw.endswith(b"\n")  # CRLF, no final newline
    lf = tmp_path / "xlnet36_lf.txt"
    lf.write_bytes(raw.replace(b"\r\n", b"\n") + b"\n")
    assert _core.read_profile(lf) == load("xlnet_36/graph.txt")


@needs_shared
@pytest.mark.parametrize("name", EXPLODING)
def test_exploding_graphs_are_refused(name):
    with pytest.raises(ValueError, match=r"more than 10000 antichain states"):
        load(name)


@needs_shared
def test_not_a_graph_names_file_and_line():
    path = str(PROFILES / NOT_A_GRAPH)
    with pytest.raises(ValueError) as ei:
        _core.read_profile(path)
    assert str(ei.value).startswith(path + ":1: node line has 1 field")


# ------------------------------------------------------------------ API

def write(path, lines):
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def small_graph(tmp_path, name="g.txt"):
    return write(tmp_path / name, [f"a -- Input -- {META}", f"b -- B -- {META}",
                                   f"c -- C -- {META}", "\ta -- b", "\tb -- c"])


def test_path_types_and_result_shape(tmp_path):
    p = small_graph(tmp_path)
    r1 = _core.read_profile(str(p))
    assert _core.read_profile(p) == r1
    assert _core.read_profile(os.fsencode(str(p))) == r1
    assert r1["nodes"][1] == ("b", "B", 1.0, 2.0, 3.0, 4.0)
    assert r1["edges"] == [(0, 1), (1, 2)]
    st = r1["states"]
    assert st["labels"] == ["B", "C"]
    assert st["ct"] == [0.003, 0.003 + 0.003]
    assert st["preds"] == [[], [0]]
    assert st["sets"] == [[1], [2]]
    assert st["oa"] == [3.0, 3.0]
    assert _core.read_profile(p, states=False) == {**r1, "states": None}


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError):
        _core.read_profile(42)
    with pytest.raises(TypeError):
        _core.read_profile(str(small_graph(tmp_path)), True)  # states is keyword-only
    with pytest.raises(ValueError):
        _core.read_profile("a\0b")


def test_os_errors(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(FileNotFoundError) as ei:
        _core.read_profile(missing)
    assert str(missing) in str(ei.value)
    with pytest.raises(OSError) as ei:
        _core.read_profile(tmp_path)
    assert not isinstance(ei.value, FileNotFoundError) and "directory" in str(ei.value)


def test_undecodable_file_name_in_message(tmp_path):
    name = os.fsencode(str(tmp_path)) + b"/caf\xe9.txt"
    with open(name, "wb") as f:
        f.write(b"just one field\n")
    with pytest.raises(ValueError) as ei:
        _core.read_profile(name)
    assert "caf\\xE9.txt:1: node line has 1 field" in str(ei.value)


def test_input_file_is_not_modified(tmp_path):
    p = small_graph(tmp_path)
    before = p.read_bytes()
    _core.read_profile(p)
    assert p.read_bytes() == before


def test_read_releases_the_gil(tmp_path):
    # a large file whose last line is malformed: all the time is spent in C
    p = tmp_path / "big.txt"
    with open(p, "w") as f:
        for start in range(0, 600000, 100000):
            f.write("".join(f"n{i} -- d -- {META}\n" for i in range(start, start + 100000)))
        f.write("bad line\n")
    ticks, span, stop = [], [], threading.Event()

    def reader():
        span.append(time.perf_counter())
        try:
            _core.read_profile(p)
        except ValueError:
            pass
        span.append(time.perf_counter())
        stop.set()

    t = threading.Thread(target=reader)
    t.start()
    while not stop.is_set():
        ticks.append(time.perf_counter())
        for _ in range(200):
            pass
    t.join()
    start, end = span
    assert end - start > 0.05, "the read was too quick to tell"
    # with the GIL held for the whole C call, this thread could only run in
    # its first switch interval (a few ms); released, it runs throughout
    inside = [x for x in ticks if start + 0.02 < x < end - 0.01]
    assert len(inside) > 100


def test_core_has_no_python_h():
    offenders = []
    for path in (ROOT / "csrc").rglob("*"):
        if path.suffix in (".c", ".h") and "module" not in path.relative_to(ROOT / "csrc").parts:
            if re.search(r"#\s*include\s*[<\"]Python\.h[>\"]", path.read_text(encoding="utf-8")):
                offenders.append(str(path))
    assert (ROOT / "csrc" / "hpgo" / "graph.c").exists()
    assert offenders == []


# ------------------------------------------------------------------ numbers

def number_profile(tmp_path, texts):
    lines = [f"n{i} -- d -- fwd={t}, bwd=0, act=0, par=0" for i, t in enumerate(texts)]
    return _core.read_profile(write(tmp_path / "nums.txt", lines), states=False)["nodes"]


def test_numbers_equal_python_float(tmp_path):
    rng = random.Random(20240611)
    texts = ["0", "0.0", "-0.0", "1", "1.", ".5", "1e3", "1E-3", "+2.5", "1_000.25", "1e1_0",
             " 7.25 ", "5e-324", "4.9e-324", "2e-324", "1.7976931348623157e308",
             "123456789012345678901234567890", "0.1", "9007199254740993", "1e22", "1e23",
             "0." + "0" * 30 + "1", "1" * 40 + "e-20", "3.14159265358979323846264338327950288"]
    for _ in range(3000):
        mant = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        dot = rng.randint(0, len(mant))
        text = mant[:dot] + "." + mant[dot:] if rng.random() < 0.7 else mant
        if rng.random() < 0.5:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 330))
        if text.strip(".") and float(text) != float("inf"):
            texts.append(text)
    for _ in range(1000):
        texts.append(repr(rng.uniform(0, 1) * 10.0 ** rng.randint(-300, 300)))
    got = [n[2] for n in number_profile(tmp_path, texts)]
    want = [float(t) for t in texts]
    assert [x.hex() for x in got] == [x.hex() for x in want]


try:
    from hypothesis import given, settings, strategies
except ImportError:  # optional test dependency
    given = None

if given is not None:
    @settings(max_examples=60, deadline=None)
    @given(strategies.lists(strategies.floats(min_value=0.0, allow_nan=False,
                                              allow_infinity=False), min_size=1, max_size=40))
    def test_float_round_trip(values):
        import tempfile
        texts = [repr(v) for v in values] + ["%.17e" % v for v in values] + \
            ["%.6f" % v for v in values]
        with tempfile.TemporaryDirectory() as d:
            got = [n[2] for n in number_profile(Path(d), texts)]
        assert [x.hex() for x in got] == [float(t).hex() for t in texts]
