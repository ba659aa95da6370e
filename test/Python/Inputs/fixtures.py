"""Small model factories for the exporter's tests (seconds each).

Each returns (model, batch) or (model, batch, loss_fn), as
`python3 -m mantissa.export Inputs/fixtures.py:FACTORY OUT NAME` takes them.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def _generator():
    return torch.Generator().manual_seed(1234)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x, y):
        return F.mse_loss(self.fc2(F.gelu(self.fc1(x))), y)


def mlp():
    """Positional batch, the model returns the scalar loss."""
    torch.manual_seed(0)
    g = _generator()
    return MLP(), (torch.randn(4, 16, generator=g), torch.randn(4, 8, generator=g))


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8))

    def forward(self, x):
        return self.body(x)


def mlp_loss_fn():
    """The model returns predictions; the factory's loss_fn makes the loss
    from them and the batch's "target", which the model's forward does not
    take (so it reaches only loss_fn)."""
    torch.manual_seed(0)
    g = _generator()
    batch = {"x": torch.randn(4, 16, generator=g), "target": torch.randn(4, 8, generator=g)}

    def loss_fn(output, batch):
        return ((output - batch["target"]) ** 2).mean()
    return Regressor(), batch, loss_fn


@dataclass
class CausalLMOutput:
    """What a Hugging Face model returns: an object with .loss (and more)."""
    loss: torch.Tensor | None
    logits: torch.Tensor


class TinyCausalLM(nn.Module):
    """HF-style: keyword arguments, a LayerNorm, an output object with .loss,
    the LM head tied to the embedding, and a pooler the LM loss never reads
    (so it gets no gradient)."""

    def __init__(self, vocab=32, width=16):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, width)
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.embed_tokens.weight
        self.pooler = nn.Linear(width, width)

    def forward(self, input_ids, attention_mask=None, labels=None):
        hidden = self.embed_tokens(input_ids)
        hidden = hidden + F.silu(self.proj(hidden))
        if attention_mask is not None:
            hidden = hidden * attention_mask.unsqueeze(-1).to(hidden.dtype)
        logits = self.lm_head(self.norm(hidden))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1))
        return CausalLMOutput(loss=loss, logits=logits)


def hf_style():
    torch.manual_seed(0)
    g = _generator()
    ids = torch.randint(0, 32, (2, 6), generator=g)
    return TinyCausalLM(), {"input_ids": ids, "attention_mask": torch.ones(2, 6, dtype=torch.long),
                            "labels": ids}


def hf_style_dict_output():
    """The output is a dict with "loss" (the last fallback)."""
    model, batch = hf_style()

    class DictOutput(TinyCausalLM):
        def forward(self, **kwargs):
            output = super().forward(**kwargs)
            return {"loss": output.loss, "logits": output.logits}
    torch.manual_seed(0)
    return DictOutput(), batch


# --- bad input ------------------------------------------------------------


def raises():
    raise RuntimeError("the config file is missing")


def not_a_tuple():
    return MLP()


def no_loss():
    """HF-style without labels: output.loss is None."""
    model, batch = hf_style()
    del batch["labels"]
    return model, batch


def float_ids():
    model, batch = hf_style()
    batch["input_ids"] = batch["input_ids"].float()
    return model, batch


def float64_input():
    model, (x, y) = mlp()
    return model, (x.double(), y)


def non_tensor():
    model, batch = hf_style()
    batch["attention_mask"] = [[1] * 6] * 2
    return model, batch


class Ranker(nn.Module):
    """Sorts its scores: aten.sort, which Mantissa does not import."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(8, 8)

    def forward(self, x):
        values, _ = torch.sort(self.score(x), dim=-1)
        return values


class WithRanker(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 8)
        self.ranker = Ranker()

    def forward(self, x):
        return self.ranker(self.encoder(x)).pow(2).mean()


def unsupported_op():
    torch.manual_seed(0)
    return WithRanker(), (torch.randn(3, 8, generator=_generator()),)


class WithDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.fc(x)).pow(2).mean()


def dropout():
    """Dropout with p > 0 in training mode: draws random numbers."""
    torch.manual_seed(0)
    return WithDropout(), (torch.randn(3, 8, generator=_generator()),)


class PoissonNoise(nn.Module):
    def forward(self, h):
        return torch.poisson(h.abs())


class WithPoissonNoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.noise = PoissonNoise()

    def forward(self, x):
        h = self.fc(x)
        return (h + self.noise(h)).pow(2).mean()


def poisson_noise():
    """A random operator Mantissa does not import (poisson)."""
    torch.manual_seed(0)
    return WithPoissonNoise(), (torch.randn(3, 8, generator=_generator()),)


def dropout_eval():
    """The same model in eval mode draws nothing and exports."""
    model, batch = dropout()
    return model.eval(), batch


class SelfAttention(nn.Module):
    def __init__(self, width=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)


class AttentionBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SelfAttention()

    def forward(self, x):
        return self.attn(x).pow(2).mean()


def attention():
    """Causal SDPA in module 'attn': its backward is one kernel that reads
    the forward's results."""
    torch.manual_seed(0)
    return AttentionBlock(), (torch.randn(2, 4, 16, generator=_generator()),)


class ConvBN(nn.Module):
    """A convolution whose bias feeds a batch norm (its gradient is zero in
    exact arithmetic) and the norm's running statistics, buffers the step
    updates."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, images, labels):
        features = F.relu(self.bn(self.conv(images))).mean((2, 3))
        return F.cross_entropy(self.head(features), labels)


def conv_bn():
    torch.manual_seed(0)
    g = _generator()
    return ConvBN(), (torch.randn(2, 3, 8, 8, generator=g), torch.tensor([1, 2]))


def not_scalar():
    """The output is the predictions, and no loss_fn makes a loss of them."""
    model, batch, _ = mlp_loss_fn()
    return model, (batch["x"],)


def float_labels():
    """Labels as floats: cross-entropy fails inside the forward."""
    model, batch = hf_style()
    batch["labels"] = batch["labels"].float()
    return model, batch


class SinusoidEmbedding(nn.Module):
    """A diffusion model's timestep embedding and a rotary-style angle table:
    both tables depend on no input (`exp` of an arange, `10000 ** linspace`)
    and reach phases of 1e3 and 1e5 radians (as DiT's and LTX-Video's), so
    one ulp of a table entry moves the gradients by far more than 1e-6."""

    def __init__(self):
        super().__init__()
        self.time = nn.Linear(128, 16)
        self.position = nn.Linear(20, 16)

    def forward(self, t, positions, target):
        half = 64
        frequencies = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        phase = t[:, None] * frequencies[None, :]
        time = self.time(torch.cat([torch.cos(phase), torch.sin(phase)], dim=-1))
        angles = (10000.0 ** torch.linspace(0.0, 1.0, 10)) * positions[:, None]
        position = self.position(torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1))
        return F.mse_loss(time + position, target)


def sinusoid():
    torch.manual_seed(0)
    g = _generator()
    t = torch.tensor([999.0, 731.0, 250.0, 17.0])
    positions = torch.tensor([10.0, 7.0, 3.0, 1.0])
    return SinusoidEmbedding(), (t, positions, torch.randn(4, 16, generator=g))


class FixedBatch(nn.Module):
    """Reshapes with the batch size written in: torch.export cannot keep the
    batch dynamic, so the exporter falls back to the static batch of 4."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).reshape(4, 2, 4).pow(2).mean()


def fixed_batch():
    torch.manual_seed(0)
    return FixedBatch(), (torch.randn(4, 8, generator=_generator()),)


class TokenLM(nn.Module):
    """A language model on token data's two inputs (tokens, targets):
    embedding, causal self-attention, LayerNorm, a head and the cross
    entropy over every position; `view(-1, ...)` makes its sizes B * T."""

    def __init__(self, vocab=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.attn = SelfAttention()
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, vocab)

    def forward(self, tokens, targets):
        hidden = self.embed(tokens)
        hidden = hidden + self.attn(hidden)
        logits = self.head(self.norm(hidden))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def token_lm():
    torch.manual_seed(0)
    g = _generator()
    tokens = torch.randint(0, 32, (4, 8), generator=g)
    return TokenLM(), (tokens, torch.randint(0, 32, (4, 8), generator=g))
