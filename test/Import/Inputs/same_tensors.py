#!/usr/bin/env python3
"""Bit-for-bit equality of safetensors tensors, NaN equal to NaN.

usage: same_tensors.py ACTUAL EXPECTED [--prefix P]

Every tensor of EXPECTED whose name starts with P must be in ACTUAL with the
same shape and the same values: equal numbers of the same sign (so -0 and
+0 differ), or NaN in both. Prints one line per tensor ("same NAME" or the
first difference) and "IDENTICAL: n tensors" when all are, and exits 1
otherwise. compare_safetensors.py measures a relative error, which NaN and
infinities defeat.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "Inputs"))
from compare_safetensors import load  # noqa: E402


def same(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("actual")
    parser.add_argument("expected")
    parser.add_argument("--prefix", default="")
    args = parser.parse_args()
    actual = load(args.actual)
    expected = load(args.expected)
    count = failures = 0
    for name, (shape, values) in sorted(expected.items()):
        if not name.startswith(args.prefix):
            continue
        count += 1
        if name not in actual:
            print(f"MISSING {name}")
            failures += 1
            continue
        actual_shape, actual_values = actual[name]
        if list(actual_shape) != list(shape):
            print(f"SHAPE {name}: {actual_shape} != {shape}")
            failures += 1
            continue
        differing = [i for i, (a, b) in enumerate(zip(actual_values, values))
                     if not same(a, b)]
        if differing:
            first = differing[0]
            print(f"DIFFERENT {name}: {len(differing)} of {len(values)} elements, first "
                  f"[{first}] {actual_values[first]!r} != {values[first]!r}")
            failures += 1
        else:
            print(f"same {name}")
    if failures:
        print(f"DIFFERENT: {failures} of {count} tensors")
        sys.exit(1)
    print(f"IDENTICAL: {count} tensors")


if __name__ == "__main__":
    main()
