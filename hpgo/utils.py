"""``HPGO.Utils``: pipeline helpers of HPGO (spec/hpgo-compat.md 7.7-7.8)."""
from __future__ import annotations

import math
from typing import Optional, Sequence

from . import _args

__all__ = ["pipeline_length_recursive"]

MAX_ELEMENTS = 1_000_000  # pipeline elements x micro-batches


def pipeline_length_recursive(
    F: Sequence[float],
    B: Sequence[float],
    AllReduce: Sequence[float],
    M: int,
    Phi: Optional[Sequence[int]] = None,
) -> float:
    """pipeline_length_recursive(F, B, AllReduce, M, Phi=None) -> float

    Length of HPGO's recursive 1F1B schedule: E pipeline elements with
    forward times F, backward times B (seconds per micro-batch), M
    micro-batches, and Phi[x] micro-batches in flight on element x (default
    E - x + 1, as HPGO.Utils).  Returns max over x of the end of the last
    backward on x plus AllReduce[x].
    """
    for name, seq in (("F", F), ("B", B), ("AllReduce", AllReduce)):
        if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
            raise TypeError(f"{name} must be a sequence of numbers, not {type(seq).__name__}")
    E = len(F)
    if len(B) != E or len(AllReduce) != E:
        raise ValueError("F, B and AllReduce must have the same length")
    if E == 0:
        raise ValueError("need at least one pipeline element")
    M = _args.index("M", M, 1)
    if E * M > MAX_ELEMENTS:  # pure Python, about 7 s per million
        raise ValueError(f"E x M = {E} x {M} exceeds the limit of {MAX_ELEMENTS:,} "
                         "(use hpgo.simulate_pipeline for large pipelines)")
    vals = {}
    for name, seq in (("F", F), ("B", B), ("AllReduce", AllReduce)):
        vals[name] = [_args.real(f"{name}[{i}]", v) for i, v in enumerate(seq)]
        if not all(math.isfinite(v) and v >= 0 for v in vals[name]):
            raise ValueError(f"{name} must hold non-negative finite numbers, got {seq!r}")
    F, B, AllReduce = vals["F"], vals["B"], vals["AllReduce"]
    phi = list(Phi) if Phi is not None else [E - x + 1 for x in range(E)]
    if len(phi) != E or any(isinstance(p, bool) or not hasattr(type(p), "__index__")
                            or p < 1 for p in phi):
        raise ValueError("Phi must hold one positive int per element")
    phi = [int(p) for p in phi]
    # f[i][x], b[i][x] = (start, end); filled iteratively in an order that
    # respects every dependency of the recursion (section 7.8).
    fend = [[None] * E for _ in range(M)]
    bend = [[None] * E for _ in range(M)]

    def deps(i: int, x: int, kind: str):
        if kind == "f":
            if i == 0:
                return [(0, x - 1, "f")] if x > 0 else []
            return [(i - phi[x], x, "b"), (i - 1, x, "f"), (i, x - 1, "f")]
        return [(i, x + 1, "b"), (i - 1, x, "b"), (i + phi[x] - 1, x, "f")]

    def known(i: int, x: int, kind: str) -> bool:
        if i < 0 or i >= M or x < 0 or x >= E:
            return True
        return (fend if kind == "f" else bend)[i][x] is not None

    def value(i: int, x: int, kind: str) -> float:
        if i < 0 or i >= M or x < 0 or x >= E:
            return 0.0
        return (fend if kind == "f" else bend)[i][x]

    def _solve(stack):
        visiting = set()
        while stack:
            i, x, kind = stack[-1]
            if known(i, x, kind):
                stack.pop()
                continue
            missing = [d for d in deps(i, x, kind) if not known(*d)]
            if missing:
                if (i, x, kind) in visiting:
                    raise ValueError("Phi makes the schedule cyclic")
                visiting.add((i, x, kind))
                stack.extend(missing)
                continue
            start = max([value(*d) for d in deps(i, x, kind)], default=0.0)
            if kind == "f":
                fend[i][x] = start + F[x]
            else:
                bend[i][x] = start + B[x]
            stack.pop()

    def end_of(i: int, x: int, kind: str) -> float:
        if not known(i, x, kind):
            _solve([(i, x, kind)])
        return value(i, x, kind)

    return max(end_of(M - 1, x, "b") + AllReduce[x] for x in range(E))
