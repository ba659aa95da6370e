"""Samples digits from the trained diffusion example with Mantissa's
forward-only step, and draws them as a grid.

    python3 examples/diffusion/sample.py DENOISER.pt2 WEIGHTS.safetensors OUT.png
        [--config example|tiny] [--steps K] [--per-class N] [--guidance G]
        [--seed S] [--mantissa-run PATH] [--eager-check [--max-difference TOL]]

An Euler sampler of the rectified flow that model.py trains: x_1 is
Gaussian noise from ``torch.Generator().manual_seed(S)``, and K steps of
dt = 1/K go from t = 1 to t = 0 by ``x_{t-dt} = x_t - dt v(x_t, t)``. With
guidance G != 1 (classifier-free guidance; DiT learned the null class 10
from its class dropout), ``v = v_null + G (v_class - v_null)``, both
evaluated in one batch.

Each velocity is one run of the denoiser's forward-only step
(model.py:denoiser, exported with ``outputs_fn`` = {"velocity": v}) with
the training run's final parameters as its weights:
``mantissa-run DENOISER.pt2 --steps 0 --weights WEIGHTS --inputs X
--outputs V --micro-batch B``, where X holds ``x_t``, ``t``,
``class_labels`` and a zero ``target``. The grid has a row per class
(0..9) and N columns, each image upscaled 4x. ``--eager-check`` also runs
the same sampler with torch eager on the same weights (model.py's
Denoiser) and prints the largest difference between the two final
sample sets.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as example  # noqa: E402


def grid_png(samples: torch.Tensor, rows: int, path: str, scale: int = 4) -> None:
    """Samples [rows * cols, 1, S, S] in [-1, 1] as a grey PNG grid."""
    from PIL import Image

    count, _, side, _ = samples.shape
    cols = count // rows
    pad = 2
    cell = side * scale + pad
    pixels = ((samples.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    pixels = pixels.repeat_interleave(scale, 2).repeat_interleave(scale, 3)
    canvas = torch.full((rows * cell + pad, cols * cell + pad), 64, dtype=torch.uint8)
    for i in range(count):
        r, c = divmod(i, cols)
        y, x = pad + r * cell, pad + c * cell
        canvas[y:y + side * scale, x:x + side * scale] = pixels[i, 0]
    Image.fromarray(canvas.numpy(), mode="L").save(path)


class MantissaVelocity:
    """v(x_t, t, labels) from mantissa-run's forward-only step."""

    def __init__(self, run: str, denoiser: str, weights: str, work: str) -> None:
        self.run, self.denoiser, self.weights, self.work = run, denoiser, weights, work

    def __call__(self, x_t: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        inputs = os.path.join(self.work, "inputs.safetensors")
        outputs = os.path.join(self.work, "outputs.safetensors")
        save_file({"x_t": x_t.contiguous(), "t": t.contiguous(),
                   "class_labels": labels.contiguous(),
                   "target": torch.zeros_like(x_t)}, inputs)
        command = [self.run, self.denoiser, "--steps", "0", "--weights", self.weights,
                   "--inputs", inputs, "--outputs", outputs,
                   "--micro-batch", str(x_t.shape[0]), "--no-memory-report"]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if done.returncode != 0:
            sys.exit(f"sample.py: {' '.join(command)} failed ({done.returncode}):\n"
                     f"{done.stdout}")
        return load_file(outputs)["velocity"]


class EagerVelocity:
    """v(x_t, t, labels) from torch eager on the same weights."""

    def __init__(self, config: str, weights: str) -> None:
        self.model = example.Denoiser(example.make_dit(config)).eval()
        missing, unexpected = self.model.load_state_dict(load_file(weights), strict=False)
        if missing or unexpected:
            sys.exit(f"sample.py: {weights} does not fit the {config} denoiser: "
                     f"missing {missing}, unexpected {unexpected}")

    @torch.no_grad()
    def __call__(self, x_t: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(x_t, t, labels)


def sample(velocity, side: int, per_class: int, steps: int, guidance: float,
           seed: int) -> torch.Tensor:
    """Euler from t = 1 to 0; the samples of class c are rows c * per_class..."""
    labels = torch.arange(example.NUM_CLASSES).repeat_interleave(per_class)
    count = labels.shape[0]
    x = torch.randn(count, 1, side, side, generator=torch.Generator().manual_seed(seed))
    guided = guidance != 1.0
    if guided:
        labels = torch.cat([labels, torch.full((count,), example.NULL_CLASS)])
    dt = 1.0 / steps
    for k in range(steps):
        t = torch.full((labels.shape[0],), 1.0 - k * dt)
        v = velocity(torch.cat([x, x]) if guided else x, t, labels)
        if guided:
            v = v[count:] + guidance * (v[:count] - v[count:])
        x = x - dt * v
    return x


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("denoiser", metavar="DENOISER.pt2")
    parser.add_argument("weights", metavar="WEIGHTS.safetensors")
    parser.add_argument("out", metavar="OUT.png")
    parser.add_argument("--config", choices=sorted(example.CONFIGS), default="example")
    parser.add_argument("--steps", type=int, default=20, help="Euler steps (default 20)")
    parser.add_argument("--per-class", type=int, default=8, help="samples per class (default 8)")
    parser.add_argument("--guidance", type=float, default=2.0,
                        help="classifier-free guidance scale; 1 is none (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the starting noise")
    parser.add_argument("--mantissa-run", default="mantissa-run", metavar="PATH")
    parser.add_argument("--eager-check", action="store_true",
                        help="also sample with torch eager and print the largest difference")
    parser.add_argument("--max-difference", type=float, metavar="TOL",
                        help="with --eager-check: fail (exit 1) when the largest difference "
                             "exceeds TOL")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.per_class < 1:
        parser.error("--steps and --per-class must be at least 1")
    side = example.CONFIGS[args.config]["sample_size"]
    with tempfile.TemporaryDirectory() as work:
        velocity = MantissaVelocity(args.mantissa_run, args.denoiser, args.weights, work)
        samples = sample(velocity, side, args.per_class, args.steps, args.guidance, args.seed)
    grid_png(samples, example.NUM_CLASSES, args.out)
    print(f"wrote {args.out}: {example.NUM_CLASSES} classes x {args.per_class} samples, "
          f"{args.steps} Euler steps, guidance {args.guidance:g}")
    if args.eager_check:
        eager = sample(EagerVelocity(args.config, args.weights), side, args.per_class,
                       args.steps, args.guidance, args.seed)
        difference = (samples - eager).abs().max().item()
        print(f"largest difference from torch eager: {difference:.3g}")
        if args.max_difference is not None and not difference <= args.max_difference:
            print(f"sample.py: error: the difference {difference:.3g} exceeds "
                  f"--max-difference {args.max_difference:g}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
