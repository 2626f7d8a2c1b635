"""Time whole training steps of Llama-style models on one GPU, in eager
PyTorch and with ``torch.compile``, to check hpgo's one-GPU prediction for
each kernel set (``ParallelPlan(kernels="eager" | "compile")``).

Needs PyTorch with a CUDA GPU; imports nothing from hpgo, so it also runs as
a plain script on a machine where hpgo is not built::

    python hpgo/profiler/step.py -o llama-step.json [--quick]
    hpgo profile step -o llama-step.json

What one step is (what torchtitan runs per GPU, without FSDP's
communication): bf16 weights and activations with fp32 master weights and
gradients for the optimizer (FSDP2's ``MixedPrecisionPolicy(param_dtype=
bfloat16, reduce_dtype=float32)``, Megatron's bf16 training), a Llama block
(RMSNorm, q/k/v
projections, rotary embedding in its rotate-half form, grouped-query
attention with the keys and values repeated, causal
``scaled_dot_product_attention``, output projection, residual, RMSNorm,
SwiGLU MLP, residual), a final RMSNorm, the output layer, cross-entropy on
the logits upcast to fp32, ``backward``, the gradients cast to fp32, a fused
AdamW step on the fp32 master weights and their copy back to bf16.  ``compile`` wraps each block and the loss in
``torch.compile`` (as torchtitan does); the embedding, final norm, output
layer and optimizer stay eager.

Recorded per model, sequence and mode (the median of timed steps after
warm-up): the step's wall time, the forward + backward and optimizer parts,
the number of GPU kernels one step launches and their summed time
(``torch.profiler``: wall minus kernel time is what the GPU waits for the
host), the peak allocated and reserved memory (the caching allocator's
reserve), and the compile time.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
from typing import Any

FORMAT = "hpgo-step-profile-1"

# (name, hidden, heads, kv heads, ffn, layers, vocab, tied, ((seq, micro-batch), ...)):
# Llama 3.2 1B's shape, Llama 3 8B's layer shape with 4 layers (the model's
# states fit one GPU beside the activations), and a small model where the
# eager step is bound by the host
MODELS = (
    ("llama3.2-1b", 2048, 32, 8, 8192, 16, 128256, True, ((2048, 2), (8192, 1))),
    ("llama3-8b-4l", 4096, 32, 8, 14336, 4, 128256, False, ((4096, 1), (8192, 1))),
    ("small-125m", 768, 12, 12, 2048, 12, 32000, True, ((1024, 4),)),
)
QUICK = (("tiny", 256, 4, 2, 512, 2, 1000, True, ((128, 2),)),)

torch: Any = None
F: Any = None
nn: Any = None


def _import_torch() -> None:
    global torch, F, nn
    try:
        import torch as _t
        import torch.nn as _nn
        import torch.nn.functional as _f
    except ImportError:
        raise ImportError("timing training steps needs PyTorch (pip install torch) on the GPU "
                          "machine") from None
    torch, F, nn = _t, _f, _nn


def _rope(seq: int, d: int, device: Any) -> tuple:
    inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _model(h: int, a: int, kv: int, f: int, layers: int, vocab: int, tied: bool,
           device: Any) -> Any:
    d = h // a

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)
            self.wq = nn.Linear(h, a * d, bias=False)
            self.wk = nn.Linear(h, kv * d, bias=False)
            self.wv = nn.Linear(h, kv * d, bias=False)
            self.wo = nn.Linear(a * d, h, bias=False)
            self.w1 = nn.Linear(h, f, bias=False)
            self.w3 = nn.Linear(h, f, bias=False)
            self.w2 = nn.Linear(f, h, bias=False)

        def forward(self, x: Any, freqs: Any) -> Any:
            b, s, _ = x.shape
            y = self.n1(x)
            q = self.wq(y).view(b, s, a, d)
            k = self.wk(y).view(b, s, kv, d)
            v = self.wv(y).view(b, s, kv, d)
            cos, sin = (t[:s].view(1, s, 1, d) for t in freqs)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            k = k.repeat_interleave(a // kv, dim=2)
            v = v.repeat_interleave(a // kv, dim=2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, a * d))
            y = self.n2(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, h)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(h)
            self.out = nn.Linear(h, vocab, bias=False)
            if tied:
                self.out.weight = self.emb.weight

        def forward(self, tokens: Any, freqs: Any) -> Any:
            x = self.emb(tokens)
            for blk in self.blocks:
                x = blk(x, freqs)
            return self.out(self.norm(x))

    m = Model().to(device)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.02) if p.dim() > 1 else torch.nn.init.ones_(p)
    return m


def _loss(logits: Any, labels: Any) -> Any:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def _sync(device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure_one(spec: tuple, seq: int, mb: int, mode: str, device: Any, *, steps: int = 8,
                warmup: int = 3) -> dict:
    """Time ``steps`` training steps of one model, sequence and mode."""
    name, h, a, kv, f, layers, vocab, tied, _ = spec
    torch.manual_seed(0)
    model = _model(h, a, kv, f, layers, vocab, tied, device).to(torch.bfloat16)
    weights = list(model.parameters())
    master = [w.detach().float().requires_grad_() for w in weights]
    opt = torch.optim.AdamW(master, lr=1e-4, fused=device.type == "cuda")
    freqs = _rope(seq, h // a, device)
    loss_fn = _loss
    graphs0 = 0
    if mode == "compile":
        torch._dynamo.reset()
        graphs0 = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = torch.compile(blk)
        loss_fn = torch.compile(_loss)
    tokens = torch.randint(0, vocab, (mb, seq), device=device)
    labels = torch.randint(0, vocab, (mb, seq), device=device)

    def fwd_bwd() -> None:
        loss_fn(model(tokens, freqs), labels).backward()

    def update() -> None:
        for m, w in zip(master, weights):
            m.grad = w.grad.float()
            w.grad = None
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_copy_(weights, master)

    def step() -> None:
        fwd_bwd()
        update()

    t0 = time.perf_counter()
    step()
    _sync(device)
    first = time.perf_counter() - t0
    for _ in range(warmup - 1):
        step()
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    walls, parts = [], []
    for _ in range(steps):
        if device.type == "cuda":
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            ev[0].record()
            fwd_bwd()
            ev[1].record()
            update()
            ev[2].record()
            torch.cuda.synchronize()
            walls.append(ev[0].elapsed_time(ev[2]) / 1e3)
            parts.append((ev[0].elapsed_time(ev[1]) / 1e3, ev[1].elapsed_time(ev[2]) / 1e3))
        else:
            t = time.perf_counter()
            step()
            walls.append(time.perf_counter() - t)
            parts.append((walls[-1], 0.0))
    row = {"name": name, "mode": mode, "hidden": h, "heads": a, "kv_heads": kv, "ffn": f,
           "layers": layers, "vocab": vocab, "tied": tied, "seq": seq, "micro_batch": mb,
           "parameters": sum(w.numel() for w in weights), "step_seconds": statistics.median(walls),
           "step_seconds_min": min(walls),
           "fwd_bwd_seconds": statistics.median(p[0] for p in parts),
           "optimizer_seconds": statistics.median(p[1] for p in parts),
           "first_step_seconds": first, "steps": steps}
    row["tokens_per_second"] = mb * seq / row["step_seconds"]
    if mode == "compile":
        # graphs dynamo compiled: one block graph shared by every block (and
        # the loss) when compiled code is reused; more means recompilation
        row["compiled_graphs"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) \
            - graphs0
    if device.type == "cuda":
        row["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        row.update(_kernels(step))
    del model, opt, master, weights
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _kernels(step: Any, n: int = 2) -> dict:
    """GPU kernels one step launches and their summed time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    count, busy = 0, 0.0
    for e in prof.events():
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            count += 1
            busy += e.device_time_total
    return {"kernels_per_step": count / n, "kernel_seconds": busy / 1e6 / n}


# (heads, kv heads, head dim, sequences): causal attention at the sequence
# lengths context parallelism splits (the kernel profile stops at 16K)
LONG_ATTENTION = ((32, 8, 128, (16384, 32768, 65536, 131072)),)


def measure_long_attention(device: Any, quick: bool = False) -> list:
    """Causal ``scaled_dot_product_attention`` forward and forward+backward
    on one sequence of each length (keys and values repeated to the query
    heads, as the step's model does): seconds and the rate in FLOP/s with
    the causal FLOPs (4 s^2 a d / 2 forward, 2.5x that backward)."""
    out = []
    grid = ((2, 1, 16, (128, 256)),) if quick else LONG_ATTENTION
    for a, kv, d, seqs in grid:
        for s in seqs:
            try:
                q, k, v = (torch.randn(1, a, s, d, device=device, dtype=torch.bfloat16,
                                       requires_grad=True) for _ in range(3))
                go = torch.randn_like(q)

                def fwd() -> Any:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def fb() -> None:
                    fwd().backward(go)
                tf, tfb = _time(fwd, device), _time(fb, device)
            except Exception as e:  # noqa: BLE001 - out of memory, a missing backend
                print(f"attention seq {s}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            flops = 4.0 * s * s * a * d / 2
            out.append({"heads": a, "kv_heads": kv, "head_dim": d, "seq": s,
                        "forward_seconds": tf, "fwd_bwd_seconds": tfb,
                        "forward_flops_per_second": flops / tf,
                        "fwd_bwd_flops_per_second": 3.5 * flops / tfb})
            print(f"attention a {a} d {d} seq {s:6d}: fwd {flops / tf / 1e12:6.1f}, fwd+bwd "
                  f"{3.5 * flops / tfb / 1e12:6.1f} TFLOP/s", flush=True)
            del q, k, v, go
    return out


def _time(fn: Any, device: Any, reps: int = 5) -> float:
    fn()
    _sync(device)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        _sync(device)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _smi() -> str:
    """The GPU's power limit and clocks as nvidia-smi reports them ("" without it)."""
    import subprocess
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,power.limit,clocks.max.sm,"
                               "clocks.max.mem,memory.total", "--format=csv"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _write(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def measure(output: str, *, quick: bool = False, modes: tuple = ("eager", "compile"),
            device: str | None = None) -> dict:
    """Time every model of :data:`MODELS` (``quick``: one tiny one) in each
    mode on ``device`` (default: the first CUDA GPU) and write the step
    profile to ``output`` after each measurement (atomically, so an
    interrupted run keeps what it measured); returns the profile."""
    _import_torch()
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        gpu, sms, mem = props.name, props.multi_processor_count, props.total_memory
    else:
        gpu, sms, mem = "cpu", 0, 0
    doc = {"format": FORMAT, "device": gpu, "nvidia_smi": _smi(), "multiprocessors": sms, "memory_bytes": mem,
           "torch": torch.__version__, "cuda": torch.version.cuda or "",
           "date": datetime.date.today().isoformat(),
           "allocator_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
           "recipe": "bf16 weights and activations, fp32 master weights and gradients, fused "
                     "AdamW, fp32 cross-entropy, one GPU, no FSDP",
           "samples": []}
    doc["attention"] = measure_long_attention(dev, quick)
    _write(output, doc)
    for spec in (QUICK if quick else MODELS):
        for seq, mb in spec[8]:
            for mode in modes:
                try:
                    row = measure_one(spec, seq, mb, mode, dev, steps=3 if quick else 8,
                                      warmup=2 if quick else 3)
                except Exception as e:  # noqa: BLE001 - out of memory, a missing backend
                    print(f"{spec[0]} seq {seq} {mode}: {type(e).__name__}: {e}", file=sys.stderr)
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                doc["samples"].append(row)
                print(f"{spec[0]:14s} seq {seq:6d} mb {mb} {mode:8s} "
                      f"{row['step_seconds'] * 1e3:9.2f} ms/step "
                      f"{row['tokens_per_second']:10,.0f} tokens/s "
                      f"kernels {row.get('kernels_per_step', 0):7.0f} "
                      f"busy {row.get('kernel_seconds', 0) * 1e3:9.2f} ms "
                      f"first {row['first_step_seconds']:6.1f} s", flush=True)
                _write(output, doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="the step profile to write (JSON)")
    ap.add_argument("--quick", action="store_true", help="one tiny model (a smoke test)")
    ap.add_argument("--modes", default="eager,compile",
                    help="comma-separated: eager, compile (default: both)")
    ap.add_argument("--device", help="a torch device (default: cuda if present, else cpu)")
    a = ap.parse_args(argv)
    modes = tuple(m.strip() for m in a.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in ("eager", "compile")]
    if bad or not modes:
        ap.error(f"--modes takes eager and/or compile, got {a.modes!r}")
    measure(a.output, quick=a.quick, modes=modes, device=a.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
