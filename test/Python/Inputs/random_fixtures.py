"""Models that draw random numbers inside the training step (issue 40,
docs/randomness.md), for test/Python/export-random.test.

A token model: an embedding, Gaussian noise added per sample (randn_like),
a ReLU layer with dropout, a head and the cross entropy of the next token.
Its batch is (tokens, targets) of [B, T] int64, as --data fills it.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, BATCH, SEQ = 32, 16, 4, 8


class NoisyTokenModel(nn.Module):
    def __init__(self, p: float, noise: float | None, dropout_module: bool = True):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.fc = nn.Linear(DIM, DIM)
        self.drop = nn.Dropout(p) if dropout_module else nn.Identity()
        self.head = nn.Linear(DIM, VOCAB)
        self.noise = noise

    def forward(self, tokens, targets):
        h = self.emb(tokens)
        if self.noise is not None:
            h = h + self.noise * torch.randn_like(h)
        h = self.drop(F.relu(self.fc(h)))
        logits = self.head(h)
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def _batch():
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def noisy():
    """Noise (std 0.1) and dropout (p = 0.25): both drawn per sample."""
    torch.manual_seed(0)
    return NoisyTokenModel(0.25, 0.1), _batch()


def dropout_p0():
    """Dropout at p = 0 and no noise: draws nothing."""
    torch.manual_seed(0)
    return NoisyTokenModel(0.0, None), _batch()


def plain():
    """The same model without a dropout module."""
    torch.manual_seed(0)
    return NoisyTokenModel(0.0, None, dropout_module=False), _batch()


class PerStepDraws(nn.Module):
    """Draws without a sample dimension (a timestep per step) and the other
    random operators: rand, randint, bernoulli, normal, uniform."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        t = torch.randint(0, 10, (3,)).float()
        u = torch.rand(3, 1)
        h = self.fc(x)
        keep = torch.bernoulli(torch.full_like(h, 0.5))
        n = torch.empty_like(h).normal_(0.0, 2.0)
        w = torch.empty(8).uniform_(-1.0, 1.0)
        return ((h * keep + n * 0.01) * w).pow(2).mean() + (t.sum() + u.sum()) * 0.0


def per_step():
    torch.manual_seed(0)
    return PerStepDraws(), (torch.randn(4, 8, generator=torch.Generator().manual_seed(1)),)


class Int16Draw(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        codes = torch.randint(0, 10, (4, 8), dtype=torch.int16)
        return (self.fc(x) * codes.float()).pow(2).mean()


def int16_draw():
    """randint in int16, which the generator does not draw in."""
    torch.manual_seed(0)
    return Int16Draw(), (torch.randn(4, 8, generator=torch.Generator().manual_seed(1)),)


def dropout_only():
    """Dropout (p = 0.25) without noise: evaluation runs it off."""
    torch.manual_seed(0)
    return NoisyTokenModel(0.25, None), _batch()
