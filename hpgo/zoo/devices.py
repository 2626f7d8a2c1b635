"""Accelerator specs for the analytic (roofline) cost model.

Peak rates are the vendors' published dense (no sparsity) figures for the SXM
parts; users may build their own :class:`DeviceSpec` or load one from JSON.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field

__all__ = ["DeviceSpec", "DEVICES", "get_device", "device_names", "DTYPES", "dtype_bytes"]

# element size in bytes of the supported compute dtypes
DTYPES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}") from None


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator.

    matmul_flops: dtype -> peak FLOP/s of dense matrix products (tensor cores
    where the dtype uses them); vector_flops: dtype -> peak FLOP/s of
    element-wise arithmetic; mem_bw: memory bandwidth in bytes/s; mem_bytes:
    memory size in bytes.  The efficiency fields scale the peaks (1.0 = pure
    roofline) and kernel_overhead_s is added once per kernel launch (0 = pure
    roofline).
    """

    name: str
    matmul_flops: dict
    vector_flops: dict
    mem_bw: float
    mem_bytes: float
    matmul_efficiency: float = 0.75
    vector_efficiency: float = 0.75
    bw_efficiency: float = 0.8
    kernel_overhead_s: float = 4e-6
    notes: str = ""
    sources: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("device name must be a non-empty string")
        for k in ("mem_bw", "mem_bytes"):
            v = getattr(self, k)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"device {self.name}: {k} must be a positive number, got {v!r}")
        for k in ("matmul_efficiency", "vector_efficiency", "bw_efficiency"):
            v = getattr(self, k)
            if not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise ValueError(f"device {self.name}: {k} must be in (0, 1], got {v!r}")
        v = self.kernel_overhead_s
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"device {self.name}: kernel_overhead_s must be >= 0, got {v!r}")
        for k in ("matmul_flops", "vector_flops"):
            d = getattr(self, k)
            if not isinstance(d, dict) or not d:
                raise ValueError(f"device {self.name}: {k} must be a non-empty dict dtype -> FLOP/s")
            for dt, f in d.items():
                if dt not in DTYPES:
                    raise ValueError(f"device {self.name}: {k} has unknown dtype {dt!r}")
                if not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0:
                    raise ValueError(f"device {self.name}: {k}[{dt}] must be a positive number")

    def supports(self, dtype: str) -> bool:
        return dtype in self.matmul_flops and dtype in self.vector_flops

    def check_dtype(self, dtype: str) -> None:
        dtype_bytes(dtype)
        if not self.supports(dtype):
            raise ValueError(f"device {self.name} has no published {dtype} rate; "
                             f"supported: {', '.join(sorted(self.matmul_flops))}")

    def peak(self) -> "DeviceSpec":
        """The same device with efficiencies 1 and no launch overhead (pure roofline)."""
        d = asdict(self)
        d.update(matmul_efficiency=1.0, vector_efficiency=1.0, bw_efficiency=1.0,
                 kernel_overhead_s=0.0, name=self.name)
        return DeviceSpec(**d)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceSpec":
        if not isinstance(d, dict):
            raise ValueError("a device spec must be a JSON object")
        known = set(cls.__dataclass_fields__)
        extra = set(d) - known
        if extra:
            raise ValueError(f"unknown device spec keys: {', '.join(sorted(extra))}")
        missing = {"name", "matmul_flops", "vector_flops", "mem_bw", "mem_bytes"} - set(d)
        if missing:
            raise ValueError(f"device spec lacks: {', '.join(sorted(missing))}")
        d = dict(d)
        d["sources"] = tuple(d.get("sources", ()))
        return cls(**d)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "DeviceSpec":
        from .. import _files

        d = _files.load_json(path, "device file")
        try:
            return cls.from_dict(d)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{os.fspath(path)}: {e}") from None


T = 1e12
DEVICES: dict[str, DeviceSpec] = {
    "V100": DeviceSpec(
        name="V100",
        matmul_flops={"fp32": 15.7 * T, "fp16": 125 * T},
        vector_flops={"fp32": 15.7 * T, "fp16": 31.4 * T},
        mem_bw=900e9, mem_bytes=32 * 2**30,
        notes="Tesla V100 SXM2 32 GB (DAPPLE's card); no TF32/BF16",
        sources=("NVIDIA Tesla V100 datasheet: FP32 15.7 TFLOPS, tensor 125 TFLOPS, HBM2 900 GB/s",),
    ),
    "A100": DeviceSpec(
        name="A100",
        matmul_flops={"fp32": 19.5 * T, "tf32": 156 * T, "fp16": 312 * T, "bf16": 312 * T},
        vector_flops={"fp32": 19.5 * T, "tf32": 19.5 * T, "fp16": 78 * T, "bf16": 39 * T},
        mem_bw=2039e9, mem_bytes=80e9,
        notes="A100 SXM4 80 GB",
        sources=("NVIDIA A100 datasheet: FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS (dense), 2,039 GB/s",
                 "NVIDIA A100 whitepaper: FP16 non-tensor 78, BF16 non-tensor 39 TFLOPS"),
    ),
    "H100": DeviceSpec(
        name="H100",
        matmul_flops={"fp32": 67 * T, "tf32": 494.7 * T, "fp16": 989.4 * T, "bf16": 989.4 * T},
        vector_flops={"fp32": 67 * T, "tf32": 67 * T, "fp16": 133.8 * T, "bf16": 133.8 * T},
        mem_bw=3.35e12, mem_bytes=80e9,
        notes="H100 SXM5 80 GB",
        sources=("NVIDIA H100 datasheet (SXM): FP32 67, TF32 989, BF16/FP16 1,979 TFLOPS with sparsity "
                 "(dense = half), 3.35 TB/s",
                 "NVIDIA H100 whitepaper: FP16/BF16 non-tensor 133.8 TFLOPS"),
    ),
}
_ALIASES = {"V100-SXM2": "V100", "V100-32GB": "V100", "A100-SXM4": "A100", "A100-80GB": "A100",
            "H100-SXM": "H100", "H100-SXM5": "H100", "H100-80GB": "H100"}


def device_names() -> list[str]:
    return list(DEVICES)


def get_device(device) -> DeviceSpec:
    """A DeviceSpec, a known name (case-insensitive), or a path to a JSON spec."""
    if isinstance(device, DeviceSpec):
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be a name, a JSON path or a DeviceSpec, got {type(device).__name__}")
    key = device.strip().upper()
    for name in DEVICES:
        if key == name.upper():
            return DEVICES[name]
    for alias, name in _ALIASES.items():
        if key == alias.upper():
            return DEVICES[name]
    if device.endswith(".json") or os.path.sep in device:
        if not os.path.exists(device):
            raise ValueError(f"device spec file {device!r} does not exist")
        return DeviceSpec.from_json(device)
    raise ValueError(f"unknown device {device!r}; known: {', '.join(DEVICES)} (or a JSON spec file)")
