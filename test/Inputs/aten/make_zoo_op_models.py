"""Small joint training graphs of the operators the transformers zoo needs.

Unlike the other generators here, this one runs with torch >= 2.9 (the
project's venv, torch 2.11): each model is exported the way users export,
``torch.export.export(model, args, strict=False)`` then
``torch.export.experimental._export_forward_backward``, so the graphs are
what current torch emits for the patterns Hugging Face models write:

- ``sdpa_math``: ``F.scaled_dot_product_attention``, causal and with an
  additive float mask. torch 2.11 decomposes the forward into its math path
  and hands the backward the attention weights in place of the log-sum-exp.
- ``sdpa_gqa``: causal SDPA with ``enable_gqa`` (4 query heads, 2 key/value
  heads), whose backward takes keys and values with fewer heads.
- ``pad``: ``F.pad`` (``constant_pad_nd``) of activations with positive and
  negative amounts on two dimensions, and of the labels with -100 as Hugging
  Face shifts them for its causal-LM loss.
- ``cumsum``: positions numbered by ``cumsum`` of an int64 and of a bool
  attention mask, then embedded.
- ``index_tensor``: ``x[i, j]`` with broadcast integer index tensors (how Hugging
  Face builds its masks), and a negative index.
- ``bitwise``: ``&``, ``|``, ``^`` and ``~`` of bool masks.
- ``refused_*``: what the importer refuses by name (a floating cumsum,
  integer ``&``, ``x[:, i]``); the archive and graph only.

Usage: ``.venv/bin/python3 test/Inputs/aten/make_zoo_op_models.py
test/Inputs/aten [NAME ...]``. Each model is seeded on its own, so a rerun
with the same torch writes the same numbers. Files per model as in README.md
(pt2, graph.txt, inputs, init, grads, 20-step fp32 AdamW traj and finals).
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch
import torch.export.experimental
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

STEPS = 20
LR = 1e-3
WEIGHT_DECAY = 0.01


class SdpaMath(nn.Module):
    """Two attention layers: causal, then with an additive float mask."""

    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv1 = nn.Linear(d, 3 * d)
        self.qkv2 = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def attend(self, qkv: nn.Linear, x: torch.Tensor, **kw) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, **kw)
        return o.transpose(1, 2).reshape(b, s, d)

    def forward(self, x: torch.Tensor, keep: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = x + self.attend(self.qkv1, x, is_causal=True)
        additive = torch.zeros(keep.shape, dtype=x.dtype).masked_fill(keep.logical_not(), torch.finfo(x.dtype).min)
        h = h + self.attend(self.qkv2, h, attn_mask=additive[:, None, None, :])
        return F.mse_loss(self.out(h), target)


class SdpaGqa(nn.Module):
    """Causal grouped-query attention through SDPA's enable_gqa: 4 query
    heads, 2 key/value heads."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self.q(x).view(b, s, 4, d // 4).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, 2, d // 4).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.mse_loss(self.out(o.transpose(1, 2).reshape(b, s, d)), target)


class Pad(nn.Module):
    def __init__(self, d: int = 8, vocab: int = 12):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)  # [B, S, d]
        # Last dimension: 1 before, 2 cropped after; sequence: 2 before.
        h = F.pad(h, (1, -2, 2, 0), value=0.5)[:, : x.shape[1], :]
        h = F.pad(h, (0, 1))  # back to d
        logits = self.head(torch.tanh(h))
        shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1), ignore_index=-100)


class Cumsum(nn.Module):
    def __init__(self, positions: int = 12, d: int = 8):
        super().__init__()
        self.embed = nn.Embedding(positions, d)
        self.proj = nn.Linear(d, 1)

    def forward(self, mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        counted = mask.cumsum(-1)  # int64
        flags = mask.bool().cumsum(1)  # bool -> int64
        positions = (counted + flags - 2).clamp(min=0) * mask
        return F.mse_loss(self.proj(self.embed(positions)).squeeze(-1), target)


class Index(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.register_buffer("table", torch.linspace(-1.0, 1.0, 5 * d).view(5, d), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        bi = torch.arange(b)[:, None, None]
        qi = torch.arange(s)[None, :, None]
        ki = torch.arange(s)[None, None, :]
        allowed = positions[bi, ki] <= positions[bi, qi]  # [B, S, S]
        h = self.proj(x)
        scores = torch.where(allowed, h @ h.transpose(1, 2), torch.tensor(-1e4))
        rows = self.table[torch.tensor([-1, 0, 2, -3])]  # negative indices count from the end
        out = torch.softmax(scores, -1) @ h + rows.sum(0)
        return F.mse_loss(out, target)


class Bitwise(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        both = a & b
        either = a | ~b
        differ = a ^ b
        out = torch.where(both[..., None], h, 0.0) + torch.where(either[..., None], 2 * h, 0.0)
        out = out + torch.where(~differ[..., None], h * h, 0.0)
        return F.mse_loss(out, target)


class Refused(nn.Module):
    """What the importer refuses by name: a float cumsum, integer bit
    arithmetic. (An index after a full slice, `x[:, i]`, imports since
    advanced indexing flattens the indexed dimensions: advanced-indexing.test.)"""

    def __init__(self, kind: str, d: int = 8):
        super().__init__()
        self.kind = kind
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if self.kind == "cumsum_float":
            h = h.cumsum(-1)
        elif self.kind == "bitwise_int":
            h = h * (ids & (ids + 1))[..., None]
        else:
            raise ValueError(f"no refused model {self.kind!r}")
        return h.square().mean()


def make(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "sdpa_math":
        keep = torch.ones(2, 6, dtype=torch.bool)
        keep[1, 4:] = False
        return SdpaMath(), (torch.randn(2, 6, 16, generator=g), keep, torch.randn(2, 6, 16, generator=g))
    if name == "sdpa_gqa":
        return SdpaGqa(), (torch.randn(2, 6, 16, generator=g), torch.randn(2, 6, 16, generator=g))
    if name == "pad":
        labels = torch.randint(0, 12, (2, 5), generator=g)
        labels[0, 2] = -100
        return Pad(), (torch.randn(2, 5, 8, generator=g), labels)
    if name == "cumsum":
        mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
        return Cumsum(), (mask, torch.randn(2, 6, generator=g))
    if name == "index_tensor":
        positions = torch.tensor([[0, 1, 2, 3, 4], [0, 1, 2, 0, 1]])  # two packed sequences
        return Index(), (torch.randn(2, 5, 8, generator=g), positions, torch.randn(2, 5, 8, generator=g))
    if name == "bitwise":
        a = torch.rand(2, 5, generator=g) < 0.5
        b = torch.rand(2, 5, generator=g) < 0.5
        return Bitwise(), (torch.randn(2, 5, 8, generator=g), a, b, torch.randn(2, 5, 8, generator=g))
    if name.startswith("refused_"):
        ids = torch.randint(0, 5, (2, 5), generator=g)
        return Refused(name.removeprefix("refused_")), (torch.randn(2, 5, 8, generator=g), ids)
    raise KeyError(name)


MODELS = ["sdpa_math", "sdpa_gqa", "pad", "cumsum", "index_tensor", "bitwise"]
# Graphs the importer refuses: the archive and graph.txt only.
REFUSED = ["refused_cumsum_float", "refused_bitwise_int"]


def export_joint(model: nn.Module, args: tuple[torch.Tensor, ...], name: str, out: str) -> list[str]:
    ep = torch.export.export(model, args, strict=False)
    joint = torch.export.experimental._export_forward_backward(ep)
    torch.export.save(joint, os.path.join(out, f"{name}.pt2"))
    with open(os.path.join(out, f"{name}.graph.txt"), "w") as f:
        f.write(str(joint.graph_module.graph))
    return sorted({str(n.target).replace("aten.", "") for n in joint.graph_module.graph.nodes
                   if n.op == "call_function" and str(n.target).startswith("aten.")})


def export(name: str, out: str) -> list[str]:
    model, args = make(name)
    if name in REFUSED:
        ops = export_joint(model, args, name, out)
        print(f"{name}: ops: {', '.join(ops)}")
        return ops
    init = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(init, os.path.join(out, f"{name}.init.safetensors"))
    save_file({f"input.{i}": a.contiguous() for i, a in enumerate(args)}, os.path.join(out, f"{name}.inputs.safetensors"))

    eager = copy.deepcopy(model)
    loss = eager(*args)
    loss.backward()
    grads = {"loss": loss.detach().reshape(1)}
    for k, p in eager.named_parameters():
        grads[f"grad.{k}"] = p.grad.detach().clone().contiguous()
    save_file(grads, os.path.join(out, f"{name}.grads.safetensors"))

    trained = copy.deepcopy(model)
    opt = torch.optim.AdamW(trained.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, foreach=False)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        step_loss = trained(*args)
        step_loss.backward()
        losses.append(float(step_loss.detach()))
        opt.step()
    finals = {f"fp32.{k}": p.detach().clone().contiguous() for k, p in trained.named_parameters()}
    save_file(finals, os.path.join(out, f"{name}.finals.safetensors"))
    with open(os.path.join(out, f"{name}.traj.json"), "w") as f:
        json.dump({"steps": STEPS, "lr": LR, "weight_decay": WEIGHT_DECAY, "betas": [0.9, 0.999], "eps": 1e-8,
                   "torch": torch.__version__, "arms": {"fp32": {"losses": losses}}}, f, indent=1)

    ops = export_joint(model, args, name, out)
    print(f"{name}: loss {float(loss):.6f}, ops: {', '.join(ops)}")
    return ops


def main() -> None:
    out = sys.argv[1]
    names = sys.argv[2:] or MODELS + REFUSED
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 9):
        sys.exit(f"torch {torch.__version__}: this generator needs torch >= 2.9 (the project's venv)")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in names:
        export(name, out)


if __name__ == "__main__":
    main()
