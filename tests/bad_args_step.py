"""Bad-argument cases of the training-step API (hpgo.Cluster, hpgo.transformer,
hpgo.ParallelPlan, hpgo.simulate ...), merged into test_robust_api.CASES so
that every public name keeps a case."""
import hpgo

_H100 = hpgo.Cluster.preset("dgx-h100")


def _level(**kw):
    return hpgo.Cluster("x", _H100.gpu, (hpgo.Level(**kw),))


STEP_CASES = [
    ("Cluster", lambda: hpgo.Cluster.preset("nope"), ValueError, "unknown cluster preset"),
    ("Cluster", lambda: hpgo.Cluster.preset("dgx-h100", nodes=-1), ValueError, "nodes"),
    ("Cluster", lambda: hpgo.Cluster.preset("dgx-h100", nodes=2.0), TypeError, "nodes must be an int"),
    ("Cluster", lambda: hpgo.Cluster("x", "gpu", ()), TypeError, "gpu"),
    ("GPU", lambda: _H100.with_gpu(bf16_flops=0), ValueError, "bf16"),
    ("GPU", lambda: _H100.with_gpu(matrix_efficiency=((1.0, 0.5),)), ValueError, "last step"),
    ("Level", lambda: _level(size=0, bandwidth=1e9), ValueError, "size"),
    ("Level", lambda: _level(size=8, bandwidth=1e9, efficiency=2.0), ValueError, "efficiency"),
    ("Transformer", lambda: hpgo.Transformer(hidden=10, ffn=1, heads=3, layers=1, seq=1, vocab=1),
     ValueError, "head_dim"),
    ("transformer", lambda: hpgo.transformer(3), TypeError, "preset must be a str"),
    ("ParallelPlan", lambda: hpgo.ParallelPlan(global_batch=0), ValueError, "global_batch"),
    ("ParallelPlan", lambda: hpgo.ParallelPlan(global_batch=8, tp=2**40 + 1), ValueError, "tp"),
    ("StageGroup", lambda: hpgo.StageGroup(layers=(4, 2)), ValueError, "hold no layer"),
    ("StageGroup", lambda: hpgo.StageGroup(layers=(0, 4), dp=2, shares=(0.9, 0.9)), ValueError,
     "sum to 1"),
    ("ParallelPlan", lambda: hpgo.ParallelPlan(global_batch=8, tp=2, stages=[
        hpgo.StageGroup(layers=(0, 4))]), ValueError, "with stages, tp must be 1"),
    ("ProfiledModel", lambda: hpgo.ProfiledModel("x", 1, (1.0,), (), (), (), ()), ValueError,
     "equally long"),
    ("profile_model", lambda: hpgo.profile_model("/nonexistent/graph.txt", 1), FileNotFoundError, ""),
    ("model_id", lambda: hpgo.model_id("gpt3"), TypeError, "not a model"),
    ("simulate", lambda: hpgo.simulate("gpt3-175b", "dgx-h100", hpgo.ParallelPlan(global_batch=8),
                                       precision="int4"), ValueError, "precision"),
    ("StepResult", lambda: hpgo.StepResult(), TypeError, "missing"),
    ("MemoryBreakdown", lambda: hpgo.MemoryBreakdown(), TypeError, "missing"),
]

_A100 = hpgo.Cluster.preset("dgx-a100-80gb")

STEP_CASES += [
    ("autoplan", lambda: hpgo.autoplan("gpt3-175b", _A100, global_batch=0), ValueError,
     "global_batch"),
    ("autoplan", lambda: hpgo.autoplan("gpt3-175b", _A100, global_batch=8, top=0), ValueError, "top"),
    ("autoplan", lambda: hpgo.autoplan("gpt3-175b", _A100, global_batch=2**64), ValueError,
     "global_batch must be in 1..2^40"),
    ("autoplan", lambda: hpgo.autoplan("gpt3-175b", _A100, global_batch=8, gpus=9), ValueError,
     "gpus"),
    ("autoplan", lambda: hpgo.autoplan("gpt3-175b", _A100, global_batch=8, schedule="1f2b"),
     ValueError, "schedule"),
    ("autoplan", lambda: hpgo.autoplan("gpt3-175b", _A100, global_batch=8.0), TypeError,
     "global_batch"),
    ("RankedPlans", lambda: hpgo.RankedPlans(), TypeError, "missing"),
    ("RankedPlan", lambda: hpgo.RankedPlan(), TypeError, "missing"),
]
