"""DAPPLE's ResNet-50 planner study (PLANNER_REPRODUCTION.md) in a few lines.

65 global batch sizes (32, 64, 128, ..., 4096) on 2 machines x 8 GPUs: data
parallel without overlap, with P3, with normal overlap, and the best hybrid
plan, as DAPPLE's Rust example prints them.  Uses DAPPLE's measured profile
from ../shared when present, else the ResNet-50 profile hpgo generates.
"""
from pathlib import Path

import hpgo

here = Path(__file__).resolve().parent
shared = here.parent.parent / "shared" / "profiles" / "resnet50" / "graph.txt"
profile = shared if shared.exists() else here.parent / "profiles" / "resnet50-v100" / "graph.txt"

rows = hpgo.sweep(profile, 32, [32] + list(range(64, 4097, 64)), [8, 16],
                  optimizer_memory_scaling=2, min_micro_batch_size=32,
                  peak_activation_per_batch=7e7)

print(f"profile: {profile}")
print(f"{'GBS':>5} {'DP No Overlap':>14} {'DP+P3':>8} {'DP+Normal Overlap':>18} {'Best Hybrid':>12}  stages")
for r in rows:
    fmt = lambda v: f"{v:.4f}" if v is not None else "-"
    stages = " ".join(f"[{a}-{b}]x{len(g)}" for a, b, _, g in r.stages) if r.stages else r.error
    print(f"{r.gbs:>5} {fmt(r.dp):>14} {fmt(r.dp_p3):>8} {fmt(r.dp_overlap):>18} {fmt(r.hybrid):>12}  {stages}")
