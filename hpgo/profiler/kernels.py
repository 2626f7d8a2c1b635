"""Measure the kernels hpgo's training-step model prices, on the GPU at hand.

Needs PyTorch with a CUDA GPU (it is not an hpgo dependency: run this where
training runs).  Writes a kernel profile, JSON, that ``hpgo.calibrate``
turns into a GPU whose efficiency curves are the measured ones::

    hpgo profile kernels -o mygpu-kernels.json       # or hpgo.profiler.kernels.measure(path)
    hpgo calibrate mygpu-kernels.json --cluster dgx-h100 --nodes 8 -o mycluster.json
    hpgo autoplan --model llama3-70b --cluster mycluster.json --global-batch 512

What is timed (median of CUDA-event timings after warm-up, on random data,
inputs rotated so that small ones do not sit in L2):
- ``copy``: out = 2 * x over 64 KiB .. 2 GiB (bytes read + written): the
  memory curve;
- ``gemm``: bf16 and fp8 (per-tensor scaled, ``torch._scaled_mm``) products
  over a grid of transformer shapes (tokens x hidden x inner, and weight-
  gradient shapes with the tokens inner): the matrix curve and the fp8 rate;
- ``grouped``: the routed-expert GEMMs of each MoE preset's published
  expert-parallel slice (local experts x tokens per expert), forward fc1 and
  fc2, bf16 as one batched product and fp8 as one scaled product per expert
  (how Transformer Engine's grouped linear runs them);
- ``attention``: causal scaled-dot-product attention forward and backward
  (flash and cuDNN back ends where PyTorch has them);
- ``moe_misc``: router top-k, token permutation and weighted unpermutation
  of those slices, SwiGLU, RMSNorm and the fp8 quantization pass (amax +
  cast): hpgo prices them as memory traffic;
- ``moe_layer``: a whole routed-expert block (router, top-k, the host reading
  the tokens per expert as Megatron's all-to-all dispatcher does, permute,
  grouped GEMMs, SwiGLU, unpermute) forward and backward in eager PyTorch:
  its wall time against the sum of its kernels' times (torch.profiler)
  shows how much host time a synchronising MoE block exposes;
- ``layer``: whole Llama-style layers forward and backward in eager PyTorch
  (no RoPE), to set against the model's layer time.

The run takes about three minutes on an H100.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from typing import Any, Callable

torch: Any = None   # imported by measure(): PyTorch is optional for hpgo
F: Any = None

# (preset, local experts, tokens per expert, hidden, expert inner) of the
# published expert-parallel slices (Megatron-Bridge's H100 tables, balanced routing)
MOE_SLICES = (
    ("qwen3-30b-a3b ep8 mbs1", 16, 2048, 2048, 768),
    ("qwen3-30b-a3b ep8 mbs2", 16, 4096, 2048, 768),
    ("gpt-oss-120b ep8 mbs1", 16, 1024, 2880, 2880),
    ("gpt-oss-120b ep8 mbs4", 16, 4096, 2880, 2880),
    ("qwen3-235b-a22b ep32 tp2", 4, 4096, 4096, 1536),
    ("deepseek-v3 ep64 tp2", 4, 4096, 7168, 2048),
    ("mixtral-8x7b ep8", 1, 8192, 4096, 14336),
)
# (name, heads, kv heads, head dim, sequence): the presets' shapes per
# tensor-parallel rank, then a grid
ATTENTION = (
    ("llama3-8b", 32, 8, 128, 8192),
    ("llama3-70b tp4", 16, 2, 128, 8192),
    ("qwen3-30b-a3b", 32, 4, 128, 4096),
    ("gpt-oss-120b", 64, 8, 64, 4096),
    ("small", 16, 16, 64, 2048),
) + tuple(("grid", a, a, d, s) for s in (1024, 2048, 4096, 16384)
          for a in (8, 32) for d in (64, 128))


def timeit(fn, *, reps: int = 20, warmup: int = 3, inner: int = 1) -> float:
    """Median seconds of one call of ``fn`` (``inner`` calls per timed region)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / inner)
    times.sort()
    return times[len(times) // 2]


def rotating(make, nbytes: int, budget: int = 256 << 20):
    """A few independent input sets, enough to overflow L2 for small inputs."""
    n = max(1, min(8, budget // max(nbytes, 1)))
    return [make() for _ in range(n)]


class Cycle:
    def __init__(self, items):
        self.items, self.i = items, 0

    def __call__(self):
        self.i = (self.i + 1) % len(self.items)
        return self.items[self.i]


def fp8_ok() -> bool:
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return False
    try:
        a = torch.randn(32, 32, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(32, 32, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)
        return True
    except Exception as e:  # noqa: BLE001 - report and go on without fp8
        print("fp8 GEMMs unavailable:", e, file=sys.stderr)
        return False


def gemm_fn(m: int, k: int, n: int, dtype: str):
    """A closure computing (m x k) . (k x n) in ``dtype`` on rotated inputs."""
    def make():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        if dtype == "fp8":
            return a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        return a, w
    isz = 1 if dtype == "fp8" else 2
    sets = Cycle(rotating(make, isz * (m * k + n * k)))
    one = torch.ones((), device="cuda")
    if dtype == "fp8":
        return lambda: (lambda a, w: torch._scaled_mm(a, w.t(), one, one, out_dtype=torch.bfloat16))(*sets())
    return lambda: (lambda a, w: a @ w.t())(*sets())


def measure_copy(out: list) -> None:
    for p in range(16, 32):
        nbytes = 1 << p                      # read + written
        n = nbytes // 4                      # bf16 elements per tensor
        sets = Cycle(rotating(lambda: torch.randn(n, device="cuda", dtype=torch.bfloat16), nbytes))
        dst = torch.empty(n, device="cuda", dtype=torch.bfloat16)
        inner = 20 if nbytes < (64 << 20) else 1
        s = timeit(lambda: torch.mul(sets(), 2, out=dst), inner=inner)
        out.append({"op": "copy", "dtype": "bf16", "flops": 0.0, "bytes": float(nbytes), "seconds": s})


def measure_gemm(out: list, dtypes, quick: bool = False) -> None:
    tokens = (256, 1024, 2048, 4096, 8192, 16384)
    dims = (768, 1536, 2048, 4096, 8192, 14336)
    grads = ((1024, 4096, 16384), (768, 2048, 4096, 8192), (768, 2048, 4096, 14336))
    if quick:  # one shape per size bucket, roughly
        tokens, dims, grads = (256, 2048, 8192), (768, 4096, 14336), ((4096,), (2048,), (4096,))
    shapes = set()
    for t in tokens:
        for k in dims:
            for n in dims:
                if t * k * n <= 16384 * 8192 * 8192:
                    shapes.add((t, k, n))          # activations x weights
    for k in grads[0]:
        for m in grads[1]:
            for n in grads[2]:
                shapes.add((m, k, n))               # weight gradients: tokens inner
    for dt in dtypes:
        for m, k, n in sorted(shapes):
            fl = 2.0 * m * k * n
            isz = 1 if dt == "fp8" else 2
            fn = gemm_fn(m, k, n, dt)
            reps = 20 if fl > 1e11 else 30
            inner = 10 if fl < 2e10 else 1
            s = timeit(fn, reps=reps, inner=inner)
            out.append({"op": "gemm", "dtype": dt, "shape": [m, k, n], "flops": fl,
                        "bytes": float(isz * (m * k + k * n) + 2 * m * n), "seconds": s})


def measure_grouped(out: list, dtypes) -> None:
    one = torch.ones((), device="cuda")
    for name, g, m, h, f in MOE_SLICES:
        for what, k, n in (("fc1", h, 2 * f), ("fc2", f, h)):
            for dt in dtypes:
                x = torch.randn(g, m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
                if dt == "fp8":
                    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
                    fn = lambda x8=x8, w8=w8, g=g: [torch._scaled_mm(x8[i], w8[i].t(), one, one, out_dtype=torch.bfloat16) for i in range(g)]
                else:
                    wt = w.transpose(1, 2)
                    fn = lambda x=x, wt=wt: torch.bmm(x, wt)
                fl = 2.0 * g * m * k * n
                isz = 1 if dt == "fp8" else 2
                s = timeit(fn, reps=20)
                out.append({"op": "grouped", "dtype": dt, "name": f"{name} {what}",
                            "shape": [g, m, k, n], "flops": fl,
                            "bytes": float(g * (isz * (m * k + k * n) + 2 * m * n)), "seconds": s})
                del x, w


def measure_attention(out: list) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("flash", SDPBackend.FLASH_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append(("cudnn", SDPBackend.CUDNN_ATTENTION))
    for name, a, kv, d, s in ATTENTION:
        q = torch.randn(1, a, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, a, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, a, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        # causal: half the score matrix; forward two GEMMs of s x s x d per head
        fl = 2 * 2.0 * a * s * s * d / 2
        for bname, be in backends:
            try:
                with sdpa_kernel(be):
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    o = fwd()
                    go = torch.randn_like(o)
                    tf = timeit(fwd)
                    def fb():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        torch.autograd.grad(o, (q, k, v), go)
                    tfb = timeit(fb)
            except Exception as e:  # noqa: BLE001 - a back end PyTorch lacks here
                print(f"attention {bname} {name}: {e}", file=sys.stderr)
                continue
            io = 2.0 * 4 * a * s * d
            out.append({"op": "attention_fwd", "dtype": "bf16", "name": f"{name} {bname}",
                        "shape": [a, kv, d, s], "flops": fl, "bytes": io, "seconds": tf})
            out.append({"op": "attention_bwd", "dtype": "bf16", "name": f"{name} {bname}",
                        "shape": [a, kv, d, s], "flops": 2.5 * fl, "bytes": 2 * io,
                        "seconds": max(tfb - tf, 1e-9)})


def measure_misc(out: list, fp8: bool) -> None:
    seen = set()
    for name, g, m, h, f in MOE_SLICES:
        routed = g * m
        if (routed, h) in seen:
            continue
        seen.add((routed, h))
        x = torch.randn(routed, h, device="cuda", dtype=torch.bfloat16)
        # permutation of the routed copies (a sorted gather) and the weighted
        # scatter-add back to tokens (top-k = 8 here: tokens = routed / 8)
        topk = 8
        tok = routed // topk
        idx = torch.randperm(routed, device="cuda")
        wts = torch.rand(routed, 1, device="cuda", dtype=torch.bfloat16)
        dst = torch.zeros(tok, h, device="cuda", dtype=torch.bfloat16)
        tok_of = idx // topk
        gb = 2.0 * 2 * routed * h
        out.append({"op": "permute", "dtype": "bf16", "name": name, "flops": 0.0, "bytes": gb,
                    "seconds": timeit(lambda: x.index_select(0, idx))})
        out.append({"op": "unpermute", "dtype": "bf16", "name": name, "flops": 2.0 * routed * h,
                    "bytes": 2.0 * (2 * routed * h + tok * h),
                    "seconds": timeit(lambda: dst.index_add_(0, tok_of, x * wts))})
        logits = torch.randn(tok, 128, device="cuda", dtype=torch.float32)
        out.append({"op": "router_topk", "dtype": "fp32", "name": name, "flops": 8.0 * tok * 128,
                    "bytes": 4.0 * 2 * tok * 128,
                    "seconds": timeit(lambda: torch.topk(torch.softmax(logits, -1), topk, dim=-1))})
        gu = torch.randn(routed, 2 * f, device="cuda", dtype=torch.bfloat16)
        out.append({"op": "swiglu", "dtype": "bf16", "name": name, "flops": 8.0 * routed * f,
                    "bytes": 2.0 * 3 * routed * f,
                    "seconds": timeit(lambda: F.silu(gu[:, :f]) * gu[:, f:])})
        wn = torch.ones(h, device="cuda", dtype=torch.bfloat16)
        if hasattr(F, "rms_norm"):
            out.append({"op": "rmsnorm", "dtype": "bf16", "name": name, "flops": 5.0 * routed * h,
                        "bytes": 2.0 * 2 * routed * h,
                        "seconds": timeit(lambda: F.rms_norm(x, (h,), wn))})
        if fp8:
            def quant():
                amax = x.abs().amax()
                return (x * (448.0 / amax)).to(torch.float8_e4m3fn)
            out.append({"op": "fp8_quant", "dtype": "bf16", "name": name, "flops": 3.0 * routed * h,
                        "bytes": float(routed * h * (2 + 2 + 1)), "seconds": timeit(quant)})


def moe_block(g: int, m: int, h: int, f: int, topk: int):
    """A closure running one routed-expert block forward and backward on
    T = g m / topk tokens routed to g local experts."""
    T = g * m // topk
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(T, h, device=dev, dtype=bf, requires_grad=True)
    wr = (torch.randn(g, h, device=dev, dtype=bf) / math.sqrt(h)).requires_grad_()
    # stored (experts, out, in) as Megatron's and torchtitan's; used transposed
    w1s = (torch.randn(g, 2 * f, h, device=dev, dtype=bf) / math.sqrt(h)).requires_grad_()
    w2s = (torch.randn(g, h, f, device=dev, dtype=bf) / math.sqrt(f)).requires_grad_()
    grouped = hasattr(torch, "_grouped_mm")

    def run():
        w1, w2 = w1s.transpose(1, 2), w2s.transpose(1, 2)
        probs = torch.softmax((x @ wr.t()).float(), dim=-1)
        top, idx = torch.topk(probs, topk, dim=-1)
        flat = idx.flatten()
        counts = torch.bincount(flat, minlength=g)
        sizes = counts.tolist()                       # the host waits here
        order = torch.argsort(flat, stable=True)
        src = order // topk
        xs = x.index_select(0, src)
        if grouped:
            offs = torch.cumsum(counts, 0).to(torch.int32)
            a = torch._grouped_mm(xs, w1, offs=offs)
            a = F.silu(a[:, :f]) * a[:, f:]
            y = torch._grouped_mm(a, w2, offs=offs)
        else:
            ys = []
            for e, part in enumerate(torch.split(xs, sizes)):
                a = part @ w1[e]
                ys.append((F.silu(a[:, :f]) * a[:, f:]) @ w2[e])
            y = torch.cat(ys)
        y = y * top.flatten().index_select(0, order).unsqueeze(1).to(bf)
        out = torch.zeros(T, h, device=dev, dtype=bf).index_add(0, src, y)
        out.sum().backward()
    return run, grouped


# (name, hidden, heads, kv heads, ffn, sequence): Llama-style layers
LAYERS = (("llama3-8b", 4096, 32, 8, 14336, 4096), ("llama3-8b", 4096, 32, 8, 14336, 8192))


def dense_layer(h: int, a: int, kv: int, f: int, s: int):
    """A closure running one pre-norm Llama layer (RMSNorm, QKV, causal
    attention, output projection, RMSNorm, SwiGLU MLP, residuals; no RoPE)
    forward and backward on one micro-batch of ``s`` tokens."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev, bf = "cuda", torch.bfloat16
    d = h // a
    x = torch.randn(s, h, device=dev, dtype=bf, requires_grad=True)
    w = {n: (torch.randn(*shape, device=dev, dtype=bf) / math.sqrt(shape[1])).requires_grad_()
         for n, shape in (("qkv", ((a + 2 * kv) * d, h)), ("o", (h, a * d)),
                          ("fc1", (2 * f, h)), ("fc2", (h, f)))}
    n1, n2 = (torch.ones(h, device=dev, dtype=bf, requires_grad=True) for _ in range(2))
    go = torch.randn(s, h, device=dev, dtype=bf)

    def run():
        y = F.rms_norm(x, (h,), n1)
        q, k, v = (y @ w["qkv"].t()).split((a * d, kv * d, kv * d), dim=-1)
        q = q.view(s, a, d).transpose(0, 1).unsqueeze(0)
        k = k.view(s, kv, d).transpose(0, 1).repeat_interleave(a // kv, 0).unsqueeze(0)
        v = v.view(s, kv, d).transpose(0, 1).repeat_interleave(a // kv, 0).unsqueeze(0)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x1 = x + o.squeeze(0).transpose(0, 1).reshape(s, a * d) @ w["o"].t()
        g, u = (F.rms_norm(x1, (h,), n2) @ w["fc1"].t()).chunk(2, dim=-1)
        out = x1 + (F.silu(g) * u) @ w["fc2"].t()
        out.backward(go)
    return run


def measure_layers(out: list) -> None:
    for name, h, a, kv, f, s in LAYERS:
        try:
            run = dense_layer(h, a, kv, f, s)
            wall = timeit(run, reps=10)
        except Exception as e:  # noqa: BLE001 - an API this PyTorch lacks
            print(f"layer {name}: {e}", file=sys.stderr)
            continue
        out.append({"op": "layer", "dtype": "bf16", "name": name, "shape": [h, a, kv, f, s],
                    "flops": 0.0, "bytes": 0.0, "seconds": wall})
        torch.cuda.empty_cache()


def measure_moe_layer(out: list) -> None:
    from torch.profiler import ProfilerActivity, profile
    for name, g, m, h, f in MOE_SLICES[:4]:
        topk = 8 if "qwen" in name else 4
        try:
            run, grouped = moe_block(g, m, h, f, topk)
            wall = timeit(run, reps=10)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    run()
                torch.cuda.synchronize()
            busy = sum(e.self_device_time_total for e in prof.key_averages()) / 1e6 / 5
        except Exception as e:  # noqa: BLE001 - an API this PyTorch lacks
            print(f"moe_layer {name}: {e}", file=sys.stderr)
            continue
        fl = 3 * 2.0 * g * m * 3 * h * f
        out.append({"op": "moe_layer", "dtype": "bf16", "name": name, "shape": [g, m, h, f, topk],
                    "grouped_mm": grouped, "flops": fl, "bytes": 0.0, "seconds": wall,
                    "kernel_seconds": busy})
        torch.cuda.empty_cache()


def _import_torch() -> None:
    global torch, F
    try:
        import torch as _t
        import torch.nn.functional as _f
    except ImportError:
        raise ImportError("measuring kernels needs PyTorch with CUDA (pip install torch) "
                          "on the GPU machine") from None
    torch, F = _t, _f


def measure(output: str | os.PathLike, *, quick: bool = False,
            log: Callable[[str], None] | None = None) -> dict:
    """Time the kernels on this machine's first CUDA GPU and write the kernel
    profile to ``output`` (atomically, after every group of kernels, so an
    interrupted run leaves what it measured); returns the profile.
    ``quick``: a few shapes of each kind (seconds; a coarse calibration)."""
    global MOE_SLICES, ATTENTION
    _import_torch()
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU visible: run this on the GPU machine")
    from .._files import atomic_write
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_properties(0)
    fp8 = fp8_ok()
    dtypes = ("bf16", "fp8") if fp8 else ("bf16",)
    samples: list = []
    steps = [("copy", lambda: measure_copy(samples)),
             ("gemm", lambda: measure_gemm(samples, dtypes, quick)),
             ("grouped", lambda: measure_grouped(samples, dtypes)),
             ("attention", lambda: measure_attention(samples)),
             ("misc", lambda: measure_misc(samples, fp8)),
             ("moe_layer", lambda: measure_moe_layer(samples)),
             ("layer", lambda: measure_layers(samples))]
    saved = MOE_SLICES, ATTENTION
    if quick:
        MOE_SLICES, ATTENTION = MOE_SLICES[:1], ATTENTION[4:5]
    doc = {"format": "hpgo-gpu-kernels/1", "device": dev.name,
           "multiprocessors": dev.multi_processor_count,
           "memory_bytes": dev.total_memory, "torch": torch.__version__,
           "cuda": torch.version.cuda,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
           "samples": samples}
    try:
        for name, step in steps:
            t = time.time()
            step()
            torch.cuda.empty_cache()
            if log:
                log(f"{name}: {time.time() - t:.1f} s")
            atomic_write(output, json.dumps(doc, indent=1) + "\n")
    finally:
        MOE_SLICES, ATTENTION = saved
    return doc


def summary(doc: dict) -> str:
    """The best rate of each kind of kernel in a profile, one line each."""
    lines = []
    for op in ("copy", "gemm", "grouped", "attention_fwd", "attention_bwd"):
        for dt in ("bf16", "fp8"):
            xs = [s for s in doc["samples"] if s["op"] == op and s["dtype"] == dt]
            if xs:
                best = max(xs, key=lambda s: (s["flops"] or s["bytes"]) / s["seconds"])
                rate = (best["flops"] or best["bytes"]) / best["seconds"]
                unit = "TFLOP/s" if best["flops"] else "TB/s"
                lines.append(f"  {op:14s} {dt:5s} best {rate / 1e12:7.1f} {unit}  "
                             f"({len(xs)} samples)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpgo.profiler.kernels",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="kernel profile to write (JSON)")
    ap.add_argument("--quick", action="store_true", help="a few shapes of each kind (coarse)")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        doc = measure(a.output, quick=a.quick, log=lambda m: print(m, file=sys.stderr, flush=True))
    except (ImportError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(doc['samples'])} samples in {time.time() - t0:.0f} s -> {a.output}")
    print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
