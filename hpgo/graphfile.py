"""Write (and read back) PipeDream ``graph.txt`` profiles plus a JSON sidecar.

A profile is a list of layers (nodes) and the data-flow edges between them.
Each node carries, for one mini-batch of ``batch_size`` samples:

* ``fwd_ms`` / ``bwd_ms``: forward and backward compute time in milliseconds;
* ``act_bytes``: bytes of the node's output activation;
* ``param_bytes``: bytes of the node's weights (batch independent).

The text format is the one HPGO / PipeDream read (spec/hpgo-compat.md, section 2)::

    node1 -- Input -- forward_compute_time=0.000000, backward_compute_time=0.000000, activation_size=4000.000, parameter_size=0.000
    node2 -- Layer_0 -- forward_compute_time=3.400000, ...
    <TAB>node1 -- node2

Node ids are ``node1``, ``node2``, ... in file order; the first node is an
``Input`` source (the planner drops ``Input`` sources, so its numbers never
count).  The JSON sidecar holds the same numbers under readable keys plus the
provenance (device, dtype, batch size, library versions, method).

Only the standard library is used.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import _files

__all__ = [
    "Node",
    "Profile",
    "ProfileFormatError",
    "write_graph",
    "write_json",
    "write_profile",
    "read_graph",
    "read_json",
    "format_graph",
    "parse_graph",
]

SEP = " -- "
JSON_FORMAT = "hpgo-profile/1"


class ProfileFormatError(ValueError):
    """A profile that cannot be written or read as a valid graph.txt."""


def clean_desc(text: str) -> str:
    """Return ``text`` made safe for the DESC field of a node line.

    Line breaks and tabs become spaces, the field separator `` -- `` becomes
    `` - `` and runs of spaces collapse, so the line always splits into
    exactly ID, DESC and META.  An empty result becomes ``"layer"``.
    """
    s = str(text).replace("\r", " ").replace("\n", " ").replace("\t", " ")
    s = " ".join(s.split())
    while "--" in s:
        s = s.replace("--", "-")
    return s or "layer"


@dataclass
class Node:
    """One layer of a profile (times for one mini-batch, sizes in bytes)."""

    desc: str
    fwd_ms: float
    bwd_ms: float
    act_bytes: float
    param_bytes: float
    extra: dict = field(default_factory=dict)  # free-form details (FLOPs, module path ...)

    def check(self, where: str) -> None:
        for name in ("fwd_ms", "bwd_ms", "act_bytes", "param_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ProfileFormatError(f"{where}: {name} must be a number, got {type(v).__name__}")
            if not math.isfinite(v) or v < 0:
                raise ProfileFormatError(f"{where}: {name} must be finite and >= 0, got {v!r}")


@dataclass
class Profile:
    """Nodes in file order, edges as (src, dst) 0-based node indices, metadata.

    ``meta`` should at least carry ``batch_size``; writers add it to the JSON
    sidecar verbatim (it must be JSON serialisable).
    """

    nodes: list[Node]
    edges: list[tuple[int, int]]
    meta: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise ProfileFormatError unless this is a valid, acyclic profile.

        Checks: at least two nodes, numbers finite and >= 0, edge indices in
        range and not self loops, the first node is an ``Input`` source,
        no other node's DESC starts with ``Input``, and the graph is acyclic.
        """
        n = len(self.nodes)
        if n < 2:
            raise ProfileFormatError("a profile needs an Input node and at least one layer")
        for i, nd in enumerate(self.nodes):
            if not isinstance(nd, Node):
                raise ProfileFormatError(f"node {i}: expected hpgo.graphfile.Node, got {type(nd).__name__}")
            nd.check(f"node {i} ({nd.desc!r})")
            if i > 0 and clean_desc(nd.desc).startswith("Input"):
                raise ProfileFormatError(
                    f"node {i} ({nd.desc!r}): only the first node may have a DESC starting with 'Input'")
        if not clean_desc(self.nodes[0].desc).startswith("Input"):
            raise ProfileFormatError(f"the first node must be the Input node, got {self.nodes[0].desc!r}")
        indeg = [0] * n
        out: list[list[int]] = [[] for _ in range(n)]
        for k, e in enumerate(self.edges):
            if len(e) != 2:
                raise ProfileFormatError(f"edge {k}: expected a (src, dst) pair, got {e!r}")
            s, d = e
            for v in (s, d):
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
                    raise ProfileFormatError(f"edge {k}: node index {v!r} out of range 0..{n - 1}")
            if s == d:
                raise ProfileFormatError(f"edge {k}: self loop on node {s}")
            indeg[d] += 1
            out[s].append(d)
        if indeg[0]:
            raise ProfileFormatError("the Input node must have no incoming edges")
        if not out[0]:
            raise ProfileFormatError("the Input node has no outgoing edges")
        # Kahn's algorithm for a cycle check
        deg = list(indeg)
        stack = [i for i in range(n) if deg[i] == 0]
        seen = 0
        while stack:
            v = stack.pop()
            seen += 1
            for w in out[v]:
                deg[w] -= 1
                if deg[w] == 0:
                    stack.append(w)
        if seen != n:
            raise ProfileFormatError("the graph has a cycle")

    # ----------------------------------------------------------------- totals
    def totals(self, include_input: bool = False) -> dict[str, float]:
        """Sums over nodes (the Input node excluded unless asked): fwd_ms,
        bwd_ms, act_bytes, param_bytes."""
        t = {"fwd_ms": 0.0, "bwd_ms": 0.0, "act_bytes": 0.0, "param_bytes": 0.0}
        for i, nd in enumerate(self.nodes):
            if i == 0 and not include_input and nd.desc.startswith("Input"):
                continue
            for k in t:
                t[k] += float(getattr(nd, k))
        return t


# ---------------------------------------------------------------------- text

def _fmt_time(x: float) -> str:
    return "%.6f" % float(x)


def _fmt_bytes(x: float) -> str:
    return "%.3f" % float(x)


def format_graph(profile: Profile) -> str:
    """Return the graph.txt text of ``profile`` (validated first)."""
    profile.validate()
    lines = []
    for i, nd in enumerate(profile.nodes):
        lines.append(
            f"node{i + 1}{SEP}{clean_desc(nd.desc)}{SEP}"
            f"forward_compute_time={_fmt_time(nd.fwd_ms)}, "
            f"backward_compute_time={_fmt_time(nd.bwd_ms)}, "
            f"activation_size={_fmt_bytes(nd.act_bytes)}, "
            f"parameter_size={_fmt_bytes(nd.param_bytes)}")
    for s, d in profile.edges:
        lines.append(f"\tnode{s + 1}{SEP}node{d + 1}")
    return "\n".join(lines) + "\n"


def _atomic_write(path: str | os.PathLike, text: str) -> None:
    path = os.fspath(path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    _files.atomic_write(path, text)


def write_graph(path: str | os.PathLike, profile: Profile) -> None:
    """Write ``profile`` as a PipeDream graph.txt (parent folders created)."""
    _atomic_write(path, format_graph(profile))


def profile_to_dict(profile: Profile) -> dict:
    profile.validate()
    return {
        "format": JSON_FORMAT,
        "meta": profile.meta,
        "units": {"fwd_ms": "milliseconds per mini-batch", "bwd_ms": "milliseconds per mini-batch",
                  "act_bytes": "bytes of output activation per mini-batch",
                  "param_bytes": "bytes of weights"},
        "totals": profile.totals(),
        "nodes": [
            {"id": f"node{i + 1}", "desc": clean_desc(nd.desc), "fwd_ms": float(nd.fwd_ms),
             "bwd_ms": float(nd.bwd_ms), "act_bytes": float(nd.act_bytes),
             "param_bytes": float(nd.param_bytes), **({"extra": nd.extra} if nd.extra else {})}
            for i, nd in enumerate(profile.nodes)
        ],
        "edges": [[f"node{s + 1}", f"node{d + 1}"] for s, d in profile.edges],
    }


def write_json(path: str | os.PathLike, profile: Profile) -> None:
    """Write the JSON sidecar (same numbers as graph.txt plus ``meta``)."""
    _atomic_write(path, json.dumps(profile_to_dict(profile), indent=1, sort_keys=False) + "\n")


def write_profile(out: str | os.PathLike, profile: Profile) -> tuple[str, str]:
    """Write ``graph.txt`` and ``profile.json``.

    ``out`` is a folder (created if needed) or a path ending in ``.txt``
    (then the JSON goes beside it with the suffix ``.json``).  Returns the
    two paths written.
    """
    out = os.fspath(out)
    if out.endswith(".txt"):
        gpath, jpath = out, out[:-4] + ".json"
    else:
        gpath, jpath = os.path.join(out, "graph.txt"), os.path.join(out, "profile.json")
    text = format_graph(profile)
    _atomic_write(gpath, text)
    write_json(jpath, profile)
    return gpath, jpath


# ---------------------------------------------------------------------- read

def _num(text: str, where: str) -> float:
    t = text.strip()
    if "[" in t:
        parts = t.strip("[]").split(";")
        try:
            return float(sum(float(p) for p in parts if p.strip()))
        except ValueError:
            raise ProfileFormatError(f"{where}: bad number list {t!r}") from None
    try:
        return float(t)
    except ValueError:
        raise ProfileFormatError(f"{where}: bad number {t!r}") from None


def parse_graph(text: str, name: str = "<text>") -> Profile:
    """Parse graph.txt text into a Profile (node indices in file order).

    Follows the reading rules of spec section 2 (lists of activation sizes
    are summed, CRLF accepted, empty lines skipped).  The Input-first rule is
    not enforced here so third-party files can be read; errors name the file
    and line.
    """
    nodes: list[Node] = []
    edges: list[tuple[int, int]] = []
    index: dict[str, int] = {}
    for ln, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        where = f"{name}:{ln}"
        if raw[0] in " \t":
            parts = line.split(SEP)
            if len(parts) != 2:
                raise ProfileFormatError(f"{where}: edge line must be 'SRC -- DST'")
            try:
                edges.append((index[parts[0].strip()], index[parts[1].strip()]))
            except KeyError as e:
                raise ProfileFormatError(f"{where}: edge names undeclared node {e.args[0]!r}") from None
            continue
        parts = line.split(SEP)
        if len(parts) not in (3, 4):
            raise ProfileFormatError(f"{where}: node line must be 'ID -- DESC -- META'")
        meta = parts[2].split(", ")
        if len(meta) != 4:
            raise ProfileFormatError(f"{where}: META must have 4 'key=value' items, got {len(meta)}")
        vals = []
        for item in meta:
            if "=" not in item:
                raise ProfileFormatError(f"{where}: META item {item!r} has no '='")
            vals.append(_num(item.split("=", 1)[1], where))
        nid = parts[0].strip()
        if nid in index:
            raise ProfileFormatError(f"{where}: node id {nid!r} declared twice")
        index[nid] = len(nodes)
        nodes.append(Node(parts[1], vals[0], vals[1], vals[2], vals[3]))
    return Profile(nodes, edges, {"source": name})


def read_graph(path: str | os.PathLike) -> Profile:
    """Read a graph.txt file (see parse_graph)."""
    return parse_graph(_files.read_text(path, "graph file"), os.fspath(path))


def read_json(path: str | os.PathLike) -> Profile:
    """Read a JSON sidecar written by write_json back into a Profile."""
    d = _files.load_json(path, "profile JSON file")
    if not isinstance(d, dict) or d.get("format") != JSON_FORMAT:
        raise ProfileFormatError(f"{os.fspath(path)}: not an {JSON_FORMAT} file")
    ids = {n["id"]: i for i, n in enumerate(d["nodes"])}
    nodes = [Node(n["desc"], n["fwd_ms"], n["bwd_ms"], n["act_bytes"], n["param_bytes"], n.get("extra", {}))
             for n in d["nodes"]]
    edges = [(ids[s], ids[t]) for s, t in d["edges"]]
    return Profile(nodes, edges, d.get("meta", {}))


def chain(descs_and_numbers: Iterable[tuple], meta: dict | None = None) -> Profile:
    """Convenience: a straight chain Input -> n1 -> n2 ... from tuples
    ``(desc, fwd_ms, bwd_ms, act_bytes, param_bytes)`` (first is the Input)."""
    nodes = [Node(*t) for t in descs_and_numbers]
    return Profile(nodes, [(i, i + 1) for i in range(len(nodes) - 1)], dict(meta or {}))
