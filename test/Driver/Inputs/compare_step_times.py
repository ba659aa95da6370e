#!/usr/bin/env python3
"""Says whether the first of two cost reports predicts the longer step.

usage: compare_step_times.py SLOWER.json FASTER.json

Prints `longer: A x ms > B y ms` (A and B the reports' device names) when
the first report's predicted_step_ms is larger, else `not longer: ...` and
exits 1: FileCheck cannot compare numbers.
"""
import json
import sys


def main():
    slower, faster = (json.load(open(path)) for path in sys.argv[1:3])
    a, b = slower["predicted_step_ms"], faster["predicted_step_ms"]
    names = slower["device"]["name"], faster["device"]["name"]
    if a > b:
        print(f"longer: {names[0]} {a:.4f} ms > {names[1]} {b:.4f} ms")
    else:
        print(f"not longer: {names[0]} {a:.4f} ms <= {names[1]} {b:.4f} ms")
    return 0 if a > b else 1


if __name__ == "__main__":
    sys.exit(main())
