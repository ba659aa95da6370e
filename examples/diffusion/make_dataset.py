"""Makes the diffusion example's tensor datasets from scikit-learn's digits.

    python3 examples/diffusion/make_dataset.py OUT_DIR [--size 16]

scikit-learn ships the UCI optical digits (``sklearn.datasets.load_digits``:
1797 grey 8x8 images, values 0..16, labels 0..9) inside its wheel, so
nothing is downloaded. Each image is upsampled to SIZE x SIZE by
nearest-neighbour repetition (SIZE a multiple of 8: every pixel becomes a
SIZE/8 square; exact, no interpolation) and scaled to [-1, 1] as
``v / 8 - 1``. The first 1600 images (in the package's order) are the
training set, the last 197 the validation set, written as tensor datasets
(docs/data.md): ``OUT_DIR/train.safetensors`` and ``OUT_DIR/val.safetensors``,
each with ``x0`` (float32 [N, 1, SIZE, SIZE]) and ``class_labels`` (int64
[N]), the names of the training step's user inputs (model.py). The output
is a pure function of the package's data and SIZE: the same bytes every run.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

TRAIN_SAMPLES = 1600


def digits(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 digits as (x0 [N, 1, size, size] in [-1, 1], labels [N])."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.asarray(data.images, dtype=np.float32)  # [N, 8, 8], 0..16
    factor = size // 8
    images = images.repeat(factor, axis=1).repeat(factor, axis=2)
    x0 = torch.from_numpy(images / 8.0 - 1.0).unsqueeze(1).contiguous()
    labels = torch.from_numpy(np.asarray(data.target, dtype=np.int64))
    return x0, labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--size", type=int, default=16,
                        help="image side after upsampling, a multiple of 8 (default 16)")
    args = parser.parse_args(argv)
    if args.size < 8 or args.size % 8:
        print(f"make_dataset.py: error: --size {args.size} is not a positive multiple of 8",
              file=sys.stderr)
        return 1
    if not os.path.isdir(args.out_dir):
        print(f"make_dataset.py: error: {args.out_dir} is not a folder", file=sys.stderr)
        return 1
    x0, labels = digits(args.size)
    splits = {"train": slice(0, TRAIN_SAMPLES), "val": slice(TRAIN_SAMPLES, None)}
    for name, rows in splits.items():
        path = os.path.join(args.out_dir, f"{name}.safetensors")
        save_file({"x0": x0[rows].contiguous(), "class_labels": labels[rows].contiguous()},
                  path)
        print(f"wrote {path}: {x0[rows].shape[0]} digits of 1x{args.size}x{args.size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
