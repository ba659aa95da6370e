#!/usr/bin/env python3
"""Compares a training run with torch's trajectory of the same arm.

usage: check_trajectory.py LOSSES.json TRAJ.json ARM --loss-tol T
           [--final FINAL.safetensors --init INIT.safetensors] [--first N]

Prints the worst relative loss difference over the steps (|a - b| / |b|)
and fails above T. With --final and --init, also counts, per norm weight
(FQNs containing "norm"), how many elements moved from their initial value,
next to torch's count for the arm, and prints the totals. With --first N,
a run of N steps is compared with torch's first N.
"""
import argparse
import json
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from compare_safetensors import load  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("losses")
    parser.add_argument("traj")
    parser.add_argument("arm")
    parser.add_argument("--loss-tol", type=float, required=True)
    parser.add_argument("--final")
    parser.add_argument("--init")
    parser.add_argument("--first", type=int, default=0)
    args = parser.parse_args()
    ours = json.load(open(args.losses))["losses"]
    arm = json.load(open(args.traj))["arms"][args.arm]
    theirs = arm["losses"][:args.first] if args.first else arm["losses"]
    if len(ours) != len(theirs):
        print(f"FAIL: {len(ours)} losses, torch has {len(theirs)}")
        sys.exit(1)
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
    print(f"steps={len(ours)} first={ours[0]:.4f} (torch {theirs[0]:.4f}) "
          f"last={ours[-1]:.4f} (torch {theirs[-1]:.4f})")
    print(f"worst loss rel_diff={worst:.3e} tol={args.loss_tol:g}")
    failed = worst > args.loss_tol
    if args.final:
        final, init = load(args.final), load(args.init)
        moved_total = torch_total = elements = 0
        for fqn, torch_moved in sorted(arm["norm_elements_moved"].items()):
            before, after = init[fqn][1], final[fqn][1]
            moved = sum(1 for a, b in zip(before, after) if a != b)
            moved_total += moved
            torch_total += torch_moved
            elements += len(before)
            print(f"norm {fqn}: moved {moved}/{len(before)} (torch {torch_moved})")
        print(f"norm gains moved {moved_total}/{elements} (torch {torch_total}/{elements})")
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
