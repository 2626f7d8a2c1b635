"""Clusters of several GPU types (Cluster.combine), slowed GPUs
(Cluster.with_speed), their file format, checks and per-type prices."""
import json
import pickle

import pytest

import hpgo
from hpgo import _core
from hpgo.cluster import part_prices, plan_price


def mixed():
    return hpgo.Cluster.combine(hpgo.Cluster.preset("dgx-h100", 4),
                                hpgo.Cluster.preset("dgx-a100-80gb", 8), bandwidth=25e9,
                                latency=2e-5, efficiency=0.85)


def test_combine_shape_and_parts():
    m = mixed()
    assert m.gpus == 32 + 64 and m.nodes == 12
    assert [q.gpu.name for q in m.parts] == ["H100-SXM5-80GB", "A100-SXM4-80GB"]
    assert m.gpu == m.parts[0].gpu and m.levels == m.parts[0].levels   # part 0 repeated
    assert m.join.bandwidth == 25e9 and m.join.size == 2 and m.join.efficiency == 0.85
    assert m.part_index("h100") == 0 and m.part_index("A100-SXM4-80GB") == 1
    assert m.part_index("dgx-a100-80gb") == 1 and m.part_index(1) == 1
    assert m.part_index(None) == 0
    with pytest.raises(ValueError, match="none of the cluster's parts"):
        m.part_index("v100")
    with pytest.raises(ValueError, match="not one of the cluster's 2"):
        m.part_index(2)
    # presets and files by name, and the parts' own node counts
    m2 = hpgo.Cluster.combine("dgx-h100", "dapple-v100", bandwidth=1e9)
    assert m2.gpus == 8 + 16 and m2.name == "1xdgx-h100+2xdapple-v100"


def test_combine_refuses_bad_input():
    h = hpgo.Cluster.preset("dgx-h100")
    with pytest.raises(ValueError, match="at least two"):
        hpgo.Cluster.combine(h, bandwidth=1e9)
    with pytest.raises(ValueError, match="bandwidth must be"):
        hpgo.Cluster.combine(h, h, bandwidth=0)
    with pytest.raises(TypeError, match="bandwidth must be a number"):
        hpgo.Cluster.combine(h, h, bandwidth="fast")
    with pytest.raises(ValueError, match="join: efficiency"):
        hpgo.Cluster.combine(h, h, bandwidth=1e9, efficiency=1.5)
    with pytest.raises(ValueError, match="several GPU types already"):
        hpgo.Cluster.combine(mixed(), h, bandwidth=1e9)
    with pytest.raises(TypeError, match="argument 2"):
        hpgo.Cluster.combine(h, 3, bandwidth=1e9)
    with pytest.raises(FileNotFoundError):
        hpgo.Cluster.combine(h, "nowhere/c.json", bandwidth=1e9)
    with pytest.raises(ValueError, match="several GPU types.*with_nodes|with_nodes"):
        mixed().with_nodes(3)
    with pytest.raises(ValueError, match="parts"):
        mixed().with_gpu(memory_bytes=1e9)


def test_with_speed_any_cluster():
    h = hpgo.Cluster.preset("dgx-h100", 2)
    s = h.with_speed({3: 1 / 1.5})
    assert s.speeds == ((3, 1 / 1.5),) and s.speed(3) == 1 / 1.5 and s.speed(2) == 1.0
    assert h.speeds == ()                                    # the original is unchanged
    assert s.with_speed({3: 1}).speeds == ()                # 1 restores a GPU
    m = mixed().with_speed({40: 0.5, 2: 0.9})
    assert m.speeds == ((2, 0.9), (40, 0.5))                  # sorted by GPU
    with pytest.raises(ValueError, match="GPU 16 is not in the cluster's 16 GPUs"):
        h.with_speed({16: 0.5})
    with pytest.raises(ValueError, match="finite number > 0"):
        h.with_speed({1: 0.0})
    with pytest.raises(ValueError, match="finite number > 0"):
        h.with_speed({1: float("inf")})
    with pytest.raises(TypeError, match="mapping"):
        h.with_speed([(1, 0.5)])
    # combine moves a part's slowed GPUs to the whole cluster, shifted
    c = hpgo.Cluster.combine(h, hpgo.Cluster.preset("dgx-a100-80gb").with_speed({1: 0.5}),
                             bandwidth=1e9)
    assert c.speeds == ((17, 0.5),) and c.parts[1].speeds == ()


def test_json_round_trip_and_file(tmp_path):
    m = mixed().with_speed({5: 1 / 1.5})
    d = m.to_dict()
    assert "gpu" not in d and len(d["parts"]) == 2 and d["speeds"] == [[5, 1 / 1.5]]
    assert hpgo.Cluster.from_dict(json.loads(json.dumps(d))) == m
    f = tmp_path / "mixed.json"
    m.save(f)
    assert hpgo.Cluster.load(f) == m
    assert hpgo.cluster.resolve(str(f)) == m
    assert pickle.loads(pickle.dumps(m)) == m
    one = hpgo.Cluster.preset("dgx-h100").with_speed({0: 0.5})
    assert hpgo.Cluster.from_dict(one.to_dict()) == one


@pytest.mark.parametrize("change, msg", [
    (lambda d: d["parts"][1]["gpu"].update(memory_bytes=-1), r"parts\[1\].gpu.memory_bytes"),
    (lambda d: d.pop("join"), "join: a cluster with parts needs join"),
    (lambda d: d["join"].update(bandwidth=0), "join.bandwidth"),
    (lambda d: d.update(speeds=[[200, 0.5]]), "GPU 200 is not in the cluster's 96"),
    (lambda d: d.update(speeds=[[3, 0.5], [3, 0.7]]), "GPU 3 is listed twice"),
    (lambda d: d.update(speeds=[[3, -1]]), r"speeds\[0\]\[1\]"),
    (lambda d: d.update(parts=d["parts"][:1]), "parts: .*at least 2"),
    (lambda d: d.update(gpu=d["parts"][0]["gpu"]), "gpu belongs in parts"),
    (lambda d: d["parts"][0].update(parts=[]), r"parts\[0\]: unknown field 'parts'"),
])
def test_file_errors_name_the_field(change, msg):
    d = mixed().to_dict()
    change(d)
    with pytest.raises(ValueError, match=msg) as e:
        hpgo.Cluster.from_dict(d, where="mine.json")
    assert "mine.json" in str(e.value)


def test_core_check_of_parts():
    """The C check (hpgo_cluster_check) sees what the Python layer cannot
    be bypassed for: nested parts, unsorted speeds, bad join."""
    m = mixed().with_speed({5: 0.5})
    t = m._tuple()
    _core._step_cluster_check(t)
    nested = t[:14] + ((m.parts[0]._tuple()[:14] + (t[14], t[15], ()), t[14][1]),) + t[15:]
    with pytest.raises(ValueError, match=r"parts\[0\]: a part cannot have parts"):
        _core._step_cluster_check(nested)
    part_slow = t[:14] + ((t[14][0][:16] + (((1, 0.5),),), t[14][1]),) + t[15:]
    with pytest.raises(ValueError, match=r"parts\[0\]: slowed GPUs belong"):
        _core._step_cluster_check(part_slow)
    unsorted = t[:16] + (((7, 0.5), (5, 0.5)),)
    with pytest.raises(ValueError, match=r"speeds\[1\]: GPUs must be listed once"):
        _core._step_cluster_check(unsorted)
    slowest = t[:16] + (((7, 1e-9),),)
    with pytest.raises(ValueError, match=r"speeds\[0\]: GPU 7's speed factor"):
        _core._step_cluster_check(slowest)
    nojoin = t[:15] + (None,) + t[16:]
    with pytest.raises(ValueError, match="needs a join level"):
        _core._step_cluster_check(nojoin)
    badjoin = t[:15] + ((2, 1e9, 1e9, -1.0, 1.0),) + t[16:]
    with pytest.raises(ValueError, match="join: latency"):
        _core._step_cluster_check(badjoin)
    badpart = t[:14] + ((t[14][0], t[14][1][:4] + (-5.0,) + t[14][1][5:]),) + t[15:]
    with pytest.raises(ValueError, match=r"parts\[1\] \(dgx-a100-80gb\): gpu memory"):
        _core._step_cluster_check(badpart)


def test_describe_and_repr():
    m = mixed().with_speed({5: 1 / 1.5})
    text = m.describe()
    assert "2 parts, 96 GPUs (32 H100-SXM5-80GB, 64 A100-SXM4-80GB)" in text
    assert "part 1, GPUs 32..95" in text and "between parts: 25 GB/s" in text
    assert "GPU 5 runs at 0.666667x its type's rate (slowed 1.5x)" in text
    assert "32 x H100-SXM5-80GB + 64 x A100-SXM4-80GB" in repr(m)


def test_prices_per_type():
    m = mixed()
    assert part_prices(m, 2.0) == (2.0, 2.0)
    assert part_prices(m, {"h100": 4.0, "a100": 1.5}) == (4.0, 1.5)
    assert part_prices(m, {0: 4.0, "A100-SXM4-80GB": 1.5}) == (4.0, 1.5)
    with pytest.raises(ValueError, match="no price for A100-SXM4-80GB"):
        part_prices(m, {"h100": 4.0})
    with pytest.raises(ValueError, match=r"price\['h100'\] must be"):
        part_prices(m, {"h100": -4.0, "a100": 1})
    with pytest.raises(ValueError, match="none of the cluster's parts"):
        part_prices(m, {"h100": 4.0, "a100": 1, "v100": 1})
    assert plan_price(m, {"h100": 4.0, "a100": 1.0}, {0: 8, 1: 24}) == pytest.approx(1.75)
    assert part_prices(hpgo.Cluster.preset("dgx-h100"), {"h100": 3.0}) == (3.0,)


def test_even_plan_on_mixed_cluster_is_refused():
    plan = hpgo.ParallelPlan(tp=8, pp=1, dp=1, micro_batch=1, global_batch=8)
    with pytest.raises(ValueError, match="2 GPU types: give the plan stages"):
        hpgo.simulate("llama3-8b", mixed(), plan)


def test_cli_combine_and_speed(tmp_path, capsys):
    from hpgo.cli import main

    f = tmp_path / "m.json"
    assert main(["cluster", "--combine", "dgx-h100:2", "--combine", "dgx1-v100:2",
                 "--join-gbps", "100", "--speed", "3=0.5", "-o", str(f)]) == 0
    out = capsys.readouterr().out
    assert "2 parts, 32 GPUs (16 H100-SXM5-80GB, 16 V100-SXM2)" in out
    assert "GPU 3 runs at 0.5x" in out
    c = hpgo.Cluster.load(f)
    assert c.join.bandwidth == 12.5e9 and c.speeds == ((3, 0.5),)
    assert main(["cluster", str(f)]) == 0
    assert "part 1, GPUs 16..31" in capsys.readouterr().out
    assert main(["cluster", "--combine", "dgx-h100", "--combine", "dgx-h100"]) != 0
    assert "--join-gbps" in capsys.readouterr().err
