"""Import speed of the profile reader and layer-state builder.

Prints, for every file under ../shared/profiles, the number of states (or
the error) and the best-of-N wall time of hpgo._core.read_profile (read +
parse + states + conversion to Python objects), then the parse time of a
generated one-million-node profile and the time the builder takes to refuse
some synthetic graphs that are too large for it.

    python benchmarks/bench_import.py [--repeat N]

(uses the hpgo of this checkout: build it first with
``python setup.py build_ext --inplace`` or install it)
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpgo import _core  # noqa: E402

PROFILES = ROOT / ".." / "shared" / "profiles"
META = "forward_compute_time=1.0, backward_compute_time=2.0, activation_size=3.0, parameter_size=4.0"


def best_time(fn, repeat):
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            result = fn()
        except ValueError as exc:
            result = exc
        best = min(best, time.perf_counter() - t0)
    return best, result


def write_graph(path, n_nodes, edges):
    with open(path, "w") as f:
        for start in range(0, n_nodes, 100000):
            f.write("".join(f"n{i} -- d{i} -- {META}\n"
                            for i in range(start, min(n_nodes, start + 100000))))
        f.write("".join(f"\tn{a} -- n{b}\n" for a, b in edges))


def describe(result):
    if isinstance(result, Exception):
        msg = str(result)
        return "error: " + msg.split(": ", 1)[-1][:70]
    if result["states"] is None:
        return f"{len(result['nodes'])} nodes (no states)"
    return f"{len(result['states']['ct'])} states"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if PROFILES.is_dir():
        print(f"{'profile':55s} {'result':>20s} {'ms':>9s}")
        total = 0.0
        for path in sorted(p for p in PROFILES.rglob("*") if p.is_file()):
            t, res = best_time(lambda: _core.read_profile(str(path)), args.repeat)
            total += t
            print(f"{str(path.relative_to(PROFILES)):55s} {describe(res):>20.20s} {t * 1e3:9.3f}")
            if isinstance(res, Exception):
                print(f"    {res}")
        print(f"{'all profiles':55s} {'':>20s} {total * 1e3:9.3f}")
    else:
        print("../shared/profiles is absent: skipping the real profiles")

    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("1M-node chain: parse, then refused", 1000000,
             [(i, i + 1) for i in range(999999)], True),
            ("1M nodes: parse + Python objects", 1000000, [], False),
            ("chain of 9,000 nodes (9,000 states)", 9000, [(i, i + 1) for i in range(8999)], True),
            ("chain of 12,000 nodes (state limit)", 12000, [(i, i + 1) for i in range(11999)], True),
            ("chain of 50,000 nodes (bitset limit)", 50000, [(i, i + 1) for i in range(49999)], True),
            ("5,000 sources into 2 nodes (work limit)", 5002,
             [(i, 5000) for i in range(5000)] + [(i, 5001) for i in range(5000)], True),
        ]
        print()
        for label, n, edges, states in cases:
            path = os.path.join(tmp, "g.txt")
            write_graph(path, n, edges)
            size = os.path.getsize(path)
            reps = 1 if n >= 1000000 else args.repeat
            t, res = best_time(lambda: _core.read_profile(path, states=states), reps)
            print(f"{label:42s} {size / 1e6:7.1f} MB {describe(res):>30.30s} {t * 1e3:9.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
