#!/usr/bin/env python3
"""Generates the pooling and nearest-upsampling joint graphs of this folder
with torch 1.13 (test/Import/pooling.test and pooling-exact.test).

usage: python3 test/Inputs/aten/make_pooling_models.py [OUT_DIR [NAME ...]]

Two kinds of models, none with a convolution, so that the graphs' only
window operators are the ones under test:

  max_pool, avg_pool, upsample_nearest
      a Linear layer's output viewed as [N, C, H, W], several pooling (or
      upsampling) branches, their flattened results concatenated, a Linear
      layer and an MSE loss: gradients and trajectories of ordinary training.
  pool_probe, pool_probe_bf16, pool_probe_1d_3d, max_pool_special
      `Probe`: the loss is linear in each branch's output, so that torch's
      gradients are the operators' forward and backward values themselves,
      to be compared bit for bit.

Everything is exported by tools/pt2-export/export_joint.py in the
"decomposed" mode: torch 2.11's export keeps max_pool2d_with_indices,
avg_pool2d and upsample_nearest2d whole, and torch 1.13 also keeps the
backward operators that torch 2.11 decomposes (avg_pool2d_backward,
upsample_nearest2d_backward). Everything is seeded, so a rerun with the same
torch writes the same files. The ATen ops of each joint graph are printed.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "pt2-export"))

from export_joint import export_joint  # noqa: E402


class Branches(nn.Module):
    """Linear -> [N, C, H, W] -> each branch -> concatenated -> Linear -> MSE."""

    def __init__(self, features, channels, size, branches, outputs=4):
        super().__init__()
        self.channels, self.size = channels, size
        self.embed = nn.Linear(features, channels * size * size)
        self.branches = nn.ModuleList(branches)
        with torch.no_grad():
            probe = torch.zeros(1, channels, size, size)
            width = sum(branch(probe).numel() for branch in self.branches)
        self.head = nn.Linear(width, outputs)

    def forward(self, x, target):
        maps = self.embed(x).view(x.shape[0], self.channels, self.size, self.size)
        pooled = torch.cat([branch(maps).flatten(1) for branch in self.branches], dim=1)
        return F.mse_loss(self.head(pooled), target)


class Interpolate(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(x, mode="nearest", **self.kwargs)


class UpsampleNearest2d(nn.Module):
    """aten.upsample_nearest2d.default, the overload torch 2.11 records
    (F.interpolate reaches the .vec overload in torch 1.13)."""

    def __init__(self, output_size, scales_h=None, scales_w=None):
        super().__init__()
        self.output_size, self.scales = output_size, (scales_h, scales_w)

    def forward(self, x):
        return torch.ops.aten.upsample_nearest2d.default(x, self.output_size, *self.scales)


def make_max_pool():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    model = Branches(8, 2, 7, [
        nn.MaxPool2d(2),                                  # floor mode drops a row
        nn.MaxPool2d(3, stride=2, padding=1),             # -inf padding
        nn.MaxPool2d(2, stride=2, ceil_mode=True),        # partial last window
        nn.MaxPool2d((2, 3), stride=(1, 2), dilation=(2, 1)),
    ])
    return model, (torch.randn(3, 8, generator=g), torch.randn(3, 4, generator=g))


def make_avg_pool():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    model = Branches(8, 2, 6, [
        nn.AvgPool2d(2),
        nn.AvgPool2d(3, stride=2, padding=1),             # padding counted
        nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
        nn.AvgPool2d(3, stride=2, ceil_mode=True),        # partial last window
        nn.AvgPool2d((2, 3), stride=1, divisor_override=5),
        nn.AdaptiveAvgPool2d(2),                          # kernel = stride = 3
        nn.AdaptiveAvgPool2d((3, 1)),
    ])
    return model, (torch.randn(3, 8, generator=g), torch.randn(3, 4, generator=g))


def make_upsample():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    model = Branches(8, 2, 3, [
        Interpolate(scale_factor=2),                      # views + expand
        Interpolate(scale_factor=(3, 1)),
        Interpolate(size=(5, 4)),                         # src = floor(dst * in / out)
        Interpolate(scale_factor=1.5),                    # src = floor(dst / 1.5)
    ])
    return model, (torch.randn(3, 8, generator=g), torch.randn(3, 4, generator=g))


class Probe(nn.Module):
    """loss = sum_b sum(branch_b(x_i * scale_i) * weight_b), branch b reading
    input i: the gradient of weight_b is branch_b's output and that of
    scale_i (all ones) is x_i times the backward of its branches, so that
    torch's gradients show each operator's values exactly. Ties in x (small
    multiples of 0.37) exercise max pooling's rule (the first maximum in
    window order wins), and the averages round."""

    def __init__(self, shapes, branches):
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.ones(shape)) for shape in shapes])
        self.inputs = [i for i, _ in branches]
        self.branches = nn.ModuleList([branch for _, branch in branches])
        with torch.no_grad():
            self.weights = nn.ParameterList(
                [nn.Parameter(torch.randn(branch(torch.zeros(shapes[i])).shape))
                 for i, branch in branches])

    def forward(self, *xs):
        ys = [x * scale for x, scale in zip(xs, self.scales)]
        total = None
        for i, branch, weight in zip(self.inputs, self.branches, self.weights):
            out = branch(ys[i]) * weight
            term = out.sum(dim=list(range(out.dim())))
            total = term if total is None else total + term
        return total


def make_probe(shapes, branches, dtype=torch.float32):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    model = Probe(shapes, branches).to(dtype)
    xs = tuple((torch.randint(-4, 5, shape, generator=g) * 0.37).to(dtype) for shape in shapes)
    return model, xs


def make_probe_2d(dtype=torch.float32):
    return make_probe([(2, 2, 6, 7)], [
        (0, nn.MaxPool2d(3, stride=1, padding=1)),
        (0, nn.MaxPool2d(2, stride=2, ceil_mode=True)),
        (0, nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)),
        (0, nn.AvgPool2d(3, stride=2, ceil_mode=True)),
        (0, nn.AdaptiveAvgPool2d((2, 1))),
        (0, Interpolate(scale_factor=2)),
        (0, Interpolate(size=(4, 10))),
        (0, UpsampleNearest2d([12, 14], 2.0, 2.0)),
        (0, UpsampleNearest2d([9, 10])),
        (0, UpsampleNearest2d([8, 7], 1.5, None)),     # the scale, not 8 / 6
    ], dtype)


def make_probe_1d_3d():
    """1-D pooling reaches the graph as 2-D (upsampling as 1-D), 3-D as 3-D."""
    return make_probe([(2, 3, 9), (2, 2, 4, 5, 6)], [
        (0, nn.MaxPool1d(3, stride=2, padding=1)),
        (0, nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False)),
        (0, nn.AdaptiveAvgPool1d(3)),
        (0, Interpolate(scale_factor=2)),
        (0, Interpolate(size=7)),
        (1, nn.MaxPool3d((2, 3, 2), stride=(1, 2, 2), padding=(0, 1, 1))),
        (1, nn.AvgPool3d(2, ceil_mode=True)),
        (1, nn.AvgPool3d(3, stride=2, padding=1, count_include_pad=False)),
        (1, nn.AdaptiveAvgPool3d((2, 1, 3))),
        (1, Interpolate(scale_factor=(2, 1, 2))),
        (1, Interpolate(size=(5, 7, 4))),
    ])


def make_max_pool_special():
    """Max pooling of ties, NaN (one and two in a window: the last NaN's
    position wins) and windows of -inf alone (the first position inside the
    input wins). The NaNs are in `scale`, so that the gradient of `scale`
    (x times the backward) shows which position each window chose; the
    loss is NaN."""
    model, (x,) = make_probe([(2, 1, 5, 6)], [
        (0, nn.MaxPool2d(2)),
        (0, nn.MaxPool2d(3, stride=1, padding=1)),
        (0, nn.MaxPool2d(2, stride=2, padding=1, dilation=2, ceil_mode=True)),
    ])
    nan, inf = float("nan"), float("inf")
    with torch.no_grad():
        scale = model.scales[0]
        scale[0, 0, 0, 0] = nan
        scale[0, 0, 0, 4] = scale[0, 0, 1, 5] = nan
    x[1, 0, 0:2, 0:2] = -inf
    x[1, 0, 3:5, 0:3] = -inf
    return model, (x,)


MODELS = {
    "max_pool": make_max_pool,
    "avg_pool": make_avg_pool,
    "upsample_nearest": make_upsample,
    "pool_probe": make_probe_2d,
    "pool_probe_bf16": lambda: make_probe_2d(torch.bfloat16),
    "pool_probe_1d_3d": make_probe_1d_3d,
    "max_pool_special": make_max_pool_special,
}


# Files not kept: the trajectories of the bf16 probe (torch's bf16 AdamW,
# which the tests do not compare with) and of the NaN model.
DROPPED = {
    "pool_probe_bf16": ("traj.json", "finals.safetensors"),
    "max_pool_special": ("traj.json", "finals.safetensors"),
}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else HERE
    names = sys.argv[2:] or list(MODELS)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in names:
        factory = MODELS[name]
        model, inputs = factory()
        count = sum(p.numel() for p in model.parameters())
        result = export_joint(model, inputs, out_dir, name, mode="decomposed",
                              make_model=lambda factory=factory: factory()[0],
                              arms=("fp32",))
        for suffix in DROPPED.get(name, ()):
            os.remove(os.path.join(out_dir, f"{name}.{suffix}"))
        print(f"{name} ({count} parameters, graph vs eager torch: "
              f"{result['self_check_error']:.1e})")
        for op in result["ops"]:
            print(f"  {op}")


if __name__ == "__main__":
    main()
