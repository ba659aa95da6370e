#!/usr/bin/env python3
"""Measures a compute-precision run against torch.autocast, in units of how
far torch's autocast itself is from fp32.

usage: check_compute.py grads OURS.safetensors REF.grads.safetensors --step K
                        --max-ratio R [--max-grad-ratio G] [--arm ARM]
       check_compute.py traj LOSSES.json REF.traj.json --max-ratio R
                        [--max-fp32-ratio F] [--first N] [--arm ARM]
                        [--final FINAL.safetensors --init INIT.safetensors]

grads: OURS is `mantissa-run --dump-grads` (loss, grad.<fqn>) at the weights
after K steps of torch's autocast trajectory; REF holds torch's loss and
gradients there for the arms `autocast_bf16` and `fp32`
(tools/pt2-export/autocast_reference.py); ARM is the autocast arm compared
with (default `autocast_bf16_fp32acc`, torch's autocast with every bf16
product accumulated in fp32, which `compute: bf16` promises). Over all gradients together,
ratio = ||ours - autocast|| / ||autocast - fp32|| (2-norms), bounded by G
(default R); the loss's, by R.
traj: the worst relative loss difference over the steps (the first N, of a
run of at least N) of
ours against torch's autocast arm, divided by that of the autocast arm
against the fp32 arm; with --max-fp32-ratio, also ours against the fp32 arm
in the same unit (compute precision may not train further from fp32 than
that). With --final and --init, counts how many norm-gain elements moved,
next to torch's count for the arm. Fails when a ratio exceeds its bound.
Pure Python.
"""
import argparse
import json
import math
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from compare_safetensors import load  # noqa: E402


def check_grads(args):
    ours, ref = load(args.actual), load(args.reference)
    prefix = {"autocast": f"{args.arm}.step{args.step}.", "fp32": f"fp32.step{args.step}."}
    names = sorted(k[len(prefix["fp32"]):] for k in ref if k.startswith(prefix["fp32"]))
    if not names:
        print(f"FAIL: {args.reference} has no step {args.step}")
        return 1
    num = den = 0.0
    worst = []
    for name in names:
        if name not in ours:
            print(f"FAIL: {args.actual} lacks {name}")
            return 1
        a = ours[name][1]
        ac = ref[prefix["autocast"] + name][1]
        fp = ref[prefix["fp32"] + name][1]
        if len(a) != len(ac):
            print(f"FAIL: {name} has {len(a)} elements, torch {len(ac)}")
            return 1
        if name == "loss":
            loss_ratio = abs(a[0] - ac[0]) / max(abs(ac[0] - fp[0]), 1e-30)
            print(f"loss ours {a[0]:.6f} autocast {ac[0]:.6f} fp32 {fp[0]:.6f} ratio {loss_ratio:.3f}")
            continue
        n = sum((x - y) ** 2 for x, y in zip(a, ac))
        d = sum((x - y) ** 2 for x, y in zip(ac, fp))
        num += n
        den += d
        worst.append((math.sqrt(n / d) if d else 0.0, name))
    ratio = math.sqrt(num / den)
    for r, name in sorted(worst, reverse=True)[:3]:
        print(f"tensor {name}: ratio {r:.3f}")
    grad_bound = args.max_grad_ratio if args.max_grad_ratio is not None else args.max_ratio
    print(f"loss ratio {loss_ratio:.3f} (max {args.max_ratio:g})")
    print(f"gradients (step {args.step}): |ours - autocast| / |autocast - fp32| = {ratio:.3f} "
          f"(max {grad_bound:g})")
    failed = ratio > grad_bound or loss_ratio > args.max_ratio
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


def check_traj(args):
    ours = json.load(open(args.actual))["losses"]
    arms = json.load(open(args.reference))["arms"]
    ac, fp = arms[args.arm]["losses"], arms["fp32"]["losses"]
    # With --first N, a run of at least N steps; else as many as torch's.
    if args.first:
        short = len(ours) < args.first or len(ac) < args.first
    else:
        short = len(ours) != len(ac)
    if short:
        print(f"FAIL: {len(ours)} losses, torch has {len(ac)}")
        return 1
    n = args.first or len(ours)
    def gap(x, y):
        return max(abs(a - b) / abs(b) for a, b in zip(x[:n], y[:n]))
    ours_gap, autocast_gap, ours_fp32 = gap(ours, ac), gap(ac, fp), gap(ours, fp)
    ratio, fp32_ratio = ours_gap / autocast_gap, ours_fp32 / autocast_gap
    print(f"steps={n} last ours {ours[n - 1]:.4f} autocast {ac[n - 1]:.4f} fp32 {fp[n - 1]:.4f}")
    print(f"worst loss rel_diff: ours-autocast {ours_gap:.3e}, autocast-fp32 {autocast_gap:.3e}, "
          f"ours-fp32 {ours_fp32:.3e}")
    print(f"ratio to autocast {ratio:.3f} (max {args.max_ratio:g}), "
          f"to fp32 {fp32_ratio:.3f} (max {args.max_fp32_ratio:g})")
    failed = ratio > args.max_ratio or fp32_ratio > args.max_fp32_ratio
    if args.final:
        final, init = load(args.final), load(args.init)
        moved_total = torch_total = elements = 0
        for fqn, torch_moved in sorted(arms[args.arm]["norm_elements_moved"].items()):
            before, after = init[fqn][1], final[fqn][1]
            moved_total += sum(1 for a, b in zip(before, after) if a != b)
            torch_total += torch_moved
            elements += len(before)
        print(f"norm gains moved {moved_total}/{elements} (torch {torch_total}/{elements})")
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["grads", "traj"])
    parser.add_argument("actual")
    parser.add_argument("reference")
    parser.add_argument("--step", type=int, default=0)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--max-ratio", type=float, required=True)
    parser.add_argument("--arm", default="autocast_bf16_fp32acc")
    parser.add_argument("--max-grad-ratio", type=float)
    parser.add_argument("--max-fp32-ratio", type=float, default=float("inf"))
    parser.add_argument("--final")
    parser.add_argument("--init")
    args = parser.parse_args()
    sys.exit(check_grads(args) if args.mode == "grads" else check_traj(args))


if __name__ == "__main__":
    main()
