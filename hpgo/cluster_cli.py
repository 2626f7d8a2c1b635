"""``hpgo cluster``: print, check or write a cluster description.

    hpgo cluster                                   the presets and GPU types
    hpgo cluster dgx-h100 --nodes 4                a preset, every figure with its unit
    hpgo cluster dgx-h100 --nodes 4 -o my.json     ... written as a cluster file to edit
    hpgo cluster my.json                           check a cluster file and describe it
    hpgo cluster --gpu a100-40gb --nodes 4 --inter-node-gbps 200 --per-node -o my.json
    hpgo cluster --schema                          the JSON Schema of the file format
    hpgo cluster --combine dgx-h100:4 --combine dgx-a100-80gb:8 --join-gbps 200
                                                   several GPU types, joined by a network
    hpgo cluster dgx-h100 --speed 5=0.667          GPU 5 slowed 1.5x
    hpgo cluster dgx-h100 --power-limit 500        GPUs held to 500 W
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
    mix = p.add_argument_group("several GPU types and slowed GPUs")
    mix.add_argument("--combine", action="append", metavar="PRESET[:NODES]|FILE",
                     help="a part of a cluster of several GPU types (give it twice or more); "
                          "parts are numbered in the order given")
    mix.add_argument("--join-gbps", type=float, metavar="G",
                     help="the link between parts, gigabits/s per GPU (with --combine)")
    mix.add_argument("--join-latency", type=float, default=0.0, metavar="S",
                     help="its latency, seconds (default 0)")
    mix.add_argument("--join-efficiency", type=float, default=1.0, metavar="E",
                     help="its achieved fraction of the bandwidth (default 1)")
    mix.add_argument("--speed", action="append", metavar="GPU=FACTOR",
                     help="GPU (a cluster index) runs at FACTOR times its type's rate "
                          "(0.667: slowed 1.5x); repeatable")
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
    if args.combine:
        c = _combined(args)
        if args.power_limit is not None:   # refused: a limit is set on a part
            c = c.with_power_limit(args.power_limit)
    elif args.join_gbps is not None:
        raise ValueError("--join-gbps links the parts of --combine")
    elif not args.cluster and not args.gpu:
        out.write("presets: " + ", ".join(hpgo.Cluster.presets()) + "\n")
        out.write("GPU types (--gpu): " + ", ".join(GPU_TYPES) + "\n")
        out.write("hpgo cluster PRESET -o FILE writes one to edit; hpgo cluster --schema "
                  "documents the format\n")
        return 0
    else:
        c = None
    _check_output(args.output, "-o")
    if c is None:
        c = cluster_from_args(args)   # with --power-limit applied
    if args.speed:
        c = c.with_speed(_speeds(args.speed))
    if args.json:
        out.write(json.dumps(c.to_dict(), indent=1) + "\n")
    else:
        out.write(c.describe() + "\n")
    if args.output:
        c.save(args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _combined(args: Any) -> Any:
    """The cluster of --combine's parts, joined by --join-gbps."""
    import math

    import hpgo
    from .cluster import resolve

    if args.cluster or args.gpu:
        raise ValueError("--combine builds the cluster from its parts: give no PRESET|FILE, "
                         "--cluster or --gpu with it")
    if len(args.combine) < 2:
        raise ValueError("--combine needs two parts or more")
    if args.join_gbps is None or not (math.isfinite(args.join_gbps) and args.join_gbps > 0):
        raise ValueError("--combine needs --join-gbps G > 0 (the link between parts, "
                         "gigabits/s per GPU)")
    parts = []
    for spec in args.combine:
        name, sep, nodes = spec.rpartition(":")
        if sep and name and nodes.isdigit():
            parts.append(resolve(name, int(nodes)))
        else:
            parts.append(resolve(spec))
    return hpgo.Cluster.combine(*parts, bandwidth=args.join_gbps * 1e9 / 8,
                                latency=args.join_latency, efficiency=args.join_efficiency)


def _speeds(specs: list[str]) -> dict[int, float]:
    out: dict[int, float] = {}
    for spec in specs:
        gpu, sep, factor = spec.partition("=")
        try:
            out[int(gpu)] = float(factor)
        except ValueError:
            raise ValueError(f"--speed takes GPU=FACTOR (5=0.667), got {spec!r}") from None
        if not sep:
            raise ValueError(f"--speed takes GPU=FACTOR (5=0.667), got {spec!r}")
    return out
