"""What splitting a tensor-parallel GEMM into one chunk per rank costs on
one GPU, without any communication: the compute side of PyTorch's async TP
(``torch.distributed._symmetric_memory``: ``_pipelined_multi_all_gather_and_consume``
runs one consumer GEMM per source rank on rows m / t of the gathered input,
alternating between the current stream and a backend stream;
``_pipelined_produce_and_all2all`` runs one producer GEMM per destination
rank, then one kernel sums the t partials).

Needs PyTorch on a CUDA GPU.  For the bf16 GEMMs of one TP-8 rank of
torchtitan's June 2025 Llama 3 8B and 70B runs (local batch 12 and 16 at
8,192 tokens), the median of several runs, timed by CUDA events, of

- the whole GEMM, y[M, N] = x[M, K] @ w[K, N];
- the t = 8 row chunks back to back on one stream, each into its slice of y;
- the same chunks alternating between two streams, as async TP issues them;
- for an all-gather side, the copy of the local shard (M / t rows of x) into
  another buffer (the copy async TP makes before it gathers); for a
  reduce-scatter side, the sum of the t partials of M / t rows each::

    python benchmarks/gpu_tp_chunks.py -o tp-chunks.json
"""
import argparse
import sys

from _gpu import cuda_torch, device_doc, median_seconds, write_json

# (name, side, M tokens on the rank, K, N): y[M, N] = x[M, K] @ w[K, N]
SHAPES = (
    ("8b qkv", "ag", 98304, 4096, 768),
    ("8b w1 w3", "ag", 98304, 4096, 3584),
    ("8b wo", "rs", 98304, 512, 4096),
    ("8b w2", "rs", 98304, 1792, 4096),
    ("70b qkv", "ag", 131072, 8192, 1280),
    ("70b w1 w3", "ag", 131072, 8192, 7168),
    ("70b wo", "rs", 131072, 1024, 8192),
    ("70b w2", "rs", 131072, 3584, 8192),
)
T = 8


def measure(torch, name, side, M, K, N, reps):
    dev = torch.device("cuda")
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
    y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    m = M // T
    side_stream = torch.cuda.Stream()

    def whole():
        torch.mm(x, w, out=y)

    def serial():
        for i in range(T):
            torch.mm(x[i * m:(i + 1) * m], w, out=y[i * m:(i + 1) * m])

    def two_streams():
        cur = torch.cuda.current_stream()
        side_stream.wait_stream(cur)
        for i in range(T):
            with torch.cuda.stream(cur if i % 2 == 0 else side_stream):
                torch.mm(x[i * m:(i + 1) * m], w, out=y[i * m:(i + 1) * m])
        cur.wait_stream(side_stream)

    row = {"name": name, "side": side, "M": M, "K": K, "N": N, "chunks": T,
           "whole_seconds": median_seconds(torch, whole, reps),
           "serial_chunks_seconds": median_seconds(torch, serial, reps),
           "two_stream_chunks_seconds": median_seconds(torch, two_streams, reps)}
    if side == "ag":
        buf = torch.empty(m, K, device=dev, dtype=torch.bfloat16)
        row["shard_copy_seconds"] = median_seconds(torch, lambda: buf.copy_(x[:m]), reps)
        row["shard_copy_bytes"] = 2 * 2 * m * K
    else:
        parts = torch.randn(T, m, N, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, N, device=dev, dtype=torch.bfloat16)
        row["partial_sum_seconds"] = median_seconds(
            torch, lambda: torch.sum(parts, dim=0, out=out), reps)
        row["partial_sum_bytes"] = 2 * (T + 1) * m * N
    row["flops"] = 2.0 * M * K * N
    del x, w, y
    torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args(argv)
    torch = cuda_torch("gpu_tp_chunks.py")
    if torch is None:
        return 2
    doc = device_doc(torch, "hpgo-tp-chunks/1", reps=a.reps, rows=[])
    for name, side, M, K, N in SHAPES:
        r = measure(torch, name, side, M, K, N, a.reps)
        doc["rows"].append(r)
        extra = (f"copy {r['shard_copy_seconds'] * 1e3:6.3f}" if side == "ag"
                 else f"sum {r['partial_sum_seconds'] * 1e3:6.3f}")
        print(f"{name:10s} whole {r['whole_seconds'] * 1e3:7.3f} ms  8 chunks "
              f"{r['serial_chunks_seconds'] * 1e3:7.3f}  two streams "
              f"{r['two_stream_chunks_seconds'] * 1e3:7.3f}  {extra}", flush=True)
    write_json(a.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
