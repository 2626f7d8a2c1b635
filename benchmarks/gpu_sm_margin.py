"""How much slower a GEMM runs when other kernels hold some of the GPU's
SMs -- what tensor-parallel communication overlap costs the GEMM beside it
(Transformer Engine launches its chunk GEMMs with n_SM - num_sm SMs while
its reduce-scatter kernels hold num_sm; NCCL holds one SM per channel).

Needs PyTorch and CuPy on a CUDA GPU.  A spinning kernel of ``n`` blocks,
each asking for most of an SM's shared memory so that no two share an SM,
holds exactly ``n`` SMs for longer than the GEMM runs; the GEMM, launched on
another stream once the spinner is resident, is timed by CUDA events.  For
each bf16 GEMM shape (tensor-parallel slices of Llama 3 70B and 8B layers,
whole and in the chunks overlap splits them into) and each ``n``, the median
of several runs, beside the GEMM alone; and, where PyTorch has an SM
carve-out for its cuBLAS GEMMs, the same with the GEMM told to leave those
SMs free (Transformer Engine's ``set_sm_margin``)::

    python benchmarks/gpu_sm_margin.py -o sm-margin.json

The two models it checks: proportional (time x n_SM / (n_SM - n)) and wave
quantised (time x ceil(tiles / (n_SM - n)) / ceil(tiles / n_SM)).
"""
import argparse
import warnings
import datetime
import statistics
import sys
import time

from _gpu import write_json

# (name, M tokens, K, N): y[M, N] = x[M, K] @ w[K, N]
SHAPES = (
    ("70b-tp4 fc2", 8192, 7168, 8192),
    ("70b-tp4 fc2 chunk/4", 2048, 7168, 8192),
    ("70b-tp4 proj", 8192, 2048, 8192),
    ("70b-tp4 proj chunk/4", 2048, 2048, 8192),
    ("70b-tp8 fc1 chunk/8", 1024, 8192, 7168),
    ("8b-tp2 fc2 chunk/2", 2048, 7168, 4096),
    ("8b-tp2 qkv chunk/2", 2048, 4096, 3072),
)
MARGINS = (0, 1, 2, 4, 8, 16, 24, 32, 48)
SMEM = 200 * 1024

SPIN = r"""
extern "C" __global__ void spin(long long cycles, int *flag) {
    extern __shared__ char smem[];
    if (threadIdx.x == 0) { smem[0] = 1; atomicAdd(flag, 1); }
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore", category=DeprecationWarning)   # cupy's ExternalStream
    import cupy
    import torch
    dev = torch.cuda.get_device_properties(0)
    n_sm = dev.multi_processor_count
    kern = cupy.RawKernel(SPIN, "spin")
    kern.max_dynamic_shared_size_bytes = SMEM
    clock_hz = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"] * 1e3
    side = torch.cuda.Stream()
    cside = cupy.cuda.ExternalStream(side.cuda_stream)
    flag = cupy.zeros(1, dtype=cupy.int32)
    poll = cupy.cuda.Stream(non_blocking=True)   # reads the flag beside the spinner

    def hold(n: int, seconds: float) -> None:
        """Start the spinner on n SMs and wait until every block is resident."""
        flag[...] = 0
        cupy.cuda.runtime.deviceSynchronize()
        with cside:
            kern((n,), (32,), (cupy.int64(int(seconds * clock_hz)), flag), shared_mem=SMEM)
        t = time.perf_counter()
        while True:
            v = flag.get(stream=poll)
            poll.synchronize()
            if int(v[0]) >= n:
                break
            if time.perf_counter() - t > 1.0:
                raise RuntimeError(f"the spinner's {n} blocks did not all start")

    # the spinner holds one SM per block: n_SM + 1 blocks take two rounds
    t = time.perf_counter()
    with cside:
        kern((n_sm,), (32,), (cupy.int64(int(0.02 * clock_hz)), flag), shared_mem=SMEM)
    cside.synchronize()
    one = time.perf_counter() - t
    t = time.perf_counter()
    with cside:
        kern((n_sm + 1,), (32,), (cupy.int64(int(0.02 * clock_hz)), flag), shared_mem=SMEM)
    cside.synchronize()
    two = time.perf_counter() - t
    # PyTorch's SM carve-out for cuBLAS(Lt) GEMMs (what Transformer Engine's
    # set_sm_margin does): absent in older versions
    carve = getattr(torch._C, "_set_sm_carveout_experimental", None)
    doc = {"format": "hpgo-sm-margin-1", "device": dev.name, "multiprocessors": n_sm,
           "carveout": carve is not None,
           "torch": torch.__version__, "date": datetime.date.today().isoformat(),
           "spin_check": {"n_sm_blocks_seconds": one, "n_sm_plus_one_blocks_seconds": two},
           "samples": []}
    print(f"{dev.name}: {n_sm} SMs; spinner {n_sm} blocks {one * 1e3:.1f} ms, "
          f"{n_sm + 1} blocks {two * 1e3:.1f} ms", flush=True)
    for name, m, k, n in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(5):
            x @ w
        torch.cuda.synchronize()
        row = {"name": name, "m": m, "k": k, "n": n, "flops": 2.0 * m * k * n, "seconds": {},
               "seconds_carveout": {}}
        alone = None
        for nc in MARGINS:
            for aware in (False, True):
                if aware and not carve:
                    continue
                if aware:
                    carve(nc or None)   # cuBLAS told to leave nc SMs free (its grid sized to the rest)
                ts = []
                for _ in range(a.reps):
                    if nc:
                        hold(nc, max(0.005, 6 * (alone or 0.002)))
                    e0 = torch.cuda.Event(enable_timing=True)
                    e1 = torch.cuda.Event(enable_timing=True)
                    e0.record()
                    x @ w
                    e1.record()
                    e1.synchronize()
                    ts.append(e0.elapsed_time(e1) / 1e3)
                    torch.cuda.synchronize()
                if aware:
                    carve(None)
                med = statistics.median(ts)
                alone = alone or med
                row["seconds_carveout" if aware else "seconds"][str(nc)] = med
                print(f"{name:22s} {m:5d}x{k:5d}x{n:5d} held {nc:2d}{' aware' if aware else '      '}:"
                      f" {med * 1e6:8.1f} us x{med / alone:5.3f} (proportional "
                      f"x{n_sm / (n_sm - nc):5.3f})", flush=True)
        doc["samples"].append(row)
        write_json(a.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
