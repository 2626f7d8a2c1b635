"""``hpgo cluster``: print, check or write a cluster description.

    hpgo cluster                                   the presets and GPU types
    hpgo cluster dgx-h100 --nodes 4                a preset, every figure with its unit
    hpgo cluster dgx-h100 --nodes 4 -o my.json     ... written as a cluster file to edit
    hpgo cluster my.json                           check a cluster file and describe it
    hpgo cluster --gpu a100-40gb --nodes 4 --inter-node-gbps 200 --per-node -o my.json
    hpgo cluster --schema                          the JSON Schema of the file format
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_cluster_subcommand", "run_cluster"]


def add_cluster_subcommand(sub: Any) -> argparse.ArgumentParser:
    from .autoplan_cli import add_cluster_options

    p = sub.add_parser(
        "cluster", help="print, check or write a cluster description (presets, files, --gpu)",
        description="Describe a cluster preset or file with every figure and its unit, check a "
                    "cluster file against the format (hpgo/cluster.schema.json), or write a "
                    "cluster file from a preset or from --gpu, --gpus-per-node and "
                    "--inter-node-gbps as a starting point to edit.",
        epilog="examples: hpgo cluster dgx-h100 --nodes 4 -o mine.json;  hpgo cluster mine.json;  "
               "hpgo cluster --gpu a100-40gb --nodes 4 --inter-node-gbps 200 --per-node")
    p.add_argument("name", nargs="?", metavar="PRESET|FILE",
                   help="a preset or a cluster file (none: list the presets and GPU types)")
    add_cluster_options(p)
    p.add_argument("--json", action="store_true", help="print the cluster file instead")
    p.add_argument("-o", "--output", metavar="FILE", help="write the cluster file")
    p.add_argument("--schema", action="store_true",
                   help="print the JSON Schema of cluster files (every field and its unit)")
    p.set_defaults(func=run_cluster)
    return p


def run_cluster(args: Any, out: Any = None) -> int:
    import hpgo
    from . import _schema
    from .autoplan_cli import _check_output, cluster_from_args
    from .cluster import GPU_TYPES

    out = out or sys.stdout
    if args.schema:
        out.write(json.dumps(_schema.load_schema("cluster"), indent=1) + "\n")
        return 0
    if args.name and args.cluster:
        raise ValueError("give the cluster once (PRESET|FILE or --cluster)")
    args.cluster = args.cluster or args.name
    if not args.cluster and not args.gpu:
        out.write("presets: " + ", ".join(hpgo.Cluster.presets()) + "\n")
        out.write("GPU types (--gpu): " + ", ".join(GPU_TYPES) + "\n")
        out.write("hpgo cluster PRESET -o FILE writes one to edit; hpgo cluster --schema "
                  "documents the format\n")
        return 0
    _check_output(args.output, "-o")
    c = cluster_from_args(args)
    if args.json:
        out.write(json.dumps(c.to_dict(), indent=1) + "\n")
    else:
        out.write(c.describe() + "\n")
    if args.output:
        c.save(args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
