"""The ``hpgo`` command line.

Each subcommand lives in its own module and registers itself here through an
``add_<name>_subcommand(subparsers)`` function whose parser sets
``func=run(args) -> int``.
"""
from __future__ import annotations

import argparse
import sys

from .profile_cli import add_profile_subcommand

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hpgo", description="Plan and simulate hybrid parallel DNN training.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_profile_subcommand(sub)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
