"""SPMD plans for heterogeneous GPU clusters (HAP, simplified to a chain).

HAP (Zhang et al., EuroSys'24) synthesises a tensor-sharding program and
uneven sharding ratios for GPUs of different speeds.  :func:`plan` does the
chain version of it in C (GIL released): every device d (``flops[d]``
FLOP/s) holds the share r_d of every sharded dimension; each layer picks a
strategy (``"dp"``: batch-sharded, weight gradient all-reduced; ``"col"``:
column parallel; ``"row"``: row parallel; ``"rep"``: replicated;
``"ew_r"``/``"ew_gb"``/``"ew_gf"``: element-wise on replicated / batch- /
feature-sharded data); form changes cost all-gathers (padded, or a grouped
broadcast when the shards are too uneven), reduce-scatters, all-reduces and
all-to-alls; the ratios come from HAP's LP, solved exactly in closed form.

``plan(layers, cluster, ratios="uniform", strategies=["dp", "ew_gb"])`` is
DDP with an even split (DP-EV), ``ratios="proportional"`` DDP with a
FLOP/s-proportional split (DP-CP); :func:`compare` runs the three.
Times are seconds per iteration, sizes bytes, bandwidths bytes/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _args, _core

__all__ = [
    "DEVICE_FLOPS",
    "BANDWIDTHS",
    "STRATEGIES",
    "Cluster",
    "HapLayer",
    "HapPlan",
    "cluster",
    "hap_cluster",
    "linear",
    "elementwise",
    "transformer_chain",
    "vgg19_chain",
    "plan",
    "compare",
    "all_gather_cost",
    "crossover_ratio",
    "shard_lengths",
]

#: Effective training FLOP/s per GPU as HAP profiled them (its repository).
DEVICE_FLOPS = {
    "V100": 3858755112937.0,
    "P100": 2149250936815.0,
    "GPU_A": 5712013967207.0,
    "GPU_B": 5966645808610.0,
    "GPU_C": 3009904927648.0,
}

#: Collective bandwidth tables (bytes/s) profiled by HAP: (all_gather,
#: all_gather_group, all_reduce, reduce_scatter, reduce_scatter_group, all_to_all).
BANDWIDTHS = {
    "hetero-10gbps": (815418707.0, 549828906.0, 476774816.0, 876490907.0, 512358434.0,
                      7504501871.0),
    "gpu_a-p100": (2911974213.0, 1823299698.0, 1592001970.0, 2697857772.0, 2031969976.0,
                   7881094967.0),
    "homogeneous": (9463184466.0, 9146232360.0, 5906161310.0, 9740459122.0, 8756865799.0,
                    24588140722.0),
}

STRATEGIES = ("dp", "col", "row", "rep", "ew_r", "ew_gb", "ew_gf")
_KINDS = {"linear": 0, "elementwise": 1}
#: The strategies each kind of layer can take (csrc/hap/hetero.c strategy_fits).
_LINEAR_STRATEGIES = ("dp", "col", "row", "rep")
_EW_STRATEGIES = ("ew_r", "ew_gb", "ew_gf")
_RATIO_MODES = {"optimal": 0, "proportional": 1, "uniform": 2}


def _pos(name, v, allow_zero=False) -> float:
    f = _args.real(name, v)
    if not math.isfinite(f) or f < 0 or (f == 0 and not allow_zero):
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {v!r}")
    return f


def _vec(name, values, allow_zero=False) -> List[float]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of numbers, not {type(values).__name__}")
    out = [_pos(f"{name}[{i}]", v, allow_zero) for i, v in enumerate(values)]
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


@dataclass(frozen=True)
class Cluster:
    """Devices (FLOP/s each) and collective bandwidths (bytes/s)."""

    flops: Tuple[float, ...]
    all_gather: float
    all_gather_group: float
    all_reduce: float
    reduce_scatter: float
    reduce_scatter_group: float
    all_to_all: float
    names: Tuple[str, ...] = ()

    @property
    def n_devices(self) -> int:
        return len(self.flops)

    def bandwidths(self) -> Tuple[float, ...]:
        return (self.all_gather, self.all_gather_group, self.all_reduce, self.reduce_scatter,
                self.reduce_scatter_group, self.all_to_all)


def cluster(flops: Sequence[float], *, all_gather: float, all_reduce: float,
            all_gather_group: Optional[float] = None, reduce_scatter: Optional[float] = None,
            reduce_scatter_group: Optional[float] = None, all_to_all: Optional[float] = None,
            names: Sequence[str] = ()) -> Cluster:
    """A cluster from per-device FLOP/s and bandwidths (missing grouped /
    reduce-scatter / all-to-all bandwidths default to the all-gather one)."""
    f = _vec("flops", flops)
    ag = _pos("all_gather", all_gather)
    return Cluster(
        tuple(f), ag, _pos("all_gather_group", ag if all_gather_group is None else all_gather_group),
        _pos("all_reduce", all_reduce),
        _pos("reduce_scatter", ag if reduce_scatter is None else reduce_scatter),
        _pos("reduce_scatter_group",
             ag if reduce_scatter_group is None else reduce_scatter_group),
        _pos("all_to_all", ag if all_to_all is None else all_to_all), tuple(names))


def hap_cluster(*type_counts, bandwidths: str = "hetero-10gbps") -> Cluster:
    """``hap_cluster("V100", 2, "P100", 6)``: devices by HAP's profiled type
    names (:data:`DEVICE_FLOPS`) and a bandwidth table of :data:`BANDWIDTHS`."""
    if len(type_counts) % 2 or not type_counts:
        raise ValueError("pass device types and counts in pairs: hap_cluster('V100', 2, 'P100', 6)")
    if bandwidths not in BANDWIDTHS:
        raise ValueError(f"bandwidths must be one of {sorted(BANDWIDTHS)}, got {bandwidths!r}")
    flops, names = [], []
    for t, c in zip(type_counts[::2], type_counts[1::2]):
        if t not in DEVICE_FLOPS:
            raise ValueError(f"unknown device type {t!r}; known: {sorted(DEVICE_FLOPS)}")
        c = _args.index(f"device count for {t}", c, 0)
        # the C limit, checked before building lists of that many devices here
        if len(flops) + c > _core.HAP_MAX_DEVICES:
            raise ValueError(f"{len(flops) + c} devices exceed the limit of "
                             f"{_core.HAP_MAX_DEVICES} (HPGO_HAP_MAX_DEVICES)")
        flops += [DEVICE_FLOPS[t]] * c
        names += [t] * c
    if not flops:
        raise ValueError("the cluster has no devices")
    b = BANDWIDTHS[bandwidths]
    return Cluster(tuple(flops), *b, names=tuple(names))


@dataclass(frozen=True)
class HapLayer:
    """One chain layer: ``linear`` (Y[m, n] = X[m, k] W[k, n]) or
    ``elementwise`` (Y[m, n] from X[m, k] row by row, ``flops`` forward FLOPs)."""

    kind: str
    m: float
    k: float
    n: float
    flops: float = 0.0
    name: str = ""

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"layer kind must be 'linear' or 'elementwise', got {self.kind!r}")
        for f in ("m", "k", "n"):
            _pos(f"layer {self.name or '?'}: {f}", getattr(self, f))
        _pos(f"layer {self.name or '?'}: flops", self.flops, allow_zero=True)


def linear(m, k, n, name: str = "") -> HapLayer:
    return HapLayer("linear", m, k, n, 0.0, name)


def elementwise(m, k, n, flops, name: str = "") -> HapLayer:
    return HapLayer("elementwise", m, k, n, flops, name)


def transformer_chain(blocks: int = 12, batch: int = 256, seq: int = 128, d_model: int = 768,
                      ffn: int = 3072) -> List[HapLayer]:
    """Transformer encoder blocks as a chain (HAP's defaults: 12 layers,
    d_model 768, FFN 3072, batch 32 x world size, sequence 128 or 64): per
    block QKV projection, attention core (4 b s^2 d FLOPs, element-wise),
    output projection, FFN up, GELU (8 FLOPs per element), FFN down."""
    for name, v in (("blocks", blocks), ("batch", batch), ("seq", seq), ("d_model", d_model),
                    ("ffn", ffn)):
        _args.index(name, v, 1)
    if 6 * blocks > _core.HAP_MAX_LAYERS:
        # refused before building: the planner's layer limit (HPGO_HAP_MAX_LAYERS)
        raise ValueError(f"blocks = {blocks} gives {6 * blocks:,} layers, more than the planner's "
                         f"limit of {_core.HAP_MAX_LAYERS:,} (HPGO_HAP_MAX_LAYERS)")
    M = batch * seq
    out = []
    for i in range(blocks):
        out += [
            linear(M, d_model, 3 * d_model, f"block{i}.qkv"),
            elementwise(M, 3 * d_model, d_model, 4.0 * batch * seq * seq * d_model,
                        f"block{i}.attention"),
            linear(M, d_model, d_model, f"block{i}.proj"),
            linear(M, d_model, ffn, f"block{i}.ffn1"),
            elementwise(M, ffn, ffn, 8.0 * M * ffn, f"block{i}.gelu"),
            linear(M, ffn, d_model, f"block{i}.ffn2"),
        ]
    return out


def vgg19_chain(batch: int = 256, image: int = 32, classes: int = 10) -> List[HapLayer]:
    """VGG19 on CIFAR-sized images as a chain: each 3x3 convolution as the
    equivalent product (m = batch x H x W, k = 9 C_in, n = C_out), ReLU and
    2x2 max-pooling element-wise, one linear classifier."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    if isinstance(image, bool) or not isinstance(image, int) or image < 32 or image % 32:
        raise ValueError(f"image must be a multiple of 32, got {image!r}")
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
           512, 512, 512, 512, "M"]
    out, c, hw = [], 3, image
    for i, v in enumerate(cfg):
        M = batch * hw * hw
        if v == "M":
            out.append(elementwise(M // 4, 4 * c, c, 3.0 * M * c, f"pool{i}"))
            hw //= 2
        else:
            out.append(linear(M, 9 * c, v, f"conv{i}"))
            out.append(elementwise(M, v, v, 1.0 * M * v, f"relu{i}"))
            c = v
    out.append(linear(batch * hw * hw, c, classes, "fc"))
    return out


@dataclass(frozen=True)
class HapPlan:
    """A plan: per-layer strategy, sharding ratios, predicted seconds per
    iteration and its breakdown (compute = sum of per-layer slowest devices)."""

    strategies: Tuple[str, ...]
    ratios: Tuple[float, ...]
    time: float
    compute: float
    all_gather: float
    reduce_scatter: float
    all_reduce: float
    all_to_all: float
    grouped_all_gather: bool
    grouped_reduce_scatter: bool
    rounds: int

    def shard_lengths(self, length: int) -> List[int]:
        """Integer shard lengths of a dimension of ``length`` units."""
        return shard_lengths(length, self.ratios)


def _layers(layers) -> List[tuple]:
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError("layers must be a sequence of HapLayer")
    out = []
    for i, l in enumerate(layers):
        if not isinstance(l, HapLayer):
            raise TypeError(f"layers[{i}] must be a HapLayer, not {type(l).__name__}")
        out.append((_KINDS[l.kind], float(l.m), float(l.k), float(l.n), float(l.flops)))
    if not out:
        raise ValueError("the chain has no layers")
    return out


def plan(layers: Sequence[HapLayer], cluster: Cluster, *, dtype_bytes: float = 4.0,
         strategies: Optional[Iterable[str]] = None,
         ratios: Union[str, Sequence[float]] = "optimal", max_rounds: int = 20) -> HapPlan:
    """Best program for the chain on the cluster.  ``strategies`` limits the
    choices (names of :data:`STRATEGIES`); ``ratios`` is ``"optimal"`` (HAP:
    alternate the program search and the ratio LP), ``"proportional"``
    (r ~ FLOP/s), ``"uniform"``, or explicit shares summing to 1."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a hetero.Cluster, not {type(cluster).__name__}")
    ls = _layers(layers)
    dt = _pos("dtype_bytes", dtype_bytes)
    allowed = 0
    if strategies is not None:
        if isinstance(strategies, str):
            strategies = [strategies]
        for s in strategies:
            if s not in STRATEGIES:
                raise ValueError(f"unknown strategy {s!r}; known: {STRATEGIES}")
            allowed |= 1 << STRATEGIES.index(s)
        if not allowed:
            raise ValueError("strategies must name at least one strategy")
        names = [STRATEGIES[i] for i in range(len(STRATEGIES)) if allowed >> i & 1]
        for i, (kind, *_rest) in enumerate(ls):
            fit = _LINEAR_STRATEGIES if kind == _KINDS["linear"] else _EW_STRATEGIES
            if not set(fit) & set(names):
                what = "linear" if kind == _KINDS["linear"] else "element-wise"
                raise _core.PlanningError(
                    f"no allowed strategy covers layer {i} ({what}): it needs one of "
                    f"{'/'.join(fit)}; allowed: {'/'.join(names)}")
    given = None
    if isinstance(ratios, str):
        if ratios not in _RATIO_MODES:
            raise ValueError(f"ratios must be one of {sorted(_RATIO_MODES)} or a sequence, "
                             f"got {ratios!r}")
        mode = _RATIO_MODES[ratios]
    else:
        given = _vec("ratios", ratios, allow_zero=True)
        if len(given) != cluster.n_devices:
            raise ValueError(f"ratios need {cluster.n_devices} values, got {len(given)}")
        if abs(math.fsum(given) - 1.0) > 1e-9:
            raise ValueError(f"ratios must sum to 1, got {math.fsum(given)!r}")
        mode = 3
    max_rounds = _args.index("max_rounds", max_rounds, 1, _args.INT32_MAX)
    r = _core.hap_plan(ls, list(cluster.flops), cluster.bandwidths(), dt, allowed, mode, given,
                       max_rounds)
    return HapPlan(tuple(STRATEGIES[s] for s in r["strategy"]), tuple(r["ratios"]), r["time"],
                   r["compute"], r["allgather"], r["reducescatter"], r["allreduce"],
                   r["alltoall"], r["grouped_allgather"], r["grouped_reducescatter"],
                   r["rounds"])


def compare(layers: Sequence[HapLayer], cluster: Cluster, **kw) -> Dict[str, HapPlan]:
    """HAP's baselines next to its plan: ``"dp-ev"`` (DDP, even split),
    ``"dp-cp"`` (DDP, FLOP/s-proportional split) and ``"hap"``."""
    ddp = ["dp", "ew_gb"]
    return {
        "dp-ev": plan(layers, cluster, strategies=ddp, ratios="uniform", **kw),
        "dp-cp": plan(layers, cluster, strategies=ddp, ratios="proportional", **kw),
        "hap": plan(layers, cluster, **kw),
    }


def all_gather_cost(ratios: Sequence[float], nbytes: float, bw_padded: float,
                    bw_grouped: float) -> Tuple[float, float]:
    """Seconds of the padded all-gather (n max r S / B_ag) and of the grouped
    broadcast (S / B_gb) of ``nbytes`` sharded by ``ratios``."""
    r = _vec("ratios", ratios, allow_zero=True)
    return _core.hap_gather_cost(r, _pos("nbytes", nbytes, allow_zero=True),
                                 _pos("bw_padded", bw_padded), _pos("bw_grouped", bw_grouped))


def crossover_ratio(n: int, bw_padded: float, bw_grouped: float) -> float:
    """Largest share max_d r_d for which the padded variant is not slower:
    B_padded / (n B_grouped)."""
    n = _args.index("n", n, 1)
    return _pos("bw_padded", bw_padded) / (n * _pos("bw_grouped", bw_grouped))


def shard_lengths(length: int, ratios: Sequence[float]) -> List[int]:
    """HAP's ``sharding_round``: floor(r_d L), the remaining units to the
    largest deficits (lowest index on ties).  Sums to ``length``."""
    length = _args.index("length", length, 0, _args.INT64_MAX)
    r = _vec("ratios", ratios, allow_zero=True)
    if abs(math.fsum(r) - 1.0) > 1e-9:
        raise ValueError(f"ratios must sum to 1, got {math.fsum(r)!r}")
    return _core.hap_shard_round(length, r)
