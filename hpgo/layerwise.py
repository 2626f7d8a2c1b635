"""``HPGO.Layerwise``: the layer-wise planner under the submodule name HPGO 0.9.3 used."""
from ._core import (
    AsyncOrchestrate,
    Devices,
    Model,
    conductor_from_torch_graph_and_seps,
    current_ga_iter_size,
    devices_from_seps,
    dp_cur_ga_inner_overlap_speedup,
    dp_cur_ga_p3_speedup,
    dp_opt_ga_p3_speedup,
    dp_p3_speedup,
    dp_speedup,
    model_from_torch_graph,
    optimal_ga_iter_size,
)

__version__ = "1.0.0.dev0"

__all__ = [
    "AsyncOrchestrate",
    "Devices",
    "Model",
    "conductor_from_torch_graph_and_seps",
    "current_ga_iter_size",
    "devices_from_seps",
    "dp_cur_ga_inner_overlap_speedup",
    "dp_cur_ga_p3_speedup",
    "dp_opt_ga_p3_speedup",
    "dp_p3_speedup",
    "dp_speedup",
    "model_from_torch_graph",
    "optimal_ga_iter_size",
]
