"""autoplan on clusters of several GPU types and with a slowed GPU, beside the
best plan of the homogeneous search on each GPU type alone and beside data
parallelism with speed-proportional shares, all under the same step model
(docs/heterogeneous.md prints this table).

    python benchmarks/compare_hetero.py            # every scenario
    python benchmarks/compare_hetero.py metis hap  # some

Seconds per iteration; "-" where no plan fits.  The clusters of Metis
(USENIX ATC'24, its artifact's README example) and HAP (EuroSys'24, its
evaluation's 2 V100 + 6 P100 machines) are built from their published
figures; what those papers leave out is ASSUMED below.
"""
from __future__ import annotations

import dataclasses
import sys
import time

import hpgo
from hpgo.autoplan_hetero import compare


def gpu_like(base: hpgo.GPU, name: str, **peaks: float) -> hpgo.GPU:
    """A GPU of the V100 preset's efficiency curves (Calculon's, capped at
    A100's measured GEMM ratio) with another datasheet's peaks and memory."""
    return dataclasses.replace(base, name=name, **peaks)


V100 = hpgo.Cluster.preset("dgx1-v100-16gb").gpu
# P100 SXM2 16 GB datasheet: 21.2 TFLOP/s fp16 (no tensor cores: the fp16
# rate is its matrix and its vector peak), 10.6 fp32, 732 GB/s HBM2
P100 = gpu_like(V100, "P100-16GB", bf16_flops=21.2e12, fp32_flops=10.6e12, tf32_flops=0.0,
                vector_flops=21.2e12, memory_bytes=16e9, memory_bandwidth=732e9,
                multiprocessors=56)
# T4 datasheet: 65 TFLOP/s fp16 tensor, 8.1 fp32 (16.2 fp16 on CUDA cores),
# 16 GB GDDR6 at 320 GB/s; its 70 W limit's clocks are not modelled (ASSUMED)
T4 = gpu_like(V100, "T4-16GB", bf16_flops=65e12, fp32_flops=8.1e12, tf32_flops=0.0,
              vector_flops=16.2e12, memory_bytes=16e9, memory_bandwidth=320e9,
              multiprocessors=40)


def node_cluster(gpu: hpgo.GPU, nodes: int, intra: float, inter_per_node: float,
                 name: str) -> hpgo.Cluster:
    """`nodes` servers of 8 GPUs on a PCIe-class link `intra` (bytes/s per
    GPU) and a network of `inter_per_node` bytes/s shared by the node's 8
    GPUs; Calculon's efficiencies and latencies (ASSUMED)."""
    return hpgo.Cluster(name, gpu, (hpgo.Level(8, intra, latency=10e-6, efficiency=0.9),
                                    hpgo.Level(nodes, inter_per_node / 8, latency=20e-6,
                                               efficiency=0.9)))


GPT3_1_3B = hpgo.transformer(hidden=2048, layers=24, heads=16, ffn=8192, seq=2048, vocab=50257,
                             name="gpt3-1.3b")        # Brown et al. 2020, Table 2.1 (XL)
GPT3_2_7B = hpgo.transformer(hidden=2560, layers=32, heads=32, ffn=10240, seq=2048, vocab=50257,
                             name="gpt3-2.7b")
GPT_1_5B = hpgo.transformer(hidden=1600, layers=48, heads=25, ffn=6400, seq=1024, vocab=50257,
                            name="gpt-1.5b")         # GPT-2 XL's shape, Metis's "GPT 1.5B"
BERT_BASE = hpgo.transformer(hidden=768, layers=12, heads=12, ffn=3072, seq=128, vocab=30522,
                             name="bert-base")       # HAP's BERT-Base, seq 128


def scenarios() -> dict:
    h100_a100 = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 2),
                                     hpgo.Cluster.preset("dgx-a100-80gb", 2),
                                     bandwidth=25e9, latency=20e-6, efficiency=0.85)
    a100_v100 = hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-a100-40gb", 2),
                                     hpgo.Cluster.preset("dgx1-v100", 4),
                                     bandwidth=6.25e9, latency=20e-6, efficiency=0.9)
    slowed = hpgo.Cluster.preset("dgx-a100-80gb", 2).with_speed({3: 1 / 1.5})
    # Metis's README cluster: one node each of V100 16 GB, P100, T4 and A100
    # 80 GB, 8 GPUs a node ("IP1 8" ...), intra_bandwidth 5.3125e9 and
    # inter_bandwidth 3.125e8 bytes/s; GPT 1.5B at global batch 128
    metis = hpgo.Cluster.combine(
        node_cluster(V100, 1, 5.3125e9, 3.125e8, "v100"),
        node_cluster(P100, 1, 5.3125e9, 3.125e8, "p100"),
        node_cluster(T4, 1, 5.3125e9, 3.125e8, "t4"),
        node_cluster(hpgo.Cluster.preset("dgx-a100-80gb").gpu, 1, 5.3125e9, 3.125e8, "a100"),
        bandwidth=3.125e8 / 8, latency=20e-6, efficiency=0.9)
    # HAP's heterogeneous cluster: 2 V100 machines + 6 P100 machines of 8
    # GPUs, about 10.4 Gbps between machines (HAP's profiles, spec
    # dynpipe-hap.md); PCIe Gen3 x16 inside a machine (16 GB/s, ASSUMED)
    hap = hpgo.Cluster.combine(node_cluster(V100, 2, 16e9, 1.3e9, "v100"),
                               node_cluster(P100, 6, 16e9, 1.3e9, "p100"),
                               bandwidth=1.3e9 / 8, latency=20e-6, efficiency=0.9)
    return {
        "h100+a100": (GPT3_1_3B, h100_a100, 256),
        "h100+a100-llama": ("llama3-8b", h100_a100, 128),
        "a100+v100": (GPT3_2_7B, a100_v100, 256),
        "slowed": ("llama3-8b", slowed, 128),
        "metis": (GPT_1_5B, metis, 128),
        "hap": (BERT_BASE, hap, 256),
    }


def fmt(t: float | None) -> str:
    return "-" if t is None else f"{t:.3f}"


def main(names: list[str]) -> None:
    sc = scenarios()
    print("| scenario | model | GPUs | autoplan | each GPU type alone | speed-proportional DP | "
          "autoplan's plan | search ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names or list(sc):
        model, cluster, gb = sc[name]
        t0 = time.perf_counter()
        d = compare(model, cluster, gb)
        alone = ", ".join(f"{p['gpu'].split('-')[0]} {fmt(p['time'])}" for p in d["parts"])
        mname = model if isinstance(model, str) else model.name
        print(f"| {name} | {mname} gb {gb} | {cluster.gpus} | {fmt(d['autoplan'])} | {alone} | "
              f"{fmt(d['dp'])} | {d['plan']} | {d['search_seconds'] * 1e3:.0f} |", flush=True)
        _ = t0


if __name__ == "__main__":
    main(sys.argv[1:])
