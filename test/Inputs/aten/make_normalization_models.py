#!/usr/bin/env python3
"""Generates the group and batch norm training graphs of this folder with torch 1.13.

usage: /usr/bin/python3 test/Inputs/aten/make_normalization_models.py [OUT_DIR] [NAME ...]

Each model is exported by tools/pt2-export/export_joint.py ("raw": the
backward ops native_group_norm_backward and native_batch_norm_backward
whole; "decomposed": torch's core-ATen decompositions of them, as torch
2.11's export applies them), with torch's own reference numbers beside it
(NAME.grads, NAME.traj.json, NAME.finals). test/Import/normalization.test
uses them; torch is not needed there. Everything is seeded, so a rerun with
the same torch writes the same files.

Batch norm reaches the graph in the spellings torch 1.13 has: training with
running statistics as `_native_batch_norm_legit_functional` (the exporter's
stand-in for torch >= 2.0's op), training without running statistics and
evaluation as `native_batch_norm`. torch >= 2.0 spells the last two
`_native_batch_norm_legit.no_stats` and `_native_batch_norm_legit_no_training`
(or `_native_batch_norm_legit` with training=False), which compute what
1.13's native_batch_norm computes for the same arguments. The `_legit`
models are the raw batch norm model with its nodes renamed to those
spellings (`respell_batch_norm`); they share the raw model's inputs and
reference numbers.
"""

import io
import json
import os
import sys
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "pt2-export"))

from export_joint import export_joint  # noqa: E402


def squared_error(prediction, target):
    """mse_loss spelled out, so that the raw graphs have no mse_loss ops."""
    return (prediction - target).pow(2).mean()

#===----------------------------------------------------------------------===#
# group_norm: GroupNorm without convolutions
#===----------------------------------------------------------------------===#


class GroupNormMLP(nn.Module):
    """GroupNorm with affine parameters on [N, C, L] data, then one without
    them on the same values viewed as [N, C, H, W]; Linear layers mix the
    trailing dimension and make the prediction."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(6, 6)
        self.norm1 = nn.GroupNorm(4, 8)
        self.norm2 = nn.GroupNorm(2, 8, affine=False, eps=1e-3)
        self.head = nn.Linear(48, 3)
        with torch.no_grad():  # gains and shifts away from 1 and 0
            self.norm1.weight.uniform_(0.5, 1.5)
            self.norm1.bias.uniform_(-0.5, 0.5)

    def forward(self, x, target):
        n = x.shape[0]
        h = F.silu(self.norm1(self.mix(x)))
        h = self.norm2(h.view(n, 8, 2, 3))
        return squared_error(self.head(h.flatten(1)), target)

#===----------------------------------------------------------------------===#
# batch_norm: every kind of training-graph batch norm
#===----------------------------------------------------------------------===#


class BatchNormNet(nn.Module):
    """BatchNorm1d on [N, C] and BatchNorm2d on [N, C, H, W] in training mode
    with running statistics; a BatchNorm2d without running statistics or
    affine parameters; and two frozen batch norms (F.batch_norm in
    evaluation mode on fixed statistics, one with affine parameters on
    [N, C], one without on [N, C, H, W]).

    The loss also reads the running statistics of the training-mode norms
    (before they update, through `stat_probe`), so that a trajectory checks
    their updates: step k's loss depends on the statistics after step k-1."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8, bias=False)  # batch norm would cancel a bias
        self.bn1 = nn.BatchNorm1d(8)
        self.bn2 = nn.BatchNorm2d(2, momentum=0.3, eps=1e-3)
        self.bn3 = nn.BatchNorm2d(2, affine=False, track_running_stats=False)
        self.frozen_weight = nn.Parameter(torch.empty(8).uniform_(0.5, 1.5))
        self.frozen_bias = nn.Parameter(torch.empty(8).uniform_(-0.5, 0.5))
        self.register_buffer("frozen_mean", torch.randn(8) * 0.3)
        self.register_buffer("frozen_var", torch.rand(8) + 0.5)
        self.register_buffer("frozen2_mean", torch.randn(2) * 0.3)
        self.register_buffer("frozen2_var", torch.rand(2) + 0.5)
        self.stat_probe = nn.Parameter(torch.full((20,), 0.1))
        self.head = nn.Linear(8, 3)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x, target):
        n = x.shape[0]
        stats = torch.cat([self.bn1.running_mean, self.bn1.running_var,
                           self.bn2.running_mean, self.bn2.running_var])
        probe = (self.stat_probe * stats).sum()
        h = F.relu(self.bn1(self.fc(x)))
        h = self.bn2(h.view(n, 2, 2, 2))
        h = self.bn3(F.silu(h))
        h = F.batch_norm(h, self.frozen2_mean, self.frozen2_var, training=False,
                         eps=1e-4)
        h = F.batch_norm(h.view(n, 8), self.frozen_mean, self.frozen_var,
                         self.frozen_weight, self.frozen_bias, training=False)
        return squared_error(self.head(h), target) + probe

#===----------------------------------------------------------------------===#
# torch >= 2.0 spellings
#===----------------------------------------------------------------------===#

NATIVE_BATCH_NORM = "torch.ops.aten.native_batch_norm.default"


def _respelled(node, evaluation_spellings):
    """The node with native_batch_norm renamed as torch >= 2.0 would emit it."""
    inputs = {entry["name"]: entry for entry in node["inputs"]}
    no_stats = inputs["running_mean"]["arg"].get("as_none", False)
    training = inputs["training"]["arg"]["as_bool"]
    if no_stats:
        assert training, "evaluation needs running statistics"
        node["target"] = "torch.ops.aten._native_batch_norm_legit.no_stats"
        drop = {"running_mean", "running_var"}
    else:
        assert not training, "training with running statistics is already functional"
        node["target"] = evaluation_spellings.pop(0)
        drop = {"training"} if "no_training" in node["target"] else set()
    node["inputs"] = [entry for entry in node["inputs"] if entry["name"] not in drop]


def respell_batch_norm(source, destination, name):
    """Copies the archive `source` as `destination` (archive folder `name`)
    with every native_batch_norm node renamed: without running statistics to
    `_native_batch_norm_legit.no_stats`; in evaluation mode, the first to
    `_native_batch_norm_legit_no_training` and the second to
    `_native_batch_norm_legit` (training=False)."""
    evaluation_spellings = [
        "torch.ops.aten._native_batch_norm_legit_no_training.default",
        "torch.ops.aten._native_batch_norm_legit.default"]
    with zipfile.ZipFile(source) as archive:
        entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_STORED) as out:
        for filename, data in entries:
            filename = name + filename[filename.index("/"):]
            if filename.endswith("models/model.json"):
                model = json.loads(data)
                for node in model["graph_module"]["graph"]["nodes"]:
                    if node["target"] == NATIVE_BATCH_NORM:
                        _respelled(node, evaluation_spellings)
                assert not evaluation_spellings, "the model has two frozen batch norms"
                data = json.dumps(model, separators=(",", ":")).encode()
            info = zipfile.ZipInfo(filename, date_time=(1980, 1, 1, 0, 0, 0))
            out.writestr(info, data)

#===----------------------------------------------------------------------===#
# The table
#===----------------------------------------------------------------------===#


def make_group_norm():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return GroupNormMLP(), (torch.randn(4, 8, 6, generator=g),
                            torch.randn(4, 3, generator=g))


def make_batch_norm():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return BatchNormNet(), (torch.randn(6, 4, generator=g) * 2 + 0.5,
                            torch.randn(6, 3, generator=g))


def in_bf16(factory):
    """The model and its inputs in bf16 (torch's bf16 CPU kernels)."""
    def make():
        model, inputs = factory()
        return model.to(torch.bfloat16), tuple(x.to(torch.bfloat16) for x in inputs)
    return make


# name -> (factory, mode), or (source name, None) for a respelled copy.
MODELS = {
    "group_norm": (make_group_norm, "raw"),
    "group_norm_decomposed": (make_group_norm, "decomposed"),
    "group_norm_bf16": (in_bf16(make_group_norm), "raw"),
    "batch_norm": (make_batch_norm, "raw"),
    "batch_norm_decomposed": (make_batch_norm, "decomposed"),
    "batch_norm_bf16": (in_bf16(make_batch_norm), "raw"),
    "batch_norm_legit": ("batch_norm", None),
}

# The bf16 models only have torch's loss and gradients (NAME.grads): their
# graph's own values differ from eager torch's by up to a few bf16 ulps
# (make_fx's trace reduces some gradients in another order), so the
# exporter's self-check gets a bf16 tolerance, and no trajectory is kept.
BF16_CHECK_TOLERANCE = 0.05


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else HERE
    names = sys.argv[2:] or list(MODELS)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in names:
        factory, mode = MODELS[name]
        if mode is None:
            respell_batch_norm(os.path.join(out_dir, f"{factory}.pt2"),
                               os.path.join(out_dir, f"{name}.pt2"), name)
            print(f"{name}: {factory}.pt2 with torch >= 2.0's batch norm spellings")
            continue
        bf16 = name.endswith("_bf16")
        model, inputs = factory()
        result = export_joint(model, inputs, out_dir, name, mode=mode,
                              make_model=lambda factory=factory: factory()[0],
                              check_tolerance=BF16_CHECK_TOLERANCE if bf16 else 1e-4)
        if bf16:
            for suffix in ("traj.json", "finals.safetensors"):
                os.remove(os.path.join(out_dir, f"{name}.{suffix}"))
        print(f"{name} ({mode}, graph vs eager torch: {result['self_check_error']:.1e}, "
              f"mutated buffers: {', '.join(result['mutated_buffers']) or 'none'})")
        for op in result["ops"]:
            print(f"  {op}")


if __name__ == "__main__":
    main()
