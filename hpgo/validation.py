"""Published training runs to check the training-step model against.

``MEGATRON_BRIDGE_H100`` lists the DGX-H100 pretraining rows of NVIDIA
Megatron-Bridge's performance summaries (``docs/performance-summary.md`` of
NVIDIA-NeMo/Megatron-Bridge, NeMo containers 25.09, 25.11 and 26.02): the
model, GPU count, precision, batch sizes, sequence length, TP / PP / CP / VP
/ EP and the measured tokens per second per GPU.  The tables give no expert
tensor-parallel size (Megatron-Bridge's recipes use 1), recomputation,
dispatcher or all-to-all overlap; the rows carry those from the performance
recipes of the same period.  :func:`check` simulates each configuration
as published and, where that does not fit in hpgo's memory model, also with
the least recomputation (selective, then full) that does.
``MEGATRON_MOE_MODELZOO_H100`` lists Qwen3-235B-A22B runs of NVIDIA's
Megatron-MoE-ModelZoo on 256 H100, which also publish the dispatcher, the
recomputation and whether the all-to-alls were overlapped.
``MEGATRON_BRIDGE_EP_OVERLAP_H100`` lists Megatron-Bridge's A/B runs of
Qwen3-30B-A3B on 16 H100 at EP 16 with and without the 1F1B all-to-all
overlap; the overlapped pair sets the share of the ideal overlap the model
credits (``hpgo.parallel.MEGATRON_OVERLAP_SHARE``), so only the runs without
overlap are independent checks.  ``MCORE_MOE_TRACKER_H100`` lists the
best H100 configurations of NVIDIA's Megatron-Core MoE release tracker
(DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B), published as model TFLOP/s
per GPU and converted to tokens/s with the FLOPs per token of
Megatron-Bridge's tables for the same models.

>>> for row in hpgo.validation.check():          # doctest: +SKIP
...     print(row)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PublishedRun", "MEGATRON_BRIDGE_H100", "MEGATRON_MOE_MODELZOO_H100",
           "MEGATRON_BRIDGE_EP_OVERLAP_H100", "MCORE_MOE_TRACKER_H100", "Check", "check"]


@dataclass(frozen=True)
class PublishedRun:
    source: str          # release of the table
    model: str           # hpgo.transformer preset
    gpus: int
    precision: str       # "bf16" or "fp8" (FP8-CS: per-tensor current scaling; 25.09 DeepSeek: blockwise)
    global_batch: int
    micro_batch: int
    seq: int
    fsdp: bool
    tp: int
    pp: int
    cp: int
    vp: int
    ep: int
    tokens_per_gpu: float  # published tokens / s / GPU
    note: str = ""
    # settings a source publishes beyond the parallel sizes (None: not published)
    recompute: str | None = None   # hpgo's name of the published recomputation
    dispatcher: str = "alltoall"   # MoE token dispatcher ("deepep": DeepEP / flex)
    overlap_moe_comm: bool = False  # EP all-to-all overlapped with another micro-batch
    fp8_params: bool = True         # fp8 runs keep fp8 weights only (--fp8-param-gather)
    tp_overlap: str = "none"        # tensor-parallel overlap ("te": userbuffers, --tp-comm-overlap)

    def plan(self, recompute: str | None = None) -> Any:
        from .parallel import ParallelPlan
        dp = self.gpus // (self.tp * self.pp * self.cp)
        return ParallelPlan(global_batch=self.global_batch, tp=self.tp, pp=self.pp, dp=dp,
                            cp=self.cp, ep=self.ep, etp=1 if self.ep > 1 else None,
                            virtual_stages=self.vp, micro_batch=self.micro_batch,
                            schedule="interleaved-1f1b" if self.vp > 1 else "1f1b",
                            recompute=recompute or self.recompute or "none",
                            sequence_parallel=self.tp > 1, zero=3 if self.fsdp else 1,
                            moe_dispatcher=self.dispatcher,
                            overlap_moe_comm=self.overlap_moe_comm,
                            fp8_params=self.precision == "fp8" and self.fp8_params,
                            tp_overlap=self.tp_overlap if self.tp > 1 else "none")


_MB = "Megatron-Bridge performance summary, NeMo "
# Settings the tables leave out, from the performance recipes of the same
# period (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs, matched to
# the releases by their parallel sizes; the rows' notes say which are
# uncertain): every MoE run force-balances the routing, token-dropless.
MEGATRON_BRIDGE_H100: tuple[PublishedRun, ...] = (
    PublishedRun(_MB + "26.02", "gpt-oss-120b", 64, "bf16", 1280, 1, 4096, False, 1, 4, 1, 1, 8, 5993,
                 "recompute modules layernorm, moe_act", recompute="selective"),
    PublishedRun(_MB + "26.02", "qwen3-30b-a3b", 16, "fp8", 1024, 1, 4096, False, 1, 2, 1, 12, 8, 5113,
                 "the archive page's 5113 (the main page's 2557 contradicts its own TFLOP/s "
                 "column); the recipe found has GBS 512", overlap_moe_comm=True),
    PublishedRun(_MB + "26.02", "qwen3-235b-a22b", 256, "fp8", 8192, 1, 4096, False, 2, 8, 1, 4, 32, 1633,
                 "embedding and loss count as pipeline layers", overlap_moe_comm=True),
    PublishedRun(_MB + "26.02", "llama3-70b", 64, "fp8", 256, 1, 8192, False, 4, 8, 1, 5, 1, 1621,
                 "tp communication overlapped (userbuffers)", tp_overlap="te"),
    PublishedRun(_MB + "26.02", "llama3-405b", 1024, "fp8", 1536, 1, 8192, False, 8, 8, 2, 8, 1, 311,
                 "Llama 3.1 405B; tp communication overlapped (userbuffers)", tp_overlap="te"),
    PublishedRun(_MB + "25.11", "llama3-8b", 8, "fp8", 128, 1, 8192, True, 1, 1, 1, 1, 1, 14451,
                 "Megatron-FSDP (optimizer, gradients and weights sharded)"),
    PublishedRun(_MB + "25.11", "llama3-70b", 64, "fp8", 128, 1, 8192, False, 4, 8, 1, 5, 1, 1602,
                 "tp communication overlapped (userbuffers)", tp_overlap="te"),
    PublishedRun(_MB + "25.11", "llama3-405b", 1024, "fp8", 512, 1, 8192, False, 8, 8, 2, 8, 1, 292,
                 "Llama 3.1 405B; tp communication overlapped (userbuffers)", tp_overlap="te"),
    PublishedRun(_MB + "25.11", "gpt-oss-120b", 64, "bf16", 512, 4, 4096, False, 1, 4, 1, 1, 8, 5630,
                 "recompute modules layernorm, moe_act; no recipe found with MBS 4",
                 recompute="selective"),
    PublishedRun(_MB + "25.11", "qwen3-30b-a3b", 16, "fp8", 512, 2, 4096, False, 1, 2, 1, 24, 8, 5275,
                 "the recipe found has VP 12"),
    PublishedRun(_MB + "25.11", "qwen3-235b-a22b", 256, "fp8", 2048, 1, 4096, False, 2, 8, 1, 4, 32, 1575,
                 "all-to-all overlap off in the recipe found, on a little later"),
    PublishedRun(_MB + "25.09", "qwen3-30b-a3b", 16, "fp8", 512, 2, 4096, False, 1, 2, 1, 24, 8, 10494,
                 "token dropping (with forced balancing the same work as dropless); the same "
                 "layout as 25.11's 5275"),
    PublishedRun(_MB + "25.09", "qwen3-235b-a22b", 256, "fp8", 2048, 1, 4096, False, 2, 8, 1, 4, 32, 1204,
                 "token dropping; the same layout as 25.11's 1575"),
    PublishedRun(_MB + "25.09", "deepseek-v3", 1024, "fp8", 8192, 1, 4096, False, 2, 8, 1, 4, 64, 1297,
                 "dropless; DeepEP, 1F1B all-to-all overlap, recompute modules mla_up_proj, mlp; "
                 "layout Et|(tt|)*30mL", recompute="selective", dispatcher="deepep",
                 overlap_moe_comm=True),
)


def _derived(tokens_per_gpu: float, what: str, kw: dict) -> PublishedRun:
    """A row whose tokens / s / GPU are derived from ``what`` was published."""
    note = what + (f"; {kw.pop('note')}" if "note" in kw else "")
    return PublishedRun(tokens_per_gpu=tokens_per_gpu, note=note, **kw)


def _zoo(step: float, **kw: Any) -> PublishedRun:
    """A row published as a step time."""
    return _derived(kw["global_batch"] * kw["seq"] / (kw["gpus"] * step), f"step {step} s", kw)


# NVIDIA's Megatron-MoE-ModelZoo (github.com/yanring/Megatron-MoE-ModelZoo,
# best_practice/Qwen3/readme.md, H100 table): Qwen3-235B-A22B in BF16 on 256
# H100 (InfiniBand 8 x 50 GB/s per node), sequence 4096, forced load
# balancing, with the dispatcher, recomputation ("norm, act": Megatron's
# recompute modules layernorm and moe_act, hpgo's "selective" on fused
# attention; "full") and EP overlap published.  Its row with TP2 EP8 PP32
# VPP3 (96 stages for 94 layers, an uneven layout) is left out.
_Z = "Megatron-MoE-ModelZoo, Qwen3 H100 table"
MEGATRON_MOE_MODELZOO_H100: tuple[PublishedRun, ...] = (
    _zoo(19.7, source=_Z, model="qwen3-235b-a22b", gpus=256, precision="bf16", global_batch=2048,
         micro_batch=1, seq=4096, fsdp=False, tp=2, pp=8, cp=1, vp=4, ep=32,
         recompute="selective", dispatcher="deepep"),
    _zoo(17.6, source=_Z, model="qwen3-235b-a22b", gpus=256, precision="bf16", global_batch=2048,
         micro_batch=1, seq=4096, fsdp=False, tp=2, pp=8, cp=1, vp=4, ep=32,
         recompute="selective", dispatcher="deepep", overlap_moe_comm=True,
         note="1F1B all-to-all overlap"),
    _zoo(17.6, source=_Z, model="qwen3-235b-a22b", gpus=256, precision="bf16", global_batch=2048,
         micro_batch=4, seq=4096, fsdp=True, tp=2, pp=1, cp=1, vp=1, ep=8,
         recompute="full", dispatcher="deepep"),
    _zoo(29.0, source=_Z, model="qwen3-235b-a22b", gpus=256, precision="bf16", global_batch=2048,
         micro_batch=1, seq=4096, fsdp=False, tp=4, pp=8, cp=1, vp=4, ep=8,
         recompute="none", dispatcher="deepep"),
)

# Megatron-Bridge's controlled A/B runs of its Qwen3-30B-A3B BF16 recipe on
# 16 H100 (TP1 PP1 CP1 EP16, MBS 1, GBS 1024, sequence 4096, forced load
# balancing): the all-to-all dispatcher without and with
# overlap_moe_expert_parallel_comm (docs/training/communication-overlap.md,
# PR 3862: 41.25 and 31.31 s per step; CUDA graphs and permute fusion off),
# and HybridEP (priced as hpgo's "deepep": one crossing per node reached)
# with TE CUDA graphs on the router and preprocessing (PR 5094: 24.714 and
# 20.992 s).  The overlapped rows calibrate MEGATRON_OVERLAP_SHARE.
_O = "Megatron-Bridge Qwen3-30B-A3B EP16 overlap A/B"
MEGATRON_BRIDGE_EP_OVERLAP_H100: tuple[PublishedRun, ...] = tuple(
    _zoo(step, source=_O, model="qwen3-30b-a3b", gpus=16, precision="bf16", global_batch=1024,
         micro_batch=1, seq=4096, fsdp=False, tp=1, pp=1, cp=1, vp=1, ep=16,
         dispatcher=disp, overlap_moe_comm=ov, note=note)
    for step, disp, ov, note in (
        (41.25, "alltoall", False, "NCCL all-to-all"),
        (31.31, "alltoall", True, "NCCL all-to-all, 1F1B overlap (calibrates the overlap)"),
        (24.714, "deepep", False, "HybridEP"),
        (20.992, "deepep", True, "HybridEP, 1F1B overlap (calibrates the overlap)")))

# NVIDIA's Megatron-Core MoE release performance tracker, best H100
# configurations as Megatron-Bridge lists them (skills/perf-techniques/
# moe-hardware-configs/card.yaml, validated 2026-04-01): model TFLOP/s per
# GPU, forced balancing, sequence 4096.  Tokens/s per GPU = TFLOP/s over the
# FLOPs per token that Megatron-Bridge's own tables imply for the same model
# (their TFLOP/s column over their tokens/s column, alike to 0.5 % across
# releases): DeepSeek-V3 with MTP 2.606e11 (25.09), Qwen3-235B-A22B 1.48e11,
# Qwen3-30B-A3B 2.30e10.
_FLOPS_PER_TOKEN = {"deepseek-v3": 338e12 / 1297, "qwen3-235b-a22b": 1.48e11,
                    "qwen3-30b-a3b": 2.30e10}


def _tracker(tflops: float, **kw: Any) -> PublishedRun:
    """A row published as model TFLOP/s per GPU."""
    return _derived(tflops * 1e12 / _FLOPS_PER_TOKEN[kw["model"]], f"{tflops:g} model TFLOP/s/GPU",
                    kw)


_T = "Megatron-Core MoE release tracker, H100 best configurations"
MCORE_MOE_TRACKER_H100: tuple[PublishedRun, ...] = (
    _tracker(368, source=_T, model="deepseek-v3", gpus=1024, precision="fp8", global_batch=8192,
             micro_batch=1, seq=4096, fsdp=False, tp=2, pp=8, cp=1, vp=4, ep=64,
             recompute="selective", dispatcher="deepep", overlap_moe_comm=True,
             note="FP8 blockwise, with MTP; recompute up_proj, mlp; layout Et*3|(tt|)*29m|L "
                  "(priced as an even split)"),
    _tracker(320, source=_T, model="qwen3-235b-a22b", gpus=256, precision="bf16", global_batch=2048,
             micro_batch=1, seq=4096, fsdp=False, tp=2, pp=8, cp=1, vp=4, ep=32,
             recompute="selective", dispatcher="deepep", overlap_moe_comm=True,
             note="recomputation not given: ModelZoo's norm, act assumed"),
    _tracker(208, source=_T, model="qwen3-30b-a3b", gpus=32, precision="bf16", global_batch=256,
             micro_batch=4, seq=4096, fsdp=False, tp=1, pp=1, cp=1, vp=1, ep=8,
             recompute="full", dispatcher="deepep", note="EP 8 inside a node, EDP 4"),
)


@dataclass(frozen=True)
class Check:
    run: PublishedRun
    tokens_per_gpu: float   # simulated as published, without recomputation
    error: float            # tokens_per_gpu / published - 1
    fits: bool              # ... and whether that fits
    memory_gib: float       # its fullest GPU
    recompute: str          # the least recomputation that fits ("none" .. "full")
    tokens_fitting: float   # simulated with that recomputation
    error_fitting: float
    memory_fitting_gib: float
    fits_somehow: bool      # some recomputation fits

    def __repr__(self) -> str:
        r = self.run
        s = (f"{r.model} on {r.gpus} H100 {r.precision} (TP{r.tp} PP{r.pp} CP{r.cp} VP{r.vp} "
             f"EP{r.ep} MBS{r.micro_batch} GBS{r.global_batch}): published "
             f"{r.tokens_per_gpu:,.0f}, simulated {self.tokens_per_gpu:,.0f} tokens/s/GPU "
             f"({self.error * 100:+.1f} %), {self.memory_gib:.1f} GiB "
             f"({'fits' if self.fits else 'does not fit'})")
        if not self.fits:
            s += (f"; with recompute={self.recompute} {self.tokens_fitting:,.0f} "
                  f"({self.error_fitting * 100:+.1f} %), {self.memory_fitting_gib:.1f} GiB "
                  f"({'fits' if self.fits_somehow else 'DOES NOT FIT'})")
        return s


def check(runs: tuple[PublishedRun, ...] = MEGATRON_BRIDGE_H100, *,
          gpu: Any = None) -> list[Check]:
    """Simulate each published configuration on ``dgx-h100`` nodes, as
    published (with its recomputation where the source gives it, else none)
    and with the least recomputation that fits;
    ``gpu`` replaces the preset's GPU (e.g. one calibrated to measured
    kernels, :func:`hpgo.calibrate.fit`)."""
    import dataclasses

    from .cluster import GPU, Cluster
    from .parallel import simulate
    from .workmodel import transformer

    if gpu is not None and not isinstance(gpu, GPU):
        raise TypeError("gpu must be an hpgo.GPU")
    out = []
    for run in runs:
        m = transformer(run.model, seq=run.seq)
        c = Cluster.preset("dgx-h100", nodes=max(1, run.gpus // 8))
        if gpu is not None:
            c = dataclasses.replace(c, gpu=gpu)
        pub = run.tokens_per_gpu
        res = {}
        first = run.recompute or "none"
        for rc in ("none", "selective", "full")[("none", "selective", "full").index(first):]:
            res[rc] = simulate(m, c, run.plan(rc), precision=run.precision, timeline=False)
            if res[rc].fits:
                break
        least = next((rc for rc, r in res.items() if r.fits), "full")
        base, fit = res[first], res[least]
        t0, t1 = base.tokens_per_second / run.gpus, fit.tokens_per_second / run.gpus
        out.append(Check(run, t0, t0 / pub - 1, base.fits,
                         max(x.total for x in base.memory) / 2 ** 30, least, t1, t1 / pub - 1,
                         max(x.total for x in fit.memory) / 2 ** 30, fit.fits))
    return out
