#!/usr/bin/env python3
"""Small joint training graphs of the operators the diffusers zoo needs,
exported by torch 2.x itself.

Unlike the other scripts of this folder (torch 1.13, make_fx), these graphs
are what a user's torch makes: ``torch.export.export(model, args,
strict=False)``, then ``torch.export.experimental._export_forward_backward``,
saved with ``torch.export.save``. Each model isolates one form that the
diffusers models of python/mantissa/zoo/diffusers_models.py put in their
graphs, with torch's own numbers beside it (the files of README.md's table:
``M.pt2``, ``M.graph.txt``, ``M.inputs.safetensors`` as ``input.0, ...``,
``M.init.safetensors``, ``M.grads.safetensors`` with ``loss`` and
``grad.<fqn>``, ``M.traj.json`` and ``M.finals.safetensors``: 20 steps of
AdamW, lr 1e-3, weight decay 0.01, ``foreach=False``, arm ``fp32``).

Regenerate with the venv's torch (python/requirements.lock: torch 2.11), all
of it or named models:

    .venv/bin/python3 test/Inputs/aten/make_diffusers_op_models.py test/Inputs/aten [NAME ...]

Everything is seeded and runs on one thread. A rerun with the same torch
writes identical safetensors, graph.txt and traj.json files. In the .pt2
archives only torch's serialization id and the nodes' stack-trace metadata
change (fx's `<eval_with_key>.N` counters).

Models:

- ``sdpa_joint``: ``F.scaled_dot_product_attention`` without and with
  ``is_causal`` and a boolean mask. torch 2.11 decomposes the forward into
  ``_scaled_dot_product_attention_math`` (bmm, _softmax, the safe-softmax
  where) but keeps ``_scaled_dot_product_flash_attention_for_cpu_backward``,
  and hands it the math path's probabilities ``[B, H, L, S]`` where the
  kernel's log-sum-exp ``[B, H, L]`` belongs (torch's own run of that joint
  graph computes wrong gradients; eager torch's are the reference here).
- ``upsample_index``: ``F.interpolate(mode="nearest")``, which torch 2.11
  decomposes into ``aten.index.Tensor`` with ``[None, None, rows[:, None],
  cols]`` and, backwards, ``index_put`` with ``accumulate=True``; and
  ``y[:, :, rows[:, None], cols]`` with negative indices.
- ``index_apart``: ``table[rows[:, None], :, cols]``, index tensors on
  dimensions apart (torch moves their broadcast dimensions to the front),
  with negative indices, and its backward.
- ``repeat_tile``: ``Tensor.repeat`` with a leading repeat beyond the
  tensor's rank (LTX-Video's position grid), and its backward.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable

import torch
import torch.export.experimental  # noqa: F401  (registers torch.export.experimental)
import torch.nn.functional as F
from safetensors.torch import save_file

STEPS = 20
LR = 1e-3
WEIGHT_DECAY = 0.01


class SdpaJoint(torch.nn.Module):
    """Two attention layers over [B, S, D]: causal, then with a key mask."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv1 = torch.nn.Linear(dim, 3 * dim)
        self.qkv2 = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def attend(self, qkv: torch.nn.Linear, x: torch.Tensor, **kw) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, **kw)
        return y.transpose(1, 2).reshape(b, s, d)

    def forward(self, x: torch.Tensor, keep: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = x + self.attend(self.qkv1, x, is_causal=True)
        h = h + self.attend(self.qkv2, h, attn_mask=keep[:, None, None, :])
        return F.mse_loss(self.out(h), target)


def sdpa_joint() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    model = SdpaJoint()
    x = torch.randn(2, 6, 16)
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    return model, (x, keep, torch.randn(2, 6, 16))


class UpsampleIndex(torch.nn.Module):
    """Nearest upsampling (UNet2DModel's Upsample2D) and a gather of rows and
    columns with negative indices, both advanced indexing in torch 2.x."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Conv2d(4, 2, 1)
        self.register_buffer("rows", torch.tensor([0, -1, 2, -3, 1]), persistent=False)
        self.register_buffer("cols", torch.tensor([-2, 0, 5, 1]), persistent=False)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        up = F.interpolate(self.conv(x), scale_factor=2, mode="nearest")
        picked = self.head(up)[:, :, self.rows[:, None], self.cols]
        return F.mse_loss(picked, target)


def upsample_index() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return UpsampleIndex(), (torch.randn(2, 3, 4, 4), torch.randn(2, 2, 5, 4))


class IndexApart(torch.nn.Module):
    """Index tensors on dimensions 0 and 2 with a full slice between: torch
    puts the broadcast index dimensions first (``[2, 3, 3]`` from a
    ``[4, 3, 5, 6]`` table)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(4, 3, 5, 6))

    def forward(self, rows: torch.Tensor, cols: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        picked = self.table[rows[:, None], :, cols]
        return F.mse_loss(torch.tanh(picked), target)


def index_apart() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    rows = torch.tensor([0, -1])
    cols = torch.tensor([4, 1, -2])
    return IndexApart(), (rows, cols, torch.randn(2, 3, 3, 6))


class RepeatTile(torch.nn.Module):
    """``Tensor.repeat`` with more repeats than dimensions, as LTX-Video
    tiles its position grid over the batch, here on a trained value so that
    torch's backward of it (a sum over the tiles) is in the graph too."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        tiled = self.proj(x).repeat(2, 1, 3)
        return F.mse_loss(torch.tanh(tiled), target)


def repeat_tile() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return RepeatTile(), (torch.randn(5, 4), torch.randn(2, 5, 9))


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]] = {
    "sdpa_joint": sdpa_joint,
    "upsample_index": upsample_index,
    "repeat_tile": repeat_tile,
    "index_apart": index_apart,
}


def seeded(name: str):
    torch.manual_seed(0)
    return MODELS[name]()


def export(name: str, out: str) -> None:
    model, args = seeded(name)
    init = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    ep = torch.export.export(model, args, strict=False)
    joint = torch.export.experimental._export_forward_backward(ep)
    path = lambda suffix: os.path.join(out, f"{name}.{suffix}")  # noqa: E731
    with open(path("graph.txt"), "w") as f:
        f.write(str(joint.graph_module.graph))
    torch.export.save(joint, path("pt2"))
    save_file({f"input.{i}": a.contiguous() for i, a in enumerate(args)}, path("inputs.safetensors"))
    save_file(init, path("init.safetensors"))

    model, args = seeded(name)
    loss = model(*args)
    loss.backward()
    grads = {"loss": loss.detach().reshape(1)}
    grads.update({f"grad.{k}": p.grad.detach().clone() for k, p in model.named_parameters()})
    save_file(grads, path("grads.safetensors"))

    model, args = seeded(name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, foreach=False)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = model(*args)
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    save_file({f"fp32.{k}": p.detach().clone() for k, p in model.named_parameters()}, path("finals.safetensors"))
    with open(path("traj.json"), "w") as f:
        json.dump({"steps": STEPS, "lr": LR, "weight_decay": WEIGHT_DECAY, "betas": [0.9, 0.999],
                   "eps": 1e-8, "arms": {"fp32": {"losses": losses}}}, f, indent=1)
    ops = sorted({str(n.target) for n in joint.graph_module.graph.nodes if n.op == "call_function"})
    print(f"{name}: torch {torch.__version__}, loss {losses[0]:.6f} -> {losses[-1]:.6f}, {len(ops)} ops")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out, names = sys.argv[1], sys.argv[2:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit(f"unknown model {name!r}; models: {', '.join(MODELS)}")
        export(name, out)


if __name__ == "__main__":
    main()
