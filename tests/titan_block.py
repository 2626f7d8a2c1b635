"""torchtitan's block as hpgo describes it, from a row of a step profile
(hpgo profile step's titan modes): the model and the one-GPU plan that price
what the row timed."""
import hpgo


def titan_plan(s):
    """The model and bf16 plan of a titan-mode step row (its parameter count
    checked against the timed model's); a float8 row's recipe is the plan's."""
    m = hpgo.transformer(hidden=s["hidden"], ffn=s["ffn"], heads=s["heads"],
                         kv_heads=s["kv_heads"], head_dim=s.get("head_dim"),
                         layers=s["layers"], seq=s["seq"],
                         vocab=s["vocab"], tied=s["tied"], mlp="swiglu", norm="rmsnorm",
                         flash=True, learned_pos=False, bias=False, dropout=False,
                         causal_flops=True)
    assert m.parameters == s["parameters"]
    rc = "full" if s["mode"] == "titan-full" else "selective-op"
    p = hpgo.ParallelPlan(global_batch=s["micro_batch"], micro_batch=s["micro_batch"],
                          kernels="compile-blocks", attention="flash2", recompute=rc,
                          zero=3 if s["mode"] == "titan-fsdp" else 0)
    if s.get("float8"):
        p = p.with_(fp8_recipe=s["float8"])
    return m, p
