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
allocator's reserved memory it cannot reuse: 0 by default, the
expandable segments torchtitan and NeMo run with;
``hpgo.cluster.ALLOCATOR_FRAGMENTATION``, GMLake's 9.2 of 80 GB, for the
stock allocator); ``jitter`` (the coefficient of variation of one GPU's time
between two synchronisations; the step waits for the slowest of its GPUs;
0 by default: the published figures disagree, see docs/training-model.md)
and ``nccl_latency`` (price collective latency with NCCL's own tuning
model by algorithm, protocol, ranks and nodes instead of ``latency`` per
ring step).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from . import _core, _files

__all__ = ["GPU", "Level", "Cluster", "GPU_TYPES", "resolve", "ALLOCATOR_FRAGMENTATION"]

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
    take from compute they overlap with."""

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

    def __post_init__(self) -> None:
        for f in ("matrix_efficiency", "vector_efficiency", "memory_efficiency",
                  "fp8_matrix_efficiency", "attention_efficiency"):
            object.__setattr__(self, f, _steps(f, getattr(self, f)))
        if isinstance(self.multiprocessors, bool) or not isinstance(self.multiprocessors, int):
            raise TypeError("multiprocessors must be an int (0: unknown)")

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

    def __post_init__(self) -> None:
        if not isinstance(self.gpu, GPU):
            raise TypeError("gpu must be an hpgo.GPU")
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

    # -- construction ---------------------------------------------------------
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
        name, gname, peaks, vec, hbm, hbw, ms, vs, mems, levels, f8, att, sms, sy = t
        gpu = GPU(gname, *peaks, vec, hbm, hbw, ms, vs, mems, f8, att, sms)
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
                g.fp8_matrix_efficiency, g.attention_efficiency, g.multiprocessors,
                (float(self.host_memory_bytes), float(self.host_bandwidth),
                 float(self.host_memory_bandwidth), float(self.allocator_fragmentation),
                 float(self.jitter), int(self.nccl_latency)))

    # -- shape ----------------------------------------------------------------
    @property
    def gpus(self) -> int:
        return math.prod(lv.size for lv in self.levels)

    @property
    def gpus_per_node(self) -> int:
        return self.levels[0].size

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    def with_nodes(self, nodes: int) -> "Cluster":
        """The same cluster with ``nodes`` nodes (level 1 resized)."""
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
        return {"format": "hpgo-cluster-1", "name": self.name,
                "gpu": dataclasses.asdict(self.gpu),
                "levels": [dataclasses.asdict(lv) for lv in self.levels],
                **{f: getattr(self, f) for f in _SYSTEM}}

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
            return cls(str(d["name"]), gpu, levels, **sysf)
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
        g = self.gpu
        out = [f"{self.name}: {self.nodes} node(s) x {self.gpus_per_node} {g.name} = "
               f"{self.gpus} GPUs",
               f"  GPU: {g.memory_bytes / 1e9:g} GB HBM at {g.memory_bandwidth / 1e12:g} TB/s; "
               f"dense peaks bf16 {g.bf16_flops / 1e12:g}, fp8 {g.fp8_flops / 1e12:g}, "
               f"tf32 {g.tf32_flops / 1e12:g}, fp32 {g.fp32_flops / 1e12:g} TFLOP/s; "
               f"{'measured' if g.name.endswith('(measured)') else 'preset'} efficiency curves"]
        names = ["inside a node", "across nodes"] + [f"level {i}" for i in range(2, 8)]
        for i, lv in enumerate(self.levels):
            out.append(f"  {names[i]}: {lv.size} x, {lv.bandwidth / 1e9:g} GB/s per GPU "
                       f"({lv.bandwidth * 8 / 1e9:g} Gb/s), latency {lv.latency * 1e6:g} us, "
                       f"efficiency {lv.efficiency:g}")
        return "\n".join(out)

    def __repr__(self) -> str:
        lv = " x ".join(str(x.size) for x in self.levels)
        return (f"Cluster({self.name}: {self.gpus} x {self.gpu.name} ({lv}), "
                f"{self.gpu.memory_bytes / 1e9:.0f} GB, "
                f"{self.levels[0].bandwidth / 1e9:.0f} GB/s in a node"
                + (f", {self.levels[1].bandwidth / 1e9:.1f} GB/s across" if len(self.levels) > 1 else "")
                + ")")

