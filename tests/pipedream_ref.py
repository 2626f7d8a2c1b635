"""Independent reference for PipeDream-async's steady-state period.

A brute-force model of the schedule written without the C engine: every
op's end time is defined recursively (an op starts when its stage is free
and its input has arrived; a boundary link carries one stage's sends in the
order that stage issues them), evaluated with an explicit stack over a long
run of iterations.  The period is the average iteration over the second
half of the run, which converges to the steady state whatever the
transient.  Used by tests/test_sim_pipeline.py."""
from __future__ import annotations


def op_lists(S, M, iters):
    """Each stage's ops: ("F", mb), ("B", mb), ("AR", iteration)."""
    T = M * iters
    out = []
    for s in range(S):
        w = min(S - s - 1, T)
        ops = [("F", m) for m in range(w)]
        for i in range(T - w):
            ops += [("F", w + i), ("B", i)]
            if i % M == M - 1:
                ops.append(("AR", i // M))
        for i in range(T - w, T):
            ops.append(("B", i))
            if i % M == M - 1:
                ops.append(("AR", i // M))
        out.append(ops)
    return out


def iteration_ends(stages, M, iters, link_bandwidth, link_latency=0.0,
                   allreduce_bandwidth=None):
    """stages: (forward, backward, send_bytes, param_bytes, n_gpus) tuples.
    Returns ends[s][k]: when stage s finishes iteration k (its all-reduce)."""
    S = len(stages)
    ab = link_bandwidth if allreduce_bandwidth is None else allreduce_bandwidth
    ops = op_lists(S, M, iters)
    index = [{op: i for i, op in enumerate(o)} for o in ops]
    xfer = [link_latency + st[2] / link_bandwidth for st in stages]
    ar = [2 * (st[4] - 1) / st[4] * st[3] / ab if st[4] > 1 else 0.0 for st in stages]
    memo = {}

    def deps(key):
        kind, s, x = key
        if kind == "op":
            name, mb = ops[s][x]
            d = [("op", s, x - 1)] if x > 0 else []
            if name == "F" and s > 0:
                d.append(("fwd_arrival", s - 1, mb))
            if name == "B" and s < S - 1:
                d.append(("bwd_arrival", s + 1, mb))
            return d
        # transfer of micro-batch x sent by stage s; FIFO after the previous one
        name = "F" if kind == "fwd_arrival" else "B"
        d = [("op", s, index[s][(name, x)])]
        if x > 0:
            d.append((kind, s, x - 1))
        return d

    def value(key):
        kind, s, x = key
        if kind == "op":
            name, mb = ops[s][x]
            start = memo[("op", s, x - 1)] if x > 0 else 0.0
            if name == "F" and s > 0:
                start = max(start, memo[("fwd_arrival", s - 1, mb)])
            if name == "B" and s < S - 1:
                start = max(start, memo[("bwd_arrival", s + 1, mb)])
            dur = stages[s][0] if name == "F" else stages[s][1] if name == "B" else ar[s]
            return start + dur
        name = "F" if kind == "fwd_arrival" else "B"
        ready = memo[("op", s, index[s][(name, x)])]
        if x > 0:
            ready = max(ready, memo[(kind, s, x - 1)])
        t = xfer[s] if kind == "fwd_arrival" else xfer[s - 1]
        return ready + t

    def get(key):
        stack = [key]
        while stack:
            k = stack[-1]
            if k in memo:
                stack.pop()
                continue
            missing = [d for d in deps(k) if d not in memo]
            if missing:
                stack.extend(missing)
            else:
                memo[k] = value(k)
                stack.pop()
        return memo[key]

    return [[get(("op", s, index[s][("AR", k)])) for k in range(iters)] for s in range(S)]


def steady_period(stages, M, link_bandwidth, link_latency=0.0, allreduce_bandwidth=None,
                  iters=400):
    """Average iteration of the slowest stage over a multiple of 120
    iterations in the second half of the run, ending before the cool-down
    (a steady state may repeat only every few iterations)."""
    ends = iteration_ends(stages, M, iters, link_bandwidth, link_latency, allreduce_bandwidth)
    b = iters - 2 - (len(stages) + M - 1) // M  # before the cool-down's last backwards
    a = b - 120 * ((iters // 2) // 120 or 1)  # a multiple of every small cyclicity
    return max((e[b] - e[a]) / (b - a) for e in ends)
