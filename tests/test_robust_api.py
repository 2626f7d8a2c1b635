"""Bad arguments to every public function of hpgo: zero, negative and huge
batch sizes, gbs smaller than pbs, seps not increasing, zero and 100,000
devices, wrong types, hostile objects.  Each gets the documented exception
(ValueError / TypeError / IndexError / OSError) with a message naming the
problem.  The hostile and huge cases run in a child process with a timeout
and an address-space limit, so a crash, a hang or a runaway allocation fails
the test instead of the test run."""
import functools
import os
from pathlib import Path

import pytest

import hpgo
from hpgo import _core, zoo

from bad_args_step import STEP_CASES
from robust_child import run_child

ROOT = Path(__file__).resolve().parents[1]
PROF = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")


@functools.lru_cache(maxsize=None)
def M():
    return hpgo.model_from_torch_graph(PROF, 1, 128)


@functools.lru_cache(maxsize=None)
def D():
    return hpgo.Devices(16, [8, 16])


def plan():
    return hpgo.AsyncOrchestrate(M(), D()).py_orchestrate()


ST = [hpgo.Stage(forward=1e-3, backward=2e-3)]
STATES = dict(ct=[1.0, 2.0], act=[1.0, 2.0], par=[1.0, 2.0], oa=[1.0, 1.0], preds=[[], [0]],
              labels=["a", "b"], pbs=1, gbs=1)


def states(**kw):
    return hpgo.model_from_states(**dict(STATES, **kw))


def setter(attr, value):
    m = M().normalized_copy(128)
    setattr(m, attr, value)


# (public name, call, exception, words of the message)
CASES = [
    # ---- pipeline layouts
    ("pipeline_split", lambda: hpgo.pipeline_split(0, 4), ValueError, "layers"),
    ("pipeline_split", lambda: hpgo.pipeline_split(8, 0), ValueError, "stages"),
    ("pipeline_split", lambda: hpgo.pipeline_split(8.0, 4), TypeError, "layers must be an int"),
    ("pipeline_split", lambda: hpgo.pipeline_split(8, 4, first=0), ValueError, "first"),
    ("pipeline_split", lambda: hpgo.pipeline_split(8, 4, first=True), TypeError, "first"),
    ("pipeline_split", lambda: hpgo.pipeline_split(4, 4, embedding_layer=True, loss_layer=True),
     ValueError, "evenly"),
    ("pipeline_split", lambda: hpgo.pipeline_split(6, 4, first=3, last=3), ValueError, "evenly"),
    ("pipeline_split", lambda: hpgo.pipeline_split(8, 3), ValueError, "evenly"),
    # ---- models
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, 0, 8), ValueError, "pbs"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, -1, 8), ValueError, "pbs"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, 1, 0), ValueError, "gbs"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, 1, -8), ValueError, "gbs"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, 1, 2**32), ValueError,
     "gbs must be between 0 and 4294967295"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, 1, 10**100), ValueError,
     "gbs"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, 1.0, 8), TypeError,
     "pbs must be an int"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, True, 8), TypeError,
     "pbs must be an int, not bool"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(PROF, 1, "8"), TypeError, "gbs"),
    ("model_from_torch_graph", lambda: hpgo.model_from_torch_graph(42, 1, 8), TypeError, "int"),
    ("Model", lambda: hpgo.Model(PROF, 0, 1), ValueError, "pbs"),
    ("Model", lambda: hpgo.Model(PROF), TypeError, "missing required argument"),
    ("Model", lambda: M().normalized_copy(0), ValueError, "bs"),
    ("Model", lambda: M().normalized_copy(-1), ValueError, "bs"),
    ("Model", lambda: M().normalized_copy(2**32), ValueError, "bs"),
    ("Model", lambda: M().normalized_copy(None), TypeError, "bs must be an int"),
    ("Model", lambda: M().ct(-1, 0), IndexError, "out of range"),
    ("Model", lambda: M().ct(0, 39), IndexError, "out of range"),
    ("Model", lambda: M().ac(0, 10**30), IndexError, "out of range"),
    ("Model", lambda: M().oa(2**63), IndexError, "out of range"),
    ("Model", lambda: M().ct(2**31, 0), IndexError, "out of range"),
    ("Model", lambda: M().preds(-2**63 - 1), IndexError, "out of range"),
    ("Model", lambda: M().pa("0", 0), TypeError, ""),
    ("Model", lambda: M().oa(39), IndexError, "out of range"),
    ("Model", lambda: M().preds(-1), IndexError, "out of range"),
    ("Model", lambda: setter("min_micro_batch_size", 0), ValueError, "min_micro_batch_size"),
    ("Model", lambda: setter("min_micro_batch_size", -1), ValueError, "min_micro_batch_size"),
    ("Model", lambda: setter("min_micro_batch_size", 2**32), ValueError, "min_micro_batch_size"),
    ("Model", lambda: setter("optimizer_memory_scaling", -1), ValueError,
     "optimizer_memory_scaling"),
    ("Model", lambda: setter("optimizer_memory_scaling", 1.5), TypeError,
     "optimizer_memory_scaling"),
    ("Model", lambda: setter("peak_activation_per_batch", float("nan")), ValueError,
     "peak_activation_per_batch"),
    ("Model", lambda: setter("peak_activation_per_batch", -1.0), ValueError,
     "peak_activation_per_batch"),
    ("Model", lambda: setter("peak_activation_per_batch", "x"), TypeError,
     "peak_activation_per_batch"),
    ("Model", lambda: setter("gbs", 3), AttributeError, "gbs"),
    ("model_from_states", lambda: states(ct=[]), ValueError, "need 1 to 10000 states"),
    ("model_from_states", lambda: states(ct=[1.0] * 10001), ValueError, "need 1 to 10000 states"),
    ("model_from_states", lambda: states(act=[1.0]), ValueError, "act has 1 items, expected 2"),
    ("model_from_states", lambda: states(ct=[1.0, float("nan")]), ValueError,
     "ct[1] is not finite"),
    ("model_from_states", lambda: states(ct=[1.0, float("inf")]), ValueError,
     "ct[1] is not finite"),
    ("model_from_states", lambda: states(ct=[1.0, -2.0]), ValueError, "ct[1] is negative"),
    ("model_from_states", lambda: states(ct=[0.0, 0.0]), ValueError, "all 0"),
    ("model_from_states", lambda: states(ct=[1e99, 2e99], gbs=100), ValueError,
     "more than the limit of 1e+100"),
    ("model_from_states", lambda: states(ct=None), TypeError, "ct must be a sequence of numbers"),
    ("model_from_states", lambda: states(ct=["1", "2"]), TypeError, "ct[0] must be a number"),
    ("model_from_states", lambda: states(preds=[[], [1]]), ValueError,
     "preds[1] must be strictly ascending states before 1"),
    ("model_from_states", lambda: states(preds=[[], [0, 0]]), ValueError, "preds[1] has 2 items"),
    ("model_from_states", lambda: states(preds=[[]]), ValueError, "preds and labels must have 2"),
    ("model_from_states", lambda: states(preds=[[], ["0"]]), TypeError, "preds entry"),
    ("model_from_states", lambda: states(labels=["a", 2]), TypeError, "labels[1] must be str"),
    ("model_from_states", lambda: states(pbs=0), ValueError, "pbs"),
    ("model_from_states", lambda: states(gbs=-1), ValueError, "gbs"),
    # ---- devices
    ("Devices", lambda: hpgo.Devices(0, [0]), ValueError, ">= 1"),
    ("Devices", lambda: hpgo.Devices(-8, [-8]), ValueError, "number of GPUs must be >= 1"),
    ("Devices", lambda: hpgo.Devices(16, []), ValueError, "seps must not be empty"),
    ("Devices", lambda: hpgo.Devices(16, [16, 8]), ValueError, "strictly increasing"),
    ("Devices", lambda: hpgo.Devices(16, [8, 8, 16]), ValueError, "strictly increasing"),
    ("Devices", lambda: hpgo.Devices(16, [0, 16]), ValueError, "seps[0]"),
    ("Devices", lambda: hpgo.Devices(16, [8, 12]), ValueError,
     "the last of seps (12) must equal the number of GPUs (16)"),
    ("Devices", lambda: hpgo.Devices(100000, [100000]), ValueError,
     "100000 GPUs is more than the limit of 1024"),
    ("Devices", lambda: hpgo.Devices(1025, list(range(1, 1026))), ValueError, "limit of 1024"),
    ("Devices", lambda: hpgo.Devices(16, [8, 2**40]), ValueError,
     "seps item must be between"),
    ("Devices", lambda: hpgo.Devices(16, [8.0, 16]), TypeError, "seps item must be an int"),
    ("Devices", lambda: hpgo.Devices(16, None), TypeError, "seps must be a sequence"),
    ("Devices", lambda: hpgo.Devices("16", [16]), TypeError, ""),
    ("devices_from_seps", lambda: hpgo.devices_from_seps([]), ValueError, "empty"),
    ("devices_from_seps", lambda: hpgo.devices_from_seps([4, 2]), ValueError, "increasing"),
    ("devices_from_seps", lambda: hpgo.devices_from_seps([100000]), ValueError, "limit of 1024"),
    ("devices_from_seps", lambda: hpgo.devices_from_seps(8), TypeError, "sequence"),
    # ---- planner
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(None, D()), TypeError, "hpgo.Model"),
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), [8, 16]), TypeError, "hpgo.Devices"),
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), D(), threads=-1), ValueError,
     "threads must be >= 0"),
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), D(), threads="2"), TypeError, ""),
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), D(), bogus=1), TypeError, "bogus"),
    ("conductor_from_torch_graph_and_seps",
     lambda: hpgo.conductor_from_torch_graph_and_seps(PROF, 1, 128, []), ValueError, "empty"),
    ("conductor_from_torch_graph_and_seps",
     lambda: hpgo.conductor_from_torch_graph_and_seps(PROF, 0, 128, [8]), ValueError, "pbs"),
    ("conductor_from_torch_graph_and_seps",
     lambda: hpgo.conductor_from_torch_graph_and_seps(PROF, 1, 0, [8]), ValueError, "gbs"),
    ("conductor_from_torch_graph_and_seps",
     lambda: hpgo.conductor_from_torch_graph_and_seps(PROF, 1, 128, [8, 4]), ValueError,
     "increasing"),
    ("conductor_from_torch_graph_and_seps",
     lambda: hpgo.conductor_from_torch_graph_and_seps(PROF, 1, 128, [100000]), ValueError,
     "limit of 1024"),
    ("conductor_from_torch_graph_and_seps",
     lambda: hpgo.conductor_from_torch_graph_and_seps(PROF + ".missing", 1, 128, [8]),
     FileNotFoundError, "no such file"),
] + [
    (name, functools.partial(getattr(hpgo, name), *args), exc, words)
    for name in ("dp_speedup", "dp_p3_speedup", "dp_cur_ga_p3_speedup",
                 "dp_cur_ga_inner_overlap_speedup", "dp_opt_ga_p3_speedup",
                 "current_ga_iter_size", "optimal_ga_iter_size")
    for args, exc, words in (((), TypeError, "takes 2 arguments"),
                             ((None, None), TypeError, "hpgo.Devices"),
                             (("devices", "model"), TypeError, "hpgo.Devices"),
                             ((D(), D()), TypeError, "hpgo.Model"))
] + [
    # ---- sweep
    ("sweep", lambda: hpgo.sweep(PROF, 1, [0], [8, 16]), ValueError, "must be >= 1, got 0"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [-1], [8, 16]), ValueError, "gbs"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [2**32], [8, 16]), ValueError, "gbs"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [], [8, 16]), ValueError, "at least one gbs"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, 8.5, [8]), TypeError, "gbs must be an int or a sequence"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [True], [8]), TypeError, "not bool"),
    ("sweep", lambda: hpgo.sweep(PROF, 0, [8], [8]), ValueError, "pbs"),
    ("sweep", lambda: hpgo.sweep(M(), 0, [8], [8]), ValueError, "pbs"),
    ("sweep", lambda: hpgo.sweep(M(), "1", [8], [8]), TypeError, "pbs must be an int"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], []), ValueError, "seps must not be empty"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], [[8, 16], []]), ValueError,
     "seps must not be empty"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], [16, 8]), ValueError, "increasing"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], [100000]), ValueError, "limit of 1024"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], "8,16"), TypeError, "seps"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], [8], threads=-1), ValueError, "threads"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], [8], threads=1.5), TypeError, "threads"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], [8], min_micro_batch_size=0), ValueError,
     "min_micro_batch_size"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, [8], [8], peak_activation_per_batch=float("inf")),
     ValueError, "peak_activation_per_batch"),
    ("sweep", lambda: hpgo.sweep(PROF, 1, list(range(1, 10**6 + 2)), [8]), ValueError,
     "too many sweep cases"),
    # ---- simulators
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline([], 4), ValueError, "at least one stage"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, 0), ValueError, "microbatches"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, -3), ValueError, "microbatches"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, 2**20 + 1), ValueError,
     "exceed the limit of 1048576"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, 4.0), TypeError, "microbatches"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, 4, "zigzag"), ValueError,
     "unknown schedule"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST * 4097, 1), ValueError,
     "4097 stages exceed the limit of 4096"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(1, 1, replicas=100000)], 1), ValueError, "more than 1024 GPUs"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(1, 1, replicas=0)], 1), ValueError, "replicas"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(1, 1, gpus=(0, 0))], 1), ValueError, "GPU 0 appears more than once"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(1, 1, gpus=())], 1), ValueError, "at least one GPU"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(1, 1, gpus=(-1,))], 1), ValueError, "GPU id"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(1, 1, gpus=(5000,))], 1), ValueError, "outside [0, 1024)"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(float("nan"), 1)], 1), ValueError, "finite"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage(-1.0, 1)], 1), ValueError, ">= 0"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [hpgo.Stage("1", 1)], 1), TypeError, "must be a number"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline([{"forward": 1}], 1), TypeError,
     "backward"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(
        [{"forward": 1, "backward": 1, "x": 0}], 1), ValueError, "unknown keys"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, 4, link_bandwidth=0), ValueError,
     "link_bandwidth"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, 4, link_latency=-1), ValueError,
     "link_latency"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST * 64, 2**18), ValueError,
     "timeline would have"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST * 1024, 2**20, timeline=False),
     ValueError, "limit of 2^26"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), None), TypeError, "plan must be"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), (1.0, [])), ValueError, "no stages"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 38, 1)]), TypeError, "plan stage 0"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 38, 1, [0])], rp=0), ValueError, "rp"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 38, 1, [0])], rp=10**6), ValueError,
     "0 micro-batches"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 99, 1, [0])]), IndexError,
     "out of range"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(5, 2, 1, [0])]), ValueError,
     "not 0"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 20, 1, [0]), (19, 38, 1, [1])]),
     ValueError, "stages overlap"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 20, 1, [0]), (21, 38, 1, [1])]),
     ValueError, "in no stage"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 20, 1, [0]), (20, 19, 1, [1])]),
     ValueError, "covers no state"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 30, 1, [0])]), ValueError,
     "model has 39"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 38, 2, [0])]), ValueError,
     "not a multiple"),
    ("simulate_plan", lambda: hpgo.simulate_plan(object(), [(0, 38, 1, [0])]), TypeError,
     "hpgo.Model-like"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 38, 1, [0])], forward_fraction=1.5),
     ValueError, "forward_fraction"),
    ("simulate_plan", lambda: hpgo.simulate_plan(M(), [(0, 38, 1, [0])], schedule=1), TypeError,
     "schedule"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(0, 8, 2), ValueError, "batch_size must be >= 1"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, -8, 2), ValueError, "width"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 8, 0), ValueError, "layers"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 8, 2, dp=0), ValueError, "dp"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(1024, 1024, 2, dp=100000), ValueError,
     "exceed the limit of 1024"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 2**21, 2), ValueError, "widths above"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(2**40, 8, 2), ValueError, "too large"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 8, 2**17), ValueError, "layers"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 9, 2, tp=2), ValueError, "multiple of tp"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 8, 3, pp=2), ValueError, "pp"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(6, 8, 2, dp=4), ValueError, "multiple"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 8, 2, cost_model="x"), ValueError,
     "unknown cost_model"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8, 8, 2, devices_bandwidth_gbps=0), ValueError,
     "devices_bandwidth_gbps"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(8.0, 8, 2), TypeError, "batch_size must be an int"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(2**20, 2**20, 2**16, pp=1024,
                                               microbatches=2**20, timeline=False),
     ValueError, "operations (limit 4e9)"),
    ("simulate_transformer", lambda: hpgo.simulate_transformer(8, 0, 64, 8, 2), ValueError,
     "seq_len"),
    ("simulate_transformer", lambda: hpgo.simulate_transformer(8, 16, 64, 7, 2), ValueError,
     "multiple of heads"),
    ("simulate_transformer", lambda: hpgo.simulate_transformer(8, 2**17, 64, 8, 2), ValueError,
     "seq_len above"),
    ("simulate_transformer", lambda: hpgo.simulate_transformer(2**20, 2**16, 64, 8, 2),
     ValueError, "batch_size x seq_len"),
    ("simulate_transformer", lambda: hpgo.simulate_transformer(8, 16, 64, 8, 2, tp=3),
     ValueError, "tp"),
    ("simulate_mlp_batch", lambda: hpgo.simulate_mlp_batch(None), TypeError, "configs"),
    ("simulate_mlp_batch", lambda: hpgo.simulate_mlp_batch([1]), TypeError, "mapping"),
    ("simulate_mlp_batch", lambda: hpgo.simulate_mlp_batch([{}]), TypeError,
     "lacks batch_size, width, layers"),
    ("simulate_mlp_batch", lambda: hpgo.simulate_mlp_batch(
        [dict(batch_size=8, width=8, layers=2, foo=1)]), TypeError, "unknown keys ['foo']"),
    ("simulate_mlp_batch", lambda: hpgo.simulate_mlp_batch(
        [dict(batch_size=8, width=8, layers=2, dp=0)]), ValueError, "configuration 0: dp"),
    ("simulate_mlp_batch", lambda: hpgo.simulate_mlp_batch([], threads=-1), ValueError,
     "threads"),
    ("grid_search", lambda: hpgo.grid_search(0, 8, 2), ValueError, "batch_size"),
    ("grid_search", lambda: hpgo.grid_search(64, 8, 2, devices=4), TypeError, "devices"),
    ("grid_search", lambda: hpgo.grid_search(64, 8, 2, devices=[0]), ValueError, "device count"),
    ("grid_search", lambda: hpgo.grid_search(64, 8, 2, devices=[100000]), ValueError,
     "between 1 and 1024"),
    ("grid_search", lambda: hpgo.grid_search(64, 8, 2, devices=list(range(1, 5000))), ValueError,
     "too many values"),
    ("grid_search", lambda: hpgo.grid_search(64, 8, 2, microbatches=[0]), ValueError,
     "microbatches"),
    ("grid_search", lambda: hpgo.grid_search(64, 8, 2, threads=-1), ValueError, "threads"),
    ("grid_search", lambda: hpgo.grid_search(64, 8, 2, model="cnn"), ValueError, "unknown model"),
    ("distir_figure3", lambda: hpgo.distir_figure3(cost_model="x"), ValueError, "cost_model"),
    ("distir_figure3", lambda: hpgo.distir_figure3(devices=[0]), ValueError, "device"),
    ("distir_figure3", lambda: hpgo.distir_figure3(devices=5), TypeError, "devices"),
    ("distir_figure3", lambda: hpgo.distir_figure3(pp_batch=0), ValueError, "pp_batch"),
    ("distir_figure3", lambda: hpgo.distir_figure3(width=0), ValueError, "width"),
    ("distir_figure3", lambda: hpgo.distir_figure3(threads=-2), ValueError, "threads"),
    # ---- HPGO's submodules
    ("Utils", lambda: hpgo.Utils.pipeline_length_recursive([], [], [], 1), ValueError,
     "at least one"),
    ("Utils", lambda: hpgo.Utils.pipeline_length_recursive(None, None, None, 1), TypeError,
     "F must be a sequence"),
    ("Utils", lambda: hpgo.Utils.pipeline_length_recursive([1.0], [1.0, 2.0], [0.0], 1),
     ValueError, "same length"),
    ("Utils", lambda: hpgo.Utils.pipeline_length_recursive([1.0], [1.0], [0.0], 0), ValueError,
     "M must be >= 1"),
    ("Utils", lambda: hpgo.Utils.pipeline_length_recursive([float("nan")], [1.0], [0.0], 1),
     ValueError, "finite"),
    ("Utils", lambda: hpgo.Utils.pipeline_length_recursive([1.0], [1.0], [0.0], 10**7),
     ValueError, "exceeds the limit of 1,000,000"),
    ("Layerwise", lambda: hpgo.Layerwise.Devices(0, []), ValueError, "empty"),
    ("Layerwise", lambda: hpgo.Layerwise.model_from_torch_graph(PROF, 0, 1), ValueError, "pbs"),
    # ---- results
    ("SimulationResult", lambda: hpgo.simulate_pipeline(ST, 2).to_chrome_trace(
        "/nonexistent-dir/x/trace.json"), OSError, ""),
    ("SweepResult", lambda: hpgo.sweep(PROF, 1, [8], [8]).to_csv("/nonexistent-dir/x/s.csv"),
     OSError, ""),
    # ---- zoo
    ("zoo", lambda: zoo.profile("nope"), ValueError, "unknown zoo model"),
    ("zoo", lambda: zoo.profile(None), TypeError, "model name must be a string"),
    ("zoo", lambda: zoo.profile("resnet50", device="TPU"), ValueError, "unknown device"),
    ("zoo", lambda: zoo.profile("resnet50", batch_size=0), ValueError, "batch size"),
    ("zoo", lambda: zoo.profile("resnet50", batch_size=-3), ValueError, "batch size"),
    ("zoo", lambda: zoo.profile("resnet50", batch_size=2.5), ValueError, "batch size"),
    ("zoo", lambda: zoo.profile("resnet50", dtype="fp7"), ValueError, "unknown dtype"),
    ("zoo", lambda: zoo.profile("gpt", layers=0), ValueError, "layers"),
    ("zoo", lambda: zoo.profile("gpt", layers=True), TypeError, "layers must be an int"),
    ("zoo", lambda: zoo.profile("gpt", hidden=64, heads=7), ValueError, "multiple of heads"),
    ("zoo", lambda: zoo.build("gpt", wings=2), ValueError, "unknown option"),
    ("zoo", lambda: zoo.param_count("nope"), ValueError, "unknown zoo model"),
    # ---- plans as records (hpgo.plan)
    ("best_plan", lambda: hpgo.best_plan(PROF, 1, 0, [8, 16]), ValueError, "gbs"),
    ("best_plan", lambda: hpgo.best_plan(PROF, 1, 128, [16, 8]), ValueError, "increasing"),
    ("candidate_plans", lambda: hpgo.candidate_plans(PROF, 0, 128, [8, 16]), ValueError, "pbs"),
    ("candidate_plans", lambda: hpgo.candidate_plans(PROF, 1, "128", [8, 16]), TypeError, "gbs"),
    ("Plan", lambda: hpgo.Plan.from_json("{not json"), ValueError, "invalid JSON"),
    ("Plan", lambda: hpgo.Plan.from_dict({"speedup": 1}), ValueError, "not an hpgo plan"),
    ("Plan", lambda: hpgo.Plan.load("/nonexistent/plan.json"), FileNotFoundError, ""),
    ("PlanList", lambda: hpgo.PlanList().best(), ValueError, "no plan"),
    ("PlanStage", lambda: hpgo.PlanStage(), TypeError, "missing"),
    # ---- DynPipe re-planning (hpgo.dynpipe)
    ("LayerChain", lambda: hpgo.replan(hpgo.LayerChain(forward=[1e-3] * 4, backward=[-1.0] * 4,
                                                       comm=[0.0] * 4, param_bytes=[0.0] * 4),
                                       current=[2, 2]), ValueError, "backward"),
    ("replan", lambda: hpgo.replan([1e-3] * 10, [2e-3] * 10, current=[5, 4], slowdown=[1, 1]),
     ValueError, "current"),
    ("replan", lambda: hpgo.replan([1e-3] * 10, [2e-3] * 10, current=[5, 5], slowdown=[-1, 1]),
     ValueError, "slowdown"),
    ("replan", lambda: hpgo.replan([1e-3] * 10, [2e-3] * 10, current=[5, 5], method="bogus"),
     ValueError, "method"),
    ("replan", lambda: hpgo.replan(None, current=[5, 5]), TypeError, "LayerChain"),
    ("ReplanResult", lambda: hpgo.ReplanResult(), TypeError, "missing"),
    ("pipeline_score", lambda: hpgo.pipeline_score([1.0], [2.0, 3.0]), ValueError, "backward"),
    ("split_batch", lambda: hpgo.split_batch(-5, [1, 1]), ValueError, "batch"),
    ("split_batch", lambda: hpgo.split_batch(10, [0, 1]), ValueError, "weights"),
    ("slice_table", lambda: hpgo.slice_table([1, 2], [4]), ValueError, "receivers"),
    ("StragglerDetector", lambda: hpgo.StragglerDetector(n_stages=0), ValueError, "n_stages"),
    # ---- HAP (hpgo.hetero)
    ("hap_cluster", lambda: hpgo.hap_cluster("V100", -2), ValueError, "V100"),
    ("hap_cluster", lambda: hpgo.hap_cluster("XYZ", 2), ValueError, "unknown device"),
    ("hap_plan", lambda: hpgo.hap_plan([], hpgo.hap_cluster("V100", 2)), ValueError, "no layers"),
    ("hap_compare", lambda: hpgo.hap_compare([], None), TypeError, "cluster"),
    ("HapLayer", lambda: hpgo.HapLayer(kind="bogus", m=1, k=1, n=1), ValueError, "kind"),
    ("HapLayer", lambda: hpgo.HapLayer(kind="linear", m=-1, k=1, n=1), ValueError, "m must be"),
    ("HapPlan", lambda: hpgo.HapPlan(), TypeError, "missing"),
    # ---- one conversion policy (issue 16): integers beyond the C types are a
    # ValueError naming the argument and its range, never a bare OverflowError
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), D(), threads=2**31), ValueError,
     "threads must be between 0 and 2147483647"),
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), D(), max_memory=2**63), ValueError,
     "max_memory (bytes) must be between 0 and"),
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), D(), max_memory=-1), ValueError,
     "max_memory (bytes) must be >= 0"),
    ("sweep", lambda: hpgo.sweep(M(), 1, [128], [8, 16], threads=2**63), ValueError,
     "threads must be between 0 and 2147483647"),
    ("sweep", lambda: hpgo.sweep(M(), 10**400, [128], [8, 16]), ValueError,
     "pbs must be between 1 and 4294967295"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline(ST, 2**31), ValueError,
     "microbatches must be between 1 and 2147483647"),
    ("simulate_pipeline", lambda: hpgo.simulate_pipeline([hpgo.Stage(10**400, 1.0)], 2),
     ValueError, "forward is too large for a double"),
    ("simulate_mlp", lambda: hpgo.simulate_mlp(2**63, 8, 2), ValueError, "batch_size"),
    ("grid_search", lambda: hpgo.grid_search(256, 64, 4, devices=[1], threads=2**31),
     ValueError, "threads (0 = all cores) must be between 0 and 2147483647"),
    ("replan", lambda: hpgo.replan([1.0] * 4, [1.0] * 4, current=[2, 2], top_k=2**31),
     ValueError, "top_k must be between 1 and 2147483647"),
    ("replan", lambda: hpgo.replan([1.0] * 4, [1.0] * 4, current=[2, 2], microbatches=2**63),
     ValueError, "microbatches must be between 1 and 2147483647"),
    ("replan", lambda: hpgo.replan([10**400] * 4, [1.0] * 4, current=[2, 2]), ValueError,
     "forward[0] is too large for a double"),
    ("split_batch", lambda: hpgo.split_batch(2**63, [1.0]), ValueError,
     "batch must be between 0 and 9223372036854775807"),
    ("pipeline_score", lambda: hpgo.pipeline_score([1.0], [1.0], microbatches=2**31),
     ValueError, "microbatches must be between 1 and 2147483647"),
    ("StragglerDetector", lambda: hpgo.StragglerDetector(2**31), ValueError,
     "n_stages must be between 1 and 2147483647"),
    ("StragglerDetector", lambda: hpgo.StragglerDetector(2, window=2**63), ValueError,
     "window must be between 1 and 2147483647"),
    ("slice_table", lambda: hpgo.slice_table([2**63], [2**63]), ValueError, "send[0]"),
    ("hap_cluster", lambda: hpgo.hap_cluster("V100", 2**63), ValueError,
     "HPGO_HAP_MAX_DEVICES"),
    ("Utils", lambda: hpgo.Utils.pipeline_length_recursive([1.0], [1.0], [0.0], 2**63),
     ValueError, "exceeds the limit"),
    ("Model", lambda: setter("peak_activation_per_batch", 10**400), ValueError,
     "peak_activation_per_batch is too large for a double"),
    ("model_from_states", lambda: states(ct=[10**400, 2.0]), ValueError,
     "ct[0] is too large for a double"),
    ("Model", lambda: M().ct(0, "1"), TypeError, "column c must be an int"),
    ("AsyncOrchestrate", lambda: hpgo.AsyncOrchestrate(M(), D(), timeout=10**400), ValueError,
     "timeout (seconds or None) is too large"),
]
CASES += STEP_CASES

# Public names that take no arguments worth breaking (exception classes, result
# records filled by hpgo itself).
NOT_CALLABLE_WITH_INPUT = {"HpgoError", "PlanningError", "Candidate", "Layer", "Stage",
                           "SweepRow"}


def test_every_public_name_has_bad_argument_cases():
    covered = {name for name, *_ in CASES}
    missing = set(hpgo.__all__) - covered - NOT_CALLABLE_WITH_INPUT
    assert not missing, f"public names without a bad-argument case: {sorted(missing)}"


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_argument(case):
    name, call, exc, words = CASES[case]
    with pytest.raises(exc) as ei:
        call()
    msg = str(ei.value)
    assert words in msg, msg
    assert len(msg) < 2000


def test_gbs_limits_plan_and_pbs_larger_than_gbs():
    # the whole uint32 range of batch sizes plans
    top = hpgo.AsyncOrchestrate(M().normalized_copy(2**32 - 1), D()).py_orchestrate()
    assert top[0] > 0 and top[1]
    # pbs > gbs (a profile at batch 128 planned for batch 1) is a smaller problem, not an error
    small = hpgo.conductor_from_torch_graph_and_seps(PROF, 128, 1, [8, 16]).py_orchestrate()
    assert small[0] > 0 and small[1]
    assert hpgo.current_ga_iter_size(D(), M().normalized_copy(2**32 - 1)) >= 1


def test_nothing_the_caller_passed_is_modified():
    seps = [4, 8]
    gbs = [8, 16]
    hpgo.sweep(PROF, 1, gbs, seps)
    hpgo.Devices(8, seps)
    assert seps == [4, 8] and gbs == [8, 16]
    kw = {k: (list(v) if isinstance(v, list) else v) for k, v in STATES.items()}
    kw["preds"] = [list(p) for p in STATES["preds"]]
    hpgo.model_from_states(**kw)
    assert kw["ct"] == STATES["ct"] and kw["preds"] == STATES["preds"]
    stages = [hpgo.Stage(1e-3, 2e-3, gpus=(0, 1)), {"forward": 1e-3, "backward": 1e-3}]
    before = repr(stages)
    hpgo.simulate_pipeline(stages, 4)
    assert repr(stages) == before
    cfgs = [dict(batch_size=8, width=8, layers=2, timeline=True)]
    hpgo.simulate_mlp_batch(cfgs)
    assert cfgs == [dict(batch_size=8, width=8, layers=2, timeline=True)]
    m = M().normalized_copy(64)
    m.min_micro_batch_size = 2
    hpgo.sweep(m, 64, [128], [8], min_micro_batch_size=4)
    assert m.min_micro_batch_size == 2 and m.gbs == 64


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a child process")
def test_hostile_objects_in_a_child():
    """Objects whose __len__, __float__, __index__ or __iter__ lie, raise or
    mutate what is being read: no crash (model_from_states crashed before the
    glue copied its sequences), only exceptions or a correct result."""
    child = run_child("""
        import hpgo
        out = {}
        def run(name, f):
            try:
                f()
                out[name] = 'ok'
            except (ValueError, TypeError, OverflowError, IndexError, ZeroDivisionError,
                    RuntimeError) as e:
                out[name] = type(e).__name__
        ct = []
        class ShrinkingFloat(int):
            def __float__(self):
                ct.clear()
                return 1.0
        ct.extend([ShrinkingFloat(1), 2.0, 3.0])
        run('float_clears_list', lambda: hpgo.model_from_states(
            ct, [1.0] * 3, [1.0] * 3, [1.0] * 3, [[], [0], [1]], ['a', 'b', 'c'], 1, 1))
        class Liar(list):
            def __len__(self):
                return 0
        run('lying_len_preds', lambda: hpgo.model_from_states(
            [1.0, 2.0, 3.0], [1.0] * 3, [1.0] * 3, [1.0] * 3, [[], [0], Liar([0, 1])],
            ['a', 'b', 'c'], 1, 1))
        labels = ['a', 'b', 'c']
        class Dropper(list):
            def __iter__(self):
                labels.clear()
                return list.__iter__(self)
        run('iter_drops_labels', lambda: hpgo.model_from_states(
            [1.0, 2.0, 3.0], [1.0] * 3, [1.0] * 3, [1.0] * 3, [[], Dropper([0]), [1]],
            labels, 1, 1))
        class BadIndex(int):
            def __index__(self):
                raise RuntimeError('no')
        run('bad_index_seps', lambda: hpgo.Devices(8, [BadIndex(4), 8]))
        run('generator_gbs', lambda: hpgo.sweep('profiles/transformer36-v100/graph.txt', 1,
                                              (g for g in [8, 16]), [8]))
        class LyingGpus(tuple):
            def __len__(self):
                return 1000
        run('lying_gpus', lambda: hpgo.simulate_pipeline(
            [hpgo.Stage(1e-3, 1e-3, gpus=LyingGpus((0, 1)))], 2))
        run('huge_int', lambda: hpgo.Devices(10**100, [10**100]))
        run('float_subclass', lambda: hpgo.simulate_pipeline(
            [hpgo.Stage(type('F', (float,), {})(1e-3), 1e-3)], 2))
        result['out'] = out
        """, timeout=120, address_space_mb=4096)
    assert child.returncode == 0, child.describe()
    out = child.result["out"]
    assert out["float_clears_list"] in ("ok", "ValueError")
    assert out["lying_len_preds"] == "ValueError"
    assert out["iter_drops_labels"] in ("ok", "ValueError")
    assert out["bad_index_seps"] in ("ok", "RuntimeError", "TypeError")
    assert out["generator_gbs"] == "ok"
    assert out["lying_gpus"] in ("ok", "ValueError")
    assert out["huge_int"] == "ValueError"
    assert out["float_subclass"] == "ok"


def test_profiler_bad_arguments():
    torch = pytest.importorskip("torch")
    from hpgo import profiler

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    cases = [
        (lambda: profiler.profile_module("mlp", x), TypeError, "torch.nn.Module"),
        (lambda: profiler.profile_module(model, ()), TypeError, "non-empty tuple"),
        (lambda: profiler.profile_module(model, None), TypeError, "inputs"),
        (lambda: profiler.profile_module(model, x, warmup=-1), ValueError, "warmup"),
        (lambda: profiler.profile_module(model, x, repeat=0), ValueError, "repeat"),
        (lambda: profiler.profile_module(model, x, repeat=10**9), ValueError, "at most 10,000"),
        (lambda: profiler.profile_module(model, x, warmup=2.5), ValueError, "warmup"),
        (lambda: profiler.profile_module(model, x, method="magic"), ValueError, "method"),
        (lambda: profiler.profile_module(model, x, loss_fn=3), TypeError, "loss_fn"),
        (lambda: profiler.profile_module(model, x, layers=["nope"]), ValueError, "nope"),
        (lambda: profiler.profile_module(model, x, batch_size=0), ValueError, "batch_size"),
        (lambda: profiler.profile_module(model, x, batch_size=-2), ValueError, "batch_size"),
    ]
    for call, exc, words in cases:
        with pytest.raises(exc) as ei:
            call()
        assert words in str(ei.value), str(ei.value)
    # the model is left as it was
    assert model.training and all(p.grad is None for p in model.parameters())


def test_out_of_range_ints_agree_in_kind():
    """A state index past the model is an IndexError however far past it is:
    oa(2**63) and oa(39) agree (issue 16)."""
    m = M()
    for bad in (39, 2**31, 2**63, 10**400, -1, -2**63 - 1):
        with pytest.raises(IndexError):
            m.oa(bad)
        with pytest.raises(IndexError):
            m.ct(0, bad)
        with pytest.raises(IndexError):
            m.preds(bad)


def test_numpy_scalars_are_accepted_everywhere():
    """operator.index for integers and float() for reals: NumPy integer and
    float scalars work wherever an int or a number does."""
    from optional_deps import need
    np = need("numpy")
    i32, i64, u16, f32, f64 = np.int32, np.int64, np.uint16, np.float32, np.float64
    m = hpgo.model_from_torch_graph(PROF, i64(1), i32(128))
    assert m.gbs == 128
    m2 = m.normalized_copy(u16(64))
    m2.min_micro_batch_size = i64(2)
    m2.optimizer_memory_scaling = i32(3)
    m2.peak_activation_per_batch = f32(1e6)
    assert (m2.gbs, m2.min_micro_batch_size, m2.optimizer_memory_scaling) == (64, 2, 3)
    assert m.ct(i64(0), i32(5)) == m.ct(0, 5) and m.oa(i64(3)) == m.oa(3)
    assert m.preds(np.int8(4)) == m.preds(4)
    d = hpgo.Devices(i64(16), [i32(8), i64(16)])
    ref = hpgo.AsyncOrchestrate(m, hpgo.Devices(16, [8, 16])).py_orchestrate()
    assert hpgo.AsyncOrchestrate(m, d, threads=i64(2), max_memory=i64(2**29),
                                 timeout=f32(60)).py_orchestrate() == ref
    assert hpgo.devices_from_seps([i64(8), i64(16)]).seps == [8, 16]
    rows = hpgo.sweep(m, i64(128), i32(256), [i64(8), i64(16)], threads=i32(1))
    assert rows == hpgo.sweep(m, 128, 256, [8, 16], threads=1)
    assert hpgo.best_plan(PROF, i64(1), i64(128), [8, 16]).speedup == ref[0]
    st = [hpgo.Stage(f32(1e-3), f64(2e-3), send_bytes=i64(10**6), replicas=i64(2))] * 2
    r = hpgo.simulate_pipeline(st, i64(8), link_bandwidth=f32(1e10))
    assert r.iteration_time == pytest.approx(hpgo.simulate_pipeline(
        [hpgo.Stage(float(f32(1e-3)), 2e-3, send_bytes=1e6, replicas=2)] * 2, 8,
        link_bandwidth=float(f32(1e10))).iteration_time)
    assert hpgo.simulate_mlp(i64(256), i32(64), i64(2), dp=i64(2)).iteration_time > 0
    assert hpgo.grid_search(i64(256), i64(64), i64(4), devices=[i64(1), i64(2)],
                            threads=i64(1)) == hpgo.grid_search(256, 64, 4, devices=[1, 2],
                                                                threads=1)
    rp = hpgo.replan([f32(1.0)] * 8, np.array([2.0] * 8), current=np.array([2, 2, 2, 2]),
                     slowdown=[f64(1), f32(2), 1, 1], top_k=i64(2), microbatches=i32(99),
                     bandwidth=f32(1e9))
    assert rp == hpgo.replan([1.0] * 8, [2.0] * 8, current=[2, 2, 2, 2],
                             slowdown=[1, 2, 1, 1])
    assert hpgo.split_batch(i64(64), [f32(1.0), f64(0.5)]) == hpgo.split_batch(64, [1.0, 0.5])
    assert hpgo.slice_table([i64(3), i32(5)], [4, 4]) == hpgo.slice_table([3, 5], [4, 4])
    assert hpgo.pipeline_score([f32(1.0)], [f64(2.0)], microbatches=i64(9)) == \
        hpgo.pipeline_score([1.0], [2.0], microbatches=9)
    assert hpgo.StragglerDetector(i64(2), window=i32(2)).feed([[f32(1.0), 1.0]] * 4) == []
    assert hpgo.hap_cluster("V100", i64(2)).n_devices == 2
    assert zoo.build("gpt", batch_size=i64(2)).n == 2
    assert hpgo.Utils.pipeline_length_recursive([f32(1.0)], [1.0], [0.0], i64(2)) == \
        hpgo.Utils.pipeline_length_recursive([1.0], [1.0], [0.0], 2)
