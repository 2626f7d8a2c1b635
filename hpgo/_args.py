"""One argument-conversion policy for the Python layer, the same as the C
glue's (``glue_index`` / ``glue_double`` in ``csrc/module/_coremodule.c``):

* integers follow ``operator.index``: ``int``, NumPy integer scalars and
  anything with ``__index__``; ``bool`` is refused (``TypeError``);
* reals follow ``float()``: also NumPy floats and anything with
  ``__float__``; ``bool`` and strings are refused (``TypeError``);
* a value out of range -- below a minimum, or too large for the C type or a
  double (``2**63``, ``10**400``) -- is a ``ValueError`` naming the argument
  and its range, never a bare ``OverflowError``.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

__all__ = ["index", "real", "INT32_MAX", "INT64_MAX"]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def index(name: str, v: Any, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """``operator.index(v)`` as a plain int in [lo, hi] (either may be None)."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    i = operator.index(v)
    if (lo is not None and i < lo) or (hi is not None and i > hi):
        if hi is None:
            raise ValueError(f"{name} must be >= {lo}, got {i}")
        if lo is None:
            raise ValueError(f"{name} must be <= {hi}, got {i}")
        raise ValueError(f"{name} must be between {lo} and {hi}, got {i}")
    return int(i)


def real(name: str, v: Any) -> float:
    """``float(v)`` for a number (NaN and infinities pass: callers decide)."""
    t = type(v)
    if isinstance(v, (bool, str, bytes)) or not (hasattr(t, "__float__")
                                                 or hasattr(t, "__index__")):
        raise TypeError(f"{name} must be a number, not {t.__name__}")
    try:
        return float(v)
    except OverflowError:
        raise ValueError(f"{name} is too large for a double (at most about 1.8e308)") from None
