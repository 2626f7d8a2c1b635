"""hpgo.sweep: rows equal the single-case calls, for any thread count."""
import subprocess
import sys

import pytest

import hpgo
from conftest import ROOT, chain_model, shared_path


def single(m, gbs, seps):
    m1 = m.normalized_copy(gbs)
    d = hpgo.devices_from_seps(seps)
    try:
        p3 = hpgo.dp_cur_ga_p3_speedup(d, m1)
        ov = hpgo.dp_cur_ga_inner_overlap_speedup(d, m1)
    except hpgo.PlanningError:
        p3 = ov = None
    try:
        best = hpgo.AsyncOrchestrate(m1, d).py_orchestrate()
    except hpgo.PlanningError:
        best = None
    return hpgo.dp_speedup(d, m1), p3, ov, best


def check_rows(m, gbs_list, layouts, rows):
    assert len(rows) == len(gbs_list) * len(layouts)
    k = 0
    for g in gbs_list:
        for seps in layouts:
            r = rows[k]
            k += 1
            assert (r.gbs, list(r.seps)) == (g, seps)
            dp, p3, ov, best = single(m, g, seps)
            assert (r.dp, r.dp_p3, r.dp_overlap) == (dp, p3, ov)
            if best is None:
                assert r.hybrid is None and r.error
            else:
                assert (r.hybrid, r.stages) == best


def test_sweep_rows_equal_single_case_calls_any_threads():
    m = chain_model(40, pbs=4, gbs=4)
    m.min_micro_batch_size = 4
    gbs = [4, 64, 256, 1000]
    layouts = [[8, 16], [4, 8], list(range(1, 9))]
    base = hpgo.sweep(m, 4, gbs, layouts, threads=1)
    check_rows(m, gbs, layouts, base)
    for threads in (2, 3, 0):
        assert hpgo.sweep(m, 4, gbs, layouts, threads=threads) == base


def test_dapple_resnet50_sweep():
    path = shared_path("profiles", "resnet50", "graph.txt")
    m = hpgo.model_from_torch_graph(path, 32, 32)
    m.optimizer_memory_scaling = 2
    m.min_micro_batch_size = 32
    m.peak_activation_per_batch = 7e7
    gbs = [32] + list(range(64, 4097, 64))
    rows = hpgo.sweep(path, 32, gbs, [8, 16], optimizer_memory_scaling=2,
                      min_micro_batch_size=32, peak_activation_per_batch=7e7)
    assert [r.gbs for r in rows] == gbs
    # the reference case of ../shared/reference (gbs 256) and a few more
    for r in rows:
        if r.gbs in (256, 1024, 4096):
            dp, p3, ov, best = single(m, r.gbs, [8, 16])
            assert (r.dp, r.dp_p3, r.dp_overlap, (r.hybrid, r.stages)) == (dp, p3, ov, best)
    r256 = [r for r in rows if r.gbs == 256][0]
    assert r256.hybrid == 7.951686906139928
    assert r256.stages == [(0, 237, 1, list(range(8))), (237, 239, 1, list(range(8, 16)))]


def test_sweep_settings_do_not_modify_the_model_and_tables(tmp_path):
    m = chain_model(20, pbs=2, gbs=2)
    rows = hpgo.sweep(m, 2, [64, 128], [8, 16], min_micro_batch_size=2, optimizer_memory_scaling=3)
    assert m.min_micro_batch_size == 1 and m.optimizer_memory_scaling == 1
    text = rows.to_csv(tmp_path / "s.csv")
    assert text.splitlines()[0].startswith("gbs,seps,dp,dp_p3")
    assert (tmp_path / "s.csv").read_text() == text
    d = rows.to_dicts()
    assert d[0]["gbs"] == 64 and d[0]["seps"] == [8, 16] and "candidates" not in d[0]


def test_sweep_reports_cases_that_cannot_be_planned():
    m = chain_model(10, gbs=8, par=5e9)  # does not fit one GPU
    rows = hpgo.sweep(m, 8, [256], [8, 16])
    assert rows[0].dp_p3 is None and "does not fit" in rows[0].error
    assert rows[0].dp > 0


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        (dict(gbs=[], seps=[8, 16]), ValueError),
        (dict(gbs=[0], seps=[8, 16]), ValueError),
        (dict(gbs=[-4], seps=[8, 16]), ValueError),
        (dict(gbs=[64], seps=[]), ValueError),
        (dict(gbs=[64], seps=[8, 4]), ValueError),
        (dict(gbs=[64], seps="8,16"), TypeError),
        (dict(gbs=["64"], seps=[8, 16]), TypeError),
        (dict(gbs=[64], seps=[8, 16], threads=-1), ValueError),
        (dict(gbs=[64], seps=[8, 16], threads=1.5), TypeError),
    ],
)
def test_sweep_bad_arguments(kwargs, exc):
    m = chain_model(10)
    with pytest.raises(exc):
        hpgo.sweep(m, 1, **kwargs)


def test_example_script_runs():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "resnet50_sweep.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 + 65 and lines[1].split()[0] == "GBS"


XLNET = str(ROOT / "profiles" / "transformer36-v100" / "graph.txt")


def test_every_hybrid_plan_says_whether_it_fits():
    # each row's hybrid plan, simulated under DAPPLE's 1F1B on its own batch, is the
    # row's memory verdict; the table and the CSV carry it
    from hpgo import _core
    from hpgo.sim import simulate_plan
    rows = hpgo.sweep(XLNET, 1, [32, 128], [[8, 16], [8]])
    for r in rows:
        m = _core.model_from_torch_graph(XLNET, 1, r.gbs)
        s = simulate_plan(m, (r.hybrid, r.stages), rp=r.rp, seps=list(r.seps), schedule="1f1b")
        assert (r.peak_memory, r.fits) == (s.peak_memory, s.fits)
    assert "GiB" in rows.table().splitlines()[0] and "  yes" in rows.table()
    assert rows.to_csv().splitlines()[0].endswith(",peak_memory,fits,error")
    # a plan over HPGO's 16 GB GPU is marked, not hidden
    big = hpgo.model_from_states([1.0, 2.0, 3.0, 4.0], [2e9] * 4, [5e9] * 4, [2e9] * 4,
                                 [[], [0], [1], [2]], ["a", "b", "c", "d"], 1, 64)
    (row,) = hpgo.sweep(big, 1, [64], [8, 16])
    assert row.hybrid is not None and row.fits is False and row.peak_memory > 16e9
    assert "  NO" in hpgo.sweep(big, 1, [64], [8, 16]).table()
