"""Reproduce DistIR's Figure 4 grid (EuroMLSys'21): every D x H x P x K split
of a 64-layer, 8192-wide MLP at batch 8192 on 1-16 devices, with the older
cost model behind the paper's CSV ("distir-2021-grid").  Compares with the
paper's CSV when it is given (or found at ../shared).

    python examples/distir_figure4.py [--csv path/to/euromlsys21_grid_search_results.csv]
"""
import argparse
import csv
from pathlib import Path

import hpgo

DEFAULT_CSV = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "distir"
               / "euromlsys21_grid_search_results.csv")


def main():
    ap = argparse.ArgumentParser(description="DistIR Figure 4 grid")
    ap.add_argument("--csv", default=str(DEFAULT_CSV))
    a = ap.parse_args()
    rows = hpgo.grid_search(batch_size=8192, width=8192, layers=64,
                            devices=[1, 2, 4, 8, 16], cost_model="distir-2021-grid")
    base = rows[0].throughput
    paper = {}
    if Path(a.csv).is_file():
        with open(a.csv, newline="") as f:
            for r in csv.DictReader(f):
                key = tuple(int(r[k]) for k in ("dp_degree", "hp_degree", "pp_degree",
                                                "num_microbatches"))
                paper[key] = float(r["throughput"])
    print(f"{'D':>3}{'H':>4}{'P':>4}{'K':>4}{'samples/s':>14}{'speedup':>9}"
          + (f"{'paper':>14}{'diff':>10}" if paper else ""))
    exact = 0
    for r in rows:
        line = (f"{r.dp:>3}{r.tp:>4}{r.pp:>4}{r.microbatches:>4}{r.throughput:>14.3f}"
                f"{r.throughput / base:>9.3f}")
        p = paper.get((r.dp, r.tp, r.pp, r.microbatches))
        if p is not None:
            exact += r.throughput == p
            line += f"{p:>14.3f}" + ("     exact" if r.throughput == p
                                     else f"{(r.throughput / p - 1) * 100:>+9.2f}%")
        print(line)
    print()
    print("best configuration per device count (D, H, P, K):")
    for w in (1, 2, 4, 8, 16):
        best = max((r for r in rows if r.devices == w), key=lambda r: r.throughput)
        msg = (f"  {w:>2} devices: ({best.dp}, {best.tp}, {best.pp}, {best.microbatches})"
               f"  speedup {best.throughput / base:.2f}")
        if paper:
            pb = max((k for k in paper if k[0] * k[1] * k[2] == w), key=paper.get)
            msg += f"   paper: {pb}  {paper[pb] / paper[(1, 1, 1, 1)]:.2f}"
        print(msg)
    if paper:
        print(f"\n{exact} of {len(rows)} rows equal the paper's CSV bit for bit")


if __name__ == "__main__":
    main()
