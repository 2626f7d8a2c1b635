"""Analytic layer graph: per-op FLOPs and bytes moved, roofline times.

A :class:`ZooGraph` is built op by op.  Every op method takes tensors
(:class:`T`: producing node + shape), records its cost and returns the output
tensor.  Outside a ``block`` each op becomes one profile node; inside
``with g.block(desc)`` the ops of the block are summed into one node whose
inputs are the nodes of the outside tensors the block used.

Cost model (per op, per pass; ``e`` = bytes per element of the dtype):

* matrix products / convolutions: forward 2*MACs FLOPs, reading inputs and
  weights and writing the output once; backward twice the FLOPs (input and
  weight gradients; only the weight gradient when no input gradient is
  needed) and reads/writes of both gradient products;
* element-wise, normalisation, pooling, softmax: a few FLOPs per element and
  the bytes read and written (normalisations read their input twice);
* time of one kernel = max(FLOPs / (peak * efficiency), bytes / (bandwidth *
  efficiency)) + launch overhead, with the matrix peak of the dtype for
  dense products and the vector peak otherwise; sequential steps (RNN time
  steps) are counted ``count`` times.
"""
from __future__ import annotations

import math
import operator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .devices import DeviceSpec, dtype_bytes

__all__ = ["Cost", "T", "ZooGraph"]


@dataclass
class Cost:
    """Cost of one op: FLOPs and bytes per pass, kernel launches, repeat count."""

    kind: str           # "mm" (dense products) or "vec"
    f_flops: float
    f_bytes: float
    b_flops: float
    b_bytes: float
    f_kernels: float = 1.0
    b_kernels: float = 2.0
    count: float = 1.0  # sequential repetitions (time steps)

    def times(self, dev: DeviceSpec, dtype: str) -> tuple[float, float]:
        """(forward seconds, backward seconds) on dev."""
        if self.kind == "mm":
            peak = dev.matmul_flops[dtype] * dev.matmul_efficiency
        else:
            peak = dev.vector_flops[dtype] * dev.vector_efficiency
        bw = dev.mem_bw * dev.bw_efficiency
        oh = dev.kernel_overhead_s
        f = max(self.f_flops / peak, self.f_bytes / bw) + (self.f_kernels * oh if self.f_kernels else 0.0)
        b = max(self.b_flops / peak, self.b_bytes / bw) + (self.b_kernels * oh if self.b_kernels else 0.0)
        if self.f_flops == 0 and self.f_bytes == 0:
            f = 0.0
        if self.b_flops == 0 and self.b_bytes == 0:
            b = 0.0
        return f * self.count, b * self.count


@dataclass(frozen=True)
class T:
    """A tensor: the node that produced it (-1 inside an open block) and its shape."""

    node: int
    shape: tuple
    elem_bytes: int = 0  # 0 = the graph's dtype size

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class ZNode:
    desc: str
    inputs: list
    costs: list
    params: int
    out: T | None = None
    out_bytes: float = 0.0
    is_head: bool = False


@dataclass
class _Block:
    desc: str
    inputs: list = field(default_factory=list)
    costs: list = field(default_factory=list)
    params: int = 0
    out: T | None = None
    result: T | None = None
    is_head: bool = False

    def output(self, t: T) -> None:
        self.out = t


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


MAX_OPS = 1_000_000  # ops per zoo graph (a 60,000-layer GPT); building one takes seconds


class ZooGraph:
    """Layer graph of one model at one batch size and dtype."""

    def __init__(self, model: str, batch_size: int, dtype: str = "fp32"):
        if (isinstance(batch_size, bool) or not hasattr(type(batch_size), "__index__")
                or operator.index(batch_size) < 1):
            raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")
        batch_size = operator.index(batch_size)
        self.model = model
        self.n = batch_size
        self.dtype = dtype
        self.e = dtype_bytes(dtype)
        self.nodes: list[ZNode] = []
        self._blk: _Block | None = None
        self._ops = 0

    # ------------------------------------------------------------ structure
    def input(self, shape, elem_bytes: int = 8, desc: str = "Input") -> T:
        """The Input node (token ids default to int64); must come first."""
        if self.nodes:
            raise RuntimeError("the Input node must be the first node")
        t = T(0, tuple(shape), elem_bytes)
        self.nodes.append(ZNode(desc, [], [], 0, t, float(math.prod(shape) * elem_bytes)))
        return t

    def source(self, desc: str, shape, after: T, elem_bytes: int = 0) -> T:
        """A node with no cost computed from ``after`` (e.g. positional tables)."""
        idx = len(self.nodes)
        t = T(idx, tuple(shape), elem_bytes)
        eb = elem_bytes or self.e
        self.nodes.append(ZNode(desc, [after.node], [], 0, t, float(math.prod(shape) * eb)))
        return t

    @contextmanager
    def block(self, desc: str, head: bool = False):
        """Sum the ops issued inside into one node; call ``b.output(t)``."""
        if self._blk is not None:
            raise RuntimeError("blocks do not nest")
        blk = _Block(desc, is_head=head)
        self._blk = blk
        try:
            yield blk
        finally:
            self._blk = None
        if blk.out is None:
            raise RuntimeError(f"block {desc}: no output set")
        idx = len(self.nodes)
        out = T(idx, blk.out.shape, blk.out.elem_bytes)
        eb = blk.out.elem_bytes or self.e
        self.nodes.append(ZNode(desc, list(blk.inputs), blk.costs, blk.params, out,
                                float(out.numel * eb), blk.is_head))
        blk.result = out

    def _emit(self, desc: str, inputs, cost, params: int, shape) -> T:
        self._ops += 1
        if self._ops > MAX_OPS:  # a huge layer count would otherwise run for hours
            raise ValueError(f"the {self.model} graph has more than {MAX_OPS:,} ops; "
                             "use fewer layers")
        costs = cost if isinstance(cost, list) else [cost]
        if self._blk is not None:
            b = self._blk
            for t in inputs:
                if t.node >= 0 and t.node not in b.inputs:
                    b.inputs.append(t.node)
            b.costs.extend(costs)
            b.params += params
            return T(-1, tuple(shape))
        ins = []
        for t in inputs:
            if t.node < 0:
                raise RuntimeError("tensor from a closed block used without its result")
            if t.node not in ins:
                ins.append(t.node)
        idx = len(self.nodes)
        out = T(idx, tuple(shape))
        self.nodes.append(ZNode(desc, ins, costs, params, out, float(out.numel * self.e)))
        return out

    def add_params(self, count: int) -> None:
        """Parameters used inside the current block by no op (biases, tables)."""
        if self._blk is None:
            raise RuntimeError("add_params needs an open block")
        self._blk.params += count

    # -------------------------------------------------------------- dense ops
    def conv2d(self, x: T, cout: int, k, stride=1, pad=0, groups: int = 1, bias: bool = False,
               input_grad: bool = True, desc: str = "Conv2d") -> T:
        n, cin, h, w = x.shape
        kh, kw = _pair(k)
        sh, sw = _pair(stride)
        ph, pw = _pair(pad)
        ho = (h + 2 * ph - kh) // sh + 1
        wo = (w + 2 * pw - kw) // sw + 1
        e = self.e
        wgt = cout * (cin // groups) * kh * kw
        macs = n * cout * ho * wo * (cin // groups) * kh * kw
        xs, ys = n * cin * h * w, n * cout * ho * wo
        fl = 2.0 * macs + (ys if bias else 0)
        bfl = 2.0 * macs * (2 if input_grad else 1)
        bby = e * (ys + xs + wgt) + (e * (ys + wgt + xs) if input_grad else 0)
        kind = "mm" if groups == 1 else "vec"
        c = Cost(kind, fl, e * (xs + wgt + ys), bfl, bby, 1, 2 if input_grad else 1)
        return self._emit(desc, [x], c, wgt + (cout if bias else 0), (n, cout, ho, wo))

    def linear(self, x: T, fout: int, bias: bool = True, input_grad: bool = True,
               desc: str = "Linear", weight_params: bool = True) -> T:
        """y = x W^T + b over the last dim.  weight_params=False for tied weights."""
        fin = x.shape[-1]
        m = x.numel // fin
        e = self.e
        wgt = fin * fout
        fl = 2.0 * m * fin * fout + (m * fout if bias else 0)
        bfl = 2.0 * m * fin * fout * (2 if input_grad else 1)
        xs, ys = m * fin, m * fout
        bby = e * (ys + xs + wgt) + (e * (ys + wgt + xs) if input_grad else 0)
        c = Cost("mm", fl, e * (xs + wgt + ys), bfl, bby, 1, 2 if input_grad else 1)
        params = (wgt if weight_params else 0) + (fout if bias else 0)
        return self._emit(desc, [x], c, params, tuple(x.shape[:-1]) + (fout,))

    def bmm(self, a: T, b: T, batch: int, m: int, k: int, n: int, out_shape, desc: str = "bmm") -> T:
        """Batched product of (batch, m, k) and (batch, k, n); no parameters."""
        e = self.e
        A, B, C = batch * m * k, batch * k * n, batch * m * n
        fl = 2.0 * batch * m * k * n
        c = Cost("mm", fl, e * (A + B + C), 2 * fl, e * (2 * C + 2 * A + 2 * B), 1, 2)
        return self._emit(desc, [a, b], c, 0, out_shape)

    # ----------------------------------------------------------- vector ops
    def eltwise(self, inputs, desc: str, flops_per: float = 1.0, bwd_reads: int = 2,
                extra_bytes_per: float = 0.0, params: int = 0, shape=None) -> T:
        """Element-wise op over the first input's shape.

        Forward reads every input once and writes the output; backward reads
        ``bwd_reads`` tensors of the output size and writes one gradient per
        input (bwd_reads=0: no backward kernel).  extra_bytes_per: e.g. a
        dropout mask (bytes per element, both passes).
        """
        inputs = list(inputs)
        shape = tuple(shape or inputs[0].shape)
        E = math.prod(shape)
        e = self.e
        fb = e * E * (len(inputs) + 1) + extra_bytes_per * E
        if bwd_reads:
            bb = e * E * (bwd_reads + len(inputs)) + extra_bytes_per * E
            bfl = flops_per * E
            bk = 1
        else:
            bb, bfl, bk = 0.0, 0.0, 0
        c = Cost("vec", flops_per * E, fb, bfl, bb, 1, bk)
        return self._emit(desc, inputs, c, params, shape)

    def relu(self, x: T, desc="ReLU") -> T:
        return self.eltwise([x], desc, 1.0, 2)

    def gelu(self, x: T, desc="GELU") -> T:
        return self.eltwise([x], desc, 10.0, 2)

    def tanh(self, x: T, desc="Tanh") -> T:
        return self.eltwise([x], desc, 4.0, 2)

    def dropout(self, x: T, desc="Dropout") -> T:
        return self.eltwise([x], desc, 2.0, 1, extra_bytes_per=1.0)

    def add(self, a: T, b: T, desc="Add") -> T:
        # backward: the two gradient streams are summed where the branches fork
        return self.eltwise([a, b], desc, 1.0, 1)

    def norm(self, x: T, channels: int, desc: str, affine: bool = True) -> T:
        """BatchNorm / LayerNorm in training mode: forward reads twice, writes once."""
        E = x.numel
        e = self.e
        c = Cost("vec", 8.0 * E, e * 3 * E, 12.0 * E, e * 5 * E, 1, 2)
        return self._emit(desc, [x], c, 2 * channels if affine else 0, x.shape)

    def batchnorm(self, x: T, desc="BatchNorm2d") -> T:
        return self.norm(x, x.shape[1], desc)

    def layernorm(self, x: T, desc="LayerNorm") -> T:
        return self.norm(x, x.shape[-1], desc)

    def softmax(self, x: T, desc="Softmax") -> T:
        E = x.numel
        e = self.e
        c = Cost("vec", 5.0 * E, e * 2 * E, 3.0 * E, e * 3 * E, 1, 1)
        return self._emit(desc, [x], c, 0, x.shape)

    def copy(self, inputs, shape, desc="Copy", backward: bool = True) -> T:
        """Data movement (concat, reshape with copy, rel-shift): read + write."""
        E = math.prod(shape)
        e = self.e
        c = Cost("vec", 0.0, 2.0 * e * E, 0.0, 2.0 * e * E if backward else 0.0, 1, 1 if backward else 0)
        return self._emit(desc, list(inputs), c, 0, shape)

    def pool2d(self, x: T, k, stride, pad=0, desc="Pool2d") -> T:
        n, c, h, w = x.shape
        kh, kw = _pair(k)
        sh, sw = _pair(stride)
        ph, pw = _pair(pad)
        ho = (h + 2 * ph - kh) // sh + 1
        wo = (w + 2 * pw - kw) // sw + 1
        xs, ys = n * c * h * w, n * c * ho * wo
        e = self.e
        cost = Cost("vec", float(ys * kh * kw), e * (xs + ys), float(ys * kh * kw), e * (2 * xs + ys), 1, 2)
        return self._emit(desc, [x], cost, 0, (n, c, ho, wo))

    def embedding(self, ids: T, vocab: int, dim: int, desc="Embedding", weight_params=True) -> T:
        """Table lookup; backward writes a dense gradient of the whole table."""
        tokens = ids.numel
        e = self.e
        fb = e * tokens * dim + ids.numel * (ids.elem_bytes or 8) + e * tokens * dim
        bb = e * (tokens * dim + vocab * dim) + e * vocab * dim  # zero-fill + index-add
        c = Cost("vec", 0.0, fb, float(tokens * dim), bb, 1, 2)
        return self._emit(desc, [ids], c, vocab * dim if weight_params else 0, tuple(ids.shape) + (dim,))

    def cross_entropy(self, logits: T, desc="CrossEntropy") -> T:
        """log-softmax + NLL over the last dim; output is a scalar per row."""
        E = logits.numel
        e = self.e
        c = Cost("vec", 5.0 * E, e * 2 * E, 3.0 * E, e * 3 * E, 2, 2)
        return self._emit(desc, [logits], c, 0, tuple(logits.shape[:-1]))

    def lstm(self, x: T, hidden: int, bidirectional: bool = False, desc="LSTM") -> T:
        """One LSTM layer over x of shape (batch, seq, features), cuDNN style.

        The input projection of all steps is one GEMM; the recurrent GEMM,
        which re-reads the recurrent weights, and the fused gate kernel run
        once per time step (sequential).  Backward: per-step recurrent input
        gradient + gates, then one GEMM each for the weight gradients.
        """
        n, s, fin = x.shape
        e = self.e
        h4 = 4 * hidden
        dirs = 2 if bidirectional else 1
        costs = []
        for _ in range(dirs):
            m = n * s
            # input projection for all steps, its backward (dX and dW)
            costs.append(Cost("mm", 2.0 * m * fin * h4, e * (m * fin + fin * h4 + m * h4),
                              4.0 * m * fin * h4, e * (2 * m * h4 + 2 * fin * h4 + 2 * m * fin), 1, 2))
            # recurrent step: (n x hidden) @ (hidden x 4h) + gates; per step
            step_f = 2.0 * n * hidden * h4
            step_fb = e * (n * hidden + hidden * h4 + n * h4)
            gates_b = e * (n * h4 + 4 * n * hidden)
            costs.append(Cost("mm", step_f, step_fb, step_f, step_fb, 1, 1, count=s))
            costs.append(Cost("vec", 10.0 * n * h4, gates_b, 12.0 * n * h4, 2 * gates_b, 1, 1, count=s))
            # recurrent weight gradient, one GEMM over all steps
            costs.append(Cost("mm", 0.0, 0.0, 2.0 * m * hidden * h4,
                              e * (m * hidden + m * h4 + hidden * h4), 0, 1))
        params = dirs * (h4 * (fin + hidden) + 2 * h4)
        return self._emit(desc, [x], costs, params, (n, s, dirs * hidden))

    # --------------------------------------------------------------- output
    def param_count(self, include_heads: bool = True) -> int:
        return sum(nd.params for nd in self.nodes if include_heads or not nd.is_head)
