#!/usr/bin/env python3
"""torch's own numbers for a corpus model whose batch has targets that its
cross-entropy ignores (ignore_index, -100: padding).
usage: ignored_targets_reference.py OUT_DIR NAME [--steps N]
Loads the corpus model NAME (test/Inputs/corpus/export_corpus.py) with its
initial weights and batch, sets the targets of the last quarter of the last
sequence and of two positions of the first to -100, and writes into OUT_DIR
NAME.ignore.inputs.safetensors (the batch), NAME.ignore.grads.safetensors
(the loss and gradients at the initial weights) and NAME.ignore.traj.json
(an fp32 AdamW trajectory, as test/Inputs/check_trajectory.py reads it),
computed eagerly by torch (Debian's 1.13 on one CPU thread,
deterministically: a rerun writes identical bytes). The corpus' graphs are
torch 2.11 exports, whose cross-entropy keeps ignore_index (torch 1.13's
make_fx graphs of test/Inputs/aten drop it), so Mantissa runs NAME.pt2 on
this batch.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autocast_reference import corpus_model  # noqa: E402
from corpus_models import corpus_definitions  # noqa: E402
from export_joint import reference_numbers, save_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("name")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model, init, inputs = corpus_model(args.name)
    tokens, targets = inputs
    targets = targets.clone()
    positions = targets.shape[-1]
    targets[-1, positions - positions // 4:] = -100
    targets[0, 1] = -100
    targets[0, positions // 2] = -100
    inputs = [tokens, targets]
    make = corpus_definitions()["make"]
    grads, traj, _ = reference_numbers(lambda: make(args.name)[0], inputs, None, (), init,
                                       args.steps, 1e-3, ("fp32",))
    os.makedirs(args.out_dir, exist_ok=True)
    prefix = os.path.join(args.out_dir, f"{args.name}.ignore")
    save_safetensors({f"input.{i}": x.contiguous() for i, x in enumerate(inputs)},
                     f"{prefix}.inputs.safetensors")
    save_safetensors(grads, f"{prefix}.grads.safetensors")
    with open(f"{prefix}.traj.json", "w") as out:
        json.dump(traj, out, indent=1)
        out.write("\n")
    ignored = int((targets == -100).sum())
    print(f"{args.name}: {ignored} of {targets.numel()} targets ignored, "
          f"loss {grads['loss'].item():.6f}")


if __name__ == "__main__":
    main()
