"""Leaks and memory bounds, in a child process.

Every kind of public call, on its success path and on its error paths, is
repeated after a warm-up while glibc's heap in use (mallinfo2: uordblks +
hblkhd, which counts every malloc of the C core and of the glue) is
watched: it must come back to where it was, so even a leak of a few dozen
bytes per call fails.  Resident memory over a few thousand plan calls stays
flat (benchmarks/bench_memory.py measures 10,000).

glibc's statistics do not see Python's own allocator (pymalloc serves small
objects from arenas it keeps), so a second measurement counts the blocks
Python has allocated (sys.getallocatedblocks): a call that leaks even one
Python object (a reference never dropped) grows it by one per call."""
import ctypes
import ctypes.util
import sys
import textwrap

import pytest

from robust_child import UNDER_ASAN, run_child


def _has_mallinfo2():
    if sys.platform != "linux":
        return False
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallinfo2")
    except OSError:
        return False


needs_mallinfo2 = pytest.mark.skipif(UNDER_ASAN or not _has_mallinfo2(),
                                     reason="needs glibc's mallinfo2 (not under AddressSanitizer)")

HEAP = """
    import ctypes, ctypes.util, gc, sys
    class _MI2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.mallinfo2.restype = _MI2
    except (OSError, AttributeError):
        _libc = None
    def heap():
        gc.collect()
        m = _libc.mallinfo2()
        return m.uordblks + m.hblkhd
    def growth(f, n):
        # two windows after a warm-up: a leak grows both, a one-time cache or a
        # heap reorganisation only one
        for _ in range(30):
            f()
        w = []
        for _ in range(2):
            a = heap()
            for _ in range(n):
                f()
            w.append(heap() - a)
        return min(w)
    def blocks_growth(f, n):
        # Python objects left alive per window; caches (interned strings,
        # type caches) fill during the warm-up, so a leak grows both windows
        for _ in range(30):
            f()
        w = []
        for _ in range(2):
            gc.collect()
            a = sys.getallocatedblocks()
            for _ in range(n):
                f()
            gc.collect()
            w.append(sys.getallocatedblocks() - a)
        return min(w)
    def expect(exc, f, *a, **k):
        def g():
            try:
                f(*a, **k)
            except exc:
                return
            raise AssertionError(f"{f} did not raise {exc}")
        return g
"""

CALLS = """
    import hpgo
    from hpgo import _core
    P = 'profiles/transformer36-v100/graph.txt'
    C = 'tests/corpus/'
    R = 'tests/corpus_robust/'
    m = hpgo.model_from_torch_graph(P, 1, 128)
    d = hpgo.Devices(16, [8, 16])
    plan = hpgo.AsyncOrchestrate(m, d).py_orchestrate()
    st = [hpgo.Stage(1e-3, 2e-3, send_bytes=1e6, param_bytes=1e8, replicas=2)] * 3
    class Liar(list):
        def __len__(self):
            return 0
    def maybe(exc, f, *a, **k):
        try:
            f(*a, **k)
        except exc:
            pass
    def maybe_timeout():
        # a tiny timeout: the helper thread is stopped or finishes first
        maybe(TimeoutError, hpgo.AsyncOrchestrate(m, d, timeout=1e-6).orchestrate)
    import tempfile, os
    plan_path = os.path.join(tempfile.mkdtemp(), 'plan.json')
    hpgo.Plan.from_hpgo(plan, m, d).save(plan_path)
    calls = {
        # success paths
        'read_profile': lambda: _core.read_profile(C + 'ok_duplicate_edges.txt'),
        'model_from_file': lambda: hpgo.model_from_torch_graph(P, 2, 64),
        'model_from_states': lambda: hpgo.model_from_states(
            [1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 1.0], [[], [0]], ['a', 'b'], 1, 4),
        'normalized_copy_layers': lambda: m.normalized_copy(64).layers,
        'devices': lambda: hpgo.Devices(16, [4, 8, 12, 16]).seps,
        'orchestrate': lambda: hpgo.AsyncOrchestrate(m, d, threads=2).orchestrate(),
        'py_orchestrate': lambda: hpgo.AsyncOrchestrate(m, d).py_orchestrate(),
        'conductor': lambda: hpgo.conductor_from_torch_graph_and_seps(P, 1, 128, [8, 16]),
        'dp_estimates': lambda: (hpgo.dp_speedup(d, m), hpgo.dp_p3_speedup(d, m),
                                 hpgo.dp_cur_ga_p3_speedup(d, m),
                                 hpgo.dp_cur_ga_inner_overlap_speedup(d, m),
                                 hpgo.dp_opt_ga_p3_speedup(d, m),
                                 hpgo.current_ga_iter_size(d, m), hpgo.optimal_ga_iter_size(d, m)),
        'sweep': lambda: hpgo.sweep(m, 128, [64, 256], [[8, 16], [16]], threads=2),
        'simulate_pipeline': lambda: hpgo.simulate_pipeline(st, 8, 'pipedream').timeline,
        'chrome_trace': lambda: hpgo.simulate_pipeline(st, 4).to_chrome_trace(),
        'simulate_plan': lambda: hpgo.simulate_plan(m, plan),
        'simulate_mlp': lambda: hpgo.simulate_mlp(1024, 256, 8, dp=2, pp=2,
                                                  microbatches=2).timeline,
        'simulate_transformer': lambda: hpgo.simulate_transformer(4, 16, 64, 4, 2, tp=2),
        'grid_search': lambda: hpgo.grid_search(256, 64, 4, devices=[1, 2, 4], threads=2),
        # error paths
        'parse_error': expect(ValueError, _core.read_profile, C + 'bad_nonnumeric.txt'),
        'cycle_error': expect(ValueError, hpgo.model_from_torch_graph, C + 'bad_cycle.txt', 1, 8),
        'utf8_error': expect(ValueError, _core.read_profile, R + 'bad_utf8_overlong.txt'),
        'model_error': expect(ValueError, hpgo.model_from_torch_graph,
                              R + 'bad_sum_overflow.txt', 1, 8),
        'missing_file': expect(FileNotFoundError, _core.read_profile, C + 'nope.txt'),
        'directory': expect(OSError, _core.read_profile, C),
        'bad_pbs': expect(ValueError, hpgo.model_from_torch_graph, P, 0, 8),
        'bad_states': expect(ValueError, hpgo.model_from_states, [1.0, 2.0], [1.0, 2.0],
                             [1.0, 2.0], [1.0, 1.0], [[], [1]], ['a', 'b'], 1, 4),
        'lying_preds': expect(ValueError, hpgo.model_from_states, [1.0, 2.0, 3.0], [1.0] * 3,
                              [1.0] * 3, [1.0] * 3, [[], [0], Liar([0, 1])], ['a', 'b', 'c'], 1, 1),
        'bad_labels': expect(TypeError, hpgo.model_from_states, [1.0, 2.0], [1.0, 2.0],
                             [1.0, 2.0], [1.0, 1.0], [[], [0]], ['a', 2], 1, 4),
        'bad_seps': expect(ValueError, hpgo.Devices, 16, [8, 4, 16]),
        'too_many_gpus': expect(ValueError, hpgo.Devices, 100000, [100000]),
        'bad_sweep': expect(ValueError, hpgo.sweep, m, 128, [64, 0], [[8, 16]]),
        'bad_sweep_layout': expect(ValueError, hpgo.sweep, m, 128, [64], [[8, 16], [4, 2]]),
        'bad_pipeline': expect(ValueError, hpgo.simulate_pipeline,
                               [hpgo.Stage(1, 1, gpus=(0, 0))], 2),
        'pipeline_limit': expect(ValueError, hpgo.simulate_pipeline, st * 64, 2**18),
        'bad_mlp': expect(ValueError, hpgo.simulate_mlp, 8, 9, 2, tp=2),
        'bad_batch': expect(ValueError, hpgo.simulate_mlp_batch,
                            [dict(batch_size=8, width=8, layers=2), dict(batch_size=0, width=8,
                                                                         layers=2)]),
        'index_error': expect(IndexError, m.ct, 0, 99),
        'missing_model': expect(FileNotFoundError, hpgo.model_from_torch_graph, C + 'nope.txt',
                                1, 8),
        'missing_conductor': expect(FileNotFoundError, hpgo.conductor_from_torch_graph_and_seps,
                                    C + 'nope.txt', 1, 8, [8]),
        'missing_plan': expect(FileNotFoundError, hpgo.Plan.load, C + 'nope.json'),
        'replan': lambda: hpgo.replan([1.0] * 8, [2.0] * 8, current=[2, 2, 2, 2],
                                      slowdown=[1.0, 2.0, 1.0, 1.0]),
        'replan_error': expect(ValueError, hpgo.replan, [1.0] * 8, [2.0] * 8, current=[2, 2, 2]),
        'pipeline_score': lambda: hpgo.pipeline_score([1.0, 2.0], [2.0, 4.0]),
        'split_batch': lambda: hpgo.split_batch(64, [1.0, 0.5, 2.0]),
        'slice_table': lambda: hpgo.slice_table([3, 5], [4, 4]),
        'slice_error': expect(ValueError, hpgo.slice_table, [3, 5], [4, 5]),
        'detector': lambda: hpgo.StragglerDetector(2, window=2).feed([[1.0, 1.0]] * 6),
        'plan_json': lambda: hpgo.Plan.from_json(hpgo.Plan.from_hpgo(plan, m, d).to_json()),
        'plan_json_error': expect(ValueError, hpgo.Plan.from_json, '{"stages": 3}'),
        # paths added by issue 16: timeouts, argument policy, file policy, limits
        'timeout': maybe_timeout,
        'sweep_timeout': lambda: maybe(TimeoutError, hpgo.sweep, m, 1, [64, 128], [8, 16],
                                       timeout=1e-6),
        'bad_timeout': expect(ValueError, hpgo.AsyncOrchestrate, m, d, timeout=-1),
        'overflow_arg': expect(ValueError, hpgo.AsyncOrchestrate, m, d, threads=2**63),
        'huge_real': expect(ValueError, hpgo.simulate_pipeline, [hpgo.Stage(10**400, 1.0)], 2),
        'state_index': expect(IndexError, m.oa, 2**63),
        'device_file': expect(ValueError, hpgo.Plan.load, '/dev/zero'),
        'plan_file': lambda: hpgo.Plan.load(plan_path),
        'plan_save': lambda: hpgo.Plan.load(plan_path).save(plan_path),
        'slice_limit': expect(ValueError, hpgo.slice_table, [1] * 5000, [1] * 5000),
        'replan_limit': expect(ValueError, hpgo.replan, [1.0] * 5000, [1.0] * 5000,
                               current=[5] * 1000, method='dp', microbatches=2001),
        'no_micro_batch': expect(hpgo.PlanningError, hpgo.best_plan, m, 1, 128, [8, 16],
                                 min_micro_batch_size=4096),
        'not_finite': expect(ValueError, hpgo.pipeline_score, [1e308, 1e308], [1e308, 1e308]),
        'bad_tiling': expect(ValueError, hpgo.simulate_plan, m, [(0, 20, 1, [0]), (19, 38, 1,
                                                                                   [1])]),
        'orchestrate_type': expect(TypeError, hpgo.AsyncOrchestrate, m, None),
    }
"""


def _src(code):
    return textwrap.dedent(HEAP) + textwrap.dedent(CALLS) + textwrap.dedent(code)


@needs_mallinfo2
def test_no_call_and_no_error_path_leaks():
    child = run_child(_src("""
        n = 200
        result['growth'] = {name: growth(f, n) for name, f in calls.items()}
        result['n'] = n
        """), timeout=600)
    assert child.returncode == 0, child.describe()
    growth, n = child.result["growth"], child.result["n"]
    assert len(growth) >= 35
    # a leak of 40 bytes per call shows as 8,000 bytes in each window
    leaking = {k: v for k, v in growth.items() if v > 6 * 1024}
    assert not leaking, leaking


def test_no_call_and_no_error_path_leaks_python_objects():
    """The same calls, counting Python's own blocks (which glibc's statistics
    miss): each FileNotFoundError of the glue used to leave two objects."""
    child = run_child(_src("""
        n = 100
        result['growth'] = {name: blocks_growth(f, n) for name, f in calls.items()}
        result['n'] = n
        """), timeout=600)
    assert child.returncode == 0, child.describe()
    growth, n = child.result["growth"], child.result["n"]
    assert len(growth) >= 45
    # one object per call is 100 blocks a window; allow a few for caches
    leaking = {k: v for k, v in growth.items() if v > n // 4}
    assert not leaking, leaking


def test_the_block_counter_sees_one_object_per_call():
    child = run_child(_src("""
        keep = []
        result['kept'] = blocks_growth(lambda: keep.append(hpgo.Devices(16, [8, 16])), 100)
        """), timeout=120)
    assert child.returncode == 0, child.describe()
    assert child.result["kept"] >= 100


@needs_mallinfo2
def test_the_detector_sees_a_leak():
    """The measurement above is sensitive enough: keeping 300 small C-allocated
    results alive shows up."""
    child = run_child(_src("""
        keep = []
        result['kept'] = growth(lambda: keep.append(hpgo.Devices(16, [8, 16])), 200)
        """), timeout=120)
    assert child.returncode == 0, child.describe()
    assert child.result["kept"] > 6 * 1024


@needs_mallinfo2
def test_resident_memory_stays_flat_over_repeated_plans():
    child = run_child("""
        import hpgo
        def rss_mb():
            with open('/proc/self/status') as f:
                for line in f:
                    if line.startswith('VmRSS:'):
                        return int(line.split()[1]) / 1024.0
        c = hpgo.conductor_from_torch_graph_and_seps('profiles/transformer36-v100/graph.txt',
                                                     1, 128, [8, 16])
        for _ in range(200):
            c.py_orchestrate()
        start = rss_mb()
        for _ in range(1500):
            c.py_orchestrate()
        result['growth_mb'] = rss_mb() - start
        """, timeout=600)
    assert child.returncode == 0, child.describe()
    assert child.result["growth_mb"] < 2.0, child.result
    assert child.peak_mb < 200
