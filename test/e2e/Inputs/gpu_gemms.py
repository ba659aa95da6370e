#!/usr/bin/env python3
"""Summarises the GEMMs of an artifact's GPU step (docs/gpu-step.md).

  gpu_gemms.py ARTIFACT_DIR

Prints the program's format, its kernel and GEMM counts, and the GEMMs by
operand and output dtype with their epilogues, one line each, sorted:

  format 2: 214 kernels, 62 gemms
  gemm BF16 x BF16 -> BF16: 38
  gemm F32 x F32 -> F32 + bias: 2
"""
import json
import os
import sys


def main():
    directory = sys.argv[1]
    manifest = json.load(open(os.path.join(directory, "manifest.json")))
    path = os.path.join(directory, manifest["kernels"]["gpu_step"]["program"])
    program = json.load(open(path))
    ops = program["ops"]
    gemms = [op for op in ops if op["kind"] == "gemm"]
    print("format %d: %d kernels, %d gemms" %
          (program["format"], len(ops) - len(gemms), len(gemms)))
    kinds = {}
    for op in gemms:
        key = "%s x %s -> %s%s" % (op["a"]["dtype"], op["b"]["dtype"],
                                   op["c"]["dtype"],
                                   " + bias" if op.get("epilogue") == "bias"
                                   else "")
        kinds[key] = kinds.get(key, 0) + 1
    for key in sorted(kinds):
        print("gemm %s: %d" % (key, kinds[key]))


if __name__ == "__main__":
    main()
