"""DAPPLE's "Example Usage of Python API" (its README), run with hpgo.

The three planner lines are DAPPLE's, verbatim apart from the profile path:
DAPPLE reads "./profiling_results/xlnet-36-pbs-1.txt" from its own checkout.
Here that file is used when the third-party profiles sit beside this
checkout (../shared/profiles/dapple_profiling_results/), and otherwise the
XLNet-36-like profile that ships with hpgo (DAPPLE's published per-layer
V100 figures).  HPGO printed
(14.816194280556266, [(0, 22, 1, [0, 1, 2, 3, 4, 5, 6, 7]), (22, 40, 1, [8, 9, 10, 11, 12, 13, 14, 15])])
for DAPPLE's file.

    python examples/dapple_python_example.py
"""
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_DAPPLE = _ROOT.parent / "shared" / "profiles" / "dapple_profiling_results" / "xlnet-36-pbs-1.txt"
PROFILE = str(_DAPPLE if _DAPPLE.is_file() else _ROOT / "profiles" / "transformer36-v100" / "graph.txt")

# Import HPGO Python API
import HPGO
# Construct the Conductor object
# conductor_from_torch_graph_and_seps(profile_filename, profile_batch_size, global_batch_size, devices)
conductor = HPGO.conductor_from_torch_graph_and_seps(PROFILE, 1, 128, [8, 16])
result = conductor.py_orchestrate()
print(result)
