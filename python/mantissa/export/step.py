"""One training step exported: trace, check, reference numbers, write.

Imported only once torch is known to be >= MIN_TORCH (see __init__.py):
torch.export's modules do not exist in older torch.
"""

from __future__ import annotations

import inspect
import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import save_file
from torch.export.graph_signature import InputKind, OutputKind

from .. import __version__
from .batch import Batch, batch_dims
from .constant_folding import fold_constants
from .errors import ExportError
from .module_paths import restore_module_stacks
from .oplist import (OperatorSites, check_operators, check_random, find_mantissa_compile,
                     operator_modules, supported_operators, unsupported_message)
from .references import BETAS, EPS, adamw_trajectory, deterministic_torch, eager_step
from .staging import Staging
from .training_module import LossFn, OutputsFn, loss_returning_copy

#: Written only with reference_steps > 0; an export without them removes
#: those of an earlier one.
_REFERENCE_SUFFIXES = (".grads.safetensors", ".traj.json", ".finals.safetensors")


@dataclass
class ExportResult:
    files: list[str]
    user_inputs: list[str]
    batch_dims: dict[str, int | None]
    #: Operator -> number of nodes in the joint program.
    operators: dict[str, int]
    #: FQN -> why it gets no gradient in the exported step.
    non_trainable: dict[str, str] = field(default_factory=dict)
    #: A tied weight's unread name -> the name the graph reads.
    tied: dict[str, str] = field(default_factory=dict)
    #: The joint program's node count and how many have a module path.
    module_paths: dict[str, Any] = field(default_factory=dict)
    parameter_count: int = 0
    loss: float | None = None
    #: mantissa.json's record: {"dynamic_batch": True}, or False and the
    #: "static_reason" torch refused a dynamic batch for.
    dynamic_batch: dict[str, Any] = field(default_factory=dict)
    #: The names outputs_fn gave the step's user outputs, in the order the
    #: joint program returns them after the loss (mantissa.json's
    #: "user_outputs"); empty without outputs_fn.
    user_outputs: list[str] = field(default_factory=list)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _describe_batch(batch: Batch) -> str:
    entries = [(str(i), t) for i, t in enumerate(batch.args)] + list(batch.kwargs.items())
    return ", ".join(f"{key}: {str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
                     for key, t in entries)


def export_training_step(model: torch.nn.Module, batch: Any, out_dir: str, name: str, *,
                         loss_fn: LossFn | None = None, outputs_fn: OutputsFn | None = None,
                         reference_steps: int = 0,
                         lr: float = 1e-3, weight_decay: float = 0.01,
                         mantissa_compile: str | None = None) -> ExportResult:
    """mantissa.export.export_training_step, once torch is known to be recent."""
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"the model is a {type(model).__name__}, not a torch.nn.Module")
    model_name = type(model).__name__
    if not name or os.sep in name or name.startswith("."):
        raise ExportError(f"model {model_name}: NAME {name!r} must be a plain file name stem")
    if isinstance(reference_steps, bool) or not isinstance(reference_steps, int) or reference_steps < 0:
        raise ExportError(f"model {model_name}: reference_steps must be a count >= 0, "
                          f"not {reference_steps!r}")
    if outputs_fn is not None and not callable(outputs_fn):
        raise ExportError(f"model {model_name}: outputs_fn is a {type(outputs_fn).__name__}, "
                          "not a function of (output, batch)")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"model {model_name}: OUT_DIR {out_dir} exists and is not a folder")
    checked_batch = Batch(batch, model_name)
    supported = supported_operators(find_mantissa_compile(mantissa_compile))

    with deterministic_torch(), warnings.catch_warnings():
        # torch 2.11's own pytree code warns on every export; not the user's concern.
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        output_names: list[str] = []
        module = loss_returning_copy(model, loss_fn, model_name, list(checked_batch.kwargs),
                                     outputs_fn, output_names)
        try:
            eager = eager_step(module, checked_batch)
        except ExportError:
            raise
        except Exception as error:
            raise ExportError(f"model {model_name}: the forward and backward on the batch "
                              f"({_describe_batch(checked_batch)}) failed: "
                              f"{_first_line(error)}") from error

        non_trainable = {fqn: "requires_grad is False"
                         for fqn, p in module.named_parameters() if not p.requires_grad}
        for fqn in eager.no_gradient:
            # _export_forward_backward asserts on a parameter that requires a
            # gradient but gets none; it is state of the step, not trained.
            module.get_parameter(fqn).requires_grad_(False)
            non_trainable[fqn] = "receives no gradient from the loss"
        if not eager.gradients:
            raise ExportError(f"model {model_name}: no parameter receives a gradient from the loss")

        try:
            joint, operators, tied, module_paths, dynamic = _joint_program(
                module, checked_batch, model_name, supported, dynamic=True)
        except ExportError as error:
            # torch traced the dynamic batch but a later step (the joint
            # program, a decomposition) could not keep it: the static export.
            joint, operators, tied, module_paths, dynamic = _joint_program(
                module, checked_batch, model_name, supported, dynamic=False)
            dynamic["static_reason"] = str(error)
        signature = joint.graph_signature
        user_inputs = [spec.arg.name for spec in signature.input_specs
                       if spec.kind == InputKind.USER_INPUT]
        # torch.export takes the inputs in the batch's order; by name where
        # the graph kept the keys as input names.
        if sorted(user_inputs) == sorted(checked_batch.kwargs) and not checked_batch.args:
            tensors = [checked_batch.kwargs[name] for name in user_inputs]
        else:
            tensors = checked_batch.tensors()
        if len(user_inputs) != len(tensors):
            raise ExportError(f"model {model_name}: the graph has {len(user_inputs)} user inputs "
                              f"({', '.join(user_inputs)}) for {len(tensors)} batch tensors")
        gradient_fqns = [spec.target for spec in signature.output_specs
                         if spec.kind == OutputKind.GRADIENT_TO_PARAMETER]
        graph_outputs = [spec for spec in signature.output_specs
                         if spec.kind == OutputKind.USER_OUTPUT]
        if len(graph_outputs) != len(output_names):
            raise ExportError(f"model {model_name}: the joint program returns "
                              f"{len(graph_outputs)} user outputs beside the loss, not the "
                              f"{len(output_names)} of outputs_fn ({', '.join(output_names)})")
        _check_gradients_agree(module, gradient_fqns, eager.gradients, model_name)

        state = {fqn: t.detach().clone().contiguous() for fqn, t in model.state_dict().items()}
        graph_state = [spec.target for spec in signature.input_specs
                       if spec.kind == InputKind.PARAMETER
                       or spec.kind == InputKind.BUFFER and spec.persistent]
        missing = [fqn for fqn in graph_state if fqn not in state]
        if missing:
            raise ExportError(f"model {model_name}: the graph's state {missing} is not in the "
                              "model's state dict")
        trajectory = None
        if reference_steps:
            trajectory = adamw_trajectory(module, checked_batch, gradient_fqns, reference_steps,
                                          lr, weight_decay)

    dims = batch_dims(user_inputs, tensors)
    metadata = {
        "format": "mantissa.export/1",
        "exporter": {"package": "mantissa", "version": __version__},
        "torch": torch.__version__,
        "model": f"{type(model).__module__}.{type(model).__qualname__}",
        "user_inputs": user_inputs,
        "user_outputs": output_names,
        "batch_dims": dims,
        "non_trainable": non_trainable,
        "tied": tied,
        "module_paths": module_paths,
        **dynamic,
    }
    replaces = [name + suffix for suffix in _REFERENCE_SUFFIXES]
    with Staging(out_dir, name, replaces) as staging:
        torch.export.save(joint, staging.path(f"{name}.pt2"),
                          extra_files={"mantissa.json": json.dumps(metadata, indent=1)})
        save_file(state, staging.path(f"{name}.init.safetensors"))
        save_file({n: t.detach().clone().contiguous() for n, t in zip(user_inputs, tensors)},
                  staging.path(f"{name}.inputs.safetensors"))
        if trajectory is not None:
            gradients = {"loss": eager.loss}
            gradients.update({f"grad.{fqn}": eager.gradients[fqn] for fqn in gradient_fqns})
            save_file(gradients, staging.path(f"{name}.grads.safetensors"))
            save_file(trajectory.finals, staging.path(f"{name}.finals.safetensors"))
            with open(staging.path(f"{name}.traj.json"), "w") as out:
                json.dump({"steps": reference_steps, "lr": lr, "weight_decay": weight_decay,
                           "betas": list(BETAS), "eps": EPS, "torch": torch.__version__,
                           "model": metadata["model"], "non_trainable": non_trainable,
                           "arms": {trajectory.arm: {
                               "losses": trajectory.losses,
                               "norm_elements_moved": trajectory.norm_elements_moved}}},
                          out, indent=1)
        files = staging.commit()
    return ExportResult(files=files, user_inputs=user_inputs, batch_dims=dims,
                        operators=operators, non_trainable=non_trainable, tied=tied,
                        module_paths=module_paths, dynamic_batch=dynamic,
                        user_outputs=output_names,
                        parameter_count=sum(p.numel() for p in model.parameters()),
                        loss=float(eager.loss))


#: Operators left whole in the joint program. torch's CPU attention, when
#: core_aten_decompositions() breaks it up, becomes the math path in the
#: forward while the fused backward is kept and handed the attention
#: weights where its log-sum-exp belongs (torch 2.9 to 2.11): the graph is
#: then inconsistent (torch's own run of it computes wrong gradients) and
#: its attention no longer fuses on the GPU. Kept whole, forward and
#: backward are the fused pair with the real log-sum-exp: eager torch's
#: gradients exactly, and one attention kernel each on the GPU.
#: SiLU and GELU's gradient are one kernel each in eager torch, computed in
#: fp32 for bf16 and fp16 tensors and rounded once; decomposed, each of
#: their parts (2 and 19) is an op of its own, which `compute: bf16` then
#: rounds to bf16 (torch.autocast runs them in their inputs' bf16). Kept
#: whole, mantissa-compile's single ops compute in fp32 and round once, as
#: eager torch does. (SiLU's gradient never reaches the table: autograd
#: traces it as infinitely_differentiable_silu_backward's 7 ops.)
_KEPT_WHOLE = ("_scaled_dot_product_flash_attention_for_cpu", "silu", "gelu_backward")


def _decompositions():
    """torch.export's joint decompositions less the operators kept whole."""
    from torch._decomp import core_aten_decompositions
    table = core_aten_decompositions()
    for name in _KEPT_WHOLE:
        table.pop(getattr(torch.ops.aten, name).default, None)
    return table


def _forward_backward(forward: "torch.export.ExportedProgram"):
    """The joint program of `forward`: what
    torch.export.experimental._export_forward_backward does (torch 2.9 to
    2.11), with _decompositions() as the table. Where the installed torch
    lacks those private steps, its own _export_forward_backward."""
    from torch.export import experimental
    from torch.export import exported_program
    steps = (getattr(exported_program, "_decompose_exported_program", None),
             getattr(experimental, "_copy_graph_module_and_signature", None),
             getattr(experimental, "_remove_detach_pass", None))
    if not all(steps):
        return experimental._export_forward_backward(forward)
    decompose, copy_graph, remove_detach = steps
    program = decompose(forward, cia_to_decomp={},
                        python_decomp_table=_decompositions(),
                        joint_loss_index=0, decompose_custom_triton_ops=False)
    graph_module, signature = copy_graph(program)
    remove_detach(graph_module, signature)
    return program._update(graph_module, signature)


def _joint_program(module: torch.nn.Module, batch: Batch, model_name: str,
                   supported: set[str], dynamic: bool):
    """torch.export, then the joint program; refuses random operators and
    operators mantissa-compile does not import, naming node and module.
    Returns the joint program, its operator counts, the tied names (alias
    -> the name the graph reads) and how many nodes have a module path."""
    forward, dynamic = _export_forward(module, batch, model_name, dynamic)
    check_random(forward.graph, model_name, supported)
    tied = _untrain_unread_aliases(forward, module)
    fold_constants(forward)
    # Module paths come from the forward program with torch's decompositions
    # (module_paths.py); a model torch cannot decompose outside the joint
    # trace (GPT-2's Conv1D on a non-contiguous view) is exported without.
    try:
        decomposed = forward.run_decompositions(_decompositions())
        decomposition_error = None
    except Exception as error:
        decomposed, decomposition_error = None, _first_line(error)
    # Collected before _export_forward_backward, which rewrites `forward`.
    modules = operator_modules([forward.graph] + ([decomposed.graph] if decomposed else []))
    try:
        joint = _forward_backward(forward)
    except Exception as error:
        raise ExportError(f"model {model_name}: torch could not build the joint forward + "
                          f"backward program: {_first_line(error)}") from error
    nodes = sum(1 for node in joint.graph.nodes if node.op == "call_function")
    module_paths = {"nodes": nodes, "with_module": 0}
    if decomposed is not None:
        module_paths["with_module"] = restore_module_stacks(joint, decomposed)
    else:
        module_paths["not_restored"] = f"run_decompositions failed: {decomposition_error}"
    check_random(joint.graph, model_name, supported)
    checked = check_operators(joint.graph, supported)
    if checked.unsupported:
        sites = OperatorSites.of(joint.graph, modules)
        raise ExportError(unsupported_message(model_name, checked.unsupported, sites))
    return joint, checked.counts, tied, module_paths, dynamic


def _batch_dynamic_shapes(module: torch.nn.Module, batch: Batch):
    """torch.export's dynamic_shapes for `batch`: one shared Dim on the
    batch dimension of every batched tensor (batch.batch_dims decides which),
    so the program has one symbol, the micro-batch, that mantissa-compile
    binds (--micro-batch). Keyed by the forward's parameter names, as
    torch.export matches them. None where no tensor has a batch dimension."""
    tensors = batch.tensors()
    keys = [str(i) for i in range(len(batch.args))] + list(batch.kwargs)
    dims = batch_dims(keys, tensors)
    if all(dim is None for dim in dims.values()):
        return None
    size = torch.export.Dim("batch", min=1)
    spec = {key: ({dim: size} if dim is not None else None) for key, dim in dims.items()}
    bound = inspect.signature(module.forward).bind(*batch.args, **batch.kwargs)
    shapes, position = {}, 0
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            shapes[name] = tuple(spec[str(position + i)] for i in range(len(value)))
            position += len(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            shapes[name] = {key: spec[key] for key in value}
        elif name in batch.kwargs:
            shapes[name] = spec[name]
        else:
            shapes[name] = spec[str(position)]
            position += 1
    return shapes


def _export_forward(module: torch.nn.Module, batch: Batch, model_name: str, dynamic: bool):
    """torch.export with a dynamic batch dimension, or the static export
    where torch refuses it (a model that specialises on the batch size).
    Returns the program and mantissa.json's "dynamic_batch" record."""
    shapes = _batch_dynamic_shapes(module, batch) if dynamic else None
    if shapes is not None:
        try:
            forward = torch.export.export(module, batch.args, batch.kwargs, strict=False,
                                          dynamic_shapes=shapes)
            return forward, {"dynamic_batch": True}
        except Exception as error:
            reason = _first_line(error)
    else:
        reason = "no input has a batch dimension" if dynamic else "static export asked for"
    try:
        forward = torch.export.export(module, batch.args, batch.kwargs, strict=False)
    except Exception as error:
        raise ExportError(f"model {model_name}: torch.export could not trace it: "
                          f"{_first_line(error)}") from error
    return forward, {"dynamic_batch": False, "static_reason": reason}


def _untrain_unread_aliases(forward, module: torch.nn.Module) -> dict[str, str]:
    """Tied weights (a LM head sharing the embedding) are one Parameter under
    several names: torch.export lifts every name as an input but the graph
    reads only one of them, and `_export_forward_backward` asserts that the
    others get no gradient. Those unread names become inputs that need none;
    the archive still stores them tied to the read one, as the state dict has
    them."""
    names = {id(p): [] for p in module.parameters()}
    for fqn, parameter in module.named_parameters(remove_duplicate=False):
        names[id(parameter)].append(fqn)
    placeholders = {node.name: node for node in forward.graph.nodes if node.op == "placeholder"}
    specs = [spec for spec in forward.graph_signature.input_specs
             if spec.kind == InputKind.PARAMETER]
    read = {spec.target for spec in specs if placeholders[spec.arg.name].users}
    tied = {}
    for spec in specs:
        node = placeholders[spec.arg.name]
        value = node.meta.get("val")
        if node.users or value is None or not value.requires_grad:
            continue
        aliases = [fqn for fqn in names.get(id(module.get_parameter(spec.target)), ())
                   if fqn in read]
        if aliases:
            value.requires_grad_(False)
            tied[spec.target] = aliases[0]
    return tied


def _check_gradients_agree(module: torch.nn.Module, gradient_fqns: list[str],
                           eager: dict[str, torch.Tensor], model_name: str) -> None:
    """The joint program trains each parameter eager torch gives a gradient,
    once, under one of its names."""
    first_name = {}
    for fqn, parameter in module.named_parameters(remove_duplicate=False):
        first_name.setdefault(id(parameter), fqn)
    canonical = {fqn: first_name[id(p)] for fqn, p in module.named_parameters(remove_duplicate=False)}
    joint = [canonical[fqn] for fqn in gradient_fqns]
    torch_trained = {canonical[fqn] for fqn in eager}
    if len(set(joint)) != len(joint) or set(joint) != torch_trained:
        raise ExportError(
            f"model {model_name}: the joint program's gradients ({sorted(set(joint))}) are not "
            f"those of eager torch ({sorted(torch_trained)})")
