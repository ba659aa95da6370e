#!/usr/bin/env python3
"""Generates the convolution test models of test/Import/convolution.test with
torch 1.13 (tools/pt2-export/export_joint.py): torch's own joint graphs of
1-D, 2-D and 3-D convolutions and torch's numbers for them.

usage: make_convolution_models.py OUT_DIR

  convolutions       fp32: a 2-D convolution with bias, stride 2, padding 1
                     and 2 groups, a bias-free 1x1 one, a 1-D convolution with
                     dilation 2 and padding 2, and a 3-D patch embedding
                     (kernel = stride = 2), feeding one Linear and a squared-error loss.
  convolutions_bf16  the same model and batch cast to bf16 (no trajectory:
                     the bf16 test compares compiled code with the
                     interpreter).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "tools", "pt2-export"))
from export_joint import export_joint  # noqa: E402


class Convolutions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv2d = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
        self.pointwise = torch.nn.Conv2d(6, 4, 1, bias=False)
        self.conv1d = torch.nn.Conv1d(3, 4, 3, dilation=2, padding=2)
        self.patch3d = torch.nn.Conv3d(2, 4, kernel_size=2, stride=2)
        self.head = torch.nn.Linear(4 * 3 * 3 + 4 * 12 + 4 * 2 * 2 * 2, 5)

    def forward(self, x2, x1, x3, y):
        a = self.pointwise(torch.relu(self.conv2d(x2))).flatten(1)
        b = torch.nn.functional.silu(self.conv1d(x1)).flatten(1)
        c = self.patch3d(x3).flatten(1)
        out = self.head(torch.cat([a, b, c], dim=1))
        return (out - y).pow(2).mean()


def main():
    out_dir = sys.argv[1]
    torch.manual_seed(0)
    model = Convolutions()
    inputs = (torch.randn(2, 4, 5, 5), torch.randn(2, 3, 12),
              torch.randn(2, 2, 4, 4, 4), torch.randn(2, 5))
    summary = export_joint(model, inputs, out_dir, "convolutions",
                           mode="decomposed", steps=20)
    print("convolutions", summary["self_check_error"], " ".join(summary["ops"]))
    bf16 = Convolutions()
    bf16.load_state_dict(model.state_dict())
    bf16 = bf16.to(torch.bfloat16)
    summary = export_joint(bf16, tuple(x.to(torch.bfloat16) for x in inputs),
                           out_dir, "convolutions_bf16", mode="decomposed",
                           steps=1, check_tolerance=1e-2)
    print("convolutions_bf16", summary["self_check_error"])


if __name__ == "__main__":
    main()
