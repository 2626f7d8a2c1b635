"""Analytic model zoo: per-layer profiles without a GPU.

Each model is built op by op from its published architecture (FLOPs and
bytes moved per op, parameter counts exact), and every op's time is a
roofline estimate on a named device (V100, A100, H100, or a user's
:class:`DeviceSpec`).  The result is an :class:`hpgo.graphfile.Profile` that
writes as PipeDream ``graph.txt`` for the planner.

    >>> from hpgo import zoo
    >>> prof = zoo.profile("resnet50", device="V100", batch_size=32)
    >>> zoo.write_profile("profiles/resnet50-v100", prof)

``peak=True`` gives the pure roofline (efficiencies 1, no launch overhead);
the default scales the peaks by the device's efficiency fields.
"""
from __future__ import annotations

import inspect
import platform

from ..graphfile import Node, Profile, write_profile
from .devices import DEVICES, DTYPES, DeviceSpec, device_names, dtype_bytes, get_device
from .graph import Cost, T, ZooGraph
from .models import MODELS, ModelInfo, resolve_model

__all__ = ["build", "profile", "param_count", "models", "devices", "DeviceSpec", "get_device",
           "DEVICES", "DTYPES", "MODELS", "write_profile", "ZooGraph", "Cost", "T", "dtype_bytes"]


def models() -> dict[str, str]:
    """Model name -> one-line description."""
    return {k: v.description for k, v in MODELS.items()}


def devices() -> list[str]:
    return device_names()


def _config(info: ModelInfo, overrides: dict) -> dict:
    sig = inspect.signature(info.builder)
    allowed = [p for p in sig.parameters if p != "g"]
    bad = sorted(set(overrides) - set(allowed))
    if bad:
        raise ValueError(f"unknown option(s) {', '.join(bad)}; this model takes: {', '.join(allowed)}")
    cfg = dict(info.config)
    cfg.update(overrides)
    for k, v in cfg.items():
        default = info.config.get(k, sig.parameters[k].default if k in sig.parameters else None)
        if isinstance(default, int) and not isinstance(default, bool) and (
                isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"option {k} must be an int, not {type(v).__name__}")
        if isinstance(default, tuple) and all(isinstance(x, int) for x in default):
            # a per-stage list such as ResNet's blocks per stage (3, 4, 6, 3)
            n = len(default)
            example = ",".join(map(str, default))
            if not isinstance(v, (tuple, list)) or len(v) != n or any(
                    isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
                raise (ValueError if isinstance(v, (tuple, list)) else TypeError)(
                    f"option {k} must be {n} positive integers, one per stage "
                    f"(e.g. {k}={example}), not {v!r}")
            cfg[k] = tuple(v)
            continue
        if isinstance(v, bool) or k == "head":
            continue
        if isinstance(v, int) and v < 1:
            raise ValueError(f"option {k} must be a positive integer, got {v}")
    return cfg


def build(model: str, batch_size: int | None = None, dtype: str = "fp32", **config) -> ZooGraph:
    """The op graph of ``model`` (device independent)."""
    name = resolve_model(model)
    info = MODELS[name]
    dtype_bytes(dtype)
    cfg = _config(info, config)
    g = ZooGraph(name, info.batch_size if batch_size is None else batch_size, dtype)
    info.builder(g, **cfg)
    g.config = cfg
    return g


def param_count(model: str, include_heads: bool = True, **config) -> int:
    """Number of parameters of ``model`` (tied weights counted once).

    include_heads=False leaves out pre-training heads that the published
    backbone counts exclude (BERT's MLM/NSP heads).
    """
    return build(model, 1, **config).param_count(include_heads)


def graph_to_profile(g: ZooGraph, device, peak: bool = False) -> Profile:
    """Roofline times of every node of ``g`` on ``device``."""
    dev = get_device(device)
    dev.check_dtype(g.dtype)
    if peak:
        dev = dev.peak()
    nodes, edges = [], []
    tot = {"fwd_flops": 0.0, "bwd_flops": 0.0, "fwd_bytes": 0.0, "bwd_bytes": 0.0}
    for i, zn in enumerate(g.nodes):
        f = b = 0.0
        ex = {"fwd_flops": 0.0, "bwd_flops": 0.0, "fwd_bytes": 0.0, "bwd_bytes": 0.0}
        for c in zn.costs:
            cf, cb = c.times(dev, g.dtype)
            f += cf
            b += cb
            ex["fwd_flops"] += c.f_flops * c.count
            ex["bwd_flops"] += c.b_flops * c.count
            ex["fwd_bytes"] += c.f_bytes * c.count
            ex["bwd_bytes"] += c.b_bytes * c.count
        for k in tot:
            tot[k] += ex[k]
        ex["params"] = zn.params
        nodes.append(Node(zn.desc, f * 1e3, b * 1e3, zn.out_bytes, float(zn.params * g.e),
                          ex if i else {}))
        for src in zn.inputs:
            edges.append((src, i))
    from .. import __version__ as hpgo_version  # noqa: WPS433 (late: avoids a cycle)

    meta = {
        "model": g.model,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in getattr(g, "config", {}).items()},
        "device": dev.to_dict(),
        "dtype": g.dtype,
        "batch_size": g.n,
        "method": "analytic roofline (hpgo.zoo)" + (", peak rates" if peak else ""),
        "param_count": g.param_count(),
        "param_bytes_per_element": g.e,
        "totals": tot,
        "versions": {"hpgo": hpgo_version, "python": platform.python_version()},
        "units": "graph.txt times in ms per mini-batch; sizes in bytes",
    }
    return Profile(nodes, edges, meta)


def profile(model: str, device="V100", batch_size: int | None = None, dtype: str = "fp32",
            peak: bool = False, **config) -> Profile:
    """Analytic profile of a zoo model on a device.

    model: a name from :func:`models` (case, '-' and '_' ignored);
    device: "V100", "A100", "H100", a JSON spec path or a DeviceSpec;
    batch_size: samples per mini-batch (default: the model's usual profile
    batch); dtype: "fp32", "tf32", "fp16" or "bf16" (the device must publish a
    rate for it); config: architecture options (e.g. layers=, hidden=, seq=).
    """
    dev = get_device(device)
    dev.check_dtype(dtype)
    return graph_to_profile(build(model, batch_size, dtype, **config), dev, peak)
