"""Compare the zoo's analytic V100 profiles with DAPPLE's measured V100 profiles.

The measured files are third-party (DAPPLE / HPGO ``profiles/``) and are not
shipped; pass the folder that holds them (``../shared/profiles`` beside a
checkout).  Each case states the batch (and sequence length) that the
measured file's own sizes imply, which is not always the batch its name or
HPGO's example uses; see ``note``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..graphfile import Profile, read_graph
from . import profile as zoo_profile

__all__ = ["Case", "CASES", "totals_without_inputs", "compare", "compare_all", "markdown_table"]


@dataclass
class Case:
    name: str
    ref: str                      # path relative to the profiles folder
    model: str
    batch_size: int
    config: dict = field(default_factory=dict)
    note: str = ""


CASES = [
    Case("ResNet-50", "resnet50/graph.txt", "resnet50", 128, {},
         "HPGO's example plans this file with pbs 32, but its sizes are for batch 128 "
         "(Input 128x3x224x224 fp32, fc output 128x1000 fp32); compared at batch 128"),
    Case("VGG-19", "vgg19/graph.txt", "vgg19", 32, {},
         "batch 32 (same file as DAPPLE's vgg-19-pbs-32.txt); DAPPLE fuses each ReLU into its "
         "conv node, the zoo lists them as separate layers, so the zoo's activation sum counts "
         "conv outputs twice; DAPPLE's sizes are rounded (12 MB per 64x224x224 map instead of "
         "12.85 MB, parameters in MiB written as 1e6 bytes)"),
    Case("BERT-48", "bert_48/graph.txt", "bert-48", 6, {"seq": 384},
         "HPGO plans this file with pbs 2, but its per-layer times (8.07 / 13.4 ms) are those of "
         "DAPPLE's bert-24-pbs-6 file and its activations (9,437,184 B) are 6 x 384 x 1024 fp32; "
         "compared at batch 6, seq 384"),
    Case("BERT-48 (DAPPLE pbs 2)", "dapple_profiling_results/bert-48-pbs-2.txt", "bert-48", 2,
         {"seq": 528, "max_pos": 528},
         "DAPPLE's own batch-2 file; its activations are 2 x 528 x 1024 fp32, so compared at "
         "seq 528 (max_pos 528 adds 16,384 position parameters)"),
    Case("XLNet-36", "xlnet_36/graph.txt", "xlnet-36", 1, {"seq": 512},
         "batch 1, seq 512; DAPPLE's parameters are MiB written as 1e6 bytes (52 MB per layer "
         "vs 54.6 MB)"),
    Case("GNMT-16", "gnmt_16/graph.txt", "gnmt-16", 64, {},
         "batch 64, 35 source / 36 target tokens (from the file's activation sizes)"),
    Case("AmoebaNet-36", "amoebanet_36/graph.txt", "amoebanet-36", 1, {},
         "batch 1; DAPPLE's is TensorFlow's AmoebaNet (different stem and padding), the zoo's "
         "is AmoebaNet-D (36, 512) of GPipe"),
]


def totals_without_inputs(p: Profile) -> dict:
    """Sums over nodes that are not input sources (DESC starting with 'Input'
    or 'input', and no incoming edge)."""
    has_in = {d for _, d in p.edges}
    t = {"fwd_ms": 0.0, "bwd_ms": 0.0, "act_bytes": 0.0, "param_bytes": 0.0}
    for i, nd in enumerate(p.nodes):
        if i not in has_in and nd.desc.lower().startswith("input"):
            continue
        for k in t:
            t[k] += float(getattr(nd, k))
    return t


def compare(case: Case, profiles_dir: str | os.PathLike, device: str = "V100") -> dict:
    ref = totals_without_inputs(read_graph(os.path.join(profiles_dir, case.ref)))
    zp = zoo_profile(case.model, device=device, batch_size=case.batch_size, dtype="fp32", **case.config)
    pk = zoo_profile(case.model, device=device, batch_size=case.batch_size, dtype="fp32", peak=True,
                     **case.config)
    z = totals_without_inputs(zp)
    zpk = totals_without_inputs(pk)
    rt = ref["fwd_ms"] + ref["bwd_ms"]
    return {
        "case": case.name, "ref": case.ref, "batch_size": case.batch_size, "note": case.note,
        "ref_time_ms": rt, "zoo_time_ms": z["fwd_ms"] + z["bwd_ms"],
        "zoo_peak_time_ms": zpk["fwd_ms"] + zpk["bwd_ms"],
        "time_ratio": (z["fwd_ms"] + z["bwd_ms"]) / rt,
        "peak_time_ratio": (zpk["fwd_ms"] + zpk["bwd_ms"]) / rt,
        "fwd_ratio": z["fwd_ms"] / ref["fwd_ms"], "bwd_ratio": z["bwd_ms"] / ref["bwd_ms"],
        "ref_act": ref["act_bytes"], "zoo_act": z["act_bytes"], "act_ratio": z["act_bytes"] / ref["act_bytes"],
        "ref_params": ref["param_bytes"], "zoo_params": z["param_bytes"],
        "param_ratio": z["param_bytes"] / ref["param_bytes"],
    }


def compare_all(profiles_dir, device: str = "V100") -> list[dict]:
    return [compare(c, profiles_dir, device) for c in CASES
            if os.path.isfile(os.path.join(profiles_dir, c.ref))]


def markdown_table(rows: list[dict]) -> str:
    head = ("| model (measured file) | batch | measured fwd+bwd ms | zoo ms | time ratio | "
            "peak-roofline ratio | activation ratio | parameter ratio |\n"
            "|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {r['case']} (`{r['ref']}`) | {r['batch_size']} | {r['ref_time_ms']:.1f} | "
             f"{r['zoo_time_ms']:.1f} | {r['time_ratio']:.2f} | {r['peak_time_ratio']:.2f} | "
             f"{r['act_ratio']:.2f} | {r['param_ratio']:.3f} |" for r in rows]
    return head + "\n".join(lines) + "\n"
