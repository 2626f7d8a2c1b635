"""Published training runs to check the training-step model against.

``MEGATRON_BRIDGE_H100`` lists the DGX-H100 pretraining rows of NVIDIA
Megatron-Bridge's performance summaries (``docs/performance-summary.md`` and its archive in
NVIDIA-NeMo/Megatron-Bridge, NeMo containers 25.09 to 26.04.01): the
model, GPU count, precision, batch sizes, sequence length, TP / PP / CP / VP
/ EP and the measured tokens per second per GPU.  The tables give no expert
tensor-parallel size (Megatron-Bridge's recipes use 1), recomputation,
dispatcher or all-to-all overlap; the rows carry those from the performance
recipes of the same period.  :func:`check` simulates each configuration
as published and, where that does not fit in hpgo's memory model, also with
the least recomputation (selective, then full) that does.
``MEGATRON_BRIDGE_B200`` lists the same summaries' DGX B200 rows hpgo
prices (dense FP8-CS, GPT-OSS-120B in BF16), simulated on the ``dgx-b200``
preset.
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

import dataclasses
import pathlib
from dataclasses import dataclass
from typing import Any

__all__ = ["PublishedRun", "MEGATRON_BRIDGE_H100", "MEGATRON_BRIDGE_B200",
           "MEGATRON_MOE_MODELZOO_H100", "MeasuredRun",
           "RunCheck", "load_runs", "check_runs",
           "MEGATRON_BRIDGE_EP_OVERLAP_H100", "MCORE_MOE_TRACKER_H100", "Check", "check",
           "Stack", "CheckedBand", "stack_of", "checked_bands", "checked_band", "checked_note",
           "checked_runs", "write_checked", "CHECKED_FILE", "korthikanti_cases"]


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
    bf16_grads: bool = False        # 16-bit gradient buffer (grad_reduce_in_fp32 off)
    system: str = "dgx-h100"        # the cluster preset the run is simulated on

    @property
    def release(self) -> str:
        """The source's last word: the NeMo release of a summary's row."""
        return self.source.rsplit(" ", 1)[-1]

    def cluster(self, gpu: Any = None) -> Any:
        """Nodes of :attr:`system` for the run's GPUs; ``gpu`` replaces the
        preset's GPU."""
        from .cluster import Cluster
        c = Cluster.preset(self.system, nodes=max(1, self.gpus // 8))
        return c if gpu is None else dataclasses.replace(c, gpu=gpu)

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
                            optimizer_impl=("megatron_bf16_grads"
                                            if self.bf16_grads and not self.fsdp else "megatron"),
                            tp_overlap=self.tp_overlap if self.tp > 1 else "none")


_MB = "Megatron-Bridge performance summary, NeMo "
# Settings the tables leave out, from the performance recipes of the same
# period (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs, matched to
# the releases by their parallel sizes; the rows' notes say which are
# uncertain): every MoE run force-balances the routing, token-dropless; every
# recipe turns grad_reduce_in_fp32 off (16-bit gradients: bf16_grads, which
# Megatron-FSDP's row does not take).
_MEGATRON_BRIDGE_H100: tuple[PublishedRun, ...] = (
    PublishedRun(_MB + "26.04.01", "llama3-70b", 64, "fp8", 256, 1, 8192, False, 4, 8, 1, 5, 1, 1664,
                 "tp communication overlapped (userbuffers); the recipe as 26.02's", tp_overlap="te"),
    PublishedRun(_MB + "26.04.01", "llama3-405b", 1024, "fp8", 1536, 1, 8192, False, 8, 8, 2, 8, 1,
                 328, "Llama 3.1 405B; tp communication overlapped (userbuffers); the recipe as "
                 "26.02's", tp_overlap="te"),
    PublishedRun(_MB + "26.04", "llama3-70b", 64, "fp8", 256, 1, 8192, False, 4, 8, 1, 5, 1, 1633,
                 "tp communication overlapped (userbuffers); the recipe as 26.02's", tp_overlap="te"),
    PublishedRun(_MB + "26.02.01", "llama3-70b", 64, "fp8", 256, 1, 8192, False, 4, 8, 1, 5, 1, 1639,
                 "tp communication overlapped (userbuffers); the recipe as 26.02's", tp_overlap="te"),
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
MEGATRON_BRIDGE_H100: tuple[PublishedRun, ...] = tuple(
    dataclasses.replace(r, bf16_grads=True) for r in _MEGATRON_BRIDGE_H100)

# The rows of the same summaries on DGX B200 that hpgo prices: the dense
# FP8-CS runs (NeMo 25.09 and 25.11: per-tensor current scaling, the figure
# outside the parentheses) and GPT-OSS-120B in BF16 (25.11 to 26.04.01); the
# tables' other runs are MXFP8 or NVFP4, blockwise scaling hpgo does not
# price.  The recipes' settings as above (GPT-OSS: recompute modules
# layernorm, moe_act and NCCL's all-to-all in the B200 recipes of May 2026).
_B = dict(system="dgx-b200", bf16_grads=True)
_OSS = "recompute modules layernorm, moe_act"
MEGATRON_BRIDGE_B200: tuple[PublishedRun, ...] = (
    PublishedRun(_MB + "25.11", "llama3-8b", 8, "fp8", 128, 2, 8192, False, 1, 1, 1, 1, 1, 30624,
                 "FP8-CS", **_B),
    PublishedRun(_MB + "25.11", "llama3-405b", 128, "fp8", 64, 1, 8192, False, 4, 8, 2, 8, 1, 661,
                 "Llama 3.1 405B, FP8-CS; tp communication overlapped (userbuffers)",
                 tp_overlap="te", **_B),
    PublishedRun(_MB + "25.09", "llama3-8b", 8, "fp8", 128, 2, 8192, False, 1, 1, 1, 1, 1, 29994,
                 "FP8-CS", **_B),
    PublishedRun(_MB + "25.09", "llama3-405b", 128, "fp8", 64, 1, 8192, False, 4, 8, 2, 8, 1, 664,
                 "Llama 3.1 405B, FP8-CS; tp communication overlapped (userbuffers)",
                 tp_overlap="te", **_B),
    PublishedRun(_MB + "26.04.01", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, False, 1, 1, 1, 1, 8,
                 13568, _OSS, recompute="selective", **_B),
    PublishedRun(_MB + "26.04", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, False, 1, 1, 1, 1, 8,
                 13045, _OSS, recompute="selective", **_B),
    PublishedRun(_MB + "26.02.01", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, False, 1, 1, 1, 1, 8,
                 13722, _OSS, recompute="selective", **_B),
    PublishedRun(_MB + "26.02", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, False, 1, 1, 1, 1, 64,
                 8047, _OSS, recompute="selective", **_B),
    PublishedRun(_MB + "25.11", "gpt-oss-120b", 64, "bf16", 512, 4, 4096, False, 1, 1, 1, 1, 8,
                 8213, _OSS + "; 26.02.01's layout at batch 512 (13722 there)", recompute="selective",
                 **_B),
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
        gpu = {"dgx-h100": "H100", "dgx-b200": "B200"}.get(r.system, r.system)
        s = (f"{r.model} on {r.gpus} {gpu} {r.precision} (TP{r.tp} PP{r.pp} CP{r.cp} VP{r.vp} "
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
    """Simulate each published configuration on nodes of its system
    (``dgx-h100``, or ``dgx-b200`` for :data:`MEGATRON_BRIDGE_B200`), as
    published (with its recomputation where the source gives it, else none)
    and with the least recomputation that fits;
    ``gpu`` replaces the preset's GPU (e.g. one calibrated to measured
    kernels, :func:`hpgo.calibrate.fit`)."""
    from .cluster import GPU
    from .parallel import simulate
    from .workmodel import transformer

    if gpu is not None and not isinstance(gpu, GPU):
        raise TypeError("gpu must be an hpgo.GPU")
    out = []
    for run in runs:
        m = transformer(run.model, seq=run.seq)
        c = run.cluster(gpu)
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


# ---------------------------------------------------------------------------
# Measured runs from a CSV file (one row per run, every assumption named)
# ---------------------------------------------------------------------------

# the columns of a measured-runs file (the reference file's header)
_RUN_COLUMNS = ("source_id", "model", "params_b", "layers", "hidden", "ffn", "heads", "kv_heads",
                "vocab", "mlp", "seq", "gpu", "gpus", "gpus_per_node", "internode_gbps",
                "precision", "tp", "pp", "dp", "cp", "vp", "mbs", "gbs", "recompute",
                "sequence_parallel", "zero_or_fsdp", "tflops_per_gpu", "mfu",
                "tokens_per_s_per_gpu", "iter_s", "metric", "flops_def", "arch", "gpu_mem_gb",
                "split", "measured_mem_gib", "notes")
# the GPU column's names -> cluster presets
_RUN_GPUS = {"h100": "dgx-h100", "a100-80gb": "dgx-a100-80gb", "a100-40gb": "dgx-a100-40gb",
             "h200": "dgx-h200", "v100": "dgx1-v100", "v100-dgx2h": "dgx2h-v100"}
_RECOMPUTE_ORDER = ("none", "selective", "full")


@dataclass(frozen=True)
class MeasuredRun:
    """One measured pretraining run: the model's shape, the cluster, the
    plan and what was measured, as a row of a measured-runs CSV file
    (:func:`load_runs`; the reference file and its column meanings:
    ``../shared/reference/published_runs.csv``)."""

    source_id: str
    model: str
    params_b: float          # parameters the source names, billions
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    mlp: str
    seq: int
    gpu: str
    gpus: int
    gpus_per_node: int
    internode_gbps: float | None
    precision: str
    tp: int
    pp: int
    dp: int
    cp: int
    vp: int
    mbs: int
    gbs: int
    recompute: str           # none | selective | full | auto (the least that fits);
    #                          selective-op where the notes name torchtitan's op-level SAC
    sequence_parallel: bool
    zero: int                # hpgo's ZeRO stage of the closest technique (3: FSDP)
    tflops_per_gpu: float | None
    mfu: float | None
    tokens_per_s_per_gpu: float | None
    iter_s: float | None
    metric: str              # the measured column compared
    flops_def: str           # how the source counts FLOPs for tflops_per_gpu / mfu
    arch: str
    gpu_mem_gb: float | None
    split: tuple[int, ...] | None
    measured_mem_gib: float | None
    notes: str = ""
    # the training stack the notes publish (ParallelPlan's kernels, tp_overlap,
    # cp_comm, attention, overlap_grad_reduce)
    kernels: str = "te"
    tp_overlap: str = "none"
    cp_comm: str = "p2p"
    attention: str = "auto"
    overlap_grad_reduce: bool = True
    optimizer_impl: str = "megatron"
    cross_entropy: str = "auto"
    fp8_all_gather: bool = False
    fp8_params: bool = False
    fp8_recipe: str = "tensorwise"
    reshard_after_forward: bool = True   # False: FSDP's SHARD_GRAD_OP

    def transformer(self) -> Any:
        """The model: ``arch`` is a family (``gpt``: LayerNorm, biases, GeLU,
        learned positions, dropout, tied embeddings; ``llama``: RMSNorm, no
        biases, untied, RoPE, fused attention, causal model FLOPs) with
        ``;key=0|1`` overrides (tied, bias, flash, dropout, pos, qknorm: an
        RMSNorm on the queries and keys of every head, as OLMo 2)."""
        from .workmodel import Transformer
        parts = [p.strip() for p in self.arch.split(";") if p.strip()]
        if not parts or parts[0] not in ("gpt", "llama"):
            raise ValueError(f"run {self.source_id}: arch must start with 'gpt' or 'llama', "
                             f"got {self.arch!r}")
        llama = parts[0] == "llama"
        f = dict(tied=not llama, bias=not llama, norm="rmsnorm" if llama else "layernorm",
                 dropout=not llama, flash=llama, causal_flops=llama, learned_pos=not llama)
        keys = {"tied": "tied", "bias": "bias", "flash": "flash", "dropout": "dropout",
                "pos": "learned_pos", "qknorm": "qk_norm"}
        for p in parts[1:]:
            k, _, v = p.partition("=")
            if k not in keys or v not in ("0", "1"):
                raise ValueError(f"run {self.source_id}: arch override {p!r} is not one of "
                                 f"{', '.join(k + '=0|1' for k in keys)}")
            f[keys[k]] = v == "1"
        return Transformer(hidden=self.hidden, ffn=self.ffn, heads=self.heads,
                           kv_heads=self.kv_heads, layers=self.layers, seq=self.seq,
                           vocab=self.vocab, mlp=self.mlp, name=self.model, **f)

    def cluster(self, gpu: Any = None) -> Any:
        """The cluster: the GPU's DGX preset (``grand-teton-h100`` for an H100
        with 96 GB) sized to ``gpus``, with the
        published inter-node bandwidth per GPU and GPU memory where given;
        ``gpu`` replaces the preset's GPU (e.g. a calibrated one)."""
        import dataclasses

        from .cluster import Cluster
        if self.gpu not in _RUN_GPUS:
            raise ValueError(f"run {self.source_id}: gpu {self.gpu!r} is not one of "
                             f"{', '.join(_RUN_GPUS)}")
        name = _RUN_GPUS[self.gpu]
        if self.gpu == "h100" and self.gpu_mem_gb == 96:
            name = "grand-teton-h100"  # torchtitan's H100: 96 GB HBM2e at 2.4 TB/s, 500 W
        c = Cluster.preset(name)
        if c.gpus_per_node != self.gpus_per_node:
            raise ValueError(f"run {self.source_id}: {self.gpus_per_node} GPUs per node, the "
                             f"preset {c.name} has {c.gpus_per_node}")
        c = c.with_nodes(max(1, -(-self.gpus // self.gpus_per_node)))
        if gpu is not None:
            c = dataclasses.replace(c, gpu=gpu)
        if self.gpu_mem_gb:
            c = c.with_gpu(memory_bytes=self.gpu_mem_gb * 1e9)
        if self.internode_gbps and len(c.levels) > 1:
            bw = self.internode_gbps * 1e9 / 8
            lv = list(c.levels)
            lv[1] = dataclasses.replace(lv[1], bandwidth=bw, collective_bandwidth=bw)
            c = dataclasses.replace(c, levels=tuple(lv))
        return c

    def plan(self, recompute: str | None = None) -> Any:
        """The published plan (``recompute`` replaces an ``auto`` one)."""
        from .parallel import ParallelPlan
        rc = recompute or self.recompute
        if rc == "auto":
            rc = "none"
        return ParallelPlan(global_batch=self.gbs, tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp,
                            virtual_stages=self.vp, micro_batch=self.mbs,
                            schedule="interleaved-1f1b" if self.vp > 1 else "1f1b",
                            recompute=rc, sequence_parallel=self.sequence_parallel,
                            zero=self.zero, split=self.split, kernels=self.kernels,
                            tp_overlap=self.tp_overlap, cp_comm=self.cp_comm,
                            attention=self.attention,
                            overlap_grad_reduce=self.overlap_grad_reduce,
                            optimizer_impl=self.optimizer_impl,
                            cross_entropy=self.cross_entropy,
                            fp8_all_gather=self.fp8_all_gather,
                            fp8_params=self.fp8_params, fp8_recipe=self.fp8_recipe,
                            # FSDP under pipelining keeps the gathered weights to the
                            # backward: torchtitan's default reshard policy is
                            # "not pp_enabled" (torchtitan/distributed/fsdp.py)
                            reshard_after_forward=(self.reshard_after_forward and
                                                   not (self.zero >= 3 and self.pp > 1)))

    def megatron_flops_per_token(self) -> float:
        """Model FLOPs per token as Megatron-LM counts them
        (``num_floating_point_operations`` of megatron/training/training.py,
        core_r0.8.0: forward + backward, no recomputation, the full s x s
        attention square, gated MLPs x 3/2)."""
        h, L, s = self.hidden, self.layers, self.seq
        gated = 1.5 if self.mlp == "swiglu" else 1.0
        return 12 * L * h * h * ((1 + self.kv_heads / self.heads + s / h)
                                 + self.ffn / h * gated + self.vocab / (2 * L * h))

    def narayanan_flops_per_token(self) -> float:
        """Hardware FLOPs per token with full recomputation (Narayanan et al.
        2021, eq. 3: 96 B s l h^2 (1 + s / 6h + V / 16 l h) per iteration)."""
        h, L, s = self.hidden, self.layers, self.seq
        return 96 * L * h * h * (1 + s / (6 * h) + self.vocab / (16 * L * h))

    def published_tokens_per_gpu(self) -> float:
        """The measured throughput as tokens / s / GPU, converted from the
        ``metric`` column with the source's own FLOP count."""
        tokens = self.gbs * self.seq
        if self.metric == "iter_s":
            return tokens / (self.iter_s * self.gpus)
        if self.metric == "tokens_per_s_per_gpu":
            return float(self.tokens_per_s_per_gpu)
        per_token = {"megatron": self.megatron_flops_per_token,
                     "narayanan_hw": self.narayanan_flops_per_token}
        if self.flops_def not in per_token:
            raise ValueError(f"run {self.source_id}: flops_def {self.flops_def!r} is not one of "
                             f"{', '.join(per_token)} (needed for metric {self.metric})")
        if self.metric == "tflops_per_gpu":
            return self.tflops_per_gpu * 1e12 / per_token[self.flops_def]()
        if self.metric == "mfu":
            peak = self.cluster().gpu.peak("bf16")
            return self.mfu * peak / per_token[self.flops_def]()
        raise ValueError(f"run {self.source_id}: unknown metric {self.metric!r}")


def _cell(row: dict, col: str, kind: Any, where: str, optional: bool = False) -> Any:
    v = (row.get(col) or "").strip()
    if not v:
        if optional:
            return None
        raise ValueError(f"{where}: column {col} is empty")
    try:
        if kind is int:
            x = float(v)
            if not x.is_integer():
                raise ValueError
            return int(x)
        if kind is float:
            x = float(v)
            if x != x or x in (float("inf"), float("-inf")):
                raise ValueError
            return x
    except ValueError:
        raise ValueError(f"{where}: column {col} must be {kind.__name__ if kind is int else 'a number'}"
                         f", got {v!r}") from None
    return v


def load_runs(path: Any) -> list[MeasuredRun]:
    """The runs of a measured-runs CSV file (``#`` lines are comments; the
    header names the columns of :class:`MeasuredRun`).  Raises ValueError
    naming the file, the row and the column for a malformed value."""
    import csv
    import io
    import os

    from . import _files
    name = os.fspath(path)
    text = _files.read_text(name, "measured-runs CSV")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    if not rows:
        raise ValueError(f"{name}: no runs")
    missing = [c for c in _RUN_COLUMNS if c not in rows[0]]
    if missing:
        raise ValueError(f"{name}: missing columns {', '.join(missing)}")
    out = []
    for row in rows:
        where = f"{name}, run {row.get('source_id') or '?'}"
        i = {c: _cell(row, c, int, where) for c in ("layers", "hidden", "ffn", "heads", "kv_heads",
                                                     "vocab", "seq", "gpus", "gpus_per_node", "tp",
                                                     "pp", "dp", "cp", "vp", "mbs", "gbs",
                                                     "sequence_parallel", "zero_or_fsdp")}
        o = {c: _cell(row, c, float, where, True)
             for c in ("params_b", "internode_gbps", "tflops_per_gpu", "mfu", "tokens_per_s_per_gpu",
                       "iter_s", "gpu_mem_gb", "measured_mem_gib")}
        split = (row.get("split") or "").strip()
        rc = _cell(row, "recompute", str, where)
        if rc not in _RECOMPUTE_ORDER + ("auto",):
            raise ValueError(f"{where}: column recompute must be none, selective, full or auto, "
                             f"got {rc!r}")
        metric = _cell(row, "metric", str, where)
        if metric not in ("iter_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu") \
                or o.get(metric) is None:
            raise ValueError(f"{where}: column metric names {metric!r}, which must be a filled "
                             "column of iter_s, tokens_per_s_per_gpu, tflops_per_gpu or mfu")
        if i["tp"] * i["pp"] * i["dp"] * i["cp"] != i["gpus"]:
            raise ValueError(f"{where}: tp x pp x dp x cp = "
                             f"{i['tp'] * i['pp'] * i['dp'] * i['cp']} is not gpus = {i['gpus']}")
        try:
            sp = tuple(int(b) for b in split.split(",")) if split else None
        except ValueError:
            raise ValueError(f"{where}: column split must be comma-separated ints") from None
        out.append(MeasuredRun(
            source_id=_cell(row, "source_id", str, where), model=_cell(row, "model", str, where),
            params_b=o["params_b"] or 0.0, layers=i["layers"], hidden=i["hidden"], ffn=i["ffn"], heads=i["heads"],
            kv_heads=i["kv_heads"], vocab=i["vocab"], mlp=_cell(row, "mlp", str, where),
            seq=i["seq"], gpu=_cell(row, "gpu", str, where), gpus=i["gpus"],
            gpus_per_node=i["gpus_per_node"], internode_gbps=o["internode_gbps"],
            precision=_cell(row, "precision", str, where), tp=i["tp"], pp=i["pp"], dp=i["dp"],
            cp=i["cp"], vp=i["vp"], mbs=i["mbs"], gbs=i["gbs"], recompute=rc,
            sequence_parallel=bool(i["sequence_parallel"]), zero=i["zero_or_fsdp"],
            tflops_per_gpu=o["tflops_per_gpu"], mfu=o["mfu"],
            tokens_per_s_per_gpu=o["tokens_per_s_per_gpu"], iter_s=o["iter_s"], metric=metric,
            flops_def=(row.get("flops_def") or "").strip(), arch=_cell(row, "arch", str, where),
            gpu_mem_gb=o["gpu_mem_gb"], split=sp, measured_mem_gib=o["measured_mem_gib"],
            notes=(row.get("notes") or "").strip()))
    return [_with_stack(r, out) for r in out]


# torchtitan's benchmarks by the code version they ran (the CSV's TT rows):
# commit 9dec370 (benchmarks/llama3_h100_202412_torchtitan.md) wraps each
# TransformerBlock in torch.compile and leaves the final norm, the output
# layer and the loss eager (train.py: "compiling loss function causes CUDA
# errors, turning off for now") -> "compile-blocks"; commit 820504e (the June
# 2025 async-TP benchmark) compiles the loss too (components/loss.py) and
# still runs SDPA on FlashAttention-2 on Hopper (models/attention.py: flash,
# efficient, math; cuDNN only on B200) -> "compile-fa2".
# (TY-: torchtitan run by others, benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md;
# AO-: torchao's float8 benchmarks on torchtitan 0.0.2 of February 2025, between
# e8977b0, 2024-12-18, which stopped compiling the loss, and bbb1b61, 2025-04-02,
# which compiled it again)
_COMPILE_BLOCKS_SOURCES = ("TT-", "TY-", "AO-")
_COMPILE_FA2_NOTES = "June 2025"
# torchao's float8 all-gather in FSDP2 for torchtitan's fp8 rows: the 405B
# runs' train config sets enable_fsdp_float8_all_gather and
# precompute_float8_dynamic_scale_for_fsdp (train_configs/llama3_405b.toml at
# 9dec370); the benchmark file names only "Float8" for the 8B and 70B rows,
# and torchtitan's float8 how-to of that commit (docs/float8.md) launches with
# both flags -- ASSUMED for those rows.
_TORCHTITAN_FP8_ALL_GATHER = True


def _with_stack(run: MeasuredRun, runs: list[MeasuredRun]) -> MeasuredRun:
    """The run with the training stack its notes publish (following "as
    <run>" references): torch.compile (torchtitan) -> kernels "compile"
    ("compile-blocks" or "compile-fa2" for torchtitan's benchmarks by their
    code version, ``_COMPILE_BLOCKS_SOURCES``), "without torch.compile" ->
    "eager" ("eager-unfused-norm" for torchtitan's December 2024 code),
    "eager PyTorch ops" (Megatron-LM v1.0, before its fused kernels) ->
    "eager" with Megatron's own attention and gradient path, with
    AsyncTP -> tp_overlap "async"; Megatron's --tp-comm-overlap -> "te"
    (both with sequence parallelism and tp > 1); otherwise Megatron's fused
    kernels without overlap.

    torchtitan's runs (torch.compile) get PyTorch's attention of their time:
    SDPA's flash back end, FlashAttention-2 (cuDNN attention was opt-in from
    pytorch/pytorch#138522, October 2024, until #162073 for 2.9; the torch
    commits of both torchtitan benchmarks, 2024-12-23 and 2025-06-14, fall
    between), unless their notes give "cuDNN attention" (SDPA's cuDNN
    back end, the default on H100 in PyTorch 2.5's release notes and in the
    nightlies until #138522: OLMo-core's runs on the nightly of 2024-10-09),
    and PyTorch's context parallelism around SDPA with its
    all-gather rotation (``cp_comm="torch_sdpa"``; torchtitan's default
    ``context_parallel_rotate_method``).  MegaScale's
    Megatron-LM baseline (commit 285068c8, January 2023: the distributed
    optimizer reduce-scatters the gradients after the last micro-batch's
    backward and all-gathers the weights after the step, ``training.py``
    train_step), DeepSpeed's pipeline engine (``_exec_reduce_grads`` after
    the last micro-batch) and runs whose notes give "gradients all-reduced
    after the backward" (Megatron-LM's local DDP of 2021) synchronise
    gradients without overlap; DeepSpeed's
    bf16 runs with ZeRO-1 (BLOOM's BF16_Optimizer) get its gradient path
    (``optimizer_impl="deepspeed_bf16"``).  The Megatron-family runs
    (Megatron-LM, Megatron-DeepSpeed) compute the loss with Megatron's
    unfused fp32 ``vocab_parallel_cross_entropy`` unless their notes give
    ``--cross-entropy-loss-fusion`` (off by default in Megatron-LM's
    arguments.py; the fused loss did not exist before 2024, and
    Megatron-DeepSpeed calls the unfused one).  "op-level selective AC"
    (torchtitan's SAC) turns a selective recomputation into "selective-op".
    torchtitan's fp8 runs under FSDP gather their Float8Linear weights in fp8
    (``fp8_all_gather``, ``_TORCHTITAN_FP8_ALL_GATHER``), as do other FSDP
    runs whose notes give "FSDP float8 all-gather", unless their notes
    give "float8 rowwise" (torchao's rowwise recipe, ``fp8_recipe``, which
    gathers in 16 bits); fp8 runs whose
    notes give ``--fp8-param-gather`` (NeMo's ``fp8_params``) keep fp8
    weights only (``fp8_params``); NeMo's runs on Apex's
    ``distributed_fused_adam`` with ``grad_sync_dtype bf16`` get its
    gradient path (``optimizer_impl="apex_bf16"``), runs whose notes give
    ``--grad-reduce-in-bf16`` Megatron's 16-bit gradients
    (``"megatron_bf16_grads"``), as do the Megatron-LM runs in fp16 whose notes
    do not give ``--accumulate-allreduce-grads-in-fp32`` (Megatron-LM
    accumulates and reduces fp16 gradients in fp16 by default).  PyTorch
    runs whose notes give "flash-attn's fused cross-entropy" (llm-foundry's
    MPT) price that loss kernel (``cross_entropy="fused"``); runs whose
    notes give FSDP's "SHARD_GRAD_OP" keep the gathered weights from the
    forward to the backward (``reshard_after_forward=False``)."""
    import dataclasses
    import re
    by_id = {r.source_id: r for r in runs}
    notes, seen, r = [], set(), run
    while r is not None and r.source_id not in seen:
        seen.add(r.source_id)
        notes.append(r.notes)
        ref = re.match(r"as (\S+)", r.notes)
        r = by_id.get(ref.group(1).rstrip(";,.:")) if ref else None
    text = " ".join(notes)
    kernels = "compile" if re.search(r"\bcompile\b", text) else "te"
    if kernels == "compile" and run.source_id.startswith(_COMPILE_BLOCKS_SOURCES):
        kernels = "compile-fa2" if _COMPILE_FA2_NOTES in text else "compile-blocks"
    eager_megatron = "eager PyTorch ops" in text
    if eager_megatron:
        # Megatron-LM before its fused kernels (v1.0, 2020): each op of a
        # layer its own kernel (matmul, scale, mask, softmax, dropout, GeLU),
        # Apex's FusedLayerNorm
        kernels = "eager"
    if "without torch.compile" in text:
        # torchtitan 9dec370 run eager: its RMSNorm module (norm_type
        # "rmsnorm", models/norms.py) as separate fp32 ops, foreach AdamW
        kernels = ("eager-unfused-norm" if run.source_id.startswith(_COMPILE_BLOCKS_SOURCES)
                   and _COMPILE_FA2_NOTES not in text else "eager")
    rc = run.recompute
    if rc == "selective" and re.search(r"op-level selective", text, re.I):
        rc = "selective-op"
    tpo = "none"
    if run.tp > 1 and run.sequence_parallel:
        if kernels != "te" and re.search(r"async ?tp", text, re.I):
            tpo = "async"
        elif kernels == "te" and "--tp-comm-overlap" in text:
            tpo = "te"
    torch = (kernels in ("compile", "compile-blocks", "compile-fa2", "eager", "eager-unfused-norm")
             and not eager_megatron)
    deepspeed = "DeepSpeed" in text
    no_overlap = (run.source_id.startswith("MS-") or deepspeed
                  or "gradients all-reduced after the backward" in text)
    bf16_opt = deepspeed and run.precision == "bf16" and run.zero == 1
    apex = "distributed_fused_adam" in text and "grad_sync_dtype bf16" in text and run.zero == 1
    # Megatron-LM reduces fp16 gradients in fp16 unless
    # --accumulate-allreduce-grads-in-fp32 (arguments.py validate_args; v1.0's
    # FP16_Optimizer all-reduced the fp16 gradients too)
    fp16_grads = (run.precision == "fp16" and not deepspeed and not torch and run.zero <= 1
                  and "--accumulate-allreduce-grads-in-fp32" not in text)
    bf16_grads = ("--grad-reduce-in-bf16" in text and run.zero <= 1) or fp16_grads
    rowwise = torch and run.precision == "fp8" and bool(re.search(r"float8 rowwise", text, re.I))
    f8ag = (torch and run.precision == "fp8" and run.zero == 3 and not rowwise
            and ((_TORCHTITAN_FP8_ALL_GATHER and run.source_id.startswith(_COMPILE_BLOCKS_SOURCES))
                 or "FSDP float8 all-gather" in text))
    if kernels == "te":
        loss = "auto" if "--cross-entropy-loss-fusion" in text else "unfused"
    else:
        loss = "fused" if torch and "flash-attn's fused cross-entropy" in text else "auto"
    return dataclasses.replace(run, kernels=kernels, tp_overlap=tpo, recompute=rc,
                               fp8_all_gather=f8ag,
                               fp8_recipe="rowwise" if rowwise else "tensorwise",
                               fp8_params=run.precision == "fp8" and "--fp8-param-gather" in text,
                               cp_comm="torch_sdpa" if torch else "p2p",
                               attention=("flash2" if torch and "cuDNN attention" not in text
                                          else "auto"),
                               overlap_grad_reduce=not no_overlap,
                               optimizer_impl=("deepspeed_bf16" if bf16_opt else "apex_bf16"
                                               if apex else "megatron_bf16_grads" if bf16_grads
                                               else "megatron"),
                               cross_entropy=loss,
                               reshard_after_forward="SHARD_GRAD_OP" not in text)


@dataclass(frozen=True)
class RunCheck:
    run: MeasuredRun
    recompute: str          # the recomputation simulated (auto: the least that fits)
    published: float        # tokens / s / GPU, converted from the published metric
    simulated: float        # tokens / s / GPU
    error: float            # simulated / published - 1
    fits: bool
    memory_gib: float       # the fullest GPU's simulated peak
    memory_error: float | None  # memory_gib / measured_mem_gib - 1, where measured

    def __repr__(self) -> str:
        mem = (f", memory {self.memory_gib:.1f} GiB vs measured {self.run.measured_mem_gib:.1f} "
               f"({self.memory_error * 100:+.1f} %)" if self.memory_error is not None else "")
        return (f"{self.run.source_id}: published {self.published:,.1f}, simulated "
                f"{self.simulated:,.1f} tokens/s/GPU ({self.error * 100:+.1f} %), "
                f"recompute {self.recompute}, {'fits' if self.fits else 'DOES NOT FIT'}{mem}")


def check_runs(runs: Any, *, gpu: Any = None) -> list[RunCheck]:
    """Simulate each measured run as published (``recompute="auto"``: the
    least recomputation that fits in hpgo's memory model) and compare its
    tokens / s / GPU and, where measured, its peak memory.  ``gpu`` replaces
    the presets' GPU."""
    from .parallel import simulate
    out = []
    for run in runs:
        m, c = run.transformer(), run.cluster(gpu)
        modes = _RECOMPUTE_ORDER if run.recompute == "auto" else (run.recompute,)
        for rc in modes:
            r = simulate(m, c, run.plan(rc), precision=run.precision, timeline=False)
            if r.fits:
                break
        pub = run.published_tokens_per_gpu()
        sim = r.tokens_per_second / run.gpus
        mem = max(x.total for x in r.memory) / 2 ** 30
        merr = mem / run.measured_mem_gib - 1 if run.measured_mem_gib else None
        out.append(RunCheck(run, rc, pub, sim, sim / pub - 1, r.fits, mem, merr))
    return out


# ---------------------------------------------------------------------------
# What each answer says about the published runs of its stack
# ---------------------------------------------------------------------------

#: The shipped errors of hpgo on every published run it is checked against,
#: written by ``benchmarks/validate_published.py --write-checked``.
CHECKED_FILE = pathlib.Path(__file__).with_name("checked_runs.json")
_CHECKED_FORMAT = "hpgo-checked-runs-1"


@dataclass(frozen=True)
class Stack:
    """How the published checks group runs: the training stack (from the
    plan's kernel set and gradient path), the GPU generation, the precision
    class and whether the model routes to experts."""

    stack: str        # "Megatron-LM / NeMo", "PyTorch (torchtitan, OLMo-core)", "PyTorch eager"
                      # or "DeepSpeed"
    gpus: str         # "Hopper" (H100 / H200 SXM), "Blackwell" (B200), "Ampere" (A100) or "Volta" (V100)
    precision: str    # "16-bit" or "fp8"
    moe: bool

    def describe(self, n: int = 2) -> str:
        return (f"{'mixture-of-experts' if self.moe else 'dense'} {self.precision} "
                f"{self.stack} run{'' if n == 1 else 's'} on {self.gpus} GPUs")


def _generation(gpu: Any) -> str | None:
    """The GPU generation the checks cover, told apart as the C core tells
    its measured tables apart: the Hopper SXM die (132 SMs, dense bf16
    700-1000 TFLOP/s: H100 SXM at any power limit, H200), the B200 (148
    SMs, 2,000-2,600 TFLOP/s), the A100 (108 SMs, 300-320 TFLOP/s) and the
    V100 (80 SMs, 112-131 TFLOP/s of fp16: PCIe, SXM2, the DGX-2H's SXM3);
    None for every other GPU."""
    bf16 = gpu.bf16_flops
    if gpu.multiprocessors == 132 and 700e12 <= bf16 <= 1000e12:
        return "Hopper"
    if gpu.multiprocessors == 148 and 2000e12 <= bf16 <= 2600e12:
        return "Blackwell"
    if gpu.multiprocessors == 108 and 300e12 <= bf16 <= 320e12:
        return "Ampere"
    if gpu.multiprocessors == 80 and 110e12 <= bf16 <= 132e12:
        return "Volta"
    return None


def stack_of(plan: Any, cluster: Any, precision: str, model: Any) -> Stack | None:
    """The :class:`Stack` a simulation of ``model`` under ``plan`` on
    ``cluster`` belongs to, or None where no published run could be alike
    (a GPU outside the checked generations, several GPU types, a plan with
    its own stages, fp32, a model that is not a transformer)."""
    from .workmodel import Transformer

    if not isinstance(model, Transformer) or getattr(cluster, "parts", None):
        return None
    if plan.stages is not None or precision not in ("bf16", "fp16", "fp8"):
        return None
    gen = _generation(cluster.gpu)
    if gen is None:
        return None
    if plan.optimizer_impl == "deepspeed_bf16":
        stack = "DeepSpeed"
    elif plan.kernels == "te":
        stack = "Megatron-LM / NeMo"
    elif plan.kernels == "eager":
        stack = "PyTorch eager"  # each op its own kernel (Megatron-LM v1.0, llm-foundry)
    else:
        stack = "PyTorch (torchtitan, OLMo-core)"
    return Stack(stack, gen, "fp8" if precision == "fp8" else "16-bit", model.experts > 0)


@dataclass(frozen=True)
class CheckedBand:
    """hpgo's errors on the published runs of one :class:`Stack`: each
    run's tokens / s / GPU simulated as published against the measured, as
    ``simulated / measured - 1`` (positive: hpgo faster than measured)."""

    stack: Stack
    runs: tuple[tuple[str, float], ...]   # (run, error)

    @property
    def median(self) -> float:
        """Median |error|."""
        import statistics
        return statistics.median(abs(e) for _, e in self.runs)

    @property
    def low(self) -> float:
        return min(e for _, e in self.runs)

    @property
    def high(self) -> float:
        return max(e for _, e in self.runs)

    def __str__(self) -> str:
        n = len(self.runs)
        span = (f"{self.low * 100:+.1f} %" if n == 1 else
                f"{self.low * 100:+.1f} ... {self.high * 100:+.1f} %")
        return (f"checked on {n} published {self.stack.describe(n)}: hpgo {span} against "
                f"their measured tokens/s (median |error| {self.median * 100:.1f} %)")


def _band_key(d: dict) -> Stack:
    return Stack(d["stack"], d["gpus"], d["precision"], bool(d["moe"]))


_checked_cache: dict = {}


def checked_bands(path: Any = None) -> list[CheckedBand]:
    """The bands of the shipped file (or of ``path``, a file written by
    :func:`write_checked`); ValueError names the file and the field for a
    malformed one."""
    from . import _files

    p = str(path or CHECKED_FILE)
    if p in _checked_cache:
        return _checked_cache[p]
    doc = _files.load_json(p, "checked-runs file")
    where = f"checked-runs file {p}"
    if not isinstance(doc, dict) or doc.get("format") != _CHECKED_FORMAT:
        raise ValueError(f"{where}: format must be {_CHECKED_FORMAT!r}")
    bands = doc.get("bands")
    if not isinstance(bands, list):
        raise ValueError(f"{where}: 'bands' must be a list")
    out = []
    for i, b in enumerate(bands):
        try:
            key = _band_key(b)
            runs = tuple((str(r), float(e)) for r, e in b["runs"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: bands[{i}] is malformed ({exc})") from None
        if not runs or not all(-1 < e < 100 for _, e in runs):
            raise ValueError(f"{where}: bands[{i}].runs must hold errors in (-1, 100)")
        out.append(CheckedBand(key, runs))
    _checked_cache[p] = out
    return out


def _band_of(key: Stack | None) -> CheckedBand | None:
    return None if key is None else next((b for b in checked_bands() if b.stack == key), None)


def checked_band(plan: Any, cluster: Any, precision: str, model: Any) -> CheckedBand | None:
    """The band of published runs on the stack of this simulation (see
    :func:`stack_of`), or None where none is checked."""
    return _band_of(stack_of(plan, cluster, precision, model))


def checked_note(plan: Any, cluster: Any, precision: str, model: Any) -> str | None:
    """One line for an answer's assumptions: how far hpgo was from the
    published runs of its stack, or that none of them (or none on its GPU)
    is checked; None for a simulation no published run is like (not a
    transformer, fp32, several GPU types or a plan with its own stages)."""
    return checked_note_and_band(plan, cluster, precision, model)[0]


def checked_note_and_band(plan: Any, cluster: Any, precision: str,
                          model: Any) -> tuple[str | None, CheckedBand | None]:
    """:func:`checked_note` and :func:`checked_band` from one look-up."""
    from .workmodel import Transformer

    key = stack_of(plan, cluster, precision, model)
    if key is None:
        if (isinstance(model, Transformer) and not getattr(cluster, "parts", None)
                and plan.stages is None and _generation(cluster.gpu) is None):
            return f"not checked against published runs on {cluster.gpu.name} GPUs", None
        return None, None
    band = _band_of(key)
    return (str(band) if band is not None else f"no published {key.describe()} checked"), band


def korthikanti_cases(path: Any) -> list[tuple[dict, Any, Any, Any]]:
    """Korthikanti et al. 2022's Table 5 runs (DGX A100 80 GB, fp16, the
    rows with a published iteration time) of
    ``../shared/reference/korthikanti2022.csv``: (row, model, cluster,
    plan) each, the row's ``tab5_iter_s`` the measured seconds."""
    import csv

    from . import _files
    from .cluster import Cluster
    from .parallel import ParallelPlan
    from .workmodel import transformer

    text = _files.read_text(path, "Korthikanti CSV")
    out = []
    for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        if not row["tab5_iter_s"]:
            continue
        v = int(row["interleave"])
        m = transformer(hidden=int(row["hidden"]), ffn=int(row["ffn"]), heads=int(row["heads"]),
                        layers=int(row["layers"]), seq=int(row["seq"]), vocab=51200)
        p = ParallelPlan(tp=int(row["tp"]), pp=int(row["pp"]), dp=int(row["dp"]),
                         virtual_stages=v, micro_batch=int(row["mbs"]),
                         global_batch=int(row["batch"]),
                         schedule="interleaved-1f1b" if v > 1 else "1f1b",
                         recompute="selective" if row["mode"] == "seqsel" else "full",
                         sequence_parallel=row["mode"] == "seqsel")
        out.append((row, m, Cluster.preset("dgx-a100-80gb", nodes=int(row["gpus"]) // 8), p))
    return out


def _korthikanti_checks(path: Any) -> list[tuple[Stack | None, str, float]]:
    """The Table 5 runs as checks: the tokens/s error is the published
    iteration time over hpgo's, less 1."""
    from .parallel import simulate

    out = []
    for row, m, c, p in korthikanti_cases(path):
        r = simulate(m, c, p, precision="fp16", timeline=False)
        out.append((stack_of(p, c, "fp16", m), f"Korthikanti {row['model']} {row['mode']}",
                    float(row["tab5_iter_s"]) / r.iteration_time - 1))
    return out


def checked_runs(reference: Any, further: Any, korthikanti: Any) -> list[tuple[Stack, str, float]]:
    """Every published run hpgo is checked against, simulated as published:
    the measured-runs files ``reference`` (``../shared/reference/
    published_runs.csv``) and ``further`` (``benchmarks/
    further_published_runs.csv``), Korthikanti et al.'s Table 5, and the
    Megatron-Bridge, Megatron-MoE-ModelZoo and Megatron-Core MoE tracker
    rows (the EP-overlap A/B pair is left out: its overlapped runs set a
    constant).  Each as (stack, run, error)."""
    from .workmodel import transformer

    out = []
    for path in (reference, further):
        for chk in check_runs(load_runs(path)):
            run = chk.run
            key = stack_of(run.plan(chk.recompute), run.cluster(), run.precision,
                           run.transformer())
            out.append((key, run.source_id, chk.error))
    out += _korthikanti_checks(korthikanti)
    tables = ((MEGATRON_BRIDGE_H100, "Megatron-Bridge"),
              (MEGATRON_BRIDGE_B200, "Megatron-Bridge"),
              (MEGATRON_MOE_MODELZOO_H100, "Megatron-MoE-ModelZoo"),
              (MCORE_MOE_TRACKER_H100, "Megatron-Core MoE tracker"))
    for runs, name in tables:
        for chk in check(runs):
            r = chk.run
            m = transformer(r.model, seq=r.seq)
            key = stack_of(r.plan(r.recompute or "none"), r.cluster(), r.precision, m)
            label = (f"{name} {r.model} {r.precision} {r.gpus} GPUs TP{r.tp} PP{r.pp} CP{r.cp} "
                     f"VP{r.vp} EP{r.ep}"
                     + (" DeepEP" if r.dispatcher == "deepep" else "")
                     + (" a2a overlap" if r.overlap_moe_comm else "")
                     + (f" ({r.source.rsplit(' ', 1)[-1]})" if r.source.startswith(_MB) else ""))
            out.append((key, label, chk.error))
    return [x for x in out if x[0] is not None]


def write_checked(path: Any, reference: Any, further: Any, korthikanti: Any) -> list[CheckedBand]:
    """Write the bands of :func:`checked_runs` to ``path`` (atomically: a
    failed write leaves the old file) and return them."""
    import json
    import math
    import re

    from . import _files

    groups: dict[Stack, list[tuple[str, float]]] = {}
    for key, run, err in checked_runs(reference, further, korthikanti):
        if not (math.isfinite(err) and -1 < err < 100):
            raise ValueError(f"run {run}: its error {err!r} is not a finite number in (-1, 100)")
        groups.setdefault(key, []).append((run, round(err, 4)))
    order = sorted(groups, key=lambda k: (k.stack, k.gpus, k.precision, k.moe))
    doc = {"format": _CHECKED_FORMAT,
           "what": "hpgo's error on each published run it is checked against, simulated as "
                   "published: simulated / measured tokens per second per GPU, less 1",
           "written_by": "benchmarks/validate_published.py --write-checked",
           "bands": [dict(dataclasses.asdict(k), runs=[list(r) for r in groups[k]])
                     for k in order]}
    text = json.dumps(doc, indent=1)
    # one run a line
    text = re.sub(r'\[\n\s+("(?:[^"\\]|\\.)*"),\n\s+([-0-9.e+]+)\n\s+\]', r"[\1, \2]", text)
    _files.atomic_write(path, text + "\n")
    _checked_cache.pop(str(path), None)
    return [CheckedBand(k, tuple(groups[k])) for k in order]
