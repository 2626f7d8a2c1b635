"""Typed use of hpgo's public API: checked by mypy (tests/test_typing.py) and
also run, so that the types the stubs promise are the ones returned."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    from typing import assert_type
else:  # pragma: no cover
    from typing_extensions import assert_type

import hpgo
from hpgo import dot, examples
from hpgo.plan import Plan, PlanList, PlanStage, best_plan, candidate_plans
from hpgo.sim import GridRow, SimulationResult
from hpgo.sweep import SweepResult, SweepRow

PROFILE = str(Path(__file__).resolve().parents[2] / "profiles" / "transformer36-v100" / "graph.txt")


def main() -> None:
    m = hpgo.model_from_torch_graph(PROFILE, 1, 32)
    assert_type(m, hpgo.Model)
    assert_type(m.num_layers, int)
    assert_type(m.ct(0, m.num_layers - 1), float)
    assert_type(m.layers[0].desc, str)
    m2 = m.normalized_copy(64)
    m2.min_micro_batch_size = 2
    d = hpgo.devices_from_seps([4, 8])
    assert_type(d.seps, list[int])
    dp: float = hpgo.dp_speedup(d, m)
    ao = hpgo.AsyncOrchestrate(m, d, threads=1)
    ao.orchestrate()
    for c in ao.res:
        assert_type(c, hpgo.Candidate)
        assert_type(c.speedup, float)
        assert_type(c.label, str)
    speedup, stages = ao.py_orchestrate()
    assert_type(speedup, float)
    a, b, units, gpus = stages[0]
    assert_type(gpus, list[int])
    c2 = hpgo.conductor_from_torch_graph_and_seps(PROFILE, 1, 32, [4, 8])
    assert_type(c2, hpgo.AsyncOrchestrate)

    plan = best_plan(PROFILE, 1, 32, [4, 8], threads=1)
    assert_type(plan, Plan)
    assert_type(plan.stages[0], PlanStage)
    assert_type(plan.to_hpgo()[0], float)
    assert plan.to_hpgo() == (speedup, stages)
    plans = candidate_plans(m, 1, 32, d)
    assert_type(plans, PlanList)
    assert_type(plans.best(), Plan)
    text: str = plan.table()
    again = Plan.from_json(plan.to_json())
    assert again == plan

    sim = plan.simulate(m)
    assert_type(sim, SimulationResult)
    t: float = sim.iteration_time
    assert t > 0 and dp > 0 and text
    rows = hpgo.grid_search(batch_size=256, width=256, layers=4, devices=[1, 2])
    assert_type(rows, list[GridRow])
    sw = hpgo.sweep(m, 1, [32, 64], [4, 8], threads=1)
    assert_type(sw, SweepResult)
    assert isinstance(sw[0], SweepRow)
    src: str = dot.profile_dot(PROFILE, plan)
    assert src.startswith("digraph")
    compact: str = dot.profile_dot(PROFILE, plan, collapse=True, wrap="auto")
    assert compact.startswith("digraph")
    quiet = hpgo.sweep(m, 1, [32, 64], [4, 8], threads=1, progress=False)
    assert quiet == sw
    html: str = plan._repr_html_() + plans._repr_html_() + sw._repr_html_() + sim._repr_html_()
    assert html.startswith("<table")
    shipped: Path = examples.path("transformer36")
    assert_type(examples.batch_size("transformer36"), Optional[int])
    assert shipped.is_file()
    prof = hpgo._core.read_profile(PROFILE)
    assert_type(prof["edges"], list[tuple[int, int]])


if __name__ == "__main__":
    main()
    print("ok")
