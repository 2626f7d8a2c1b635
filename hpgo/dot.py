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

Long graphs stay readable: ``collapse=True`` merges each straight chain of
layers of one stage (one edge in, one edge out) into one node, and
``wrap=N`` (or ``"auto"``) cuts the graph by depth into N columns set side
by side, the edges between columns drawn without constraining the layout.
:func:`render` wraps deep graphs and collapses chains of graphs of more
than 60 layers: ResNet-50 (176 layers) renders 1,290 x 1,421 px instead of
416 x 16,181.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple, Union

from . import _core, _files
from .plan import STAGE_COLORS, Plan, _ranges

__all__ = ["COMPACT_ABOVE", "node_stages", "profile_dot", "write_dot", "render", "can_render",
           "missing_renderer"]

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


#: render() collapses chains and wraps graphs with more layers than this.
COMPACT_ABOVE = 60


def _chains(n: int, edges: List[Tuple[int, int]], key: List[Any]) -> List[int]:
    """Group of every node: maximal chains u -> v where u has one successor,
    v one predecessor and both the same ``key`` share a group (numbered in
    the order of their first node)."""
    succ: List[Set[int]] = [set() for _ in range(n)]
    pred: List[Set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            succ[a].add(b)
            pred[b].add(a)

    def joins(a: int) -> Optional[int]:
        if len(succ[a]) != 1:
            return None
        b = next(iter(succ[a]))
        return b if len(pred[b]) == 1 and key[a] == key[b] else None

    group = [-1] * n
    nxt = 0
    for v in range(n):
        if group[v] >= 0:
            continue
        # walk back to the chain's head, then forward over the chain
        head = v
        seen = {v}
        while len(pred[head]) == 1:
            u = next(iter(pred[head]))
            if u in seen or joins(u) != head:
                break
            head = u
            seen.add(u)
        w: Optional[int] = head
        while w is not None and group[w] < 0:
            group[w] = nxt
            w = joins(w)
        nxt += 1
    return group


def _depths(n: int, edges: List[Tuple[int, int]]) -> List[int]:
    """Longest-path depth of every node of a DAG (sources 0)."""
    succ: List[List[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b in set(edges):
        if a != b:
            succ[a].append(b)
            indeg[b] += 1
    depth = [0] * n
    order = [v for v in range(n) if indeg[v] == 0]
    for v in order:  # Kahn's order; the list grows while it is walked
        for w in succ[v]:
            depth[w] = max(depth[w], depth[v] + 1)
            indeg[w] -= 1
            if indeg[w] == 0:
                order.append(w)
    return depth


def profile_dot(profile: PathLike, plan: Any = None, *, name: Optional[str] = None,
                rankdir: str = "TB", clusters: bool = True, times: bool = True,
                max_label: int = 40, collapse: bool = False,
                wrap: Union[int, str] = 1) -> str:
    """DOT text of the profile's layer graph.

    ``plan``: a :class:`hpgo.plan.Plan` or HPGO's ``(speedup, stages)`` for
    this profile (its last state must be the profile's last).  ``clusters``
    groups the nodes of a stage in a labelled box; ``times`` adds forward /
    backward ms to each label; ``rankdir`` is Graphviz's ("TB", "LR", ...).
    ``collapse`` merges straight chains of one stage into one node (its
    first and last layer, the layer count and summed times); ``wrap``
    lays the graph out in that many columns by depth ("auto": about as
    tall as wide; stage clusters are left out when it wraps, the colours
    still tell the stages).
    """
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise ValueError(f"rankdir must be TB, LR, BT or RL, got {rankdir!r}")
    if not (wrap == "auto" or (isinstance(wrap, int) and not isinstance(wrap, bool)
                               and wrap >= 1)):
        raise ValueError(f"wrap must be a column count >= 1 or 'auto', got {wrap!r}")
    prof: Any = _core.read_profile(os.fspath(profile))
    nodes = prof["nodes"]
    stages = node_stages(prof, plan) if plan is not None else [None] * len(nodes)
    planned: Set[int] = set()
    for members in prof["states"]["sets"]:
        planned.update(members)
    p = _as_plan(plan) if plan is not None else None
    edges = [(a, b) for a, b in prof["edges"]]
    if collapse:
        group = _chains(len(nodes), edges, [(stages[i], i in planned) for i in range(len(nodes))])
    else:
        group = list(range(len(nodes)))
    n_groups = max(group) + 1 if group else 0
    members_of: List[List[int]] = [[] for _ in range(n_groups)]
    for i, g in enumerate(group):
        members_of[g].append(i)
    gedges: List[Tuple[int, int]] = []
    seen_e: Set[Tuple[int, int]] = set()
    for a, b in edges:
        e = (group[a], group[b])
        if e[0] != e[1] and (not collapse or e not in seen_e):
            seen_e.add(e)
            gedges.append(e)
    column = [0] * n_groups
    if wrap != 1 and n_groups:
        depth = _depths(n_groups, gedges)
        h = max(depth) + 1
        width = max(depth.count(d) for d in set(depth))
        if isinstance(wrap, int):
            cols = wrap
        else:  # about as tall as wide; shallow graphs stay in one column
            cols = 1 if h <= 20 else max(1, round((h / (2.5 * width)) ** 0.5))
        cols = min(cols, h)
        column = [d * cols // h for d in depth]
        if cols > 1:
            clusters = False
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

    def node_line(g: int) -> str:
        ms = members_of[g]
        i = ms[0]
        nid, desc, fwd, bwd, _act, _par = nodes[i]
        if len(ms) == 1:
            label = _clip(desc, max_label)
            tip = nid + ": " + desc
        else:
            last = nodes[ms[-1]][1]
            label = (f"{_clip(desc, max_label // 2)} ..\n{_clip(last, max_label // 2)}"
                     f"\n({len(ms)} layers)")
            fwd = sum(nodes[k][2] for k in ms)
            bwd = sum(nodes[k][3] for k in ms)
            tip = " -> ".join(nodes[k][1] for k in ms)
        if times:
            label += f"\n{fwd:.3g} / {bwd:.3g} ms"
        attrs = [f"label={_q(label)}", f"tooltip={_q(_clip(tip, 2000))}"]
        st = stages[i]
        if st is not None:
            attrs.append(f'fillcolor="{STAGE_COLORS[st % len(STAGE_COLORS)]}"')
        elif i not in planned:
            attrs.append('fillcolor="#eeeeee", style="rounded,filled,dashed", fontcolor="#666666"')
        return f"  n{g} [{', '.join(attrs)}];"

    gstage = [stages[members_of[g][0]] for g in range(n_groups)]
    if p is not None and clusters:
        for s in p.stages:
            members = [g for g, st in enumerate(gstage) if st == s.index]
            if not members:
                continue
            gpus = _ranges(s.gpus)
            lines.append(f"  subgraph cluster_stage{s.index} {{")
            lines.append(f"    label={_q(f'stage {s.index}: states {s.first_state}-{s.last_state}, GPUs {gpus}')};")
            lines.append(f'    style="rounded"; color="#888888";')
            lines.extend("  " + node_line(i) for i in members)
            lines.append("  }")
        lines.extend(node_line(g) for g, st in enumerate(gstage) if st is None)
    else:
        lines.extend(node_line(g) for g in range(n_groups))
    for a, b in gedges:
        # an edge into a later column does not constrain the ranks: each column
        # starts at the top, so the columns stand side by side
        lines.append(f"  n{a} -> n{b};" if column[a] == column[b] else
                     f'  n{a} -> n{b} [constraint=false, color="#999999"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(profile: PathLike, path: PathLike, plan: Any = None, **kwargs: Any) -> Path:
    """Write :func:`profile_dot` to ``path``; returns the path."""
    text = profile_dot(profile, plan, **kwargs)
    out = Path(os.fspath(path))
    _files.atomic_write(out, text)
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
           compact: Optional[bool] = None, **kwargs: Any) -> Tuple[Path, bool]:
    """Render the layer graph to ``path`` (format from its suffix, e.g.
    ``.svg`` / ``.png`` / ``.pdf``, or ``format=``) with the ``graphviz``
    package.  Without graphviz (package or ``dot`` program) the DOT text is
    written to ``path`` with the suffix ``.dot`` instead.  Deep graphs are
    wrapped in columns (``wrap="auto"``), and ``compact`` (default: for
    more than :data:`COMPACT_ABOVE` layers) also collapses chains.  Returns
    (the file written, whether it was rendered)."""
    out = Path(os.fspath(path))
    fmt = format or out.suffix.lstrip(".") or "svg"
    if compact is None:
        compact = len(_core.read_profile(os.fspath(profile), states=False)["nodes"]) > COMPACT_ABOVE
    kwargs.setdefault("wrap", "auto")
    if compact:
        kwargs.setdefault("collapse", True)
    text = profile_dot(profile, plan, **kwargs)
    if fmt != "dot" and can_render():
        import graphviz

        src = graphviz.Source(text)
        written = src.render(outfile=str(out), format=fmt, cleanup=True)
        # graphviz keeps the DOT source beside the output unless cleaned up
        return Path(written), True
    dot_path = out.with_suffix(".dot")
    _files.atomic_write(dot_path, text)
    return dot_path, False
