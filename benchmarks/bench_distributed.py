"""A design-space study on executors: every profile that ships with hpgo x
global batch sizes x two layouts through hpgo.sweep (12,800 cases by
default), locally (1 and 2 C threads), on threads, on 1 and 2 worker
processes (concurrent.futures) and on a Dask LocalCluster with 1 and 2
worker processes; checks every run gives the local rows; prints seconds,
cases per second and the overhead per case against the local 1-thread run,
then the per-task overhead (chunksize=1).  Run from anywhere:

    python benchmarks/bench_distributed.py [--gbs-step 16] [--no-dask]
    python benchmarks/bench_distributed.py --scheduler tcp://scheduler:8786
"""
import argparse
import concurrent.futures as cf
import multiprocessing
import time

import hpgo
from hpgo import examples

LAYOUTS = [[8, 16], [8]]


def study(gbs, executor=None, threads=1, chunksize=None):
    out = []
    for name in examples.names():
        out.append(hpgo.sweep(examples.path(name), 1, gbs, LAYOUTS, threads=threads,
                              progress=False, executor=executor, chunksize=chunksize))
    return out


def same(a, b):
    return all(x == y and [(r.candidates, r.skipped) for r in x]
               == [(r.candidates, r.skipped) for r in y] for x, y in zip(a, b))


def timed(label, gbs, ref, n, base, **kw):
    t = time.perf_counter()
    rows = study(gbs, **kw)
    s = time.perf_counter() - t
    ok = ref is None or same(rows, ref)
    over = "" if base is None else f"{(s - base) / n * 1e6:+9.1f} us"
    print(f"{label:44s} {s:8.2f} s {n / s:9.0f} cases/s {over:>13s}  "
          f"{'identical' if ok else 'DIFFERENT'}", flush=True)
    if not ok:
        raise SystemExit("rows differ from the local run")
    return rows, s


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gbs-step", type=int, default=16,
                    help="global batch sizes step..4096 (default 16: 256 sizes)")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--scheduler", help="a Dask scheduler address instead of local clusters")
    a = ap.parse_args()
    gbs = list(range(a.gbs_step, 4097, a.gbs_step))
    n = len(examples.names()) * len(gbs) * len(LAYOUTS)
    print(f"{len(examples.names())} profiles x {len(gbs)} batch sizes x {len(LAYOUTS)} layouts "
          f"= {n} cases; overhead per case against the local 1-thread run")
    ref, base = timed("local, 1 C thread", gbs, None, n, None, threads=1)
    timed("local, 2 C threads", gbs, ref, n, base, threads=2)
    with cf.ThreadPoolExecutor(2) as ex:
        timed("ThreadPoolExecutor(2), 1 C thread each", gbs, ref, n, base, executor=ex)
    ctx = multiprocessing.get_context("spawn")
    for w in (1, 2):
        with cf.ProcessPoolExecutor(w, mp_context=ctx) as ex:
            ex.submit(int).result()     # start the workers outside the timing
            timed(f"ProcessPoolExecutor({w}), 1 C thread each", gbs, ref, n, base, executor=ex)
    if a.no_dask and not a.scheduler:
        return
    import distributed

    if a.scheduler:
        with distributed.Client(a.scheduler) as client:
            timed(f"Dask {a.scheduler}", gbs, ref, n, base, executor=client)
        return
    for w in (1, 2):
        with distributed.LocalCluster(n_workers=w, processes=True, threads_per_worker=1,
                                      dashboard_address=None, memory_limit=0) as cluster:
            with distributed.Client(cluster) as client:
                timed(f"Dask LocalCluster, {w} worker process(es)", gbs, ref, n, base,
                      executor=client)
                if w == 2:
                    few = gbs[:64]
                    m = len(examples.names()) * len(few) * len(LAYOUTS)
                    t = time.perf_counter()
                    study(few, executor=client, chunksize=1)
                    s = time.perf_counter() - t
                    t = time.perf_counter()
                    study(few, executor=client)
                    s2 = time.perf_counter() - t
                    tasks = len(examples.names()) * len(few)   # one gbs (2 cases) per task
                    print(f"  chunksize=1 ({tasks} tasks of 2 cases): {s:.2f} s against "
                          f"{s2:.2f} s by default: {(s - s2) / tasks * 1e3:.2f} ms per task",
                          flush=True)


if __name__ == "__main__":
    main()
