"""python3 -m mantissa.export MODULE:FACTORY OUT_DIR NAME [options]

FACTORY() returns (model, batch), (model, batch, loss_fn) or (model, batch,
loss_fn, outputs_fn), loss_fn possibly None; MODULE is an
importable module (mantissa.zoo.llama) or a path to a .py file. Exports as
mantissa.export.export_training_step does; on bad input prints one line
naming the model and the argument, node or module, exits 1 and writes
nothing.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import traceback
from typing import Any, Callable

from . import ExportError, check_torch, export_training_step


def load_factory(spec: str) -> Callable[[], Any]:
    module_name, sep, factory_name = spec.rpartition(":")
    if not sep or not module_name or not factory_name:
        raise ExportError(f"{spec!r} is not MODULE:FACTORY")
    try:
        if module_name.endswith(".py"):
            if not os.path.isfile(module_name):
                raise ExportError(f"factory {spec}: no file {module_name}")
            loader = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(module_name))[0], module_name)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ExportError:
        raise
    except Exception as error:
        raise ExportError(f"factory {spec}: importing {module_name} failed: "
                          f"{type(error).__name__}: {error}") from error
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ExportError(f"factory {spec}: {module_name} has no function {factory_name}")
    return factory


def call_factory(spec: str, factory: Callable[[], Any]):
    try:
        made = factory()
    except Exception as error:
        raise ExportError(f"factory {spec} raised {type(error).__name__}: {error}") from error
    if not isinstance(made, tuple) or len(made) not in (2, 3, 4):
        raise ExportError(f"factory {spec} returned a {type(made).__name__}; it must return "
                          "(model, batch), (model, batch, loss_fn) or "
                          "(model, batch, loss_fn, outputs_fn)")
    model, batch, loss_fn, outputs_fn = (*made, None, None)[:4]
    for role, function in (("loss_fn", loss_fn), ("outputs_fn", outputs_fn)):
        if function is not None and not callable(function):
            raise ExportError(f"factory {spec}: its {role} is a {type(function).__name__}, "
                              "not a function of (output, batch)")
    return model, batch, loss_fn, outputs_fn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m mantissa.export",
        description="Exports a model's training step (joint forward + backward) for Mantissa.")
    parser.add_argument("factory", metavar="MODULE:FACTORY",
                        help="FACTORY() returns (model, batch), (model, batch, loss_fn) or "
                             "(model, batch, loss_fn, outputs_fn)")
    parser.add_argument("out_dir", metavar="OUT_DIR")
    parser.add_argument("name", metavar="NAME")
    parser.add_argument("--reference-steps", type=int, default=0, metavar="N",
                        help="also write torch's gradients and an N-step AdamW trajectory")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--mantissa-compile", metavar="PATH",
                        help="the mantissa-compile whose --list-ops is checked "
                             "(default: $MANTISSA_COMPILE, then PATH)")
    parser.add_argument("--traceback", action="store_true",
                        help="print the Python traceback behind an error")
    args = parser.parse_args(argv)
    try:
        check_torch()
        model, batch, loss_fn, outputs_fn = call_factory(args.factory, load_factory(args.factory))
        result = export_training_step(
            model, batch, args.out_dir, args.name, loss_fn=loss_fn, outputs_fn=outputs_fn,
            reference_steps=args.reference_steps, lr=args.lr, weight_decay=args.weight_decay,
            mantissa_compile=args.mantissa_compile)
    except ExportError as error:
        if args.traceback:
            traceback.print_exc()
        print(f"mantissa.export: error: {error}", file=sys.stderr)
        return 1
    nodes = sum(result.operators.values())
    print(f"exported {type(model).__name__}: {result.parameter_count} parameters, "
          f"{nodes} nodes of {len(result.operators)} operators, loss {result.loss:.6g}")
    print("user inputs: " + ", ".join(
        f"{name} (batch dim {dim})" for name, dim in result.batch_dims.items()))
    if result.user_outputs:
        print("user outputs: " + ", ".join(result.user_outputs))
    if result.dynamic_batch.get("dynamic_batch"):
        print("batch: dynamic (mantissa-run --micro-batch B compiles the step for B)")
    else:
        print(f"batch: static, {result.dynamic_batch.get('static_reason')} "
              "(the step takes this batch size only)")
    for fqn, why in result.non_trainable.items():
        print(f"non-trainable: {fqn} ({why})")
    for path in result.files:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
