"""What torchao's tensorwise float8 casts cost on a GPU, compiled and eager
-- the kernels hpgo prices for fp8 under the PyTorch kernel sets
(docs/training-model.md, "torchao's float8 linears").

Needs PyTorch on a GPU with fp8 tensor cores (H100).  torchao itself is not
needed: the cast is written here the way torchao's hp_tensor_to_float8_dynamic
computes it (torchao/float8/float8_utils.py tensor_to_amax and
amax_to_scale, float8_tensor.py _ToFloat8ConstrFunc: max(abs(x)), the scale
in float64 then float32, x.to(float32) * scale, clamp, .to(float8)), with
the column-major copy _scaled_mm's other operand needs.  For Llama 3 8B's
tensors at 2 x 8,192 tokens, each case's device time and kernel count (the
kernels PyTorch's profiler sees, per call):

- ``dynamic``: amax, scale and cast to both layouts, ``torch.compile``;
- ``known_scale``: the cast alone (a precomputed scale);
- ``norm`` and ``norm_dynamic``: an RMSNorm alone and followed by the
  dynamic cast, compiled together (what the cast adds when its amax can
  fuse with the kernel producing the tensor);
- ``eager_dynamic``: the dynamic cast in eager PyTorch (row-major only);
- GEMMs: bf16 ``mm`` against ``torch._scaled_mm`` (e4m3, per-tensor scales,
  with and without fast accumulation) on the block's shapes.

With torchao importable, the rowwise recipe's pieces as well, through
torchao's own ``hp_tensor_to_float8_dynamic`` (axiswise scaling, scales
rounded down to powers of two, as ``Float8LinearConfig.from_recipe_name(
"rowwise")`` sets them), compiled: ``row`` (scales along the rows, what the
forward casts), ``col`` (along the columns, what the backward casts for the
weight gradient), ``norm_row`` (an RMSNorm followed by the row cast); and
the GEMMs with one scale per row of each operand, with fast accumulation
(``fp8_rowwise_fast_accum``, the forward's) and without (``fp8_rowwise``),
and the per-tensor kernel without fast accumulation followed by the
multiplication by both operands' row scales (``fp8_rescaled``: what
torchao's ``addmm_float8_unwrapped`` runs for the backward's rowwise GEMMs)::

    python benchmarks/gpu_float8_casts.py -o h100-sxm5-float8-casts.json
"""
import argparse
import datetime
import json
import os
import statistics
import sys

TOKENS = 16384  # 2 x 8,192 (torchtitan's Llama 3 8B benchmark, local batch 2)
TENSORS = (("input h", TOKENS, 4096), ("input ffn", TOKENS, 14336), ("weight w1", 14336, 4096))
GEMMS = (("wq", TOKENS, 4096, 4096), ("w1", TOKENS, 4096, 14336), ("w2", TOKENS, 14336, 4096))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args(argv)
    import torch
    F8 = torch.float8_e4m3fn
    MAX = torch.finfo(F8).max

    def amax_scale(x):
        amax = torch.max(torch.abs(x))
        return (MAX / torch.clamp(amax.to(torch.float64), min=1e-12)).to(torch.float32)

    def cast(x, s):
        y = (x.to(torch.float32) * s).clamp(-MAX, MAX).to(F8)
        return y, y.t().contiguous()

    def dynamic(x):
        s = amax_scale(x)
        y, yt = cast(x, s)
        return y, yt, s

    def eager_dynamic(x):
        s = amax_scale(x)
        return (x.to(torch.float32) * s).clamp(-MAX, MAX).to(F8), s

    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w

    def norm_dynamic(x, w):
        return dynamic(norm(x, w))

    comp = {f.__name__: torch.compile(f, dynamic=False)
            for f in (dynamic, cast, norm, norm_dynamic)}
    try:
        import torchao
        from torchao.float8.config import ScalingGranularity
        from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
        from torchao.float8.float8_training_tensor import GemmInputRole, LinearMMConfig
    except ImportError:
        torchao = None

    def axiswise(dim):
        def cast_along(x):
            y = hp_tensor_to_float8_dynamic(
                x, F8, LinearMMConfig(), gemm_input_role=GemmInputRole.INPUT,
                scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=dim,
                round_scales_to_power_of_2=True)
            return y._data, y._scale
        return cast_along

    if torchao is not None:
        comp["row"] = torch.compile(axiswise(-1), dynamic=False)
        comp["col"] = torch.compile(axiswise(0), dynamic=False)
        comp["norm_row"] = torch.compile(lambda x, w: axiswise(-1)(norm(x, w)), dynamic=False)

    def run(label, fn, *args):
        """Median seconds per call by CUDA events over loops of 5 calls, and
        the kernels one call launches (PyTorch's profiler); None where the
        case fails on this PyTorch."""
        try:
            for _ in range(3):
                fn(*args)
            torch.cuda.synchronize()
            ts = []
            for _ in range(a.reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(5):
                    fn(*args)
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1) / 5e3)
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    fn(*args)
                torch.cuda.synchronize()
            ev = [e for e in prof.events() if str(e.device_type).endswith("CUDA")]
            r = {"seconds": statistics.median(ts), "kernels": len(ev) / 5}
            print(label, r)
            return r
        except Exception as e:
            print(label, repr(e))
            return None

    dev = torch.cuda.get_device_properties(0)
    doc = {"format": "hpgo-float8-casts-1", "device": dev.name, "torch": torch.__version__,
           "date": datetime.date.today().isoformat(), "tensors": [],
           "gemms": [], "torchao": getattr(torchao, "__version__", None)}
    one = torch.ones((), device="cuda", dtype=torch.float32)
    for name, m, n in TENSORS:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        row = {"name": name, "rows": m, "cols": n}
        for case, fn, args in (("dynamic", comp["dynamic"], (x,)),
                               ("known_scale", comp["cast"], (x, amax_scale(x))),
                               ("norm", comp["norm"], (x, w)),
                               ("norm_dynamic", comp["norm_dynamic"], (x, w)),
                               ("eager_dynamic", eager_dynamic, (x,))):
            row[case] = run(case, fn, *args)
        if torchao is not None:
            for case, args in (("row", (x,)), ("col", (x,)), ("norm_row", (x, w))):
                row[case] = run(case, comp[case], *args)
        doc["tensors"].append(row)
    for name, m, k, n in GEMMS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        wt = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        xf, wf = x.to(F8), wt.to(F8)
        row = {"name": name, "m": m, "k": k, "n": n}
        row["bf16"] = run(name, lambda: x @ wt.t())
        for fast in (False, True):
            row["fp8_fast_accum" if fast else "fp8"] = run(name, lambda: torch._scaled_mm(
                xf, wf.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                use_fast_accum=fast))
        sa = torch.rand(m, 1, device="cuda", dtype=torch.float32) + 0.5
        sb = torch.rand(1, n, device="cuda", dtype=torch.float32) + 0.5
        for fast in (True, False):
            row["fp8_rowwise_fast_accum" if fast else "fp8_rowwise"] = run(
                name, lambda: torch._scaled_mm(xf, wf.t(), scale_a=sa, scale_b=sb,
                                               out_dtype=torch.bfloat16, use_fast_accum=fast))
        row["fp8_rescaled"] = run(name, lambda: torch._scaled_mm(
            xf, wf.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
            use_fast_accum=False) * sa * sb)
        doc["gemms"].append(row)
    tmp = f"{a.output}.tmp{os.getpid()}"     # an interrupted write keeps the old file
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
