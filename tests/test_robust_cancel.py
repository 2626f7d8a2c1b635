"""Ctrl-C and timeouts stop long calls (in a child process).

The glue runs long core calls on a helper thread and waits with the GIL
released, looking for signals every 50 ms (csrc/module/call_glue.c); the
core's loops read a cancel flag.  Each test sends SIGINT to the child while
a call that would take many seconds runs, and checks that KeyboardInterrupt
comes within 2 s, that no thread is left behind and that the process plans
correctly afterwards.  From worker threads, where Python delivers no
signal, timeout= raises TimeoutError."""
import sys

import pytest

from robust_child import UNDER_ASAN, run_child

pytestmark = pytest.mark.skipif(sys.platform != "linux" or UNDER_ASAN,
                                reason="signals and /proc/self/task (Linux), not under ASan")

PRELUDE = """
import os, signal, threading, time
import hpgo

def tasks():
    return len(os.listdir('/proc/self/task'))

def interrupted(f, delay=0.5):
    # seconds from SIGINT to KeyboardInterrupt, or None when f finished first
    box = {}
    def kill():
        time.sleep(delay)
        box['t0'] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)
    th = threading.Thread(target=kill)
    th.start()
    try:
        f()
        out = None
    except KeyboardInterrupt:
        out = time.monotonic() - box['t0']
    th.join()
    return out

def chain(L):
    ct, s = [], 0.0
    for _ in range(L):
        s += 0.01
        ct.append(s)
    return hpgo.model_from_states(ct, [1e6 * (k + 1) for k in range(L)],
                                  [4e6 * (k + 1) for k in range(L)], [1e6] * L,
                                  [list(range(k)) for k in range(L)],
                                  ['l%d' % k for k in range(L)], 1, 1024)

P = 'profiles/transformer36-v100/graph.txt'
small = hpgo.model_from_torch_graph(P, 1, 128)
expected = hpgo.AsyncOrchestrate(small, hpgo.Devices(16, [8, 16])).py_orchestrate()
base_tasks = tasks()

def still_works():
    # a joined thread leaves /proc/self/task a moment later
    for _ in range(50):
        if tasks() == base_tasks:
            break
        time.sleep(0.02)
    return (tasks() == base_tasks and
            hpgo.AsyncOrchestrate(small, hpgo.Devices(16, [8, 16])).py_orchestrate() == expected)
"""

LONG_CALLS = {
    # each takes from several seconds to minutes on the shared test machine
    "orchestrate": """
        big, d = chain(1500), hpgo.devices_from_seps(list(range(8, 1025, 8)))
        run = lambda: hpgo.AsyncOrchestrate(big, d, threads=2).orchestrate()""",
    "sweep": """
        run = lambda: hpgo.sweep(small, 1, list(range(32, 32 * 3000, 32)),
                                 [[8 * k for k in range(1, 17)]], threads=2)""",
    "grid_search": """
        run = lambda: hpgo.grid_search(65536, 16384, 4096, devices=[1, 2, 4, 8, 16, 32, 64, 128],
                                       threads=2)""",
    "simulate_pipeline": """
        st = [hpgo.Stage(1e-3, 2e-3, send_bytes=1e6, param_bytes=1e8)] * 64
        run = lambda: hpgo.simulate_pipeline(st, 2**20, timeline=False)""",
    "simulate_transformer": """
        run = lambda: hpgo.simulate_transformer(4096, 2048, 8192, 64, 4096, dp=4, tp=8, pp=8,
                                                microbatches=512, timeline=False)""",
    "autoplan": """
        c = hpgo.Cluster.preset('dgx-a100-80gb', nodes=8)
        run = lambda: hpgo.autoplan('gpt3-175b', c, global_batch=8192, exhaustive=True,
                                    threads=2)""",
    "autoplan_million_layers": """
        # the documented layer limit: each shape of the enumeration costs
        # O(layers), so the enumeration itself must read the flag
        m = hpgo.transformer(hidden=1024, ffn=4096, heads=8, layers=1_000_000, seq=1024,
                             vocab=1000)
        c = hpgo.Cluster.preset('dgx-h100', nodes=8)
        run = lambda: hpgo.autoplan(m, c, 64)""",
    "autoplan_million_layers_moe": """
        m = hpgo.transformer(hidden=1024, ffn=4096, heads=8, layers=1_000_000, seq=1024,
                             vocab=1000, experts=8, topk=2, expert_ffn=1024, moe_every=2)
        c = hpgo.Cluster.preset('dgx-h100', nodes=8)
        run = lambda: hpgo.autoplan(m, c, 64)""",
    "step_timeline_to_python": """
        # 8.4 M events: simulate keeps them in C; reading them all takes long
        m = hpgo.transformer(hidden=1024, ffn=4096, heads=16, layers=32, seq=1024, vocab=32000)
        c = hpgo.Cluster.preset('dgx-h100', nodes=2)
        p = hpgo.ParallelPlan(global_batch=2**18, tp=1, pp=16, dp=1, micro_batch=1)
        run = lambda: sum(1 for _ in hpgo.simulate(m, c, p).events)""",
    "pipeline_timeline_to_python": """
        st = [hpgo.Stage(1e-3, 2e-3, send_bytes=1e6, param_bytes=1e8)] * 16
        r = hpgo.simulate_pipeline(st, 2**16)
        run = lambda: (setattr(r, '_timeline', None), r.timeline)""",
    "replan": """
        L = 70000  # 4 x 70,000^2 / 2 steps: under HPGO_REPLAN_MAX_WORK, ~15 s
        run = lambda: hpgo.replan([1.0] * L, [2.0] * L, current=[L // 4] * 4,
                                  slowdown=[1, 2, 1, 1], method='dp')""",
}


@pytest.mark.parametrize("name", sorted(LONG_CALLS))
def test_ctrl_c_stops_a_long_call(name):
    import textwrap
    child = run_child(PRELUDE + textwrap.dedent(LONG_CALLS[name]) + """
result['first'] = interrupted(run)
result['second'] = interrupted(run, delay=1.5)
result['works'] = still_works()
""", timeout=300)
    assert child.returncode == 0, child.describe()
    r = child.result
    for k in ("first", "second"):
        assert r[k] is not None, f"{name} finished before the signal: {r}"
        assert r[k] < 2.0, r
    assert r["works"], r


def test_timeout_from_a_worker_thread():
    """Python delivers signals to the main thread only: a worker thread gets
    out of a long call with timeout=, as a TimeoutError naming the call."""
    child = run_child(PRELUDE + """
from concurrent.futures import ThreadPoolExecutor
big, d = chain(1500), hpgo.devices_from_seps(list(range(8, 1025, 8)))
L = 70000  # 4 x 70,000^2 / 2 steps: under HPGO_REPLAN_MAX_WORK, ~15 s
calls = {
    'orchestrate': lambda: hpgo.AsyncOrchestrate(big, d, threads=2, timeout=0.5).orchestrate(),
    'best_plan': lambda: hpgo.best_plan(big, 1, 1024, d, threads=2, timeout=0.5),
    'sweep': lambda: hpgo.sweep(small, 1, list(range(32, 32 * 3000, 32)), [[8, 16, 24, 32]],
                                threads=2, timeout=0.5),
    'replan': lambda: hpgo.replan([1.0] * L, [2.0] * L, current=[L // 4] * 4,
                                  slowdown=[1, 2, 1, 1], method='dp', timeout=0.5),
    'autoplan': lambda: hpgo.autoplan('gpt3-175b', hpgo.Cluster.preset('dgx-a100-80gb', nodes=8),
                                      global_batch=8192, exhaustive=True, threads=2,
                                      timeout=0.5),
}
def attempt(f):
    t = time.monotonic()
    try:
        f()
        return None
    except TimeoutError as e:
        return [time.monotonic() - t, str(e)]
with ThreadPoolExecutor(2) as ex:
    result['timeouts'] = {k: ex.submit(attempt, f).result() for k, f in calls.items()}
result['works'] = still_works()
result['same'] = hpgo.AsyncOrchestrate(small, hpgo.Devices(16, [8, 16]),
                                       timeout=600).py_orchestrate() == expected
""", timeout=300)
    assert child.returncode == 0, child.describe()
    r = child.result
    for name, got in r["timeouts"].items():
        assert got is not None, f"{name} finished within its timeout: {r}"
        secs, msg = got
        assert 0.4 < secs < 2.5, (name, got)
        assert "timeout of 0.5 s" in msg, msg
    assert r["works"] and r["same"], r


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1.0, ValueError),
                                      (float("nan"), ValueError), ("1", TypeError),
                                      (True, TypeError)])
def test_bad_timeouts(bad, exc):
    import hpgo
    m = hpgo.model_from_torch_graph("profiles/transformer36-v100/graph.txt", 1, 128)
    d = hpgo.Devices(16, [8, 16])
    with pytest.raises(exc, match="timeout"):
        hpgo.AsyncOrchestrate(m, d, timeout=bad)
    with pytest.raises(exc, match="timeout"):
        hpgo.sweep(m, 1, [128], [8, 16], timeout=bad)
    with pytest.raises(exc, match="timeout"):
        hpgo.replan([1.0] * 4, [1.0] * 4, current=[2, 2], timeout=bad)


def test_autoplan_timeout_in_every_phase():
    """timeout= stops the search within a second whichever phase it is in:
    enumeration (O(layers) per shape on a 1,000,000-layer model), bounds or
    simulations."""
    child = run_child(PRELUDE + """
m = hpgo.transformer(hidden=1024, ffn=4096, heads=8, layers=1_000_000, seq=1024, vocab=1000)
c = hpgo.Cluster.preset('dgx-h100', nodes=8)
late = []
for to in (0.2, 1.0, 3.0):
    t = time.monotonic()
    try:
        hpgo.autoplan(m, c, 64, timeout=to)
        late.append(None)
    except TimeoutError:
        late.append(time.monotonic() - t - to)
result['late'] = late
result['works'] = still_works()
""", timeout=300)
    assert child.returncode == 0, child.describe()
    r = child.result
    assert all(x is not None and x < 1.0 for x in r["late"]), r
    assert r["works"], r
