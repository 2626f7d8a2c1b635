"""Speed of the simulators: one point, and the whole DistIR Figure 3 + Figure 4
grid on a thread pool.  Prints figures; run from the repository root:

    python benchmarks/bench_sim.py [--threads N] [--repeat R]
"""
import argparse
import statistics
import time

import hpgo
from hpgo.sim import Stage, default_threads


def timed(fn, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out), min(out)


def figure_configs():
    """The 44 Figure 3 simulations (4 one-device baselines, 20 data parallel,
    20 pipeline parallel) and the 111 Figure 4 grid points."""
    fig3 = dict(width=4096, layers=64, cost_model="distir-2021")
    cfgs = [dict(fig3, batch_size=b) for b in (512, 1024, 2048, 4096)]
    cfgs += [dict(fig3, batch_size=b, dp=n) for b in (512, 1024, 2048, 4096)
             for n in (2, 4, 8, 16, 32)]
    cfgs += [dict(fig3, batch_size=4096, pp=n, microbatches=k) for k in (4, 8, 16, 32)
             for n in (2, 4, 8, 16, 32)]
    n3 = len(cfgs)
    grid = hpgo.grid_search(batch_size=8192, width=8192, layers=64,
                            cost_model="distir-2021-grid", threads=1)
    cfgs += [dict(batch_size=8192, width=8192, layers=64, dp=r.dp, tp=r.tp, pp=r.pp,
                  microbatches=r.microbatches, cost_model="distir-2021-grid") for r in grid]
    return cfgs, n3, len(cfgs) - n3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    print(f"default threads here: {default_threads()}; pool size used: {a.threads}")

    print("\nOne simulated point (median / best of %d, seconds per call):" % a.repeat)
    points = [
        ("Fig. 3 PP: 32 devices, K=32, MLP 64x4096", dict(batch_size=4096, width=4096,
                                                         layers=64, pp=32, microbatches=32)),
        ("Fig. 3 DP: 32 devices", dict(batch_size=4096, width=4096, layers=64, dp=32)),
        ("Fig. 4: D4 H4 (16 devices), MLP 64x8192", dict(batch_size=8192, width=8192,
                                                        layers=64, dp=4, tp=4,
                                                        cost_model="distir-2021-grid")),
        ("Fig. 4: P16 K32 (16 devices)", dict(batch_size=8192, width=8192, layers=64, pp=16,
                                             microbatches=32,
                                             cost_model="distir-2021-grid")),
    ]
    for name, kw in points:
        med, best = timed(lambda: hpgo.simulate_mlp(timeline=False, **kw), a.repeat)
        r = hpgo.simulate_mlp(**kw)
        med_t, _ = timed(lambda: hpgo.simulate_mlp(**kw), max(3, a.repeat // 4))
        med_e, _ = timed(lambda: hpgo.simulate_mlp(**kw).timeline, max(3, a.repeat // 4))
        print(f"  {name:44s} {med * 1e3:8.3f} ms (best {best * 1e3:.3f}); with timeline "
              f"({len(r.timeline)} events) {med_t * 1e3:.2f} ms, as Python events "
              f"{med_e * 1e3:.1f} ms")

    stages = [Stage(1e-3, 2e-3, send_bytes=1e7, param_bytes=1e8, activation_bytes=1e7,
                    replicas=2) for _ in range(16)]
    for sched in ("1f1b", "gpipe", "pipedream"):
        med, best = timed(lambda: hpgo.simulate_pipeline(stages, 64, sched, timeline=False),
                          a.repeat)
        print(f"  plan simulator: 16 stages x 2 GPUs, 64 micro-batches, {sched:9s} "
              f"{med * 1e3:8.3f} ms")

    cfgs, n3, n4 = figure_configs()
    print(f"\nWhole Figure 3 ({n3} simulations) + Figure 4 ({n4} grid points) "
          f"as one pooled batch:")
    for threads in sorted({1, a.threads}):
        med, best = timed(lambda: hpgo.simulate_mlp_batch(cfgs, threads=threads),
                          max(3, a.repeat // 4))
        print(f"  threads={threads}: {med:.4f} s (best {best:.4f} s)")
    med, _ = timed(lambda: (hpgo.distir_figure3(threads=a.threads),
                            hpgo.grid_search(8192, 8192, 64, cost_model="distir-2021-grid",
                                             threads=a.threads)), max(3, a.repeat // 4))
    print(f"  distir_figure3() + grid_search(): {med:.4f} s (threads={a.threads})")


if __name__ == "__main__":
    main()
