"""Models of the work of a training step: transformers described by their
shape, and profiled layer chains (PipeDream ``graph.txt``).

Both are immutable values; settings such as the precision are arguments of
the calls that use them (:func:`hpgo.simulate`).  The C core lists the
kernels of a transformer layer and prices them on a cluster
(``csrc/step/work.c``); this module only holds the numbers.

>>> m = hpgo.transformer("gpt3-175b")
>>> m.parameters / 1e9                      # doctest: +SKIP
174.6
>>> hpgo.transformer(hidden=4096, ffn=11008, heads=32, layers=32, seq=4096,
...                  vocab=32000, mlp="swiglu")  # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from . import _core, _files

__all__ = ["Transformer", "ProfiledModel", "transformer", "profile_model", "model_id"]

_MLPS = {"gelu": _core.MLP_GELU, "swiglu": _core.MLP_SWIGLU}
_NORMS = ("layernorm", "rmsnorm")


def topological_order(n: int, edges: Any) -> list[int]:
    """The nodes 0..n-1 of a profile graph in hpgo.profile_model's layer
    order: topological, the lowest node index first among the ready ones
    (fewer than n nodes when the graph has a cycle)."""
    import heapq
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for s, d in edges:
        succ[s].append(d)
        indeg[d] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, w)
    return order


def _nonneg_int(name: str, v: Any, limit: int = 1 << 26) -> int:
    return 0 if v == 0 and not isinstance(v, bool) and hasattr(v, "__index__") \
        else _pos_int(name, v, limit)


def _pos_int(name: str, v: Any, limit: int = 1 << 26) -> int:
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        i = v.__index__()
    except AttributeError:
        raise TypeError(f"{name} must be an int, not {type(v).__name__}") from None
    if not 1 <= i <= limit:
        raise ValueError(f"{name} must be in 1..{limit}, got {i}")
    return int(i)


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer (GPT / Llama style) described by its shape.

    ``ffn`` is the width of each up (and gate) matrix; ``kv_heads`` < ``heads``
    is grouped-query attention; ``mlp`` is ``"gelu"`` (2 matrices) or
    ``"swiglu"`` (3).  ``flash`` means fused attention (no s x s tensors
    stored); ``dropout`` stores dropout masks; ``causal_flops`` halves the
    attention core in the *model* FLOPs used for MFU (current Megatron; the
    2021-22 papers do not); with ``flash`` the core always counts its causal
    half, the work its kernels do (so MFU stays <= 100 %).  Immutable:
    derive variants with :meth:`with_`.

    Mixture of experts (``experts`` > 0): each MoE layer routes every token
    to ``topk`` of ``experts`` experts of inner size ``expert_ffn`` (plus
    ``shared_experts`` always-active ones of ``shared_ffn``); the first
    ``dense_first`` layers keep a dense MLP of ``ffn``, and after them every
    ``moe_every``-th layer is MoE.  ``capacity_factor`` pads the experts'
    inputs (``None``: dropless); ``routing_imbalance`` is the busiest rank's
    routed tokens over the mean (1: balanced routing); ``routing_groups`` /
    ``routing_group_topk`` restrict each token to ``routing_group_topk`` of
    ``routing_groups`` equal groups of experts (DeepSeek's ``n_group`` /
    ``topk_group``: node-limited routing; 1: unrestricted), which a
    node-deduplicating dispatcher turns into less cross-node traffic.
    Attention variants:
    ``attn_bias`` (q/k/v/o biases), ``qk_norm`` (Qwen3), ``attn_sinks``
    (GPT-OSS), a sliding ``window`` on every ``window_every``-th layer
    (from layer 0), multi-head latent attention (``mla`` with ``q_lora``,
    ``kv_lora``, ``qk_nope``, ``qk_rope``, ``v_head``; DeepSeek-V3) and
    ``mtp`` multi-token-prediction modules on the last pipeline stage.
    ``parallel_block``: attention and MLP read the same normed input and
    add to one residual, y = x + Attn(LN(x)) + MLP(LN(x)) (GPT-J, GPT-NeoX,
    PaLM): one norm, the QKV and first MLP GEMMs as one, one tensor-parallel
    gather and scatter per layer and direction.
    ``qkv_bias``: biases on the query, key and value projections only, none
    on the output projection (Qwen2; ``attn_bias`` has all four).

    Rotary position embeddings (the exports write them; they change neither
    the work nor the memory): ``rope_theta`` is the base (``None``: the
    frameworks' default, 10000), ``rope_scaling`` the Hugging Face
    ``rope_scaling`` mapping (``{"rope_type": "llama3", "factor": 8.0,
    ...}``, ``"yarn"``, ``"linear"``), kept as sorted ``(key, value)`` pairs;
    :attr:`rope_scaling_dict` gives it back as a dict.
    """

    hidden: int
    ffn: int
    heads: int
    layers: int
    seq: int
    vocab: int
    kv_heads: int | None = None
    head_dim: int | None = None
    mlp: str = "gelu"
    tied: bool = True
    bias: bool = True
    norm: str = "layernorm"
    dropout: bool = True
    flash: bool = False
    causal_flops: bool = False
    learned_pos: bool = True
    name: str = ""
    experts: int = 0
    topk: int = 0
    expert_ffn: int | None = None
    shared_experts: int = 0
    shared_ffn: int | None = None
    dense_first: int = 0
    moe_every: int = 1
    expert_bias: bool = False
    router_bias: bool = False
    capacity_factor: float | None = None
    routing_imbalance: float = 1.0
    routing_groups: int = 1
    routing_group_topk: int = 1
    attn_bias: bool = False
    qk_norm: bool = False
    attn_sinks: bool = False
    window: int | None = None
    window_every: int = 1
    mla: bool = False
    q_lora: int = 0
    kv_lora: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0
    mtp: int = 0
    parallel_block: bool = False
    qkv_bias: bool = False
    rope_theta: float | None = None
    rope_scaling: Any = None

    def __post_init__(self) -> None:
        for f in ("hidden", "ffn", "heads", "layers", "seq", "vocab"):
            object.__setattr__(self, f, _pos_int(f, getattr(self, f)))
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim is None and self.mla and self.qk_rope:
            # latent attention: per-head query/key width (head_dim is not used otherwise)
            object.__setattr__(self, "head_dim", self.qk_nope + self.qk_rope)
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ValueError(f"hidden ({self.hidden}) is not a multiple of heads ({self.heads}): "
                                 "give head_dim")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        object.__setattr__(self, "kv_heads", _pos_int("kv_heads", self.kv_heads))
        object.__setattr__(self, "head_dim", _pos_int("head_dim", self.head_dim))
        if self.mlp not in _MLPS:
            raise ValueError(f"mlp must be 'gelu' or 'swiglu', got {self.mlp!r}")
        if self.norm not in _NORMS:
            raise ValueError(f"norm must be 'layernorm' or 'rmsnorm', got {self.norm!r}")
        for f in ("tied", "bias", "dropout", "flash", "causal_flops", "learned_pos", "expert_bias",
                  "router_bias", "attn_bias", "qk_norm", "attn_sinks", "mla", "qkv_bias",
                  "parallel_block"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(f"{f} must be a bool")
        for f in ("experts", "topk", "shared_experts", "dense_first", "mtp", "q_lora", "kv_lora",
                  "qk_nope", "qk_rope", "v_head"):
            object.__setattr__(self, f, _nonneg_int(f, getattr(self, f)))
        for f in ("moe_every", "window_every", "routing_groups", "routing_group_topk"):
            object.__setattr__(self, f, _pos_int(f, getattr(self, f)))
        for f in ("expert_ffn", "shared_ffn", "window"):
            if getattr(self, f) is not None:
                object.__setattr__(self, f, _pos_int(f, getattr(self, f)))
        if self.experts:
            if self.expert_ffn is None:
                raise ValueError("a mixture-of-experts model needs expert_ffn")
            if not 1 <= self.topk <= self.experts:
                raise ValueError(f"topk must be in 1..experts ({self.experts}), got {self.topk}")
            if self.shared_experts and self.shared_ffn is None:
                object.__setattr__(self, "shared_ffn", self.expert_ffn)
        elif self.topk or self.shared_experts or self.dense_first:
            raise ValueError("topk, shared_experts and dense_first need experts > 0")
        if self.routing_groups > 1 and not (
                self.experts and self.experts % self.routing_groups == 0
                and self.routing_group_topk <= self.routing_groups
                and self.routing_group_topk * (self.experts // self.routing_groups) >= self.topk):
            raise ValueError(f"routing_groups ({self.routing_groups}) must divide experts "
                             f"({self.experts}), with routing_group_topk "
                             f"({self.routing_group_topk}) groups holding at least topk experts")
        for f, lo in (("capacity_factor", 0.0), ("routing_imbalance", 1.0)):
            v = getattr(self, f)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < lo or (f == "capacity_factor" and v == 0):
                raise ValueError(f"{f} must be a finite number {'> 0' if lo == 0 else '>= 1'}, "
                                 f"got {v!r}")
            object.__setattr__(self, f, float(v))
        if self.mla and not (self.q_lora and self.kv_lora and self.qk_rope and self.v_head):
            raise ValueError("latent attention (mla=True) needs q_lora, kv_lora, qk_rope and v_head")
        if not isinstance(self.name, str):
            raise TypeError("name must be a str")
        if self.rope_theta is not None:
            v = self.rope_theta
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise ValueError(f"rope_theta must be a finite number > 0 (or None), got {v!r}")
            object.__setattr__(self, "rope_theta", float(v))
        object.__setattr__(self, "rope_scaling", _rope_scaling(self.rope_scaling))
        if self.qkv_bias and self.attn_bias:
            raise ValueError("give attn_bias (q, k, v and output biases) or qkv_bias (q, k, v "
                             "only), not both")
        _core._step_model_params(self._tuple(_core.PRECISION_BF16))  # validates in the core

    # -- derived ---------------------------------------------------------------
    def _tuple(self, precision: int) -> tuple:
        ext = (self.experts, self.topk, self.expert_ffn or 0, self.shared_experts,
               self.shared_ffn or 0, self.dense_first, self.moe_every, int(self.expert_bias),
               int(self.router_bias), float(self.capacity_factor or 0.0),
               float(self.routing_imbalance),
               # attention biases: 1 on q, k, v and output, 2 on q, k, v only (csrc/step/work.h)
               1 if self.attn_bias else 2 if self.qkv_bias else 0, int(self.qk_norm),
               int(self.attn_sinks), self.window or 0, self.window_every, int(self.mla),
               self.q_lora, self.kv_lora, self.qk_nope, self.qk_rope, self.v_head, self.mtp,
               self.routing_groups, self.routing_group_topk, int(self.parallel_block))
        return ("transformer", precision, self.hidden, self.ffn, self.heads, self.kv_heads,
                self.head_dim, self.layers, self.vocab, self.seq, _MLPS[self.mlp], int(self.tied),
                int(self.bias), int(self.norm == "layernorm"), int(self.dropout), int(self.flash),
                int(self.causal_flops), int(self.learned_pos), ext)

    def _counts(self) -> tuple:
        return _core._step_model_params(self._tuple(_core.PRECISION_BF16))

    @property
    def parameters(self) -> int:
        """Parameters of the whole model (embeddings included, real vocabulary;
        multi-token-prediction modules apart: :attr:`mtp_parameters`)."""
        return int(round(self._counts()[0]))

    @property
    def embedding_parameters(self) -> int:
        """Input embedding (and position embedding) plus the output layer
        when it is not tied."""
        c = self._counts()
        return int(round(c[1] + c[2]))

    @property
    def output_layer_parameters(self) -> int:
        """The output (unembedding) matrix when untied, else 0."""
        return int(round(self._counts()[2]))

    @property
    def expert_parameters(self) -> int:
        """Parameters in routed experts (0 for a dense model)."""
        return int(round(self._counts()[3]))

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses: all but the routed experts it is not
        sent to (``topk`` of ``experts`` per MoE layer), embeddings included.
        Publishers differ: subtract :attr:`embedding_parameters` or the input
        embedding to compare (see docs/moe.md)."""
        return int(round(self._counts()[4]))

    @property
    def mtp_parameters(self) -> int:
        """Multi-token-prediction modules as a checkpoint stores them (with
        their embedding and output-layer copies); not in :attr:`parameters`."""
        return int(round(self._counts()[5]))

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def non_embedding_parameters(self) -> int:
        return self.parameters - self.embedding_parameters

    @property
    def rope_scaling_dict(self) -> dict | None:
        """``rope_scaling`` as the Hugging Face mapping (None: no scaling)."""
        return None if self.rope_scaling is None else dict(self.rope_scaling)

    def with_(self, **changes: Any) -> "Transformer":
        """A copy with some fields changed (the model itself is immutable)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["rope_scaling"] = self.rope_scaling_dict
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Transformer":
        if not isinstance(d, Mapping):
            raise TypeError("a transformer description must be a mapping")
        known = {f.name for f in dataclasses.fields(cls)}
        extra = set(d) - known
        if extra:
            raise ValueError(f"unknown transformer fields: {sorted(extra)}")
        return cls(**d)

    def __repr__(self) -> str:
        label = self.name or "transformer"
        if self.experts:
            mlp = (f"MoE {self.experts}x{self.expert_ffn} top-{self.topk}"
                   + (f" +{self.shared_experts} shared" if self.shared_experts else "")
                   + (f", {self.dense_first} dense first" if self.dense_first else "")
                   + f" {self.mlp}, {self.active_parameters / 1e9:.2f} B active")
        else:
            mlp = f"ffn={self.ffn} {self.mlp}"
        attn = "MLA" if self.mla else f"heads={self.heads}/{self.kv_heads}"
        return (f"Transformer({label}: {self.parameters / 1e9:.2f} B params, L={self.layers}, "
                f"h={self.hidden}, {attn}, {mlp}, seq={self.seq}, vocab={self.vocab})")


_ROPE_SCALING_KEYS = {"rope_type", "type", "factor", "original_max_position_embeddings",
                      "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale",
                      "mscale_all_dim", "truncate"}


def _rope_scaling(v: Any) -> tuple | None:
    """Hugging Face ``rope_scaling`` as sorted (key, value) pairs: a str
    type and numbers (hashable, so the model stays an immutable value)."""
    if v is None:
        return None
    items = v.items() if isinstance(v, Mapping) else v
    try:
        pairs = [(k, x) for k, x in items]
    except (TypeError, ValueError):
        raise TypeError("rope_scaling must be a mapping (Hugging Face's rope_scaling) or "
                        "None") from None
    out = {}
    for k, x in pairs:
        if k not in _ROPE_SCALING_KEYS:
            raise ValueError(f"rope_scaling: field {k!r} is not understood (known: "
                             f"{', '.join(sorted(_ROPE_SCALING_KEYS))})")
        if k in ("rope_type", "type"):
            if not isinstance(x, str):
                raise TypeError(f"rope_scaling {k} must be a str")
            out["rope_type"] = x
        elif isinstance(x, bool) and k == "truncate":
            out[k] = x
        elif isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"rope_scaling {k} must be a finite number, got {x!r}")
        else:
            out[k] = float(x) if k != "original_max_position_embeddings" else int(x)
    if "rope_type" not in out:
        raise ValueError("rope_scaling needs its rope_type")
    if out["rope_type"] not in ("llama3", "yarn", "linear"):
        raise ValueError(f"rope_scaling type {out['rope_type']!r} is not understood (llama3, "
                         "yarn or linear)")
    if "factor" not in out:
        raise ValueError(f"rope_scaling {out['rope_type']} needs its factor")
    return tuple(sorted(out.items()))


def _gpt(name: str, h: int, heads: int, layers: int) -> Transformer:
    # Megatron GPT of Korthikanti et al. 2022 / Narayanan et al. 2021:
    # ffn 4h, GeLU, LayerNorm with biases, tied embeddings, learned
    # positions, dropout, vocabulary 51200, sequence 2048, no fused attention.
    return Transformer(hidden=h, ffn=4 * h, heads=heads, layers=layers, seq=2048, vocab=51200,
                       name=name)


def _llama(name: str, h: int, ffn: int, heads: int, kv: int, layers: int, vocab: int,
           seq: int, rope_theta: float = 10000.0, rope_scaling: Any = None) -> Transformer:
    # Llama 2 / 3 configs (Hugging Face config.json of the released models):
    # SwiGLU, RMSNorm, no biases, untied embeddings, RoPE, no dropout;
    # trained with fused (flash) attention; model FLOPs with the causal
    # attention halved, as current Megatron counts them.
    return Transformer(hidden=h, ffn=ffn, heads=heads, kv_heads=kv, layers=layers, seq=seq,
                       vocab=vocab, mlp="swiglu", tied=False, bias=False, norm="rmsnorm",
                       dropout=False, flash=True, causal_flops=True, learned_pos=False,
                       name=name, rope_theta=rope_theta, rope_scaling=rope_scaling)


# Llama 3.1's rope_scaling (meta-llama/Llama-3.1-405B config.json)
_LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _moe(name: str, **f: Any) -> Transformer:
    # Mixture-of-experts models, shapes from their released Hugging Face
    # config.json files (docs/moe.md lists the fields): SwiGLU experts,
    # RMSNorm, RoPE, no dropout, untied embeddings, fused attention, model
    # FLOPs with the causal attention halved (current Megatron).
    base = dict(mlp="swiglu", tied=False, bias=False, norm="rmsnorm", dropout=False, flash=True,
                causal_flops=True, learned_pos=False, name=name)
    base.update(f)
    return Transformer(**base)


_PRESETS: dict[str, Transformer] = {
    "megatron-22b": _gpt("megatron-22b", 6144, 64, 48),
    "gpt3-175b": _gpt("gpt3-175b", 12288, 96, 96),
    "megatron-530b": _gpt("megatron-530b", 20480, 128, 105),
    "megatron-1t": _gpt("megatron-1t", 25600, 160, 128),
    "llama2-7b": _llama("llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096),
    "llama2-13b": _llama("llama2-13b", 5120, 13824, 40, 40, 40, 32000, 4096),
    "llama2-70b": _llama("llama2-70b", 8192, 28672, 64, 8, 80, 32000, 4096),
    # Llama 3: rope_theta 500000; the 405B model exists as Llama 3.1 only
    "llama3-8b": _llama("llama3-8b", 4096, 14336, 32, 8, 32, 128256, 8192, 500000.0),
    "llama3-70b": _llama("llama3-70b", 8192, 28672, 64, 8, 80, 128256, 8192, 500000.0),
    "llama3-405b": _llama("llama3-405b", 16384, 53248, 128, 8, 126, 128256, 8192, 500000.0,
                          _LLAMA31_ROPE),
    # mistralai/Mixtral-8x7B-v0.1
    "mixtral-8x7b": _moe("mixtral-8x7b", hidden=4096, ffn=14336, heads=32, kv_heads=8, layers=32,
                         vocab=32000, seq=4096, experts=8, topk=2, expert_ffn=14336,
                         rope_theta=1e6),
    # mistralai/Mixtral-8x22B-v0.1
    "mixtral-8x22b": _moe("mixtral-8x22b", hidden=6144, ffn=16384, heads=48, kv_heads=8,
                          layers=56, vocab=32768, seq=4096, experts=8, topk=2, expert_ffn=16384,
                          rope_theta=1e6),
    # Qwen/Qwen3-30B-A3B (intermediate_size 6144 is unused: every layer is MoE)
    "qwen3-30b-a3b": _moe("qwen3-30b-a3b", hidden=2048, ffn=6144, heads=32, kv_heads=4,
                          head_dim=128, layers=48, vocab=151936, seq=4096, experts=128, topk=8,
                          expert_ffn=768, qk_norm=True, rope_theta=1e6),
    # Qwen/Qwen3-235B-A22B
    "qwen3-235b-a22b": _moe("qwen3-235b-a22b", hidden=4096, ffn=12288, heads=64, kv_heads=4,
                            head_dim=128, layers=94, vocab=151936, seq=4096, experts=128, topk=8,
                            expert_ffn=1536, qk_norm=True, rope_theta=1e6),
    # openai/gpt-oss-120b: biases on attention, experts and router, a sink
    # logit per head, a 128-token sliding window on every other layer
    "gpt-oss-120b": _moe("gpt-oss-120b", hidden=2880, ffn=2880, heads=64, kv_heads=8, head_dim=64,
                         layers=36, vocab=201088, seq=4096, experts=128, topk=4, expert_ffn=2880,
                         attn_bias=True, expert_bias=True, router_bias=True, attn_sinks=True,
                         window=128, window_every=2, rope_theta=150000.0,
                         rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                       "beta_slow": 1.0, "truncate": False,
                                       "original_max_position_embeddings": 4096}),
    # deepseek-ai/DeepSeek-V3: latent attention, 1 shared + 256 routed
    # experts (router bias: e_score_correction_bias), 3 dense layers first,
    # one multi-token-prediction module; node-limited routing (4 of 8 groups)
    "deepseek-v3": _moe("deepseek-v3", hidden=7168, ffn=18432, heads=128, kv_heads=128,
                        head_dim=192, layers=61, vocab=129280, seq=4096, experts=256, topk=8,
                        expert_ffn=2048, shared_experts=1, shared_ffn=2048, dense_first=3,
                        router_bias=True, mla=True, q_lora=1536, kv_lora=512, qk_nope=128,
                        qk_rope=64, v_head=128, mtp=1, routing_groups=8, routing_group_topk=4,
                        rope_theta=10000.0,
                        rope_scaling={"rope_type": "yarn", "factor": 40.0, "beta_fast": 32.0,
                                      "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                      "original_max_position_embeddings": 4096}),
}
_ALIASES = {"turing-530b": "megatron-530b", "mt-nlg-530b": "megatron-530b",
            "gpt3": "gpt3-175b", "gpt-3-175b": "gpt3-175b", "deepseek-v3-671b": "deepseek-v3",
            "mixtral-8x7b-v0.1": "mixtral-8x7b", "gpt-oss": "gpt-oss-120b"}


def transformer(preset: str | None = None, /, **fields: Any) -> Transformer:
    """A transformer model: a named preset (``"gpt3-175b"``, ``"megatron-22b"``,
    ``"megatron-530b"``, ``"megatron-1t"``, ``"llama2-7b"`` ... ``"llama3-405b"``,
    see ``hpgo.transformer.presets()``), optionally with fields changed
    (``hpgo.transformer("llama3-70b", seq=4096)``), or a shape given by keyword
    (``hidden=, ffn=, heads=, layers=, seq=, vocab=``, optional ``kv_heads=``,
    ``mlp="gelu"|"swiglu"`` ...)."""
    if preset is None:
        return Transformer(**fields)
    if not isinstance(preset, str):
        raise TypeError(f"preset must be a str, not {type(preset).__name__}")
    key = preset.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _PRESETS:
        raise ValueError(f"unknown transformer preset {preset!r}; known: {', '.join(_PRESETS)}")
    base = _PRESETS[key]
    return dataclasses.replace(base, **fields) if fields else base


def _presets() -> tuple[str, ...]:
    return tuple(_PRESETS)


def _pretrain_seq(cfg: Mapping[str, Any], mt: str) -> int | None:
    """The sequence length a family's report documents for the bulk of its
    pretraining (before any long-context extension), capped at the config's
    position limit; None where the family documents none."""
    limit = cfg.get("max_position_embeddings") or cfg.get("n_positions")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return None
    if mt in ("gpt2", "gpt_neox"):
        return limit      # GPT-2 (1,024) and Pythia / GPT-NeoX (2,048) train at their limit
    if mt == "llama":
        if cfg.get("vocab_size") == 128256:
            return min(limit, 8192)  # Llama 3 (arXiv 2407.21783, Sec. 3.4): 8K, then 128K
        if limit <= 4096:
            return limit  # Llama 1 / 2 (arXiv 2302.13971, 2307.09288): 2K / 4K = their limit
        return None
    if mt == "mixtral":
        return limit      # Mixtral (arXiv 2401.04088, Sec. 2): 32K context = its limit
    if mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        return min(limit, 4096)  # Qwen2 (2407.10671, Sec. 3.2), Qwen3 (2505.09388, Sec. 3.2)
    if mt in ("deepseek_v2", "deepseek_v3"):
        return min(limit, 4096)  # DeepSeek-V2 (2405.04434) / V3 (2412.19437, Sec. 4.2): 4K
    return None


# Hugging Face model_type values read by from_hf_config
_HF_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                "gpt_oss", "deepseek_v2", "deepseek_v3", "gpt2", "gpt_neox")

# Shape fields of those families that hpgo does not model, with the value
# that means "absent": a config with another value is refused by name
# instead of read as a different model.
_HF_UNMODELLED = {
    "mlp_bias": (False, None),               # Llama: biases on the MLP projections
    "partial_rotary_factor": (1, 1.0, None),  # rotary embedding on part of each head
    "attention_chunk_size": (None,),         # Llama 4 chunked attention
}


def _hf_refuse_unmodelled(cfg: Mapping[str, Any], mt: str, where: str) -> None:
    for key, absent in _HF_UNMODELLED.items():
        if key in cfg and cfg[key] not in absent:
            raise ValueError(f"{where}: {key} = {cfg[key]!r} is not modelled")
    if mt in ("gpt2", "gpt_neox") and cfg.get("rope_scaling"):
        raise ValueError(f"{where}: rope_scaling on a {mt} model is not read")


#: Largest Hugging Face config.json read (they are a few KB).
_HF_CONFIG_MAX_BYTES = 16 << 20
#: Keys of a config.json whose values are text, not numbers.
_HF_TEXT_KEYS = frozenset({"hidden_act", "model_type", "topk_method", "_name_or_path"})


def from_hf_config(config: str | os.PathLike | Mapping[str, Any], *, seq: int | None = None,
                   name: str | None = None) -> Transformer:
    """A transformer from a Hugging Face ``config.json`` (a path or the parsed
    dict): Llama, Mistral, Qwen2/Qwen3 (SwiGLU, RMSNorm), the mixture-of-
    experts families Mixtral, Qwen2-MoE/Qwen3-MoE, GPT-OSS and DeepSeek-V2/V3
    (latent attention, shared experts, dense first layers, multi-token
    prediction), GPT-2 and GPT-NeoX style (GeLU, LayerNorm).  No weights are
    read.  ``seq`` defaults to the length the family's report documents for
    pretraining (Llama 3: 8,192, not its 131,072-token position limit; Qwen2
    and Qwen3, DeepSeek-V2/V3: 4,096; Llama 1/2, Mixtral, GPT-2, GPT-NeoX:
    their position limit); for other families it must be given."""
    if isinstance(config, Mapping):
        cfg = dict(config)
        where = "config"
    else:
        where = os.fspath(config)
        # FIFOs, devices and oversized files are refused there, never read forever
        cfg = _files.load_json(where, "Hugging Face config", limit=_HF_CONFIG_MAX_BYTES)
        if not isinstance(cfg, dict):
            raise ValueError(f"{where}: a config.json holds an object")

    def num(key: str, v: Any) -> Any:
        # every number read: an integer (an integral float such as 4096.0
        # too), finite; else a ValueError naming the field and the file
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{where}: {key} must be an integer, not {v!r:.60}")
        if isinstance(v, float):
            if not math.isfinite(v) or v != int(v):
                raise ValueError(f"{where}: {key} must be an integer, not {v!r}")
            v = int(v)
        if not -(1 << 62) <= v <= 1 << 62:
            raise ValueError(f"{where}: {key} = {v:.3g} is out of range")
        return v

    def get(*keys: str, default: Any = None) -> Any:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return num(k, cfg[k]) if k not in _HF_TEXT_KEYS else cfg[k]
        if default is not None:
            return default
        raise ValueError(f"{where}: missing {' / '.join(keys)}")

    def opt(*keys: str) -> Any:
        # the first of keys present and truthy, as a number (None when none is)
        for k in keys:
            if cfg.get(k) is not None and num(k, cfg[k]):
                return num(k, cfg[k])
        return None

    mt = str(cfg.get("model_type", "")).lower()
    gpt2 = mt in ("gpt2",)
    neox = mt in ("gpt_neox",)
    if mt not in _HF_FAMILIES:
        raise ValueError(f"{where}: model_type {cfg.get('model_type')!r} is not read (known: "
                         f"{', '.join(sorted(_HF_FAMILIES))})")
    _hf_refuse_unmodelled(cfg, mt, where)
    hidden = get("hidden_size", "n_embd")
    heads = get("num_attention_heads", "n_head")
    layers = get("num_hidden_layers", "n_layer")
    vocab = get("vocab_size")
    s = seq if seq is not None else _pretrain_seq(cfg, mt)
    if s is None:
        limit = cfg.get("max_position_embeddings") or cfg.get("n_positions")
        raise ValueError(f"{where}: give seq= (--seq): the {mt or 'unnamed'} family documents no "
                         f"pretraining sequence length here, and its position limit"
                         f"{f' ({limit:,})' if isinstance(limit, int) else ''} is not one")

    def build(**kw: Any) -> Transformer:
        # the model's own checks (head_dim, kv_heads, ...) name the file too
        try:
            return Transformer(**kw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from None

    if gpt2 or neox:
        ffn = get("intermediate_size", "n_inner", default=4 * hidden)
        return build(hidden=hidden, ffn=ffn, heads=heads, layers=layers, seq=s, vocab=vocab,
                     mlp="gelu", tied=bool(cfg.get("tie_word_embeddings", gpt2)), bias=True,
                     norm="layernorm", dropout=False, flash=True, learned_pos=gpt2,
                     name=name or str(cfg.get("_name_or_path", mt or "hf-model")))
    act = str(get("hidden_act", default="silu")).lower()
    if act not in ("silu", "swish", "swiglu"):
        raise ValueError(f"{where}: hidden_act {act!r} is not SwiGLU; only Llama/Mistral/Qwen-style "
                         "(silu), Mixtral, Qwen-MoE, GPT-OSS, DeepSeek-V2/V3 and GPT-2/NeoX "
                         "configs are read")
    f: dict[str, Any] = dict(
        hidden=hidden, ffn=get("intermediate_size"), heads=heads,
        kv_heads=get("num_key_value_heads", default=heads), head_dim=opt("head_dim"),
        layers=layers, seq=s, vocab=vocab, mlp="swiglu",
        tied=bool(cfg.get("tie_word_embeddings", False)), bias=False, norm="rmsnorm",
        dropout=False, flash=True, causal_flops=True, learned_pos=False,
        name=name or str(cfg.get("_name_or_path", mt or "hf-model")))
    f["attn_bias"] = bool(cfg.get("attention_bias", False))
    # Qwen2 (and Qwen2-MoE) project q, k and v with biases, the output without
    # (transformers' Qwen2Attention: bias=True on q_proj/k_proj/v_proj only)
    f["qkv_bias"] = mt in ("qwen2", "qwen2_moe") and not f["attn_bias"]
    theta, scaling = cfg.get("rope_theta"), cfg.get("rope_scaling") or None
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float))
                              or not math.isfinite(theta) or theta <= 0):
        raise ValueError(f"{where}: rope_theta must be a finite number > 0, got {theta!r}")
    try:
        f["rope_scaling"] = _rope_scaling(scaling)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None
    f["rope_theta"] = theta
    if mt in ("qwen3", "qwen3_moe"):
        f["qk_norm"] = True
    experts = opt("num_local_experts", "num_experts", "n_routed_experts")
    if experts:
        f["experts"] = experts
        f["topk"] = get("num_experts_per_tok", "experts_per_token")
        if mt in ("mixtral", "gpt_oss"):
            f["expert_ffn"] = get("intermediate_size")
        else:
            f["expert_ffn"] = get("moe_intermediate_size")
        shared = opt("n_shared_experts")
        if shared:
            f["shared_experts"], f["shared_ffn"] = shared, get("moe_intermediate_size")
        elif opt("shared_expert_intermediate_size"):
            f["shared_experts"], f["shared_ffn"] = 1, opt("shared_expert_intermediate_size")
        f["dense_first"] = opt("first_k_dense_replace") or 0
        f["moe_every"] = opt("moe_layer_freq", "decoder_sparse_step") or 1
        if cfg.get("mlp_only_layers"):
            raise ValueError(f"{where}: mlp_only_layers (dense layers at chosen places) is not "
                             "modelled; only the first layers can be dense (dense_first)")
        if mt == "gpt_oss":
            f["expert_bias"] = f["router_bias"] = f["attn_sinks"] = True
        if cfg.get("topk_method") == "noaux_tc":  # DeepSeek-V3's e_score_correction_bias
            f["router_bias"] = True
        if (opt("n_group") or 1) > 1 and cfg.get("topk_method") in (
                "group_limited_greedy", "noaux_tc"):  # node-limited routing
            f["routing_groups"] = opt("n_group")
            f["routing_group_topk"] = get("topk_group")
    if mt == "gpt_oss" or cfg.get("layer_types"):
        types = cfg.get("layer_types") or []
        win = opt("sliding_window")
        if not isinstance(types, list):
            raise ValueError(f"{where}: layer_types must be a list of strings")
        if win and types:
            sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
            if sliding:
                every = sliding[1] - sliding[0] if len(sliding) > 1 else len(types)
                if sliding[0] != 0 or sliding != list(range(0, len(types), every)):
                    raise ValueError(f"{where}: layer_types: sliding-window layers must be every "
                                     "n-th layer from layer 0")
                f["window"], f["window_every"] = win, every
    elif opt("sliding_window") and cfg.get("use_sliding_window", mt == "mistral"):
        f["window"] = opt("sliding_window")
    if opt("kv_lora_rank"):
        if not opt("q_lora_rank"):
            raise ValueError(f"{where}: latent attention without q_lora_rank (DeepSeek-V2-Lite) "
                             "is not modelled")
        f.update(mla=True, q_lora=opt("q_lora_rank"), kv_lora=opt("kv_lora_rank"),
                 qk_nope=get("qk_nope_head_dim"), qk_rope=get("qk_rope_head_dim"),
                 v_head=get("v_head_dim"), kv_heads=heads,
                 head_dim=get("qk_nope_head_dim") + get("qk_rope_head_dim"))
    if opt("num_nextn_predict_layers"):
        f["mtp"] = opt("num_nextn_predict_layers")
    return build(**f)


transformer.presets = _presets  # type: ignore[attr-defined]
transformer.from_hf_config = from_hf_config  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ProfiledModel:
    """A chain of profiled layers (a PipeDream ``graph.txt`` in topological
    order, the ``Input`` node dropped): seconds per layer forward and
    backward at ``batch`` samples, parameters (count), bytes stored for the
    backward pass and output bytes at ``batch``.  Tensor parallelism 1."""

    name: str
    batch: float
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    params: tuple[float, ...]
    activations: tuple[float, ...]
    outputs: tuple[float, ...]
    descs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.forward)
        for f in ("backward", "params", "activations", "outputs"):
            if len(getattr(self, f)) != n:
                raise ValueError("a profiled model needs equally long per-layer tuples")
        _core._step_model_params(self._tuple(_core.PRECISION_FP32))

    def _tuple(self, precision: int) -> tuple:
        return ("chain", precision, self.batch, self.forward, self.backward, self.params,
                self.activations, self.outputs)

    @property
    def layers(self) -> int:
        return len(self.forward)

    @property
    def parameters(self) -> int:
        return int(round(sum(self.params)))

    def __repr__(self) -> str:
        return (f"ProfiledModel({self.name}: {self.layers} layers at batch {self.batch:g}, "
                f"{sum(self.forward) * 1e3:.1f} ms forward, {self.parameters / 1e6:.1f} M params)")


def profile_model(profile: Any, batch: float | None = None, *,
                  bytes_per_param: float = 4.0) -> ProfiledModel:
    """A :class:`ProfiledModel` from a ``graph.txt`` path or a
    :class:`hpgo.graphfile.Profile`.  ``batch`` is the batch the profile was
    measured at (taken from the profile's metadata or its ``profile.json``
    sidecar when omitted).  Branchy graphs are ordered topologically (lowest
    file index first) and ``Input`` nodes dropped; parameter bytes are divided by ``bytes_per_param``
    (4: PipeDream profiles are fp32)."""
    from . import graphfile

    if isinstance(profile, graphfile.Profile):
        prof, name = profile, str(profile.meta.get("source", "profile"))
    else:
        path = os.fspath(profile)
        prof = graphfile.read_graph(path)
        name = path
        side = os.path.join(os.path.dirname(path), "profile.json")
        if batch is None and os.path.isfile(side):
            try:
                meta = graphfile.read_json(side).meta
                batch = meta.get("batch_size")
            except (ValueError, KeyError, OSError):
                batch = None
    if batch is None:
        batch = prof.meta.get("batch_size")
    if batch is None:
        raise ValueError(f"{name}: the profile does not say its batch size: pass batch=")
    if isinstance(batch, bool) or not isinstance(batch, (int, float)) or not math.isfinite(batch) \
            or batch <= 0:
        raise ValueError(f"batch must be a number > 0, got {batch!r}")
    n = len(prof.nodes)
    for i, nd in enumerate(prof.nodes):
        nd.check(f"{name}: node {i} ({nd.desc!r})")
    order = topological_order(n, prof.edges)
    if len(order) != n:
        raise ValueError(f"{name}: the graph has a cycle")
    # PipeDream's Input nodes (one or several, anywhere in the file) carry no work
    order = [i for i in order if not graphfile.clean_desc(prof.nodes[i].desc).startswith("Input")]
    if not order:
        raise ValueError(f"{name}: no layers besides the Input node")
    nodes = [prof.nodes[i] for i in order]
    return ProfiledModel(
        name=name, batch=float(batch),
        forward=tuple(nd.fwd_ms / 1e3 for nd in nodes),
        backward=tuple(nd.bwd_ms / 1e3 for nd in nodes),
        params=tuple(nd.param_bytes / bytes_per_param for nd in nodes),
        activations=tuple(float(nd.act_bytes) for nd in nodes),
        outputs=tuple(float(nd.act_bytes) for nd in nodes),
        descs=tuple(nd.desc for nd in nodes))


# Fields added with mixture-of-experts models: left out of a model's identity
# at their defaults, so plans saved before keep matching their (dense) model.
_MOE_FIELDS = {f.name: f.default for f in dataclasses.fields(Transformer)
               if f.name in ("experts", "topk", "expert_ffn", "shared_experts", "shared_ffn",
                             "dense_first", "moe_every", "expert_bias", "router_bias",
                             "capacity_factor", "routing_imbalance", "attn_bias", "qk_norm",
                             "attn_sinks", "window", "window_every", "mla", "q_lora", "kv_lora",
                             "qk_nope", "qk_rope", "v_head", "mtp", "routing_groups",
                             "routing_group_topk", "qkv_bias", "parallel_block")}
# Rotary-embedding fields change neither the work nor the memory: not part of
# a model's identity (a plan fits the model with any rope base or scaling).
_ROPE_FIELDS = ("rope_theta", "rope_scaling")


def model_id(model: Transformer | ProfiledModel) -> str:
    """A short identity of a model: plans record it, and simulating a plan on
    another model is refused."""
    if isinstance(model, Transformer):
        d = {k: v for k, v in model.to_dict().items()
             if not (k in _MOE_FIELDS and v == _MOE_FIELDS[k]) and k not in _ROPE_FIELDS}
        key = json.dumps(d, sort_keys=True)
        label = model.name or "transformer"
    elif isinstance(model, ProfiledModel):
        key = json.dumps([model.batch, model.forward, model.backward, model.params,
                          model.activations])
        label = os.path.basename(os.path.dirname(model.name)) or os.path.basename(model.name)
    else:
        raise TypeError(f"not a model: {type(model).__name__}")
    return f"{label}#{hashlib.sha1(key.encode()).hexdigest()[:10]}"
