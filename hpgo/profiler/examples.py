"""Small PyTorch models for examples, tests and the CPU profiles in profiles/.

Each factory returns ``(model, example_inputs)`` so it can be used directly
with ``hpgo profile torch hpgo.profiler.examples:NAME``.
"""
from __future__ import annotations



from . import _torch

__all__ = ["mlp", "resnet_ish", "tiny_transformer", "tiny_bert", "branchy", "untraceable"]


def _nn():
    torch = _torch()
    return torch, torch.nn


def mlp(batch_size: int = 64, width: int = 1024, depth: int = 4, classes: int = 10):
    """A plain MLP: Linear/ReLU stack."""
    torch, nn = _nn()
    torch.manual_seed(0)
    layers = [nn.Flatten()]
    fin = 784
    for _ in range(depth):
        layers += [nn.Linear(fin, width), nn.ReLU()]
        fin = width
    layers.append(nn.Linear(fin, classes))
    return nn.Sequential(*layers), torch.randn(batch_size, 1, 28, 28)


def resnet_ish(batch_size: int = 16, image: int = 64, width: int = 32, blocks=(2, 2, 2), classes: int = 100):
    """A small residual CNN (basic blocks with skip connections, stride-2 stages)."""
    torch, nn = _nn()

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu2 = nn.ReLU(inplace=True)

        def forward(self, x):
            y = self.relu1(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            skip = x if self.down is None else self.down(x)
            return self.relu2(y + skip)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(inplace=True))
            mods, cin = [], width
            for i, n in enumerate(blocks):
                cout = width * 2 ** i
                for j in range(n):
                    mods.append(Block(cin, cout, 2 if (j == 0 and i > 0) else 1))
                    cin = cout
            self.blocks = nn.Sequential(*mods)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(self.pool(x), 1))

    torch.manual_seed(0)
    return Net(), torch.randn(batch_size, 3, image, image)


def tiny_transformer(batch_size: int = 8, seq: int = 128, hidden: int = 256, heads: int = 4, layers: int = 4,
                     vocab: int = 8000):
    """A GPT-like decoder: token + learned position embeddings, pre-LN blocks, tied LM head."""
    torch, nn = _nn()
    F = torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(x).split(hidden, dim=2)
            q = q.view(b, s, heads, d // heads).transpose(1, 2)
            k = k.view(b, s, heads, d // heads).transpose(1, 2)
            v = v.view(b, s, heads, d // heads).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, s, d))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(hidden)
            self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Parameter(torch.zeros(seq, hidden))
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(hidden)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe
            x = self.ln_f(self.blocks(x))
            return x @ self.wte.weight.t()

    torch.manual_seed(0)
    return GPT(), torch.randint(0, vocab, (batch_size, seq))


def tiny_bert(batch_size: int = 8, seq: int = 128, hidden: int = 256, heads: int = 4, layers: int = 4,
              vocab: int = 8000):
    """A BERT-like encoder built from nn.TransformerEncoderLayer."""
    torch, nn = _nn()

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(seq, hidden)
            self.ln = nn.LayerNorm(hidden)
            self.layers = nn.Sequential(*[
                nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.1, activation="gelu",
                                           batch_first=True) for _ in range(layers)])
            self.head = nn.Linear(hidden, vocab)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.ln(self.emb(ids) + self.pos(pos))
            return self.head(self.layers(x))

    torch.manual_seed(0)
    return Bert(), torch.randint(0, vocab, (batch_size, seq))


def branchy(batch_size: int = 32, width: int = 256):
    """An MLP with two parallel branches joined by concatenation (a DAG)."""
    torch, nn = _nn()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(64, width)
            self.a1 = nn.Linear(width, width)
            self.a2 = nn.Linear(width, width)
            self.b1 = nn.Linear(width, width)
            self.out = nn.Linear(2 * width, 10)

        def forward(self, x):
            h = torch.relu(self.inp(x))
            a = self.a2(torch.relu(self.a1(h)))
            b = self.b1(h)
            return self.out(torch.cat([a, b], dim=1))

    torch.manual_seed(0)
    return Net(), torch.randn(batch_size, 64)


def untraceable(batch_size: int = 16, width: int = 128):
    """Data-dependent control flow that torch.fx cannot trace (hooks fallback)."""
    torch, nn = _nn()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(width, width)
            self.l2 = nn.Linear(width, width)
            self.l3 = nn.Linear(width, 10)

        def forward(self, x):
            h = torch.relu(self.l1(x))
            if h.sum() > 0:      # depends on values: not traceable
                h = self.l2(h)
            return self.l3(h)

    torch.manual_seed(0)
    return Net(), torch.randn(batch_size, width)



