"""Reproduce DistIR's Figure 3 (EuroMLSys'21): speedups of data parallelism
and pipeline parallelism for a 64-layer, 4096-wide MLP, simulated with the
paper's cost model ("distir-2021").

    python examples/distir_figure3.py [--cost-model distir-2022] [--trace out.json]
"""
import argparse

import hpgo


def main():
    ap = argparse.ArgumentParser(description="DistIR Figure 3 study")
    ap.add_argument("--cost-model", default="distir-2021",
                    choices=["distir-2021", "distir-2021-grid", "distir-2022"])
    ap.add_argument("--trace", help="also write the 32-device, 32 micro-batch pipeline "
                                    "timeline as Chrome trace JSON")
    a = ap.parse_args()
    fig = hpgo.distir_figure3(cost_model=a.cost_model)
    print(f"DistIR Figure 3, cost model {a.cost_model}: 64-layer 4096-wide MLP, fp32")
    print("one-device iteration: " + ", ".join(
        f"batch {b}: {t * 1e3:.3f} ms" for b, t in fig.sequential.items()))
    print()
    print(fig.table())
    if a.trace:
        r = hpgo.simulate_mlp(batch_size=4096, width=4096, layers=64, pp=32, microbatches=32,
                              cost_model=a.cost_model)
        r.to_chrome_trace(a.trace)
        print(f"\nwrote {a.trace}: {len(r.timeline)} events on {len(r.devices)} devices, "
              f"iteration {r.iteration_time * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
