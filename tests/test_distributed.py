"""executor= of sweep, grid_search, simulate_mlp_batch and autoplan (issue 14):
the same rows, in the same order, bit-identical to the local run, on a
process pool and on a real Dask cluster (two worker processes)."""
import concurrent.futures as cf
import multiprocessing
import os
import subprocess
import sys
import threading
import time

import pytest

import hpgo
from hpgo import distributed as dist
from hpgo import examples
from optional_deps import need

RN50 = examples.path("resnet50")
GBS = [32] + list(range(64, 4097, 64))
LAYOUTS = [[8, 16], [8]]
SETTINGS = dict(optimizer_memory_scaling=2, min_micro_batch_size=32,
                peak_activation_per_batch=7e7, progress=False)


def rows_identical(a, b):
    return (type(a) is type(b) and a == b
            and [(r.candidates, r.skipped) for r in a] == [(r.candidates, r.skipped) for r in b])


def ranking(r):
    return [(p.rank, p.plan, p.result, p.balanced_split) for p in r.plans]


@pytest.fixture(scope="module")
def local_sweep():
    return hpgo.sweep(RN50, 32, GBS, LAYOUTS, **SETTINGS)


@pytest.fixture(scope="module")
def local_grid():
    return hpgo.grid_search(256, 1024, 16, devices=(1, 2, 4, 8, 16, 32), progress=False)


@pytest.fixture(scope="module")
def procs():
    ctx = multiprocessing.get_context("spawn")   # no fork of a threaded test process
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as ex:
        yield ex


def test_sweep_on_processes(procs, local_sweep):
    for chunksize in (None, 5):
        rows = hpgo.sweep(RN50, 32, GBS, LAYOUTS, **SETTINGS, threads=1, executor=procs,
                          chunksize=chunksize)
        assert rows_identical(rows, local_sweep)


def test_grid_and_batch_on_processes(procs, local_grid):
    for chunksize in (None, 1, 4):
        assert hpgo.grid_search(256, 1024, 16, devices=(1, 2, 4, 8, 16, 32), executor=procs,
                                chunksize=chunksize, progress=False) == local_grid
    cfgs = [dict(batch_size=64 * (i % 8 + 1), width=256, layers=8, dp=1 + i % 2, pp=2,
                 microbatches=2) for i in range(600)]
    local = hpgo.simulate_mlp_batch(cfgs)
    assert hpgo.simulate_mlp_batch(cfgs, executor=procs) == local
    assert hpgo.simulate_mlp_batch(cfgs, executor=procs, chunksize=7) == local


def test_autoplan_merge_is_exact(procs):
    h100 = hpgo.Cluster.preset("dgx-h100", nodes=8)
    for model, cluster, gb, kw in [
            ("llama3-70b", h100, 512, {}),
            ("llama3-70b", h100, 512, dict(objective="cost", top=20)),
            ("llama3-8b", hpgo.Cluster.preset("dgx-h100", nodes=2), 64,
             dict(top=200, schedule="1f1b")),   # many exact ties between ZeRO stages
            ("llama3-8b", hpgo.Cluster.preset("dgx-h100", nodes=2), 64, dict(top=30, tp=2)),
            ("llama3-70b", h100, 512, dict(objective="cost", top=40, tp=8))]:   # split by pp
        a = hpgo.autoplan(model, cluster, global_batch=gb, **kw)
        b = hpgo.autoplan(model, cluster, global_batch=gb, executor=procs, **kw)
        assert ranking(a) == ranking(b) and len(a) > 0
        assert b.stats["candidates"] == a.stats["candidates"]


def test_thread_and_map_only_executors(local_sweep, local_grid):
    with cf.ThreadPoolExecutor(2) as ex:
        assert rows_identical(hpgo.sweep(RN50, 32, GBS, LAYOUTS, **SETTINGS, executor=ex),
                              local_sweep)

    class MapOnly:  # the shape of multiprocessing.Pool and ray.util.multiprocessing.Pool
        def map(self, fn, it):
            return [fn(x) for x in it]

    assert rows_identical(hpgo.sweep(RN50, 32, GBS, LAYOUTS, **SETTINGS, executor=MapOnly()),
                          local_sweep)
    assert hpgo.grid_search(256, 1024, 16, devices=(1, 2, 4, 8, 16, 32), executor=MapOnly(),
                            progress=False) == local_grid


def test_bad_arguments():
    with pytest.raises(TypeError, match="executor must have submit"):
        hpgo.sweep(RN50, 32, [64], [8], executor=object())
    with cf.ThreadPoolExecutor(1) as ex:
        with pytest.raises(ValueError, match="chunksize must be >= 1"):
            hpgo.sweep(RN50, 32, [64], [8], executor=ex, chunksize=0)
        with pytest.raises(TypeError, match="chunksize"):
            hpgo.grid_search(64, 256, 8, executor=ex, chunksize=1.5)
    with pytest.raises(ValueError, match="only with executor"):
        hpgo.sweep(RN50, 32, [64], [8], chunksize=4)
    with cf.ThreadPoolExecutor(1) as ex:   # no cases: what the local call does
        with pytest.raises(ValueError) as local:
            hpgo.sweep(RN50, 32, [], [8], progress=False)
        with pytest.raises(ValueError) as remote:
            hpgo.sweep(RN50, 32, [], [8], progress=False, executor=ex)
        assert str(remote.value) == str(local.value)
        assert hpgo.simulate_mlp_batch([], executor=ex) == hpgo.simulate_mlp_batch([])
        assert hpgo.grid_search(64, 256, 8, devices=(), executor=ex, progress=False) == \
            hpgo.grid_search(64, 256, 8, devices=(), progress=False)


def test_errors_are_the_local_ones(procs):
    # a case the C core refuses, in the third chunk: same type and message
    with pytest.raises(ValueError) as local:
        hpgo.sweep(RN50, 32, [64, 128, 0], [8], progress=False)
    with pytest.raises(ValueError) as remote:
        hpgo.sweep(RN50, 32, [64, 128, 0], [8], progress=False, executor=procs, chunksize=1)
    assert str(remote.value) == str(local.value)
    with pytest.raises(ValueError) as local:
        hpgo.autoplan("llama3-8b", "dgx-h100", global_batch=0)
    with pytest.raises(ValueError) as remote:
        hpgo.autoplan("llama3-8b", "dgx-h100", global_batch=0, executor=procs)
    assert str(remote.value) == str(local.value)


def test_batch_error_names_the_whole_batch_index(monkeypatch):
    def fake(cfgs, threads):
        for i, c in enumerate(cfgs):
            if c["width"] == 999:
                raise hpgo.HpgoError(f"configuration {i}: out of cheese")
        return [(c["dp"], c["tp"], c["pp"], c["microbatches"], 1.0, 2.0) for c in cfgs]

    monkeypatch.setattr(hpgo._core, "distir_batch", fake)
    cfgs = [dict(batch_size=64, width=256, layers=8)] * 7 + [dict(batch_size=64, width=999,
                                                                  layers=8)]
    with pytest.raises(hpgo.HpgoError, match="^configuration 7: out of cheese$"):
        hpgo.simulate_mlp_batch(cfgs)
    with cf.ThreadPoolExecutor(2) as ex:
        with pytest.raises(hpgo.HpgoError, match="^configuration 7: out of cheese$"):
            hpgo.simulate_mlp_batch(cfgs, executor=ex, chunksize=3)


def test_timeout_and_cancel():
    gate = threading.Event()
    ran = []

    class Slow(cf.ThreadPoolExecutor):
        def submit(self, fn, *a, **kw):
            def slow(*a):
                ran.append(1)
                gate.wait(5)
                return fn(*a)
            return super().submit(slow, *a)

    ex = Slow(1)
    try:
        t = time.monotonic()
        with pytest.raises(TimeoutError, match="sweep did not finish within its timeout of 0.2 s"):
            hpgo.sweep(RN50, 32, GBS, [8], progress=False, executor=ex, chunksize=8, timeout=0.2)
        assert time.monotonic() - t < 3
        gate.set()
    finally:
        ex.shutdown(wait=True)
    assert len(ran) == 1    # the pending chunks were cancelled, never started


def test_keyboard_interrupt_cancels_pending_futures():
    cancelled = []

    class Fut:
        def __init__(self, i):
            self.i = i

        def result(self, timeout=None):
            if self.i == 1:
                raise KeyboardInterrupt
            return []

        def cancel(self):
            cancelled.append(self.i)
            return True

    class Ex:
        n = 0

        def submit(self, fn, *a):
            self.n += 1
            return Fut(self.n - 1)

    with pytest.raises(KeyboardInterrupt):
        hpgo.sweep(RN50, 32, GBS[:8], [8], progress=False, executor=Ex(), chunksize=2)
    assert cancelled == [0, 1, 2, 3]


def test_chunk_sizes():
    assert dist.chunks(5, 2) == [(0, 2), (2, 4), (4, 5)]
    with cf.ThreadPoolExecutor(3) as ex:
        assert dist.workers(ex) == 3
        assert dist.default_chunksize(10000, ex, 32) == 834    # 4 tasks per worker
        assert dist.default_chunksize(100, ex, 32) == 32       # at least the minimum
        assert dist.default_chunksize(10, ex, 32) == 10


def test_nothing_imported_without_executor():
    code = ("import sys, hpgo; hpgo.sweep(hpgo.examples.path('resnet50'), 32, [64], [8], "
            "progress=False); bad = [m for m in ('dask', 'distributed', 'ray', "
            "'hpgo.distributed') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   cwd=os.path.dirname(__file__))


# ------------------------------------------------------------ a real Dask cluster


@pytest.fixture(scope="module")
def dask_client():
    distributed = need("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None, memory_limit=0) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def test_dask_sweep_grid_and_autoplan(dask_client, local_sweep, local_grid):
    rows = hpgo.sweep(RN50, 32, GBS, LAYOUTS, **SETTINGS, threads=1, executor=dask_client)
    assert rows_identical(rows, local_sweep)
    assert hpgo.grid_search(256, 1024, 16, devices=(1, 2, 4, 8, 16, 32), executor=dask_client,
                            progress=False) == local_grid
    c = hpgo.Cluster.preset("dgx-h100", nodes=8)
    assert ranking(hpgo.autoplan("llama3-70b", c, global_batch=512, executor=dask_client)) == \
        ranking(hpgo.autoplan("llama3-70b", c, global_batch=512))
    with pytest.raises(ValueError) as local:
        hpgo.sweep(RN50, 32, [64, 0], [8], progress=False)
    with pytest.raises(ValueError) as remote:
        hpgo.sweep(RN50, 32, [64, 0], [8], progress=False, executor=dask_client, chunksize=1)
    assert str(remote.value) == str(local.value)


# ------------------------------------------------------------ Ray, where it installs


def test_ray_pool(local_grid):
    # not a CI extra (a 80 MB wheel plus its dependencies): skipped without Ray
    pytest.importorskip("ray")
    from ray.util.multiprocessing import Pool

    pool = Pool(2, ray_address="local", ray_remote_args={"num_cpus": 0})
    try:
        assert hpgo.grid_search(256, 1024, 16, devices=(1, 2, 4, 8, 16, 32), executor=pool,
                                progress=False) == local_grid
        assert [r.gbs for r in hpgo.sweep(RN50, 32, GBS[:4], [8], progress=False,
                                          executor=pool)] == GBS[:4]
    finally:
        pool.terminate()
