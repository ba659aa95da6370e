"""Corrupts one figure of torch's reference files, so that the zoo checker's
tests can show each verdict failing.

usage: corrupt.py scale FILE.safetensors KEY FACTOR   (multiply a tensor)
       corrupt.py loss FILE.traj.json STEP FACTOR     (multiply the fp32 arm's loss at a step)
"""
import json
import sys

from safetensors.numpy import load_file, save_file


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "loss":
        trajectory = json.load(open(path))
        trajectory["arms"]["fp32"]["losses"][int(sys.argv[3])] *= float(sys.argv[4])
        json.dump(trajectory, open(path, "w"))
        return
    tensors = load_file(path)
    key = sys.argv[3]
    if key not in tensors:
        sys.exit(f"{path} has no tensor {key}")
    if mode != "scale":
        sys.exit(f"unknown mode {mode}")
    tensors[key] = tensors[key] * float(sys.argv[4])
    save_file(tensors, path)


if __name__ == "__main__":
    main()
