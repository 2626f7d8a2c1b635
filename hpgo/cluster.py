"""The cluster a training step runs on: one GPU type and a hierarchy of
interconnect levels (inside a node, across nodes, ...).

Presets carry published figures (sources in ``csrc/cluster.c`` and
docs/training-model.md); every number can be overridden::

    c = hpgo.Cluster.preset("dgx-a100-80gb", nodes=8)
    c.gpus, c.gpus_per_node                         # 64, 8
    c2 = c.with_gpu(memory_bytes=40e9)              # a variant
    c.collective_time("all_reduce", 8, 50e6)        # seconds, priced by the C core
    c.save("mycluster.json"); hpgo.Cluster.load("mycluster.json")

Bandwidths are bytes/s per GPU and per direction, latencies seconds,
``efficiency`` the achieved fraction of the link rate.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from . import _core, _files

__all__ = ["GPU", "Level", "Cluster"]

_COLL = {"all_reduce": _core.COLL_ALLREDUCE, "reduce_scatter": _core.COLL_REDUCE_SCATTER,
         "all_gather": _core.COLL_ALLGATHER, "all_to_all": _core.COLL_ALLTOALL}
_DT = {"fp32": 0, "tf32": 1, "bf16": 2, "fp8": 3}          # csrc/cluster.h HPGO_DT_
_KIND = {"vector": 0, "matrix": 1, "attention": 2}         # HPGO_OP_
_ALGO = {"auto": _core.ALGO_AUTO, "ring": _core.ALGO_RING,
         "hierarchical": _core.ALGO_HIERARCHICAL}


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

    def __post_init__(self) -> None:
        if not isinstance(self.gpu, GPU):
            raise TypeError("gpu must be an hpgo.GPU")
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

    @staticmethod
    def presets() -> tuple[str, ...]:
        return tuple(_core._step_cluster_presets())

    @classmethod
    def _from_tuple(cls, t: tuple) -> "Cluster":
        name, gname, peaks, vec, hbm, hbw, ms, vs, mems, levels, f8, att, sms = t
        gpu = GPU(gname, *peaks, vec, hbm, hbw, ms, vs, mems, f8, att, sms)
        lv = tuple(Level(size=s, bandwidth=b, collective_bandwidth=cb, latency=lat, efficiency=e)
                   for s, b, cb, lat, e in levels)
        return cls(name, gpu, lv)

    def _tuple(self) -> tuple:
        g = self.gpu
        return (str(self.name), str(g.name),
                (g.fp32_flops, g.tf32_flops, g.bf16_flops, g.fp8_flops), g.vector_flops,
                g.memory_bytes, g.memory_bandwidth, g.matrix_efficiency, g.vector_efficiency,
                g.memory_efficiency,
                tuple((lv.size, lv.bandwidth, lv.collective_bandwidth, lv.latency, lv.efficiency)
                      for lv in self.levels),
                g.fp8_matrix_efficiency, g.attention_efficiency, g.multiprocessors)

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

    def with_gpu(self, **changes: Any) -> "Cluster":
        """The same cluster with GPU fields changed (``memory_bytes=``, ...)."""
        return dataclasses.replace(self, gpu=dataclasses.replace(self.gpu, **changes))

    # -- costs (priced by csrc/cost.c) ------------------------------------------
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
                "levels": [dataclasses.asdict(lv) for lv in self.levels]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "cluster") -> "Cluster":
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
            return cls(str(d["name"]), gpu, levels)
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

    def __repr__(self) -> str:
        lv = " x ".join(str(x.size) for x in self.levels)
        return (f"Cluster({self.name}: {self.gpus} x {self.gpu.name} ({lv}), "
                f"{self.gpu.memory_bytes / 1e9:.0f} GB, "
                f"{self.levels[0].bandwidth / 1e9:.0f} GB/s in a node"
                + (f", {self.levels[1].bandwidth / 1e9:.1f} GB/s across" if len(self.levels) > 1 else "")
                + ")")

