"""Megatron-LM's own argument parser and validation on hpgo's exports.

Megatron-LM's training package (megatron/training/arguments.py) is not on
PyPI: this runs against a checkout named by the MEGATRON_LM environment
variable (tests/test_frameworks.py::test_megatron_lm_validates_the_exports;
docs/exports.md).  It imports on a CPU machine with its GPU-only modules
(triton kernels, Transformer Engine, apex, ...) replaced by empty stand-ins
and the GPU queries answered as an H100 (compute capability 9.0); it then
runs parse_args, validate_args and core_transformer_config_from_args, which
builds and validates Megatron-Core's TransformerConfig.

Usage: python megatron_lm_check.py CHECKOUT < cases.json, where cases.json
is a list of [arguments text, GPUs]; prints a JSON list with "" for each
accepted case and the error otherwise.
"""
import importlib.machinery
import json
import os
import shlex
import sys
import types
import typing

# Megatron-LM's newest modules use typing.override (Python 3.12)
typing.override = getattr(typing, "override", lambda f: f)  # type: ignore[attr-defined]
import torch  # noqa: E402
# PyTorch's own optional triton imports happen before the stand-ins exist
import torch._dynamo  # noqa: E402,F401
import torch._functorch.aot_autograd  # noqa: E402,F401
import torch._inductor.runtime.triton_compat  # noqa: E402,F401

_GPU_ONLY = ("triton", "transformer_engine", "apex", "flash_attn", "mamba_ssm", "causal_conv1d",
             "grouped_gemm", "flashinfer", "nvtx", "tensorstore", "modelopt", "deep_ep")


class _Anything:
    """Stands for any attribute of a GPU-only module: callable, subscriptable,
    usable as a decorator and as a base class."""

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return _Anything()

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Anything()

    def __getitem__(self, k):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _StandIn(types.ModuleType):
    def __getattr__(self, k):
        if k == "__version__":
            return "2.10.0"  # a Transformer Engine release Megatron-LM core_v0.19.0 supports
        if k.startswith("__"):
            raise AttributeError(k)
        return _Anything()


class _Finder:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in _GPU_ONLY and isinstance(sys.modules.get(top, _StandIn(top)), _StandIn):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StandIn(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, m):
        pass


def main() -> int:
    sys.path.insert(0, sys.argv[1])
    sys.meta_path.insert(0, _Finder())
    os.environ.setdefault("RANK", "0")
    import megatron.training.arguments as margs
    margs.get_device_arch_version = lambda: 9
    torch.cuda.get_device_capability = lambda *a: (9, 0)
    out = []
    for text, gpus in json.load(sys.stdin):
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        sys.argv = ["pretrain_gpt.py"] + shlex.split(body.replace("\\\n", " ")) + [
            "--tokenizer-type", "NullTokenizer", "--mock-data", "--train-iters", "1",
            "--lr", "1e-4"]
        os.environ["WORLD_SIZE"] = str(gpus)
        # FSDP2 wants more than one CUDA connection, tensor parallelism one
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8" if "fsdp" in text else "1"
        try:
            args = margs.parse_args()
            args.world_size = gpus
            margs.validate_args(args)
            margs.core_transformer_config_from_args(args)
            out.append("")
        except (Exception, SystemExit) as e:  # argparse exits on unknown flags
            out.append(f"{type(e).__name__}: {e}")
    json.dump(out, sys.__stdout__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
