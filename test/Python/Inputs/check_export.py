"""Reads what mantissa.export wrote, for FileCheck, and compares gradients.

  check_export.py keys FILE.safetensors
      one line per tensor: `NAME DTYPE [SHAPE]`, sorted by name
  check_export.py archive NAME.pt2
      the archive's extra/mantissa.json, one `key: value` line per entry
      (batch_dims, non_trainable and tied one line per input or tensor)
  check_export.py grads ACTUAL EXPECTED [--tol T]
      every tensor of EXPECTED (torch's loss and gradients) against ACTUAL
      (mantissa-run --dump-grads): max|a - b| / scale <= T. The scale is
      the tensor's max|b|, floored at the largest max|b| of the other
      gradients of the same module (a layer's bias and weight receive the
      same upstream gradient), and at 1e-3 of the largest of all: a
      gradient that is zero in exact arithmetic (the bias of a layer
      before a norm) is compared at its layer's scale, not at that of its
      own rounding noise. Exits 1 on a missing tensor, another shape or an
      error above T.
"""

import argparse
import json
import sys
import zipfile

from safetensors.numpy import load_file


def keys(path):
    for name, value in sorted(load_file(path).items()):
        print(f"{name} {value.dtype} {list(value.shape)}")


def archive(path):
    with zipfile.ZipFile(path) as pt2:
        names = [n for n in pt2.namelist() if n.endswith("/extra/mantissa.json")]
        if len(names) != 1:
            sys.exit(f"{path}: {len(names)} extra/mantissa.json entries")
        metadata = json.loads(pt2.read(names[0]))
    for key, value in metadata.items():
        if isinstance(value, dict) and key != "exporter":
            for inner, entry in value.items():
                print(f"{key}: {inner} = {json.dumps(entry)}")
            if not value:
                print(f"{key}: none")
        else:
            print(f"{key}: {json.dumps(value)}")


def grads(actual_path, expected_path, tol):
    actual, expected = load_file(actual_path), load_file(expected_path)
    largest = {name: float(abs(value).max()) for name, value in expected.items()}
    gradients = [name for name in expected if name.startswith("grad.")]
    floor = 1e-3 * max(largest[name] for name in gradients)

    def module(name):
        return name.rpartition(".")[0]

    def scale_of(name):
        siblings = [largest[other] for other in gradients
                    if other != name and module(other) == module(name)]
        return max([largest[name], floor] + siblings)
    worst, failures = 0.0, 0
    for name, want in sorted(expected.items()):
        got = actual.get(name)
        if got is None or got.shape != want.shape:
            print(f"FAIL {name}: {'missing' if got is None else list(got.shape)}, "
                  f"expected {list(want.shape)}")
            failures += 1
            continue
        scale = scale_of(name)
        error = float(abs(got.astype("float64") - want.astype("float64")).max()) / scale
        worst = max(worst, error)
        failed = error > tol
        failures += failed
        print(f"{'FAIL' if failed else 'ok'} {name} error={error:.3e}")
    print(f"{len(expected)} tensors, worst error={worst:.3e}, tol={tol:g}, failures={failures}")
    sys.exit(1 if failures else 0)


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("keys").add_argument("file")
    commands.add_parser("archive").add_argument("pt2")
    compare = commands.add_parser("grads")
    compare.add_argument("actual")
    compare.add_argument("expected")
    compare.add_argument("--tol", type=float, default=1e-5)
    args = parser.parse_args()
    if args.command == "keys":
        keys(args.file)
    elif args.command == "archive":
        archive(args.pt2)
    else:
        grads(args.actual, args.expected, args.tol)


if __name__ == "__main__":
    main()
