"""Every profile in ../shared/profiles that HPGO could import: the C importer
agrees bit for bit with an independent Python reading of the spec (the
oracle in oracle_import.py), and the pruned planner returns exactly what the
exhaustive search returns."""
import pytest

import hpgo
import oracle_import
from conftest import SHARED, shared_path

# HPGO imported these; the other graphs did not finish PipeDream's prepare()
# (gnmt_32, inception_v3, nasnetalarge, nasnetamobile) or are not graphs.
IMPORTABLE = [
    "alexnet", "amb_issue_minimal", "amoebanet", "amoebanet_18", "amoebanet_36", "bert_48",
    "bert_large", "densenet121", "ggv", "gnmt", "gnmt_16", "gnmt_32_simplified", "gnmt_large",
    "resnet101", "resnet18", "resnet50", "resnext101", "resnext50", "squeezenet1_0", "vgg16",
    "vgg19", "xlnet", "xlnet_36",
]
DAPPLE = [
    "amoeba-18-pbs-8.txt", "amoeba-36-pbs-1.txt", "amoeba-6-pbs-8-simplified.txt",
    "bert-24-pbs-6.txt", "bert-48-pbs-2.txt", "gnmt-16-pbs-64.txt",
    "gnmt-32-pbs-64-simplified.txt", "vgg-19-pbs-32.txt", "vgg16.txt", "xlnet-24-pbs-1.txt",
    "xlnet-36-pbs-1.txt",
]
# the oracle is slow on the largest graphs
ORACLE_SKIP = {"gnmt_16", "gnmt_large", "gnmt-16-pbs-64.txt"}


def all_paths():
    out = [("profiles", name, "graph.txt") for name in IMPORTABLE]
    out += [("profiles", "dapple_profiling_results", f) for f in DAPPLE]
    return out


@pytest.mark.parametrize("parts", all_paths(), ids=lambda p: p[1] if p[2] == "graph.txt" else p[2])
def test_importer_matches_oracle(parts):
    path = shared_path(*parts)
    if parts[-1] in ORACLE_SKIP or parts[1] in ORACLE_SKIP:
        pytest.skip("oracle too slow for this graph")
    ref = oracle_import.build_states(str(path))
    m = hpgo.model_from_torch_graph(path, 1, 1)
    L = m.num_layers
    assert L == len(ref["ct"])
    for c in range(L):
        assert m.ct(0, c) == ref["ct"][c], c
        assert m.ac(0, c) == ref["act"][c], c
        assert m.pa(0, c) == ref["par"][c], c
        assert m.oa(c) == ref["oa"][c], c
        assert m.preds(c) == ref["preds"][c], c
    assert [layer.desc for layer in m.layers] == ref["labels"]


PLAN_CASES = [
    ("xlnet_36", 1, [32, 128]), ("bert_48", 2, [64]), ("vgg19", 32, [256, 1024]),
    ("amoebanet_36", 1, [16, 64]), ("resnet50", 32, [128, 512]), ("alexnet", 128, [1024]),
    ("gnmt_32_simplified", 64, [512]), ("squeezenet1_0", 32, [1024]), ("resnet18", 64, [2048]),
    ("bert_large", 6, [96]), ("xlnet", 1, [16]), ("amb_issue_minimal", 1, [64]),
]


@pytest.mark.parametrize("name,pbs,gbss", PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_pruned_equals_exhaustive(name, pbs, gbss):
    path = shared_path("profiles", name, "graph.txt")
    base = hpgo.model_from_torch_graph(path, pbs, pbs)
    for gbs in gbss:
        m = base.normalized_copy(gbs)
        for seps in ([8, 16], list(range(1, 17)), [4, 8], [8]):
            d = hpgo.devices_from_seps(seps)
            a = hpgo.AsyncOrchestrate(m, d)
            a.orchestrate()
            b = hpgo.AsyncOrchestrate(m, d, exhaustive=True)
            b.orchestrate()
            assert list(a.res) == list(b.res), (name, gbs, seps)
            assert list(a.skipped) == list(b.skipped)
            assert len(a.res) + len(a.skipped) == (
                (len(seps) and d.num_gpus - 1)
                + (2 if d.num_gpus > 2 and d.num_gpus % 2 == 0 else 1)
                + (1 if d.num_gpus > 1 else 0)
            )


def test_shared_dir_layout():
    if not SHARED.exists():
        pytest.skip("needs ../shared")
    assert (SHARED / "profiles").is_dir()
