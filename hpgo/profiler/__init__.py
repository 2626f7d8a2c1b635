"""Measure a per-layer profile of a PyTorch ``nn.Module`` (CPU or CUDA).

    >>> from hpgo import profiler
    >>> prof = profiler.profile_module(model, torch.randn(32, 3, 64, 64))
    >>> profiler.write_profile("profiles/mymodel-cpu", prof)   # graph.txt + profile.json

For every layer (a leaf module by default, or the modules you name, e.g.
``layers=profiler.children(model, "blocks")`` for each block of an
``nn.Sequential``) it records the median forward and backward time over
``repeat`` runs after ``warmup`` runs (synchronising CUDA around each
layer), the bytes of the layer's output, the bytes of its parameters, and
the data-flow edges between layers.

Two methods:

* ``"fx"`` (default when the model can be traced with ``torch.fx``): the
  traced graph is run layer by layer; each layer gets its inputs as fresh
  autograd leaves, so its backward is timed alone with ``torch.autograd.grad``
  and gradients are passed on by hand.  Edges are the real data flow
  (skip connections included); tensor-producing functional calls between
  modules (``x + y``, ``torch.flatten``) are layers of their own.
* ``"hooks"`` (fallback for models ``torch.fx`` cannot trace, e.g. with
  data-dependent control flow): forward and full-backward hooks on the
  layers time each call; edges follow the execution order (a chain), and
  work outside the layers is not attributed.

The model is left as it was: the train/eval flags of its modules and its
buffers (BatchNorm running statistics) are restored afterwards, parameter
``.grad`` fields are not touched, and in the hooks method the ``inplace``
flags that full-backward hooks cannot handle are switched off during the
run and restored.
"""
from __future__ import annotations

import operator
import platform
import statistics
import time
import warnings
from typing import Any, Iterable

from ..graphfile import Node, Profile, write_profile

MAX_RUNS = 10_000  # warm-up and timed runs per layer

__all__ = ["profile_module", "children", "leaf_layers", "write_profile", "ProfilerError", "METHODS"]

METHODS = ("auto", "fx", "hooks")


class ProfilerError(RuntimeError):
    """The model could not be profiled (message says why)."""


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("hpgo.profiler needs PyTorch; install it with: pip install -e "
                          "'.[torch]' from the hpgo clone") from None
    return torch


# ------------------------------------------------------------------ helpers

def children(model, name: str = "") -> list[str]:
    """Qualified names of the direct children of submodule ``name`` ("" = the
    model itself): pass as ``layers=`` to profile each block of a Sequential."""
    mods = dict(model.named_modules())
    if name not in mods:
        raise ValueError(f"model has no submodule {name!r}")
    prefix = f"{name}." if name else ""
    return [prefix + c for c, _ in mods[name].named_children()]


def leaf_layers(model) -> list[str]:
    """Qualified names of the modules without children."""
    return [n for n, m in model.named_modules() if n and not any(True for _ in m.children())]


def _flat_tensors(x, torch) -> list:
    out = []
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            out.extend(_flat_tensors(v, torch))
    elif isinstance(x, dict):
        for v in x.values():
            out.extend(_flat_tensors(v, torch))
    return out


def _map_tensors(x, fn, torch):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_map_tensors(v, fn, torch) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_map_tensors(v, fn, torch) for v in x)
    if isinstance(x, dict):
        return {k: _map_tensors(v, fn, torch) for k, v in x.items()}
    return x


def _nbytes(ts) -> float:
    return float(sum(t.numel() * t.element_size() for t in ts))


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


class _Clock:
    def __init__(self, torch, device):
        self.torch = torch
        self.cuda = device.type == "cuda"
        self.device = device

    def now(self) -> float:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
        return time.perf_counter()


_INPLACE_FUNCS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                  operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                  operator.ilshift, operator.irshift, operator.imatmul}


def _check_args(model, inputs, warmup, repeat, torch):
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    elif isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, tuple) or not inputs:
        raise TypeError("inputs must be a tensor or a non-empty tuple/list of positional arguments")
    for name, v, lo in (("warmup", warmup, 0), ("repeat", repeat, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if v > MAX_RUNS:  # a typo such as 10**9 would time the model for days
            raise ValueError(f"{name} must be at most {MAX_RUNS:,}, got {v!r}")
    return inputs


def _model_device(model, inputs, torch):
    for p in model.parameters():
        return p.device
    for t in _flat_tensors(inputs, torch):
        return t.device
    return torch.device("cpu")


def _validate_layers(model, layers) -> list[str]:
    if layers is None:
        return []
    if isinstance(layers, str):
        raise TypeError("layers must be a list of module names (use profiler.children(model, name))")
    mods = dict(model.named_modules())
    out = []
    for n in layers:
        if not isinstance(n, str) or n not in mods or n == "":
            raise ValueError(f"layers: model has no submodule {n!r}")
        out.append(n)
    return out


# ----------------------------------------------------------------- fx path

class _Layer:
    __slots__ = ("desc", "kind", "target", "node", "module", "inplace", "params", "fwd", "bwd",
                 "act", "producers", "qualname")

    def __init__(self, desc, kind, target, node=None, module=None, inplace=False, qualname=""):
        self.desc, self.kind, self.target, self.node = desc, kind, target, node
        self.module, self.inplace, self.qualname = module, inplace, qualname
        self.params: list = []
        self.fwd: list[float] = []
        self.bwd: list[float] = []
        self.act = 0.0
        self.producers: list[int] = []


def _trace(model, leaves, torch):
    import torch.fx as fx

    leafset = set(leaves)

    class _Tracer(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            if qualname in leafset:
                return True
            if any(qualname.startswith(n + ".") for n in leafset):
                return True
            return super().is_leaf_module(m, qualname)

    return _Tracer().trace(model)


def _fetch_attr(model, target: str):
    obj = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _profile_fx(model, inputs, graph, warmup, repeat, loss_fn, torch, clock):
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if len(placeholders) < len(inputs):
        raise ProfilerError(f"the model takes {len(placeholders)} inputs, {len(inputs)} given")

    # classify nodes with one plain run
    env: dict = {}
    layer_of: dict = {}
    layers: list[_Layer] = [_Layer("Input", "input", None)]
    seen_params: set = set()
    with torch.no_grad():
        ph_i = 0
        for n in nodes:
            if n.op == "placeholder":
                if ph_i < len(inputs):
                    env[n] = inputs[ph_i]
                elif n.args:
                    env[n] = n.args[0]
                else:
                    raise ProfilerError(f"no value for model input {n.target!r}")
                ph_i += 1
                continue
            if n.op == "output":
                break
            args = fx_map(n.args, env)
            kwargs = fx_map(n.kwargs, env)
            val = _run_node(model, n, args, kwargs)
            env[n] = val
            if n.op == "get_attr":
                continue
            outs = _flat_tensors(val, torch)
            ins = _flat_tensors((args, kwargs), torch)
            if n.op in ("call_function", "call_method") and (
                    not outs or all(any(o is i for i in ins) for o in outs)):
                continue  # getitem on tuples, size(), shape ...: pass-through
            if n.op == "call_module":
                mod = model.get_submodule(n.target)
                desc = f"{n.target} ({type(mod).__name__})"
                inplace = bool(getattr(mod, "inplace", False))
                lay = _Layer(desc, "module", n.target, n, mod, inplace, n.target)
                for p in mod.parameters():
                    if p.requires_grad and id(p) not in seen_params:
                        seen_params.add(id(p))
                        lay.params.append(p)
            else:
                tname = getattr(n.target, "__name__", str(n.target))
                if n.op == "call_method":
                    tname = "." + tname
                inplace = (n.target in _INPLACE_FUNCS or bool(n.kwargs.get("inplace", False))
                           or (n.op == "call_method" and str(n.target).endswith("_")
                               and not str(n.target).startswith("_")))
                lay = _Layer(f"{n.name} ({tname})", n.op, n.target, n, None, inplace, n.name)
            # parameters read through get_attr belong to their first consumer
            for a in n.all_input_nodes:
                if a.op == "get_attr":
                    v = env[a]
                    if isinstance(v, torch.nn.Parameter) and v.requires_grad and id(v) not in seen_params:
                        seen_params.add(id(v))
                        lay.params.append(v)
            layer_of[n] = len(layers)
            layers.append(lay)
    if len(layers) < 2:
        raise ProfilerError("the traced model has no layers")
    out_node = next(n for n in nodes if n.op == "output")
    del env

    if loss_fn is not None:
        layers.append(_Layer("loss", "loss", loss_fn))
    loss_idx = len(layers) - 1 if loss_fn is not None else None

    for it in range(warmup + repeat):
        record = it >= warmup
        env = {}
        produced: dict[int, tuple[int, Any]] = {}  # id(tensor) -> (layer, tensor)
        layer_leaves: dict[int, list] = {}          # layer -> [(leaf, producer, tensor)]
        layer_out: dict[int, list] = {}
        ph_i = 0
        for t in _flat_tensors(inputs, torch):
            produced[id(t)] = (0, t)
        for n in nodes:
            if n.op == "placeholder":
                env[n] = inputs[ph_i] if ph_i < len(inputs) else n.args[0]
                ph_i += 1
                continue
            if n.op == "output":
                break
            li = layer_of.get(n)
            if li is None:
                env[n] = _run_node(model, n, fx_map(n.args, env), fx_map(n.kwargs, env))
                continue
            lay = layers[li]
            leaves = []

            def detach(t, lay=lay, leaves=leaves):
                src = produced.get(id(t))
                if src is None:  # parameters, constants
                    return t
                if not (t.requires_grad and t.is_floating_point()):
                    leaves.append((None, src[0], t))
                    return t
                leaf = t.detach().requires_grad_(True)
                leaves.append((leaf, src[0], t))
                return leaf.clone() if lay.inplace else leaf

            args = _map_tensors(fx_map(n.args, env), detach, torch)
            kwargs = _map_tensors(fx_map(n.kwargs, env), detach, torch)
            t0 = clock.now()
            val = _run_node(model, n, args, kwargs)
            t1 = clock.now()
            env[n] = val
            outs = _flat_tensors(val, torch)
            for o in outs:
                produced.setdefault(id(o), (li, o))
            layer_leaves[li] = leaves
            layer_out[li] = outs
            if record:
                lay.fwd.append(t1 - t0)
                if it == warmup:
                    lay.act = _nbytes(outs)
                    prods = []
                    for _, p, _t in leaves:
                        if p not in prods:
                            prods.append(p)
                    lay.producers = prods
        result = fx_map(out_node.args[0], env)
        grads: dict[int, Any] = {}
        res_t = _flat_tensors(result, torch)
        if loss_idx is not None:
            lay = layers[loss_idx]
            leaves = []
            for t in res_t:
                src = produced.get(id(t))
                if src is not None and t.requires_grad and t.is_floating_point():
                    leaves.append((t.detach().requires_grad_(True), src[0], t))
            lmap = {id(t): leaf for leaf, _, t in leaves}
            t0 = clock.now()
            loss = loss_fn(_map_tensors(result, lambda t: lmap.get(id(t), t), torch))
            t1 = clock.now()
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ProfilerError("loss_fn must return a scalar tensor")
            layer_leaves[loss_idx] = leaves
            layer_out[loss_idx] = [loss]
            grads[id(loss)] = torch.ones_like(loss)
            if record:
                lay.fwd.append(t1 - t0)
                if it == warmup:
                    lay.act = _nbytes([loss])
                    lay.producers = list(dict.fromkeys(p for _, p, _ in leaves))
        else:
            for t in res_t:
                if t.requires_grad and t.is_floating_point():
                    grads[id(t)] = torch.ones_like(t)

        # backward, one layer at a time in reverse order
        for li in range(len(layers) - 1, 0, -1):
            outs = layer_out.get(li, [])
            pairs = [(o, grads.get(id(o))) for o in outs]
            pairs = [(o, g) for o, g in pairs if g is not None and o.requires_grad]
            lay = layers[li]
            leaves = layer_leaves.get(li, [])
            wrt = [lf for lf, _, _ in leaves if lf is not None] + lay.params
            if not pairs or not wrt:
                if record:
                    lay.bwd.append(0.0)
                continue
            t0 = clock.now()
            gs = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs],
                                     retain_graph=False, allow_unused=True)
            t1 = clock.now()
            if record:
                lay.bwd.append(t1 - t0)
            k = 0
            for lf, _, t in leaves:
                if lf is None:
                    continue
                g = gs[k]
                k += 1
                if g is None:
                    continue
                prev = grads.get(id(t))
                grads[id(t)] = g if prev is None else prev + g
        del env, produced, layer_leaves, layer_out, grads
    layers[0].act = _nbytes(_flat_tensors(inputs, torch))
    return layers


def fx_map(a, env):
    import torch.fx as fx
    return fx.node.map_arg(a, lambda n: env[n])


def _run_node(model, n, args, kwargs):
    if n.op == "call_module":
        return model.get_submodule(n.target)(*args, **kwargs)
    if n.op == "call_function":
        return n.target(*args, **kwargs)
    if n.op == "call_method":
        self_obj, *rest = args
        return getattr(self_obj, n.target)(*rest, **kwargs)
    if n.op == "get_attr":
        return _fetch_attr(model, n.target)
    raise ProfilerError(f"unexpected fx node {n.op}")


# -------------------------------------------------------------- hooks path

def _profile_hooks(model, inputs, leaves, warmup, repeat, loss_fn, torch, clock):
    mods = dict(model.named_modules())
    names = leaves or leaf_layers(model)
    if not names:
        names = []
    layers: list[_Layer] = [_Layer("Input", "input", None)]
    index: dict[str, int] = {}
    state = {"record": False, "order": []}
    starts_f: dict[str, float] = {}
    starts_b: dict[str, float] = {}
    cur_f: dict[str, float] = {}
    cur_b: dict[str, float] = {}
    acts: dict[str, float] = {}
    handles = []
    inplace_off = []
    seen_params: set = set()

    def get_layer(name):
        if name not in index:
            mod = mods[name]
            lay = _Layer(f"{name} ({type(mod).__name__})", "module", name, None, mod, False, name)
            for p in mod.parameters():
                if p.requires_grad and id(p) not in seen_params:
                    seen_params.add(id(p))
                    lay.params.append(p)
            index[name] = len(layers)
            layers.append(lay)
        return layers[index[name]]

    for name in names:
        mod = mods[name]
        if getattr(mod, "inplace", False) is True:
            inplace_off.append(mod)

        def fpre(m, a, name=name):
            starts_f[name] = clock.now()

        def fpost(m, a, out, name=name):
            t = clock.now()
            get_layer(name)
            cur_f[name] = cur_f.get(name, 0.0) + t - starts_f.pop(name, t)
            acts[name] = acts.get(name, 0.0) + _nbytes(_flat_tensors(out, torch))

        def bpre(m, gout, name=name):
            starts_b[name] = clock.now()

        def bpost(m, gin, gout, name=name):
            t = clock.now()
            cur_b[name] = cur_b.get(name, 0.0) + t - starts_b.pop(name, t)

        handles.append(mod.register_forward_pre_hook(fpre))
        handles.append(mod.register_forward_hook(fpost))
        handles.append(mod.register_full_backward_pre_hook(bpre))
        handles.append(mod.register_full_backward_hook(bpost))
    for m in inplace_off:
        m.inplace = False
    try:
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for it in range(warmup + repeat):
            cur_f.clear()
            cur_b.clear()
            acts.clear()
            out = model(*inputs)
            if loss_fn is not None:
                loss = loss_fn(out)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise ProfilerError("loss_fn must return a scalar tensor")
                outs, gs = [loss], [torch.ones_like(loss)]
            else:
                outs = [t for t in _flat_tensors(out, torch) if t.requires_grad]
                gs = [torch.ones_like(t) for t in outs]
            params = [p for p in model.parameters() if p.requires_grad]
            if outs and params:
                torch.autograd.grad(outs, params, gs, allow_unused=True)
            if it >= warmup:
                for name, i in index.items():
                    layers[i].fwd.append(cur_f.get(name, 0.0))
                    layers[i].bwd.append(cur_b.get(name, 0.0))
                    layers[i].act = acts.get(name, 0.0)
    finally:
        for h in handles:
            h.remove()
        for m in inplace_off:
            m.inplace = True
    for i in range(1, len(layers)):
        layers[i].producers = [i - 1]
    layers[0].act = _nbytes(_flat_tensors(inputs, torch))
    return layers


# ----------------------------------------------------------------- driver

def profile_module(model, inputs, *, layers: Iterable[str] | None = None, batch_size: int | None = None,
                   loss_fn=None, warmup: int = 2, repeat: int = 5, method: str = "auto",
                   name: str | None = None) -> Profile:
    """Profile ``model`` on the device of its parameters.

    inputs: a tensor or a tuple of positional inputs (batch first);
    layers: qualified names of the modules that are one layer each (default:
    leaf modules); batch_size: recorded in the profile (default: first
    dimension of the first input); loss_fn: optional ``f(output) -> scalar``
    timed as a final ``loss`` layer (default: backward from a gradient of ones
    on the outputs); warmup/repeat: runs discarded / runs whose median is
    kept; method: "auto" (fx, then hooks), "fx" or "hooks".

    Returns a :class:`hpgo.graphfile.Profile` (times in ms per mini-batch).
    """
    torch = _torch()
    inputs = _check_args(model, inputs, warmup, repeat, torch)
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError("loss_fn must be callable")
    leaves = _validate_layers(model, layers)
    device = _model_device(model, inputs, torch)
    inputs = tuple(_map_tensors(x, lambda t: t.to(device), torch) for x in inputs)
    first = _flat_tensors(inputs, torch)
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if batch_size is None:
        if not first or first[0].dim() == 0:
            raise ValueError("cannot infer the batch size; pass batch_size=")
        batch_size = int(first[0].shape[0])
    clock = _Clock(torch, device)

    modes = {m: m.training for m in model.modules()}
    saved = {k: b.detach().clone() for k, b in model.named_buffers()}
    used = method
    trace_error = None
    try:
        model.train()
        layers_out = None
        if method in ("auto", "fx"):
            try:
                graph = _trace(model, leaves, torch)
            except Exception as e:  # noqa: BLE001 - any tracing failure means: fall back
                if method == "fx":
                    raise ProfilerError(f"torch.fx cannot trace the model: {type(e).__name__}: {e}") from e
                trace_error = f"{type(e).__name__}: {e}"
            else:
                used = "fx"
                try:
                    layers_out = _profile_fx(model, inputs, graph, warmup, repeat, loss_fn, torch, clock)
                except ProfilerError:
                    raise
                except Exception as e:  # noqa: BLE001 - e.g. an op that rejects detached inputs
                    if method == "fx":
                        raise ProfilerError(f"layer-by-layer run failed: {type(e).__name__}: {e}") from e
                    trace_error = f"layer-by-layer run failed: {type(e).__name__}: {e}"
                    with torch.no_grad():
                        bufs = dict(model.named_buffers())
                        for k, v in saved.items():
                            bufs[k].copy_(v)
        if layers_out is None:
            used = "hooks"
            with warnings.catch_warnings():
                layers_out = _profile_hooks(model, inputs, leaves, warmup, repeat, loss_fn, torch, clock)
            if len(layers_out) < 2:
                raise ProfilerError("no layer ran (no hooked module was called)")
    finally:
        for m, tr in modes.items():
            m.training = tr
        with torch.no_grad():
            bufs = dict(model.named_buffers())
            for k, v in saved.items():
                if k in bufs:
                    bufs[k].copy_(v)

    nodes, edges = [], []
    for i, lay in enumerate(layers_out):
        f = statistics.median(lay.fwd) * 1e3 if lay.fwd else 0.0
        b = statistics.median(lay.bwd) * 1e3 if lay.bwd else 0.0
        pbytes = _nbytes(lay.params)
        extra = {}
        if i:
            extra = {"name": lay.qualname or lay.desc, "kind": lay.kind,
                     "fwd_ms_min": min(lay.fwd) * 1e3 if lay.fwd else 0.0,
                     "bwd_ms_min": min(lay.bwd) * 1e3 if lay.bwd else 0.0,
                     "params": int(sum(p.numel() for p in lay.params))}
        nodes.append(Node(lay.desc, f, b, lay.act, pbytes, extra))
        if i:
            prods = lay.producers or [0]
            for p in prods:
                edges.append((p, i))
    dtype = None
    for p in model.parameters():
        dtype = str(p.dtype).replace("torch.", "")
        break
    if dtype is None and first:
        dtype = str(first[0].dtype).replace("torch.", "")
    from .. import __version__ as hpgo_version

    if device.type == "cuda":
        dev_name = torch.cuda.get_device_name(device)
    else:
        dev_name = f"CPU {_cpu_name()} ({torch.get_num_threads()} threads)"
    meta = {
        "model": name or type(model).__name__,
        "device": dev_name,
        "device_type": device.type,
        "dtype": dtype,
        "batch_size": batch_size,
        "method": f"measured (hpgo.profiler, {used})",
        "trace_error": trace_error,
        "warmup": warmup,
        "repeat": repeat,
        "statistic": "median",
        "param_count": int(sum(n.extra.get("params", 0) for n in nodes)),
        "input_shapes": [list(t.shape) for t in first],
        "versions": {"hpgo": hpgo_version, "torch": torch.__version__, "python": platform.python_version(),
                     "cuda": getattr(torch.version, "cuda", None)},
        "units": "graph.txt times in ms per mini-batch; sizes in bytes",
    }
    prof = Profile(nodes, edges, meta)
    prof.validate()
    return prof
