"""Every notebook in examples/ runs headless from a clean kernel and writes
its figures; notebooks are committed without outputs."""
import json
import os
from pathlib import Path

import pytest

from conftest import ROOT, SHARED
from optional_deps import need

EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
PNG = b"\x89PNG\r\n\x1a\n"

#: figures each notebook must write (more may appear)
FIGURES = {
    "resnet50_batch_size.ipynb": ["resnet50_speedup_vs_gbs.png", "resnet50_plan.png"],
    "bert48_batch_size.ipynb": ["bert48_speedup_vs_gbs.png", "bert48_plan.png"],
    "xlnet36_batch_size.ipynb": ["xlnet36_speedup_vs_gbs.png", "xlnet36_plan.png"],
    "distir_figures.ipynb": ["distir_figure3.png", "distir_figure4.png",
                             "distir_pipeline_gantt.png"],
    "autoplan.ipynb": ["autoplan_throughput_vs_gpus.png", "autoplan_time_vs_memory.png",
                       "autoplan_memory.png", "autoplan_schedule.png",
                       "autoplan_moe_memory.png", "autoplan_calibration.png"],
    "schedule_and_plan.ipynb": ["plan_diagram.png", "schedule_gantt.png", "plan.json",
                                "schedule_trace.json"],
}
#: written only when ../shared holds DAPPLE's measured profiles
WITH_SHARED = {
    "resnet50_batch_size.ipynb": ["resnet50_measured_speedup_vs_gbs.png"],
    "bert48_batch_size.ipynb": ["bert48_measured_speedup_vs_gbs.png"],
    "xlnet36_batch_size.ipynb": ["xlnet36_measured_speedup_vs_gbs.png"],
}


def test_every_notebook_is_listed():
    assert NOTEBOOKS, "no notebook in examples/"
    assert sorted(p.name for p in NOTEBOOKS) == sorted(FIGURES)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_writes_its_figures(path, tmp_path, monkeypatch):
    nbformat = need("nbformat")
    nbclient = need("nbclient")
    need("ipykernel")
    need("matplotlib")
    need("pandas")
    out = tmp_path / "figures"
    monkeypatch.setenv("HPGO_FIGURE_DIR", str(out))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel uses the inline backend
    # the kernel imports hpgo from this checkout, as the tests do
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    nb = nbformat.read(str(path), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    client.execute()   # raises CellExecutionError on any error in any cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    want = list(FIGURES[path.name])
    if (SHARED / "profiles").is_dir():
        want += WITH_SHARED.get(path.name, [])
    for name in want:
        f = out / name
        assert f.is_file(), f"{path.name} did not write {name}"
        data = f.read_bytes()
        if name.endswith(".png"):
            assert data[:8] == PNG and len(data) > 10_000, name
        else:
            json.loads(data)
    # every figure shown in the notebook is a real image
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} displayed no figure"
