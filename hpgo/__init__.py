"""hpgo: plan and simulate hybrid data/pipeline-parallel DNN training.

A C11 core exposed as a CPython extension (``hpgo._core``) that releases the
GIL while it works; the successor of HPGO, the planner of DAPPLE.  HPGO's
calls keep working unchanged::

    import hpgo   # or: import HPGO
    c = hpgo.conductor_from_torch_graph_and_seps("graph.txt", 1, 128, [8, 16])
    print(c.py_orchestrate())
"""
import importlib.util as _ilu

if _ilu.find_spec(__name__ + "._core") is None:  # pragma: no cover - depends on the install
    import os as _os

    raise ImportError(
        f"hpgo's C extension (hpgo._core) is not built in {_os.path.dirname(__file__)}. "
        "Python imported the source folder of a checkout (the current directory comes first "
        "on sys.path) instead of the installed package: run Python from another directory, "
        "or install in place with \"pip install -e .\" (or build in place with "
        "\"python setup.py build_ext --inplace\").")
del _ilu
from ._core import (
    AsyncOrchestrate,
    Candidate,
    Devices,
    HpgoError,
    Layer,
    Model,
    PlanningError,
    conductor_from_torch_graph_and_seps,
    current_ga_iter_size,
    devices_from_seps,
    dp_cur_ga_inner_overlap_speedup,
    dp_cur_ga_p3_speedup,
    dp_opt_ga_p3_speedup,
    dp_p3_speedup,
    dp_speedup,
    model_from_states,
    model_from_torch_graph,
    optimal_ga_iter_size,
)
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
from .sweep import SweepResult, SweepRow, sweep
from .plan import Plan, PlanList, PlanStage, best_plan, candidate_plans
from .dynpipe import (
    LayerChain,
    ReplanResult,
    StragglerDetector,
    pipeline_score,
    replan,
    slice_table,
    split_batch,
)
from .hetero import HapLayer, HapPlan, hap_cluster
from .cluster import GPU, Cluster, Level
from .workmodel import ProfiledModel, Transformer, model_id, profile_model, transformer
from .parallel import MemoryBreakdown, ParallelPlan, StageGroup, StepResult, pipeline_split, simulate
from .autoplan import RankedPlan, RankedPlans, autoplan
from .hetero import compare as hap_compare, plan as hap_plan
from . import dynpipe, examples, hetero, validation
from . import layerwise as Layerwise
from . import utils as Utils

import sys as _sys

_sys.modules[__name__ + ".Layerwise"] = Layerwise
_sys.modules[__name__ + ".Utils"] = Utils
del _sys

def __getattr__(name: str):
    # hpgo.calibrate is imported on first use, so that `python -m hpgo.calibrate`
    # runs it fresh (runpy warns about a module imported twice)
    if name == "calibrate":
        import importlib
        return importlib.import_module(".calibrate", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__title__ = "hpgo"
__version__ = "1.0.0.dev0"
__author__ = "hpgo developers"
__license__ = "BSD-3-Clause"
__copyright__ = "Copyright 2026 hpgo developers"

__all__ = [
    "AsyncOrchestrate",
    "Candidate",
    "Cluster",
    "Devices",
    "GPU",
    "HapLayer",
    "HapPlan",
    "HpgoError",
    "Layer",
    "LayerChain",
    "Layerwise",
    "Level",
    "MemoryBreakdown",
    "Model",
    "ParallelPlan",
    "StageGroup",
    "Plan",
    "PlanList",
    "PlanStage",
    "PlanningError",
    "ProfiledModel",
    "RankedPlan",
    "RankedPlans",
    "ReplanResult",
    "SimulationResult",
    "Stage",
    "StepResult",
    "StragglerDetector",
    "SweepResult",
    "SweepRow",
    "Transformer",
    "Utils",
    "autoplan",
    "best_plan",
    "candidate_plans",
    "conductor_from_torch_graph_and_seps",
    "current_ga_iter_size",
    "devices_from_seps",
    "distir_figure3",
    "dp_cur_ga_inner_overlap_speedup",
    "dp_cur_ga_p3_speedup",
    "dp_opt_ga_p3_speedup",
    "dp_p3_speedup",
    "dp_speedup",
    "grid_search",
    "hap_cluster",
    "hap_compare",
    "hap_plan",
    "model_from_states",
    "model_from_torch_graph",
    "model_id",
    "optimal_ga_iter_size",
    "pipeline_score",
    "pipeline_split",
    "profile_model",
    "replan",
    "simulate",
    "simulate_mlp",
    "simulate_mlp_batch",
    "simulate_pipeline",
    "simulate_plan",
    "simulate_transformer",
    "slice_table",
    "split_batch",
    "sweep",
    "transformer",
]
