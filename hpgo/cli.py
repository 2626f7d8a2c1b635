"""The ``hpgo`` command line.

    hpgo plan PROFILE --pbs 1 --gbs 128 --seps 8,16 [--json] [--candidates] [-o plan.json]
    hpgo plan --example transformer36 --gbs 128 --seps 8,16    (a profile shipped with hpgo)
    hpgo sweep PROFILE --pbs 1 --gbs 32:1024 --seps 8,16 [--csv out.csv] [--plot out.png]
    hpgo simulate PROFILE --pbs 1 --gbs 128 --seps 8,16 [--schedule 1f1b] [--trace out.json]
    hpgo simulate --plan plan.json                              (the profile the plan names)
    hpgo simulate --mlp --batch-size 4096 --width 4096 --layers 64 --pp 8 --microbatches 16
    hpgo profile zoo|torch ...

Each subcommand registers itself through an ``add_<name>_subcommand``
function whose parser sets ``func=run(args) -> int``.  Bad arguments and
failures print one line on stderr and exit with status 2, never a
traceback.  ``--pbs`` defaults to the batch size a profile records in the
``profile.json`` beside its ``graph.txt``; a different ``--pbs`` is planned
as asked, with a warning.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Callable, List, Optional, Sequence, TextIO

from . import _files
from .autoplan_cli import add_autoplan_subcommand
from .profile_cli import add_profile_subcommand

__all__ = ["build_parser", "main", "parse_ints", "parse_gbs"]


class CliError(Exception):
    """A user error reported as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and no abbreviated
    options: ``--gpus`` must not silently become ``--gpus-per-node``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# ---------------------------------------------------------------- argument types


def parse_ints(text: str, what: str = "value") -> List[int]:
    """"8,16" -> [8, 16]; every item a positive int."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise CliError(f"empty item in {what} {text!r}")
        try:
            v = int(item)
        except ValueError:
            raise CliError(f"{what} {text!r}: {item!r} is not an integer") from None
        if v < 1:
            raise CliError(f"{what} {text!r}: {v} must be >= 1")
        out.append(v)
    return out


def parse_gbs(text: str) -> List[int]:
    """Global batch sizes: a comma list whose items are N, A:B (A, 2A, 4A, ...
    up to B) or A:B:S (A, A+S, ... up to B).  Duplicates are dropped, the
    order kept."""
    out: List[int] = []
    seen = set()  # linear de-duplication: 1:100000:1 has 100,000 values
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise CliError(f"empty item in --gbs {text!r}")
        parts = item.split(":")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise CliError(f"--gbs item {item!r}: expected N, A:B or A:B:STEP with integers") from None
        if len(nums) > 3:
            raise CliError(f"--gbs item {item!r}: expected N, A:B or A:B:STEP")
        if any(n < 1 for n in nums):
            raise CliError(f"--gbs item {item!r}: values must be >= 1")
        if len(nums) == 1:
            vals = nums
        else:
            a, b = nums[0], nums[1]
            if b < a:
                raise CliError(f"--gbs item {item!r}: end {b} is below start {a}")
            vals = []
            v = a
            while v <= b:
                vals.append(v)
                v = v * 2 if len(nums) == 2 else v + nums[2]
                if len(vals) > 100000:
                    raise CliError(f"--gbs item {item!r} gives more than 100000 values")
        for v in vals:
            if v not in seen:
                seen.add(v)
                out.append(v)
    return out


def _seps(text: str) -> List[int]:
    s = parse_ints(text, "--seps")
    if any(b <= a for a, b in zip(s, s[1:])):
        raise CliError(f"--seps {text!r} must increase (cumulative GPU counts per machine, e.g. 8,16)")
    return s


def _preset_hint(name: str) -> str:
    """A parenthesised hint naming --model when a bare word is a transformer
    preset's name; else the empty string."""
    from .workmodel import _presets

    if name in _presets():
        return (f" ({name!r} is a model preset: hpgo autoplan --model {name} --cluster ... "
                f"plans it, hpgo simulate --model {name} --cluster ... simulates a plan of it)")
    return ""


def _profile(path: str) -> str:
    if not os.path.exists(path):
        raise CliError(f"no such profile {path!r}{_preset_hint(path)}")
    if os.path.isdir(path):
        g = os.path.join(path, "graph.txt")
        if not os.path.isfile(g):
            raise CliError(f"{path!r} is a folder without graph.txt")
        return g
    return path


def _recorded_pbs(path: str) -> Optional[int]:
    """The batch size in the profile.json beside ``path`` (None: no such
    file, or it records none)."""
    j = os.path.join(os.path.dirname(os.path.abspath(path)), "profile.json")
    try:
        meta = _files.load_json(j, "profile.json", limit=64 << 20).get("meta", {})
    except (OSError, ValueError, AttributeError):
        return None
    bs = meta.get("batch_size") if isinstance(meta, dict) else None
    return bs if isinstance(bs, int) and not isinstance(bs, bool) and bs >= 1 else None


def _resolve_profile(args: Any, err: Optional[TextIO] = None) -> str:
    """The graph.txt of ``PROFILE`` or ``--example NAME``; fills ``args.pbs``
    from its profile.json when not given, warns when a given one differs."""
    example = getattr(args, "example", None)
    if example and args.profile:
        raise CliError("give a profile or --example, not both")
    if example:
        from . import examples

        path = str(examples.path(example))
    elif args.profile:
        path = _profile(args.profile)
    else:
        raise CliError("give a profile (a graph.txt or its folder) or --example NAME")
    rec = _recorded_pbs(path)
    if args.pbs is None:
        if rec is None:
            raise CliError("--pbs is needed: the profile has no profile.json recording its batch size")
        args.pbs = rec
    _positive("--pbs", args.pbs)
    if rec is not None and args.pbs != rec:
        print(f"hpgo {args.command}: warning: --pbs {args.pbs} differs from the batch size {rec} "
              f"recorded in {os.path.join(os.path.dirname(path), 'profile.json')}; the profile's "
              f"times are taken as measured at {args.pbs}", file=err or sys.stderr)
    return path


def _add_profile_args(p: argparse.ArgumentParser, *, optional_help: str = "") -> None:
    p.add_argument("profile", nargs="?",
                   help="graph.txt profile (or a folder holding one)" + optional_help)
    p.add_argument("--example", metavar="NAME",
                   help="a profile shipped with hpgo instead of PROFILE, e.g. transformer36, "
                        "resnet50 (hpgo.examples.names() lists them)")


def _check_outputs(*outputs: Any) -> None:
    """Refuse, before any work, an output that cannot be written: a folder,
    or a file in a folder that is not there."""
    from .autoplan_cli import _check_output

    for path, what in outputs:
        _check_output(path, what)


def _positive(name: str, v: Optional[int]) -> None:
    if v is not None and v < 1:
        raise CliError(f"{name} must be >= 1, got {v}")


def _add_model_args(p: argparse.ArgumentParser, *, gbs_help: str) -> None:
    p.add_argument("--pbs", type=int, default=None,
                   help="batch size the profile was measured with (default: the one its "
                        "profile.json records)")
    p.add_argument("--gbs", required=True, help=gbs_help)
    p.add_argument("--mbs", type=int, default=None, metavar="N",
                   help="smallest micro-batch size (HPGO's min_micro_batch_size, default 1)")
    p.add_argument("--optimizer-memory-scaling", type=int, default=None, metavar="N",
                   help="optimizer state as a multiple of the weights (default 1)")
    p.add_argument("--peak-activation-per-batch", type=float, default=None, metavar="BYTES",
                   help="peak activation bytes per sample (default: from the profile)")
    p.add_argument("--threads", type=int, default=0,
                   help="planner threads (0 = HPGO_NUM_THREADS or all cores)")


def _model_kwargs(args: Any) -> dict:
    if args.pbs is None:
        raise CliError("--pbs is needed")
    _positive("--pbs", args.pbs)
    _positive("--mbs", args.mbs)
    _positive("--optimizer-memory-scaling", args.optimizer_memory_scaling)
    if args.threads < 0:
        raise CliError(f"--threads must be >= 0, got {args.threads}")
    pab = args.peak_activation_per_batch
    if pab is not None and not (math.isfinite(pab) and pab >= 0):
        raise CliError(f"--peak-activation-per-batch must be a finite number >= 0, got {pab}")
    return dict(min_micro_batch_size=args.mbs, optimizer_memory_scaling=args.optimizer_memory_scaling,
                peak_activation_per_batch=pab)


def _one_gbs(text: str) -> int:
    vals = parse_gbs(text)
    if len(vals) != 1:
        raise CliError(f"--gbs must be one global batch size here, got {text!r}")
    return vals[0]


def _agg_plt():
    try:
        import matplotlib
    except ImportError:
        raise CliError("plots need matplotlib: pip install -e '.[plot]' from the hpgo "
                       "clone") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _write_outputs(r: Any, trace: str | None, *figures: tuple[str, str | None]) -> None:
    """Write a simulation's Chrome trace and its figures (hpgo.plot functions
    by name, each with its path; None: not asked for)."""
    if trace:
        r.to_chrome_trace(trace)
        print(f"wrote {trace}", file=sys.stderr)
    for fn, path in figures:
        if path:
            from . import plot

            _agg_plt()
            _save_fig(getattr(plot, fn)(r), path)
            print(f"wrote {path}", file=sys.stderr)


def _save_fig(fig: Any, path: str) -> None:
    from . import _files

    plt = _agg_plt()
    try:
        # the format follows the suffix, so the temporary name keeps it;
        # a name without one is written as PNG
        suffix = bool(os.path.splitext(path)[1])
        with _files.atomic_path(path, keep_suffix=suffix) as tmp:
            fig.savefig(tmp, dpi=120, **({} if suffix else {"format": "png"}))
    finally:
        plt.close(fig)


# ---------------------------------------------------------------- plan


def add_plan_subcommand(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "plan", help="plan a profile (HPGO's best hybrid plan) and print it as a table",
        description="Plan hybrid data/pipeline parallel training of a profile on a GPU layout "
                    "and print the best plan (the one HPGO's py_orchestrate returns).",
        epilog="examples: hpgo plan profiles/transformer36-v100/graph.txt --pbs 1 --gbs 128 "
               "--seps 8,16;  hpgo plan --example transformer36 --gbs 128 --seps 8,16")
    _add_profile_args(p)
    _add_model_args(p, gbs_help="global batch size")
    p.add_argument("--seps", required=True,
                   help="GPU layout: cumulative GPU counts per machine, e.g. 8,16 (or 8 16) = "
                        "two machines of 8")
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    p.add_argument("--hpgo", action="store_true", help="print HPGO's tuple (py_orchestrate's result)")
    p.add_argument("--candidates", action="store_true", help="also list every candidate plan")
    p.add_argument("-o", "--output", metavar="FILE", help="save the plan as JSON (hpgo.plan.Plan.load reads it)")
    p.add_argument("--plot", metavar="PNG", help="draw the plan diagram (needs matplotlib)")
    p.add_argument("--dot", metavar="FILE", help="layer graph coloured by stage: .dot text, or "
                                                  ".svg/.png/.pdf when graphviz is installed")
    p.set_defaults(func=run_plan)
    return p


def run_plan(args: Any, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    from .plan import candidate_plans

    _check_outputs((args.output, "-o"), (args.plot, "--plot"), (args.dot, "--dot"))
    path = _resolve_profile(args)
    kw = _model_kwargs(args)
    gbs = _one_gbs(args.gbs)
    seps = _seps(args.seps)
    plans = candidate_plans(path, args.pbs, gbs, seps, threads=args.threads, **kw)
    if not plans:
        raise CliError(f"no candidate plan for gbs {gbs} on seps {args.seps}")
    best = plans.best()
    if args.json:
        out.write(best.to_json() + "\n")
    elif args.hpgo:
        out.write(repr(best.to_hpgo()) + "\n")
    else:
        from .plan import _model

        # each plan says whether it fits: its peak memory on the model it was made for
        model = _model(path, args.pbs, gbs, **kw)[0]
        out.write(best.table(model) + "\n")
        if args.candidates:
            out.write("\ncandidates (HPGO's order; the best is the highest speedup, the last on ties;"
                      "\nGiB, fits: peak memory on a GPU under 1F1B):\n")
            out.write(plans.table(model) + "\n")
    if args.output:
        # the saved plan names its profile by absolute path: `hpgo simulate --plan` finds it
        # from any directory
        from dataclasses import replace

        replace(best, profile=os.path.abspath(path)).save(args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    if args.plot:
        from . import plot

        _agg_plt()
        _save_fig(plot.plan_diagram(best), args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.dot:
        from . import dot

        written, rendered = dot.render(path, args.dot, best)
        why = dot.missing_renderer()
        print(f"wrote {written}" + ("" if rendered or str(written) == args.dot or why is None
                                    else f" (DOT text: {why})"), file=sys.stderr)
    return 0


# ---------------------------------------------------------------- sweep


def add_sweep_subcommand(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sweep", help="DAPPLE's batch-size study: DP, DP+P3, DP+overlap and best hybrid per gbs",
        description="Sweep global batch sizes (and GPU layouts): HPGO's three data-parallel "
                    "estimates and the best hybrid plan for each case.",
        epilog="--gbs takes a comma list of N, A:B (A, 2A, 4A, ... <= B) or A:B:STEP items, "
               "e.g. 32:1024 or 16,24,32:256:32.  "
               "example: hpgo sweep profiles/xlnet-36-v100/graph.txt --pbs 1 --gbs 32:1024 "
               "--seps 8,16 --csv xlnet.csv")
    _add_profile_args(p)
    _add_model_args(p, gbs_help="global batch sizes: 32,64,128 or 32:1024 (doubling) or 32:256:32")
    p.add_argument("--seps", required=True, action="append",
                   help="GPU layout, e.g. 8,16 (or 8 16); repeat for several layouts: "
                        "--seps 8,16 --seps 8")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--plot", metavar="PNG", help="draw speedup against gbs (needs matplotlib)")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show a progress bar (default: only when stderr is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="never show the progress bar")
    p.set_defaults(func=run_sweep)
    return p


def run_sweep_chunked(profile: Any, pbs: int, gbs: Sequence[int], layouts: Sequence[Sequence[int]],
                      *, chunk: int = 1, callback: Optional[Callable[[int, int], None]] = None,
                      **kw: Any):
    """:func:`hpgo.sweep` in chunks of ``chunk`` batch sizes, calling
    ``callback(done, total)`` after each; the rows equal one big sweep."""
    from . import _core
    from .sweep import SweepResult, sweep

    if isinstance(profile, _core.Model):
        model = profile
    else:
        model = _core.model_from_torch_graph(os.fspath(profile), pbs, pbs)
    res = SweepResult()
    total = len(gbs)
    for i in range(0, total, chunk):
        part = list(gbs[i:i + chunk])
        res.extend(sweep(model, pbs, part, [list(s) for s in layouts], **kw))
        if callback is not None:
            callback(min(total, i + chunk), total)
    return res


def sweep_table(rows: Sequence[Any]) -> str:
    """The sweep rows as a readable text table."""
    from .sweep import SweepResult

    return SweepResult(rows).table()


def run_sweep(args: Any, out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    _check_outputs((args.csv, "--csv"), (args.plot, "--plot"))
    path = _resolve_profile(args, err)
    kw = _model_kwargs(args)
    gbs = parse_gbs(args.gbs)
    layouts = [_seps(s) for s in args.seps]
    show = args.progress if args.progress is not None else err.isatty()
    kw = {k: v for k, v in kw.items() if v is not None}
    if show:
        from .progress import Progress

        bar = Progress(len(gbs), stream=err, unit="global batch sizes", min_interval=0.0)
        bar.update(0)
        # chunks of about 1/20 of the work, at least one gbs each
        chunk = max(1, math.ceil(len(gbs) / 20))
        try:
            res = run_sweep_chunked(path, args.pbs, gbs, layouts, chunk=chunk, threads=args.threads,
                                    callback=lambda d, t: bar.update(d), **kw)
        finally:
            bar.close()
    else:
        res = run_sweep_chunked(path, args.pbs, gbs, layouts, chunk=max(1, len(gbs)),
                                threads=args.threads, **kw)
    if args.json:
        out.write(json.dumps(res.to_dicts(), indent=2) + "\n")
    else:
        out.write(sweep_table(res) + "\n")
    if args.csv:
        res.to_csv(args.csv)
        print(f"wrote {args.csv}", file=err)
    if args.plot:
        from . import plot

        _agg_plt()
        name = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        _save_fig(plot.speedup_vs_gbs(res, title=f"{name} (pbs {args.pbs}): speedup against "
                                                 "global batch size"), args.plot)
        print(f"wrote {args.plot}", file=err)
    return 0


# ---------------------------------------------------------------- simulate


def add_simulate_subcommand(sub: Any) -> argparse.ArgumentParser:
    from .autoplan_cli import add_cluster_options, add_run_options

    p = sub.add_parser(
        "simulate", help="simulate one training step of any plan (or HPGO's plan of a profile, "
                         "or DistIR's MLP)",
        description="Simulate one training step of a plan you give (--model or --hf-config, "
                    "--cluster or --gpu, and --tp/--pp/--dp/... or --plan PLAN.json from "
                    "hpgo autoplan -o), and print the step time, tokens/s, MFU, memory per "
                    "stage and whether it fits; or HPGO's best plan of a profile (PROFILE "
                    "--gbs --seps); or DistIR's D/H/P-parallel MLP (--mlp).",
        epilog="examples: hpgo simulate --model llama3-70b --cluster dgx-h100 --nodes 8 --tp 8 "
               "--pp 4 --dp 2 --global-batch 512 --schedule interleaved-1f1b --vp 5;  "
               "hpgo simulate profiles/transformer36-v100/graph.txt --pbs 1 --gbs 128 "
               "--seps 8,16 --trace trace.json;  hpgo simulate --mlp --batch-size 4096 "
               "--width 4096 --layers 64 --pp 8 --microbatches 16 --trace mlp.json")
    _add_profile_args(p, optional_help="; with --plan, default: the one the plan names")
    t = p.add_argument_group("a plan of a transformer (--model or --hf-config)")
    t.add_argument("--model", help="a transformer preset: llama3-8b, llama3-70b, gpt3-175b, "
                                   "mixtral-8x7b, ... (hpgo.transformer.presets())")
    t.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json")
    t.add_argument("--seq", type=int, metavar="TOKENS", help="sequence length")
    t.add_argument("--precision", choices=("bf16", "fp16", "fp8", "fp32"),
                   help="training precision (default bf16)")
    t.add_argument("--cp", type=int, metavar="N", help="context-parallel size (default 1)")
    t.add_argument("--ep", type=int, metavar="N", help="expert-parallel size (default 1)")
    t.add_argument("--vp", "--virtual-stages", dest="vp", type=int, metavar="N",
                   help="virtual stages per device (interleaved-1f1b, zb-v; default 1)")
    t.add_argument("--micro-batch", type=int, metavar="N", help="micro-batch size (default 1)")
    t.add_argument("--global-batch", type=int, metavar="N", help="sequences per iteration")
    t.add_argument("--recompute", choices=("none", "selective", "full", "selective-op"),
                   help="activation recomputation (default none; selective-op: torchtitan's "
                        "op-level checkpointing)")
    t.add_argument("--zero", type=int, metavar="STAGE", help="ZeRO stage 0-3 (default 0)")
    t.add_argument("--shard-size", type=int, metavar="K",
                   help="shard the ZeRO states in groups of K replicas, replicated across "
                        "the groups (hybrid sharding; default: over all of dp x cp)")
    t.add_argument("--reshard-after-forward", choices=("yes", "no"),
                   help="ZeRO 3: free the gathered weights after the forward (yes, the "
                        "default) or keep them to the backward")
    t.add_argument("--sequence-parallel", action="store_true",
                   help="sequence parallelism (with tp > 1)")
    from .parallel import (ATTENTIONS, CP_COMMS, CROSS_ENTROPIES, FP8_RECIPES, KERNEL_SETS,
                           OPTIMIZER_IMPLS, TP_OVERLAPS)
    k = p.add_argument_group("the training stack of a --model plan (docs/training-model.md, "
                             "\"Training stacks\"; with --plan, each replaces the plan's)")
    k.add_argument("--kernels", choices=tuple(KERNEL_SETS),
                   help="the kernels a layer launches: Megatron-Core + Transformer Engine "
                        "(default), torch.compile, torchtitan's compiled blocks of 2024 / 2025, "
                        "eager PyTorch, eager with torchtitan's 2024 RMSNorm")
    k.add_argument("--tp-overlap", choices=tuple(TP_OVERLAPS),
                   help="tensor-parallel overlap: Megatron's --tp-comm-overlap (te), PyTorch's "
                        "async TP (async, with a torch.compile kernel set); both need "
                        "--sequence-parallel")
    k.add_argument("--cp-comm", choices=tuple(CP_COMMS),
                   help="context-parallel K/V exchange: ring (default), all-gather, Ulysses "
                        "all-to-all, PyTorch's SDPA context parallelism")
    k.add_argument("--attention", choices=tuple(ATTENTIONS),
                   help="fused attention: the GPU's default (cuDNN on Hopper) or "
                        "FlashAttention-2")
    k.add_argument("--optimizer", choices=tuple(OPTIMIZER_IMPLS),
                   help="the optimizer's gradient path: Megatron's fp32 gradients (default), its "
                        "16-bit gradients (ZeRO 0/1), NeMo's Apex optimizer (ZeRO 1), "
                        "DeepSpeed's BF16_Optimizer (ZeRO 1)")
    k.add_argument("--cross-entropy", choices=tuple(CROSS_ENTROPIES),
                   help="the loss: the kernel set's (default), Megatron's unfused fp32 loss "
                        "(with --kernels te) or a fused loss kernel (with --kernels compile or "
                        "eager: flash-attn's, as llm-foundry runs it)")
    k.add_argument("--fp8-recipe", choices=tuple(FP8_RECIPES),
                   help="torchao's float8 recipe under --precision fp8 with a PyTorch kernel "
                        "set: tensorwise (default), rowwise or rowwise_with_gw_hp (torchtitan "
                        "0.3's two)")
    from .frameworks import FRAMEWORKS
    k.add_argument("--framework", choices=tuple(FRAMEWORKS),
                   help="the framework that runs the plan: refuse a plan it does not run "
                        "(naming its rule) and price the plan on its defaults where the flags "
                        "leave them (docs/exports.md)")
    add_cluster_options(p)
    add_run_options(p)
    p.add_argument("--pbs", type=int, help="batch size the profile was measured with (default: "
                                           "the plan's, or the one its profile.json records)")
    p.add_argument("--gbs", help="global batch size (HPGO profile plans)")
    p.add_argument("--seps", help="GPU layout, e.g. 8,16 or 8 16 (needed unless --plan is given)")
    p.add_argument("--plan", metavar="JSON",
                   help="simulate a saved plan: hpgo autoplan -o (with --model and --cluster) "
                        "or hpgo plan -o (on the profile it names)")
    p.add_argument("--mbs", type=int, default=None, metavar="N", help="smallest micro-batch size")
    p.add_argument("--schedule",
                   choices=["1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "zb-v", "pipedream"],
                   help="pipeline schedule (default 1f1b; pipedream for profile plans only; "
                        "interleaved-1f1b, zb-h1 and zb-v for --model plans only)")
    p.add_argument("--link-bandwidth", type=float, default=None, metavar="BYTES_PER_S",
                   help="profile plans: point-to-point bandwidth inside a machine (default "
                        "25e9, HPGO's NVLink figure; stage boundaries across machines use 1e9, "
                        "HPGO's Ethernet)")
    p.add_argument("--threads", type=int, default=0, help="planner threads (0 = all cores)")
    m = p.add_argument_group("DistIR MLP (--mlp)")
    m.add_argument("--mlp", action="store_true", help="simulate DistIR's MLP instead of a profile")
    m.add_argument("--batch-size", type=int, default=4096, help="samples per step (default 4096)")
    m.add_argument("--width", type=int, default=4096, help="hidden width (default 4096)")
    m.add_argument("--layers", type=int, default=64, help="layers (default 64)")
    m.add_argument("--dp", type=int, default=None, metavar="N",
                   help="data-parallel replicas (D; default 1); also for --model plans")
    m.add_argument("--tp", type=int, default=None, metavar="N",
                   help="tensor-parallel shards (Megatron, H; default 1); also for --model plans")
    m.add_argument("--pp", type=int, default=None, metavar="N",
                   help="pipeline stages (P; default 1); also for --model plans")
    m.add_argument("--microbatches", type=int, default=1, help="micro-batches (K; default 1)")
    m.add_argument("--cost-model", default="distir-2021",
                   choices=["distir-2021", "distir-2021-grid", "distir-2022"],
                   help="DistIR's cost model (default distir-2021)")
    o = p.add_argument_group("output")
    o.add_argument("--trace", metavar="JSON", help="write the timeline as Chrome trace / Perfetto JSON")
    o.add_argument("--gantt", metavar="PNG", help="draw the schedule as a Gantt chart (needs matplotlib)")
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--memory-snapshot", metavar="PICKLE",
                   help="--model plans: the memory each device allocates and frees, op by op, "
                        "in PyTorch's memory-visualiser snapshot format (pytorch.org/memory_viz)")
    o.add_argument("--memory-plot", metavar="PNG",
                   help="--model plans: draw the memory each device holds over the step")
    from .autoplan_cli import add_export_options
    add_export_options(p.add_argument_group(
        "the plan as a framework runs it (--model plans; the plan as simulated, with the "
        "framework's defaults; one that does not fit is not exported)"), "the plan")
    p.set_defaults(func=run_simulate)
    return p


def _is_parallel_plan_file(path: str) -> bool:
    from . import _files

    try:
        d = _files.load_json(path, "plan file")
    except ValueError:
        return False
    return isinstance(d, dict) and d.get("format") == "hpgo-parallel-plan-1"


_STEP_FLAGS = ("model", "hf_config", "cluster", "gpu", "cp", "ep", "vp", "micro_batch",
               "global_batch", "recompute", "zero", "shard_size", "reshard_after_forward",
               "precision", "seq", "memory_headroom",
               "tokens", "price", "memory_snapshot", "memory_plot", "kernels", "tp_overlap",
               "cp_comm", "attention", "optimizer", "cross_entropy", "fp8_recipe")


def _step_mode(args: Any) -> bool:
    if any(getattr(args, k, None) not in (None, False) for k in _STEP_FLAGS) or \
            args.sequence_parallel:
        return True
    return bool(args.plan) and os.path.isfile(args.plan) and _is_parallel_plan_file(args.plan)


def _model_of_plan(plan: Any, args: Any) -> Any:
    """The model of a saved parallel plan: --model / --hf-config, else the
    preset whose identity the plan records."""
    import hpgo
    from .autoplan_cli import model_from_args

    if args.model or args.hf_config:
        return model_from_args(args)
    from .workmodel import _presets

    label = (plan.model or "").split("#")[0]
    if label in _presets():
        m = hpgo.transformer(label)
        if args.seq:
            m = m.with_(seq=args.seq)
        if hpgo.model_id(m) == plan.model:
            return m
    raise CliError(f"{args.plan} was made for the model {plan.model or '(unnamed)'}: give it "
                   "with --model or --hf-config")


def _plan_flags(args: Any) -> tuple:
    """The training-stack and sharding flags as (ParallelPlan field, value) pairs."""
    rs = args.reshard_after_forward
    return (("shard_size", args.shard_size),
            ("reshard_after_forward", None if rs is None else rs == "yes"),
            ("kernels", args.kernels), ("tp_overlap", args.tp_overlap),
            ("cp_comm", args.cp_comm), ("attention", args.attention),
            ("optimizer_impl", args.optimizer), ("cross_entropy", args.cross_entropy),
            ("fp8_recipe", args.fp8_recipe))


def run_simulate_step(args: Any, out: TextIO) -> int:
    """``hpgo simulate --model ... --cluster ... --tp ...``: one training step."""
    import hpgo
    from .autoplan_cli import (cluster_from_args, export_framework, export_plan,
                               model_from_args, run_options)

    for name in ("cp", "ep", "vp", "micro_batch", "global_batch", "tp", "pp", "dp"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.zero is not None and not 0 <= args.zero <= 3:
        raise CliError(f"--zero must be 0, 1, 2 or 3, got {args.zero}")
    if args.schedule == "pipedream":
        raise CliError("--schedule pipedream is HPGO's profile simulator's: give PROFILE --gbs "
                       "--seps, or gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v")
    if args.profile or args.example:
        given = args.profile or args.example
        if not os.path.exists(given) and _preset_hint(given):
            raise CliError(f"{given!r} is a model preset, not a profile: give it as --model {given}")
        raise CliError("a --model plan takes no PROFILE (hpgo autoplan --profile plans profiles)")
    if args.mlp:
        raise CliError("--mlp simulates DistIR's MLP: give no --model or --cluster with it")
    if args.plan:
        plan = hpgo.ParallelPlan.load(args.plan)
        model = _model_of_plan(plan, args)
        changes = {k: v for k, v in (("tp", args.tp), ("pp", args.pp), ("dp", args.dp),
                                     ("cp", args.cp), ("ep", args.ep),
                                     ("virtual_stages", args.vp),
                                     ("micro_batch", args.micro_batch),
                                     ("global_batch", args.global_batch),
                                     ("schedule", args.schedule), ("recompute", args.recompute),
                                     ("zero", args.zero)) + _plan_flags(args) if v is not None}
        if args.sequence_parallel:
            changes["sequence_parallel"] = True
        if changes:
            plan = plan.with_(**changes)
    else:
        model = model_from_args(args)
        if args.global_batch is None:
            raise CliError("--global-batch is needed (sequences per iteration), or --plan FILE")
        plan = hpgo.ParallelPlan(global_batch=args.global_batch, tp=args.tp or 1,
                                 pp=args.pp or 1, dp=args.dp or 1, cp=args.cp or 1,
                                 ep=args.ep or 1, virtual_stages=args.vp or 1,
                                 micro_batch=args.micro_batch or 1,
                                 schedule=args.schedule or "1f1b",
                                 recompute=args.recompute or "none",
                                 sequence_parallel=bool(args.sequence_parallel),
                                 zero=args.zero or 0,
                                 **{k: v for k, v in _plan_flags(args) if v is not None})
    # without --nodes, a preset or --gpu cluster has the nodes the plan needs
    # (a cluster file keeps its own: it describes the machine)
    sized = args.gpu or (args.cluster and not os.path.exists(args.cluster))
    cluster = cluster_from_args(args, gpus=plan.gpus if sized else None)
    if plan.gpus > cluster.gpus:
        raise CliError(f"the plan uses {plan.gpus} GPUs (tp x cp x pp x dp), the cluster has "
                       f"{cluster.gpus}: give --nodes {-(-plan.gpus // cluster.gpus_per_node)}")
    framework = export_framework(args)
    exporting = bool(args.megatron_args or args.torchtitan or args.deepspeed)
    if exporting and args.json:
        raise CliError("--json prints the step; an export prints or writes the plan: give one")
    if framework and not isinstance(model, hpgo.Transformer):
        raise CliError("--framework checks plans of a transformer (--model, --hf-config)")
    r = hpgo.simulate(model, cluster, plan, precision=args.precision,
                      timeline=bool(args.trace or args.gantt or args.memory_snapshot
                                    or args.memory_plot), framework=framework,
                      **run_options(args))
    if exporting:
        # what was simulated, and whether it fits, beside the export
        print(r, file=sys.stderr)
        if not r.fits:
            print("the plan does not fit in the GPUs' memory: not exported", file=sys.stderr)
            return 1
        export_plan(r.plan, model, args, "the plan")
        return 0
    if args.json:
        out.write(json.dumps(_step_dict(r, model, cluster), indent=1) + "\n")
    else:
        out.write(_step_table(r, model, cluster) + "\n")
    _write_outputs(r, args.trace, ("step_gantt", args.gantt),
                   ("memory_timeline", args.memory_plot))
    if args.memory_snapshot:
        r.to_memory_snapshot(args.memory_snapshot)
        print(f"wrote {args.memory_snapshot}", file=sys.stderr)
    return 0


def _step_dict(r: Any, model: Any, cluster: Any) -> dict:
    from .autoplan import setup_line

    return {
        "setup": setup_line(model, cluster, precision=r.precision,
                            global_batch=r.plan.global_batch, headroom=r.headroom),
        "plan": r.plan.to_dict(), "model": getattr(model, "name", ""), "cluster": cluster.name,
        "seq": getattr(model, "seq", None), "precision": r.precision, "gpus": r.gpus,
        "iteration_time": r.iteration_time, "tokens_per_second": r.tokens_per_second,
        "tokens_per_gpu": r.tokens_per_gpu, "tflops_per_gpu": r.tflops_per_gpu,
        "mfu": r.mfu, "mfu_bf16": r.mfu_bf16, "samples_per_second": r.samples_per_second,
        "fits": r.fits, "memory_headroom": r.headroom, "tokens": r.tokens, "price": r.price,
        "days": r.days, "gpu_hours": r.gpu_hours, "cost": r.cost, "checked": r.checked,
        "checked_errors": r.checked_errors, "days_band": r.days_band, "cost_band": r.cost_band,
        "devices": [{"busy": d["busy"], "bubble": d["bubble"],
                     "peak_in_flight": d["peak_in_flight"],
                     "memory": {k: getattr(m, k) for k in ("weights", "gradients", "optimizer",
                                                           "activations", "other", "total",
                                                           "capacity", "headroom", "margin",
                                                           "fits")}}
                    for d, m in zip(r.devices, r.memory)],
    }


def _step_table(r: Any, model: Any, cluster: Any) -> str:
    from .autoplan import setup_line
    from .plan import _format_table

    g = 2.0 ** 30
    lines = [setup_line(model, cluster, precision=r.precision, global_batch=r.plan.global_batch,
                        headroom=r.headroom),
             f"plan: {r.plan.describe()} ({r.gpus}"
             f"{f' of the {r.cluster_gpus}' if 0 < r.gpus < r.cluster_gpus else ''} GPUs, "
             f"{r.microbatches} micro-batches)",
             "step: " + r.summary().split(": ", 1)[1], ""]
    body = []
    for i, (d, m) in enumerate(zip(r.devices, r.memory)):
        body.append([str(i), f"{d['busy']:.4g}", f"{d['bubble'] * 100:.1f}%",
                     str(d["peak_in_flight"]), f"{m.weights / g:.1f}", f"{m.gradients / g:.1f}",
                     f"{m.optimizer / g:.1f}", f"{m.activations / g:.1f}", f"{m.other / g:.1f}",
                     f"{m.total / g:.1f}/{m.usable / g:.1f}",
                     "yes" if m.fits else "NO"])
    lines += _format_table(["stage", "busy s", "bubble", "in flight", "weights", "grads",
                            "optimizer", "activations", "other", "GiB used/usable", "fits"], body)
    lines += ["", "assumes: " + r.assumptions()]
    return "\n".join(lines)


def _plan_profile(plan: Any, plan_path: str) -> str:
    """The profile a saved plan names: as written (relative to the current
    directory), else relative to the plan file's folder."""
    if not plan.profile:
        raise CliError(f"{plan_path} names no profile: give PROFILE or --example")
    cands = [plan.profile]
    if not os.path.isabs(plan.profile):
        cands.append(os.path.join(os.path.dirname(os.path.abspath(plan_path)), plan.profile))
    for c in cands:
        if os.path.exists(c):
            return c
    raise CliError(f"{plan_path} names the profile {plan.profile!r}, which is not there: "
                   "give PROFILE")


def _sim_summary(r: Any) -> dict:
    return {
        "iteration_time": r.iteration_time,
        "throughput": r.throughput,
        "peak_memory": r.peak_memory,
        "gpu_memory": r.gpu_memory,
        "fits": r.fits,
        "config": {k: v for k, v in r.config.items() if isinstance(v, (int, float, str))},
        "stages": [{"stage": s.stage, "busy": s.busy, "bubble": s.bubble,
                    "max_in_flight": s.max_in_flight, "peak_bytes": s.peak_bytes,
                    "weight_bytes": s.weight_bytes, "activation_bytes": s.activation_bytes}
                   for s in r.stages],
    }


def _sim_table(r: Any, head: str) -> str:
    from .plan import _format_table

    lines = [head, f"iteration {r.iteration_time * 1e3:.3f} ms"
             + (f", throughput {r.throughput:.2f} samples/s" if r.throughput else "")
             + f", peak memory {r.peak_memory / 2**30:.2f} of {r.gpu_memory / 2**30:.2f} GiB "
             + ("(fits)" if r.fits else "(DOES NOT FIT)"), ""]
    body = [[str(s.stage), f"{s.busy * 1e3:.3f}", f"{s.bubble * 100:.1f}%", str(s.max_in_flight),
             f"{s.weight_bytes / 2**20:.1f}", f"{s.activation_bytes / 2**20:.1f}",
             f"{s.peak_bytes / 2**30:.3f}"] for s in r.stages]
    lines += _format_table(["stage", "busy ms", "bubble", "in flight", "weights MiB",
                            "activations MiB", "peak GiB"], body)
    return "\n".join(lines)


def run_simulate(args: Any, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    from . import sim

    if args.threads < 0:
        raise CliError(f"--threads must be >= 0, got {args.threads}")
    _check_outputs((args.trace, "--trace"), (args.gantt, "--gantt"),
                   (args.memory_snapshot, "--memory-snapshot"), (args.memory_plot, "--memory-plot"))
    if _step_mode(args):
        return run_simulate_step(args, out)
    missing_plan = bool(args.plan) and not os.path.isfile(args.plan)  # said below
    if (args.framework or args.megatron_args or args.torchtitan or args.deepspeed) and \
            not missing_plan:
        raise CliError("--framework and the exports take a plan of a transformer (--model or "
                       "--hf-config), not HPGO's profile plans or DistIR's MLP")
    if args.mlp:
        if args.profile or args.plan or args.example:
            raise CliError("--mlp simulates DistIR's MLP: give no profile or --plan with it")
        r = sim.simulate_mlp(batch_size=args.batch_size, width=args.width, layers=args.layers,
                             dp=1 if args.dp is None else args.dp,
                             tp=1 if args.tp is None else args.tp,
                             pp=1 if args.pp is None else args.pp,
                             microbatches=args.microbatches,
                             cost_model=args.cost_model)
        head = (f"DistIR MLP: batch {args.batch_size}, width {args.width}, {args.layers} layers, "
                f"D={r.config.get('dp', args.dp)} H={r.config.get('tp', args.tp)} "
                f"P={r.config.get('pp', args.pp)} K={args.microbatches}, "
                f"{args.cost_model}")
    else:
        from . import _core
        from .plan import Plan, best_plan

        plan: Any
        if args.plan:
            plan = Plan.load(args.plan)
            if not args.profile and not args.example:
                args.profile = _plan_profile(plan, args.plan)
            if args.pbs is None:
                args.pbs = plan.pbs
            path = _resolve_profile(args)
            pbs = args.pbs
            gbs = _one_gbs(args.gbs) if args.gbs else plan.gbs
            if pbs is None or gbs is None:
                raise CliError("the plan file has no pbs/gbs: give --pbs and --gbs")
        else:
            if not args.profile and not args.example:
                raise CliError("give a profile (a graph.txt or its folder), --example NAME, "
                               "--plan FILE or --mlp")
            path = _resolve_profile(args)
            if args.pbs is None or args.gbs is None or args.seps is None:
                raise CliError("--pbs, --gbs and --seps are needed (--pbs defaults to the batch "
                               "size in the profile's profile.json), or --plan FILE")
            pbs, gbs = args.pbs, _one_gbs(args.gbs)
        _positive("--pbs", pbs)
        _positive("--mbs", args.mbs)
        model = _core.model_from_torch_graph(path, pbs, gbs)
        if args.mbs is not None:
            model.min_micro_batch_size = args.mbs
        if args.plan:
            try:
                plan.check_model(model)
            except ValueError as e:
                raise CliError(f"{args.plan}: {e} ({path})") from None
        else:
            plan = best_plan(model, pbs, gbs, _seps(args.seps), threads=args.threads)
        kw = {}
        if args.link_bandwidth is not None:
            kw["link_bandwidth"] = args.link_bandwidth
        sched = args.schedule or "1f1b"
        if sched not in ("1f1b", "gpipe", "pipedream"):
            raise CliError(f"--schedule {sched} needs a --model plan; HPGO's profile plans run "
                           "1f1b, gpipe or pipedream")
        r = plan.simulate(model, schedule=sched, **kw)
        head = (f"plan of {path}: {plan.num_stages} stages x {plan.rp} replicas "
                f"(planner speedup {plan.speedup:.3f}), gbs {gbs}, {sched} schedule, "
                f"{r.config.get('microbatches')} micro-batches")
    if args.json:
        out.write(json.dumps(_sim_summary(r), indent=2) + "\n")
    else:
        out.write(_sim_table(r, head) + "\n")
    _write_outputs(r, args.trace, ("gantt", args.gantt))
    return 0


# ---------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="hpgo", description="Plan and simulate hybrid parallel DNN training.",
                 epilog="'hpgo COMMAND --help' describes each command.")
    from . import __version__

    ap.add_argument("--version", action="version", version=f"hpgo {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_plan_subcommand(sub)
    add_sweep_subcommand(sub)
    add_simulate_subcommand(sub)
    add_profile_subcommand(sub)
    add_autoplan_subcommand(sub)
    from .calibrate import add_calibrate_subcommand
    add_calibrate_subcommand(sub)
    from .cluster_cli import add_cluster_subcommand
    add_cluster_subcommand(sub)
    return ap


def _join_seps(argv: Sequence[str]) -> List[str]:
    """``--seps 8 16`` -> ``--seps 8,16``: integers following a --seps value
    belong to it (argparse would call them unrecognized arguments)."""
    out: List[str] = []
    i = 0
    argv = list(argv)
    while i < len(argv):
        a = argv[i]
        out.append(a)
        i += 1
        if a == "--seps" and i < len(argv):
            out.append(argv[i])
            i += 1
        elif not a.startswith("--seps="):
            continue
        while i < len(argv) and argv[i].isdigit():
            out[-1] += "," + argv[i]
            i += 1
    return out


def error_line(e: BaseException) -> str:
    """An expected error as the one line a command prints after "error: "."""
    lines = str(e).splitlines()
    msg = lines[0] if lines else type(e).__name__
    # a list of reasons under the first line (a framework's refusals) joins it
    items = [ln.strip()[2:] for ln in lines[1:] if ln.strip().startswith("- ")]
    if items:
        msg += " " + "; ".join(items)
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        msg = f"{e.strerror}: {e.filename}"   # not "[Errno 2] ...: 'name'"
    elif isinstance(e, OSError) and e.filename is not None and str(e.filename) not in msg:
        msg += f": {e.filename}"
    return msg


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = _join_seps(sys.argv[1:] if argv is None else argv)
    if (len(argv) > 1 and argv[0] == "autoplan" and not argv[1].startswith("-")
            and not {"-h", "--help"} & set(argv)
            and _preset_hint(argv[1])):   # `hpgo autoplan llama3-8b ...`
        print(f"hpgo autoplan: error: give the model as --model {argv[1]} (see 'hpgo autoplan "
              "--help')", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    name = f"hpgo {args.command}"
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `hpgo ... | head`: the reader left; stop quietly
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 141
    except (CliError, ValueError, TypeError, OSError, ImportError, MemoryError) as e:
        print(f"{name}: error: {error_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # hpgo.HpgoError and anything unexpected: still one line
        msg = str(e).splitlines()[0] if str(e) else ""
        print(f"{name}: error: {type(e).__name__}: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
