#!/usr/bin/env python3
"""Exact equality of loss curves ({"losses": [...]} files).

  same_losses.py EXPECTED ACTUAL [ACTUAL ...] [--count N]

The ACTUAL files' losses, concatenated in order (e.g. a run and its resumed
continuation), must equal EXPECTED's bit for bit (as parsed doubles), and
there must be N of them when --count is given. Prints "IDENTICAL: n losses"
or the first difference, and exits non-zero on a difference.
"""
import json
import sys


def losses(path):
    with open(path) as f:
        return json.load(f)["losses"]


def main():
    args = sys.argv[1:]
    count = None
    if "--count" in args:
        at = args.index("--count")
        count = int(args[at + 1])
        del args[at:at + 2]
    if len(args) < 2:
        sys.exit(__doc__)
    expected = losses(args[0])
    actual = [loss for path in args[1:] for loss in losses(path)]
    if count is not None and len(expected) != count:
        print(f"DIFFERENT: {args[0]} has {len(expected)} losses, expected {count}")
        return 1
    if len(actual) != len(expected):
        print(f"DIFFERENT: {len(actual)} losses, expected {len(expected)}")
        return 1
    for index, (a, e) in enumerate(zip(actual, expected)):
        if a != e:
            print(f"DIFFERENT: step {index + 1}: {a!r}, expected {e!r}")
            return 1
    print(f"IDENTICAL: {len(expected)} losses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
