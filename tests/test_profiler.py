"""hpgo.profiler on small CPU models (skipped without torch)."""
import pytest

torch = pytest.importorskip("torch")

from hpgo import profiler  # noqa: E402
from hpgo.graphfile import format_graph, parse_graph  # noqa: E402
from hpgo.profiler import examples  # noqa: E402

FAST = {"warmup": 0, "repeat": 1}


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def preds(p, i):
    return [s for s, d in p.edges if d == i]


def test_mlp_layers_sizes_and_chain():
    model, x = examples.mlp(batch_size=8, width=64, depth=2)
    p = profiler.profile_module(model, x, **FAST)
    descs = [n.desc for n in p.nodes]
    assert descs[0] == "Input" and len(descs) == 1 + len(model)
    assert p.edges == [(i, i + 1) for i in range(len(model))]
    lin = p.nodes[2]
    assert lin.desc == "1 (Linear)" and lin.act_bytes == 8 * 64 * 4
    assert lin.param_bytes == (784 * 64 + 64) * 4
    assert sum(n.param_bytes for n in p.nodes) == 4 * sum(q.numel() for q in model.parameters())
    assert all(n.fwd_ms > 0 for n in p.nodes[1:])
    assert p.nodes[2].bwd_ms > 0 and p.meta["batch_size"] == 8
    assert p.meta["method"].endswith("fx)") and p.meta["versions"]["torch"] == torch.__version__
    parse_graph(format_graph(p))


def test_branches_and_joins_are_edges():
    model, x = examples.branchy(batch_size=4, width=16)
    p = profiler.profile_module(model, x, **FAST)
    idx = {n.desc.split(" ")[0]: i for i, n in enumerate(p.nodes)}
    assert preds(p, idx["a1"]) == [idx["relu"]] and preds(p, idx["b1"]) == [idx["relu"]]
    assert sorted(preds(p, idx["cat"])) == sorted([idx["a2"], idx["b1"]])


def test_resnet_skip_edges_inplace_and_model_untouched():
    model, x = examples.resnet_ish(batch_size=2, image=16, width=8, blocks=(1, 1))
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    p = profiler.profile_module(model, x, **FAST)
    adds = [i for i, n in enumerate(p.nodes) if "(add)" in n.desc]
    assert len(adds) == 2 and all(len(preds(p, i)) == 2 for i in adds)
    assert not model.training                       # mode restored
    for k, v in model.state_dict().items():         # BN running stats restored
        assert torch.equal(v, before[k]), k
    assert all(q.grad is None for q in model.parameters())
    relu_inplace = [n for n in p.nodes if "relu1 (ReLU)" in n.desc]
    assert relu_inplace and relu_inplace[0].bwd_ms > 0


def test_user_granularity_children_of_sequential():
    model, x = examples.resnet_ish(batch_size=2, image=16, width=8, blocks=(2, 1))
    names = ["stem"] + profiler.children(model, "blocks")
    p = profiler.profile_module(model, x, layers=names, **FAST)
    descs = [n.desc for n in p.nodes]
    assert descs[1:5] == ["stem (Sequential)", "blocks.0 (Block)", "blocks.1 (Block)", "blocks.2 (Block)"]
    assert p.edges[:4] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    total = sum(n.param_bytes for n in p.nodes)
    assert total == 4 * sum(q.numel() for q in model.parameters())


def test_transformer_shared_weights_counted_once_and_loss_layer():
    model, ids = examples.tiny_transformer(batch_size=2, seq=16, hidden=32, heads=2, layers=1, vocab=50)
    p = profiler.profile_module(model, ids, loss_fn=lambda y: y.float().pow(2).mean(), **FAST)
    assert sum(n.param_bytes for n in p.nodes) == 4 * sum(q.numel() for q in model.parameters())
    assert p.nodes[-1].desc == "loss" and p.nodes[-1].act_bytes == 4
    # the tied LM head multiplies the final LayerNorm output with the embedding table
    mm = next(i for i, n in enumerate(p.nodes) if "(matmul)" in n.desc)
    assert sorted(p.nodes[s].desc.split(" ")[0] for s in preds(p, mm)) == ["ln_f", "t"]
    assert p.nodes[mm].bwd_ms > 0


def test_untraceable_model_falls_back_to_hooks():
    model, x = examples.untraceable(batch_size=4, width=8)
    p = profiler.profile_module(model, x, **FAST)
    assert p.meta["method"].endswith("hooks)") and p.meta["trace_error"]
    assert [n.desc for n in p.nodes] == ["Input", "l1 (Linear)", "l2 (Linear)", "l3 (Linear)"]
    assert p.edges == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(profiler.ProfilerError, match="cannot trace"):
        profiler.profile_module(model, x, method="fx", **FAST)


def test_bad_arguments():
    model, x = examples.mlp(batch_size=2, width=8, depth=1)
    with pytest.raises(ValueError, match="no submodule 'nope'"):
        profiler.profile_module(model, x, layers=["nope"])
    with pytest.raises(TypeError, match="list of module names"):
        profiler.profile_module(model, x, layers="1")
    with pytest.raises(ValueError, match="repeat"):
        profiler.profile_module(model, x, repeat=0)
    with pytest.raises(TypeError, match="nn.Module"):
        profiler.profile_module(lambda t: t, x)
    with pytest.raises(TypeError, match="inputs"):
        profiler.profile_module(model, "x")
    with pytest.raises(ValueError, match="method"):
        profiler.profile_module(model, x, method="magic")
