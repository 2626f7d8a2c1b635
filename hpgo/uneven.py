"""HPGO's plans as uneven :class:`hpgo.ParallelPlan` s (docs/uneven-plans.md).

HPGO plans over "states" (spec/hpgo-compat.md section 3): state ``s`` is a
cut of the profile's graph, everything up to it being ``cover(s)`` -- the
nodes of the antichain's stored set and all their ancestors.  A stage
``(a, b, units, gpus)`` of HPGO's result runs states ``a .. b - 1`` (the
last stage up to the last state), so it holds the nodes of ``cover(b - 1)``
less those of ``cover(a - 1)``; at a cut HPGO's dynamic programme chooses,
the earlier state is an ancestor of the later, so the covers nest.
:func:`hpgo.profile_model` lays the same nodes out as a chain (a
topological order, the lowest file index first, ``Input`` nodes dropped):
a cut maps to the profile layer after the last node of its cover, exactly
when the cover is a prefix of that order (it is for every plan HPGO makes
on the chain-like DAPPLE profiles; :func:`layer_boundaries` raises naming
the stage otherwise).
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ["hpgo_stages", "layer_boundaries", "compare_hpgo"]


def hpgo_stages(result: Any) -> list[tuple[int, int, int, list[int]]]:
    """HPGO's stage list ``(start state, end state, units, GPU ids)`` from
    ``py_orchestrate()``'s ``(speedup, stages)``, an :class:`hpgo.Plan` or
    the list itself."""
    stages = result
    if hasattr(result, "stages") and not isinstance(result, tuple):
        stages = [(s.start, s.end, getattr(s, "units", 1), list(s.gpus)) for s in result.stages]
    elif isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], list):
        stages = result[1]
    try:
        out = [(int(s[0]), int(s[1]), int(s[2]), [int(g) for g in s[3]]) for s in stages]
    except (TypeError, ValueError, IndexError):
        raise ValueError("not an HPGO result: expected (speedup, [(start, end, units, gpus), "
                         "...])") from None
    if not out:
        raise ValueError("an HPGO result with no stages")
    for k, s in enumerate(out):
        if not s[3] or s[2] < 1:
            raise ValueError(f"HPGO stage {k} has no GPU")
    return out


def _profile_path(profile: Any) -> str:
    name = getattr(profile, "name", profile)
    if not isinstance(name, (str, os.PathLike)) or not os.path.isfile(os.fspath(name)):
        raise ValueError("model must be the profile HPGO planned (a graph.txt path or the "
                         "hpgo.profile_model built from it) to map HPGO's states to its layers")
    return os.fspath(name)


def layer_boundaries(profile: Any, cut_states: list[int]) -> list[int]:
    """The profile layer boundary (as :func:`hpgo.profile_model` numbers the
    layers) of each HPGO cut: the state after which the cut falls.  Raises
    ValueError when a cover is not a prefix of the profile's layer order."""
    from . import _core, graphfile
    from .workmodel import topological_order

    path = _profile_path(profile)
    d = _core.read_profile(path)
    nodes, edges, st = d["nodes"], d["edges"], d["states"]
    n = len(nodes)
    pred: list[list[int]] = [[] for _ in range(n)]
    for s, t in edges:
        pred[t].append(s)
    # hpgo.profile_model's order (workmodel.topological_order)
    order = [i for i in topological_order(n, edges)
             if not graphfile.clean_desc(nodes[i][1]).startswith("Input")]
    pos = {v: i for i, v in enumerate(order)}
    anc: list[int | None] = [None] * n  # ancestor bitsets, in topological order

    def ancestors(v: int) -> int:
        stack = [v]
        while stack:
            x = stack[-1]
            todo = [p for p in pred[x] if anc[p] is None]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if anc[x] is None:
                a = 0
                for p in pred[x]:
                    a |= (1 << p) | anc[p]  # type: ignore[operator]
                anc[x] = a
        return anc[v]  # type: ignore[return-value]

    out = []
    L = len(st["sets"])
    for j in cut_states:
        if not 0 <= j < L:
            raise ValueError(f"state {j} is not a state of {path} ({L} states)")
        cover = 0
        for x in st["sets"][j]:
            cover |= (1 << x) | ancestors(x)
        inside = [pos[v] for v in range(n) if (cover >> v) & 1 and v in pos]
        b = max(inside) + 1
        if len(inside) != b:
            raise ValueError(f"{path}: HPGO's cut after state {j} ({st['labels'][j]!r}) is not a "
                             "prefix of the profile's layer order: it has no layer split")
        out.append(b)
    return out


def compare_hpgo(profile: Any, profile_batch: float, global_batch: int, *,
                 seps: tuple[int, ...] = (8, 16), cluster: Any = "dapple-v100") -> dict:
    """HPGO's plan for ``profile`` at ``global_batch`` on the machines
    ``seps`` (spec/hpgo-compat.md section 1), converted
    (:meth:`hpgo.ParallelPlan.from_hpgo`) and simulated by the step engine
    on ``cluster``, beside HPGO's own estimate and autoplan's best plan on
    the same profile and cluster.  Returns ``{"hpgo": (speedup, stages),
    "hpgo_plan", "hpgo_estimate" (seconds: HPGO's single-GPU time / its
    speedup), "simulate_plan" (seconds: HPGO's plan in the older pipeline
    simulator, priced as HPGO prices it), "engine" (StepResult), "autoplan"
    (its best RankedPlan)}``.
    docs/uneven-plans.md explains the difference between the two estimates."""
    import hpgo

    path = _profile_path(profile)
    res = hpgo.conductor_from_torch_graph_and_seps(path, profile_batch, global_batch,
                                                   list(seps)).py_orchestrate()
    hm = hpgo.model_from_torch_graph(path, profile_batch, global_batch)
    model = hpgo.profile_model(path, profile_batch)
    plan = hpgo.ParallelPlan.from_hpgo(res, global_batch, model=model)
    engine = hpgo.simulate(model, cluster, plan, timeline=False)
    best = hpgo.autoplan(model, cluster, global_batch, top=1)[0]
    older = hpgo.simulate_plan(hm, res, seps=list(seps), timeline=False)
    return {"hpgo": res, "hpgo_plan": plan, "hpgo_estimate": hm.total_time / res[0],
            "simulate_plan": older.iteration_time, "engine": engine, "autoplan": best}
