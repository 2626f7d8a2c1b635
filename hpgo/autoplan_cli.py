"""``hpgo autoplan``: the best plans for a model on a cluster, from the shell.

    hpgo autoplan --model llama3-70b --cluster dgx-h100 --nodes 8 --global-batch 512 --seq 8192
    hpgo autoplan --model deepseek-v3 --cluster dgx-h100 --nodes 128 --global-batch 8192 --precision fp8
    hpgo autoplan --hf-config config.json --cluster cluster.json --global-batch 256 --json
    hpgo autoplan --profile graph.txt --profile-batch 32 --cluster dapple-v100 --global-batch 256
"""
from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["add_autoplan_subcommand", "run_autoplan"]


def add_autoplan_subcommand(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "autoplan", help="the best parallel plans that fit (tp, cp, pp, dp, ep, schedule, "
                         "recompute, ZeRO)",
        description="Search data, tensor, context, pipeline and expert parallelism, virtual "
                    "stages, micro-batch, schedule, recomputation, sequence parallelism and ZeRO "
                    "for the fastest plans that fit in memory, and print them ranked.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a transformer preset (gpt3-175b, llama3-70b, ...)")
    src.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json")
    src.add_argument("--profile", metavar="GRAPH", help="a PipeDream graph.txt")
    p.add_argument("--profile-batch", type=float, help="batch the profile was measured at")
    p.add_argument("--cluster", required=True,
                   help="a preset (dgx-a100-80gb, dgx-h100, ...) or a cluster JSON file")
    p.add_argument("--nodes", type=int,
                   help="nodes of the preset (default: enough for --gpus, else one)")
    p.add_argument("--global-batch", type=int, required=True, help="sequences per iteration")
    p.add_argument("--seq", type=int, help="sequence length (transformers)")
    p.add_argument("--gpus", type=int, help="GPUs to use (default: the whole cluster)")
    p.add_argument("--objective", choices=("time", "cost"), default="time")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp8", "fp32"))
    p.add_argument("--top", type=int, default=10)
    for name in ("tp", "pp", "dp", "cp", "ep", "etp", "virtual-stages", "micro-batch", "zero"):
        p.add_argument(f"--{name}", type=int, help=f"fix {name}")
    p.add_argument("--ep-placement", choices=("inner", "outer"),
                   help="fix where the expert-parallel group sits")
    p.add_argument("--overlap-moe-comm", nargs="?", const=True, default=False, type=_share,
                   metavar="SHARE",
                   help="price MoE all-to-alls as overlapped with another micro-batch's compute "
                        "(crediting Megatron's measured share of the ideal overlap, 0.65, or SHARE "
                        "in (0, 1])")
    p.add_argument("--moe-dispatcher", choices=("alltoall", "deepep"), default="alltoall",
                   help="MoE token dispatcher: NCCL all-to-all, or DeepEP's node-deduplicating one")
    p.add_argument("--fp8-params", action="store_true",
                   help="fp8 training keeps the weights in fp8 only (Megatron's --fp8-param-gather)")
    p.add_argument("--reshard-after-forward", choices=("yes", "no", "search"), default="yes",
                   help="ZeRO-3 plans free the gathered weights after the forward (FSDP's "
                        "default), keep them to the backward, or both are searched")
    p.add_argument("--shard-size", type=int, default=0, metavar="K",
                   help="hybrid sharding: shard the model states inside groups of K replicas")
    p.add_argument("--offload-optimizer", choices=("no", "yes", "search"), default="no",
                   help="optimizer state and step on the host (ZeRO-Offload)")
    p.add_argument("--offload-activations", default="0", metavar="SHARE|search",
                   help="share of stored activations kept in host memory, or 'search' "
                        "(0, 0.5, 1)")
    p.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v"))
    p.add_argument("--recompute", choices=("none", "selective", "full"))
    p.add_argument("--timeout", type=float, help="seconds the search may take")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the ranking as JSON")
    out.add_argument("--megatron-args", action="store_true",
                     help="print the Megatron-LM arguments of the best plan")
    p.add_argument("--explain", action="store_true", help="also say why the best plan wins")
    p.set_defaults(func=run_autoplan)
    return p


def _share(text: str) -> float:
    from .parallel import overlap_share

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    try:
        return overlap_share(v, "the value")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _memory_args(args: argparse.Namespace) -> dict:
    """autoplan's sharding and offloading keywords from the flags."""
    tri = {"yes": True, "no": False, "search": None}
    if args.offload_activations == "search":
        act = None
    else:
        try:
            act = float(args.offload_activations)
        except ValueError:
            raise ValueError("--offload-activations takes a share in [0, 1] or 'search', not "
                             f"{args.offload_activations!r}") from None
    return dict(reshard_after_forward=tri[args.reshard_after_forward], shard_size=args.shard_size,
                offload_optimizer=tri[args.offload_optimizer], offload_activations=act)


def run_autoplan(args) -> int:
    import hpgo

    if args.model:
        model = hpgo.transformer(args.model)
    elif args.hf_config:
        model = hpgo.transformer.from_hf_config(args.hf_config)
    else:
        model = hpgo.profile_model(args.profile, args.profile_batch)
    if os.path.isfile(args.cluster):
        cluster = hpgo.Cluster.load(args.cluster)
        if args.nodes:
            cluster = cluster.with_nodes(args.nodes)
    else:
        cluster = hpgo.Cluster.preset(args.cluster, nodes=args.nodes)
        if args.nodes is None and args.gpus and args.gpus > cluster.gpus:
            # a preset without --nodes: as many nodes as --gpus needs
            cluster = hpgo.Cluster.preset(args.cluster, nodes=-(-args.gpus // cluster.gpus))
    fixed = {k: getattr(args, k) for k in ("tp", "pp", "dp", "cp", "ep", "etp", "virtual_stages",
                                           "micro_batch", "zero", "schedule", "recompute",
                                           "ep_placement")}
    if sys.stderr.isatty() and not args.json:
        print("searching ...", end="\r", file=sys.stderr, flush=True)
    r = hpgo.autoplan(model, cluster, args.global_batch, seq=args.seq, gpus=args.gpus,
                      objective=args.objective, precision=args.precision, top=args.top,
                      timeout=args.timeout, overlap_moe_comm=args.overlap_moe_comm,
                      moe_dispatcher=args.moe_dispatcher, fp8_params=args.fp8_params,
                      **_memory_args(args), **fixed)
    if args.json:
        json.dump({"model": getattr(r.model, "name", ""), "cluster": cluster.name,
                   "gpus": cluster.gpus, "global_batch": r.global_batch,
                   "search_seconds": r.search_seconds, "stats": r.stats, "plans": r.to_dicts()},
                  sys.stdout, indent=1)
        print()
        return 0 if len(r) else 1
    if args.megatron_args:
        if not len(r):
            print(r.table(), file=sys.stderr)
            return 1
        print(r[0].plan.megatron_args(model if isinstance(model, hpgo.Transformer) else None,
                                      precision=args.precision if args.precision in
                                      ("bf16", "fp16", "fp8") else "bf16"))
        return 0
    print(r.table())
    if args.explain and len(r):
        print()
        print(r.explain())
    return 0 if len(r) else 1
