"""Memory of a simulated step's timeline, per event.

`hpgo.simulate` keeps the engine's events in C (hpgo.timeline.Timeline) and
builds Python tuples only for the events read; `to_chrome_trace(path)`
streams the trace to the file.  This script simulates one large step and
prints, per event: the heap the result holds (glibc's mallinfo2, with
PYTHONMALLOC=malloc so that it counts Python's objects too), the peak
while iterating over every event and the peak while writing the Chrome
trace; with the resident set size (VmHWM) for reference.  Run: python benchmarks/bench_timeline.py [microbatches]
"""
import ctypes
import ctypes.util
import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hpgo  # noqa: E402


class _MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.mallinfo2.restype = _MI2


def heap() -> float:
    m = _libc.mallinfo2()
    return float(m.uordblks + m.hblkhd)


def hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main() -> None:
    if os.environ.get("PYTHONMALLOC") != "malloc":
        # Python's small objects then come from malloc too, so mallinfo2 sees them
        os.environ["PYTHONMALLOC"] = "malloc"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    mbs = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
    m = hpgo.transformer(hidden=1024, ffn=4096, heads=16, layers=32, seq=1024, vocab=32000)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    plan = hpgo.ParallelPlan(global_batch=mbs * 2, tp=1, pp=8, dp=2, micro_batch=1)
    gc.collect()
    h0 = heap()
    t = time.perf_counter()
    r = hpgo.simulate(m, c, plan)
    t_sim = time.perf_counter() - t
    n = len(r.events)
    held = heap() - h0
    print(f"{n:,} events (pp 8, {mbs:,} micro-batches), simulated in {t_sim:.2f} s")
    print(f"held by the result:            {held / n:7.1f} bytes/event")
    peak = held
    t = time.perf_counter()
    count = 0
    for i, _ in enumerate(r.events):
        count += 1
        if i % 65536 == 0:
            peak = max(peak, heap() - h0)
    print(f"peak while iterating:          {peak / n:7.1f} bytes/event "
          f"({time.perf_counter() - t:.2f} s)")
    box = {"peak": 0.0, "run": True}

    def sample() -> None:
        while box["run"]:
            box["peak"] = max(box["peak"], heap() - h0)
            time.sleep(0.005)

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        th = threading.Thread(target=sample)
        th.start()
        t = time.perf_counter()
        r.to_chrome_trace(path)
        t_tr = time.perf_counter() - t
        box["run"] = False
        th.join()
        size = os.path.getsize(path)
    print(f"peak while streaming the trace: {box['peak'] / n:6.1f} bytes/event "
          f"({t_tr:.2f} s, {size / 2**20:.0f} MiB file)")
    gc.collect()
    h1 = heap()
    every = list(r.events)
    print(f"(every event as a Python tuple: {(heap() - h1) / n:6.1f} bytes/event more)")
    del every
    print(f"peak RSS of the process:       {hwm_mb():7.0f} MiB")


if __name__ == "__main__":
    main()
