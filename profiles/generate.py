#!/usr/bin/env python3
"""Regenerate the profiles that ship in profiles/.

Run from the repository root:  python profiles/generate.py [--only NAME ...]

transformer36-v100: a 36-layer transformer (XLNet-36-like) built from the
per-layer figures DAPPLE published for XLNet-36 on a V100 at batch 1
(forward 3.4 ms, backward 4.9 ms, output activation 2 MB, parameters 52 MB
per layer; 131 MB token embedding).  It is the profile of the README's
quick start.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from hpgo.graphfile import Node, Profile, write_profile  # noqa: E402


def transformer36_v100() -> Profile:
    """XLNet-36-like stack from DAPPLE's published per-layer V100 figures."""
    nodes = [
        Node("Input", 0.0, 0.0, 4000.0, 0.0),                    # token ids, 512 x int64
        Node("Embed-Token", 0.007, 0.0, 2e6, 131e6),              # 32000 x 1024 fp32
        Node("Embed-Dropout", 0.023, 0.0, 2e6, 0.0),
    ]
    for i in range(36):
        nodes.append(Node(f"Layer_{i}", 3.4, 4.9, 2e6, 52e6))
    nodes.append(Node("LM-Head-Loss", 0.46, 1.38, 2000.0, 0.0))
    edges = [(i, i + 1) for i in range(len(nodes) - 1)]
    meta = {
        "model": "transformer36", "device": "V100", "dtype": "fp32", "batch_size": 1,
        "method": "published per-layer figures (DAPPLE XLNet-36 profile, V100, batch 1)",
    }
    return Profile(nodes, edges, meta)


BUILDERS = {"transformer36-v100": transformer36_v100}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="names to regenerate (default: all)")
    args = ap.parse_args(argv)
    names = args.only or list(BUILDERS)
    for name in names:
        if name not in BUILDERS:
            print(f"generate.py: unknown profile {name!r}; known: {', '.join(BUILDERS)}", file=sys.stderr)
            return 2
        g, j = write_profile(os.path.join(HERE, name), BUILDERS[name]())
        print(f"wrote {os.path.relpath(g)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
