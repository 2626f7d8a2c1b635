"""Speed of the training-step engine (hpgo.simulate), and its accuracy on
Korthikanti et al. 2022's runs when ../shared is beside the checkout.
Prints figures; run from the repository root:

    python benchmarks/bench_step.py [--repeat R]
"""
import argparse
import statistics
import time
from pathlib import Path

import hpgo
from hpgo import graphfile, validation

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out), min(out)


def cases():
    gpt3 = hpgo.transformer("gpt3-175b")
    a100 = hpgo.Cluster.preset("dgx-a100-80gb", nodes=8)
    p175 = hpgo.ParallelPlan(tp=8, pp=8, virtual_stages=3, micro_batch=1, global_batch=64,
                             schedule="interleaved-1f1b", recompute="selective",
                             sequence_parallel=True)
    chain = hpgo.profile_model(graphfile.chain(
        [("Input", 0, 0, 0, 0)] + [(f"l{i}", 1.0, 2.0, 1e6, 4e6) for i in range(64)],
        {"batch_size": 1}))
    big = hpgo.Cluster.preset("dgx-h100", nodes=8)
    p64 = hpgo.ParallelPlan(pp=64, micro_batch=1, global_batch=512)
    yield ("GPT-3 175B, tp 8 pp 8 v 3, 64 micro-batches, no timeline",
           lambda: hpgo.simulate(gpt3, a100, p175, timeline=False), 64 * 24 * 2)
    yield ("GPT-3 175B, same, with the timeline",
           lambda: hpgo.simulate(gpt3, a100, p175, timeline=True), 64 * 24 * 2)
    yield ("64-stage x 512-micro-batch 1F1B chain, no timeline",
           lambda: hpgo.simulate(chain, big, p64, timeline=False), 64 * 512 * 2)
    yield ("64-stage x 512-micro-batch ZB-V chain (greedy order), no timeline",
           lambda: hpgo.simulate(chain, big, p64.with_(pp=32, virtual_stages=2, schedule="zb-v"),
                                 timeline=False), 64 * 512 * 3)
    # uneven plans (docs/uneven-plans.md): the same work as stage groups
    u64 = hpgo.ParallelPlan.from_even(p64, chain)
    yield ("the 64-stage chain as 64 stage groups (uneven form), no timeline",
           lambda: hpgo.simulate(chain, big, u64, timeline=False), 64 * 512 * 2)
    mixed = hpgo.Cluster.combine("dgx-h100", "dgx-a100-80gb", bandwidth=25e9)
    llama = hpgo.transformer("llama3-8b")
    G = hpgo.StageGroup
    het = hpgo.ParallelPlan(global_batch=256, micro_batch=8, sequence_parallel=True, stages=[
        G((0, 18), dp=4, tp=2, gpu="h100"), G((18, 32), dp=2, tp=4, gpu="a100",
                                               shares=(0.5, 0.5))])
    yield ("Llama 3 8B on H100 + A100 stage groups (resharding tp 2 -> 4), no timeline",
           lambda: hpgo.simulate(llama, mixed, het, timeline=False), 2 * 32 * 2)


def korthikanti():
    path = ROOT.parent / "shared" / "reference" / "korthikanti2022.csv"
    if not path.exists():
        print("(../shared absent: accuracy table skipped)")
        return
    print("\nKorthikanti et al. 2022, Table 5 (s per iteration, DGX A100 80 GB):")
    print(f"{'model':14s} {'mode':7s} {'published':>9s} {'hpgo':>8s} {'error':>7s} {'MFU':>6s}")
    errs = []
    for row, m, c, p in validation.korthikanti_cases(path):
        r = hpgo.simulate(m, c, p, precision="fp16", timeline=False)
        ref = float(row["tab5_iter_s"])
        err = r.iteration_time / ref - 1
        errs.append(abs(err))
        print(f"{row['model']:14s} {row['mode']:7s} {ref:9.2f} {r.iteration_time:8.2f} "
              f"{err * 100:+6.1f}% {r.mfu * 100:5.1f}%")
    print(f"average |error| {sum(errs) / len(errs) * 100:.2f} %, max {max(errs) * 100:.2f} %")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    for label, fn, ops in cases():
        fn()
        med, best = timed(fn, a.repeat)
        print(f"{label}: median {med * 1e3:.3f} ms, best {best * 1e3:.3f} ms "
              f"({ops / best / 1e6:.1f} M ops/s)")
    korthikanti()


if __name__ == "__main__":
    main()
