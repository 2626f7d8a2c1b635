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

Four more modes run the block as torchtitan's December 2024 benchmarks
did (commit 9dec370, its RMSNorm module written out as there: an fp32
upcast, ``pow``, ``mean``, ``rsqrt``): ``titan`` wraps each block in op-level selective
activation checkpointing (the outputs of every other ``mm``, of
FlashAttention and of nothing else saved; torchtitan's
``selective_ac_option = "op"`` policy, its counter reset per block call),
compiles each block alone with ``fullgraph=True`` and leaves the final
norm, the output layer and the loss eager, with ``scaled_dot_product_attention``
held to its FlashAttention-2 back end (what PyTorch picked on Hopper then);
``titan-full`` checkpoints each block whole; ``titan-fsdp`` is ``titan``
under FSDP2 (``fully_shard`` per block and at the root,
``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``, fp32
parameters, foreach AdamW) on a process group of one GPU: FSDP2's hooks,
casts and copy-in/out kernels without any wire time; ``titan-eager`` is
``titan`` without ``torch.compile`` (the benchmarks' eager rows), every op
of the RMSNorm module its own kernel.

``--power`` samples the GPU's board power, SM clock and clock-event
reasons through NVML (``nvidia-ml-py``) while each step runs and while a
bf16 GEMM, a device copy and FlashAttention-2 run alone, and with the GPU
idle: what a power limit below the board's would cut.  ``--cp-blocks``
times the FlashAttention-2 calls one rank of PyTorch's load-balanced ring
attention makes at 32,768 tokens per rank (the causal diagonal, all local
queries against half a remote K/V, half the queries against a whole one)
and the fp32 merge of a block's output, forward and backward.
``--tp-shards`` runs one tensor-parallel rank's share of torchtitan's TP-8
runs (:data:`TP_SHARDS`) in their torchtitan mode.  ``--float8 RECIPES``
runs the ``titan`` and ``titan-full`` blocks again with their linears
converted by torchao (``convert_to_float8_training`` with
``Float8LinearConfig.from_recipe_name``: ``tensorwise``, ``rowwise``,
``rowwise_with_gw_hp``; the output layer stays bf16, as torchtitan leaves
it), each row naming its recipe and the torchao version.

Recorded per model, sequence and mode (the median of timed steps after
warm-up): the last timed step's loss, the step's wall time, the forward +
backward and optimizer parts, the number of GPU kernels one step launches
and their summed time (``torch.profiler``: wall minus kernel time is what
the GPU waits for the host), the memory allocated before the run starts
(what earlier runs left), the peak allocated and reserved memory (the
caching allocator's reserve), the compile time, and on a GPU the 40
costliest kernels by name and the GEMMs by operand shapes.
"""
from __future__ import annotations

import argparse
import datetime
import gc
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
# torchtitan's December 2024 8B runs: 8,192 tokens, local batch 2 (4 layers here)
TITAN_MODELS = (("llama3-8b-4l", 4096, 32, 8, 14336, 4, 128256, False, ((8192, 2),)),)
# One tensor-parallel rank's share of torchtitan's TP-8 runs (4 layers): the
# heads, KV heads, FFN and vocabulary divided by 8 at head size 128, the
# runs' local batch and checkpointing (the June 2025 8B and 70B async-TP
# benchmark, the December 2024 405B run), each with its head size as a tenth
# field and its one mode as an eleventh
TP_SHARDS = (
    ("llama3-8b-tp8-4l", 4096, 4, 1, 1792, 4, 16032, False, ((8192, 12),), 128, "titan"),
    ("llama3-70b-tp8-4l", 8192, 8, 1, 3584, 4, 16032, False, ((8192, 16),), 128, "titan-full"),
    ("llama3-405b-tp8-4l", 16384, 16, 1, 6656, 4, 16032, False, ((8192, 4),), 128, "titan-full"),
)
QUICK_SHARD = (("tiny-shard", 256, 2, 1, 256, 2, 1000, False, ((128, 2),), 64, "titan"),)
MODES = ("eager", "compile", "titan", "titan-full", "titan-fsdp", "titan-eager")
TITAN_MODES = ("titan", "titan-full", "titan-fsdp", "titan-eager")
# torchao's float8 training recipes (Float8LinearRecipeName) and the modes
# that run them (one GPU, no FSDP: no float8 all-gather to choose)
FLOAT8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
FLOAT8_MODES = ("titan", "titan-full")

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
           device: Any, d: int, titan_norm: bool = False) -> Any:
    """The model, at head size ``d``; ``titan_norm``: the RMSNorm written out as torchtitan
    9dec370's ``models/norms.py`` has it (an fp32 upcast, ``pow``, ``mean``,
    ``rsqrt``, the cast back, the weight), which the compiler fuses its own
    way, instead of PyTorch's ``nn.RMSNorm``."""

    class TitanRMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x: Any) -> Any:
            y = x.float()
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
            return y.type_as(x) * self.weight

    def norm() -> Any:
        return TitanRMSNorm(h) if titan_norm else nn.RMSNorm(h)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = norm(), norm()
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
            self.norm = norm()
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


def _op_sac_context() -> Any:
    """torchtitan's op-level selective checkpointing policy (9dec370,
    ``_apply_ac_to_transformer_block``): save the outputs of the ops on its
    list (``mm``, the SDPA kernels, ``max``) except every second ``mm`` of a
    block call, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    # the maxima too: the amax a float8 cast scales by (the list's last entry)
    save = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default, aten.max.default}
    count = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == aten.mm.default:
            count[mode] += 1
        keep = func in save and not (func == aten.mm.default and count[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def _checkpointed(block: Any, full: bool) -> Any:
    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = block

        def forward(self, x: Any, freqs: Any) -> Any:
            from torch.utils.checkpoint import checkpoint
            extra = {} if full else {"context_fn": _op_sac_context}
            return checkpoint(self.inner, x, freqs, use_reentrant=False,
                              preserve_rng_state=False, **extra)
    return Checkpointed()


def _one_rank_group(device: Any) -> None:
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0,
                                world_size=1)


def _flash_only(device: Any) -> Any:
    """A context holding SDPA to FlashAttention-2 (CUDA) or to its flash
    kernel (CPU)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def _import_torchao() -> Any:
    try:
        import torchao
        import torchao.float8
    except ImportError:
        raise ImportError("--float8 runs torchao's float8 linears: pip install torchao "
                          "on the GPU machine") from None
    return torchao


def _to_float8(model: Any, recipe: str) -> tuple:
    """Swap every linear of the blocks for torchao's ``Float8Linear`` with
    ``recipe``'s configuration (the output layer stays bf16, as torchtitan's
    float8 converter leaves it); returns (linears swapped, torchao version)."""
    torchao = _import_torchao()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear
    convert_to_float8_training(model.blocks, config=Float8LinearConfig.from_recipe_name(recipe))
    n = sum(isinstance(m, Float8Linear) for m in model.blocks.modules())
    return n, getattr(torchao, "__version__", "")


def measure_one(spec: tuple, seq: int, mb: int, mode: str, device: Any, *, steps: int = 8,
                warmup: int = 3, power: Any = None, detail: bool = False,
                float8: str | None = None) -> dict:
    """Time ``steps`` training steps of one model, sequence and mode
    (``detail``: with its kernel and GEMM tables, :func:`_kernels`;
    ``float8``: the blocks' linears run torchao's recipe of that name)."""
    import contextlib
    name, h, a, kv, f, layers, vocab, tied = spec[:8]
    d = spec[9] if len(spec) > 9 else h // a
    if float8 is not None and (float8 not in FLOAT8_RECIPES or mode not in FLOAT8_MODES):
        raise ValueError(f"float8 runs one of {', '.join(FLOAT8_RECIPES)} in the "
                         f"{' or '.join(FLOAT8_MODES)} modes; got {float8!r} in {mode!r}")
    gc.collect()
    held = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    torch.manual_seed(0)
    titan = mode in TITAN_MODES
    fsdp = mode == "titan-fsdp"
    model = _model(h, a, kv, f, layers, vocab, tied, device, d, titan_norm=titan)
    f8 = _to_float8(model, float8) if float8 is not None else None
    if titan:
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = _checkpointed(blk, full=mode == "titan-full")
    graphs0 = 0
    compiled = mode not in ("eager", "titan-eager")
    if compiled:
        torch._dynamo.reset()
        graphs0 = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = torch.compile(blk, fullgraph=titan)
    loss_fn = torch.compile(_loss) if mode == "compile" else _loss
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        _one_rank_group(device)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for i, blk in enumerate(model.blocks):
            # torchtitan keeps the last block gathered for the backward
            fully_shard(blk, mp_policy=mp, reshard_after_forward=i < layers - 1)
        fully_shard(model, mp_policy=mp, reshard_after_forward=True)
        weights = list(model.parameters())
        master: list = []
        opt = torch.optim.AdamW(weights, lr=1e-4, foreach=True)
    else:
        model = model.to(torch.bfloat16)
        weights = list(model.parameters())
        master = [w.detach().float().requires_grad_() for w in weights]
        opt = torch.optim.AdamW(master, lr=1e-4, fused=device.type == "cuda")
    freqs = _rope(seq, d, device)
    tokens = torch.randint(0, vocab, (mb, seq), device=device)
    labels = torch.randint(0, vocab, (mb, seq), device=device)

    last: dict = {}

    def fwd_bwd() -> None:
        with _flash_only(device) if titan else contextlib.nullcontext():
            pred = model(tokens, freqs)
            loss = loss_fn(pred, labels)
            del pred
            loss.backward()
            last["loss"] = loss.detach()

    def update() -> None:
        if not fsdp:
            for m, w in zip(master, weights):
                m.grad = w.grad.float()
                w.grad = None
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not fsdp:
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
    row = {"name": name, "mode": mode, "norm": "torchtitan" if titan else "torch.nn.RMSNorm",
           "hidden": h, "heads": a, "kv_heads": kv, "head_dim": d,
           "ffn": f, "layers": layers, "vocab": vocab, "tied": tied, "seq": seq, "micro_batch": mb,
           "parameters": sum(w.numel() for w in weights), "step_seconds": statistics.median(walls),
           "step_seconds_min": min(walls),
           "fwd_bwd_seconds": statistics.median(p[0] for p in parts),
           "optimizer_seconds": statistics.median(p[1] for p in parts),
           "first_step_seconds": first, "steps": steps}
    # the last timed step's loss: a run whose numbers went non-finite (or
    # whose tensors collapsed) times kernels on degenerate data
    row["loss"] = float(last["loss"])
    if f8 is not None:
        row.update(float8=float8, float8_linears=f8[0], torchao=f8[1])
    row["tokens_per_second"] = mb * seq / row["step_seconds"]
    if compiled:
        # graphs dynamo compiled: one block graph shared by every block (and
        # the loss) when compiled code is reused; more means recompilation
        row["compiled_graphs"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) \
            - graphs0
    if device.type == "cuda":
        row["allocated_before_bytes"] = held   # what earlier runs left allocated
        row["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        row.update(_kernels(step, detail=detail))
    if power is not None:
        row["power"] = power.during(step, device)
        if mode == "titan":
            row["power_duty"] = _step_duty(step, device, power)
    del model, opt, master, weights, fwd_bwd, update, step
    # the compiled blocks sit in reference cycles: without a collection each
    # compiled run left its blocks' 16-bit weights allocated into the next
    # one's peak (1.6 GiB a run for the 4-layer 8B block)
    if compiled:
        torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _kernels(step: Any, n: int = 2, detail: bool = False) -> dict:
    """GPU kernels one step launches and their summed time (torch.profiler);
    ``detail`` adds the 40 costliest kernels by name and the GEMM calls
    (``aten::mm`` and its kin) by operand shapes, seconds and calls per step."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if detail else [])
    with profile(activities=acts, record_shapes=detail) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    count, busy = 0, 0.0
    attention: dict = {}
    names: dict = {}
    for e in prof.events():
        # GPU-side ranges of user annotations ("## Call CompiledFxGraph ..",
        # "Optimizer.step#..") span kernels already counted
        if getattr(e, "is_user_annotation", False) or e.name.startswith("## ") or "#" in e.name:
            continue
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            count += 1
            busy += e.device_time_total
            low = e.name.lower()
            if any(w in low for w in ("flash", "fmha", "attention", "cudnn")):
                attention[e.name[:80]] = attention.get(e.name[:80], 0.0) + e.device_time_total
            if detail:
                t, c = names.get(e.name[:100], (0.0, 0))
                names[e.name[:100]] = (t + e.device_time_total, c + 1)
    top = sorted(attention, key=attention.get, reverse=True)[:3]
    out = {"kernels_per_step": count / n, "kernel_seconds": busy / 1e6 / n,
           "attention_kernels": top}
    if detail:
        out["kernel_table"] = [{"kernel": k, "seconds": t / 1e6 / n, "calls": c / n}
                               for k, (t, c) in sorted(names.items(), key=lambda kv: -kv[1][0])[:40]]
        gemms = []
        for ev in prof.key_averages(group_by_input_shape=True):
            if ev.key in ("aten::mm", "aten::addmm", "aten::_scaled_mm", "aten::bmm"):
                dev_t = getattr(ev, "device_time_total", None)
                if dev_t is None:
                    dev_t = getattr(ev, "cuda_time_total", 0.0)
                gemms.append({"op": ev.key, "shapes": [list(x) for x in ev.input_shapes if x],
                              "seconds": dev_t / 1e6 / n, "calls": ev.count / n})
        out["gemms"] = sorted(gemms, key=lambda g: -g["seconds"])
    return out


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


class Power:
    """Board power, SM clock and clock-event reasons sampled through NVML
    every 20 ms on a thread while a workload runs.  NVML's power reading on
    Ampere and later is averaged over about a second, so a workload is run
    for ``seconds`` and the first second of samples is dropped."""

    # nvmlClocksEventReason bits (nvml.h): software power cap, hardware
    # slowdown, software and hardware thermal slowdown, power brake
    REASONS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20,
               "hw_thermal": 0x40, "hw_power_brake": 0x80}

    def __init__(self, index: int = 0) -> None:
        try:
            import pynvml
        except ImportError:
            raise ImportError("--power needs NVML's Python binding "
                              "(pip install nvidia-ml-py, or 'hpgo[torch]')") from None
        pynvml.nvmlInit()
        self.nv = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.limit_watts = pynvml.nvmlDeviceGetEnforcedPowerLimit(self.h) / 1e3

    def _sample(self) -> tuple:
        nv, h = self.nv, self.h
        try:
            reasons = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
        except AttributeError:
            reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        return (time.perf_counter(), nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM), reasons,
                nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))

    def during(self, work: Any, device: Any, seconds: float = 5.0, settle: float = 1.0) -> dict:
        """Run ``work()`` repeatedly for ``seconds`` (``None``: sleep) and
        summarise the samples taken after the first ``settle`` seconds."""
        import threading
        samples: list = []
        stop = threading.Event()

        def sampler() -> None:
            while not stop.is_set():
                samples.append(self._sample())
                stop.wait(0.02)
        th = threading.Thread(target=sampler, daemon=True)
        t0 = time.perf_counter()
        th.start()
        runs = 0
        try:
            while time.perf_counter() - t0 < seconds:
                if work is None:
                    time.sleep(0.05)
                else:
                    work()
                    runs += 1
                    _sync(device)
        finally:
            stop.set()
            th.join()
        elapsed = time.perf_counter() - t0
        kept = [x for x in samples if x[0] - t0 >= settle] or samples
        out = {"seconds": elapsed, "runs": runs, "samples": len(kept),
               "power_watts": statistics.mean(x[1] for x in kept),
               "power_watts_max": max(x[1] for x in kept),
               "sm_clock_mhz": statistics.mean(x[2] for x in kept),
               "sm_clock_mhz_min": min(x[2] for x in kept),
               "memory_clock_mhz": statistics.mean(x[3] for x in kept),
               "temperature_c": max(x[5] for x in kept),
               "power_limit_watts": self.limit_watts}
        for name, bit in self.REASONS.items():
            out[f"{name}_share"] = sum(1 for x in kept if x[4] & bit) / len(kept)
        return out


def measure_power(device: Any, power: Power, quick: bool = False) -> dict:
    """Power and clocks with the GPU idle and while one kind of kernel runs
    alone: a bf16 GEMM (8,192 cubed), a 1 GiB device copy and causal
    FlashAttention-2 forward + backward (8,192 tokens, 32 heads of 128)."""
    secs = 2.0 if quick else 6.0
    out: dict = {"idle": power.during(None, device, seconds=3.0 if not quick else 1.5)}
    n = 256 if quick else 8192
    x, w = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))

    def gemm() -> None:
        for _ in range(8):
            torch.mm(x, w)
    t = _time(gemm, device)
    out["gemm"] = power.during(gemm, device, seconds=secs)
    out["gemm"]["flops_per_second"] = 8 * 2.0 * n ** 3 / t
    out["gemm"]["sustained_flops_per_second"] = (out["gemm"]["runs"] * 8 * 2.0 * n ** 3
                                                 / out["gemm"]["seconds"])
    out["gemm_duty"] = _duty_cycles(x, w, device, power, quick)
    del x, w
    nbytes = (1 << 20) if quick else (1 << 30)
    src = torch.empty(nbytes, device=device, dtype=torch.uint8)
    dst = torch.empty_like(src)

    def copy() -> None:
        for _ in range(8):
            dst.copy_(src)
    t = _time(copy, device)
    out["copy"] = power.during(copy, device, seconds=secs)
    out["copy"]["bytes_per_second"] = 8 * 2.0 * nbytes / t
    del src, dst
    s, a, d = (256, 2, 16) if quick else (8192, 32, 128)
    q, k, v = (torch.randn(1, a, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))

    def attention() -> None:
        with _flash_only(device):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    t = _time(attention, device)
    out["attention"] = power.during(attention, device, seconds=secs)
    out["attention"]["flops_per_second"] = 3.5 * 4.0 * s * s * a * d / 2 / t
    out["attention"]["sustained_flops_per_second"] = (out["attention"]["runs"] * 3.5 * 4.0 * s
                                                      * s * a * d / 2
                                                      / out["attention"]["seconds"])
    del q, k, v
    for kind, row in out.items():
        if kind == "gemm_duty":
            for r in row:
                print(f"power gemm at duty {r['duty']:.2f}: {r['power_watts']:6.1f} W, SM "
                      f"{r['sm_clock_mhz']:6.0f} MHz, {r['gemm_seconds'] * 1e3:.3f} ms a GEMM, "
                      f"power-capped {r['sw_power_cap_share']:.0%}", flush=True)
            continue
        print(f"power {kind:9s}: {row['power_watts']:6.1f} W (max {row['power_watts_max']:.0f}"
              f" of {row['power_limit_watts']:.0f}), SM {row['sm_clock_mhz']:6.0f} MHz "
              f"(min {row['sm_clock_mhz_min']}), power-capped {row['sw_power_cap_share']:.0%}",
              flush=True)
    return out


def _with_gaps(work: Any, gap: Any, device: Any, power: Power, seconds: float) -> dict:
    """Run ``work()`` in bursts timed by CUDA events, the GPU idle for
    ``gap(busy seconds)`` after each, under ``power.during``: its readings
    with the share of time busy (``duty``) and the median burst time
    (``busy_seconds``), both past the first quarter of the bursts."""
    busy: list = []
    walls: list = []

    def burst() -> None:
        t = time.perf_counter()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        work()
        e1.record()
        e1.synchronize()
        busy.append(e0.elapsed_time(e1) / 1e3)
        g = gap(busy[-1])
        if g:
            time.sleep(g)
        walls.append(time.perf_counter() - t)
    row = power.during(burst, device, seconds=seconds)
    keep = len(busy) // 4          # past the first second or so
    row["duty"] = sum(busy[keep:]) / sum(walls[keep:])
    row["busy_seconds"] = statistics.median(busy[keep:])
    return row


def _duty_cycles(x: Any, w: Any, device: Any, power: Power, quick: bool) -> list:
    """The same bf16 GEMM in bursts of 12 with the GPU idle for a gap after
    each: the share of time busy (duty) against the power drawn, the SM clock
    and the time one GEMM takes.  Under a power cap a lower duty lets the
    clock rise; how far it rises for a given duty is how the board's power
    grows with the clock (``duty x f^g`` stays constant while capped)."""
    def gemms() -> None:
        for _ in range(12):
            torch.mm(x, w)
    out = []
    for gap in ((0.0, 0.004) if quick else (0.0, 0.004, 0.010, 0.020, 0.035)):
        row = _with_gaps(gemms, lambda _busy: gap, device, power, 2.0 if quick else 5.0)
        row["gap_seconds"] = gap
        row["gemm_seconds"] = row.pop("busy_seconds") / 12
        out.append(row)
    return out


def _step_duty(step: Any, device: Any, power: Power) -> list:
    """The training step with the GPU idle for a gap after each: its time
    (CUDA events) and the power drawn against the share of time busy, as
    ``_duty_cycles`` does for a GEMM -- how the step's own power grows with
    its rate."""
    out = []
    for frac in (0.0, 0.35, 0.7, 1.2):
        row = _with_gaps(step, lambda busy: frac * busy, device, power, 5.0)
        row["gap_share"] = frac
        row["step_seconds"] = row.pop("busy_seconds")
        out.append(row)
        print(f"titan step at duty {row['duty']:.2f}: {row['power_watts']:6.1f} W, "
              f"{row['step_seconds'] * 1e3:.1f} ms, SM {row['sm_clock_mhz']:.0f} MHz", flush=True)
    return out


# tokens per rank of torchtitan's context-parallel runs (Table 2 of its
# December 2024 benchmark: 32,768 at every CP size)
CP_TOKENS = 32768


def measure_cp_blocks(device: Any, quick: bool = False) -> list:
    """The FlashAttention-2 calls of one rank of PyTorch's load-balanced ring
    attention (``_templated_ring_attention``) at ``CP_TOKENS`` tokens per
    rank, Llama 3 8B's 32 heads of 128 (K and V repeated to the query heads,
    as torchtitan's Llama passes them): the causal diagonal (step 0), all
    local queries against the first half of a remote K/V, the second half of
    the queries against all of it (each later step is one of the two), and
    the fp32 merge of a step's output into the running one (``convert_to_f32``:
    the block's cast, the log-sum-exp correction, the concatenation of the
    updated half).  Forward and forward + backward, seconds and FLOP/s."""
    L, a, d = (256, 2, 16) if quick else (CP_TOKENS, 32, 128)
    out = []
    for kind, lq, lk, causal in (("diagonal", L, L, True), ("all-queries-half-keys", L, L // 2,
                                                            False),
                                 ("half-queries-all-keys", L // 2, L, False)):
        q = torch.randn(1, a, lq, d, device=device, dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(1, a, lk, d, device=device, dtype=torch.bfloat16,
                            requires_grad=True) for _ in range(2))
        go = torch.randn_like(q)

        def fwd() -> Any:
            with _flash_only(device):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def fb() -> None:
            fwd().backward(go)
        tf, tfb = _time(fwd, device), _time(fb, device)
        flops = 4.0 * lq * lk * a * d * (0.5 if causal else 1.0)
        out.append({"kind": kind, "queries": lq, "keys": lk, "heads": a, "head_dim": d,
                    "causal": causal, "forward_seconds": tf, "fwd_bwd_seconds": tfb,
                    "forward_flops_per_second": flops / tf,
                    "backward_flops_per_second": 2.5 * flops / max(tfb - tf, 1e-9),
                    "fwd_bwd_flops_per_second": 3.5 * flops / tfb})
        print(f"cp block {kind:22s}: fwd {flops / tf / 1e12:6.1f}, bwd "
              f"{2.5 * flops / max(tfb - tf, 1e-9) / 1e12:6.1f} TFLOP/s "
              f"({tf * 1e3:.2f} / {(tfb - tf) * 1e3:.2f} ms)", flush=True)
        del q, k, v, go
    run = torch.zeros(1, a, L, d, device=device, dtype=torch.float32)
    lse = torch.zeros(1, a, L, 1, device=device, dtype=torch.float32)
    blk = torch.randn(1, a, L // 2, d, device=device, dtype=torch.bfloat16)
    blse = torch.randn(1, a, L // 2, 1, device=device, dtype=torch.float32)

    def merge() -> None:
        o, l_ = run.chunk(2, dim=2)[1], lse.chunk(2, dim=2)[1]
        b = blk.to(torch.float32)
        o = o - torch.sigmoid(blse - l_) * (o - b)
        l_ = l_ - F.logsigmoid(l_ - blse)
        torch.cat((run.chunk(2, dim=2)[0], o), dim=2)
        torch.cat((lse.chunk(2, dim=2)[0], l_), dim=2)
    tm = _time(merge, device)
    out.append({"kind": "merge-half-rows", "queries": L // 2, "heads": a, "head_dim": d,
                "forward_seconds": tm})
    print(f"cp merge of half the rows (eager fp32): {tm * 1e3:.2f} ms", flush=True)
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
            device: str | None = None, power: bool = False, cp_blocks: bool = False,
            long_attention: bool = True, tp_shards: bool = False,
            float8: tuple = ()) -> dict:
    """Time every model of :data:`MODELS` (:data:`TITAN_MODELS` for the
    torchtitan modes; ``quick``: one tiny one) in each mode on ``device``
    (default: the first CUDA GPU) and write the step profile to ``output``
    after each measurement (atomically, so an interrupted run keeps what it
    measured); returns the profile.  ``power`` adds NVML power and clock
    readings, ``cp_blocks`` the context-parallel attention blocks,
    ``tp_shards`` one tensor-parallel rank's share of torchtitan's TP-8 runs
    (:data:`TP_SHARDS`, each in its own torchtitan mode; ``modes`` may then
    be empty), ``float8`` torchao's recipes of those names after each
    ``titan`` and ``titan-full`` run (:data:`FLOAT8_RECIPES`)."""
    bad = [m for m in modes if m not in MODES]
    if bad or not (modes or tp_shards):
        raise ValueError(f"modes must be some of {', '.join(MODES)}; got {modes!r}")
    float8 = tuple(float8)
    bad = [r for r in float8 if r not in FLOAT8_RECIPES]
    if bad:
        raise ValueError(f"float8 recipes must be some of {', '.join(FLOAT8_RECIPES)}; "
                         f"got {bad[0]!r}")
    if float8 and not any(m in FLOAT8_MODES for m in modes):
        raise ValueError(f"float8 recipes run in the {' or '.join(FLOAT8_MODES)} modes: "
                         f"add one to modes (got {modes!r})")
    _import_torch()
    if float8:
        _import_torchao()      # before the first step is timed, not after
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        gpu, sms, mem = props.name, props.multi_processor_count, props.total_memory
    else:
        gpu, sms, mem = "cpu", 0, 0
    if power and dev.type != "cuda":
        raise ValueError("--power reads an NVIDIA GPU's sensors: it needs a CUDA device")
    meter = Power(dev.index or 0) if power else None
    recipe = ("bf16 weights and activations, fp32 master weights and gradients, fused "
              "AdamW, fp32 cross-entropy, one GPU, no FSDP")
    if tp_shards or any(m in TITAN_MODES for m in modes):
        recipe += ("; titan modes: torchtitan 9dec370's block (op-level selective or full "
                   "checkpointing, each block compiled alone, eager loss, FlashAttention-2); "
                   "titan-fsdp: FSDP2 on a group of one GPU, fp32 parameters, foreach AdamW; "
                   "titan-eager: the titan block without torch.compile")
    if float8:
        recipe += ("; float8 rows: the blocks' linears as torchao's Float8Linear with "
                   "Float8LinearConfig.from_recipe_name(float8), the output layer bf16")
    doc = {"format": FORMAT, "device": gpu, "nvidia_smi": _smi(), "multiprocessors": sms, "memory_bytes": mem,
           "torch": torch.__version__, "cuda": torch.version.cuda or "",
           "date": datetime.date.today().isoformat(),
           "allocator_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
           "recipe": recipe, "samples": []}
    if meter is not None:
        doc["power"] = measure_power(dev, meter, quick)
        _write(output, doc)
    if cp_blocks:
        doc["cp_blocks"] = measure_cp_blocks(dev, quick)
        _write(output, doc)
    doc["attention"] = measure_long_attention(dev, quick) if long_attention else []
    _write(output, doc)
    plain = tuple(m for m in modes if m not in TITAN_MODES)
    titan = tuple(m for m in modes if m in TITAN_MODES)
    # (model, its (mode, float8 recipe) cases): the float8 recipes after each
    # titan and titan-full run of the torchtitan models
    runs = [(spec, [(m, None) for m in plain]) for spec in (QUICK if quick else MODELS)] \
        if plain else []
    runs += [(spec, [(m, r) for m in titan
                     for r in (None,) + (float8 if m in FLOAT8_MODES else ())])
             for spec in (QUICK if quick else TITAN_MODELS)] if titan else []
    if tp_shards:
        runs += [(spec, [(spec[10], None)]) for spec in (QUICK_SHARD if quick else TP_SHARDS)]
    for spec, cases in runs:
        for seq, mb in spec[8]:
            for mode, recipe in cases:
                label = mode + (f"+{recipe}" if recipe else "")
                try:
                    row = measure_one(spec, seq, mb, mode, dev, steps=3 if quick else 8,
                                      warmup=2 if quick else 3, power=meter, detail=True,
                                      float8=recipe)
                except ImportError:
                    raise
                except Exception as e:  # noqa: BLE001 - out of memory, a missing backend
                    print(f"{spec[0]} seq {seq} {label}: {type(e).__name__}: {e}",
                          file=sys.stderr)
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                doc["samples"].append(row)
                pw = row.get("power")
                print(f"{spec[0]:14s} seq {seq:6d} mb {mb} {label:10s} "
                      f"{row['step_seconds'] * 1e3:9.2f} ms/step "
                      f"(fwd+bwd {row['fwd_bwd_seconds'] * 1e3:8.2f}) "
                      f"{row['tokens_per_second']:10,.0f} tokens/s "
                      f"kernels {row.get('kernels_per_step', 0):7.0f} "
                      f"busy {row.get('kernel_seconds', 0) * 1e3:9.2f} ms "
                      f"peak {row.get('peak_reserved_bytes', 0) / 2**30:5.1f} GiB "
                      f"first {row['first_step_seconds']:6.1f} s"
                      + (f" {pw['power_watts']:.0f} W {pw['sm_clock_mhz']:.0f} MHz" if pw else "")
                      + f" {row.get('attention_kernels', [''])[:1]}", flush=True)
                _write(output, doc)
    try:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    except ImportError:
        pass
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="the step profile to write (JSON)")
    ap.add_argument("--quick", action="store_true", help="one tiny model (a smoke test)")
    ap.add_argument("--modes", default="eager,compile",
                    help=f"comma-separated: {', '.join(MODES)} (default: eager,compile)")
    ap.add_argument("--device", help="a torch device (default: cuda if present, else cpu)")
    ap.add_argument("--power", action="store_true",
                    help="sample board power and SM clocks through NVML (NVIDIA GPUs)")
    ap.add_argument("--cp-blocks", action="store_true",
                    help="time one rank's context-parallel attention blocks")
    ap.add_argument("--no-long-attention", action="store_true",
                    help="skip the long-sequence causal attention sweep")
    ap.add_argument("--tp-shards", action="store_true",
                    help="also time one tensor-parallel rank's share of torchtitan's TP-8 "
                         "runs (8B, 70B, 405B; --modes '' for these alone)")
    ap.add_argument("--float8", default="",
                    help=f"comma-separated torchao recipes ({', '.join(FLOAT8_RECIPES)}) to "
                         f"run the {' and '.join(FLOAT8_MODES)} blocks in as well "
                         "(needs torchao)")
    a = ap.parse_args(argv)
    modes = tuple(m.strip() for m in a.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if not (modes or a.tp_shards):
        ap.error("--modes is empty: give at least one mode, or --tp-shards")
    if bad:
        ap.error(f"--modes takes {', '.join(MODES)}, got {a.modes!r}")
    float8 = tuple(r.strip() for r in a.float8.split(",") if r.strip())
    try:
        measure(a.output, quick=a.quick, modes=modes, device=a.device, power=a.power,
                cp_blocks=a.cp_blocks, long_attention=not a.no_long_attention,
                tp_shards=a.tp_shards, float8=float8)
    except ValueError as e:
        ap.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
