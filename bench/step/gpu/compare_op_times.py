#!/usr/bin/env python3
"""The cost model's prediction against measured device times, per class.

usage: compare_op_times.py COST.json TIMES.json [--top N]

COST.json is `mantissa-compile ... --cost-report=json` of an artifact's step
(its `kernels` list: the program's ops in order, then the AdamW update);
TIMES.json is `mantissa-run ART --device cuda --op-times TIMES.json` of the
same step (per op its mean device microseconds over the timed runs). The two
are joined op by op (kind and name must agree: the same step.gpu.json).
Prints, per cost class (docs/gpu-cost-model.md), the ops, the predicted and
the measured microseconds and measured / predicted, which is what
calibrating the model on a device needs; then the N ops whose measurement
is furthest from their prediction. The update is not one of the step's ops
and is not timed.
"""
import argparse
import collections
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cost")
    parser.add_argument("times")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    predicted = json.load(open(args.cost))["kernels"]
    times = json.load(open(args.times))
    measured = times["ops"]
    step_ops = [op for op in predicted if op["kind"] != "update"]
    if len(step_ops) != len(measured):
        sys.exit(f"error: {args.cost} lists {len(step_ops)} ops of the step, "
                 f"{args.times} {len(measured)}: not the same program")
    for index, (p, m) in enumerate(zip(step_ops, measured)):
        if p["kind"] != m["kind"] or p["name"] != m["name"]:
            sys.exit(f"error: op {index}: {args.cost} has {p['kind']} {p['name']}, "
                     f"{args.times} {m['kind']} {m['name']}: not the same program")

    classes = collections.OrderedDict()
    for p, m in zip(step_ops, measured):
        entry = classes.setdefault(p["class"], [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += p["predicted_us"]
        entry[2] += m["measured_us"]
    print(f"{times['step']}: {len(measured)} ops, each the mean of "
          f"{times['timed_runs']} timed runs (after {times['untimed_runs']} untimed)")
    print(f"{'class':<18} {'ops':>5} {'predicted us':>13} {'measured us':>12} {'measured/predicted':>19}")
    total_predicted = total_measured = 0.0
    for name, (count, p_us, m_us) in sorted(classes.items(), key=lambda c: -c[1][2]):
        total_predicted += p_us
        total_measured += m_us
        ratio = m_us / p_us if p_us > 0 else float("nan")
        print(f"{name:<18} {count:>5} {p_us:>13.1f} {m_us:>12.1f} {ratio:>19.2f}")
    ratio = total_measured / total_predicted if total_predicted > 0 else float("nan")
    print(f"{'step ops':<18} {len(measured):>5} {total_predicted:>13.1f} {total_measured:>12.1f} "
          f"{ratio:>19.2f}")
    updates = [op for op in predicted if op["kind"] == "update"]
    for update in updates:
        print(f"(the update, predicted {update['predicted_us']:.1f} us, is not timed)")

    if args.top > 0:
        print(f"\nfurthest from the prediction (measured - predicted):")
        worst = sorted(zip(step_ops, measured),
                       key=lambda pm: -abs(pm[1]["measured_us"] - pm[0]["predicted_us"]))
        for p, m in worst[:args.top]:
            print(f"  {p['name']:<40} {p['class']:<16} predicted {p['predicted_us']:9.1f} us "
                  f"measured {m['measured_us']:9.1f} us ({p['bound_by']})")


if __name__ == "__main__":
    main()
