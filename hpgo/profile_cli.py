"""``hpgo profile``: make a profile (graph.txt + profile.json) from the zoo or a PyTorch model.

    hpgo profile zoo resnet50 --device V100 --batch-size 32 -o profiles/resnet50-v100
    hpgo profile zoo gpt --set layers=24 --set hidden=2048 --set heads=16 --device H100 --dtype bf16 -o out
    hpgo profile zoo --list
    hpgo profile torch hpgo.profiler.examples:resnet_ish -o profiles/resnet-ish-cpu
    hpgo profile torch mymodels.py:build --input-shape 32,3,224,224 -o out

Errors are reported as one line on stderr with exit status 2.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import sys

__all__ = ["add_profile_subcommand", "run_profile", "main"]


class _UsageError(Exception):
    pass


def _kv(items) -> dict:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise _UsageError(f"expected KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        k = k.strip()
        if not k.isidentifier():
            raise _UsageError(f"bad option name {k!r}")
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def add_profile_subcommand(subparsers) -> argparse.ArgumentParser:
    """Add ``profile`` (with ``zoo`` and ``torch``) to an argparse subparsers object."""
    p = subparsers.add_parser("profile", help="make a per-layer profile (graph.txt + JSON)",
                              description="Make a per-layer profile: analytic (zoo) or measured (torch).")
    sub = p.add_subparsers(dest="profile_source", metavar="{zoo,torch,kernels,step}")
    sub.required = True

    z = sub.add_parser("zoo", help="analytic roofline profile of a standard architecture")
    z.add_argument("model", nargs="?", help="model name (see --list)")
    z.add_argument("--list", action="store_true", help="list models and devices and exit")
    z.add_argument("--device", default="V100", help="V100, A100, H100 or a JSON device spec (default V100)")
    z.add_argument("--batch-size", type=int, default=None, help="samples per mini-batch (default: the model's)")
    z.add_argument("--dtype", default="fp32", help="fp32, tf32, fp16 or bf16 (default fp32)")
    z.add_argument("--peak", action="store_true", help="pure roofline: efficiencies 1, no launch overhead")
    z.add_argument("--set", action="append", metavar="KEY=VALUE", help="architecture option, e.g. layers=48")
    z.add_argument("-o", "--output", help="output folder (graph.txt + profile.json) or a .txt path")

    t = sub.add_parser("torch", help="measure a PyTorch model on this machine (needs torch)")
    t.add_argument("factory", help="MODULE:FUNCTION or path/file.py:FUNCTION returning a model "
                                   "or (model, example_inputs)")
    t.add_argument("--arg", action="append", metavar="KEY=VALUE", help="keyword argument for the factory")
    t.add_argument("--input-shape", help="shape of a random input when the factory returns only a model, "
                                         "e.g. 32,3,224,224")
    t.add_argument("--int-input", type=int, metavar="HIGH", default=None,
                   help="make the random input int64 in [0, HIGH) (token ids)")
    t.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    t.add_argument("--layers", help="comma-separated module names, each one layer")
    t.add_argument("--layers-of", metavar="MODULE", help="each child of this module is one layer "
                                                         "('' = children of the model)")
    t.add_argument("--warmup", type=int, default=2,
                   help="untimed iterations before measuring (default 2)")
    t.add_argument("--repeat", type=int, default=5,
                   help="timed iterations; each layer's time is their median (default 5)")
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    t.add_argument("--method", default="auto", choices=["auto", "fx", "hooks"],
                   help="how layers are found: torch.fx tracing, module hooks, or auto (fx, "
                        "hooks when tracing fails; default)")
    t.add_argument("--name", help="model name recorded in the JSON")
    t.add_argument("-o", "--output", required=True, help="output folder or a .txt path")

    k = sub.add_parser("kernels", help="time this GPU's kernels for hpgo calibrate (needs torch, CUDA)",
                       description="Time copies, bf16/fp8 GEMMs, MoE expert GEMMs, attention and "
                                   "whole layers on this machine's GPU; write a kernel profile "
                                   "(JSON) for `hpgo calibrate`.")
    k.add_argument("-o", "--output", required=True, help="kernel profile to write (JSON)")
    k.add_argument("--quick", action="store_true", help="a few shapes of each kind (seconds; coarse)")

    st = sub.add_parser("step", help="time whole training steps of Llama-style models on one GPU, "
                                     "eager and compiled (needs torch)",
                        description="Time training steps of Llama-style models on this machine's "
                                    "GPU in eager PyTorch and with torch.compile; write a step "
                                    "profile (JSON) to check hpgo's kernel sets against.")
    st.add_argument("-o", "--output", required=True, help="step profile to write (JSON)")
    st.add_argument("--quick", action="store_true", help="one tiny model (a smoke test)")
    st.add_argument("--modes", default="eager,compile",
                    help="comma-separated: eager, compile, titan, titan-full, titan-fsdp, "
                         "titan-eager (torchtitan's December 2024 block: op-level or full "
                         "checkpointing, FlashAttention-2, eager loss; -fsdp: FSDP2 on one GPU; "
                         "-eager: without torch.compile) (default: eager,compile)")
    st.add_argument("--device", help="a torch device (default: cuda if present, else cpu)")
    st.add_argument("--power", action="store_true",
                    help="sample board power and SM clocks through NVML (NVIDIA GPUs; needs "
                         "nvidia-ml-py)")
    st.add_argument("--cp-blocks", action="store_true",
                    help="time one rank's context-parallel attention blocks (FlashAttention-2)")
    st.add_argument("--no-long-attention", action="store_true",
                    help="skip the long-sequence causal attention sweep")
    st.add_argument("--tp-shards", action="store_true",
                    help="also time one tensor-parallel rank's share of torchtitan's TP-8 runs "
                         "(8B, 70B, 405B, 4 layers; --modes '' for these alone)")
    st.add_argument("--float8", default="",
                    help="comma-separated torchao float8 recipes (tensorwise, rowwise, "
                         "rowwise_with_gw_hp) to run the titan and titan-full blocks in as "
                         "well (needs torchao)")
    p.set_defaults(func=run_profile)
    return p


def _load_factory(spec: str):
    if ":" not in spec:
        raise _UsageError(f"factory must be MODULE:FUNCTION, got {spec!r}")
    mod_name, fn_name = spec.rsplit(":", 1)
    if mod_name.endswith(".py") or os.path.sep in mod_name:
        if not os.path.isfile(mod_name):
            raise _UsageError(f"no such file {mod_name!r}")
        s = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(mod_name))[0], mod_name)
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
    else:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as e:
            raise _UsageError(f"cannot import {mod_name!r}: {e}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise _UsageError(f"{mod_name} has no callable {fn_name!r}")
    return fn


def _run_zoo(args) -> int:
    from . import zoo
    from .graphfile import write_profile

    if args.list:
        for name, desc in zoo.models().items():
            print(f"{name:14s} {desc}")
        print("devices: " + ", ".join(zoo.devices()) + " (or a JSON spec file)")
        return 0
    if not args.model:
        raise _UsageError("a model name is needed (hpgo profile zoo --list shows them)")
    if not args.output:
        raise _UsageError("-o/--output is required")
    if args.batch_size is not None and args.batch_size < 1:
        raise _UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    prof = zoo.profile(args.model, device=args.device, batch_size=args.batch_size, dtype=args.dtype,
                       peak=args.peak, **_kv(args.set))
    g, j = write_profile(args.output, prof)
    tot = prof.totals()
    print(f"wrote {g} and {j}: {len(prof.nodes)} nodes, batch {prof.meta['batch_size']}, "
          f"fwd {tot['fwd_ms']:.3f} ms, bwd {tot['bwd_ms']:.3f} ms, {prof.meta['param_count']:,} parameters")
    return 0


def _run_torch(args) -> int:
    fn = _load_factory(args.factory)
    try:
        import torch
    except ImportError:
        raise _UsageError("PyTorch is not installed (pip install -e '.[torch]' from the "
                          "hpgo clone)") from None
    from . import profiler
    from .graphfile import write_profile

    if args.threads is not None:
        if args.threads < 1:
            raise _UsageError("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    made = fn(**_kv(args.arg))
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        model, inputs = made
    elif isinstance(made, torch.nn.Module):
        model, inputs = made, None
    else:
        raise _UsageError(f"{args.factory} must return a torch.nn.Module or (module, example_inputs)")
    if args.input_shape:
        try:
            shape = tuple(int(s) for s in args.input_shape.split(","))
        except ValueError:
            raise _UsageError(f"bad --input-shape {args.input_shape!r}") from None
        if not shape or min(shape) < 1:
            raise _UsageError(f"bad --input-shape {args.input_shape!r}")
        inputs = (torch.randint(0, args.int_input, shape) if args.int_input else torch.randn(shape))
    if inputs is None:
        raise _UsageError("the factory returned no example inputs; pass --input-shape")
    try:
        dev = torch.device(args.device)
    except RuntimeError as e:
        raise _UsageError(f"bad --device {args.device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise _UsageError("--device cuda requested but CUDA is not available")
    model = model.to(dev)  # the factory's own model
    layers = None
    if args.layers:
        layers = [s.strip() for s in args.layers.split(",") if s.strip()]
    elif args.layers_of is not None:
        layers = profiler.children(model, args.layers_of)
    prof = profiler.profile_module(model, inputs, layers=layers, warmup=args.warmup, repeat=args.repeat,
                                   method=args.method, name=args.name or args.factory.rsplit(":", 1)[1])
    g, j = write_profile(args.output, prof)
    tot = prof.totals()
    print(f"wrote {g} and {j}: {len(prof.nodes)} nodes ({prof.meta['method']}), batch "
          f"{prof.meta['batch_size']}, fwd {tot['fwd_ms']:.3f} ms, bwd {tot['bwd_ms']:.3f} ms")
    return 0


def _run_kernels(args) -> int:
    from .profiler import kernels

    doc = kernels.measure(args.output, quick=args.quick,
                          log=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"{len(doc['samples'])} kernels timed on {doc['device']} -> {args.output}")
    print(kernels.summary(doc))
    return 0


def _run_step(args) -> int:
    from .profiler import step

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not (modes or args.tp_shards):
        raise _UsageError("--modes is empty: give at least one mode, or --tp-shards")
    if any(m not in step.MODES for m in modes):
        raise _UsageError(f"--modes takes {', '.join(step.MODES)}, got {args.modes!r}")
    float8 = tuple(r.strip() for r in args.float8.split(",") if r.strip())
    if any(r not in step.FLOAT8_RECIPES for r in float8):
        raise _UsageError(f"--float8 takes {', '.join(step.FLOAT8_RECIPES)}, "
                          f"got {args.float8!r}")
    if float8 and not any(m in step.FLOAT8_MODES for m in modes):
        raise _UsageError("--float8 runs the titan and titan-full blocks: add one of them "
                          "to --modes")
    doc = step.measure(args.output, quick=args.quick, modes=modes, device=args.device,
                       power=args.power, cp_blocks=args.cp_blocks,
                       long_attention=not args.no_long_attention, tp_shards=args.tp_shards,
                       float8=float8)
    print(f"{len(doc['samples'])} steps timed on {doc['device']} -> {args.output}")
    return 0


def run_profile(args) -> int:
    """Run ``hpgo profile ...`` from parsed args; returns the exit status."""
    try:
        if args.profile_source == "zoo":
            return _run_zoo(args)
        if args.profile_source == "kernels":
            return _run_kernels(args)
        if args.profile_source == "step":
            return _run_step(args)
        return _run_torch(args)
    except (_UsageError, ValueError, TypeError, OSError, ImportError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"hpgo profile: error: {msg}", file=sys.stderr)
        return 2
    except Exception as e:  # profiler failures (ProfilerError, torch errors) stay one line too
        msg = str(e).splitlines()[0] if str(e) else ""
        print(f"hpgo profile: error: {type(e).__name__}: {msg}", file=sys.stderr)
        return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="hpgo", allow_abbrev=False)
    sub = ap.add_subparsers(dest="command")
    sub.required = True
    add_profile_subcommand(sub)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
