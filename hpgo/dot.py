"""Graphviz export of a profile's layer graph, nodes coloured by stage.

:func:`profile_dot` reads a ``graph.txt`` profile (the same reader as the
planner) and returns DOT text: one node per layer (its description and
forward / backward milliseconds), the data-flow edges, and, given a
:class:`hpgo.plan.Plan` (or HPGO's ``(speedup, stages)`` tuple), each node
filled with its stage's colour and grouped in a cluster per stage.

A node belongs to the stage holding the first layer state whose antichain
contains it (states are the planner's units; a node enters the states when
it is first on the frontier).  Nodes the planner drops (the ``Input`` source
and ``__getitem__`` sinks) are drawn grey and dashed.

:func:`render` uses the ``graphviz`` Python package and Graphviz's ``dot``
program when both are installed and otherwise writes the DOT text.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple, Union

from . import _core
from .plan import STAGE_COLORS, Plan, _ranges

__all__ = ["node_stages", "profile_dot", "write_dot", "render", "can_render"]

PathLike = Union[str, "os.PathLike[str]"]


def _as_plan(plan: Any) -> Plan:
    if isinstance(plan, Plan):
        return plan
    return Plan.from_hpgo(plan)


def node_stages(profile: Union[PathLike, Dict[str, Any]], plan: Any) -> List[Optional[int]]:
    """Stage of every node of the profile (file order), None for nodes the
    planner dropped.  ``profile`` is a path or ``_core.read_profile``'s dict."""
    prof: Any = profile if isinstance(profile, dict) else _core.read_profile(os.fspath(profile))
    p = _as_plan(plan)
    if prof.get("states") is None:
        raise ValueError("the profile was read without states")
    sets = prof["states"]["sets"]
    n_states = len(sets)
    last = p.stages[-1].last_state
    if last != n_states - 1:
        raise ValueError(f"the plan covers states 0..{last} but the profile has {n_states} "
                         "states: plan and profile do not match")
    state_stage = [0] * n_states
    for s in p.stages:
        for k in range(s.first_state, s.last_state + 1):
            state_stage[k] = s.index
    out: List[Optional[int]] = [None] * len(prof["nodes"])
    for k, members in enumerate(sets):
        for n in members:
            if out[n] is None:
                out[n] = state_stage[k]
    return out


def _q(s: str) -> str:
    """A DOT double-quoted string."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def profile_dot(profile: PathLike, plan: Any = None, *, name: Optional[str] = None,
                rankdir: str = "TB", clusters: bool = True, times: bool = True,
                max_label: int = 40) -> str:
    """DOT text of the profile's layer graph.

    ``plan``: a :class:`hpgo.plan.Plan` or HPGO's ``(speedup, stages)`` for
    this profile (its last state must be the profile's last).  ``clusters``
    groups the nodes of a stage in a labelled box; ``times`` adds forward /
    backward ms to each label; ``rankdir`` is Graphviz's ("TB", "LR", ...).
    """
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise ValueError(f"rankdir must be TB, LR, BT or RL, got {rankdir!r}")
    prof: Any = _core.read_profile(os.fspath(profile))
    nodes = prof["nodes"]
    stages = node_stages(prof, plan) if plan is not None else [None] * len(nodes)
    planned: Set[int] = set()
    for members in prof["states"]["sets"]:
        planned.update(members)
    p = _as_plan(plan) if plan is not None else None
    title = name or Path(os.fspath(profile)).parent.name or Path(os.fspath(profile)).stem
    lines = [f"digraph {_q(title)} {{"]
    glabel = title
    if p is not None:
        glabel += (f"\n{p.num_stages} stages, speedup {p.speedup:.3f}, "
                   f"{p.rp} replica{'s' if p.rp != 1 else ''}")
    lines.append(f'  graph [rankdir={rankdir}, fontname="Helvetica", labelloc=t, '
                 f'label={_q(glabel)}];')
    lines.append('  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, '
                 'fillcolor="#ffffff"];')
    lines.append('  edge [arrowsize=0.6];')

    def node_line(i: int) -> str:
        nid, desc, fwd, bwd, _act, _par = nodes[i]
        label = _clip(desc, max_label)
        if times:
            label += f"\n{fwd:.3g} / {bwd:.3g} ms"
        attrs = [f"label={_q(label)}", f"tooltip={_q(nid + ': ' + desc)}"]
        st = stages[i]
        if st is not None:
            attrs.append(f'fillcolor="{STAGE_COLORS[st % len(STAGE_COLORS)]}"')
        elif i not in planned:
            attrs.append('fillcolor="#eeeeee", style="rounded,filled,dashed", fontcolor="#666666"')
        return f"  n{i} [{', '.join(attrs)}];"

    if p is not None and clusters:
        for s in p.stages:
            members = [i for i, st in enumerate(stages) if st == s.index]
            if not members:
                continue
            gpus = _ranges(s.gpus)
            lines.append(f"  subgraph cluster_stage{s.index} {{")
            lines.append(f"    label={_q(f'stage {s.index}: states {s.first_state}-{s.last_state}, GPUs {gpus}')};")
            lines.append(f'    style="rounded"; color="#888888";')
            lines.extend("  " + node_line(i) for i in members)
            lines.append("  }")
        lines.extend(node_line(i) for i, st in enumerate(stages) if st is None)
    else:
        lines.extend(node_line(i) for i in range(len(nodes)))
    for a, b in prof["edges"]:
        lines.append(f"  n{a} -> n{b};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(profile: PathLike, path: PathLike, plan: Any = None, **kwargs: Any) -> Path:
    """Write :func:`profile_dot` to ``path``; returns the path."""
    text = profile_dot(profile, plan, **kwargs)
    out = Path(os.fspath(path))
    out.write_text(text, encoding="utf-8")
    return out


def missing_renderer() -> Optional[str]:
    """Why :func:`render` cannot render here (which of the ``graphviz``
    Python package and Graphviz's ``dot`` program is missing), or None."""
    try:
        import graphviz  # noqa: F401
    except ImportError:
        if shutil.which("dot") is None:
            return ("neither the graphviz Python package (pip install graphviz) nor Graphviz's "
                    "dot program is installed")
        return "the graphviz Python package is not installed: pip install graphviz"
    if shutil.which("dot") is None:
        return ("Graphviz's dot program is not on PATH (the graphviz Python package is "
                "installed): install Graphviz, e.g. apt-get install graphviz")
    return None


def can_render() -> bool:
    """True when the ``graphviz`` package and the ``dot`` program are installed."""
    return missing_renderer() is None


def render(profile: PathLike, path: PathLike, plan: Any = None, *, format: Optional[str] = None,
           **kwargs: Any) -> Tuple[Path, bool]:
    """Render the layer graph to ``path`` (format from its suffix, e.g.
    ``.svg`` / ``.png`` / ``.pdf``, or ``format=``) with the ``graphviz``
    package.  Without graphviz (package or ``dot`` program) the DOT text is
    written to ``path`` with the suffix ``.dot`` instead.  Returns (the file
    written, whether it was rendered)."""
    out = Path(os.fspath(path))
    fmt = format or out.suffix.lstrip(".") or "svg"
    text = profile_dot(profile, plan, **kwargs)
    if fmt != "dot" and can_render():
        import graphviz

        src = graphviz.Source(text)
        written = src.render(outfile=str(out), format=fmt, cleanup=True)
        # graphviz keeps the DOT source beside the output unless cleaned up
        return Path(written), True
    dot_path = out.with_suffix(".dot")
    dot_path.write_text(text, encoding="utf-8")
    return dot_path, False
