#!/usr/bin/env python3
"""Compares two safetensors files tensor by tensor, as the issues measure it.

usage: compare_safetensors.py ACTUAL EXPECTED [--tol T] [--expected-prefix P]
                              [--skip NAME ...]

For every tensor of EXPECTED (named P + name in EXPECTED when a prefix is
given, e.g. `fp32.` for *.finals.safetensors), the error is
max|a - b| / (max|b| + 1e-12). Prints one line per tensor and the worst, and
exits 1 when a tensor is missing, differs in shape, or exceeds the tolerance.
--skip names tensors (without the prefix) that are not compared, with the
reason said by the test: e.g. an attention key bias, whose gradient is zero
in exact arithmetic, so that Adam turns rounding noise into real steps.
Pure Python (no numpy), so it runs on a bare machine.
"""
import argparse
import json
import struct
import sys

FORMATS = {"F32": ("f", 4), "F64": ("d", 8), "I64": ("q", 8), "I32": ("i", 4),
           "BF16": (None, 2), "F16": ("e", 2), "BOOL": ("?", 1)}


def load(path):
    data = open(path, "rb").read()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    base = 8 + header_length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        code, width = FORMATS[entry["dtype"]]
        count = len(raw) // width
        if entry["dtype"] == "BF16":
            halves = struct.unpack(f"<{count}H", raw)
            values = struct.unpack(f"<{count}f", struct.pack(f"<{count}I", *[h << 16 for h in halves]))
        else:
            values = struct.unpack(f"<{count}{code}", raw)
        tensors[name] = (entry["shape"], values)
    return tensors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("actual")
    parser.add_argument("expected")
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--expected-prefix", default="")
    parser.add_argument("--skip", action="append", default=[])
    args = parser.parse_args()
    actual = load(args.actual)
    expected = load(args.expected)
    worst = 0.0
    failures = 0
    for name, (shape, values) in sorted(expected.items()):
        if not name.startswith(args.expected_prefix):
            continue
        key = name[len(args.expected_prefix):]
        if key in args.skip:
            print(f"skipped {key}")
            continue
        if key not in actual:
            print(f"MISSING {key}")
            failures += 1
            continue
        actual_shape, actual_values = actual[key]
        if list(actual_shape) != list(shape):
            print(f"SHAPE {key}: {actual_shape} != {shape}")
            failures += 1
            continue
        scale = max((abs(v) for v in values), default=0.0)
        diff = max((abs(a - b) for a, b in zip(actual_values, values)), default=0.0)
        error = diff / (scale + 1e-12)
        worst = max(worst, error)
        status = "ok" if error <= args.tol else "FAIL"
        failures += status == "FAIL"
        print(f"{status} {key} rel_err={error:.3e}")
    print(f"worst rel_err={worst:.3e} tol={args.tol:g} failures={failures}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
