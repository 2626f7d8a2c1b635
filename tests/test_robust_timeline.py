"""A simulated step's timeline stays compact: its events live in C (40
bytes each) and become Python tuples only when read; the Chrome trace is
streamed to its file.  (Before: every event was a Python tuple, about 355
bytes, built before simulate returned and without a look at Ctrl-C.)"""
import json
import pickle
import sys

import pytest

import hpgo
from hpgo.timeline import Timeline

from robust_child import UNDER_ASAN, run_child


def small():
    m = hpgo.transformer(hidden=512, ffn=2048, heads=8, layers=8, seq=512, vocab=1000)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    p = hpgo.ParallelPlan(global_batch=64, tp=1, pp=4, dp=2, micro_batch=2)
    return hpgo.simulate(m, c, p)


def test_timeline_is_a_lazy_sequence():
    r = small()
    ev = r.events
    assert isinstance(ev, Timeline)
    every = list(ev)
    assert len(every) == len(ev) > 100
    assert ev[0] == every[0] and ev[-1] == every[-1] and ev[5:9] == every[5:9]
    assert ev[::7] == every[::7]
    assert ev == every and ev == tuple(every) and every == list(ev)
    with pytest.raises(IndexError):
        ev[len(ev)]
    with pytest.raises(TypeError):
        ev["0"]
    start, dur, dev, kind, lane, stage, mb, peer = ev[0]
    assert isinstance(kind, str) and dur >= 0 and 0 <= dev < 4
    back = pickle.loads(pickle.dumps(r))
    assert back.events == ev and back == r


def test_chrome_trace_streamed_equals_the_dict(tmp_path):
    r = small()
    path = tmp_path / "trace.json"
    path.write_text("old")
    path.chmod(0o640)
    assert r.to_chrome_trace(path) is None
    assert json.loads(path.read_text()) == r.to_chrome_trace()
    assert path.stat().st_mode & 0o777 == 0o640
    xs = [e for e in r.to_chrome_trace()["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(r.events)


@pytest.mark.skipif(sys.platform != "linux" or UNDER_ASAN, reason="glibc's mallinfo2")
def test_bytes_per_event_are_bounded():
    child = run_child("""
import ctypes, ctypes.util, gc, os, tempfile
import hpgo
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.mallinfo2.restype = MI2
def heap():
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd
m = hpgo.transformer(hidden=1024, ffn=4096, heads=16, layers=32, seq=1024, vocab=32000)
c = hpgo.Cluster.preset("dgx-h100", nodes=2)
plan = hpgo.ParallelPlan(global_batch=16384, tp=1, pp=8, dp=2, micro_batch=1)
gc.collect()
h0 = heap()
r = hpgo.simulate(m, c, plan)
n = len(r.events)
result['n'] = n
result['held'] = (heap() - h0) / n
peak = 0
for i, e in enumerate(r.events):
    if i % 4096 == 0:
        peak = max(peak, heap() - h0)
result['iter'] = peak / n
with tempfile.TemporaryDirectory() as d:
    r.to_chrome_trace(os.path.join(d, 't.json'))
    result['after_trace'] = (heap() - h0) / n
""", env={"PYTHONMALLOC": "malloc"}, timeout=300)
    assert child.returncode == 0, child.describe()
    r = child.result
    assert r["n"] > 200_000
    # the C events: 40 bytes each (timeline.h); a little slack for the result's other fields
    assert r["held"] < 48, r
    assert r["iter"] < 60, r
    assert r["after_trace"] < 60, r
