"""hpgo: plan and simulate hybrid data/pipeline-parallel DNN training.

A C11 core exposed as a CPython extension (``hpgo._core``) that releases the
GIL while it works; successor of HPGO, the planner of DAPPLE.
"""
from ._core import HpgoError, PlanningError
from .sim import (
    SimulationResult,
    Stage,
    distir_figure3,
    grid_search,
    simulate_mlp,
    simulate_mlp_batch,
    simulate_pipeline,
    simulate_plan,
    simulate_transformer,
)

__version__ = "1.0.0.dev0"
