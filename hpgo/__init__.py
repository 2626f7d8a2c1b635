"""hpgo: plan and simulate hybrid data/pipeline-parallel DNN training.

A C11 core exposed as a CPython extension (``hpgo._core``) that releases the
GIL while it works; successor of HPGO, the planner of DAPPLE.
"""
from ._core import HpgoError, PlanningError

__version__ = "1.0.0.dev0"
