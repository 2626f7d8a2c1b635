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
FLOP/s-proportional split (DP-CP); :func:`compare` runs them.

Beyond HAP's public chain: ``"dp_zero"`` (ZeRO-3 data parallelism: weights,
gradients and optimizer state sharded, the weight all-gathered before the
forward and the backward, its gradient reduce-scattered), attention layers
(:func:`attention`) sharded by whole heads (``"att_heads"``), batch
(``"att_gb"``) or replicated (``"att_r"``), and a memory model per device
(parameters, gradients, optimizer state, saved activations, the transient
ZeRO-3 weight) checked against each device's memory: :attr:`HapPlan.fits`.
:func:`hap_cluster` takes HAP's profiled GPUs and every GPU of
:data:`hpgo.cluster.GPU_TYPES`.  Times are seconds per iteration, sizes
bytes, bandwidths bytes/s.
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
    "HapMemory",
    "cluster",
    "hap_cluster",
    "linear",
    "elementwise",
    "attention",
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

#: Memory per device of HAP's profiled GPUs (bytes): its V100s as the step
#: model's 16 GB V100 preset (``dgx1-v100-16gb``), the P100 16 GB of NVIDIA's
#: Tesla P100 datasheet (the 12 GB PCIe variant is the exception); the
#: GPU_A/B/C of its repository are unnamed, so their memory is unknown.
DEVICE_MEMORY = {"P100": 16e9}

STRATEGIES = ("dp", "col", "row", "rep", "ew_r", "ew_gb", "ew_gf", "dp_zero", "att_r", "att_gb",
              "att_heads")
_KINDS = {"linear": 0, "elementwise": 1, "attention": 2}
#: The strategies each kind of layer can take (csrc/hap/hetero.c strategy_fits).
_LINEAR_STRATEGIES = ("dp", "col", "row", "rep", "dp_zero")
_EW_STRATEGIES = ("ew_r", "ew_gb", "ew_gf")
_ATT_STRATEGIES = ("att_r", "att_gb", "att_heads")
_FIT = {0: _LINEAR_STRATEGIES, 1: _EW_STRATEGIES, 2: _ATT_STRATEGIES}
_KIND_NAMES = {0: "linear", 1: "element-wise", 2: "attention"}
#: Data parallelism in HAP's baselines (DDP): batch-sharded everything.
DDP_STRATEGIES = ("dp", "ew_gb", "att_gb")
#: The same with ZeRO-3 (DeepSpeed stage 3, PyTorch FSDP full sharding).
ZERO_STRATEGIES = ("dp_zero", "ew_gb", "att_gb")
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
    """Devices (FLOP/s each) and collective bandwidths (bytes/s);
    ``memory``: bytes per device (empty: unknown, no fit check);
    ``dtype_bytes``: the element size the FLOP/s were taken for (4: fp32)."""

    flops: Tuple[float, ...]
    all_gather: float
    all_gather_group: float
    all_reduce: float
    reduce_scatter: float
    reduce_scatter_group: float
    all_to_all: float
    names: Tuple[str, ...] = ()
    memory: Tuple[float, ...] = ()
    dtype_bytes: float = 4.0

    def __post_init__(self):
        if self.memory and len(self.memory) != len(self.flops):
            raise ValueError(f"memory needs {len(self.flops)} values (one per device), "
                             f"got {len(self.memory)}")

    @property
    def n_devices(self) -> int:
        return len(self.flops)

    def bandwidths(self) -> Tuple[float, ...]:
        return (self.all_gather, self.all_gather_group, self.all_reduce, self.reduce_scatter,
                self.reduce_scatter_group, self.all_to_all)


def cluster(flops: Sequence[float], *, all_gather: float, all_reduce: float,
            all_gather_group: Optional[float] = None, reduce_scatter: Optional[float] = None,
            reduce_scatter_group: Optional[float] = None, all_to_all: Optional[float] = None,
            names: Sequence[str] = (), memory: Optional[Sequence[float]] = None,
            dtype_bytes: float = 4.0) -> Cluster:
    """A cluster from per-device FLOP/s and bandwidths (missing grouped /
    reduce-scatter / all-to-all bandwidths default to the all-gather one) and,
    optionally, each device's memory in bytes."""
    f = _vec("flops", flops)
    ag = _pos("all_gather", all_gather)
    mem = () if memory is None else tuple(_vec("memory", memory))
    return Cluster(
        tuple(f), ag, _pos("all_gather_group", ag if all_gather_group is None else all_gather_group),
        _pos("all_reduce", all_reduce),
        _pos("reduce_scatter", ag if reduce_scatter is None else reduce_scatter),
        _pos("reduce_scatter_group",
             ag if reduce_scatter_group is None else reduce_scatter_group),
        _pos("all_to_all", ag if all_to_all is None else all_to_all), tuple(names), mem,
        _pos("dtype_bytes", dtype_bytes))


#: HAP's profiler: message sizes 4, 16, 64, 256 MiB; bandwidth = mean of size / time.
PROFILE_SIZES = (4 << 20, 16 << 20, 64 << 20, 256 << 20)
_DTYPE_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0}


def _step_gpu(name: str):
    from . import cluster as _cl
    key = name.strip().lower()
    if key not in _cl.GPU_TYPES:
        return None
    return _cl.Cluster.preset(_cl.GPU_TYPES[key]).gpu


def gpu_figures(name: str, dtype: str = "fp32") -> Tuple[float, Optional[float]]:
    """(FLOP/s, memory bytes or None) of a device type: HAP's profiled
    figures for its names (:data:`DEVICE_FLOPS`, :data:`DEVICE_MEMORY`), else
    the step model's GPU of :data:`hpgo.cluster.GPU_TYPES` (case-insensitive):
    its dense peak for ``dtype`` times its efficiency on large GEMMs (the
    plateau of its matrix-efficiency table), and its memory."""
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_BYTES)}, got {dtype!r}")
    if name in DEVICE_FLOPS:
        mem = DEVICE_MEMORY.get(name)
        if name == "V100":
            mem = _step_gpu("v100-16gb").memory_bytes
        return DEVICE_FLOPS[name], mem
    g = _step_gpu(name) if isinstance(name, str) else None
    if g is None:
        from . import cluster as _cl
        raise ValueError(f"unknown device type {name!r}; known: HAP's {sorted(DEVICE_FLOPS)} "
                         f"and the step model's {sorted(_cl.GPU_TYPES)}")
    peak = g.peak(dtype)
    if peak <= 0:
        raise ValueError(f"{g.name} has no {dtype} peak; pick another dtype")
    eff = max(e for _, e in g.matrix_efficiency)
    return peak * eff, float(g.memory_bytes)


def step_bandwidths(network, n_devices: int) -> Tuple[float, ...]:
    """HAP's bandwidth table (:data:`BANDWIDTHS` order) for ``n_devices``
    GPUs of the :class:`hpgo.Cluster` ``network`` (resized to enough nodes),
    measured as HAP's profiler does (mean of size / time over
    :data:`PROFILE_SIZES`) on the step model's collective prices.  The
    grouped variants move only the true shards, so by volume they equal the
    padded collective on even shards (HAP measured them 1.5x slower on its
    cluster, NCCL group-call overhead the step model does not price)."""
    from . import cluster as _cl
    if not isinstance(network, _cl.Cluster):
        raise TypeError(f"network must be an hpgo.Cluster, not {type(network).__name__}")
    n = _args.index("n_devices", n_devices, 1)
    g = network.gpus_per_node
    net = network.with_nodes(max(1, -(-n // g)))

    def bw(op, per_rank=False):
        if n == 1:
            return math.inf
        vals = [s / net.collective_time(op, n, s / n if per_rank else s) for s in PROFILE_SIZES]
        return math.fsum(vals) / len(vals)

    ag, ar, rs, a2a = bw("all_gather"), bw("all_reduce"), bw("reduce_scatter"), \
        bw("all_to_all", per_rank=True)
    big = 1e30  # one device: no collective ever runs; a finite stand-in for infinity
    return tuple(min(x, big) for x in (ag, ag, ar, rs, rs, a2a))


def hap_cluster(*type_counts, bandwidths: Union[str, "object"] = "hetero-10gbps",
                network_gbps: Optional[float] = None, gpus_per_node: int = 8,
                dtype: str = "fp32") -> Cluster:
    """``hap_cluster("V100", 2, "P100", 6)``: devices by type and count.
    Types are HAP's profiled names (:data:`DEVICE_FLOPS`) or any GPU of
    :data:`hpgo.cluster.GPU_TYPES` (``"a100"``, ``"h100"``, ``"v100-16gb"``,
    ...; figures from the step model's presets, see :func:`gpu_figures`).
    Bandwidths: a table of :data:`BANDWIDTHS` by name, or an
    :class:`hpgo.Cluster` whose links carry the collectives, or
    ``network_gbps``: nodes of ``gpus_per_node`` GPUs (HAP's machines: 8)
    joined by that many gigabits/s per GPU (see :func:`step_bandwidths`)."""
    if len(type_counts) % 2 or not type_counts:
        raise ValueError("pass device types and counts in pairs: hap_cluster('V100', 2, 'P100', 6)")
    flops, names, mem = [], [], []
    for t, c in zip(type_counts[::2], type_counts[1::2]):
        if not isinstance(t, str):
            raise TypeError(f"device type must be a str, not {type(t).__name__}")
        f, m = gpu_figures(t, dtype)
        c = _args.index(f"device count for {t}", c, 0)
        # the C limit, checked before building lists of that many devices here
        if len(flops) + c > _core.HAP_MAX_DEVICES:
            raise ValueError(f"{len(flops) + c} devices exceed the limit of "
                             f"{_core.HAP_MAX_DEVICES} (HPGO_HAP_MAX_DEVICES)")
        flops += [f] * c
        names += [t] * c
        mem += [m] * c
    if not flops:
        raise ValueError("the cluster has no devices")
    from . import cluster as _cl
    if network_gbps is not None:
        gpn = _args.index("gpus_per_node", gpus_per_node, 1)
        first = next((t for t in names if _step_gpu(t) is not None), "v100")
        net = _cl.Cluster.build(first, nodes=1, gpus_per_node=gpn,
                                inter_node_gbps=_pos("network_gbps", network_gbps))
        b = step_bandwidths(net, len(flops))
    elif isinstance(bandwidths, _cl.Cluster):
        b = step_bandwidths(bandwidths, len(flops))
    elif isinstance(bandwidths, str) and bandwidths in BANDWIDTHS:
        b = BANDWIDTHS[bandwidths]
    else:
        raise ValueError(f"bandwidths must be one of {sorted(BANDWIDTHS)} or an hpgo.Cluster, "
                         f"got {bandwidths!r}")
    known = () if any(m is None for m in mem) else tuple(mem)
    return Cluster(tuple(flops), *b, names=tuple(names), memory=known,
                   dtype_bytes=_DTYPE_BYTES[dtype])


@dataclass(frozen=True)
class HapLayer:
    """One chain layer: ``linear`` (Y[m, n] = X[m, k] W[k, n]),
    ``elementwise`` (Y[m, n] from X[m, k] row by row, ``flops`` forward FLOPs)
    or ``attention`` (Y[m, n] from q, k, v in X[m, k], ``flops`` forward
    FLOPs, ``heads`` heads).  ``saved``: elements kept for the backward
    besides the input (e.g. the attention probabilities)."""

    kind: str
    m: float
    k: float
    n: float
    flops: float = 0.0
    name: str = ""
    heads: int = 0
    saved: float = 0.0

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"layer kind must be one of {sorted(_KINDS)}, got {self.kind!r}")
        for f in ("m", "k", "n"):
            _pos(f"layer {self.name or '?'}: {f}", getattr(self, f))
        _pos(f"layer {self.name or '?'}: flops", self.flops, allow_zero=True)
        _pos(f"layer {self.name or '?'}: saved", self.saved, allow_zero=True)
        if self.kind == "attention":
            _args.index(f"layer {self.name or '?'}: heads", self.heads, 1, 1 << 30)


def linear(m, k, n, name: str = "") -> HapLayer:
    return HapLayer("linear", m, k, n, 0.0, name)


def elementwise(m, k, n, flops, name: str = "", saved: float = 0.0) -> HapLayer:
    return HapLayer("elementwise", m, k, n, flops, name, 0, saved)


def attention(batch: int, seq: int, d_model: int, heads: int, name: str = "") -> HapLayer:
    """The attention core of one transformer block (scores, softmax, weighted
    sum of the values) on q, k, v of ``batch`` x ``seq`` tokens: 4 b s^2 d
    forward FLOPs (two matrix products, Megatron-LM's count, Narayanan et
    al. SC'21 section 5.1), and the softmax probabilities b h s^2 kept for
    the backward (Korthikanti et al. 2022, section 4.1)."""
    for nm, v in (("batch", batch), ("seq", seq), ("d_model", d_model), ("heads", heads)):
        _args.index(nm, v, 1)
    if d_model % heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
    M = batch * seq
    return HapLayer("attention", M, 3 * d_model, d_model, 4.0 * batch * seq * seq * d_model,
                    name, heads, float(batch) * heads * seq * seq)


def transformer_chain(blocks: int = 12, batch: int = 256, seq: int = 128, d_model: int = 768,
                      ffn: int = 3072, heads: int = 12) -> List[HapLayer]:
    """Transformer encoder blocks as a chain (HAP's defaults: 12 layers,
    d_model 768, FFN 3072, 12 heads, batch 32 x world size, sequence 128 or
    64): per block QKV projection, attention core (:func:`attention`),
    output projection, FFN up, GELU (8 FLOPs per element), FFN down."""
    for name, v in (("blocks", blocks), ("batch", batch), ("seq", seq), ("d_model", d_model),
                    ("ffn", ffn), ("heads", heads)):
        _args.index(name, v, 1)
    if d_model % heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
    if 6 * blocks > _core.HAP_MAX_LAYERS:
        # refused before building: the planner's layer limit (HPGO_HAP_MAX_LAYERS)
        raise ValueError(f"blocks = {blocks} gives {6 * blocks:,} layers, more than the planner's "
                         f"limit of {_core.HAP_MAX_LAYERS:,} (HPGO_HAP_MAX_LAYERS)")
    M = batch * seq
    out = []
    for i in range(blocks):
        out += [
            linear(M, d_model, 3 * d_model, f"block{i}.qkv"),
            attention(batch, seq, d_model, heads, f"block{i}.attention"),
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
class HapMemory:
    """Bytes one device holds at its peak (the end of the forward)."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float
    transient: float   # the gathered weight and gradient of the largest ZeRO-3 layer
    total: float


@dataclass(frozen=True)
class HapPlan:
    """A plan: per-layer strategy, sharding ratios, predicted seconds per
    iteration and its breakdown (compute = sum of per-layer slowest devices),
    and memory: ``memory`` (bytes per device), ``fits`` (True / False, None
    when the cluster's memory is unknown), ``worst_device`` (largest share
    of its memory) and its ``worst_memory`` breakdown."""

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
    memory: Tuple[float, ...] = ()
    fits: Optional[bool] = None
    worst_device: int = 0
    worst_memory: Optional[HapMemory] = None
    capacity: Tuple[float, ...] = ()
    dtype_bytes: float = 4.0
    optimizer_bytes: float = 8.0

    def shard_lengths(self, length: int) -> List[int]:
        """Integer shard lengths of a dimension of ``length`` units."""
        return shard_lengths(length, self.ratios)

    @property
    def data_parallel(self) -> bool:
        """Every layer batch-sharded (plain data parallelism with shares)."""
        return all(s in DDP_STRATEGIES for s in self.strategies)

    def to_parallel_plan(self, layers, global_batch: int, *, micro_batch: Optional[int] = None,
                         gpu: Union[str, int, None, tuple] = None,
                         cluster: Optional["Cluster"] = None):
        """The plan in the step model's vocabulary, where it has a neutral
        form: a data-parallel program (``dp`` / ``ew_gb`` / ``att_gb``, or
        ``dp_zero`` in place of ``dp`` on every linear layer, then
        ``zero=3``) is one :class:`hpgo.StageGroup` over the model's
        ``layers`` (a count, or a model with ``layers``) with ``dp`` = the
        devices and each device's share as ``shares``; ``micro_batch``
        defaults to ``global_batch`` (HAP runs one batch per iteration).
        Raises ValueError naming what has no neutral form: uneven tensor
        sharding (``col``, ``row``, ``ew_gf``, ``att_heads``: ParallelPlan's
        tp splits evenly), replicated compute (``rep``, ``ew_r``, ``att_r``),
        ZeRO-3 on some linear layers only (``zero`` is one stage for the
        whole plan), and a device with no share.

        On a mixed cluster the devices' GPU types become the group's
        (``gpu`` a tuple of types and ``replicas`` the devices of each, in
        device order): pass ``cluster=`` the HAP cluster the plan was made
        for (its device names, e.g. ``hap_cluster("a100", 8, "v100-16gb",
        8)``), and simulate on an :class:`hpgo.Cluster` with those types as
        parts (``hpgo.Cluster.combine``)."""
        from .parallel import ParallelPlan, StageGroup
        used = set(self.strategies)
        tensor = sorted(used & {"col", "row", "ew_gf", "att_heads"})
        rep = sorted(used & {"rep", "ew_r", "att_r"})
        if tensor or rep:
            what = []
            if tensor:
                what.append(f"uneven tensor sharding ({', '.join(tensor)}): ParallelPlan's tp "
                            "splits every layer evenly")
            if rep:
                what.append(f"replicated compute ({', '.join(rep)}): every device runs the "
                            "whole layer on the whole batch")
            raise ValueError("this HAP plan has no neutral form: " + "; ".join(what))
        if "dp" in used and "dp_zero" in used:
            raise ValueError("this HAP plan has no neutral form: ZeRO-3 on some linear layers "
                             "only (dp and dp_zero): ParallelPlan's zero is one stage for the "
                             "whole plan")
        if any(r <= 0 for r in self.ratios):
            raise ValueError("this HAP plan has no neutral form: a device with no share "
                             f"(ratios {self.ratios}); leave it out of the cluster")
        n = layers if isinstance(layers, int) else getattr(layers, "layers", None)
        if isinstance(n, (list, tuple)):
            n = len(n)
        n = _args.index("layers", n, 1)
        gb = _args.index("global_batch", global_batch, 1)
        mb = gb if micro_batch is None else _args.index("micro_batch", micro_batch, 1)
        total = math.fsum(self.ratios)
        shares = tuple(r / total for r in self.ratios)
        from .workmodel import Transformer
        if isinstance(layers, Transformer):
            # a transformer replica takes whole sequences: HAP's own
            # sharding_round of the micro-batch by the ratios
            lengths = self.shard_lengths(mb)
            if min(lengths) < 1:
                raise ValueError(f"micro_batch {mb}: a device gets no whole sequence at ratios "
                                 f"{self.ratios}")
            shares = tuple(x / mb for x in lengths)
        replicas = None
        if cluster is not None:
            if gpu is not None:
                raise ValueError("give gpu or cluster, not both")
            names = tuple(cluster.names)
            if len(names) != len(shares):
                raise ValueError(f"cluster has {len(names)} named devices, the plan "
                                 f"{len(shares)} ratios: pass the cluster the plan was made for")
            kinds: List[str] = []
            counts: List[int] = []
            for nm in names:
                if kinds and kinds[-1] == nm:
                    counts[-1] += 1
                else:
                    kinds.append(nm)
                    counts.append(1)
            if len(set(kinds)) != len(kinds):
                raise ValueError(f"cluster: each device type's devices must be consecutive, "
                                 f"got {names}")
            if len(kinds) > 1:
                gpu, replicas = tuple(kinds), tuple(counts)
            else:
                gpu = kinds[0]
        group = StageGroup((0, n), dp=len(shares), shares=shares if len(shares) > 1 else None,
                           gpu=gpu, replicas=replicas)
        return ParallelPlan(global_batch=gb, micro_batch=mb, zero=3 if "dp_zero" in used else 0,
                            stages=(group,))

    def describe(self) -> str:
        """The plan, its time, its memory and fit verdict, and its assumptions."""
        counts: Dict[str, int] = {}
        for s in self.strategies:
            counts[s] = counts.get(s, 0) + 1
        fit = {True: "fits", False: "DOES NOT FIT", None: "fit unknown (no device memory)"}
        wm = self.worst_memory
        lines = [
            f"HAP plan: {len(self.strategies)} layers "
            + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())),
            f"  time {self.time:.4g} s/iteration = compute {self.compute:.4g} + all-gather "
            f"{self.all_gather:.4g} + reduce-scatter {self.reduce_scatter:.4g} + all-reduce "
            f"{self.all_reduce:.4g} + all-to-all {self.all_to_all:.4g}",
            "  ratios " + ", ".join(f"{r:.4f}" for r in self.ratios),
            f"  memory: {fit[self.fits]}; device {self.worst_device} holds "
            f"{wm.total / 1e9:.3g} GB" + (f" of {self.capacity[self.worst_device] / 1e9:.3g} GB"
                                          if self.capacity else "")
            + f" (parameters {wm.parameters / 1e9:.3g}, gradients {wm.gradients / 1e9:.3g}, "
              f"optimizer {wm.optimizer / 1e9:.3g}, activations {wm.activations / 1e9:.3g}, "
              f"ZeRO-3 transient {wm.transient / 1e9:.3g})" if wm else "  memory: not computed",
            f"  assumptions: HAP's cost model (per-layer slowest device, no overlap of compute "
            f"and communication), {self.dtype_bytes:g}-byte elements, "
            f"{self.optimizer_bytes:g} optimizer bytes per parameter, activations of every "
            f"layer kept until the backward (no recomputation), no framework overhead",
        ]
        return "\n".join(lines)


def _layers(layers) -> List[tuple]:
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError("layers must be a sequence of HapLayer")
    out = []
    for i, l in enumerate(layers):
        if not isinstance(l, HapLayer):
            raise TypeError(f"layers[{i}] must be a HapLayer, not {type(l).__name__}")
        out.append((_KINDS[l.kind], float(l.m), float(l.k), float(l.n), float(l.flops),
                    int(l.heads), float(l.saved)))
    if not out:
        raise ValueError("the chain has no layers")
    return out


def plan(layers: Sequence[HapLayer], cluster: Cluster, *, dtype_bytes: Optional[float] = None,
         strategies: Optional[Iterable[str]] = None,
         ratios: Union[str, Sequence[float]] = "optimal", max_rounds: int = 20,
         optimizer_bytes: Optional[float] = None, fit: bool = True) -> HapPlan:
    """Best program for the chain on the cluster.  ``strategies`` limits the
    choices (names of :data:`STRATEGIES`); ``ratios`` is ``"optimal"`` (HAP:
    alternate the program search and the ratio LP), ``"proportional"``
    (r ~ FLOP/s), ``"uniform"``, or explicit shares summing to 1.  Naming no
    attention strategy, ``"ew_r"`` / ``"ew_gb"`` / ``"ew_gf"`` admit
    ``"att_r"`` / ``"att_gb"`` / ``"att_heads"`` (the same form).

    ``dtype_bytes`` (default: the cluster's, 4 for HAP's fp32) sizes
    activations, parameters and gradients; ``optimizer_bytes`` per parameter
    defaults to Adam's two fp32 moments (8), plus an fp32 master copy (4)
    below 4-byte elements (ZeRO, Rajbhandari et al. SC'20, section 3.1).
    With the cluster's memory known, the plan says whether it fits
    (``fits``); with ``fit`` (the default) a program that does not fit is
    replaced by the fastest fitting one the planner finds (``fits`` says
    whether any did; the search for it is a heuristic, see
    docs/replanning-and-heterogeneous.md), with ``fit=False`` it is only
    reported."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a hetero.Cluster, not {type(cluster).__name__}")
    ls = _layers(layers)
    dt = _pos("dtype_bytes", cluster.dtype_bytes if dtype_bytes is None else dtype_bytes)
    ob = (8.0 + (4.0 if dt < 4 else 0.0)) if optimizer_bytes is None else \
        _pos("optimizer_bytes", optimizer_bytes, allow_zero=True)
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
        if not any(allowed >> STRATEGIES.index(a) & 1 for a in _ATT_STRATEGIES):
            # an element-wise strategy admits attention on the same form
            for e, a in zip(_EW_STRATEGIES, _ATT_STRATEGIES):
                if allowed >> STRATEGIES.index(e) & 1:
                    allowed |= 1 << STRATEGIES.index(a)
        names = [STRATEGIES[i] for i in range(len(STRATEGIES)) if allowed >> i & 1]
        for i, (kind, *_rest) in enumerate(ls):
            fit = _FIT[kind]
            if not set(fit) & set(names):
                what = _KIND_NAMES[kind]
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
    mem = list(cluster.memory) if cluster.memory else None
    r = _core.hap_plan(ls, list(cluster.flops), cluster.bandwidths(), dt, allowed, mode, given,
                       max_rounds, ob, mem, not fit)
    fits = {1: True, 0: False}.get(r["fits"])
    return HapPlan(tuple(STRATEGIES[s] for s in r["strategy"]), tuple(r["ratios"]), r["time"],
                   r["compute"], r["allgather"], r["reducescatter"], r["allreduce"],
                   r["alltoall"], r["grouped_allgather"], r["grouped_reducescatter"],
                   r["rounds"], tuple(r["memory_used"]), fits, r["worst_device"],
                   HapMemory(*r["worst"]), tuple(cluster.memory), dt, ob)


def compare(layers: Sequence[HapLayer], cluster: Cluster, **kw) -> Dict[str, HapPlan]:
    """HAP's baselines next to its plan: ``"dp-ev"`` (DDP, even split),
    ``"dp-cp"`` (DDP, FLOP/s-proportional split), ``"zero-cp"`` (ZeRO-3 data
    parallelism, proportional split) and ``"hap"``.  Each says whether it
    fits (``fits``); the baselines are not changed to fit."""
    base = dict(kw, fit=False)
    out = {
        "dp-ev": plan(layers, cluster, strategies=DDP_STRATEGIES, ratios="uniform", **base),
        "dp-cp": plan(layers, cluster, strategies=DDP_STRATEGIES, ratios="proportional",
                      **base),
        "zero-cp": plan(layers, cluster, strategies=ZERO_STRATEGIES, ratios="proportional",
                        **base),
        "hap": plan(layers, cluster, **kw),
    }
    return out


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
