"""Compares what `mantissa-run --outputs` wrote with eager torch.

  check_outputs.py compare MODULE:FACTORY OUT.safetensors [--batch B] [--tol T]
      FACTORY() returns (model, batch, loss_fn, outputs_fn), as
      mantissa.export takes it. Runs the model eagerly at its initial
      weights on the batch (its first B samples with --batch) and compares
      every output outputs_fn names, and the loss, with OUT: the same names,
      dtypes and shapes, and max|a - b| / max|b| <= T (T = 1e-5). Prints
      one line per tensor; exits 1 on a missing or extra tensor, another
      dtype or shape, or an error above T.
  check_outputs.py slice IN.safetensors OUT.safetensors B
      writes the first B samples (dimension 0) of every tensor of IN.
  check_outputs.py same A.safetensors B.safetensors
      exits 1 unless A and B hold the same tensors bit for bit.
  check_outputs.py close A.safetensors B.safetensors [--tol T]
      exits 1 unless A and B hold the same names, dtypes and shapes, each
      within max|a - b| / max|b| <= T (T = 1e-5).
  check_outputs.py record IN.pt2 OUT.pt2 (--drop | --user-outputs JSON)
      copies the archive with its extra/mantissa.json's user_outputs
      removed or replaced by JSON: an archive another exporter wrote, or a
      damaged one.
"""

import argparse
import inspect
import json
import sys
import zipfile

import torch
from safetensors.torch import load_file, save_file

from mantissa.export.__main__ import call_factory, load_factory
from mantissa.export.references import deterministic_torch


def compare(spec, path, batch_size, tol):
    model, batch, loss_fn, outputs_fn = call_factory(spec, load_factory(spec))
    if batch_size is not None:
        batch = {key: value[:batch_size] for key, value in batch.items()}
    # Entries the forward does not take (a regression target, a diffusion
    # model's noise) reach loss_fn only, as mantissa.export hands them.
    parameters = inspect.signature(model.forward).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    model_batch = {k: v for k, v in batch.items() if takes_any or k in parameters}
    with deterministic_torch(), torch.no_grad():
        output = model(**model_batch)
        expected = {"loss": loss_fn(output, batch).reshape(())}
        expected.update(outputs_fn(output, batch))
    actual = load_file(path)
    failures = 0
    if sorted(actual) != sorted(expected):
        print(f"names: {sorted(actual)}, expected {sorted(expected)}")
        failures += 1
    for name, want in expected.items():
        got = actual.get(name)
        if got is None:
            continue
        if got.dtype != want.dtype or got.shape != want.shape:
            print(f"{name}: {got.dtype} {list(got.shape)}, expected {want.dtype} "
                  f"{list(want.shape)}")
            failures += 1
            continue
        error = float((got.double() - want.double()).abs().max())
        scale = float(want.double().abs().max())
        relative = error / scale if scale else error
        failures += relative > tol
        print(f"{name}: {str(got.dtype).removeprefix('torch.')} {list(got.shape)}, "
              f"max abs error {error:.3g}, relative to max {scale:.3g}: {relative:.3g}")
    print(f"failures={failures}")
    return 1 if failures else 0


def slice_batch(source, target, batch_size):
    save_file({name: value[:batch_size].contiguous() for name, value in load_file(source).items()},
              target)
    return 0


def same(first, second):
    a, b = load_file(first), load_file(second)
    if sorted(a) != sorted(b):
        print(f"names differ: {sorted(a)} and {sorted(b)}")
        return 1
    differ = [name for name in a if a[name].dtype != b[name].dtype or not torch.equal(a[name], b[name])]
    print(f"{len(a)} tensors, {len(differ)} differ {differ}")
    return 1 if differ else 0


def close(first, second, tol):
    a, b = load_file(first), load_file(second)
    if sorted(a) != sorted(b):
        print(f"names differ: {sorted(a)} and {sorted(b)}")
        return 1
    failures = 0
    for name in sorted(a):
        if a[name].dtype != b[name].dtype or a[name].shape != b[name].shape:
            print(f"{name}: {a[name].dtype} {list(a[name].shape)} and {b[name].dtype} "
                  f"{list(b[name].shape)}")
            failures += 1
            continue
        error = float((a[name].double() - b[name].double()).abs().max())
        scale = float(b[name].double().abs().max()) or 1.0
        failures += error / scale > tol
        print(f"{name}: relative error {error / scale:.3g}")
    return 1 if failures else 0


def record(source, target, drop, user_outputs):
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for entry in original.infolist():
            data = original.read(entry)
            if entry.filename.endswith("/extra/mantissa.json"):
                metadata = json.loads(data)
                if drop:
                    del metadata["user_outputs"]
                else:
                    metadata["user_outputs"] = json.loads(user_outputs)
                data = json.dumps(metadata).encode()
            copy.writestr(entry, data)
    return 0


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("compare")
    check.add_argument("factory")
    check.add_argument("outputs")
    check.add_argument("--batch", type=int)
    check.add_argument("--tol", type=float, default=1e-5)
    cut = commands.add_parser("slice")
    cut.add_argument("source")
    cut.add_argument("target")
    cut.add_argument("batch", type=int)
    equal = commands.add_parser("same")
    equal.add_argument("first")
    equal.add_argument("second")
    near = commands.add_parser("close")
    near.add_argument("first")
    near.add_argument("second")
    near.add_argument("--tol", type=float, default=1e-5)
    rewrite = commands.add_parser("record")
    rewrite.add_argument("source")
    rewrite.add_argument("target")
    how = rewrite.add_mutually_exclusive_group(required=True)
    how.add_argument("--drop", action="store_true")
    how.add_argument("--user-outputs")
    args = parser.parse_args()
    if args.command == "compare":
        return compare(args.factory, args.outputs, args.batch, args.tol)
    if args.command == "slice":
        return slice_batch(args.source, args.target, args.batch)
    if args.command == "record":
        return record(args.source, args.target, args.drop, args.user_outputs)
    if args.command == "close":
        return close(args.first, args.second, args.tol)
    return same(args.first, args.second)


if __name__ == "__main__":
    sys.exit(main())
