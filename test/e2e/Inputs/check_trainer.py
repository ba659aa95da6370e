#!/usr/bin/env python3
"""Compares a trainer run's metrics with torch's reference (torch_trainer_reference.py).

usage: check_trainer.py OURS_METRICS.jsonl REF.json
           [--loss-rtol 1e-5] [--lr-rtol 1e-6] [--norm-rtol 1e-4]

OURS_METRICS.jsonl holds one JSON object per line with step (1-based), loss, lr, grad_norm and
optionally eval_loss. Per step, the relative error |ours - torch| / |torch| of the loss, the
learning rate and the gradient norm (before clipping); eval losses on the steps torch evaluated
(under the loss tolerance). Prints one line per failing quantity with its worst error and step,
else "PASS max-loss-rel=... max-lr-rel=... max-norm-rel=...", and exits 1 on any failure.
Standard library only.
"""
import argparse
import json
import math
import sys


def rel(a, b):
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / abs(b) if b != 0 else abs(a)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ours")
    parser.add_argument("ref")
    parser.add_argument("--loss-rtol", type=float, default=1e-5)
    parser.add_argument("--lr-rtol", type=float, default=1e-6)
    parser.add_argument("--norm-rtol", type=float, default=1e-4)
    args = parser.parse_args()
    ref = json.load(open(args.ref))
    ours = {}
    for line in open(args.ours):
        if line.strip():
            record = json.loads(line)
            ours[int(record["step"])] = record
    failures = []
    steps = len(ref["losses"])
    missing = [s for s in range(1, steps + 1) if s not in ours]
    if missing:
        failures.append(f"FAIL steps: {len(missing)} of {steps} missing (first {missing[0]})")

    # quantity -> (our key, torch's values by 1-based step, tolerance)
    checks = {
        "loss": ("loss", dict(enumerate(ref["losses"], 1)), args.loss_rtol),
        "lr": ("lr", dict(enumerate(ref["lrs"], 1)), args.lr_rtol),
        "grad_norm": ("grad_norm", dict(enumerate(ref["grad_norms"], 1)), args.norm_rtol),
        "eval_loss": ("eval_loss", {int(s): v for s, v in ref.get("eval", [])}, args.loss_rtol),
    }
    worst = {}
    for name, (key, theirs, tol) in checks.items():
        err, at = 0.0, None
        for step, value in sorted(theirs.items()):
            if step not in ours:
                continue
            if key not in ours[step]:
                failures.append(f"FAIL {name}: missing at step {step}")
                break
            e = rel(float(ours[step][key]), value)
            if at is None or e > err:
                err, at = e, step
        worst[name] = err
        if at is not None and err > tol:
            failures.append(f"FAIL {name}: max-rel={err:.3e} at step {at} "
                            f"(ours {ours[at][key]!r}, torch {theirs[at]!r}) tol={tol:g}")
    for line in failures:
        print(line)
    if failures:
        sys.exit(1)
    print(f"PASS max-loss-rel={worst['loss']:.3e} max-lr-rel={worst['lr']:.3e} "
          f"max-norm-rel={worst['grad_norm']:.3e} max-eval-rel={worst['eval_loss']:.3e}")


if __name__ == "__main__":
    main()
