"""Architectures of the zoo, written from their published descriptions.

Each builder takes (graph, **config) and issues the model's ops on a
:class:`ZooGraph`.  CNNs are profiled per leaf op (as PipeDream's profiler
does), transformers and RNNs per layer; skip connections and side inputs keep
their DAG edges.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .graph import T, ZooGraph

__all__ = ["ModelInfo", "MODELS", "resolve_model"]


# ---------------------------------------------------------------------- CNNs

def _conv_bn(g: ZooGraph, x: T, cout, k, stride, pad, prefix, relu=True, input_grad=True) -> T:
    x = g.conv2d(x, cout, k, stride, pad, input_grad=input_grad, desc=f"{prefix}.conv")
    x = g.batchnorm(x, desc=f"{prefix}.bn")
    if relu:
        x = g.relu(x, desc=f"{prefix}.relu")
    return x


def build_resnet(g: ZooGraph, layers=(3, 4, 6, 3), image: int = 224, classes: int = 1000) -> None:
    """ResNet v1.5 with bottleneck blocks (torchvision's layout; stride on the 3x3 conv)."""
    x = g.input((g.n, 3, image, image), g.e)
    x = g.conv2d(x, 64, 7, 2, 3, input_grad=False, desc="conv1")
    x = g.batchnorm(x, desc="bn1")
    x = g.relu(x, desc="relu")
    x = g.pool2d(x, 3, 2, 1, desc="maxpool")
    cin = 64
    for si, (blocks, width) in enumerate(zip(layers, (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if (b == 0 and si > 0) else 1
            p = f"layer{si + 1}.{b}"
            identity = x
            y = _conv_bn(g, x, width, 1, 1, 0, f"{p}.1")
            y = _conv_bn(g, y, width, 3, stride, 1, f"{p}.2")
            y = _conv_bn(g, y, width * 4, 1, 1, 0, f"{p}.3", relu=False)
            if b == 0:
                identity = g.conv2d(x, width * 4, 1, stride, 0, desc=f"{p}.downsample.conv")
                identity = g.batchnorm(identity, desc=f"{p}.downsample.bn")
            x = g.add(y, identity, desc=f"{p}.add")
            x = g.relu(x, desc=f"{p}.relu")
            cin = width * 4
    x = g.pool2d(x, x.shape[2], 1, 0, desc="avgpool")
    n = x.shape[0]
    x = g.copy([x], (n, cin), desc="flatten", backward=False)
    g.linear(x, classes, desc="fc")


VGG_CFG = {
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M"],
}


def build_vgg(g: ZooGraph, depth: int = 16, image: int = 224, classes: int = 1000) -> None:
    """VGG (configurations D and E) without batch norm, torchvision's classifier."""
    if depth not in VGG_CFG:
        raise ValueError(f"VGG depth must be one of {sorted(VGG_CFG)}, got {depth!r}")
    x = g.input((g.n, 3, image, image), g.e)
    first = True
    block, idx = 1, 1
    for v in VGG_CFG[depth]:
        if v == "M":
            x = g.pool2d(x, 2, 2, 0, desc=f"MaxPool2d_{block}")
            block, idx = block + 1, 1
            continue
        x = g.conv2d(x, v, 3, 1, 1, bias=True, input_grad=not first, desc=f"Conv2d_{block}_{idx}")
        x = g.relu(x, desc=f"ReLU_{block}_{idx}")
        first = False
        idx += 1
    n, c, h, w = x.shape
    x = g.copy([x], (n, c * h * w), desc="flatten", backward=False)
    x = g.linear(x, 4096, desc="fc6")
    x = g.relu(x, desc="fc6.relu")
    x = g.dropout(x, desc="fc6.dropout")
    x = g.linear(x, 4096, desc="fc7")
    x = g.relu(x, desc="fc7.relu")
    x = g.dropout(x, desc="fc7.dropout")
    g.linear(x, classes, desc="fc8")


# ------------------------------------------------------------- AmoebaNet-D

# AmoebaNet-D genotype as used for GPipe (TensorFlow TPU reference model):
# pairs of (input state index, op); each pair of ops is summed into a new state.
_AMOEBA_NORMAL = [(1, "conv_1x1"), (1, "max_pool_3x3"), (1, "none"), (0, "conv_1x7_7x1"),
                  (0, "conv_1x1"), (0, "conv_1x7_7x1"), (2, "max_pool_3x3"), (2, "none"),
                  (1, "avg_pool_3x3"), (5, "conv_1x1")]
_AMOEBA_NORMAL_CONCAT = [0, 3, 4, 6]
_AMOEBA_REDUCE = [(0, "max_pool_2x2"), (0, "max_pool_3x3"), (2, "none"), (1, "conv_3x3"),
                  (2, "conv_1x7_7x1"), (2, "max_pool_3x3"), (3, "none"), (1, "max_pool_2x2"),
                  (2, "avg_pool_3x3"), (3, "conv_1x1")]
_AMOEBA_REDUCE_CONCAT = [4, 5, 6]


def _relu_conv_bn(g, x, cout, k=1, stride=1, pad=0):
    x = g.relu(x)
    x = g.conv2d(x, cout, k, stride, pad)
    return g.batchnorm(x)


def _factorized_reduce(g, x, cout):
    x = g.relu(x)
    a = g.conv2d(x, cout // 2, 1, 2, 0)
    b = g.conv2d(x, cout // 2, 1, 2, 0)  # on the input shifted by one pixel
    n, _, h, w = a.shape
    y = g.copy([a, b], (n, cout, h, w), desc="cat")
    return g.batchnorm(y)


def _amoeba_op(g, name, x, c, stride):
    if name == "none":
        return x if stride == 1 else _factorized_reduce(g, x, c)
    if name in ("avg_pool_3x3", "max_pool_3x3"):
        return g.pool2d(x, 3, stride, 1)
    if name == "max_pool_2x2":
        return g.pool2d(x, 2, stride, 0)
    if name == "conv_1x1":
        return _relu_conv_bn(g, x, c, 1, stride, 0)
    if name == "conv_3x3":
        y = _relu_conv_bn(g, x, c // 4, 1, 1, 0)
        y = _relu_conv_bn(g, y, c // 4, 3, stride, 1)
        return _relu_conv_bn(g, y, c, 1, 1, 0)
    if name == "conv_1x7_7x1":
        y = _relu_conv_bn(g, x, c // 4, 1, 1, 0)
        y = _relu_conv_bn(g, y, c // 4, (1, 7), (1, stride), (0, 3))
        y = _relu_conv_bn(g, y, c // 4, (7, 1), (stride, 1), (3, 0))
        return _relu_conv_bn(g, y, c, 1, 1, 0)
    raise ValueError(name)


def build_amoebanet(g: ZooGraph, layers: int = 36, filters: int = 512, image: int = 224,
                    classes: int = 1000) -> None:
    """AmoebaNet-D (L normal cells in three stacks, D filters), one node per cell.

    Each cell reads the outputs of the two previous cells (DAG edges to both).
    """
    if layers % 3:
        raise ValueError(f"AmoebaNet layers must be a multiple of 3, got {layers}")
    x = g.input((g.n, 3, image, image), g.e)
    channels = filters // 4
    with g.block("stem") as b:
        y = g.relu(x)
        y = g.conv2d(y, channels, 3, 2, 1, input_grad=False)
        b.output(g.batchnorm(y))
    prev_prev = prev = b.result
    c_pp = c_p = channels
    red_prev = False

    def cell(desc, reduction):
        nonlocal prev_prev, prev, c_pp, c_p, red_prev, channels
        if reduction:
            channels *= 2
        ops, concat = ((_AMOEBA_REDUCE, _AMOEBA_REDUCE_CONCAT) if reduction
                       else (_AMOEBA_NORMAL, _AMOEBA_NORMAL_CONCAT))
        with g.block(desc) as blk:
            s1 = _relu_conv_bn(g, prev, channels)
            if red_prev:
                s2 = _factorized_reduce(g, prev_prev, channels)
            elif c_pp != channels:
                s2 = _relu_conv_bn(g, prev_prev, channels)
            else:
                s2 = prev_prev
            states = [s1, s2]
            for i in range(0, len(ops), 2):
                hs = []
                for j in (i, i + 1):
                    idx, name = ops[j]
                    stride = 2 if (reduction and idx < 2) else 1
                    hs.append(_amoeba_op(g, name, states[idx], channels, stride))
                states.append(g.add(hs[0], hs[1]))
            parts = [states[i] for i in concat]
            n, _, h, w = parts[0].shape
            blk.output(g.copy(parts, (n, channels * len(concat), h, w), desc="cat"))
        prev_prev, prev = prev, blk.result
        c_pp, c_p = c_p, channels * len(concat)
        red_prev = reduction

    cell("cell_stem_0", True)
    cell("cell_stem_1", True)
    k = 0
    per = layers // 3
    for stack in range(3):
        if stack:
            cell(f"reduction_cell_{stack - 1}", True)
        for _ in range(per):
            cell(f"cell_{k}", False)
            k += 1
    with g.block("classifier", head=False) as b:
        y = g.pool2d(prev, prev.shape[2], 1, 0)
        n, c = y.shape[0], y.shape[1]
        y = g.copy([y], (n, c), backward=False)
        b.output(g.linear(y, classes))


# -------------------------------------------------------------- transformers

def _attention_core(g: ZooGraph, q: T, k: T, v: T, n, s, heads, dh, kv_len=None) -> T:
    kv = kv_len or s
    sc = g.bmm(q, k, n * heads, s, dh, kv, (n, heads, s, kv), desc="scores")
    sc = g.eltwise([sc], "scale_mask", 2.0, 1)
    p = g.softmax(sc)
    p = g.dropout(p)
    return g.bmm(p, v, n * heads, s, kv, dh, (n, s, heads * dh), desc="context")


def _bert_layer(g: ZooGraph, x: T, heads: int, ffn: int) -> T:
    """Post-LN encoder layer (BERT)."""
    n, s, d = x.shape
    dh = d // heads
    qkv = g.linear(x, 3 * d)
    ctx = _attention_core(g, qkv, qkv, qkv, n, s, heads, dh)
    y = g.linear(ctx, d)
    y = g.dropout(y)
    y = g.layernorm(g.add(y, x))
    h = g.gelu(g.linear(y, ffn))
    z = g.dropout(g.linear(h, d))
    return g.layernorm(g.add(z, y))


def _gpt_layer(g: ZooGraph, x: T, heads: int, ffn: int) -> T:
    """Pre-LN decoder layer (GPT-2) with causal self-attention."""
    n, s, d = x.shape
    dh = d // heads
    a = g.layernorm(x)
    qkv = g.linear(a, 3 * d)
    ctx = _attention_core(g, qkv, qkv, qkv, n, s, heads, dh)
    y = g.dropout(g.linear(ctx, d))
    x = g.add(x, y)
    m = g.layernorm(x)
    h = g.gelu(g.linear(m, ffn))
    z = g.dropout(g.linear(h, d))
    return g.add(x, z)


def _xlnet_layer(g: ZooGraph, x: T, pos: T, heads: int, ffn: int) -> T:
    """XLNet layer: relative-position attention (one stream, no memory) + FFN."""
    n, s, d = x.shape
    dh = d // heads
    q = g.linear(x, d, bias=False)
    k = g.linear(x, d, bias=False)
    v = g.linear(x, d, bias=False)
    r = g.linear(pos, d, bias=False)            # positional keys, 2s positions
    g.add_params(3 * heads * dh + 2 * heads * dh)  # r_w/r_r/r_s biases, segment embedding
    ac = g.bmm(q, k, n * heads, s, dh, s, (n, heads, s, s), desc="content_score")
    bd = g.bmm(q, r, n * heads, s, dh, 2 * s, (n, heads, s, 2 * s), desc="position_score")
    bd = g.copy([bd], (n, heads, s, s), desc="rel_shift")
    sc = g.eltwise([ac, bd], "score_sum_scale_mask", 3.0, 1)
    p = g.dropout(g.softmax(sc))
    ctx = g.bmm(p, v, n * heads, s, s, dh, (n, s, d), desc="context")
    y = g.dropout(g.linear(ctx, d, bias=False))
    y = g.layernorm(g.add(y, x))
    h = g.dropout(g.gelu(g.linear(y, ffn)))
    z = g.dropout(g.linear(h, d))
    return g.layernorm(g.add(z, y))


def build_bert(g: ZooGraph, layers: int = 24, hidden: int = 1024, heads: int = 16, ffn: int = 4096,
               seq: int = 512, vocab: int = 30522, max_pos: int = 512, type_vocab: int = 2,
               head: bool = True) -> None:
    """BERT (BertModel with pooler) + the pre-training heads (masked LM with the
    decoder tied to the word embedding, next-sentence classifier)."""
    if seq > max_pos:
        raise ValueError(f"seq {seq} exceeds max_pos {max_pos}")
    ids = g.input((g.n, seq), 8)
    with g.block("embeddings") as b:
        w = g.embedding(ids, vocab, hidden)
        p = g.embedding(ids, max_pos, hidden)
        t = g.embedding(ids, type_vocab, hidden)
        y = g.add(g.add(w, p), t)
        b.output(g.dropout(g.layernorm(y)))
    x = b.result
    for i in range(layers):
        with g.block(f"layer_{i}") as b:
            b.output(_bert_layer(g, x, heads, ffn))
        x = b.result
    with g.block("pooler") as b:
        cls = T(x.node, (g.n, hidden))
        g.tanh(g.linear(cls, hidden))
        b.output(x)  # the pooled vector rides along with the sequence output
    x = b.result
    if head:
        with g.block("pretraining_heads", head=True) as b:
            y = g.layernorm(g.gelu(g.linear(x, hidden)))
            logits = g.linear(y, vocab, weight_params=False)  # decoder tied to the embedding
            loss = g.cross_entropy(logits)
            nsp = g.linear(T(x.node, (g.n, hidden)), 2)
            g.cross_entropy(nsp)
            b.output(loss)


def build_gpt(g: ZooGraph, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int | None = None,
              seq: int = 1024, vocab: int = 50257, max_pos: int | None = None, head: bool = True) -> None:
    """GPT-2 style decoder: learned positions, pre-LN layers, final LayerNorm,
    LM head tied to the token embedding."""
    ffn = ffn or 4 * hidden
    max_pos = max_pos or seq
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    if seq > max_pos:
        raise ValueError(f"seq {seq} exceeds max_pos {max_pos}")
    ids = g.input((g.n, seq), 8)
    with g.block("embeddings") as b:
        w = g.embedding(ids, vocab, hidden)
        p = g.embedding(ids, max_pos, hidden)
        b.output(g.dropout(g.add(w, p)))
    x = b.result
    for i in range(layers):
        with g.block(f"layer_{i}") as b:
            b.output(_gpt_layer(g, x, heads, ffn))
        x = b.result
    with g.block("ln_f_lm_head") as b:
        y = g.layernorm(x)  # ln_f belongs to the backbone; counted here
        if head:
            logits = g.linear(y, vocab, bias=False, weight_params=False)
            b.output(g.cross_entropy(logits))
        else:
            b.output(y)


def build_xlnet(g: ZooGraph, layers: int = 24, hidden: int = 1024, heads: int = 16, ffn: int = 4096,
                seq: int = 512, vocab: int = 32000, head: bool = True) -> None:
    """XLNet (one-stream fine-tuning form, no memory): word embedding, a
    sinusoidal relative-position table feeding every layer, LM head tied to the
    embedding (own bias)."""
    ids = g.input((g.n, seq), 8)
    with g.block("word_embedding") as b:
        w = g.embedding(ids, vocab, hidden)
        g.add_params(hidden)  # mask_emb
        b.output(g.dropout(w))
    x = b.result
    pos = g.source("pos_emb", (g.n, 2 * seq, hidden), ids)
    for i in range(layers):
        with g.block(f"layer_{i}") as b:
            b.output(_xlnet_layer(g, x, pos, heads, ffn))
        x = b.result
    if head:
        with g.block("lm_loss", head=True) as b:
            logits = g.linear(x, vocab, bias=True, weight_params=False)
            b.output(g.cross_entropy(logits))


def build_gnmt(g: ZooGraph, layers: int = 8, hidden: int = 1024, vocab: int = 36560,
               src_len: int = 35, tgt_len: int = 36) -> None:
    """GNMT (PipeDream/MLPerf layout): encoder with a bidirectional first layer
    and residual connections from the third layer, decoder whose first LSTM is
    fed by Bahdanau attention over the encoder output; the attention context is
    concatenated to the input of every later decoder layer."""
    if layers < 3:
        raise ValueError("GNMT needs at least 3 layers per side")
    n = g.n
    src = g.input((n, src_len), 8)
    e = g.embedding(src, vocab, hidden, desc="encoder.embedding")
    with g.block("encoder.bilstm") as b:
        b.output(g.lstm(g.dropout(e), hidden, bidirectional=True))
    x = b.result
    with g.block("encoder.lstm_1") as b:
        b.output(g.lstm(g.dropout(x), hidden))
    x = b.result
    for i in range(2, layers):
        with g.block(f"encoder.lstm_{i}") as b:
            y = g.lstm(g.dropout(x), hidden)
            b.output(g.add(y, x))
        x = b.result
    enc = x
    tgt = g.source("target_ids", (n, tgt_len), src, elem_bytes=8)
    d = g.embedding(tgt, vocab, hidden, desc="decoder.embedding")
    with g.block("decoder.attention_lstm") as b:
        y = g.lstm(d, hidden)
        q = g.linear(y, hidden, bias=False)
        k = g.linear(enc, hidden, bias=False)
        g.add_params(hidden)  # attention vector v
        sc = g.bmm(q, k, n, tgt_len, hidden, src_len, (n, tgt_len, src_len), desc="attn_scores")
        sc = g.eltwise([sc], "tanh_mask", 4.0, 1)
        p = g.softmax(sc)
        ctx = g.bmm(p, enc, n, tgt_len, src_len, hidden, (n, tgt_len, hidden), desc="attn_context")
        b.output(g.copy([y, ctx], (n, tgt_len, 2 * hidden), desc="cat"))
    att = b.result
    x = att
    for i in range(1, layers):
        with g.block(f"decoder.lstm_{i}") as b:
            if i == 1:
                inp = g.dropout(att)   # [attention-LSTM output; context]
            else:
                inp = g.copy([g.dropout(x), att], (n, tgt_len, 2 * hidden), desc="cat")
            y = g.lstm(inp, hidden)
            if i >= 2:
                y = g.add(y, T(x.node, (n, tgt_len, hidden)))
            b.output(y)
        x = b.result
    with g.block("classifier_loss") as b:
        logits = g.linear(x, vocab)
        b.output(g.cross_entropy(logits))


# ------------------------------------------------------------------ registry

@dataclass
class ModelInfo:
    builder: Callable
    config: dict
    batch_size: int                 # default: the batch of DAPPLE's profile where there is one
    description: str
    published_params: int | None = None   # exact published count of the backbone, if any
    published_note: str = ""
    aliases: tuple = field(default_factory=tuple)


MODELS: dict[str, ModelInfo] = {
    "resnet50": ModelInfo(build_resnet, {"layers": (3, 4, 6, 3)}, 32,
                          "ResNet-50 (torchvision v1.5), per leaf op, 224x224", 25_557_032,
                          "torchvision resnet50"),
    "resnet101": ModelInfo(build_resnet, {"layers": (3, 4, 23, 3)}, 32,
                           "ResNet-101 (torchvision v1.5), per leaf op", 44_549_160, "torchvision resnet101"),
    "vgg16": ModelInfo(build_vgg, {"depth": 16}, 32, "VGG-16 (no BN), per leaf op, 224x224",
                       138_357_544, "torchvision vgg16"),
    "vgg19": ModelInfo(build_vgg, {"depth": 19}, 32, "VGG-19 (no BN), per leaf op, 224x224",
                       143_667_240, "torchvision vgg19"),
    "bert-large": ModelInfo(build_bert, {"layers": 24, "seq": 512}, 6,
                            "BERT-Large (24 x 1024, 16 heads), seq 512, pre-training heads",
                            335_141_888, "BertModel bert-large-uncased (pooler included)"),
    "bert-48": ModelInfo(build_bert, {"layers": 48, "seq": 384}, 2,
                         "BERT-Large with 48 layers (DAPPLE's BERT-48), seq 384", None,
                         "DAPPLE: 640M"),
    "xlnet-large": ModelInfo(build_xlnet, {"layers": 24}, 1, "XLNet-Large (24 x 1024), seq 512"),
    "xlnet-36": ModelInfo(build_xlnet, {"layers": 36}, 1,
                          "XLNet with 36 layers (DAPPLE's XLNet-36), seq 512", None, "DAPPLE: 500M"),
    "gnmt-16": ModelInfo(build_gnmt, {"layers": 8}, 64,
                         "GNMT-16 (8+8 LSTM layers, 1024 units, vocab 36560), src 35 / tgt 36 tokens",
                         None, "DAPPLE: 291M"),
    "amoebanet-36": ModelInfo(build_amoebanet, {"layers": 36, "filters": 512}, 1,
                              "AmoebaNet-D (36, 512), one node per cell, 224x224", None, "DAPPLE: 933M"),
    "amoebanet-18": ModelInfo(build_amoebanet, {"layers": 18, "filters": 512}, 8,
                              "AmoebaNet-D (18, 512), one node per cell"),
    "gpt2": ModelInfo(build_gpt, {"layers": 12, "hidden": 768, "heads": 12}, 8,
                      "GPT-2 small (12 x 768), seq 1024", 124_439_808, "GPT2Model gpt2"),
    "gpt2-medium": ModelInfo(build_gpt, {"layers": 24, "hidden": 1024, "heads": 16}, 4,
                             "GPT-2 medium (24 x 1024), seq 1024", 354_823_168, "GPT2Model gpt2-medium"),
    "gpt2-large": ModelInfo(build_gpt, {"layers": 36, "hidden": 1280, "heads": 20}, 2,
                            "GPT-2 large (36 x 1280), seq 1024", 774_030_080, "GPT2Model gpt2-large"),
    "gpt2-xl": ModelInfo(build_gpt, {"layers": 48, "hidden": 1600, "heads": 25}, 1,
                         "GPT-2 XL (48 x 1600), seq 1024", 1_557_611_200, "GPT2Model gpt2-xl"),
    "gpt": ModelInfo(build_gpt, {}, 1,
                     "GPT-style decoder of any size: layers, hidden, heads, seq, vocab, ffn, max_pos"),
}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def resolve_model(name: str) -> str:
    """Canonical model name for ``name`` (case, '-' and '_' ignored)."""
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string, got {type(name).__name__}")
    k = _key(name)
    for m in MODELS:
        if _key(m) == k:
            return m
    raise ValueError(f"unknown zoo model {name!r}; known: {', '.join(MODELS)}")
