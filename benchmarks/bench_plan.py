"""Planner speed and memory: per-case time, DAPPLE's ResNet-50 sweep, thread
scaling, and how time and memory grow with layer states and GPUs.

    python benchmarks/bench_plan.py            # everything (a few minutes)
    python benchmarks/bench_plan.py --quick    # skip the largest scaling cases

Each figure is the median of several runs; scaling cases run in a fresh
subprocess each so that peak memory (ru_maxrss) belongs to that case alone.
Third-party profiles are read from ../shared when present, otherwise the
profiles hpgo ships are used.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import hpgo

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "profiles"


def profile(shared_rel, shipped_rel):
    p = SHARED / shared_rel
    return p if p.exists() else ROOT / "profiles" / shipped_rel


def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def resnet_model():
    m = hpgo.model_from_torch_graph(profile("resnet50/graph.txt", "resnet50-v100/graph.txt"), 32, 32)
    m.optimizer_memory_scaling = 2
    m.min_micro_batch_size = 32
    m.peak_activation_per_batch = 7e7
    return m


def per_case():
    print("## One planning case (model build excluded, py_orchestrate, median)")
    x = hpgo.model_from_torch_graph(profile("xlnet_36/graph.txt", "xlnet-36-v100/graph.txt"), 1, 128)
    d = hpgo.devices_from_seps([8, 16])
    for threads in (1, 0):
        c = hpgo.AsyncOrchestrate(x, d, threads=threads)
        t = median_time(c.py_orchestrate, 200)
        print(f"xlnet-36 gbs 128 [8,16]  threads={threads or 'auto'}: {t * 1e3:.3f} ms")
    r = resnet_model().normalized_copy(256)
    for threads in (1, 2):
        c = hpgo.AsyncOrchestrate(r, d, threads=threads)
        t = median_time(c.py_orchestrate, 20)
        print(f"resnet50 gbs 256 [8,16]  threads={threads}: {t * 1e3:.2f} ms")


def sweep():
    print("\n## DAPPLE's ResNet-50 study: 65 global batch sizes on [8, 16] (hpgo.sweep, median of 5)")
    m = resnet_model()
    gbs = [32] + list(range(64, 4097, 64))
    ncores = os.cpu_count() or 1
    for threads in sorted({1, 2, ncores}):
        t = median_time(lambda: hpgo.sweep(m, 32, gbs, [8, 16], threads=threads), 5)
        print(f"threads={threads}: {t:.3f} s  ({t / len(gbs) * 1e3:.1f} ms per case)")


CASE = r"""
import json, random, resource, sys, time
import hpgo
L, N, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if kind == "gnmt16":
    m = hpgo.model_from_torch_graph(sys.argv[4], 64, 4096)
    L = m.num_layers
else:
    rnd = random.Random(L)
    ct, s = [], 0.0
    for _ in range(L):
        # random layer times, or identical layers (every even split ties)
        s += 0.001 + 0.004 * rnd.random() if kind == "random" else 0.01
        ct.append(s)
    oa = [1e6 + 1e5 * rnd.random() if kind == "random" else 1e6 for _ in range(L)]
    m = hpgo.model_from_states(ct, [1e6 * (k + 1) for k in range(L)],
                               [4e6 * (k + 1) for k in range(L)], oa,
                               [list(range(k)) for k in range(L)], ["l%d" % k for k in range(L)],
                               1, 1024)
d = hpgo.devices_from_seps(list(range(8, N + 1, 8)))
t = time.perf_counter()
c = hpgo.AsyncOrchestrate(m, d, threads=1)
best = c.py_orchestrate()
dt = time.perf_counter() - t
limited = [lab for lab, why in c.skipped if "MiB" in why]
print(json.dumps({"L": L, "N": N, "s": dt, "mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "speedup": best[0], "limited": limited}))
"""


def run_case(L, N, kind="random", extra=()):
    out = subprocess.run([sys.executable, "-c", CASE, str(L), str(N), kind, *extra],
                         capture_output=True, text=True, timeout=900)
    if out.returncode:
        return "error"
    r = json.loads(out.stdout)
    note = " *" if r["limited"] else ""
    return f"{r['s']:.2f} s, {r['mb']:.0f} MB{note}"


def hard_cases(quick):
    print("\n## Hard cases: identical layers (every even split ties with data parallelism) "
          "and GNMT-16 (1,495 states), one thread, whole orchestrate")
    Ns = [256, 512, 1024]
    print("| model \\ GPUs | " + " | ".join(str(n) for n in Ns) + " |")
    print("|---|" + "---|" * len(Ns))
    for L in ([100, 400] if quick else [100, 400, 1000, 2000]):
        print(f"| {L} identical layers | " + " | ".join(run_case(L, n, "uniform") for n in Ns) + " |")
    gnmt = SHARED / "gnmt_16" / "graph.txt"
    if gnmt.exists():
        print("| GNMT-16, pbs 64, gbs 4096 | "
              + " | ".join(run_case(0, n, "gnmt16", (str(gnmt),)) for n in Ns) + " |")


def scaling(quick):
    print("\n## Scaling: chain models of L states with random layer times on N GPUs "
          "(machines of 8), one thread, whole orchestrate")
    Ls = [250, 500, 1000, 2000]
    Ns = [16, 64, 256, 1024]
    print("| states \\ GPUs | " + " | ".join(str(n) for n in Ns) + " |")
    print("|---|" + "---|" * len(Ns))
    for L in Ls:
        cells = []
        for N in Ns:
            if quick and L * N > 256000:
                cells.append("(skipped)")
                continue
            cells.append(run_case(L, N))
        print(f"| {L} | " + " | ".join(cells) + " |")
    print("(* a candidate hit the 512 MiB per-candidate search limit and was skipped)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the largest scaling cases")
    args = ap.parse_args()
    print(f"hpgo {hpgo.__version__}, {os.cpu_count()} cores, HPGO_NUM_THREADS="
          f"{os.environ.get('HPGO_NUM_THREADS', '(unset)')}")
    per_case()
    sweep()
    scaling(args.quick)
    hard_cases(args.quick)


if __name__ == "__main__":
    main()
