"""Impossible values are refused with a message naming them, not planned as
something else: zero GPUs or sizes, a negative overhead; wrongly typed plan
and cluster JSON fields; tiny GPU rates."""
import json
import math

import pytest

import hpgo


M = hpgo.transformer(hidden=512, ffn=2048, heads=8, layers=4, seq=512, vocab=1000)
C = hpgo.Cluster.preset("dgx-h100", nodes=1)


@pytest.mark.parametrize("kw, name", [({"gpus": 0}, "gpus"), ({"max_gpus": 0}, "max_gpus"),
                                      ({"tp": 0}, "tp"), ({"pp": 0}, "pp"), ({"dp": 0}, "dp"),
                                      ({"micro_batch": 0}, "micro_batch"), ({"cp": 0}, "cp"),
                                      ({"ep": 0}, "ep"), ({"virtual_stages": 0}, "virtual_stages"),
                                      ({"overhead_bytes": -1.0}, "overhead_bytes"),
                                      ({"overhead_bytes": math.nan}, "overhead_bytes"),
                                      ({"overhead_bytes": math.inf}, "overhead_bytes")])
def test_autoplan_refuses_zero_sizes_and_negative_overhead(kw, name):
    with pytest.raises(ValueError, match=name):
        hpgo.autoplan(M, C, 8, **kw)


def test_simulate_refuses_a_negative_overhead():
    p = hpgo.ParallelPlan(global_batch=8, dp=8)
    with pytest.raises(ValueError, match="overhead_bytes"):
        hpgo.simulate(M, C, p, overhead_bytes=-1)


def test_cli_refuses_zero_gpus(capsys):
    from hpgo.cli import main
    rc = main(["autoplan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "0",
               "--global-batch", "8"])
    assert rc == 2
    assert "gpus" in capsys.readouterr().err


@pytest.mark.parametrize("field, value", [("schedule", ["1f1b"]), ("split", 5), ("split", [1, "2"]),
                                          ("recompute", {}), ("moe_dispatcher", 3),
                                          ("ep_placement", None), ("model", 7)])
def test_plan_json_with_a_wrongly_typed_field(tmp_path, field, value):
    d = hpgo.ParallelPlan(global_batch=8, dp=8).to_dict()
    d[field] = value
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        hpgo.ParallelPlan.load(p)
    assert field in str(e.value) and str(p) in str(e.value), str(e.value)


@pytest.mark.parametrize("field, value", [("levels", {"a": 1}), ("levels", [1, 2]),
                                          ("gpu", [1]), ("name", 5)])
def test_cluster_json_with_a_wrongly_typed_field(tmp_path, field, value):
    d = C.to_dict()
    d[field] = value
    p = tmp_path / "cluster.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        hpgo.Cluster.load(p)
    assert field in str(e.value) and str(p) in str(e.value), str(e.value)


@pytest.mark.parametrize("field", ["bf16_flops", "vector_flops", "memory_bandwidth", "fp8_flops"])
def test_tiny_gpu_rates_are_refused_with_their_limit(field):
    # accepted before, then simulate raised HpgoError ("the op order deadlocks")
    with pytest.raises(ValueError, match=r">= 1"):
        C.with_gpu(**{field: 1e-300})


def test_tiny_link_bandwidth_is_refused():
    import dataclasses
    lv = tuple(dataclasses.replace(x, bandwidth=1e-300) for x in C.levels)
    with pytest.raises(ValueError, match="bandwidth"):
        dataclasses.replace(C, levels=lv)


def kernel_profile(sample):
    base = {"op": "attention", "dtype": "bf16", "flops": 1e9, "bytes": 1e6, "seconds": 1e-3,
            "name": "attention flash"}
    return {"format": hpgo.calibrate.FORMAT, "device": "x", "samples": [dict(base, **sample)]}


@pytest.mark.parametrize("sample, field", [({"name": 5}, "name"), ({"name": ["a"]}, "name"),
                                           ({"backend": 3}, "backend"),
                                           ({"flops": 10 ** 400}, "flops"),
                                           ({"seconds": 10 ** 400}, "seconds")])
def test_hostile_kernel_profile_names_the_sample(tmp_path, sample, field):
    p = tmp_path / "kernels.json"
    p.write_text(json.dumps(kernel_profile(sample)))
    with pytest.raises(ValueError) as e:
        hpgo.calibrate.load(p)
    msg = str(e.value)
    assert "sample 0" in msg and field in msg and str(p) in msg, msg


def test_blank_attention_name_is_read():
    prof = hpgo.calibrate.from_dict(kernel_profile({"name": "   "}))
    assert prof.kernels[0].backend == ""
