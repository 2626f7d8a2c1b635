"""Search time of hpgo.autoplan on clusters of several GPU types and with
slowed GPUs (the heterogeneous search, csrc/search/hetplan.c), 512 GPUs.

    python benchmarks/bench_hetero.py [--threads N] [--repeat R]

Prints, per case, the best of R searches' wall time (the C search alone,
``RankedPlans.search_seconds``), the shapes and plans of the space, how
many plans the bounds let through to the engine, and the best plan.
"""
from __future__ import annotations

import argparse

import hpgo


def cases() -> list[tuple[str, object, hpgo.Cluster, int]]:
    h100_a100 = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 32),
                                     hpgo.Cluster.preset("dgx-a100-80gb", 32),
                                     bandwidth=25e9, latency=20e-6, efficiency=0.85)
    four = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h200", 16),
                                hpgo.Cluster.preset("dgx-h100", 16),
                                hpgo.Cluster.preset("dgx-a100-80gb", 16),
                                hpgo.Cluster.preset("dgx-a100-40gb", 16),
                                bandwidth=25e9, latency=20e-6, efficiency=0.85)
    slowed = hpgo.Cluster.preset("dgx-a100-80gb", 64).with_speed({77: 1 / 1.5})
    return [("256 H100 + 256 A100", "llama3-70b", h100_a100, 1024),
            ("256 H100 + 256 A100", "llama3-8b", h100_a100, 1024),
            ("4 types x 128 (tp=8 fixed)", "llama3-70b", four, 1024),
            ("512 A100, one 1.5x slower", "llama3-70b", slowed, 1024)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print("| cluster | model | gb | search ms | shapes | plans built | simulated | best s/iter | "
          "best plan |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model, cluster, gb in cases():
        best = None
        for _ in range(a.repeat):
            fixed = {"tp": 8} if "tp=8" in name else {}
            r = hpgo.autoplan(model, cluster, gb, top=1, threads=a.threads, **fixed)
            if best is None or r.search_seconds < best.search_seconds:
                best = r
        assert best is not None
        s = best.stats
        top = best.best if len(best) else None
        print(f"| {name} | {model} | {gb} | {best.search_seconds * 1e3:.0f} | {s['shapes']} | "
              f"{s['plans_built']} | {s['simulated']} | "
              f"{top.iteration_time if top else float('nan'):.3f} | "
              f"{top.label() if top else 'none fits'} |", flush=True)


if __name__ == "__main__":
    main()
