"""Speed of hpgo.autoplan: the search in the C core, per case, with the size
of the space, what the bounds skipped, and plans evaluated per second.
Prints figures; run from the repository root:

    python benchmarks/bench_autoplan.py [--threads N] [--repeat R]
"""
import argparse
import statistics
import time

import hpgo
from hpgo import _core
from hpgo.parallel import PRECISIONS

CASES = [
    # model, cluster preset, nodes, global batch, precision
    ("megatron-530b", "dgx-a100-80gb", 640, 2520, "bf16"),   # 5,120 A100 (Calculon's study: ~53 s)
    ("llama3-405b", "dgx-h100", 2048, 2048, "bf16"),         # 16,384 H100
    ("gpt3-175b", "dgx-a100-80gb", 128, 1536, "bf16"),       # Megatron's 1,024-GPU run
    ("llama3-70b", "dgx-h100", 8, 512, "bf16"),
    ("gpt3-175b", "dgx-a100-80gb", 8, 64, "bf16"),           # Korthikanti's 64-GPU run
    # mixture of experts: the expert layout (ep, etp, placement) searched too
    ("deepseek-v3", "dgx-h100", 128, 8192, "fp8"),           # 1,024 H100
    ("qwen3-235b-a22b", "dgx-h100", 32, 2048, "bf16"),
    ("mixtral-8x7b", "dgx-h100", 8, 256, "bf16"),
]


def search(model, cluster, gb, threads, exhaustive=False, precision="bf16"):
    # fixed choices free (-1), overlap share 1.0 (unused), FSDP resharding,
    # full sharding, no offloading, the default stack (autoplan's defaults)
    opts = (gb, 0, _core.OBJECTIVE_TIME, 10, int(exhaustive), threads, 16, 8, None, *[-1] * 16,
            1.0, 0, 0, 0, 0.0, -1, -1, -1, -1, -1, -1, -1)
    return _core._autoplan(model._tuple(PRECISIONS[precision]), cluster._tuple(), opts, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print(f"{'case':44s} {'plans':>6s} {'mem-pruned':>10s} {'time-pruned':>11s} "
          f"{'simulated':>9s} {'median':>9s} {'plans/s':>10s}")
    for name, preset, nodes, gb, prec in CASES:
        m = hpgo.transformer(name)
        c = hpgo.Cluster.preset(preset, nodes=nodes)
        d = search(m, c, gb, a.threads, precision=prec)
        ts = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            search(m, c, gb, a.threads, precision=prec)
            ts.append(time.perf_counter() - t)
        med = statistics.median(ts)
        label = f"{name} on {c.gpus} x {c.gpu.name}, batch {gb}"
        print(f"{label:44s} {d['candidates']:6d} {d['pruned_memory']:10d} {d['pruned_time']:11d} "
              f"{d['simulated']:9d} {med * 1e3:7.1f}ms {d['candidates'] / med:10,.0f}")
    m = hpgo.transformer("megatron-530b")
    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=640)
    t = time.perf_counter()
    search(m, c, 2520, a.threads, exhaustive=True)
    print(f"\nmegatron-530b exhaustive (every plan simulated): {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
