"""How much slower a GEMM runs beside a communication-like kernel on the
same GPU: a persistent copy kernel of n blocks (what an NCCL collective
launches: one block per channel, each moving its share of a buffer through
HBM) on a second stream while bf16 GEMMs run on the first.

Needs PyTorch with Triton on a CUDA GPU.  For each n, the copy kernel loops
over a 1 GiB buffer for longer than the GEMMs take; the GEMMs (Llama 3 8B /
70B layer shapes of data-parallel runs, one sequence of 8,192 tokens) are
timed by CUDA events once the copy runs, beside the same GEMMs alone, and
the copy's own bandwidth alone and beside them::

    python benchmarks/gpu_copy_beside_gemm.py -o copy-beside-gemm.json
"""
import argparse
import sys

from _gpu import cuda_torch, device_doc, median_seconds, write_json

# (name, M, K, N): y[M, N] = x[M, K] @ w[K, N]
SHAPES = (
    ("8b qkv", 8192, 4096, 6144),
    ("8b fc1", 8192, 4096, 28672),
    ("8b fc2", 8192, 14336, 4096),
    ("70b fc1", 8192, 8192, 57344),
    ("70b fc2", 8192, 28672, 8192),
)
BLOCKS = (8, 16, 32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args(argv)
    torch = cuda_torch("gpu_copy_beside_gemm.py")
    if torch is None:
        return 2
    try:
        import triton
        import triton.language as tl
    except ImportError:
        print("gpu_copy_beside_gemm.py needs Triton", file=sys.stderr)
        return 2

    @triton.jit
    def copy_loop(src, dst, n, rounds, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        for _ in range(rounds):
            for start in range(pid * BLOCK, n, nprog * BLOCK):
                offs = start + tl.arange(0, BLOCK)
                m = offs < n
                tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)

    dev = torch.device("cuda")
    n = 1 << 28                      # 256 Mi fp32 = 1 GiB each way
    src = torch.ones(n, device=dev)
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()

    def copy(blocks, rounds):
        copy_loop[(blocks,)](src, dst, n, rounds, BLOCK=4096, num_warps=8)

    doc = device_doc(torch, "hpgo-copy-beside-gemm/1", reps=a.reps, copy=[], rows=[])
    # the copy alone: bytes a second for each block count
    for b in BLOCKS:
        # every call runs at least two rounds: Triton specialises an
        # argument equal to 1, and a second compilation must not be timed
        sec = median_seconds(torch, lambda: copy(b, 2), reps=1)
        doc["copy"].append({"blocks": b, "bytes_per_second": 2 * 2 * 4 * n / sec})
    for name, M, K, N in SHAPES:
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)

        def gemm():
            for _ in range(5):
                torch.mm(x, w, out=y)

        t_alone = median_seconds(torch, gemm, a.reps)
        row = {"name": name, "M": M, "K": K, "N": N, "flops": 5 * 2.0 * M * K * N,
               "alone_seconds": t_alone, "beside": {}}
        for b in BLOCKS:
            bw = next(c["bytes_per_second"] for c in doc["copy"] if c["blocks"] == b)
            # rounds enough to outlast the GEMMs three times over
            rounds = max(2, int(3 * t_alone * bw / (2 * 4 * n)) + 1)

            def start_copy(b=b, rounds=rounds):
                with torch.cuda.stream(side):
                    copy(b, rounds)
                # let the copy's blocks become resident before the GEMMs start
                torch.cuda._sleep(2_000_000)

            row["beside"][str(b)] = median_seconds(torch, gemm, a.reps, warmup=0,
                                                   before=start_copy)
        doc["rows"].append(row)
        print(f"{name:8s} alone {t_alone * 1e3:7.3f} ms  " + "  ".join(
            f"{b} blocks x{row['beside'][str(b)] / t_alone:.3f}" for b in BLOCKS), flush=True)
        del x, w, y
    for c in doc["copy"]:
        print(f"copy with {c['blocks']} blocks alone: {c['bytes_per_second'] / 1e9:.0f} GB/s")
    write_json(a.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
