"""``hpgo autoplan``: the best plans for a model on a cluster, from the shell;
and the options every transformer command shares (model, cluster, memory
headroom, tokens and price), which ``hpgo simulate`` takes too.

    hpgo autoplan --model llama3-70b --cluster dgx-h100 --nodes 8 --global-batch 512 --seq 8192
    hpgo autoplan --model deepseek-v3 --cluster dgx-h100 --nodes 128 --global-batch 8192 --precision fp8
    hpgo autoplan --hf-config config.json --cluster cluster.json --global-batch 256 --json
    hpgo autoplan --model llama3-8b --gpu a100-40gb --nodes 4 --inter-node-gbps 200 --per-node ...
    hpgo autoplan --profile graph.txt --profile-batch 32 --cluster dapple-v100 --global-batch 256
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

__all__ = ["add_autoplan_subcommand", "run_autoplan", "add_model_options",
           "add_cluster_options", "add_run_options", "model_from_args", "cluster_from_args",
           "run_options"]


class UsageError(ValueError):
    """A user error the command line prints as one line (exit status 2)."""


# ---------------------------------------------------------------- shared options

# the memory-saving choices of RankedPlans.untried as this command's options
_UNTRIED_FLAGS = {"recompute='full'": "--recompute full", "zero=3": "--zero 3",
                  "offload_optimizer=True": "--offload-optimizer yes",
                  "offload_activations=1": "--offload-activations 1"}


def _table(r: Any) -> str:
    """The ranking's table, an empty one's advice in this command's options."""
    text = r.table()
    if not len(r):
        for arg, flag in _UNTRIED_FLAGS.items():
            text = text.replace(arg, flag)
    return text


def add_export_options(group: Any, what: str) -> None:
    """The export flags (--megatron-args, --torchtitan, --deepspeed) of
    ``what`` ("the best plan", "the plan") on an argparse group."""
    group.add_argument("--megatron-args", action="store_true",
                       help=f"print the Megatron-LM arguments of {what} (implies --framework "
                            "megatron)")
    group.add_argument("--torchtitan", metavar="FILE",
                       help=f"write {what} as a torchtitan configuration module FILE (implies "
                            "--framework torchtitan)")
    group.add_argument("--deepspeed", metavar="FILE",
                       help=f"write {what}'s DeepSpeed JSON to FILE ('-': print it; implies "
                            "--framework deepspeed)")


def export_framework(args: Any) -> str | None:
    """The framework --framework names, or the export flags imply."""
    framework = args.framework
    for flag, name in ((args.megatron_args, "megatron"), (args.torchtitan, "torchtitan"),
                       (args.deepspeed, "deepspeed")):
        if flag:
            if framework not in (None, name):
                raise ValueError(f"--framework {framework} does not go with the {name} export")
            framework = name
    return framework


def export_plan(plan: Any, model: Any, args: Any, what: str) -> None:
    """Print or write ``plan`` in the form the export flag names (the
    Megatron-LM arguments and '-' to stdout, files atomically)."""
    import hpgo

    prec = args.precision or "bf16"
    if args.megatron_args:
        print(plan.megatron_args(model if isinstance(model, hpgo.Transformer) else None,
                                 precision=prec if prec in ("bf16", "fp16", "fp8") else "bf16"))
        return
    if args.deepspeed and plan.zero >= 3 and not isinstance(model, hpgo.Transformer):
        raise UsageError(f"{what} ({plan.describe()}) is ZeRO-3, whose DeepSpeed buckets are "
                         "sized to one block of a transformer: use --model or --hf-config, or "
                         "fix --zero below 3")
    if args.torchtitan:
        stem = os.path.splitext(os.path.basename(args.torchtitan))[0]
        text = plan.torchtitan_config(model, precision=prec, name=stem)
        from . import _files
        _files.atomic_write(args.torchtitan, text)
        print(f"{plan.describe()}: torchtitan configuration in {args.torchtitan} (launch: "
              f"torchrun ... -m torchtitan.train --module {stem} --config {stem})")
    elif args.deepspeed == "-":
        print(plan.deepspeed_json(precision=prec, model=model), end="")
    else:
        plan.deepspeed_json(args.deepspeed, precision=prec, model=model)
        print(f"{plan.describe()}: DeepSpeed configuration in {args.deepspeed}")


def add_model_options(p: argparse.ArgumentParser, *, required: bool = True,
                      profile: bool = True) -> None:
    src = p.add_mutually_exclusive_group(required=required)
    src.add_argument("--model", help="a transformer preset: llama3-8b, llama3-70b, gpt3-175b, "
                                     "mixtral-8x7b, deepseek-v3, ... (hpgo.transformer.presets())")
    src.add_argument("--hf-config", metavar="PATH",
                     help="a Hugging Face config.json (give --seq unless its family documents "
                          "a pretraining length)")
    if profile:
        src.add_argument("--profile", metavar="GRAPH", help="a PipeDream graph.txt")
        p.add_argument("--profile-batch", type=float, metavar="N",
                       help="batch the profile was measured at (default: its profile.json's)")
    p.add_argument("--seq", type=int, metavar="TOKENS",
                   help="sequence length (default: the preset's, or the HF family's "
                        "pretraining length)")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp8", "fp32"),
                   help="training precision (default bf16; fp32 for profiles)")


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster (a preset or file, or built from --gpu)")
    g.add_argument("--cluster", metavar="PRESET|FILE",
                   help="a preset (dgx-h100, dgx-a100-80gb, dgx-a100-40gb, dgx-h200, dgx1-v100, "
                        "dapple-v100) or a cluster JSON file (docs/clusters.md; `hpgo cluster` "
                        "writes one)")
    g.add_argument("--nodes", type=int,
                   help="nodes (default: as many as simulate's plan or autoplan's --gpus needs, "
                        "else one)")
    g.add_argument("--gpu", metavar="TYPE",
                   help="build the cluster from a GPU type instead: " + ", ".join(_gpu_types()))
    g.add_argument("--gpus-per-node", type=int, metavar="N",
                   help="GPUs per node with --gpu (default: its DGX node's, 8)")
    g.add_argument("--inter-node-gbps", type=float, metavar="GBPS",
                   help="network between nodes, gigabits/s per GPU (one NIC per GPU, as DGX); "
                        "with --per-node, per node")
    g.add_argument("--per-node", action="store_true",
                   help="--inter-node-gbps is the whole node's, shared by its GPUs")
    g.add_argument("--power-limit", type=float, metavar="W",
                   help="the GPUs' board power limit in watts, below their own (Hopper SXM: "
                        "compute-bound kernels run at the clock it leaves; 0: none)")


def add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory, time and money")
    g.add_argument("--memory-headroom", type=float, metavar="FRACTION",
                   help="fraction of each GPU's memory a plan must leave free to fit "
                        "(default 0.033: the caching allocator's reserve measured on an H100 with "
                        "expandable segments; 0.057 for the stock allocator; 0: none)")
    g.add_argument("--tokens", type=float, metavar="N",
                   help="tokens to train on (e.g. 1e12): adds days and GPU-hours")
    g.add_argument("--price", type=float, metavar="DOLLARS",
                   help="price per GPU-hour: adds the cost of training on --tokens")


def _gpu_types() -> list[str]:
    from .cluster import GPU_TYPES

    return list(GPU_TYPES)


def _positive(name: str, v: Any) -> None:
    if v is not None and v < 1:
        raise UsageError(f"{name} must be >= 1, got {v}")


def model_from_args(args: Any) -> Any:
    import hpgo

    _positive("--seq", args.seq)
    if args.model:
        m = hpgo.transformer(args.model)
        return m.with_(seq=args.seq) if args.seq else m
    if args.hf_config:
        if not os.path.exists(args.hf_config):
            raise FileNotFoundError(2, "no such config file", args.hf_config)
        from .workmodel import from_hf_config

        return from_hf_config(args.hf_config, seq=args.seq)
    if getattr(args, "profile", None):
        if args.seq:
            raise UsageError("--seq applies to transformers (--model, --hf-config)")
        return hpgo.profile_model(args.profile, args.profile_batch)
    raise UsageError("give --model, --hf-config or --profile")


def cluster_from_args(args: Any, gpus: int | None = None) -> Any:
    """The cluster the options name; ``gpus`` (else autoplan's --gpus) sizes a
    preset or --gpu cluster given no --nodes."""
    c = _cluster_from_args(args, gpus if gpus is not None else getattr(args, "gpus", None))
    watts = getattr(args, "power_limit", None)
    return c if watts is None else c.with_power_limit(watts)


def _cluster_from_args(args: Any, gpus: int | None) -> Any:
    import hpgo
    from .cluster import resolve

    _positive("--nodes", args.nodes)
    _positive("--gpus-per-node", args.gpus_per_node)
    if args.gpu:
        if args.cluster:
            raise UsageError("give --cluster or --gpu, not both")
        ib = args.inter_node_gbps
        if ib is not None and not (math.isfinite(ib) and ib > 0):
            raise UsageError(f"--inter-node-gbps must be > 0, got {ib}")
        per = args.gpus_per_node or hpgo.Cluster.build(args.gpu).gpus_per_node
        nodes = args.nodes or (-(-gpus // per) if gpus else 1)
        return hpgo.Cluster.build(args.gpu, nodes=nodes, gpus_per_node=args.gpus_per_node,
                                  inter_node_gbps=ib, per_node=args.per_node)
    if args.gpus_per_node or args.inter_node_gbps or args.per_node:
        raise UsageError("--gpus-per-node, --inter-node-gbps and --per-node build a cluster "
                         "with --gpu TYPE (or edit a cluster file)")
    if not args.cluster:
        raise UsageError("give --cluster PRESET|FILE or --gpu TYPE")
    c = resolve(args.cluster, args.nodes)
    if args.nodes is None and gpus and gpus > c.gpus and len(c.levels) > 1:
        # no --nodes: as many nodes as --gpus needs
        c = c.with_nodes(-(-gpus // c.gpus_per_node))
    return c


def run_options(args: Any) -> dict:
    """headroom=, tokens=, price= from the command line, checked under the
    options' own names."""
    from .parallel import _positive_real, headroom_fraction

    headroom_fraction(args.memory_headroom, "--memory-headroom")
    _positive_real("--tokens", args.tokens)
    _positive_real("--price", args.price)
    if getattr(args, "max_days", None) is not None:
        _positive_real("--max-days", args.max_days)
        if args.tokens is None:
            raise UsageError("--max-days needs --tokens (the tokens to train on)")
    return {"headroom": args.memory_headroom, "tokens": args.tokens, "price": args.price}


# ---------------------------------------------------------------- autoplan


def add_autoplan_subcommand(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "autoplan", help="the best parallel plans that fit (tp, cp, pp, dp, ep, schedule, "
                         "recompute, ZeRO)",
        description="Search data, tensor, context, pipeline and expert parallelism, virtual "
                    "stages, micro-batch, schedule, recomputation, sequence parallelism and ZeRO "
                    "for the fastest plans that fit in memory, and print them ranked.",
        epilog="examples: hpgo autoplan --model llama3-70b --cluster dgx-h100 --nodes 8 "
               "--global-batch 512;  hpgo autoplan --model llama3-8b --gpu a100-40gb --nodes 4 "
               "--inter-node-gbps 200 --per-node --global-batch 256 --tokens 1e12 --price 2.5 "
               "--objective cost --max-days 60")
    add_model_options(p)
    add_cluster_options(p)
    batch = p.add_mutually_exclusive_group(required=True)
    batch.add_argument("--global-batch", type=int, metavar="N",
                       help="sequences (samples) per iteration; dp must divide it")
    batch.add_argument("--max-global-batch", type=int, metavar="N",
                       help="at most N sequences per iteration: each plan runs the largest "
                            "multiple of its dp not above N (as Calculon), ranked by time per "
                            "sample; the table shows each plan's batch")
    p.add_argument("--gpus", type=int, help="GPUs to use (default: the whole cluster)")
    p.add_argument("--objective", choices=("time", "cost"), default="time",
                   help="rank by iteration time (default) or by GPU-seconds per iteration over "
                        "--gpus, --gpus/2, ... (fewer GPUs when cheaper)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="how many plans to print (default 10)")
    add_run_options(p)
    p.add_argument("--max-days", type=float, metavar="DAYS",
                   help="keep plans that train on --tokens within DAYS (with --objective cost: "
                        "the cheapest that make the deadline)")
    p.add_argument("--pareto", action="store_true",
                   help="also print the time-cost Pareto front (exact over GPU counts with "
                        "--max-days)")
    fixed = p.add_argument_group("fixed choices (the rest is searched)")
    for name, what in (("tp", "tensor-parallel size"), ("pp", "pipeline stages"),
                       ("dp", "data-parallel size"), ("cp", "context-parallel size"),
                       ("ep", "expert-parallel size"), ("etp", "expert tensor-parallel size"),
                       ("virtual-stages", "virtual stages per device (interleaved, zb-v)"),
                       ("micro-batch", "micro-batch size"), ("zero", "ZeRO stage, 0-3")):
        fixed.add_argument(f"--{name}", type=int, metavar="N", help=f"fix the {what}")
    fixed.add_argument("--ep-placement", choices=("inner", "outer"),
                       help="fix where the expert-parallel group sits")
    fixed.add_argument("--schedule",
                       choices=("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v"),
                       help="fix the pipeline schedule")
    fixed.add_argument("--recompute", choices=("none", "selective", "full"),
                       help="fix the activation recomputation")
    moe = p.add_argument_group("mixture of experts and fp8")
    moe.add_argument("--overlap-moe-comm", nargs="?", const=True, default=False, type=_share,
                     metavar="SHARE",
                     help="price MoE all-to-alls as overlapped with another micro-batch's "
                          "compute (crediting Megatron's measured share of the ideal overlap, "
                          "0.65, or SHARE in (0, 1])")
    moe.add_argument("--moe-dispatcher", choices=("alltoall", "deepep"), default="alltoall",
                     help="MoE token dispatcher: NCCL all-to-all, or DeepEP's node-deduplicating "
                          "one")
    moe.add_argument("--fp8-params", action="store_true",
                     help="fp8 training keeps the weights in fp8 only (Megatron's "
                          "--fp8-param-gather)")
    shard = p.add_argument_group("sharding and offloading")
    shard.add_argument("--reshard-after-forward", choices=("yes", "no", "search"), default="yes",
                       help="ZeRO-3 plans free the gathered weights after the forward (FSDP's "
                            "default), keep them to the backward, or both are searched")
    shard.add_argument("--shard-size", type=int, default=0, metavar="K",
                       help="hybrid sharding: shard the model states inside groups of K replicas")
    shard.add_argument("--offload-optimizer", choices=("no", "yes", "search"), default="no",
                       help="optimizer state and step on the host (ZeRO-Offload)")
    shard.add_argument("--offload-activations", default="0", metavar="SHARE|search",
                       help="share of stored activations kept in host memory, or 'search' "
                            "(0, 0.5, 1)")
    from .parallel import ATTENTIONS, CROSS_ENTROPIES, FP8_RECIPES
    stack = p.add_argument_group("training stack (every plan priced on it)")
    stack.add_argument("--kernels", choices=("te", "compile", "eager"), default="te",
                       help="the kernels: Megatron-Core + Transformer Engine (default), "
                            "torch.compile, eager PyTorch")
    stack.add_argument("--tp-overlap", choices=("none", "te", "async"), default="none",
                       help="tensor-parallel overlap: Megatron's --tp-comm-overlap (te), "
                            "PyTorch's async TP (async, with --kernels compile)")
    stack.add_argument("--cp-comm", choices=("p2p", "all_gather", "a2a", "torch_sdpa"),
                       default="p2p",
                       help="context-parallel K/V exchange: ring, all-gather, Ulysses all-to-all, "
                            "PyTorch's SDPA context parallelism")
    stack.add_argument("--optimizer", choices=("megatron", "megatron_bf16_grads", "apex_bf16",
                                               "deepspeed_bf16"), default="megatron",
                       help="the optimizer's gradient path: Megatron's fp32 gradients (default), "
                            "its 16-bit gradients (--grad-reduce-in-bf16; ZeRO 0/1), NeMo's Apex "
                            "optimizer (ZeRO 1), DeepSpeed's BF16_Optimizer")
    stack.add_argument("--fp8-recipe", choices=tuple(FP8_RECIPES), default="tensorwise",
                       help="torchao's float8 recipe under --precision fp8 with --kernels compile "
                            "or eager: tensorwise (default), rowwise or rowwise_with_gw_hp "
                            "(torchtitan 0.3's two; --framework torchtitan runs rowwise)")
    stack.add_argument("--cross-entropy", choices=tuple(CROSS_ENTROPIES), default="auto",
                       help="the loss every plan is priced with: the kernel set's (auto), "
                            "Megatron's unfused fp32 loss (with --kernels te; --framework "
                            "megatron prices it unless given) or a fused loss kernel (with "
                            "--kernels compile or eager)")
    stack.add_argument("--attention", choices=tuple(ATTENTIONS), default="auto",
                       help="the fused attention kernel every plan is priced with: the fastest "
                            "with a published table (auto) or FlashAttention-2 (--framework "
                            "deepspeed prices it unless given)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="seconds the search may take")
    p.add_argument("--framework", choices=("megatron", "torchtitan", "deepspeed"),
                   help="rank only plans this framework runs (docs/exports.md)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the ranking as JSON")
    add_export_options(out, "the best plan")
    p.add_argument("--explain", action="store_true", help="also say why the best plan wins")
    p.add_argument("-o", "--output", metavar="PLAN.json",
                   help="save the best plan (hpgo simulate --plan reads it)")
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


def _check_output(path: str | None, what: str) -> None:
    """Refuse an output path that cannot be written before the work starts:
    a folder, or a file in a folder that is not there."""
    if not path:
        return
    if os.path.isdir(path):
        raise UsageError(f"{what} {path!r} is a folder: give a file name")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise UsageError(f"{what} {path!r}: no such folder {d!r}")


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

    _check_output(args.output, "-o")
    _positive("--gpus", args.gpus)
    _positive("--top", args.top)
    _positive("--global-batch", args.global_batch)
    _positive("--max-global-batch", args.max_global_batch)
    model = model_from_args(args)
    cluster = cluster_from_args(args)
    fixed = {k: getattr(args, k) for k in ("tp", "pp", "dp", "cp", "ep", "etp", "virtual_stages",
                                           "micro_batch", "zero", "schedule", "recompute",
                                           "ep_placement")}
    for k in ("tp", "pp", "dp", "cp", "ep", "etp", "virtual_stages", "micro_batch"):
        _positive("--" + k.replace("_", "-"), fixed[k])
    if fixed["zero"] is not None and not 0 <= fixed["zero"] <= 3:
        raise UsageError(f"--zero must be 0, 1, 2 or 3, got {fixed['zero']}")
    opts = run_options(args)
    framework = export_framework(args)
    if sys.stderr.isatty() and not args.json:
        print("searching ...", end="\r", file=sys.stderr, flush=True)
    r = hpgo.autoplan(model, cluster, args.global_batch or args.max_global_batch, gpus=args.gpus,
                      max_batch=args.max_global_batch is not None,
                      objective=args.objective, precision=args.precision, top=args.top,
                      timeout=args.timeout, overlap_moe_comm=args.overlap_moe_comm,
                      moe_dispatcher=args.moe_dispatcher, fp8_params=args.fp8_params,
                      max_days=args.max_days, framework=framework, **_memory_args(args), **opts,
                      kernels=args.kernels, tp_overlap=args.tp_overlap, cp_comm=args.cp_comm,
                      optimizer_impl=args.optimizer, fp8_recipe=args.fp8_recipe,
                      cross_entropy=args.cross_entropy, attention=args.attention, **fixed)
    if args.output and len(r):
        r[0].plan.save(args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    if args.json:
        json.dump({"model": getattr(r.model, "name", ""), "cluster": cluster.name,
                   "framework": r.framework,
                   "gpus": cluster.gpus, "global_batch": r.global_batch,
                   "seq": getattr(r.model, "seq", None), "precision": r.precision,
                   "memory_headroom": r.headroom, "tokens": r.tokens, "price": r.price,
                   "max_days": r.max_days, "setup": r.setup(),
                   "search_seconds": r.search_seconds, "stats": r.stats, "plans": r.to_dicts()},
                  sys.stdout, indent=1)
        print()
        return 0 if len(r) else 1
    if args.megatron_args or args.torchtitan or args.deepspeed:
        if not len(r):
            print(_table(r), file=sys.stderr)
            return 1
        export_plan(r[0].plan, model, args, "the best plan")
        return 0
    print(_table(r))
    if args.pareto and (len(r) or r.front):
        print()
        print(r.pareto_table())
    if args.explain and len(r):
        print()
        print(r.explain())
    return 0 if len(r) else 1
