"""Calibrate a GPU's efficiency curves from kernels measured on it.

The training-step model prices every kernel as compute at an efficiency
curve (the achieved fraction of peak for its size) plus HBM traffic at the
memory curve.  The presets carry Calculon's curves capped at the published
best GEMM rate; this module replaces them by curves fitted to a *kernel
profile*: the timings that ``hpgo profile kernels`` takes on a GPU
(copies, bf16 and fp8 GEMMs, fused attention).  The fit keeps the model's
form: the memory curve comes from the copies, then each compute curve is,
per size bucket, the median efficiency that makes the model's time (compute
plus the fitted memory term) equal the measured time.  Kernels of other
kinds in the profile (the MoE presets' expert GEMMs, permutations, ...) are
not fitted and serve as a check.

>>> prof = hpgo.calibrate.load("profiles/h100-sxm5-kernels.json")   # doctest: +SKIP
>>> gpu = hpgo.calibrate.fit(prof)                                   # a GPU with measured curves
>>> c = hpgo.calibrate.cluster(prof, "dgx-h100", nodes=8)            # the preset with that GPU
>>> for row in hpgo.calibrate.compare(prof, gpu): print(row)

From the command line: ``hpgo calibrate KERNELS.json [--cluster dgx-h100]
[--nodes N] [-o cluster.json]`` (or ``python -m hpgo.calibrate``) prints both
models' errors on every kind of kernel and can write the calibrated cluster;
``hpgo profile kernels -o KERNELS.json`` measures them (``hpgo.profiler.kernels``).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from . import _files
from .cli import error_line
from .cluster import GPU, Cluster

__all__ = ["FORMAT", "Kernel", "KernelProfile", "load", "fit", "cluster", "compare", "Comparison",
           "MATRIX_STEPS", "MEMORY_STEPS", "ATTENTION_STEPS"]

FORMAT = "hpgo-gpu-kernels/1"
# bucket thresholds (FLOP for compute curves, bytes for memory), descending
MATRIX_STEPS = (256e9, 64e9, 16e9, 4e9, 1e9, 0.25e9, 0.0)
ATTENTION_STEPS = (256e9, 64e9, 16e9, 4e9, 1e9, 0.0)
MEMORY_STEPS = (256e6, 64e6, 16e6, 4e6, 1e6, 0.0)
_MAX_SAMPLES = 1_000_000
_OPS_FITTED = {"copy", "gemm", "attention_fwd", "attention_bwd"}


@dataclass(frozen=True)
class Kernel:
    """One timed kernel: its kind (``op``), data type, FLOPs, HBM bytes
    (read + written), median seconds, and a label."""

    op: str
    dtype: str
    flops: float
    bytes: float
    seconds: float
    name: str = ""
    backend: str = ""


@dataclass(frozen=True)
class KernelProfile:
    device: str
    source: str
    kernels: tuple[Kernel, ...]

    def of(self, op: str, dtype: str | None = None) -> list[Kernel]:
        return [k for k in self.kernels if k.op == op and (dtype is None or k.dtype == dtype)]


def _num(v: Any, where: str, what: str, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: {what} must be a number, got {v!r}")
    try:
        x = float(v)
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError(f"{where}: {what} is too large for a number ({str(v)[:20]}...)") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise ValueError(f"{where}: {what} must be finite and {'> 0' if positive else '>= 0'}, got {v!r}")
    return x


def from_dict(d: Any, *, where: str = "kernel profile") -> KernelProfile:
    """Check and convert a kernel profile (``hpgo profile kernels``'s JSON)."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"{where}: not an {FORMAT} kernel profile (its \"format\" field)")
    raw = d.get("samples")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: \"samples\" must be a non-empty list")
    if len(raw) > _MAX_SAMPLES:
        raise ValueError(f"{where}: more than {_MAX_SAMPLES:,} samples")
    out = []
    for i, s in enumerate(raw):
        w = f"{where}: sample {i}"
        if not isinstance(s, dict):
            raise ValueError(f"{w}: must be an object")
        op, dt = s.get("op"), s.get("dtype")
        if not isinstance(op, str) or not isinstance(dt, str):
            raise ValueError(f"{w}: \"op\" and \"dtype\" must be strings")
        if dt not in ("fp32", "tf32", "bf16", "fp16", "fp8"):
            raise ValueError(f"{w}: unknown dtype {dt!r}")
        name, backend = s.get("name", ""), s.get("backend", "")
        for key, v in (("name", name), ("backend", backend)):
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{w}: \"{key}\" must be a string, got {v!r:.60}")
        name, backend = name or "", backend or ""
        if not backend and op.startswith("attention") and name.split():
            backend = name.split()[-1]  # "attention ... <backend>"
        out.append(Kernel(op, dt, _num(s.get("flops"), w, "flops"), _num(s.get("bytes"), w, "bytes"),
                          _num(s.get("seconds"), w, "seconds", positive=True), str(name), str(backend)))
    return KernelProfile(str(d.get("device", "?")), where, tuple(out))


def load(path: str | os.PathLike) -> KernelProfile:
    """Read a kernel profile written by ``hpgo profile kernels``."""
    where = os.fspath(path)
    return from_dict(_files.load_json(where, "kernel profile"), where=where)


def _steps(points: Sequence[tuple[float, float]], thresholds: Sequence[float]) -> tuple:
    """Step table: per bucket [threshold, previous threshold) the median
    efficiency of its points; an empty bucket takes its larger neighbour's."""
    vals: list[float | None] = []
    for i, thr in enumerate(thresholds):
        hi = thresholds[i - 1] if i else math.inf
        v = [e for size, e in points if thr <= size < hi]
        vals.append(statistics.median(v) if v else None)
    known = [v for v in vals if v is not None]
    if not known:
        raise ValueError("no samples to fit")
    last = known[0]
    table = []
    for thr, v in zip(thresholds, vals):
        last = v if v is not None else last
        table.append((float(thr), round(min(1.0, max(1e-3, last)), 4)))
    return tuple(table)


def _implied(k: Kernel, peak: float, mem_time) -> float:
    """The compute efficiency that makes the model's time equal the measured one."""
    rest = k.seconds - mem_time(k.bytes)
    if rest <= 0.05 * k.seconds:  # the memory term alone explains it: compute at peak
        return 1.0
    return k.flops / (peak * rest)


def _family(name: str) -> str:
    """The GPU generation a device name names ("H100", "A100", "V100", "H200"),
    or "" when it names none."""
    import re

    m = re.search(r"\b([A-Z]\d{3})\b", name.upper())
    return m.group(1) if m else ""


def fit(profile: KernelProfile, base: GPU | Cluster | str = "dgx-h100") -> GPU:
    """A copy of ``base``'s GPU (a preset name, a cluster or a GPU: peaks,
    memory size and bandwidth stay) with the memory, matrix, fp8-matrix and
    attention curves fitted to ``profile``.  Attention is fitted to the cuDNN
    back end's samples where there are some (Transformer Engine's on Hopper)."""
    if isinstance(base, str):
        base = Cluster.preset(base)
    gpu = base.gpu if isinstance(base, Cluster) else base
    if not isinstance(gpu, GPU):
        raise TypeError("base must be a preset name, an hpgo.Cluster or an hpgo.GPU")
    if not isinstance(profile, KernelProfile):
        raise TypeError("profile must be a KernelProfile (hpgo.calibrate.load)")
    measured, preset = _family(profile.device), _family(gpu.name)
    if measured and preset and measured != preset:
        raise ValueError(f"{profile.source}: measured on {profile.device}, not on the "
                         f"{gpu.name} of the base: calibrate against a preset of that GPU "
                         f"(hpgo calibrate --cluster PRESET; a {measured} one)")
    copies = profile.of("copy")
    if not copies:
        raise ValueError(f"{profile.source}: no copy samples: the memory curve cannot be fitted")
    bw = gpu.memory_bandwidth
    mem = _steps([(k.bytes, k.bytes / (bw * k.seconds)) for k in copies], MEMORY_STEPS)

    def mem_time(b: float) -> float:
        return 0.0 if b <= 0 else b / (bw * next(e for t, e in mem if b >= t))

    def curve(kernels: list[Kernel], peak: float, thresholds) -> tuple:
        return _steps([(k.flops, _implied(k, peak, mem_time)) for k in kernels if k.flops > 0],
                      thresholds)

    name = gpu.name if gpu.name.endswith("(measured)") else gpu.name + " (measured)"
    changes: dict[str, Any] = {"memory_efficiency": mem, "name": name}
    bf16 = [k for k in profile.of("gemm") if k.dtype in ("bf16", "fp16") and k.flops > 0]
    if not bf16:
        raise ValueError(f"{profile.source}: no bf16 GEMM samples: the matrix curve cannot be fitted")
    changes["matrix_efficiency"] = curve(bf16, gpu.bf16_flops, MATRIX_STEPS)
    fp8 = [k for k in profile.of("gemm", "fp8") if k.flops > 0]
    if fp8 and gpu.fp8_flops > 0:
        changes["fp8_matrix_efficiency"] = curve(fp8, gpu.fp8_flops, MATRIX_STEPS)
    att = [k for k in profile.kernels if k.op in ("attention_fwd", "attention_bwd") and k.flops > 0]
    if any(k.backend == "cudnn" for k in att):
        att = [k for k in att if k.backend == "cudnn"]
    if att:
        changes["attention_efficiency"] = curve(att, gpu.bf16_flops, ATTENTION_STEPS)
    return dataclasses.replace(gpu, **changes)


def cluster(profile: KernelProfile, base: str = "dgx-h100", nodes: int | None = None) -> Cluster:
    """The preset ``base`` (``nodes`` nodes) with its GPU calibrated to ``profile``."""
    c = Cluster.preset(base, nodes=nodes)
    return dataclasses.replace(c, gpu=fit(profile, c), name=c.name + "-measured")


@dataclass(frozen=True)
class Comparison:
    """Measured over modelled time for one kind of kernel: the median and
    the 10th / 90th percentiles over its ``n`` samples."""

    op: str
    dtype: str
    n: int
    median: float
    low: float
    high: float
    fitted: bool  # whether these samples were used by fit()

    def __repr__(self) -> str:
        return (f"{self.op:14s} {self.dtype:5s} n={self.n:4d}  measured/model: median "
                f"{self.median:5.2f}  (p10 {self.low:5.2f}, p90 {self.high:5.2f})"
                + ("" if self.fitted else "  [held out]"))


_KIND = {"gemm": "matrix", "grouped": "matrix", "attention_fwd": "attention",
         "attention_bwd": "attention"}


def _pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def compare(profile: KernelProfile, gpu: GPU | Cluster | str = "dgx-h100") -> list[Comparison]:
    """How far the model on ``gpu`` is from each kind of measured kernel
    (GEMMs, grouped expert GEMMs, attention, copies and the memory-bound MoE
    kernels, which the model prices as traffic only)."""
    # kernel prices depend on the GPU alone: any cluster carries it
    c = Cluster.preset(gpu) if isinstance(gpu, str) else gpu
    if isinstance(c, GPU):
        c = dataclasses.replace(Cluster.preset("dgx-h100"), gpu=c)
    groups: dict[tuple[str, str], list[float]] = {}
    cudnn = any(k.backend == "cudnn" for k in profile.kernels)
    for k in profile.kernels:
        if k.op in ("moe_layer", "layer"):   # whole blocks: see the docs' layer check
            continue
        kind = _KIND.get(k.op, "vector")
        if kind == "attention" and cudnn and k.backend != "cudnn":
            continue                         # as fit(): the cuDNN back end where measured
        dt = {"fp16": "bf16"}.get(k.dtype, k.dtype)
        flops = k.flops if kind != "vector" else 0.0   # memory-bound kernels: priced as traffic
        t = c.kernel_time(flops, k.bytes, dtype=dt if kind == "matrix" else "bf16", kind=kind)
        if t <= 0:
            continue
        groups.setdefault((k.op, k.dtype), []).append(k.seconds / t)
    return [Comparison(op, dt, len(v), statistics.median(v), _pct(v, 0.1), _pct(v, 0.9),
                       op in _OPS_FITTED)
            for (op, dt), v in groups.items()]


def _fmt_curve(name: str, steps: tuple, unit: str) -> str:
    if not steps:
        return f"  {name}: (matrix curve)"
    div = 1e9 if unit == "GFLOP" else 1e6
    return f"  {name}: " + ", ".join(f">={t / div:g} {unit}: {e:.3f}" for t, e in steps)


def _add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("kernels", help="kernel profile (JSON) from `hpgo profile kernels`")
    ap.add_argument("--cluster", default="dgx-h100",
                    help="preset whose GPU is calibrated (default dgx-h100)")
    ap.add_argument("--nodes", type=int, default=None, help="nodes of the written cluster")
    ap.add_argument("-o", "--output",
                    help="write the calibrated cluster here (JSON: hpgo.Cluster.load, --cluster FILE)")


def add_calibrate_subcommand(sub: Any) -> argparse.ArgumentParser:
    """``hpgo calibrate`` on an argparse subparsers object."""
    p = sub.add_parser("calibrate", help="fit a GPU's efficiency curves to measured kernels",
                       description=_DESCRIPTION,
                       epilog="example: hpgo profile kernels -o h100.json (on the GPU machine); "
                              "hpgo calibrate h100.json --nodes 8 -o cluster.json; "
                              "hpgo autoplan --model llama3-70b --cluster cluster.json "
                              "--global-batch 512")
    _add_args(p)
    p.set_defaults(func=run)
    return p


_DESCRIPTION = ("Fit a GPU's efficiency curves to a kernel profile (`hpgo profile kernels`), "
                "print how far the preset's and the fitted curves are from every kind of kernel "
                "measured, and optionally write the calibrated cluster.")


def run(args: argparse.Namespace) -> int:
    """Run ``hpgo calibrate`` from parsed arguments; returns the exit status."""
    try:
        from .autoplan_cli import _check_output

        _check_output(args.output, "-o")
        prof = load(args.kernels)
        base = Cluster.preset(args.cluster, nodes=args.nodes)
        gpu = fit(prof, base)
    except (OSError, ValueError) as e:
        print(f"hpgo calibrate: error: {error_line(e)}", file=sys.stderr)
        return 2
    print(f"{prof.source}: {len(prof.kernels)} kernels measured on {prof.device}")
    print(f"fitted curves of {gpu.name}:")
    print(_fmt_curve("matrix (bf16)", gpu.matrix_efficiency, "GFLOP"))
    print(_fmt_curve("matrix (fp8)", gpu.fp8_matrix_efficiency, "GFLOP"))
    print(_fmt_curve("attention", gpu.attention_efficiency, "GFLOP"))
    print(_fmt_curve("memory", gpu.memory_efficiency, "MB"))
    for label, g in ((f"{args.cluster} preset", base), ("calibrated", dataclasses.replace(base, gpu=gpu))):
        print(f"\n{label}:")
        for row in compare(prof, g):
            print("  ", row)
    if args.output:
        try:
            dataclasses.replace(base, gpu=gpu, name=base.name + "-measured").save(args.output)
        except OSError as e:
            print(f"hpgo calibrate: error: {error_line(e)}", file=sys.stderr)
            return 2
        print(f"\nwrote {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpgo.calibrate", description=_DESCRIPTION,
                                 allow_abbrev=False)
    _add_args(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
