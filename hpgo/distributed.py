"""Studies larger than one machine: the ``executor=`` of :func:`hpgo.sweep`,
:func:`hpgo.grid_search`, :func:`hpgo.simulate_mlp_batch` and
:func:`hpgo.autoplan`.

DESIGN: a call with ``executor=`` validates its arguments here, exactly as
the local call does, then cuts its cases into chunks of consecutive cases
(whole global batch sizes of a sweep, whole device counts of a grid search,
consecutive configurations of a batch, one fixed ``tp`` of an autoplan
search, or one ``pp`` when ``tp`` is given).  Each chunk is one task: a
module-level function of this file that makes the same pooled C call the
local run makes, on the worker, with the GIL released and ``threads`` C
threads.  Results are collected in chunk order, so rows come back in the
original order; every case is independent and deterministic, so they are
bit-identical to the local run (autoplan's per-task top lists merge by the
local order: see :func:`merge_ranked`).

Executors: anything with ``submit(fn, *args)`` returning futures with
``result()`` (``concurrent.futures``, a ``dask.distributed.Client``), or
with ``map(fn, iterable)`` only (``multiprocessing.Pool``,
``ray.util.multiprocessing.Pool``).  A worker's exception is re-raised as
it is (same type and message as the local call).  Ctrl-C, a timeout or an
error cancels the futures still pending (``future.cancel()``).

Chunk size: ``chunksize=`` (cases per task) or, by default, enough chunks
for about four per worker and no fewer cases per task than the call's
minimum (a task should take tens of milliseconds at least, or scheduling
and pickling dominate: docs/distributed.md has the numbers).  Nothing here
imports Dask or Ray.
"""
from __future__ import annotations

import math
import re
import time
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from . import _core

__all__ = ["chunks", "default_chunksize", "run", "workers", "merge_ranked"]

#: tasks per worker the default chunk size aims at (load balance vs overhead)
TASKS_PER_WORKER = 4


def workers(executor: Any) -> int:
    """How many tasks ``executor`` runs at once, as far as it tells (else 4)."""
    mod = type(executor).__module__ or ""
    try:
        if mod.startswith("distributed") and hasattr(executor, "scheduler_info"):
            info = executor.scheduler_info()
            n = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
            return max(1, n)
        for attr in ("_max_workers", "_processes"):
            k = getattr(executor, attr, None)
            if isinstance(k, int) and k > 0:
                return k
    except Exception:  # pragma: no cover - a foreign executor's introspection failed
        pass
    return 4


def default_chunksize(n: int, executor: Any, minimum: int) -> int:
    """Cases per task: about ``TASKS_PER_WORKER`` tasks per worker, at least
    ``minimum`` cases each (never more than ``n``)."""
    per = math.ceil(n / (TASKS_PER_WORKER * workers(executor))) if n else 1
    return max(1, min(n, max(minimum, per)))


def check_chunksize(chunksize: Any) -> Optional[int]:
    if chunksize is None:
        return None
    if isinstance(chunksize, bool) or not hasattr(chunksize, "__index__"):
        raise TypeError(f"chunksize must be an int or None, not {type(chunksize).__name__}")
    c = chunksize.__index__()
    if c < 1:
        raise ValueError(f"chunksize must be >= 1, got {c}")
    return int(c)


def chunks(n: int, size: int) -> List[Tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in order."""
    return [(i, min(n, i + size)) for i in range(0, n, size)]


def check_executor(executor: Any) -> None:
    if not (callable(getattr(executor, "submit", None)) or callable(getattr(executor, "map",
                                                                              None))):
        raise TypeError("executor must have submit(fn, *args) (concurrent.futures, a "
                        "dask.distributed.Client) or map(fn, iterable) (multiprocessing.Pool, "
                        f"ray.util.multiprocessing.Pool); got {type(executor).__name__}")


def _call(task: Tuple[Any, ...]) -> Any:
    """Run one task ``(fn, *args)``: what map-only executors are given."""
    return task[0](*task[1:])


def _timeout_error(what: str, timeout: float) -> TimeoutError:
    # the local calls' message (csrc/module/call_glue.c)
    return TimeoutError(f"{what} did not finish within its timeout of {timeout:.6g} s; it was "
                        "stopped and nothing was kept (give a larger timeout=, or None for no "
                        "limit)")


def run(executor: Any, fn: Callable[..., Any], tasks: Sequence[Tuple[Any, ...]], *,
        what: str, timeout: Optional[float] = None,
        done: Optional[Callable[[int], None]] = None) -> List[Any]:
    """``[fn(*t) for t in tasks]`` on ``executor``, in order.

    ``timeout`` (seconds, for the whole call) raises the local call's
    TimeoutError; ``done(i)`` is called as result ``i`` arrives (progress).
    Any exception, KeyboardInterrupt included, cancels the pending futures.
    """
    check_executor(executor)
    deadline = None if timeout is None else time.monotonic() + timeout
    submit = getattr(executor, "submit", None)
    if not callable(submit):
        # map-only (multiprocessing-style pools): no futures to cancel
        out = list(executor.map(_call, [(fn,) + tuple(t) for t in tasks]))
        if deadline is not None and time.monotonic() > deadline:
            raise _timeout_error(what, timeout)  # type: ignore[arg-type]
        if done is not None:
            for i in range(len(out)):
                done(i)
        return out
    kw = {}
    if (type(executor).__module__ or "").startswith("distributed"):
        kw["pure"] = False  # every task is new work: no hashing of the arguments
    futures: List[Any] = []
    try:
        for t in tasks:
            futures.append(submit(fn, *t, **kw))
        out = []
        for i, f in enumerate(futures):
            if deadline is None:
                out.append(f.result())
            else:
                left = deadline - time.monotonic()
                try:
                    out.append(f.result(timeout=max(left, 0.0)))
                except Exception as e:
                    # waiting ran out (concurrent.futures', asyncio's or the
                    # builtin TimeoutError, by Python version and engine)
                    if "TimeoutError" not in type(e).__name__ or time.monotonic() < deadline:
                        raise
                    raise _timeout_error(what, timeout) from None  # type: ignore[arg-type]
            if done is not None:
                done(i)
        return out
    except BaseException:
        for f in futures:
            try:
                f.cancel()
            except Exception:  # pragma: no cover - a future that cannot be cancelled
                pass
        raise


def gbar_done(bar: Any, spans: Sequence[Tuple[int, int]]) -> Callable[[int], None]:
    """A ``done`` callback that moves a progress line to the end of chunk i."""
    return lambda i: bar.update(spans[i][1])


# ------------------------------------------------------------------ tasks
# Module-level so that every engine can pickle them by reference.

def sweep_task(model: Any, layouts: list, gbs: list, threads: int, exhaustive: bool,
               timeout: Optional[float]) -> list:
    """One chunk of global batch sizes of :func:`hpgo.sweep` (raw rows)."""
    return _core._sweep(model, layouts, gbs, threads, exhaustive, timeout)


def grid_task(base: dict, ws: list, mbs: Optional[list], threads: int) -> list:
    """One chunk of device counts of :func:`hpgo.grid_search` (raw rows)."""
    return _core.distir_grid(base, ws, mbs, threads)


def batch_task(cfgs: list, threads: int, offset: int = 0) -> list:
    """One chunk of configurations of :func:`hpgo.simulate_mlp_batch`; the
    chunk starts at configuration ``offset`` of the whole batch, which an
    error message names as the local call does."""
    try:
        return _core.distir_batch(cfgs, threads)
    except Exception as e:
        m = re.match(r"configuration (\d+): ", str(e.args[0]) if e.args else "")
        if not offset or m is None or len(e.args) != 1:
            raise
        try:
            again = type(e)(f"configuration {int(m.group(1)) + offset}: {e.args[0][m.end():]}")
        except Exception:  # pragma: no cover - an exception type that needs more arguments
            raise e from None
        raise again from None


def autoplan_task(model: tuple, cluster: tuple, opts: tuple, timeout: Optional[float]) -> dict:
    """One fixed-``tp`` search of :func:`hpgo.autoplan` (its raw result)."""
    return _core._autoplan(model, cluster, opts, timeout)


def merge_ranked(results: Iterable[dict], top: int) -> dict:
    """Merge the autoplan results of searches that each fixed ``tp`` (or
    ``tp`` and ``pp``) into the one the whole search gives.

    The local search ranks plans by (score, enumeration index), and its
    enumeration runs over GPU counts (largest first), then ``tp``, then
    ``cp`` (where the search has context parallelism), then ``pp``, all
    ascending, then the rest; a search with fixed values keeps that order
    among its own plans, and plans of different tasks differ in ``tp`` or
    ``pp``.  So sorting every task's top list by (score, -GPUs, tp, cp, pp,
    rank in its task) and keeping ``top`` gives exactly the local top
    list.  Statistics are summed: ``candidates``, ``rejected`` and
    ``pruned_memory`` equal the local ones; ``simulated``, ``pruned_time``
    and ``did_not_fit`` count each task's own pruning.
    """
    keyed = []
    stats: dict = {}
    for d in results:
        for rank, entry in enumerate(d["plans"]):
            pt, _t, score, _balanced = entry
            tp, pp, dp, cp = pt[:4]  # ep regroups these GPUs: not a factor of the count
            keyed.append(((score, -(tp * pp * dp * cp), tp, cp, pp, rank), entry))
        for k, v in d.items():
            if k != "plans":
                stats[k] = stats.get(k, 0) + v
    keyed.sort(key=lambda e: e[0])
    stats["plans"] = [e for _, e in keyed[:top]]
    return stats
