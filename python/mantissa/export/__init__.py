"""Exports a model's training step in the form Mantissa compiles.

    from mantissa.export import export_training_step
    export_training_step(model, {"input_ids": ids, "labels": ids}, "out", "llama",
                         reference_steps=20)

writes into `out/`:

- `llama.pt2`: the joint forward + backward program (torch.export, then
  torch.export.experimental._export_forward_backward), saved with
  torch.export.save, with `extra/mantissa.json` inside (the batch dims of the
  user inputs, the exporter's and torch's versions, the non-trainable
  parameters);
- `llama.init.safetensors`: the model's state dict under its own FQNs;
- `llama.inputs.safetensors`: the batch, named as the graph's user inputs;
- with `reference_steps=N`: `llama.grads.safetensors` (torch's `loss` and
  `grad.<fqn>` at the initial weights), `llama.traj.json` (N steps of eager
  AdamW: the loss of each step, norm gains moved) and
  `llama.finals.safetensors` (the parameters after them).

`python3 -m mantissa.export MODULE:FACTORY OUT_DIR NAME` does the same from
the command line; docs/export.md has the whole contract.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from .errors import ExportError

__all__ = ["ExportError", "ExportResult", "export_training_step", "check_torch", "MIN_TORCH"]

#: torch.export's joint program (`_export_forward_backward` on a non-strict
#: export, serialized with schema 8) as mantissa-compile reads it.
MIN_TORCH = (2, 9)


def check_torch() -> None:
    """Raises ExportError on a torch older than MIN_TORCH."""
    match = re.match(r"(\d+)\.(\d+)", torch.__version__)
    version = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if version < MIN_TORCH:
        raise ExportError(
            f"mantissa.export needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} (torch.export's joint "
            f"forward + backward program); this is torch {torch.__version__} "
            "(scripts/setup.sh installs the pinned one into .venv)")


def export_training_step(model: torch.nn.Module, batch: Any, out_dir: str, name: str, *,
                         loss_fn=None, outputs_fn=None, reference_steps: int = 0, lr: float = 1e-3,
                         weight_decay: float = 0.01, mantissa_compile: str | None = None):
    """Exports one training step of `model` on `batch` into OUT_DIR/NAME.*.

    `batch` is a dict of keyword tensors or a tuple of positional ones; the
    loss is `loss_fn(output, batch)` when given, else the output when it is
    a scalar tensor, else `output.loss`, else `output["loss"]`.
    `outputs_fn(output, batch)`, when given, returns a dict of named
    tensors (a prediction) that the step returns beside the loss, as
    torch.export user outputs named in mantissa.json's "user_outputs"
    (`mantissa-run --outputs` writes them). With
    `reference_steps` > 0, torch's gradients and AdamW trajectory (lr,
    weight_decay) are written beside. `mantissa_compile` is the binary whose
    `--list-ops` defines the supported operators (default:
    $MANTISSA_COMPILE, then PATH). Returns an ExportResult; raises
    ExportError, with nothing written, for a model, batch, operator or torch
    that Mantissa cannot take.
    """
    check_torch()
    from .step import export_training_step as export
    return export(model, batch, out_dir, name, loss_fn=loss_fn, outputs_fn=outputs_fn,
                  reference_steps=reference_steps,
                  lr=lr, weight_decay=weight_decay, mantissa_compile=mantissa_compile)


def __getattr__(name: str):
    if name == "ExportResult":
        from .step import ExportResult
        return ExportResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
