#!/usr/bin/env python3
"""Loss curves ({"losses": [...]} files) within a relative tolerance.

  close_losses.py ACTUAL EXPECTED --rel-tol T

Both files must hold as many losses; prints the worst |a - b| / |b| over
the steps and "CLOSE: n losses" or "FAIL: ...", exiting non-zero above T.
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("actual")
    parser.add_argument("expected")
    parser.add_argument("--rel-tol", type=float, required=True)
    args = parser.parse_args()
    actual = json.load(open(args.actual))["losses"]
    expected = json.load(open(args.expected))["losses"]
    if len(actual) != len(expected) or not expected:
        print(f"FAIL: {len(actual)} losses, expected {len(expected)}")
        sys.exit(1)
    errors = [abs(a - b) / abs(b) for a, b in zip(actual, expected)]
    worst = max(errors)
    step = errors.index(worst) + 1
    print(f"worst loss rel_diff={worst:.3e} at step {step} "
          f"tol={args.rel_tol:g}")
    if worst > args.rel_tol:
        print(f"FAIL: step {step}: {actual[step - 1]!r} against "
              f"{expected[step - 1]!r}")
        sys.exit(1)
    print(f"CLOSE: {len(actual)} losses")


if __name__ == "__main__":
    main()
