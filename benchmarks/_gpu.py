"""What the GPU benchmark scripts share: PyTorch on a CUDA device, a CUDA
event timer and an atomic JSON write.  They run as plain scripts on a GPU
machine where hpgo need not be built (``python benchmarks/gpu_....py``),
so this module imports nothing from hpgo."""
import json
import os
import statistics
import sys


def cuda_torch(script: str):
    """PyTorch, or None (after saying why on stderr) when it or a CUDA GPU
    is missing."""
    try:
        import torch
    except ImportError:
        print(f"{script} needs PyTorch", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{script} needs a CUDA GPU", file=sys.stderr)
        return None
    return torch


def median_seconds(torch, fn, reps: int, warmup: int = 1, before=None) -> float:
    """Median seconds of ``fn`` over ``reps`` runs timed by CUDA events,
    after ``warmup`` untimed runs; ``before`` (untimed) is called before
    each timed run."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        if before is not None:
            before()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return statistics.median(out)


def write_json(path: str, doc: dict) -> None:
    """Write ``doc`` to ``path`` through a temporary file, so that a run cut
    short leaves the last complete file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def device_doc(torch, fmt: str, **fields) -> dict:
    """A profile's head: its format, the GPU, the software and the date."""
    import datetime
    p = torch.cuda.get_device_properties(0)
    return {"format": fmt, "device": p.name, "multiprocessors": p.multi_processor_count,
            "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "date": datetime.date.today().isoformat(), **fields}
