"""Planning time of the dynamic planners vs the number of layers.

    python benchmarks/bench_dynamic.py [--repeat 5]

DynPipe re-partitioning (hpgo.dynpipe): DynPipe's top-k search (k = 2) and
the exact method (DP + local search + branch and bound), for 4 and 8 stages with a 3x slowdown on one stage;
HAP (hpgo.hetero) chain synthesis on 2 V100 + 6 P100 for a transformer of
L/6 blocks (6 chain layers each).  Prints the best of --repeat runs in ms.
"""
import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import hpgo  # noqa: E402
from hpgo import dynpipe as R  # noqa: E402


def best_ms(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def chain(L, seed=0):
    rnd = random.Random(seed)
    f = [rnd.uniform(1e-3, 5e-3) for _ in range(L)]
    b = [2 * x for x in f]
    c = [rnd.uniform(0, 2e-3) for _ in range(L)]
    p = [rnd.uniform(1e6, 5e7) for _ in range(L)]
    return R.LayerChain(tuple(f), tuple(b), tuple(c), tuple(p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print("DynPipe re-partitioning (ms, best of %d)" % a.repeat)
    print("%8s %8s %12s %12s %10s %6s" % ("layers", "stages", "topk k=2", "dp (exact)", "cands",
                                        "exact"))
    for L in (38, 100, 200, 400, 800):
        ch = chain(L)
        for S in (4, 8):
            cur = [L // S] * S
            cur[-1] += L - sum(cur)
            sd = [1.0] * S
            sd[1] = 3.0
            t_topk = best_ms(lambda: R.replan(ch, current=cur, slowdown=sd), a.repeat)
            r = R.replan(ch, current=cur, slowdown=sd)
            t_dp = best_ms(lambda: R.replan(ch, current=cur, slowdown=sd, method="dp"), a.repeat)
            d = R.replan(ch, current=cur, slowdown=sd, method="dp")
            print("%8d %8d %12.2f %12.2f %10d %6s" % (L, S, t_topk, t_dp, r.candidates, d.exact))
    try:
        from hpgo import hetero as H
    except ImportError:
        return
    for v100, p100 in ((2, 6), (16, 48)):
        print()
        print("HAP chain synthesis, %d V100 + %d P100 (ms, best of %d)" % (v100, p100, a.repeat))
        print("%8s %8s %12s %8s" % ("blocks", "layers", "synthesis", "rounds"))
        cl = H.hap_cluster("V100", v100, "P100", p100)
        for blocks in (12, 24, 48, 96, 192):
            layers = H.transformer_chain(blocks=blocks, batch=32 * (v100 + p100), seq=64)
            t = best_ms(lambda: H.plan(layers, cl), a.repeat)
            p = H.plan(layers, cl)
            print("%8d %8d %12.2f %8d" % (blocks, len(layers), t, p.rounds))
    print()
    print("HAP with the memory fit search (2.4 B-parameter blocks, d 4096, batch 32 x 512, "
          "2 V100 + 6 P100, 16 GB; ms, best of %d)" % a.repeat)
    cl = H.hap_cluster("V100", 2, "P100", 6)
    for blocks in (12, 48):
        layers = H.transformer_chain(blocks, 32, 512, 4096, 16384, 32)
        t = best_ms(lambda: H.plan(layers, cl), a.repeat)
        p = H.plan(layers, cl)
        print("%8d %8d %12.2f %8s" % (blocks, len(layers), t, "fits" if p.fits else "no fit"))


if __name__ == "__main__":
    main()
