#!/usr/bin/env python3
"""Generates the model of test/Import/scalar-operands.test with torch 1.13
(tools/pt2-export/export_joint.py): torch's own graph of the binary and
ternary operators that take a Python number or a zero-dimensional tensor in
a tensor position, and torch's numbers for it.

usage: make_scalar_models.py OUT_DIR

  scalar_operands  lerp (number and tensor weights, both sides of 0.5),
                   addcmul / addcdiv with a value, clamp with tensor bounds,
                   clamp_min / clamp_max, where with numbers, masked_fill
                   with a 0-d tensor, rsub, pow with a number base, a
                   number on the left of sub / mul / div
                   (raw make_fx graph, so the operators stay whole).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "tools", "pt2-export"))
from export_joint import export_joint  # noqa: E402

aten = torch.ops.aten


class ScalarOperands(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 6)
        self.b = torch.nn.Linear(6, 6)

    def forward(self, x, y):
        a, b = self.a(x), self.b(x)
        h = torch.lerp(a, b, 0.3) + torch.lerp(a, b, 0.8)
        h = h + torch.lerp(a, b, torch.sigmoid(b))
        h = torch.addcmul(h, a, b, value=0.5) + torch.addcdiv(h, a, b.abs() + 1.0, value=-2.0)
        h = torch.clamp(h, min=a.detach() - 1.0, max=b.detach() + 1.0)
        h = torch.clamp_min(h, -3.0) + torch.clamp_max(h, 2.5)
        h = torch.where(a > 0, h, 0.25) + torch.where(b > 0, -0.5, h)
        h = h.masked_fill(b < -1.0, torch.tensor(0.75))
        h = aten.rsub.Scalar(h, 2.0) + aten.sub.Tensor(1.5, h) + aten.mul.Tensor(0.1, h)
        h = h + aten.div.Tensor(0.3, h.abs() + 1.0) + aten.pow.Scalar(1.1, torch.tanh(h))
        h = h * (h > 0.2).float()
        return ((h - y) ** 2).mean()


def main():
    out_dir = sys.argv[1]
    torch.manual_seed(0)
    summary = export_joint(ScalarOperands(), (torch.randn(4, 6), torch.randn(4, 6)),
                           out_dir, "scalar_operands", mode="raw", steps=20)
    print("scalar_operands", summary["self_check_error"], " ".join(summary["ops"]))


if __name__ == "__main__":
    main()
