"""HPGO's plans for DAPPLE's study, converted to uneven ParallelPlans and
simulated by the step engine on "dapple-v100", beside HPGO's own estimate
and autoplan's best plan on the same profile (docs/uneven-plans.md).

Needs DAPPLE's measured profiles in ../shared/profiles; falls back to the
profiles hpgo generates (profiles/<model>-v100) for those that are absent.
"""
from pathlib import Path

import hpgo
from hpgo import uneven

here = Path(__file__).resolve().parent
shared = here.parent.parent / "shared" / "profiles"
STUDY = [  # DAPPLE's profile, profile batch, global batch; hpgo's own profile
    ("resnet50", 32, 256, "resnet50-v100"), ("vgg19", 32, 256, "vgg19-v100"),
    ("bert_large", 2, 128, "bert-large-v100"), ("xlnet_36", 1, 128, "xlnet-36-v100"),
    ("amoebanet_36", 8, 512, "amoebanet-36-v100"),
]

print("| profile (batch) | HPGO's plan | HPGO's estimate (s) | simulate_plan (s) | engine (s) | "
      "fits | autoplan (s) | autoplan's plan |")
print("|---|---|---|---|---|---|---|---|")
for name, pbs, gbs, own in STUDY:
    path = shared / name / "graph.txt"
    if not path.exists():
        path = here.parent / "profiles" / own / "graph.txt"
    row = uneven.compare_hpgo(str(path), pbs, gbs)
    plan, eng, best = row["hpgo_plan"], row["engine"], row["autoplan"]
    stages = " + ".join(f"[{g.layers[0]}, {g.layers[1]}) x{g.dp}"
                        + (" (GPUs " + ",".join(map(str, g.gpus)) + ")" if g.gpus else "")
                        for g in plan.stages)
    print(f"| {name} ({gbs}) | {stages}, mb {plan.micro_batch} | {row['hpgo_estimate']:.3f} | "
          f"{row['simulate_plan']:.3f} | {eng.iteration_time:.3f} | {'yes' if eng.fits else 'no'} | {best.iteration_time:.3f} | "
          f"{best.plan.describe(global_batch=False)} |")
