"""Small factories for the zoo checker's own tests (test/Zoo).

Each is a factory of the exporter's contract, `NAME() -> (model, batch)`,
seconds to export and check: `tiny_lm` stands in for a zoo language model
(RMSNorm, causal attention, SwiGLU, cross-entropy), `tiny_bn` has a bias whose
gradient is zero in exact arithmetic (a Linear before a batch norm), which
the gradient check's floor exists for.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, width: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.mlp_norm = RMSNorm(width)
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        a = torch.softmax(scores.masked_fill(causal, float("-inf")), -1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 4, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList([Block(width, heads, hidden) for _ in range(layers)])
        self.norm = RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def tiny_lm():
    torch.manual_seed(0)
    model = TinyLM()
    tokens = torch.randint(0, 64, (2, 8))
    return model, (tokens, torch.roll(tokens, -1, 1))


class LinearBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x, y):
        return F.mse_loss(self.fc2(F.gelu(self.bn(self.fc1(x)))), y)


def tiny_bn():
    torch.manual_seed(0)
    return LinearBatchNorm(), (torch.randn(16, 8), torch.randn(16, 4))


def broken():
    raise RuntimeError("the config asks for 3 heads of a width of 32")


def unseeded():
    """A batch drawn without a seed: each call differs from the export's."""
    model, _ = tiny_bn()
    generator = torch.Generator()
    generator.seed()
    return model, (torch.randn(16, 8, generator=generator), torch.randn(16, 4, generator=generator))
