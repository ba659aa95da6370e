"""Compares the per-step losses of metrics files (--metrics JSONL).

compare_losses.py BASE.jsonl REFERENCE.jsonl [OTHER.jsonl] [--rtol R]: the
REFERENCE run must agree with BASE within R relative at every step (exit 1
otherwise), and OTHER, when given, must differ from BASE by more than R at
some step.
"""

import argparse
import json
import sys


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if line.strip()]


def worst(a, b):
    return max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))


parser = argparse.ArgumentParser()
parser.add_argument("base")
parser.add_argument("reference")
parser.add_argument("other", nargs="?")
parser.add_argument("--rtol", type=float, default=1e-5)
args = parser.parse_args()
base, reference = losses(args.base), losses(args.reference)
ok = len(base) == len(reference) and len(base) > 0
difference = worst(base, reference) if ok else float("inf")
within = ok and difference <= args.rtol
print(f"reference: {len(reference)} steps, worst relative difference {difference:.3g}, "
      f"{'within' if within else 'above'} {args.rtol:g}")
ok = within
if args.other:
    other = losses(args.other)
    difference = worst(base, other) if len(other) == len(base) else float("inf")
    above = difference > args.rtol
    print(f"other seed: {len(other)} steps, worst relative difference {difference:.3g}, "
          f"{'above' if above else 'within'} {args.rtol:g}")
    ok = ok and above
sys.exit(0 if ok else 1)
