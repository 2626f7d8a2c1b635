"""Published training runs to check the training-step model against.

``MEGATRON_BRIDGE_H100`` lists the DGX-H100 pretraining rows of NVIDIA
Megatron-Bridge's performance summaries (``docs/performance-summary.md`` of
NVIDIA-NeMo/Megatron-Bridge, NeMo containers 25.09, 25.11 and 26.02): the
model, GPU count, precision, batch sizes, sequence length, TP / PP / CP / VP
/ EP and the measured tokens per second per GPU.  The tables give no expert
tensor-parallel size (Megatron-Bridge's recipes use 1) nor the
recomputation, so :func:`check` simulates each configuration without
recomputation and, where that does not fit in hpgo's memory model, also
with the least recomputation (selective, then full) that does.

>>> for row in hpgo.validation.check():          # doctest: +SKIP
...     print(row)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PublishedRun", "MEGATRON_BRIDGE_H100", "Check", "check"]


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

    def plan(self, recompute: str = "none") -> Any:
        from .parallel import ParallelPlan
        dp = self.gpus // (self.tp * self.pp * self.cp)
        return ParallelPlan(global_batch=self.global_batch, tp=self.tp, pp=self.pp, dp=dp,
                            cp=self.cp, ep=self.ep, etp=1 if self.ep > 1 else None,
                            virtual_stages=self.vp, micro_batch=self.micro_batch,
                            schedule="interleaved-1f1b" if self.vp > 1 else "1f1b",
                            recompute=recompute, sequence_parallel=self.tp > 1,
                            zero=3 if self.fsdp else 1)


_MB = "Megatron-Bridge performance summary, NeMo "
MEGATRON_BRIDGE_H100: tuple[PublishedRun, ...] = (
    PublishedRun(_MB + "26.02", "gpt-oss-120b", 64, "bf16", 1280, 1, 4096, False, 1, 4, 1, 1, 8, 5993),
    PublishedRun(_MB + "26.02", "qwen3-30b-a3b", 16, "fp8", 1024, 1, 4096, False, 1, 2, 1, 12, 8, 5113,
                 "the archive page's 5113 (the main page's 2557 contradicts its own TFLOP/s column)"),
    PublishedRun(_MB + "26.02", "qwen3-235b-a22b", 256, "fp8", 8192, 1, 4096, False, 2, 8, 1, 4, 32, 1633),
    PublishedRun(_MB + "26.02", "llama3-70b", 64, "fp8", 256, 1, 8192, False, 4, 8, 1, 5, 1, 1621),
    PublishedRun(_MB + "26.02", "llama3-405b", 1024, "fp8", 1536, 1, 8192, False, 8, 8, 2, 8, 1, 311,
                 "Llama 3.1 405B"),
    PublishedRun(_MB + "25.11", "llama3-8b", 8, "fp8", 128, 1, 8192, True, 1, 1, 1, 1, 1, 14451),
    PublishedRun(_MB + "25.11", "llama3-70b", 64, "fp8", 128, 1, 8192, False, 4, 8, 1, 5, 1, 1602),
    PublishedRun(_MB + "25.11", "llama3-405b", 1024, "fp8", 512, 1, 8192, False, 8, 8, 2, 8, 1, 292,
                 "Llama 3.1 405B"),
    PublishedRun(_MB + "25.11", "gpt-oss-120b", 64, "bf16", 512, 4, 4096, False, 1, 4, 1, 1, 8, 5630),
    PublishedRun(_MB + "25.11", "qwen3-30b-a3b", 16, "fp8", 512, 2, 4096, False, 1, 2, 1, 24, 8, 5275),
    PublishedRun(_MB + "25.11", "qwen3-235b-a22b", 256, "fp8", 2048, 1, 4096, False, 2, 8, 1, 4, 32, 1575),
    PublishedRun(_MB + "25.09", "deepseek-v3", 1024, "fp8", 8192, 1, 4096, False, 2, 8, 1, 4, 64, 1297,
                 "dropless, FP8 with 128x128 weight / 1x128 activation blocks"),
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
    published (no recomputation) and with the least recomputation that fits;
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
        for rc in ("none", "selective", "full"):
            res[rc] = simulate(m, c, run.plan(rc), precision=run.precision, timeline=False)
            if res[rc].fits:
                break
        least = next((rc for rc, r in res.items() if r.fits), "full")
        base, fit = res["none"], res[least]
        t0, t1 = base.tokens_per_second / run.gpus, fit.tokens_per_second / run.gpus
        out.append(Check(run, t0, t0 / pub - 1, base.fits,
                         max(x.total for x in base.memory) / 2 ** 30, least, t1, t1 / pub - 1,
                         max(x.total for x in fit.memory) / 2 ** 30, fit.fits))
    return out
