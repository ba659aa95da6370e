"""The model as a module whose forward returns the training loss.

torch.export and `_export_forward_backward` need a module that returns the
scalar loss. A wrapper module holding the model would prefix every FQN with
its attribute name (`model.model.layers.0...` for a Hugging Face LM), so the
exported graph, the weights and the gradients would no longer be named as
the user's state dict is. Instead, a private deep copy of the model gets a
subclass of its own class whose forward calls the original forward and picks
the loss: FQNs, module paths and the user's model are all left as they were.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import Any, Callable

import torch

from .errors import ExportError

LossFn = Callable[[Any, Any], torch.Tensor]
OutputsFn = Callable[[Any, Any], "dict[str, torch.Tensor]"]


def pick_loss(output: Any, batch: Any, loss_fn: LossFn | None, model_name: str) -> torch.Tensor:
    """The training loss: `loss_fn(output, batch)` when given, else the output
    when it is a scalar tensor, else `output.loss` (Hugging Face's convention
    when labels are passed), else `output["loss"]`."""
    if loss_fn is not None:
        loss = loss_fn(output, batch)
        source = "loss_fn(output, batch)"
    elif isinstance(output, torch.Tensor):
        loss, source = output, "the model's output"
    elif getattr(output, "loss", None) is not None:
        loss, source = output.loss, "output.loss"
    elif isinstance(output, Mapping) and output.get("loss") is not None:
        loss, source = output["loss"], 'output["loss"]'
    else:
        raise ExportError(
            f"model {model_name}: its output ({type(output).__name__}) has no loss: it is not a "
            "scalar tensor and has no .loss or ['loss'] (a Hugging Face model computes one when "
            "the batch has labels); pass loss_fn(output, batch)")
    if not isinstance(loss, torch.Tensor):
        raise ExportError(f"model {model_name}: {source} is a {type(loss).__name__}, not a tensor")
    if loss.numel() != 1:
        raise ExportError(
            f"model {model_name}: {source} has shape {list(loss.shape)}, not a scalar loss; "
            "reduce it (e.g. .mean()) or pass loss_fn(output, batch)")
    if not loss.is_floating_point():
        raise ExportError(f"model {model_name}: {source} has dtype {loss.dtype}, not a floating loss")
    return loss.reshape(()) if loss.dim() else loss


def pick_outputs(output: Any, batch: Any, outputs_fn: OutputsFn,
                 model_name: str) -> dict[str, torch.Tensor]:
    """The named tensors `outputs_fn(output, batch)` returns beside the loss,
    checked: a non-empty dict of tensors, each named by a Python identifier
    other than "loss" (mantissa-run writes them by name beside `loss`)."""
    outputs = outputs_fn(output, batch)
    if not isinstance(outputs, Mapping):
        raise ExportError(f"model {model_name}: outputs_fn(output, batch) returned a "
                          f"{type(outputs).__name__}, not a dict of named tensors")
    if not outputs:
        raise ExportError(f"model {model_name}: outputs_fn(output, batch) returned an empty "
                          "dict; return at least one named tensor, or pass no outputs_fn")
    for key, value in outputs.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ExportError(f"model {model_name}: outputs_fn(output, batch) names an output "
                              f"{key!r}, which is not a valid identifier")
        if key == "loss":
            raise ExportError(f"model {model_name}: outputs_fn(output, batch) names an output "
                              "'loss', the name of the training loss; choose another name")
        if not isinstance(value, torch.Tensor):
            raise ExportError(f"model {model_name}: outputs_fn(output, batch)[{key!r}] is a "
                              f"{type(value).__name__}, not a tensor")
    return dict(outputs)


def step_loss(result: Any) -> torch.Tensor:
    """The loss of what a loss_returning_copy returns: the loss, or with an
    outputs_fn the first element of (loss, *outputs)."""
    return result[0] if isinstance(result, tuple) else result


def loss_returning_copy(model: torch.nn.Module, loss_fn: LossFn | None, model_name: str,
                        batch_keys: list[str], outputs_fn: OutputsFn | None = None,
                        output_names: list[str] | None = None) -> torch.nn.Module:
    """A deep copy of `model` whose forward returns the scalar loss; with
    `outputs_fn`, the tuple (loss, *outputs_fn(output, batch).values()),
    whose names it records in `output_names` (torch.export's user outputs
    after the loss, in that order).

    The batch handed to `loss_fn` is what the forward received (keyword
    arguments as a dict, else the positional ones as a tuple), so that under
    torch.export it holds the graph's inputs rather than constants. With a
    `loss_fn`, keyword entries the model's forward does not take (a
    diffusion model's target noise) go to `loss_fn` only; they are still
    inputs of the exported step.
    """
    copied = copy.deepcopy(model)
    base = type(model)
    signature = inspect.signature(base.forward)
    parameters = list(signature.parameters.values())
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    loss_only = [] if takes_any or loss_fn is None else [
        key for key in batch_keys if key not in signature.parameters]

    def forward(self, *args, **kwargs):
        model_kwargs = {k: v for k, v in kwargs.items() if k not in loss_only}
        output = base.forward(self, *args, **model_kwargs)
        given = kwargs if kwargs else args
        loss = pick_loss(output, given, loss_fn, model_name)
        if outputs_fn is None:
            return loss
        outputs = pick_outputs(output, given, outputs_fn, model_name)
        if output_names is not None:
            output_names[:] = list(outputs)
        # Detached: the outputs are results of the step, not differentiated
        # (the backward is the loss's alone, as without outputs_fn).
        return (loss, *(value.detach() for value in outputs.values()))

    # torch.export binds the batch to the forward's signature: the model's
    # own, plus the loss-only entries as keyword-only parameters.
    extra = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None)
             for key in loss_only]
    forward.__signature__ = signature.replace(parameters=parameters + extra)
    forward.__doc__ = base.forward.__doc__
    copied.__class__ = type(base.__name__, (base,), {
        "forward": forward, "__module__": base.__module__, "__qualname__": base.__qualname__})
    return copied
