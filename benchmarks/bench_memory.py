"""Resident memory over many repeated calls (docs/errors-and-limits.md).

    python benchmarks/bench_memory.py [--calls 10000] [--every 1000] [--profile PATH]

For each workload it runs `--calls` calls and prints, every `--every` calls,
the resident set size (VmRSS), glibc's heap in use (mallinfo2, every malloc
of the C core and the glue) and the process's peak (VmHWM).  A flat RSS and
heap column means nothing accumulates; the last line of each workload gives
the growth between the first report and the end.  Linux only (/proc).
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hpgo  # noqa: E402


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class _MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]


try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _libc.mallinfo2.restype = _MI2
except (OSError, AttributeError):
    _libc = None


def heap_mb() -> float:
    if _libc is None:
        return float("nan")
    m = _libc.mallinfo2()
    return (m.uordblks + m.hblkhd) / 2**20


def run(name: str, fn, calls: int, every: int) -> None:
    print(f"\n{name}")
    print(f"{'calls':>8} {'RSS MiB':>9} {'heap MiB':>9} {'peak MiB':>9} {'s':>7}")
    fn()  # first call: lazy imports, caches
    gc.collect()
    first = None
    t0 = time.perf_counter()
    for i in range(1, calls + 1):
        fn()
        if i % every == 0:
            gc.collect()
            row = (_status("VmRSS"), heap_mb(), _status("VmHWM"))
            first = first or row
            print(f"{i:>8} {row[0]:>9.2f} {row[1]:>9.3f} {row[2]:>9.2f} "
                  f"{time.perf_counter() - t0:>7.1f}", flush=True)
    last = (_status("VmRSS"), heap_mb())
    print(f"growth after the first {every} calls: RSS {last[0] - first[0]:+.2f} MiB, "
          f"heap {1024 * (last[1] - first[1]):+.1f} KiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--profile",
                    default=str(ROOT / "profiles" / "transformer36-v100" / "graph.txt"))
    ap.add_argument("--only", nargs="*", help="workload names to run")
    a = ap.parse_args()
    if not os.path.exists("/proc/self/status"):
        sys.exit("needs Linux /proc")
    print(f"hpgo {hpgo.__version__}, Python {sys.version.split()[0]}, profile {a.profile}")
    model = hpgo.model_from_torch_graph(a.profile, 1, 128)
    devices = hpgo.Devices(16, [8, 16])
    conductor = hpgo.AsyncOrchestrate(model, devices)
    stages = [hpgo.Stage(1e-3, 2e-3, send_bytes=4e6, param_bytes=1e8, replicas=2)] * 4

    def bad_file():
        try:
            hpgo.model_from_torch_graph(str(ROOT / "tests" / "corpus" / "bad_cycle.txt"), 1, 8)
        except ValueError:
            pass

    workloads = {
        "plan": ("py_orchestrate() on one AsyncOrchestrate (16 GPUs, 2 machines)",
                 conductor.py_orchestrate),
        "import+plan": ("conductor_from_torch_graph_and_seps(...).py_orchestrate(): read, "
                        "states, model, plan",
                        lambda: hpgo.conductor_from_torch_graph_and_seps(
                            a.profile, 1, 128, [8, 16]).py_orchestrate()),
        "errors": ("a malformed profile (a cycle): ValueError", bad_file),
        "simulate": ("simulate_pipeline, 4 stages x 2 GPUs x 16 micro-batches, with the "
                     "timeline as Python events",
                     lambda: hpgo.simulate_pipeline(stages, 16).timeline),
    }
    for key, (title, fn) in workloads.items():
        if a.only and key not in a.only:
            continue
        run(f"{key}: {title}", fn, a.calls, a.every)
    print(f"\npeak resident memory of the whole run (VmHWM): {_status('VmHWM'):.1f} MiB")


if __name__ == "__main__":
    main()
