"""Pipeline-plan simulator: exact small schedules, properties, plans, bad input."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hpgo
from hpgo.sim import Stage, simulate_pipeline, simulate_plan

from pipedream_ref import steady_period


def compute_events(res, device):
    return [(e.name, e.microbatch, e.start, e.end) for e in res.timeline
            if e.device == device and e.lane == 0]


# ---------------------------------------------------------------- exact schedules

# Two stages, two micro-batches: forward 1 / 3 s, backward 2 / 4 s, each
# transfer 0.5 s (1e9 bytes at 2e9 bytes/s).  The timelines below are worked
# out by hand from the schedule definitions.
TWO_BY_TWO = [Stage(1.0, 2.0, send_bytes=1e9), Stage(3.0, 4.0, send_bytes=1e9)]


def test_1f1b_two_stages_two_microbatches_by_hand():
    r = simulate_pipeline(TWO_BY_TWO, 2, "1f1b", link_bandwidth=2e9)
    assert compute_events(r, 0) == [("forward", 0, 0.0, 1.0), ("forward", 1, 1.0, 2.0),
                                    ("backward", 0, 9.0, 11.0), ("backward", 1, 16.0, 18.0)]
    assert compute_events(r, 1) == [("forward", 0, 1.5, 4.5), ("backward", 0, 4.5, 8.5),
                                    ("forward", 1, 8.5, 11.5), ("backward", 1, 11.5, 15.5)]
    sends = [(e.device, e.peer, e.microbatch, e.start, e.end) for e in r.timeline
             if e.name == "send"]
    assert sends == [(0, 1, 0, 1.0, 1.5), (0, 1, 1, 2.0, 2.5), (1, 0, 0, 8.5, 9.0),
                     (1, 0, 1, 15.5, 16.0)]
    recvs = [(e.device, e.peer, e.start, e.end) for e in r.timeline if e.name == "recv"]
    assert [(d, p) for d, p, _, _ in recvs] == [(1, 0), (1, 0), (0, 1), (0, 1)]
    assert r.iteration_time == 18.0
    assert [s.max_in_flight for s in r.stages] == [2, 1]
    assert r.bubble == pytest.approx([1 - 6 / 18, 1 - 14 / 18])


def test_gpipe_two_stages_two_microbatches_by_hand():
    r = simulate_pipeline(TWO_BY_TWO, 2, "gpipe", link_bandwidth=2e9)
    assert compute_events(r, 0) == [("forward", 0, 0.0, 1.0), ("forward", 1, 1.0, 2.0),
                                    ("backward", 0, 12.0, 14.0), ("backward", 1, 16.0, 18.0)]
    assert compute_events(r, 1) == [("forward", 0, 1.5, 4.5), ("forward", 1, 4.5, 7.5),
                                    ("backward", 0, 7.5, 11.5), ("backward", 1, 11.5, 15.5)]
    assert r.iteration_time == 18.0
    assert [s.max_in_flight for s in r.stages] == [2, 2]


def test_allreduce_and_memory_by_hand():
    # one stage on 4 GPUs: ring all-reduce 2*(3/4)*8e9 / 1e10 = 1.2 s after 3 x (1 + 2) s
    r = simulate_pipeline([Stage(1.0, 2.0, param_bytes=8e9, activation_bytes=1e9, replicas=4)],
                          3, allreduce_bandwidth=1e10, optimizer_factor=2.0)
    assert r.iteration_time == pytest.approx(9.0 + 1.2)
    ar = [e for e in r.timeline if e.name == "all_reduce"]
    assert sorted(e.device for e in ar) == [0, 1, 2, 3]
    assert all(e.start == 9.0 and e.duration == pytest.approx(1.2) for e in ar)
    s = r.stages[0]
    assert (s.weight_bytes, s.gradient_bytes, s.optimizer_bytes) == (8e9, 8e9, 16e9)
    assert s.max_in_flight == 1 and s.activation_bytes == 1e9
    assert s.peak_bytes == 8e9 + 8e9 + 16e9 + 1e9
    assert [d.device for d in r.devices] == [0, 1, 2, 3]


def test_pipedream_steady_state_by_hand():
    # two equal stages, no transfers: steady state is one (f + b) per micro-batch
    r = simulate_pipeline([Stage(1.0, 1.0), Stage(1.0, 1.0)], 4, "pipedream")
    assert r.iteration_time == pytest.approx(8.0)
    assert r.stages[0].max_in_flight == 2
    assert r.stages[0].weight_bytes == 0.0
    r2 = simulate_pipeline([Stage(1.0, 1.0, param_bytes=10.0), Stage(1.0, 1.0, param_bytes=10.0)],
                           4, "pipedream")
    assert [s.weight_bytes for s in r2.stages] == [20.0, 10.0]  # stashed versions
    mbs = sorted({e.microbatch for e in r.timeline})
    assert mbs == list(range(5 * 4))  # 3 + 2 ceil((S-1)/M) iterations back to back


def test_pipedream_period_after_every_stage_settles():
    # issue 11: stage 0 is the bottleneck (f + b = 4 s per micro-batch) and
    # its round trip to stage 1 (1.3 + 0.2 + 0.8 + 1.3 s) hides behind its
    # next forward; the old two-iteration window opened while stage 1 was
    # still settling and reported 4.8 s
    stages = [Stage(forward=2, backward=2, send_bytes=1.3e9), Stage(forward=0.2, backward=0.8)]
    r = simulate_pipeline(stages, 1, "pipedream", link_bandwidth=1e9)
    assert r.iteration_time == pytest.approx(4.0, rel=1e-12)
    assert r.stages[0].bubble == pytest.approx(0.0, abs=1e-12)
    assert r.stages[1].bubble == pytest.approx(0.75, rel=1e-12)


def test_pipedream_overflowing_times_raise_not_nan():
    # non-finite results are refused (issue: robustness), never a NaN period
    for m in (1, 4):
        with pytest.raises(ValueError, match="not finite"):
            simulate_pipeline([Stage(1, 1, 1, 1), Stage(1e308, 1e308, 0, 1e308)], m, "pipedream",
                              link_bandwidth=1e-300)


pd_stage = st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 3.0),
                     st.one_of(st.just(0.0), st.floats(0.0, 3e9)),
                     st.one_of(st.just(0.0), st.floats(0.0, 4e9)), st.integers(1, 3))


@settings(max_examples=40, deadline=None)
@given(stages=st.lists(pd_stage, min_size=1, max_size=4), m=st.integers(1, 5),
       latency=st.sampled_from([0.0, 0.05]))
def test_pipedream_period_matches_a_long_run(stages, m, latency):
    """The iteration time is the steady-state period of an independent
    brute-force model run for 300 iterations, and at least the closed-form
    bounds: every stage's work per iteration (compute and all-reduce) and
    every link's transfers per iteration."""
    bw = 1e9
    r = simulate_pipeline([Stage(f, b, sb, pb, replicas=n) for f, b, sb, pb, n in stages], m,
                          "pipedream", link_bandwidth=bw, link_latency=latency,
                          allreduce_bandwidth=bw, timeline=False)
    ref = steady_period(stages, m, bw, latency, iters=300)
    assert r.iteration_time == pytest.approx(ref, rel=1e-9, abs=1e-12)
    work = max(m * (f + b) + (2 * (n - 1) / n * pb / bw if n > 1 else 0.0)
               for f, b, sb, pb, n in stages)
    links = max((m * (latency + sb / bw) for f, b, sb, pb, n in stages[:-1]), default=0.0)
    assert r.iteration_time >= max(work, links) * (1 - 1e-12) - 1e-12


def test_gpu_ids_and_peers():
    r = simulate_pipeline([Stage(1, 1, send_bytes=1, gpus=(4, 5)), Stage(1, 1, gpus=(0, 9))], 2)
    assert [d.device for d in r.devices] == [0, 4, 5, 9]
    assert {(e.device, e.peer) for e in r.timeline if e.name == "send"} == {
        (4, 0), (5, 9), (0, 4), (9, 5)}
    assert {d.device: d.stage for d in r.devices} == {0: 1, 4: 0, 5: 0, 9: 1}


def test_mapping_stages_and_no_timeline():
    r = simulate_pipeline([{"forward": 1.0, "backward": 2.0}], 2, timeline=False)
    assert r.iteration_time == 6.0
    assert r.timeline == []


# ---------------------------------------------------------------- properties

times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
stage_st = st.builds(
    Stage, forward=times, backward=times,
    send_bytes=st.floats(min_value=0.0, max_value=1e10),
    param_bytes=st.floats(min_value=0.0, max_value=1e10),
    activation_bytes=st.floats(min_value=0.0, max_value=1e9),
    replicas=st.integers(min_value=1, max_value=3))
plans = st.lists(stage_st, min_size=1, max_size=6)
schedules = st.sampled_from(["1f1b", "gpipe", "pipedream"])


@settings(max_examples=60, deadline=None)
@given(f=times, b=times, m=st.integers(1, 40), schedule=schedules)
def test_one_device_equals_sequential_time(f, b, m, schedule):
    r = simulate_pipeline([Stage(f, b)], m, schedule)
    order = [f, b] * m if schedule == "1f1b" else [f] * m + [b] * m
    seq = 0.0
    for t in order:  # the device runs its ops back to back, in schedule order
        seq += t
    assert r.iteration_time == pytest.approx(m * (f + b), rel=1e-12, abs=1e-12)
    if schedule != "pipedream":
        assert r.iteration_time == seq
    assert r.stages[0].max_in_flight == (m if schedule == "gpipe" else 1)


@settings(max_examples=80, deadline=None)
@given(stages=plans, m=st.integers(1, 24), schedule=schedules)
def test_iteration_time_at_least_slowest_stage_work(stages, m, schedule):
    r = simulate_pipeline(stages, m, schedule, link_bandwidth=1e10)
    slowest = max(m * (s.forward + s.backward) for s in stages)
    assert r.iteration_time >= slowest * (1 - 1e-12) - 1e-12
    for s in r.stages:
        assert 0.0 <= s.bubble <= 1.0
        assert s.busy <= r.iteration_time * (1 + 1e-12) + 1e-12


@settings(max_examples=80, deadline=None)
@given(stages=plans, m=st.integers(1, 24))
def test_1f1b_keeps_no_more_activations_in_flight_than_gpipe(stages, m):
    a = simulate_pipeline(stages, m, "1f1b", timeline=False)
    g = simulate_pipeline(stages, m, "gpipe", timeline=False)
    n = len(stages)
    for s, (x, y) in enumerate(zip(a.stages, g.stages)):
        assert x.max_in_flight <= y.max_in_flight
        assert x.max_in_flight == min(n - s, m)
        assert y.max_in_flight == m
        assert x.activation_bytes <= y.activation_bytes


@settings(max_examples=60, deadline=None)
@given(stages=plans, m=st.integers(1, 16), schedule=schedules)
def test_timeline_is_consistent(stages, m, schedule):
    r = simulate_pipeline(stages, m, schedule, link_bandwidth=1e10, link_latency=1e-3)
    by_dev = {}
    for e in r.timeline:
        assert e.duration >= 0.0 and e.start >= 0.0
        by_dev.setdefault((e.device, e.lane), []).append(e)
    for (dev, lane), evs in by_dev.items():
        if lane == 0:  # compute never overlaps on one device
            evs.sort(key=lambda e: e.start)
            for x, y in zip(evs, evs[1:]):
                assert y.start >= x.end - 1e-9 * max(1.0, x.end)
    # a forward starts only after the previous stage's forward of the same micro-batch
    fwd = {(e.stage, e.microbatch): e for e in r.timeline if e.name == "forward"}
    for (s, mb), e in fwd.items():
        if s > 0:
            assert e.start >= fwd[(s - 1, mb)].end - 1e-9 * max(1.0, e.start)
    if schedule != "pipedream":
        assert max(e.end for e in r.timeline) == pytest.approx(r.iteration_time)


# ---------------------------------------------------------------- trace export


def assert_threads_nest(trace):
    """Every (pid, tid)'s complete events are disjoint or properly nested
    (what Perfetto's and Chrome's slice stacks need); times within 1 ns."""
    by_thread = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for key, spans in by_thread.items():
        spans.sort(key=lambda x: (x[0], -x[1]))
        open_ends = []
        for start, end in spans:
            tol = 1e-3 + 1e-12 * abs(end)
            while open_ends and open_ends[-1] <= start + tol:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + tol, (
                f"thread {key}: [{start}, {end}] overlaps an event ending at {open_ends[-1]} "
                "without nesting in it")
            open_ends.append(end)
    return by_thread


def test_trace_transfers_of_a_middle_stage_nest():
    # issue 11: the middle stage sends forward and backward and receives from
    # both sides at the same time; all four shared one transfer thread
    stages = [Stage(1.0, 1.0, send_bytes=3e9), Stage(1.0, 1.0, send_bytes=3e9), Stage(1.0, 1.0)]
    r = simulate_pipeline(stages, 4, "1f1b", link_bandwidth=1e9)
    t = r.to_chrome_trace()
    by_thread = assert_threads_nest(t)
    assert len(by_thread) == 3 + 5 + 3  # compute and one thread per link direction
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in t["traceEvents"]
             if e["name"] == "thread_name"}
    assert sorted(names[k] for k in names if k[0] == 1) == [
        "compute", "recv from device 0", "recv from device 2", "send to device 0",
        "send to device 2"]
    # the old layout (every transfer of a device on thread 1) does not nest
    old = {"traceEvents": [dict(e, tid=0 if e["tid"] == 0 else 1) for e in t["traceEvents"]]}
    with pytest.raises(AssertionError, match="overlaps"):
        assert_threads_nest(old)


@settings(max_examples=40, deadline=None)
@given(stages=plans, m=st.integers(1, 8), schedule=schedules)
def test_trace_threads_nest(stages, m, schedule):
    r = simulate_pipeline(stages, m, schedule, link_bandwidth=1e9, link_latency=1e-3)
    t = r.to_chrome_trace()
    assert_threads_nest(t)
    assert sum(e["ph"] == "X" for e in t["traceEvents"]) == len(r.timeline)


def test_distir_trace_threads_nest():
    for kw in (dict(dp=2, tp=2, pp=2, microbatches=4), dict(pp=4, microbatches=8),
               dict(dp=4), dict(tp=4)):
        r = hpgo.simulate_mlp(batch_size=64, width=16, layers=4, cost_model="distir-2021-grid",
                              **kw)
        assert_threads_nest(r.to_chrome_trace())


# ---------------------------------------------------------------- planner results


class FakeModel:
    """Duck-typed stand-in for hpgo.Model: state i costs ct_i seconds for the
    global batch on one GPU, has pa_i parameter bytes and oa_i bytes at its
    output cut."""

    def __init__(self, ct, pa, oa, gbs, mbs=1):
        self._ct, self._pa, self._oa = ct, pa, oa
        self.gbs = gbs
        self.min_micro_batch_size = mbs
        self.layers = list(range(len(ct)))

    def ct(self, r, c):
        return sum(self._ct[r:c + 1]) if c >= r else -1.0

    def pa(self, r, c):
        return sum(self._pa[r:c + 1])

    def oa(self, k):
        return self._oa[k]


def test_simulate_plan_matches_direct_stages():
    m = FakeModel(ct=[4.0, 8.0, 2.0, 6.0], pa=[1e6, 2e6, 3e6, 4e6], oa=[1e8, 2e8, 3e8, 0.0],
                  gbs=32, mbs=2)
    plan = (1.7, [(0, 2, 1, [0, 1]), (2, 3, 1, [2, 3])])  # last stage covers 2..3 inclusive
    r = simulate_plan(m, plan)
    rp, mcount = 2, 32 // 2 // 2
    share = 1 * rp * mcount
    direct = simulate_pipeline(
        [Stage(12.0 / share * 0.5, 12.0 / share * 0.5, send_bytes=2e8 / share,
               param_bytes=3e6, gpus=(0, 1)),
         Stage(8.0 / share * 0.5, 8.0 / share * 0.5, param_bytes=7e6, gpus=(2, 3))],
        mcount)
    assert r.iteration_time == direct.iteration_time
    assert [s.peak_bytes for s in r.stages] == [s.peak_bytes for s in direct.stages]
    assert r.throughput == pytest.approx(rp * mcount * 2 / r.iteration_time)
    assert r.config["rp"] == 2


def test_simulate_plan_single_stage_data_parallel():
    m = FakeModel(ct=[1.0, 1.0], pa=[4e6, 4e6], oa=[1e3, 0.0], gbs=8)
    r = simulate_plan(m, [(0, 1, 4, [0, 1, 2, 3])], rp=1, allreduce_bandwidth=1e9)
    # 8 micro-batches of one sample over 4 GPUs: 2 s / (4*8) each, then the all-reduce
    assert r.iteration_time == pytest.approx(8 * 2.0 / 32 + 2 * 3 / 4 * 8e6 / 1e9)


def _durations(r, name, device):
    return sorted({e.duration for e in r.timeline if e.name == name and e.device == device})


def test_simulate_plan_prices_boundaries_as_hpgo():
    """Issue 11: the boundary between machines is priced at HPGO's 1 GB/s
    (it was 25 GB/s everywhere), inside a machine at 25 GB/s."""
    m = FakeModel(ct=[4.0, 4.0], pa=[8e8, 8e8], oa=[4e9, 0.0], gbs=16)
    two_machines = (1.0, [(0, 1, 1, list(range(8))), (1, 1, 1, list(range(8, 16)))])
    r = simulate_plan(m, two_machines, seps=[8, 16])
    mcount = 16 // 8
    per_gpu = 4e9 / (8 * mcount)
    assert _durations(r, "send", 0) == [pytest.approx(per_gpu / hpgo.sim.HPGO_ETHERNET_BW)]
    # the default layout is machines of 8 GPUs: same answer without seps
    assert simulate_plan(m, two_machines).iteration_time == r.iteration_time
    # the same GPUs in one 16-GPU machine: NVLink
    one = simulate_plan(m, two_machines, seps=[16])
    assert _durations(one, "send", 0) == [pytest.approx(per_gpu / hpgo.sim.HPGO_NVLINK_BW)]
    # GPU 7 of stage 0 pairs with GPU 8+7 of stage 1: crossing at seps [12, 16]
    mixed = simulate_plan(m, two_machines, seps=[12, 16])
    assert _durations(mixed, "send", 0) == [pytest.approx(per_gpu / hpgo.sim.HPGO_ETHERNET_BW)]
    # a Plan carries its seps to simulate_plan
    plan = hpgo.Plan.from_hpgo(two_machines, devices=[16])
    assert plan.simulate(m).iteration_time == one.iteration_time
    with pytest.raises(ValueError, match="outside seps"):
        simulate_plan(m, two_machines, seps=[4, 8])


def test_simulate_plan_allreduce_priced_as_hpgo_and_independent_of_the_link():
    m = FakeModel(ct=[4.0, 4.0], pa=[8e8, 8e8], oa=[4e9, 0.0], gbs=16)
    plan = (1.0, [(0, 1, 1, list(range(8))), (1, 1, 1, list(range(8, 16)))])
    r = simulate_plan(m, plan, seps=[8, 16])
    f = 2 * 7 / 8
    # inside one machine: 25 GB/s x (GPUs // 2), HPGO's all_reduce_time
    assert _durations(r, "all_reduce", 0) == [pytest.approx(f * 8e8 / (25e9 * 4))]
    # a stage spanning machines: HPGO's NCCL-over-Ethernet 3 GB/s
    dp = simulate_plan(m, (1.0, [(0, 1, 16, list(range(16)))]), rp=1, seps=[8, 16])
    assert _durations(dp, "all_reduce", 0) == [pytest.approx(2 * 15 / 16 * 1.6e9 / 3e9)]
    # the boundary link no longer drags the all-reduce along
    slow = simulate_plan(m, plan, seps=[8, 16], inter_machine_bandwidth=1e8)
    assert _durations(slow, "all_reduce", 0) == _durations(r, "all_reduce", 0)
    slow = simulate_plan(m, plan, seps=[8, 16], link_bandwidth=1e8)
    assert _durations(slow, "all_reduce", 8) == [pytest.approx(f * 8e8 / (1e8 * 4))]
    fixed = simulate_plan(m, plan, seps=[8, 16], allreduce_bandwidth=2e9)
    assert _durations(fixed, "all_reduce", 0) == [pytest.approx(f * 8e8 / 2e9)]
    # simulate_pipeline: allreduce_bandwidth defaults to 25 GB/s whatever the link
    st_ = [Stage(1.0, 1.0, param_bytes=1e9, replicas=2)]
    a = simulate_pipeline(st_, 2, link_bandwidth=1e6)
    assert a.iteration_time == pytest.approx(4.0 + 1e9 / 25e9)


def test_forward_fraction_is_one_documented_share():
    m = FakeModel(ct=[3.0, 5.0], pa=[0.0, 0.0], oa=[0.0, 0.0], gbs=4)
    r = simulate_plan(m, [(0, 1, 1, [0])], rp=1)
    ff = hpgo.sim.FORWARD_FRACTION
    assert ff == 0.5
    assert _durations(r, "forward", 0) == [pytest.approx(8.0 / 4 * ff)]
    assert _durations(r, "backward", 0) == [pytest.approx(8.0 / 4 * (1 - ff))]

    class Layer:
        def __init__(self, t):
            self.compute_time, self.output_activation_size = t, 0.0
            self.parameter_size, self.desc = 0, "x"

    class Model:
        layers = [Layer(3.0), Layer(5.0)]

    chain = hpgo.dynpipe.chain_from_model(Model())
    assert chain.forward == (3.0 * ff, 5.0 * ff)


@pytest.mark.parametrize("plan, rp, msg", [
    ([(0, 1, 1, [0, 1, 2])], 2, "expected units"),
    ([], None, "no stages"),
    ([(0, 0, 1, [0]), (0, 3, 1, [1])], 1, "covers no state"),
    ([(2, 1, 1, [0]), (1, 3, 1, [1])], 1, "starts at state 2, not 0"),
    ([(0, 2, 1, [0]), (1, 3, 1, [1])], 1, "stages overlap"),
    ([(0, 1, 1, [0]), (2, 3, 1, [1])], 1, "states 1..1 are in no stage"),
    ([(0, 3, 1, [0])], 64, "0 micro-batches"),
])
def test_simulate_plan_bad_plans(plan, rp, msg):
    m = FakeModel(ct=[1.0] * 4, pa=[1.0] * 4, oa=[1.0] * 4, gbs=32)
    with pytest.raises(ValueError, match=msg):
        simulate_plan(m, plan, rp=rp)


def test_simulate_plan_rejects_non_model():
    with pytest.raises(TypeError, match="ct"):
        simulate_plan(object(), [(0, 1, 1, [0])])


# ---------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(stages=[Stage(1, 1)], microbatches=0), ValueError, "microbatches"),
    (dict(stages=[Stage(1, 1)], microbatches=-3), ValueError, "microbatches"),
    (dict(stages=[Stage(1, 1)], microbatches=2.0), TypeError, "microbatches"),
    (dict(stages=[Stage(1, 1)], microbatches=True), TypeError, "microbatches"),
    (dict(stages=[Stage(1, 1)], microbatches=2, schedule="zb-h1"), ValueError, "schedule"),
    (dict(stages=[Stage(1, 1)], microbatches=2, schedule=1), TypeError, "schedule"),
    (dict(stages=[], microbatches=2), ValueError, "at least one stage"),
    (dict(stages=[Stage(-1, 1)], microbatches=2), ValueError, "forward"),
    (dict(stages=[Stage(math.nan, 1)], microbatches=2), ValueError, "forward"),
    (dict(stages=[Stage(1, 1, send_bytes=-5)], microbatches=2), ValueError, "send_bytes"),
    (dict(stages=[Stage(1, 1, replicas=0)], microbatches=2), ValueError, "replicas"),
    (dict(stages=[Stage(1, 1, gpus=())], microbatches=2), ValueError, "GPU"),
    (dict(stages=[Stage(1, 1, gpus=(0,)), Stage(1, 1, gpus=(0,))], microbatches=2),
     ValueError, "GPU 0 appears more than once"),
    (dict(stages=[Stage(1, 1, gpus=(5000,))], microbatches=2), ValueError, "GPU id"),
    (dict(stages=[Stage(1, 1, replicas=2000)], microbatches=2), ValueError, "GPUs"),
    (dict(stages=[Stage(1, 1)], microbatches=2, link_bandwidth=0), ValueError, "link_bandwidth"),
    (dict(stages=[Stage(1, 1)], microbatches=2, link_latency=-1), ValueError, "link_latency"),
    (dict(stages=[Stage(1, 1)], microbatches=2, optimizer_factor=-1), ValueError, "optimizer"),
    (dict(stages=[{"forward": 1, "backwards": 2}], microbatches=2), ValueError, "unknown keys"),
    (dict(stages=[3], microbatches=2), TypeError, "stage 0"),
    (dict(stages="abc", microbatches=2), TypeError, "stages"),
    (dict(stages=[Stage(1, 1)], microbatches=10**7), ValueError, "limit"),
])
def test_bad_arguments(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        simulate_pipeline(**kwargs)


def test_inputs_are_not_modified():
    stages = [{"forward": 1.0, "backward": 2.0, "gpus": [3, 1]}]
    before = repr(stages)
    simulate_pipeline(stages, 2)
    assert repr(stages) == before


def test_exported_names():
    assert hpgo.simulate_pipeline is simulate_pipeline
    assert hpgo.simulate_plan is simulate_plan
    assert hpgo.Stage is Stage


def test_every_simulation_says_whether_it_fits():
    small = simulate_pipeline([Stage(1e-3, 2e-3, param_bytes=1e8)], 4)
    big = simulate_pipeline([Stage(1e-3, 2e-3, param_bytes=1e10)], 4)
    assert small.fits and small.gpu_memory == 16e9 and "fits" in repr(small)
    assert not big.fits and "DOES NOT FIT" in repr(big) and "DOES NOT FIT" in big._repr_html_()
    assert simulate_pipeline([Stage(1e-3, 2e-3, param_bytes=1e10)], 4, gpu_memory=80e9).fits
    with pytest.raises(ValueError, match="gpu_memory"):
        simulate_pipeline([Stage(1e-3, 2e-3)], 4, gpu_memory=0)


def test_pipedream_period_sees_nanosecond_transfers():
    # found by the property test: a 1-byte transfer at 1 GB/s adds 1 ns per
    # iteration; the period detector must not treat 2 ns as a repetition
    r = simulate_pipeline([Stage(0.0, 1.0, 1.0, 0.0), Stage(0.0, 1.0, 0.0, 0.0)], 1,
                          "pipedream", link_bandwidth=1e9, allreduce_bandwidth=1e9,
                          timeline=False)
    assert r.iteration_time == pytest.approx(1.0 + 1e-9, rel=1e-13)
