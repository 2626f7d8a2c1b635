"""Limits on the work of a call, not on each input alone (issue 16, item 3).

Each limit is checked before the work or the allocation it protects, at its
boundary: the largest allowed case works (or, where it takes many seconds,
one just inside), one past it gives a ValueError naming the limit."""
import os
import stat
import sys
import time
from pathlib import Path

import pytest

import hpgo
from hpgo import _core
from hpgo.cli import parse_gbs

from csrc_paths import src
from robust_child import UNDER_ASAN, run_child

ROOT = Path(__file__).resolve().parents[1]


def _header_value(name, header):
    import re
    text = src(header).read_text()
    m = re.search(rf"#define {name} (.+?)(?:/\*.*)?$", text, re.M)
    return eval(m.group(1).strip(), {})


def test_constants_match_the_headers():
    assert _core.HAP_MAX_DEVICES == _header_value("HPGO_HAP_MAX_DEVICES", "hetero.h") == 65536
    assert _core.REPLAN_MAX_SLICE_CELLS == _header_value("HPGO_REPLAN_MAX_SLICE_CELLS",
                                                         "replan.h") == 2**24
    assert _header_value("HPGO_REPLAN_MAX_WORK", "replan.h") == 1e10


def test_replan_dp_work_limit():
    # stages x layers^2 / 2 <= 1e10: 4 x 70,710^2 / 2 = 9.99985e9 is allowed (about 15 s,
    # so a smaller case runs here), 4 x 70,711^2 / 2 is refused at once
    L = 70711
    t = time.perf_counter()
    with pytest.raises(ValueError, match=r"HPGO_REPLAN_MAX_WORK"):
        hpgo.replan([1.0] * L, [1.0] * L, current=[L - 3, 1, 1, 1], method="dp")
    assert time.perf_counter() - t < 5
    L = 2000
    r = hpgo.replan([1.0] * L, [1.0] * L, current=[L - 3, 1, 1, 1], method="dp")
    assert sum(r.stages) == L


def test_replan_topk_work_limit():
    # partitions x stages x micro-batches <= 1e10: C(n, S-1) partitions are scored
    L, S = 4000, 8
    cur = [L // S] * S
    with pytest.raises(ValueError, match=r"HPGO_REPLAN_MAX_WORK"):
        hpgo.replan([1.0] * L, [1.0] * L, current=cur, method="topk", top_k=3,
                    microbatches=100000)
    r = hpgo.replan([1.0] * L, [1.0] * L, current=cur, method="topk", top_k=1)
    assert sum(r.stages) == L


def test_replan_topk_work_counts_what_a_score_costs():
    # 198,485 partitions x 4 stages x 2,000 micro-batches = 1.6e9 replay steps: under
    # 1e10 counted as DP steps, yet about 30 s (a replay step costs about 12 DP steps)
    assert _header_value("HPGO_REPLAN_REPLAY_STEP", "replan.h") == 12.0
    L, S = 400, 4
    with pytest.raises(ValueError, match=r"HPGO_REPLAN_REPLAY_STEP.*HPGO_REPLAN_MAX_WORK"):
        hpgo.replan([1.0] * L, [2.0] * L, current=[L // S] * S, slowdown=[1.5, 1, 1, 1],
                    method="topk", top_k=27, microbatches=2000)
    r = hpgo.replan([1.0] * L, [2.0] * L, current=[L // S] * S, slowdown=[1.5, 1, 1, 1],
                    method="topk", top_k=27, microbatches=9)
    assert r.candidates == 198485


def test_slice_table_cells_limit():
    n = 4096  # 4096 x 4096 = 2^24 cells: the largest allowed square table
    t = hpgo.slice_table([1] * n, [1] * n)
    assert len(t) == n and t[5][5] == 1
    with pytest.raises(ValueError, match="HPGO_REPLAN_MAX_SLICE_CELLS"):
        hpgo.slice_table([1] * (n + 1), [1] * (n - 1) + [2])
    for big in (20000, 65536):
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match="HPGO_REPLAN_MAX_SLICE_CELLS"):
            hpgo.slice_table([1] * big, [1] * big)
        assert time.perf_counter() - t0 < 5


def test_hap_cluster_checks_the_device_limit_before_building():
    assert hpgo.hap_cluster("V100", 65536).n_devices == 65536
    assert hpgo.hap_cluster("V100", 65535, "P100", 1).n_devices == 65536
    t = time.perf_counter()
    for args in (("V100", 10**8), ("V100", 65536, "P100", 1), ("V100", 10**18)):
        with pytest.raises(ValueError, match="HPGO_HAP_MAX_DEVICES"):
            hpgo.hap_cluster(*args)
    assert time.perf_counter() - t < 1


def test_sweep_gbs_ranges_are_deduplicated_in_linear_time():
    t = time.perf_counter()
    assert parse_gbs("1:100000:1,1:100000:1") == list(range(1, 100001))
    assert time.perf_counter() - t < 5
    assert parse_gbs("8,4:32,8:16:4") == [8, 4, 16, 32, 12]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_profile_reader_refuses_devices_at_once():
    for f in (lambda p: _core.read_profile(p), lambda p: hpgo.model_from_torch_graph(p, 1, 8)):
        t = time.perf_counter()
        with pytest.raises(ValueError, match="is a device"):
            f("/dev/zero")
        assert time.perf_counter() - t < 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_profile_reader_does_not_wait_for_a_fifo_writer(tmp_path):
    fifo = tmp_path / "graph.txt"
    os.mkfifo(fifo)
    child = run_child(f"""
        from hpgo import _core
        try:
            _core.read_profile({str(fifo)!r})
        except ValueError as e:
            result['error'] = str(e)
        """, timeout=60)
    assert child.returncode == 0, child.describe()
    assert "empty profile" in child.result["error"]


@pytest.mark.skipif(not hasattr(os, "mkfifo") or sys.platform != "linux", reason="needs FIFOs")
@pytest.mark.skipif(UNDER_ASAN, reason="peak memory is measured without AddressSanitizer's "
                                        "allocator (its redzones and quarantine double it)")
def test_profile_reader_caps_a_pipe_at_the_file_limit(tmp_path):
    """A pipe is read with the same cap as a regular file: 1 GiB + 1 byte is
    refused after reading 1 GiB + 1 (never 2 GiB)."""
    fifo = tmp_path / "graph.txt"
    os.mkfifo(fifo)
    child = run_child(f"""
        import os, signal, threading
        from hpgo import _core
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        # a reader that never reads keeps the writer's open from waiting; closing
        # it at the end wakes a writer blocked on a full pipe (EPIPE)
        keep = os.open({str(fifo)!r}, os.O_RDONLY | os.O_NONBLOCK)
        opened = threading.Event()
        def feed():
            fd = os.open({str(fifo)!r}, os.O_WRONLY)
            opened.set()
            chunk = b'#' * (1 << 20)
            try:
                for _ in range(1100):
                    os.write(fd, chunk)
            except BrokenPipeError:
                pass
            os.close(fd)
        th = threading.Thread(target=feed)
        th.start()
        opened.wait()
        try:
            _core.read_profile({str(fifo)!r})
        except ValueError as e:
            result['error'] = str(e)
        os.close(keep)
        th.join()
        """, timeout=120, address_space_mb=3072)
    assert child.returncode == 0, child.describe()
    assert "more than the limit of 1073741824 bytes" in child.result["error"]
    assert child.peak_mb < 1024 + 400, child.peak_mb
