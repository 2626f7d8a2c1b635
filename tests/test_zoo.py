"""hpgo.zoo: architectures, parameter counts, roofline times, devices, errors."""
import json
import math

import pytest

from hpgo import zoo
from hpgo.graphfile import format_graph, parse_graph
from hpgo.zoo.graph import Cost

# Exact published counts: torchvision model docs (ResNet, VGG), Hugging Face
# BertModel bert-large-uncased (pooler included) and GPT2Model checkpoints.
PUBLISHED = {
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "bert-large": 335_141_888,
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
}


@pytest.mark.parametrize("model, count", sorted(PUBLISHED.items()))
def test_published_parameter_counts_exact(model, count):
    assert zoo.param_count(model, include_heads=False) == count


def test_model_registry_published_counts_agree():
    for name, info in zoo.MODELS.items():
        if info.published_params is not None:
            assert PUBLISHED[name] == info.published_params


def test_bert_pretraining_heads_add_exact_head_parameters():
    d, v = 1024, 30522
    heads = (d * d + d) + 2 * d + v + (2 * d + 2)  # transform, LayerNorm, decoder bias, NSP
    assert zoo.param_count("bert-large") == 335_141_888 + heads


def test_rounded_published_counts():
    # papers give these rounded: DAPPLE GNMT-16 291M, BERT-48 640M, XLNet-36 500M
    # (a MiB/MB slip, see README), AmoebaNet-36 933M; GPipe AmoebaNet-D (18, 208) 82M,
    # (18, 544) 542M, (36, 544) 1.05B
    assert round(zoo.param_count("gnmt-16") / 1e6) == 291
    assert abs(zoo.param_count("bert-48", include_heads=False) / 640e6 - 1) < 0.01
    assert abs(zoo.param_count("amoebanet-36") / 933e6 - 1) < 0.005
    for (layers, filters), pub in {(18, 208): 82e6, (18, 544): 542e6, (36, 544): 1.05e9}.items():
        assert abs(zoo.param_count("amoebanet-36", layers=layers, filters=filters) / pub - 1) < 0.01
    # XLNet-Large 24 layers: 13,645,824 per layer + 32000 x 1024 embedding + mask_emb
    assert zoo.param_count("xlnet-large", include_heads=False) == 24 * 13_645_824 + 32000 * 1024 + 1024


def test_gpt_any_size_matches_closed_form():
    L, d, V, S = 7, 320, 1000, 64
    n = zoo.param_count("gpt", layers=L, hidden=d, heads=5, seq=S, vocab=V)
    assert n == L * (12 * d * d + 13 * d) + V * d + S * d + 2 * d


def test_profiles_validate_and_parse_back():
    for name in ("resnet50", "gnmt-16", "xlnet-36", "amoebanet-36"):
        p = zoo.profile(name, "V100", batch_size=2)
        text = format_graph(p)
        q = parse_graph(text, name)
        assert len(q.nodes) == len(p.nodes) and q.edges == p.edges
        assert q.nodes[0].desc == "Input"
        assert p.meta["param_count"] * 4 == sum(n.param_bytes for n in p.nodes)


def test_branchy_models_keep_dag_edges():
    p = zoo.profile("resnet50", "V100", batch_size=1)
    indeg = {}
    for _, d in p.edges:
        indeg[d] = indeg.get(d, 0) + 1
    adds = [i for i, n in enumerate(p.nodes) if n.desc.endswith(".add")]
    assert len(adds) == 16 and all(indeg[i] == 2 for i in adds)
    a = zoo.profile("amoebanet-36", "V100", batch_size=1)
    cells = [i for i, n in enumerate(a.nodes) if n.desc.startswith(("cell_", "reduction_cell_", "cell_stem_1"))
             and n.desc != "cell_stem_0"]
    ins = {i: sorted(s for s, d in a.edges if d == i) for i in cells}
    assert len(cells) == 36 + 2 + 1 and all(len(v) == 2 for v in ins.values())  # previous and previous-previous cell
    x = zoo.profile("xlnet-36", "V100")
    pos = next(i for i, n in enumerate(x.nodes) if n.desc == "pos_emb")
    assert sum(1 for s, _ in x.edges if s == pos) == 36


def test_activation_and_parameter_bytes_of_known_layers():
    p = zoo.profile("resnet50", "V100", batch_size=32)
    conv1 = next(n for n in p.nodes if n.desc == "conv1")
    assert conv1.act_bytes == 32 * 64 * 112 * 112 * 4
    assert conv1.param_bytes == 64 * 3 * 7 * 7 * 4
    assert conv1.extra["fwd_flops"] == 2 * 32 * 64 * 112 * 112 * 3 * 49
    fc = next(n for n in p.nodes if n.desc == "fc")
    assert fc.act_bytes == 32 * 1000 * 4
    h = zoo.profile("resnet50", "H100", batch_size=32, dtype="bf16")
    assert next(n for n in h.nodes if n.desc == "conv1").param_bytes == 64 * 3 * 49 * 2


def test_roofline_of_one_cost():
    dev = zoo.get_device("V100").peak()
    c = Cost("mm", 15.7e12, 1.0, 2 * 15.7e12, 1.0, 1, 2)   # compute bound: 1 s forward
    f, b = c.times(dev, "fp32")
    assert math.isclose(f, 1.0) and math.isclose(b, 2.0)
    m = Cost("vec", 1.0, 900e9, 0.0, 0.0, 1, 0, count=3)     # memory bound, 3 sequential steps
    f, b = m.times(dev, "fp32")
    assert math.isclose(f, 3.0) and b == 0.0
    d2 = zoo.get_device("V100")
    f2, _ = c.times(d2, "fp32")
    assert math.isclose(f2, 1.0 / d2.matmul_efficiency + d2.kernel_overhead_s)


def test_time_grows_with_batch_and_shrinks_on_faster_devices():
    def total(**kw):
        t = zoo.profile("bert-large", **kw).totals()
        return t["fwd_ms"] + t["bwd_ms"]
    assert total(device="V100", batch_size=4) > 1.8 * total(device="V100", batch_size=2)
    assert total(device="A100", batch_size=2) < total(device="V100", batch_size=2)
    assert total(device="H100", batch_size=2) < total(device="A100", batch_size=2)
    assert total(device="V100", batch_size=2, dtype="fp16") < 0.5 * total(device="V100", batch_size=2)
    assert total(device="V100", batch_size=2, peak=True) < total(device="V100", batch_size=2)


def test_custom_device_spec(tmp_path):
    spec = zoo.get_device("V100").to_dict()
    spec.update(name="half-V100", mem_bw=450e9, matmul_flops={"fp32": 7.85e12}, vector_flops={"fp32": 7.85e12})
    f = tmp_path / "dev.json"
    f.write_text(json.dumps(spec))
    a = zoo.profile("vgg16", "V100", batch_size=2, peak=True).totals()
    b = zoo.profile("vgg16", str(f), batch_size=2, peak=True).totals()
    assert math.isclose(b["fwd_ms"], 2 * a["fwd_ms"], rel_tol=1e-9)
    assert zoo.profile("vgg16", str(f), batch_size=2).meta["device"]["name"] == "half-V100"


@pytest.mark.parametrize("call, msg", [
    (lambda: zoo.profile("resnet51"), "unknown zoo model 'resnet51'"),
    (lambda: zoo.profile("resnet50", device="K80"), "unknown device 'K80'"),
    (lambda: zoo.profile("resnet50", device="V100", dtype="bf16"), "no published bf16"),
    (lambda: zoo.profile("resnet50", dtype="fp8"), "unknown dtype"),
    (lambda: zoo.profile("resnet50", batch_size=0), "positive integer"),
    (lambda: zoo.profile("gpt", layers=2, depth=3), "unknown option"),
    (lambda: zoo.profile("gpt", hidden=100, heads=3), "multiple of heads"),
    (lambda: zoo.profile("bert-large", seq=1024), "exceeds max_pos"),
    (lambda: zoo.profile("amoebanet-36", layers=10), "multiple of 3"),
    (lambda: zoo.profile("resnet50", device="/nonexistent/dev.json"), "does not exist"),
])
def test_errors(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_bad_device_json(tmp_path):
    f = tmp_path / "d.json"
    f.write_text('{"name": "x", "mem_bw": 1e9}')
    with pytest.raises(ValueError, match="lacks"):
        zoo.get_device(str(f))
    f.write_text('{"name": "x", "mem_bw": -1, "mem_bytes": 1, "matmul_flops": {"fp32": 1}, '
                 '"vector_flops": {"fp32": 1}}')
    with pytest.raises(ValueError, match="mem_bw"):
        zoo.get_device(str(f))
    f.write_text("{nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        zoo.get_device(str(f))


def test_names_are_forgiving():
    assert zoo.profile("BERT_48", "h100", batch_size=1, dtype="bf16").meta["model"] == "bert-48"
