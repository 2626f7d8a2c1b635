"""The cluster a training step runs on: one GPU type and a hierarchy of
interconnect levels (inside a node, across nodes, ...).

Presets carry published figures (sources in ``csrc/step/cluster.c`` and
docs/training-model.md); every number can be overridden::

    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=8)
    c.gpus, c.gpus_per_node                         # 64, 8
    c2 = c.with_gpu(memory_bytes=40e9)              # a variant
    c.collective_time("all_reduce", 8, 50e6)        # seconds, priced by the C core
    c.save("mycluster.json"); hpgo.Cluster.load("mycluster.json")

Bandwidths are bytes/s per GPU and per direction, latencies seconds,
``efficiency`` the achieved fraction of the link rate.  The file format is
``hpgo/cluster.schema.json`` (a JSON Schema shipped with the package, which
:meth:`Cluster.load` checks); :meth:`Cluster.build` makes a cluster from a
GPU name, the GPUs per node and the network speed::

    hpgo.Cluster.build("a100-40gb", nodes=4, gpus_per_node=8, inter_node_gbps=200,
                       per_node=True)     # one 200 Gb/s NIC shared by a node's 8 GPUs

``efficiency`` the achieved fraction of the link rate.

Beyond the GPU and its links a cluster carries the host side and the
runtime: ``host_memory_bytes`` (CPU memory per node), ``host_bandwidth``
(bytes/s per GPU and direction over its PCIe link) and
``host_memory_bandwidth`` (a node's CPU memory bandwidth), which price
offloading; ``allocator_fragmentation`` (the share of the caching
allocator's reserved memory it cannot reuse: 0 by default; plans under
torchtitan's 2024 kernel sets are priced with at least
``hpgo.cluster.ALLOCATOR_FRAGMENTATION``, GMLake's 9.2 of 80 GB for the
stock allocator, which torchtitan's block reserved on one H100 with
expandable segments, see docs/training-model.md); ``jitter`` (the coefficient of
variation of one GPU's time between two synchronisations; the step waits
for the slowest of its GPUs; 0 by default: the published figures
disagree, see docs/training-model.md) and ``nccl_latency`` (price
collective latency with NCCL's own tuning model by algorithm, protocol,
ranks and nodes instead of ``latency`` per ring step).

Several GPU types: :meth:`Cluster.combine` joins homogeneous clusters
(presets, files or clusters) into one, its ``parts``, numbered part after
part, every pair of parts linked by ``join`` (a :class:`Level`: bytes/s
per GPU and direction, latency, efficiency)::

    mixed = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 4),
                                 hpgo.Cluster.preset("dgx-a100-80gb", 8), bandwidth=25e9)
    mixed.gpus                       # 96: GPUs 0..31 are H100, 32..95 A100
    slowed = mixed.with_speed({5: 1 / 1.5})   # GPU 5 runs 1.5x slower

``speeds`` lists GPUs that run at a factor of their type's rate (any
cluster, one type or several).  A cluster with parts repeats part 0's
``gpu``, ``levels`` and host fields in its own, so code that reads one GPU
type reads part 0.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from . import _core, _files

__all__ = ["GPU", "Level", "Cluster", "GPU_TYPES", "resolve", "ALLOCATOR_FRAGMENTATION",
           "part_prices", "plan_price"]

#: GPU names :meth:`Cluster.build` takes, and the preset each is read from
#: (its GPU, its NVLink level, and its inter-node latency and efficiency).
GPU_TYPES = {"v100": "dgx1-v100", "v100-32gb": "dgx1-v100", "v100-16gb": "dgx1-v100-16gb",
             "a100-40gb": "dgx-a100-40gb", "a100-80gb": "dgx-a100-80gb", "a100": "dgx-a100-80gb",
             "h100": "dgx-h100", "h100-80gb": "dgx-h100", "h100-96gb": "grand-teton-h100",
             "h100-pcie": "h100-pcie", "h200": "dgx-h200", "b200": "dgx-b200"}

#: share of reserved memory the PyTorch caching allocator cannot reuse
#: (GMLake, ASPLOS'24: 9.2 GB of an 80 GB A100 on average; csrc/step/cluster.h)
ALLOCATOR_FRAGMENTATION: float = _core.ALLOC_FRAG_GMLAKE

_COLL = {"all_reduce": _core.COLL_ALLREDUCE, "reduce_scatter": _core.COLL_REDUCE_SCATTER,
         "all_gather": _core.COLL_ALLGATHER, "all_to_all": _core.COLL_ALLTOALL}
_DT = {"fp32": 0, "tf32": 1, "bf16": 2, "fp8": 3}          # csrc/step/cluster.h HPGO_DT_
_KIND = {"vector": 0, "matrix": 1, "attention": 2}         # HPGO_OP_
_ALGO = {"auto": _core.ALGO_AUTO, "ring": _core.ALGO_RING,
         "hierarchical": _core.ALGO_HIERARCHICAL}


def _count(name: str, v: Any) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    n = v.__index__()
    if not 1 <= n <= 1 << 20:
        raise ValueError(f"{name} must be in 1..1048576, got {n}")
    return int(n)


def resolve(spec: "str | os.PathLike | Cluster", nodes: int | None = None) -> "Cluster":
    """A cluster from a preset name or a cluster file (``nodes`` resizes
    either).  A name that is neither: "no such cluster file" when it looks
    like a path (has a ``/`` or ends in ``.json``), else "unknown cluster
    preset" with the presets listed."""
    if isinstance(spec, Cluster):
        return spec.with_nodes(nodes) if nodes is not None else spec
    text = os.fspath(spec)
    if os.path.exists(text):
        c = Cluster.load(text)
        return c.with_nodes(nodes) if nodes is not None else c
    if text in Cluster.presets():
        return Cluster.preset(text, nodes=nodes)
    if os.sep in text or "/" in text or text.lower().endswith(".json"):
        raise FileNotFoundError(2, "no such cluster file", text)
    raise ValueError(f"unknown cluster preset {text!r} (presets: "
                     f"{', '.join(Cluster.presets())}; or a cluster file)")


_SYSTEM = ("host_memory_bytes", "host_bandwidth", "host_memory_bandwidth",
           "allocator_fragmentation", "jitter", "nccl_latency")


def _steps(name: str, v: Any) -> tuple[tuple[float, float], ...]:
    try:
        out = tuple((float(t), float(e)) for t, e in v)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of (threshold, efficiency) pairs") from None
    return out


@dataclass(frozen=True)
class GPU:
    """One GPU type: dense peaks (FLOP/s), HBM, and efficiency step tables
    (the achieved fraction of peak for an op of at least `threshold` FLOP,
    or bytes for memory).  A peak of 0 means the data type is not supported.
    ``fp8_matrix_efficiency`` (fp8 GEMMs) and ``attention_efficiency`` (fused
    attention kernels) are optional: empty, the matrix curve applies; a
    measured GPU (:mod:`hpgo.calibrate`) has both.  ``multiprocessors`` (SMs;
    0: unknown) lets the step model charge the SMs that communication kernels
    take from compute they overlap with.  ``power_limit`` (W; 0: none) is a
    board power limit below what the curves were measured at: compute-bound
    kernels then run at the clock that limit leaves (Hopper SXM dies only,
    from the power measured on an H100 SXM5; docs/training-model.md, "Power
    limits"); ``grand-teton-h100`` sets 500."""

    name: str
    fp32_flops: float
    tf32_flops: float
    bf16_flops: float
    fp8_flops: float
    vector_flops: float
    memory_bytes: float
    memory_bandwidth: float
    matrix_efficiency: tuple[tuple[float, float], ...]
    vector_efficiency: tuple[tuple[float, float], ...]
    memory_efficiency: tuple[tuple[float, float], ...]
    fp8_matrix_efficiency: tuple[tuple[float, float], ...] = ()
    attention_efficiency: tuple[tuple[float, float], ...] = ()
    multiprocessors: int = 0
    power_limit: float = 0.0

    def __post_init__(self) -> None:
        for f in ("matrix_efficiency", "vector_efficiency", "memory_efficiency",
                  "fp8_matrix_efficiency", "attention_efficiency"):
            object.__setattr__(self, f, _steps(f, getattr(self, f)))
        if isinstance(self.multiprocessors, bool) or not isinstance(self.multiprocessors, int):
            raise TypeError("multiprocessors must be an int (0: unknown)")
        if isinstance(self.power_limit, bool) or not isinstance(self.power_limit, (int, float)):
            raise TypeError("power_limit must be a number of watts (0: none)")
        if not (self.power_limit >= 0) or self.power_limit == float("inf"):
            raise ValueError(f"power_limit must be a finite number of watts >= 0 (0: none), "
                             f"got {self.power_limit!r}")

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s of ``"fp32"``, ``"tf32"``, ``"bf16"`` (= fp16) or ``"fp8"``."""
        key = {"fp16": "bf16"}.get(dtype, dtype)
        if key not in ("fp32", "tf32", "bf16", "fp8"):
            raise ValueError(f"unknown dtype {dtype!r}")
        return float(getattr(self, key + "_flops"))


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy: ``size`` units of the level below (level
    0: GPUs per node), point-to-point ``bandwidth`` and ``collective_bandwidth``
    (HPGO prices them apart; defaults to ``bandwidth``), per-step ``latency``
    and achieved ``efficiency``."""

    size: int
    bandwidth: float
    latency: float = 0.0
    efficiency: float = 1.0
    collective_bandwidth: float | None = None

    def __post_init__(self) -> None:
        if self.collective_bandwidth is None:
            object.__setattr__(self, "collective_bandwidth", self.bandwidth)


@dataclass(frozen=True)
class Cluster:
    """A homogeneous GPU cluster (see the module docstring)."""

    name: str
    gpu: GPU
    levels: tuple[Level, ...]
    host_memory_bytes: float = 0.0
    host_bandwidth: float = 0.0
    host_memory_bandwidth: float = 0.0
    allocator_fragmentation: float = 0.0
    jitter: float = 0.0
    nccl_latency: bool = False
    parts: tuple["Cluster", ...] = ()
    join: Level | None = None
    speeds: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.gpu, GPU):
            raise TypeError("gpu must be an hpgo.GPU")
        self._init_parts()
        if not isinstance(self.nccl_latency, bool):
            raise TypeError("nccl_latency must be a bool")
        for f in ("host_memory_bytes", "host_bandwidth", "host_memory_bandwidth",
                  "allocator_fragmentation", "jitter"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{f} must be a number")
        lv = tuple(self.levels)
        if not all(isinstance(x, Level) for x in lv):
            raise TypeError("levels must be hpgo.Level values")
        object.__setattr__(self, "levels", lv)
        _core._step_cluster_check(self._tuple())

    def _init_parts(self) -> None:
        """Normalise and check parts, join and speeds (their C checks follow)."""
        parts = self.parts
        if isinstance(parts, (str, bytes)) or not hasattr(parts, "__iter__"):
            raise TypeError("parts must be a sequence of hpgo.Cluster")
        parts = tuple(parts)
        for k, q in enumerate(parts):
            if not isinstance(q, Cluster):
                raise TypeError(f"parts[{k}] must be an hpgo.Cluster, not {type(q).__name__}")
            if q.parts:
                raise ValueError(f"parts[{k}] ({q.name}): a part cannot have parts of its own")
            if q.speeds:
                raise ValueError(f"parts[{k}] ({q.name}): slowed GPUs belong to the whole "
                                 "cluster (its speeds), not to a part")
        if len(parts) == 1:
            raise ValueError("parts: a cluster of several GPU types has at least 2 parts "
                             "(none for one type)")
        object.__setattr__(self, "parts", parts)
        if parts:
            if not isinstance(self.join, Level):
                raise TypeError("a cluster with parts needs join, an hpgo.Level linking them")
            object.__setattr__(self, "join", dataclasses.replace(self.join, size=len(parts)))
            p0 = parts[0]
            # the fields of one type repeat part 0's (module docstring)
            object.__setattr__(self, "gpu", p0.gpu)
            object.__setattr__(self, "levels", p0.levels)
            for f in _SYSTEM:
                object.__setattr__(self, f, getattr(p0, f))
        elif self.join is not None:
            raise ValueError("join links parts: a cluster without parts has none")
        sp: Any = self.speeds
        if isinstance(sp, Mapping):
            sp = sp.items()
        try:
            items = [(k, v) for k, v in sp]
        except (TypeError, ValueError):
            raise TypeError("speeds must be (gpu index, speed factor) pairs") from None
        out: dict[int, float] = {}
        n = self.gpus
        for k, v in items:
            if isinstance(k, bool) or not hasattr(k, "__index__"):
                raise TypeError(f"speeds: a GPU index must be an int, not {type(k).__name__}")
            i = k.__index__()
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"speeds: GPU {i}'s speed factor must be a number")
            if not 0 <= i < n:
                raise ValueError(f"speeds: GPU {i} is not in the cluster's {n} GPUs "
                                 f"(0..{n - 1})")
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"speeds: GPU {i}'s speed factor must be a finite number > 0, "
                                 f"got {v!r}")
            if i in out:
                raise ValueError(f"speeds: GPU {i} is listed twice")
            out[i] = float(v)
        object.__setattr__(self, "speeds", tuple(sorted(out.items())))

    # -- construction ---------------------------------------------------------
    @classmethod
    def combine(cls, *clusters: "str | os.PathLike | Cluster", bandwidth: float,
                latency: float = 0.0, efficiency: float = 1.0,
                name: str | None = None) -> "Cluster":
        """One cluster of several GPU types: the homogeneous ``clusters``
        (presets, cluster files or :class:`Cluster` values; a preset's own
        node count) as its parts, GPUs numbered part after part, any two
        parts linked at ``bandwidth`` (bytes/s per GPU and direction),
        ``latency`` (seconds) and ``efficiency``.  The parts' slowed GPUs
        move to the whole cluster's ``speeds``."""
        if len(clusters) < 2:
            raise ValueError("combine needs at least two clusters")
        if len(clusters) > _core.CLUSTER_MAX_PARTS:
            raise ValueError(f"combine joins at most {_core.CLUSTER_MAX_PARTS} clusters")
        for f, v in (("bandwidth", bandwidth), ("latency", latency),
                     ("efficiency", efficiency)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{f} must be a number")
        if not (math.isfinite(bandwidth) and bandwidth > 0):
            raise ValueError(f"bandwidth must be a finite number of bytes/s > 0, got {bandwidth!r}")
        parts, speeds, first = [], [], 0
        for k, x in enumerate(clusters):
            q = resolve(x) if isinstance(x, (str, os.PathLike)) else x
            if not isinstance(q, Cluster):
                raise TypeError(f"combine: argument {k + 1} must be a preset name, a cluster "
                                f"file or an hpgo.Cluster, not {type(x).__name__}")
            if q.parts:
                raise ValueError(f"combine: argument {k + 1} ({q.name}) has several GPU types "
                                 "already; combine its parts instead")
            speeds += [(first + i, v) for i, v in q.speeds]
            parts.append(dataclasses.replace(q, speeds=()))
            first += q.gpus
        label = name if name is not None else "+".join(f"{q.nodes}x{q.name}" for q in parts)
        if not isinstance(label, str):
            raise TypeError("name must be a str")
        p0 = parts[0]
        return cls(label, p0.gpu, p0.levels, parts=tuple(parts),
                   join=Level(len(parts), float(bandwidth), latency=float(latency),
                              efficiency=float(efficiency)),
                   speeds=tuple(speeds))

    def with_speed(self, speeds: "Mapping[int, float]") -> "Cluster":
        """The same cluster with GPUs (cluster indices) running at a factor
        of their type's rate: ``{5: 1 / 1.5}`` slows GPU 5 1.5x; a factor of
        1 restores a GPU; the others keep their factors."""
        if not isinstance(speeds, Mapping):
            raise TypeError("with_speed takes a mapping {gpu index: speed factor}")
        cur = dict(self.speeds)
        for k, v in speeds.items():
            if isinstance(k, bool) or not hasattr(k, "__index__"):
                raise TypeError(f"with_speed: a GPU index must be an int, not {type(k).__name__}")
            cur[k.__index__()] = v
        new = tuple((k, v) for k, v in cur.items()
                    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 1))
        return dataclasses.replace(self, speeds=new)

    def speed(self, gpu: int) -> float:
        """The speed factor of cluster GPU ``gpu`` (1: its type's rate)."""
        return dict(self.speeds).get(gpu, 1.0)

    @property
    def kinds(self) -> tuple["Cluster", ...]:
        """The homogeneous parts (the cluster itself when it has one GPU type)."""
        return self.parts or (dataclasses.replace(self, speeds=()),)

    def part_index(self, gpu: "str | int | None") -> int:
        """The part a StageGroup's ``gpu`` names: an index, a GPU type
        (``"H100-SXM5-80GB"``, or the short names of :data:`GPU_TYPES` such
        as ``"h100"``) or a part's name; None is part 0."""
        n = len(self.parts) or 1
        if gpu is None:
            return 0
        if not isinstance(gpu, str):
            if isinstance(gpu, bool) or not hasattr(gpu, "__index__"):
                raise TypeError(f"gpu must be a part index or a GPU type name, not "
                                f"{type(gpu).__name__}")
            k = gpu.__index__()
            if not 0 <= k < n:
                raise ValueError(f"gpu: part {k} is not one of the cluster's {n} part(s)")
            return k
        key = gpu.strip().lower()
        kinds = self.kinds
        hits = [k for k, q in enumerate(kinds) if key in (q.gpu.name.lower(), q.name.lower())]
        if not hits and key in GPU_TYPES:
            want = _core._step_cluster_preset(GPU_TYPES[key], 1)[1].lower()
            hits = [k for k, q in enumerate(kinds) if q.gpu.name.lower() == want]
        if len(hits) == 1:
            return hits[0]
        names = ", ".join(f"{k}: {q.gpu.name} ({q.name})" for k, q in enumerate(kinds))
        if hits:
            raise ValueError(f"gpu {gpu!r} names several parts ({names}): give the part index")
        raise ValueError(f"gpu {gpu!r} is none of the cluster's parts ({names})")

    def _with_memory_factor(self, f: float) -> "Cluster":
        """Every GPU type's memory times ``f`` (the headroom a plan keeps free)."""
        if self.parts:
            return dataclasses.replace(self, parts=tuple(q._with_memory_factor(f)
                                                         for q in self.parts))
        return self.with_gpu(memory_bytes=self.gpu.memory_bytes * f)

    @classmethod
    def preset(cls, name: str, nodes: int | None = None) -> "Cluster":
        """A preset (``hpgo.Cluster.presets()``) with ``nodes`` nodes (default:
        the preset's own, 1 for DGX presets, 2 for ``"dapple-v100"``)."""
        if not isinstance(name, str):
            raise TypeError("preset name must be a str")
        if nodes is None:
            n = 0
        else:
            if isinstance(nodes, bool) or not hasattr(nodes, "__index__"):
                raise TypeError(f"nodes must be an int, not {type(nodes).__name__}")
            n = nodes.__index__()
            if not 1 <= n <= 1 << 20:
                raise ValueError(f"nodes must be in 1..1048576, got {n}")
        return cls._from_tuple(_core._step_cluster_preset(name, n))

    @classmethod
    def build(cls, gpu: str, *, nodes: int = 1, gpus_per_node: int | None = None,
              inter_node_gbps: float | None = None, per_node: bool = False,
              name: str | None = None) -> "Cluster":
        """A cluster of ``nodes`` nodes of ``gpus_per_node`` GPUs of type
        ``gpu`` (:data:`GPU_TYPES`: ``"a100-40gb"``, ``"h100"``, ...).  The
        GPU, the NVLink level and the inter-node latency and efficiency come
        from the GPU's DGX preset; ``inter_node_gbps`` sets the network in
        gigabits/s per GPU (a GPU per NIC, as DGX nodes), or per node with
        ``per_node=True`` (shared by the node's GPUs).  Default: the preset's
        network."""
        if not isinstance(gpu, str):
            raise TypeError(f"gpu must be a GPU name, not {type(gpu).__name__}")
        key = gpu.strip().lower()
        if key not in GPU_TYPES:
            raise ValueError(f"unknown GPU {gpu!r} (known: {', '.join(GPU_TYPES)})")
        base = cls.preset(GPU_TYPES[key], nodes=1)
        n = _count("nodes", nodes)
        g = base.gpus_per_node if gpus_per_node is None else _count("gpus_per_node",
                                                                       gpus_per_node)
        inner = dataclasses.replace(base.levels[0], size=g)
        outer = base.levels[1] if len(base.levels) > 1 else Level(1, 25e9)
        outer = dataclasses.replace(outer, size=n)
        if inter_node_gbps is not None:
            if isinstance(inter_node_gbps, bool) or not isinstance(inter_node_gbps, (int, float)):
                raise TypeError("inter_node_gbps must be a number (gigabits/s)")
            if not (0 < inter_node_gbps < float("inf")):
                raise ValueError(f"inter_node_gbps must be > 0, got {inter_node_gbps!r}")
            bw = inter_node_gbps * 1e9 / 8 / (g if per_node else 1)   # Gb/s -> bytes/s per GPU
            outer = dataclasses.replace(outer, bandwidth=bw, collective_bandwidth=bw)
        label = name or (f"{n}x{g}-{key}" + (f"-{inter_node_gbps:g}gbps"
                                             + ("-per-node" if per_node else "")
                                             if inter_node_gbps is not None else ""))
        return cls(label, base.gpu, (inner, outer))

    @staticmethod
    def presets() -> tuple[str, ...]:
        return tuple(_core._step_cluster_presets())

    @classmethod
    def _from_tuple(cls, t: tuple) -> "Cluster":
        name, gname, peaks, vec, hbm, hbw, ms, vs, mems, levels, f8, att, smw, sy = t[:14]
        gpu = GPU(gname, *peaks, vec, hbm, hbw, ms, vs, mems, f8, att, smw[0], smw[1])
        lv = tuple(Level(size=s, bandwidth=b, collective_bandwidth=cb, latency=lat, efficiency=e)
                   for s, b, cb, lat, e in levels)
        hm, hb, hmb, frag, jit, nccl = sy
        return cls(name, gpu, lv, host_memory_bytes=hm, host_bandwidth=hb,
                   host_memory_bandwidth=hmb, allocator_fragmentation=frag, jitter=jit,
                   nccl_latency=bool(nccl))

    def _tuple(self) -> tuple:
        g = self.gpu
        return (str(self.name), str(g.name),
                (g.fp32_flops, g.tf32_flops, g.bf16_flops, g.fp8_flops), g.vector_flops,
                g.memory_bytes, g.memory_bandwidth, g.matrix_efficiency, g.vector_efficiency,
                g.memory_efficiency,
                tuple((lv.size, lv.bandwidth, lv.collective_bandwidth, lv.latency, lv.efficiency)
                      for lv in self.levels),
                g.fp8_matrix_efficiency, g.attention_efficiency,
                (g.multiprocessors, float(g.power_limit)),
                (float(self.host_memory_bytes), float(self.host_bandwidth),
                 float(self.host_memory_bandwidth), float(self.allocator_fragmentation),
                 float(self.jitter), int(self.nccl_latency)),
                tuple(q._tuple() for q in self.parts),
                None if self.join is None else
                (self.join.size, self.join.bandwidth, self.join.collective_bandwidth,
                 self.join.latency, self.join.efficiency),
                tuple(self.speeds))

    # -- shape ----------------------------------------------------------------
    @property
    def gpus(self) -> int:
        """GPUs of the cluster (over all parts)."""
        if self.parts:
            return sum(q.gpus for q in self.parts)
        return math.prod(lv.size for lv in self.levels)

    @property
    def gpus_per_node(self) -> int:
        """GPUs in a node (part 0's with parts)."""
        return self.levels[0].size

    @property
    def nodes(self) -> int:
        """Nodes of the cluster (over all parts)."""
        if self.parts:
            return sum(q.nodes for q in self.parts)
        return self.gpus // self.gpus_per_node

    def _one_type(self, what: str) -> None:
        if self.parts:
            raise ValueError(f"{what} changes a cluster of one GPU type; this one has "
                             f"{len(self.parts)} parts: change them (cluster.parts[k]) and "
                             "combine them again")

    def with_nodes(self, nodes: int) -> "Cluster":
        """The same cluster with ``nodes`` nodes (level 1 resized)."""
        self._one_type("with_nodes")
        if len(self.levels) < 2:
            raise ValueError("a one-level cluster has no nodes to change")
        lv = list(self.levels)
        lv[1] = dataclasses.replace(lv[1], size=nodes)
        return dataclasses.replace(self, levels=tuple(lv))

    def with_spine(self, pod_nodes: int, oversubscription: float) -> "Cluster":
        """The same cluster with its nodes grouped into pods of ``pod_nodes``
        at full bisection and an oversubscribed tier above them: a new top
        level whose bandwidths are the node level's divided by
        ``oversubscription`` (Llama 3's fabric: 3,072-GPU pods, 1:7 above),
        so that groups spanning pods share the spine."""
        self._one_type("with_spine")
        if len(self.levels) != 2:
            raise ValueError("with_spine needs a two-level cluster (GPUs in nodes, nodes)")
        if isinstance(pod_nodes, bool) or not hasattr(pod_nodes, "__index__"):
            raise TypeError("pod_nodes must be an int")
        k = pod_nodes.__index__()
        nodes = self.levels[1].size
        if k < 1 or nodes % k:
            raise ValueError(f"pod_nodes must divide the {nodes} nodes, got {k}")
        if isinstance(oversubscription, bool) or not isinstance(oversubscription, (int, float)) \
                or not 1.0 <= oversubscription < math.inf:
            raise ValueError(f"oversubscription must be a number >= 1, got {oversubscription!r}")
        net = self.levels[1]
        pod = dataclasses.replace(net, size=k)
        spine = dataclasses.replace(net, size=nodes // k,
                                    bandwidth=net.bandwidth / oversubscription,
                                    collective_bandwidth=net.collective_bandwidth / oversubscription)
        return dataclasses.replace(self, levels=(self.levels[0], pod, spine))

    def with_gpu(self, **changes: Any) -> "Cluster":
        """The same cluster with GPU fields changed (``memory_bytes=``, ...)."""
        self._one_type("with_gpu")
        return dataclasses.replace(self, gpu=dataclasses.replace(self.gpu, **changes))

    # -- costs (priced by csrc/step/cost.c) ------------------------------------------
    def collective_time(self, op: str, group: int, nbytes: float, *, stride: int = 1,
                        algorithm: str = "auto") -> float:
        """Seconds of ``op`` (``"all_reduce"``, ``"reduce_scatter"``,
        ``"all_gather"``, ``"all_to_all"``) over ``group`` GPUs ``stride`` apart
        (ranks node-major) on a buffer of ``nbytes`` (the per-rank send buffer
        for all-to-all); ``algorithm`` ``"ring"``, ``"hierarchical"`` or ``"auto"``."""
        if op not in _COLL:
            raise ValueError(f"op must be one of {sorted(_COLL)}, got {op!r}")
        if algorithm not in _ALGO:
            raise ValueError(f"algorithm must be one of {sorted(_ALGO)}, got {algorithm!r}")
        return _core._step_collective_time(self._tuple(), _COLL[op], group, stride, nbytes,
                                           _ALGO[algorithm])

    def p2p_time(self, nbytes: float, level: int = 0) -> float:
        """Seconds of a point-to-point transfer between two GPUs whose lowest
        common unit is ``level`` (0: same node)."""
        return _core._step_p2p_time(self._tuple(), level, nbytes)

    def kernel_time(self, flops: float, nbytes: float = 0.0, *, dtype: str = "bf16",
                    kind: str = "matrix") -> float:
        """Seconds of one kernel of ``flops`` FLOPs and ``nbytes`` bytes of HBM
        traffic on this cluster's GPU, as the training-step model prices it;
        ``kind`` ``"matrix"`` (a GEMM), ``"attention"`` (a fused attention
        kernel) or ``"vector"`` (element-wise)."""
        if kind not in _KIND:
            raise ValueError(f"kind must be one of {sorted(_KIND)}, got {kind!r}")
        key = {"fp16": "bf16"}.get(dtype, dtype)
        if key not in _DT:
            raise ValueError(f"dtype must be one of {sorted(_DT)}, got {dtype!r}")
        return _core._step_kernel_time(self._tuple(), _DT[key], _KIND[kind], flops, nbytes)

    # -- JSON -----------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON description (``hpgo/cluster.schema.json``): with parts,
        ``parts`` (each a homogeneous cluster without ``format``) and
        ``join`` instead of ``gpu`` and ``levels``; ``speeds`` when GPUs are
        slowed."""
        d: dict[str, Any] = {"format": "hpgo-cluster-1", "name": self.name}
        if self.parts:
            d["parts"] = [{k: v for k, v in q.to_dict().items() if k != "format"}
                          for q in self.parts]
            j = self.join
            assert j is not None
            d["join"] = {"bandwidth": j.bandwidth, "latency": j.latency,
                         "efficiency": j.efficiency,
                         "collective_bandwidth": j.collective_bandwidth}
        else:
            d.update({"gpu": dataclasses.asdict(self.gpu),
                      "levels": [dataclasses.asdict(lv) for lv in self.levels],
                      **{f: getattr(self, f) for f in _SYSTEM}})
        if self.speeds:
            d["speeds"] = [[i, v] for i, v in self.speeds]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "cluster") -> "Cluster":
        """A cluster from its JSON description, checked against
        ``hpgo/cluster.schema.json`` first: a ValueError names ``where`` and
        the field (``gpu.memory_bytes``, ``levels[1].bandwidth``)."""
        from . import _schema

        if isinstance(d, Mapping) and d.get("format") != "hpgo-cluster-1":
            raise ValueError(f"{where}: not an hpgo-cluster-1 description (its \"format\" is "
                             f"{d.get('format')!r}; `hpgo cluster dgx-h100` prints an example)")
        _schema.check(d, _schema.load_schema("cluster"), where)
        if "parts" in d:
            bad = [k for k in ("gpu", "levels", *_SYSTEM) if k in d]
            if bad:
                raise ValueError(f"{where}: a cluster with parts describes its GPUs in each part; "
                                 f"{bad[0]} belongs in parts[k]")
            if "join" not in d:
                raise ValueError(f"{where}: join: a cluster with parts needs join, the link "
                                 "between parts (bandwidth, latency, efficiency)")
            parts = tuple(cls.from_dict({"format": "hpgo-cluster-1", **dict(q)},
                                        where=f"{where}: parts[{k}]")
                          for k, q in enumerate(d["parts"]))
            j = d["join"]
            try:
                return cls(str(d["name"]), parts[0].gpu, parts[0].levels, parts=parts,
                           join=Level(len(parts), **dict(j)),
                           speeds=tuple(tuple(x) for x in d.get("speeds", ())))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}: {e}") from None
        if "join" in d:
            raise ValueError(f"{where}: join: links parts, and this cluster has none")
        for k in ("gpu", "levels"):
            if k not in d:
                raise ValueError(f"{where}: (top level): missing field '{k}' (a cluster has "
                                 "gpu and levels, or parts and join)")
        try:
            if d.get("format") != "hpgo-cluster-1":
                raise ValueError("not an hpgo-cluster-1 description")
            if not isinstance(d.get("gpu"), Mapping):
                raise ValueError("malformed cluster description: gpu must be an object of GPU "
                                 f"fields, not {d.get('gpu')!r:.60}")
            lvs = d.get("levels")
            if not isinstance(lvs, list) or not all(isinstance(x, Mapping) for x in lvs):
                raise ValueError("malformed cluster description: levels must be a list of "
                                 f"objects (size, bandwidth, ...), not {lvs!r:.60}")
            if not isinstance(d.get("name"), str):
                raise ValueError("malformed cluster description: name must be a string, not "
                                 f"{d.get('name')!r:.60}")
            g = dict(d["gpu"])
            gpu = GPU(**g)
            levels = tuple(Level(**dict(x)) for x in d["levels"])
            sysf = {f: d[f] for f in _SYSTEM if f in d}
            return cls(str(d["name"]), gpu, levels, **sysf,
                       speeds=tuple(tuple(x) for x in d.get("speeds", ())))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{where}: malformed cluster description ({e})") from None
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the JSON description atomically (a failed write leaves the old file)."""
        _files.atomic_write(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Cluster":
        where = os.fspath(path)
        d = _files.load_json(where, "cluster file")
        if not isinstance(d, dict):
            raise ValueError(f"{where}: a cluster description is a JSON object")
        return cls.from_dict(d, where=where)

    def describe(self) -> str:
        """Every figure of the cluster, with its unit (``hpgo cluster`` prints it)."""
        if self.parts:
            j = self.join
            assert j is not None
            kinds = ", ".join(f"{q.gpus} {q.gpu.name}" for q in self.parts)
            out = [f"{self.name}: {len(self.parts)} parts, {self.gpus} GPUs ({kinds})",
                   f"  between parts: {j.bandwidth / 1e9:g} GB/s per GPU "
                   f"({j.bandwidth * 8 / 1e9:g} Gb/s), latency {j.latency * 1e6:g} us, "
                   f"efficiency {j.efficiency:g}"]
            first = 0
            for k, q in enumerate(self.parts):
                out.append(f"  part {k}, GPUs {first}..{first + q.gpus - 1}: "
                           + q.describe().replace("\n", "\n    "))
                first += q.gpus
        else:
            out = self._describe_one().split("\n")
        for i, v in self.speeds:
            out.append(f"  GPU {i} runs at {v:g}x its type's rate"
                       + (f" (slowed {1 / v:.3g}x)" if v < 1 else ""))
        return "\n".join(out)

    def with_power_limit(self, watts: float) -> "Cluster":
        """This cluster with its GPUs held to ``watts`` of board power (0:
        none): compute-bound kernels run at the clock the limit leaves
        (Hopper SXM dies; ``ValueError`` for others, and for a cluster of
        several GPU types: set it on a part)."""
        if self.parts:
            raise ValueError("power_limit is per GPU type: set it on a part before combining")
        if isinstance(watts, bool) or not isinstance(watts, (int, float)):
            raise TypeError("power limit must be a number of watts")
        c = dataclasses.replace(self, gpu=dataclasses.replace(self.gpu,
                                                              power_limit=float(watts)))
        c.kernel_time(1.0, 0)      # the core's checks (the die, the least limit)
        return c

    def clock_factor(self) -> float:
        """The rate of compute-bound kernels as a share of what the GPU's
        curves describe: below 1 where ``gpu.power_limit`` leaves a lower
        clock (docs/training-model.md, "Power limits"), else 1."""
        if not self.gpu.power_limit:
            return 1.0
        free = dataclasses.replace(self, gpu=dataclasses.replace(self.gpu, power_limit=0.0),
                                   parts=(), join=None, speeds=()) if not self.parts else None
        if free is None:
            raise ValueError("clock_factor is per GPU type: ask a part (cluster.parts[i])")
        return free.kernel_time(1e15, 0) / self.kernel_time(1e15, 0)

    def _describe_one(self) -> str:
        g = self.gpu
        out = [f"{self.name}: {self.nodes} node(s) x {self.gpus_per_node} {g.name} = "
               f"{self.gpus} GPUs",
               f"  GPU: {g.memory_bytes / 1e9:g} GB HBM at {g.memory_bandwidth / 1e12:g} TB/s; "
               f"dense peaks bf16 {g.bf16_flops / 1e12:g}, fp8 {g.fp8_flops / 1e12:g}, "
               f"tf32 {g.tf32_flops / 1e12:g}, fp32 {g.fp32_flops / 1e12:g} TFLOP/s; "
               f"{'measured' if g.name.endswith('(measured)') else 'preset'} efficiency curves"]
        if g.power_limit > 0:
            out.append(f"  power limit {g.power_limit:g} W: compute-bound kernels at "
                       f"{self.clock_factor():.3f} of the curves' clock (memory-bound ones "
                       f"unchanged)")
        names = ["inside a node", "across nodes"] + [f"level {i}" for i in range(2, 8)]
        for i, lv in enumerate(self.levels):
            out.append(f"  {names[i]}: {lv.size} x, {lv.bandwidth / 1e9:g} GB/s per GPU "
                       f"({lv.bandwidth * 8 / 1e9:g} Gb/s), latency {lv.latency * 1e6:g} us, "
                       f"efficiency {lv.efficiency:g}")
        return "\n".join(out)

    def __repr__(self) -> str:
        sp = f", {len(self.speeds)} GPU(s) at another speed" if self.speeds else ""
        if self.parts:
            return (f"Cluster({self.name}: " + " + ".join(
                f"{q.gpus} x {q.gpu.name}" for q in self.parts)
                + f", {self.join.bandwidth / 1e9:.1f} GB/s between parts{sp})")  # type: ignore
        lv = " x ".join(str(x.size) for x in self.levels)
        return (f"Cluster({self.name}: {self.gpus} x {self.gpu.name} ({lv}), "
                f"{self.gpu.memory_bytes / 1e9:.0f} GB, "
                f"{self.levels[0].bandwidth / 1e9:.0f} GB/s in a node"
                + (f", {self.levels[1].bandwidth / 1e9:.1f} GB/s across" if len(self.levels) > 1 else "")
                + sp + ")")



def part_prices(cluster: Cluster, price: "float | Mapping[str, float] | None",
                name: str = "price") -> tuple[float, ...] | None:
    """Dollars per GPU-hour of each part of ``cluster`` (one entry for a
    one-type cluster): ``price`` a number (every GPU) or a mapping from a GPU
    type (``"h100"``, ``"A100-SXM4-80GB"``, a part's name or index, as
    :meth:`Cluster.part_index` reads them) to its price, one for each part."""
    if price is None:
        return None
    n = len(cluster.kinds)
    if not isinstance(price, Mapping):
        if isinstance(price, bool) or not isinstance(price, (int, float)):
            raise TypeError(f"{name} must be a number (dollars per GPU-hour) or a mapping "
                            f"GPU type -> dollars per GPU-hour, not {type(price).__name__}")
        if not (math.isfinite(price) and price > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {price!r}")
        return (float(price),) * n
    out: list[float | None] = [None] * n
    for key, v in price.items():
        k = cluster.part_index(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                math.isfinite(v) and v > 0):
            raise ValueError(f"{name}[{key!r}] must be a finite number > 0 (dollars per "
                             f"GPU-hour), got {v!r}")
        if out[k] is not None:
            raise ValueError(f"{name}: two keys name part {k} ({cluster.kinds[k].gpu.name})")
        out[k] = float(v)
    missing = [cluster.kinds[k].gpu.name for k in range(n) if out[k] is None]
    if missing:
        raise ValueError(f"{name}: no price for {', '.join(missing)} (give one per GPU type)")
    return tuple(float(x) for x in out)  # type: ignore[arg-type]


def plan_price(cluster: Cluster, price: "float | Mapping[str, float] | None",
               gpus_by_part: "Mapping[int, int]", name: str = "price") -> float | None:
    """The average dollars per GPU-hour of a plan that uses ``gpus_by_part``
    GPUs of each part (so that GPU-hours x it is the plan's cost)."""
    pp = part_prices(cluster, price, name)
    if pp is None:
        return None
    n = sum(gpus_by_part.values())
    if n <= 0:
        return pp[0]
    return sum(pp[k] * g for k, g in gpus_by_part.items()) / n
