"""torch.distributed.pipelining with FSDP2 as torchtitan runs it
(docs/training-model.md, "torchtitan as its benchmarks ran"): the weights
gathered once a step, the fp32 gradient accumulation after every
micro-batch's backward, the reduce-scatter after the stage's last
backward, one chunk's accumulation buffer at a time where the schedule
allows, and the buffers a pipeline stage keeps."""
import dataclasses

import pytest

import hpgo

H100 = hpgo.Cluster.preset("dgx-h100", nodes=1)
LLAMA8 = hpgo.transformer("llama3-8b")


def plan(**kw):
    base = dict(pp=2, dp=4, zero=3, micro_batch=1, global_batch=16, kernels="compile",
                recompute="full", reshard_after_forward=False)
    base.update(kw)
    return hpgo.ParallelPlan(**base)


def sim(p, timeline=True):
    return hpgo.simulate(LLAMA8, H100, p, timeline=timeline)


def passes(r, device, kind):
    """Durations of a device's compute events of one kind, by micro-batch."""
    return {mb: dur for start, dur, dev, k, lane, stage, mb, _ in r.events
            if dev == device and lane == 0 and k == kind}


def test_weights_are_gathered_at_the_first_forward_only():
    """Without resharding after forward, torch's pipelining keeps FSDP2's
    gathered weights through every backward but the last
    (set_reshard_after_backward(False)): only micro-batch 0's forward pays
    the all-gather and its copies; with resharding every forward does."""
    r = sim(plan())
    f = passes(r, 0, "forward")
    base = r.stages[0]["forward"]
    assert f[0] > base * 1.01
    assert all(f[mb] == pytest.approx(base, rel=1e-12) for mb in (1, 2, 3))
    r = sim(plan(reshard_after_forward=True))
    f = passes(r, 0, "forward")
    assert f[1] == pytest.approx(f[0], rel=1e-12) and f[1] > base * 1.01


def test_gradients_accumulate_in_fp32_after_every_backward():
    """FSDP2 with gradient sync off: the first backward casts the 16-bit
    gradients into the fp32 buffer (6 B a parameter), every later one adds
    into it (10 B), on the compute stream; Megatron's stack (te) has no
    such pass."""
    r = sim(plan())
    st = r.stages[0]
    b = passes(r, 0, "backward")
    base = st["backward_input"] + st["backward_weight"]
    first, later = b[0] - base, b[2] - base
    assert first > 0 and later == pytest.approx(10 / 6 * first, rel=0.02)
    assert b[1] == pytest.approx(b[3], rel=1e-12)
    bw = st["params"] * 10 / later
    assert 1.5e12 < bw < H100.gpu.memory_bandwidth  # a memory-bound pass, not more
    r = sim(plan(kernels="te"))
    st = r.stages[0]
    b = passes(r, 0, "backward")
    assert all(b[mb] == pytest.approx(st["backward_input"] + st["backward_weight"], rel=1e-12)
               for mb in b)


def test_a_shard_group_of_one_accumulates_and_copies_as_fsdp2():
    """FSDP2 over a shard group of one under torch's pipelining (what
    torchtitan runs to replicate: zero 3 with shard_size 1) copies its fp32
    shard out once a step (no resharding: 4 + 6 B a parameter) and
    accumulates the fp32 gradients after every backward (6 B, then 10 B),
    as a sharded group does, over no wire: a replica's compute is that of
    one pipeline alone, and FSDP2's share of it is exactly those passes
    above the plain plan's."""
    m = dataclasses.replace(LLAMA8, layers=8)

    def run(**kw):
        base = dict(pp=2, micro_batch=1, kernels="compile", recompute="full",
                    reshard_after_forward=False)
        base.update(kw)
        return hpgo.simulate(m, H100, hpgo.ParallelPlan(**base), timeline=False)
    group = run(dp=4, global_batch=32, zero=3, shard_size=1)
    alone = run(dp=1, global_batch=8, zero=3)
    plain = run(dp=1, global_batch=8, zero=0, reshard_after_forward=True)
    for d in range(2):
        p = alone.devices[d]["params"]
        fsdp2 = H100.kernel_time(0, 10 * p) + H100.kernel_time(0, 6 * p) + \
            7 * H100.kernel_time(0, 10 * p)
        assert group.devices[d]["busy"] == pytest.approx(alone.devices[d]["busy"], rel=1e-12)
        assert alone.devices[d]["busy"] - plain.devices[d]["busy"] == \
            pytest.approx(fsdp2, rel=1e-6)
        # and its last reduce (foreach_reduce's copies) follows the compute
        assert alone.devices[d]["sync_end"] > alone.devices[d]["compute_end"]


def test_reduce_scatter_starts_after_the_stages_last_backward():
    """The last backward's post_backward runs by hand after the whole pass
    (stage.py run_post_backward): the stage's whole reduce-scatter and its
    copy-in follow the backward; Megatron's overlaps it layer by layer."""
    r = sim(plan(), timeline=False)
    d = r.devices[0]
    whole = H100.collective_time("reduce_scatter", 4, 4 * r.stages[0]["params"])
    tail = d["sync_end"] - d["compute_end"]
    assert tail > whole
    r = sim(plan(kernels="te"), timeline=False)
    d = r.devices[0]
    assert d["sync_end"] - d["compute_end"] < whole / 5


def test_interleaved_holds_one_chunks_accumulation_when_m_equals_p():
    """With m = p the interleaved schedule runs every backward of one chunk
    before the next chunk's first, and FSDP2 frees a chunk's fp32 buffer at
    its reduce-scatter: one chunk's 4 B a parameter at a time; with m = 2p
    the chunks' backwards interleave and every chunk's buffer is held."""
    def other(mb):
        p = plan(virtual_stages=2, schedule="interleaved-1f1b", global_batch=4 * mb)
        r = sim(p, timeline=False)
        return r.memory[0].other, r.stages
    o2, st = other(2)
    o4, _ = other(4)
    x = st[0]["send_bytes"]
    c2 = st[2]["params"]
    # device 0 holds chunks 0 and 2; chunk 0 (with the embedding) is the larger
    assert st[0]["params"] > c2
    # m = 4 adds chunk 2's buffer and two more micro-batches' receive buffers
    # (chunk 0: its output's gradient; chunk 2: its input and output's gradient)
    assert o4 - o2 == pytest.approx(4 * c2 + 2 * x * 3, rel=1e-9)


def test_a_stage_keeps_its_receive_buffers_outputs_and_input_gradients():
    """Per micro-batch a stage keeps a receive buffer for its input (also
    what its first layer stores: counted once) and one for its output's
    gradient, its output in output_chunks and its input's gradient in the
    buffer's .grad until the next step.  1F1B, pp 2, m 4, full
    recomputation: device 0 peaks at its last forward with 2 micro-batches
    in flight and 4 outputs kept; device 1 after 3 backwards with one in
    flight."""
    r = sim(plan(), timeline=False)
    s0, s1 = r.stages
    x = s0["send_bytes"]
    assert s1["activation_bytes"] == pytest.approx(s1["activation_bytes_layers"] - x,
                                                   rel=1e-12)
    m0, m1 = r.memory
    assert m0.activations == pytest.approx(2 * s0["activation_bytes"] + 4 * x
                                           + s0["transient_bytes"], rel=1e-9)
    assert m1.activations == pytest.approx(s1["activation_bytes"] + 3 * x
                                           + s1["transient_bytes"], rel=1e-9)
    te = sim(plan(kernels="te"), timeline=False).stages[1]
    assert te["activation_bytes"] == pytest.approx(te["activation_bytes_layers"], rel=1e-12)


def torch_interleaved_grid(p, v, m, rank):
    """ScheduleInterleaved1F1B's time steps of one rank (PyTorch 2.6,
    _calculate_single_rank_operations and _get_1f1b_rank_ops): None or
    (kind, stage, micro-batch)."""
    rounds = max(1, m // p)
    per = m // rounds
    warm = min((v - 1) * per + 2 * (p - 1 - rank), m * v)
    pairs = v * m - warm
    fmb, bmb, out = {}, {}, [None] * rank

    def fwd(step):
        s = ((step // per) % v) * p + rank
        fmb[s] = fmb.get(s, -1) + 1
        return ("F", s, fmb[s])

    def bwd(step):
        s = (v - 1 - ((step - warm) // per) % v) * p + rank
        bmb[s] = bmb.get(s, -1) + 1
        return ("B", s, bmb[s])
    for op in range(warm + pairs + warm):
        if op < warm:
            out.append(fwd(op))
            if op == warm - 1:
                out.extend([None] * ((v * p + 2 * (p - 1 - rank)) - (warm + rank)))
        elif op < warm + pairs:
            out += [fwd(op), bwd(op)]
        else:
            out += [None, bwd(op)]
    return out


def test_interleaved_ranks_leave_each_time_step_with_their_partners():
    """torch's multi-stage schedules walk a grid of time steps; at each step
    a rank waits for one batch of the sends of its action and the receives
    matching its neighbours' actions, so partners leave the step together.
    The engine's step equals that lock-step walk over its own pass times,
    and is longer than the same op order run on data dependencies alone."""
    p, v, m = 4, 2, 4
    r = sim(plan(pp=p, dp=1, zero=0, virtual_stages=v, schedule="interleaved-1f1b",
                 global_batch=m, reshard_after_forward=True))
    K = p * v
    dur = {}
    xfer = max(d for _s, d, _dev, kind, *_ in r.events if kind == "send")
    for start, d, dev, kind, lane, stage, mb, _ in r.events:
        if lane == 0 and kind in ("forward", "backward"):
            dur[(kind[0].upper(), stage, mb)] = d
    grid = [torch_interleaved_grid(p, v, m, rank) for rank in range(p)]
    n = max(len(g) for g in grid)
    T = [0.0] * p
    for t in range(n):
        act = [g[t] if t < len(g) else None for g in grid]
        C = [T[q] + (dur[act[q]] if act[q] else 0) for q in range(p)]
        peers = [set() for _ in range(p)]
        for q, a in enumerate(act):
            if a:
                kind, s, _ = a
                to = s + 1 if kind == "F" else s - 1
                if 0 <= to < K and to % p != q:
                    peers[q].add(to % p)
                    peers[to % p].add(q)
        T = [max([C[q]] + [C[o] for o in peers[q]]) + (xfer if peers[q] else 0)
             for q in range(p)]
    ends = [dev["compute_end"] for dev in r.devices]
    assert ends == pytest.approx(T, rel=1e-9)
    # the same passes on data dependencies alone (sends asynchronous)
    fend, bend, free, left = {}, {}, [0.0] * p, [[a for a in g if a] for g in grid]
    while any(left):
        for q in range(p):
            while left[q]:
                kind, s, mb = left[q][0]
                if kind == "F":
                    dep = 0.0 if s == 0 else fend.get((s - 1, mb))
                else:
                    dep = fend.get((s, mb)) if s == K - 1 else bend.get((s + 1, mb))
                if dep is None:
                    break
                if (kind == "F" and s > 0) or (kind == "B" and s < K - 1):
                    dep += xfer
                free[q] = max(free[q], dep) + dur[left[q].pop(0)]
                (fend if kind == "F" else bend)[(s, mb)] = free[q]
    assert max(T) > max(free) * 1.01


@pytest.mark.parametrize("seed", range(4))
def test_pruned_search_equals_exhaustive_under_torch_pipelining(seed):
    """The accumulation buffers and stage buffers go through autoplan's
    memory bound and the lock step through its time bound: no bound
    exceeds a simulated plan, and pruning finds the exhaustive ranking."""
    import random
    rng = random.Random(900 + seed)
    heads = rng.choice([8, 16])
    h = heads * 64
    model = hpgo.transformer(hidden=h, ffn=4 * h, heads=heads, kv_heads=heads // 2,
                             layers=rng.choice([8, 12]), seq=1024, vocab=32000, mlp="swiglu",
                             flash=True)
    cluster = hpgo.Cluster.preset("dgx-h100", nodes=rng.choice([1, 2]))
    cluster = cluster.with_gpu(memory_bytes=rng.choice([3e9, 6e9, 16e9]))
    kw = dict(kernels=rng.choice(["compile", "compile-blocks"]), reshard_after_forward=None,
              zero=3, pp=2, schedule=rng.choice(["1f1b", "interleaved-1f1b"]))
    fast = hpgo.autoplan(model, cluster, 16, top=10, threads=1, **kw)
    slow = hpgo.autoplan(model, cluster, 16, top=10, exhaustive=True, threads=1, **kw)
    assert slow.stats["bounds_broken"] == 0
    assert [(rp.plan, rp.result.iteration_time) for rp in fast] == \
        [(rp.plan, rp.result.iteration_time) for rp in slow]
    assert len(slow) > 0 and all(rp.plan.pp == 2 and rp.plan.zero == 3 for rp in slow)
