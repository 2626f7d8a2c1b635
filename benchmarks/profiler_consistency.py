#!/usr/bin/env python3
"""Compare hpgo.profiler's per-layer sums with whole-model training steps.

    python benchmarks/profiler_consistency.py [--threads 1] [--repeat 7]

For each example model: median time of a plain forward + backward of the
whole model (gradient of ones on the output, like the profiler), and the sum
of the profile's per-layer forward and backward medians, per-op and per-block
where the model has blocks.  Prints one line per model with the ratio.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    import torch

    from hpgo import profiler
    from hpgo.profiler import examples

    torch.set_num_threads(args.threads)
    for name, blocks in (("mlp", None), ("branchy", None), ("resnet_ish", "blocks"),
                         ("tiny_transformer", "blocks"), ("tiny_bert", "layers")):
        model, x = getattr(examples, name)()
        model.train()
        ts = []
        for i in range(args.repeat + 2):
            t0 = time.perf_counter()
            y = model(x)
            torch.autograd.grad([y], [p for p in model.parameters()], [torch.ones_like(y)], allow_unused=True)
            if i >= 2:
                ts.append(time.perf_counter() - t0)
        whole = statistics.median(ts) * 1e3
        line = f"{name:17s} whole step {whole:9.2f} ms"
        for label, layers in (("per-op", None), ("per-block", blocks)):
            if label == "per-block" and blocks is None:
                continue
            lay = None if layers is None else profiler.children(model, layers)
            p = profiler.profile_module(model, x, layers=lay, repeat=args.repeat)
            t = p.totals()
            s = t["fwd_ms"] + t["bwd_ms"]
            line += f" | {label}: {len(p.nodes) - 1:3d} layers, sum {s:9.2f} ms, ratio {s / whole:5.2f}"
        print(line)


if __name__ == "__main__":
    main()
