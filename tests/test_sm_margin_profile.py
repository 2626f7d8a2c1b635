"""The measured cost of SMs held beside a GEMM (benchmarks/gpu_sm_margin.py,
profiles/h100-sxm5-sm-margin.json), as docs/training-model.md reports it:
on an H100 SXM5 a tensor-parallel chunk GEMM beside kernels that hold even
a few SMs runs well above the proportional n_SM / (n_SM - n) slowdown."""
import json
import statistics
from pathlib import Path

import pytest

from csrc_paths import src

PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "h100-sxm5-sm-margin.json"


def test_profile_shape_and_the_documented_slowdowns():
    d = json.loads(PROFILE.read_text())
    assert d["format"] == "hpgo-sm-margin-1" and d["multiprocessors"] == 132
    # the spinner holds one SM per block: one block more than SMs takes two rounds
    chk = d["spin_check"]
    assert chk["n_sm_plus_one_blocks_seconds"] == pytest.approx(
        2 * chk["n_sm_blocks_seconds"], rel=0.1)
    n = d["multiprocessors"]
    for s in d["samples"]:
        assert s["flops"] == 2.0 * s["m"] * s["k"] * s["n"]
        assert set(s["seconds"]) == set(s["seconds_carveout"])
    med = {nc: statistics.median(s["seconds"][nc] / s["seconds"]["0"] for s in d["samples"])
           for nc in d["samples"][0]["seconds"]}
    assert med["0"] == 1.0
    for nc in ("2", "4", "8", "16"):
        assert med[nc] > 1.1 * n / (n - int(nc))     # well above proportional
    assert med["48"] == pytest.approx(n / (n - 48), rel=0.1)   # proportional again


def test_the_c_cores_table_is_the_measured_median():
    """csrc/step/work.c prices a GEMM beside communication on Hopper with
    SM_HELD / SM_SLOW_H100: the profile's medians, to three decimals."""
    import re
    text = src("work.c").read_text()
    held = [float(x) for x in re.search(r"SM_HELD\[9\] = \{([^}]*)\}", text).group(1).split(",")]
    slow = [float(x) for x in
            re.search(r"SM_SLOW_H100\[9\] = \{([^}]*)\}", text).group(1).split(",")]
    d = json.loads(PROFILE.read_text())
    for h, sl in zip(held, slow):
        med = statistics.median(s["seconds"][str(int(h))] / s["seconds"]["0"]
                                for s in d["samples"])
        assert sl == pytest.approx(med, abs=0.0015), h
