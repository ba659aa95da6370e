#!/usr/bin/env python3
"""Exports a joint forward+backward training graph as a torch.export-style .pt2.

Mantissa's reference corpus (test/Inputs/corpus) is made by torch >= 2.9 with
`torch.export.experimental._export_forward_backward`. This tool produces the
same archive format with torch 1.13 (Debian's python3-torch), so that new op
families can be exercised where no recent torch runs:

  1. the joint program (the new value of every mutated buffer, the loss, the
     gradient of every parameter) is traced with `functorch.make_fx` of
     `torch.autograd.grad` over `torch.nn.utils.stateless.functional_call`,
     then retraced under `functorch.experimental.functionalize`;
  2. the fx graph is serialised as schema 8 `models/model.json` (the layout
     that lib/Import/Pt2Archive.cpp reads, copied from torch's
     torch/_export/serde/serialize.py) with the weights and constants as raw
     little-endian blobs;
  3. torch computes the reference numbers beside it (see `export_joint`).

Usage as a library (see test/Inputs/aten/make_models.py):

    export_joint(model, (x, y), out_dir, "name", mode="decomposed")

or from the command line with a factory returning (model, inputs):

    python3 export_joint.py pkg.module:factory OUT_DIR NAME [--mode raw]
        [--graph-only]

(--graph-only: only NAME.pt2, traced on the meta device, for models too
large to run here; see `export_graph`.)

Decomposition modes (recorded in model.json's graph_module.metadata, key
`mantissa_export_mode`, and at the top of M.graph.txt):

  raw         What make_fx emits. Backward ops with their own kernels stay
              whole: convolution_backward, native_batch_norm_backward,
              native_group_norm_backward, native_layer_norm_backward,
              gelu_backward, tanh_backward, threshold_backward,
              max_pool2d_with_indices_backward, avg_pool2d_backward,
              upsample_nearest2d_backward, _softmax_backward_data,
              _log_softmax_backward_data, nll_loss_forward/_backward,
              mse_loss/mse_loss_backward, embedding_dense_backward; so do
              forward helpers such as t, transpose.int, _unsafe_view,
              split.Tensor, unbind.int, silu and masked_fill.Scalar.
              CompositeImplicit ops are expanded by make_fx through their
              C++ kernels whatever the mode: silu_backward becomes sigmoid,
              empty_like, fill.Scalar, sub, add.Scalar and mul.
  decomposed  Everything on torch's core-ATen decomposition list
              (`CORE_ATEN_DECOMPOSITIONS`, which torch 2.11's export
              applies) that torch 1.13 can decompose, plus ones_like and
              zeros_like as full_like (`BACKPORTED_DECOMPOSITIONS`):
              gelu_backward into mul/exp/erf or tanh forms with
              `sub.Tensor(1, x)`, layer/group/batch norm backward into
              reductions and elementwise ops, the softmax and NLL backward
              into elementwise ops, gather and scatter, mse_loss into
              sub/pow/mean, t/transpose into permute, split into
              split_with_sizes, squeeze into squeeze.dims, silu into
              sigmoid. Left whole, as torch 2.11 leaves them: convolution,
              convolution_backward, native_layer_norm, native_group_norm,
              _native_batch_norm_legit_functional, max_pool2d_with_indices
              and its backward, avg_pool2d, upsample_nearest2d.vec,
              _softmax, _log_softmax, embedding, gelu. Left whole although
              torch 2.11 decomposes them, because torch 1.13 has no
              decomposition: avg_pool2d_backward, upsample_nearest2d_backward
              (all such entries: `MISSING_IN_TORCH_1_13`).

Both modes rewrite two torch 1.13 spellings to torch >= 2.0's: training
batch norm becomes `_native_batch_norm_legit_functional` (see
`_native_batch_norm`), and `_reshape_alias` becomes `view`.
"""

import argparse
import copy
import importlib
import inspect
import json
import math
import operator
import os
import warnings
import zipfile
from contextlib import contextmanager

import torch
import torch.fx
from functorch import make_fx
from functorch.experimental import functionalize
from torch._decomp import get_decompositions
from torch.nn.utils import stateless

from safetensors_file import save_safetensors, tensor_bytes as _tensor_bytes  # noqa: F401

aten = torch.ops.aten

if not torch.__version__.startswith("1.13"):
    # make_fx, functionalize and torch._decomp moved and changed in 2.0;
    # there, use torch.export itself (test/Inputs/corpus/export_corpus.py).
    warnings.warn(f"export_joint.py is written for torch 1.13, not {torch.__version__}")

#===----------------------------------------------------------------------===#
# Decomposition tables
#===----------------------------------------------------------------------===#

# torch/_decomp/__init__.py `_core_aten_decompositions_post_autograd` of
# torch >= 2.5 (what `ExportedProgram.run_decompositions()` applies), limited
# to the entries that could appear in a training graph of the op families
# Mantissa targets. Names are overload packets or "packet.overload".
CORE_ATEN_DECOMPOSITIONS = [
    "addcdiv", "addcmul", "addr", "avg_pool2d_backward", "baddbmm",
    "binary_cross_entropy", "binary_cross_entropy_backward",
    "binary_cross_entropy_with_logits", "clamp_max", "clamp_min", "detach",
    "dot", "elu", "elu_backward", "embedding_dense_backward", "empty_like",
    "expand_as", "fill", "gelu_backward", "glu", "glu_backward",
    "hardsigmoid", "hardsigmoid_backward", "hardswish", "hardswish_backward",
    "hardtanh_backward", "huber_loss", "huber_loss_backward", "index_add",
    "index_copy", "index_fill", "l1_loss", "leaky_relu_backward", "lerp",
    "logit", "logit_backward", "log_sigmoid_backward", "log_sigmoid_forward",
    "_log_softmax_backward_data", "logsumexp.default", "masked_fill", "mish",
    "mse_loss", "mse_loss_backward", "mv", "nan_to_num", "narrow",
    "native_batch_norm_backward", "native_dropout_backward",
    "native_group_norm_backward", "native_layer_norm_backward", "new_empty",
    "new_full", "new_ones", "new_zeros", "nll_loss2d_forward",
    "nll_loss2d_backward", "nll_loss_backward", "nll_loss_forward", "norm",
    "ones", "ones_like", "pixel_shuffle", "pixel_unshuffle", "_reshape_alias",
    "roll", "rsub", "select_backward", "select_scatter", "sigmoid_backward",
    "silu", "silu_backward", "slice_backward", "smooth_l1_loss",
    "smooth_l1_loss_backward", "_softmax_backward_data", "softplus",
    "softplus_backward", "split.Tensor", "squeeze.default", "squeeze.dim",
    "std", "std_mean", "stack", "sum.default", "t", "tanh_backward",
    "threshold", "threshold_backward", "transpose.int", "tril", "triu",
    "unbind", "unfold_backward", "_unsafe_view", "upsample_bilinear2d",
    "upsample_nearest2d_backward", "xlogy", "zero", "zeros", "zeros_like",
]


def _lookup_ops(names):
    """Resolves "packet" / "packet.overload" names; unknown ones are skipped."""
    ops = []
    for name in names:
        packet_name, _, overload = name.partition(".")
        packet = getattr(aten, packet_name, None)
        if packet is None:
            continue
        ops.append(getattr(packet, overload) if overload else packet)
    return ops


def _decomposition_table(names):
    return get_decompositions(_lookup_ops(names))


def _forward_given(**kwargs):
    return {key: value for key, value in kwargs.items() if value is not None}


def _ones_like(self, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return aten.full_like.default(self, 1, **_forward_given(
        dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
        memory_format=memory_format))


def _zeros_like(self, *, dtype=None, layout=None, device=None, pin_memory=None,
                memory_format=None):
    return aten.full_like.default(self, 0, **_forward_given(
        dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
        memory_format=memory_format))


def _sum_default(self, *, dtype=None):
    return aten.sum.dim_IntList(self, [], dtype=dtype)


# Decompositions that torch >= 2.0 has and 1.13 lacks, written as torch's
# refs do them (ones_like/zeros_like are full_like, as the corpus shows).
# sum.default replaces 1.13's own decomposition, which reaches
# prims.convert_element_type and prims.sum (not ATen ops); torch >= 2.0's
# is sum.dim_IntList over every dimension.
BACKPORTED_DECOMPOSITIONS = {
    aten.ones_like.default: _ones_like,
    aten.zeros_like.default: _zeros_like,
    aten.sum.default: _sum_default,
}


#===----------------------------------------------------------------------===#
# Training batch norm as torch >= 2.0 exports it
#===----------------------------------------------------------------------===#

# torch 1.13's native_batch_norm updates the running statistics inside its
# kernel, invisibly to functionalisation. torch >= 2.0 traces training batch
# norm as `_native_batch_norm_legit_functional`, which returns the new
# statistics as outputs 3 and 4. That op does not exist in 1.13, so it is
# defined here under another namespace (a CPU kernel that runs
# native_batch_norm on copies of the statistics) and serialised under its
# ATen name; native_batch_norm is rewritten to it plus copy_ ops into the
# buffers, which functionalisation turns into buffer_mutation outputs.
_LIBRARY = torch.library.Library("mantissa_export", "DEF")
_LIBRARY.define(
    "_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, "
    "Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) "
    "-> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)")


def _batch_norm_functional_kernel(input, weight, bias, running_mean, running_var, training,
                                  momentum, eps):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    out, save_mean, save_invstd = aten.native_batch_norm.default(
        input, weight, bias, new_mean, new_var, training, momentum, eps)
    return out, save_mean, save_invstd, new_mean, new_var


_LIBRARY.impl("_native_batch_norm_legit_functional", _batch_norm_functional_kernel, "CPU")
_BATCH_NORM_FUNCTIONAL = torch.ops.mantissa_export._native_batch_norm_legit_functional.default


def _native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """native_batch_norm as the stand-in plus the in-place statistics update
    it hides; runs below autograd, which still sees native_batch_norm (so the
    backward is native_batch_norm_backward, as in torch 2.11)."""
    if not training or running_mean is None or running_var is None:
        return NotImplemented  # nothing is mutated: keep the op whole
    out, save_mean, save_invstd, new_mean, new_var = _BATCH_NORM_FUNCTIONAL(
        input, weight, bias, running_mean, running_var, training, momentum, eps)
    running_mean.copy_(new_mean)
    running_var.copy_(new_var)
    return out, save_mean, save_invstd


# Applied in both modes and both traces; see the module docstring.
ALWAYS_DECOMPOSED = {aten.native_batch_norm.default: _native_batch_norm,
                     **_decomposition_table(["_reshape_alias"])}

# Entries of CORE_ATEN_DECOMPOSITIONS that torch 1.13 cannot decompose, so the
# "decomposed" mode keeps them whole where torch 2.11 would not.
MISSING_IN_TORCH_1_13 = sorted(
    name for name in CORE_ATEN_DECOMPOSITIONS
    if not _decomposition_table([name])
    and not any(op.overloadpacket.__name__ == name for op in BACKPORTED_DECOMPOSITIONS))

# Ops serialised under another name, with their arguments renamed: the
# prims that torch 1.13's decompositions reach, as the ATen op torch >= 2.0
# emits in their place, and the stand-in defined above.
SERIALIZED_AS = {
    torch.ops.prims.squeeze.default: ("torch.ops.aten.squeeze.dims",
                                      {"a": "self", "dimensions": "dim"}),
    _BATCH_NORM_FUNCTIONAL: ("torch.ops.aten._native_batch_norm_legit_functional.default", {}),
}

MODES = ("raw", "decomposed")

# Decompositions that torch 1.13 writes with view prims (prims.squeeze).
_VIEW_PRIM_DECOMPOSITIONS = set(_lookup_ops(["squeeze.default", "squeeze.dim"]))

#===----------------------------------------------------------------------===#
# Schema enums (torch/_export/serde/schema.py numbering, not c10's)
#===----------------------------------------------------------------------===#

SCALAR_TYPES = {
    torch.uint8: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4,
    torch.int64: 5, torch.float16: 6, torch.float32: 7, torch.float64: 8,
    torch.complex32: 9, torch.complex64: 10, torch.complex128: 11,
    torch.bool: 12, torch.bfloat16: 13,
}
LAYOUTS = {torch.sparse_coo: 1, torch.sparse_csr: 2, torch.sparse_csc: 3,
           torch.sparse_bsr: 4, torch.sparse_bsc: 5, torch._mkldnn: 6,
           torch.strided: 7}
MEMORY_FORMATS = {torch.contiguous_format: 1, torch.channels_last: 2,
                  torch.channels_last_3d: 3, torch.preserve_format: 4}
POSITIONAL, KEYWORD = 1, 2

SCHEMA_VERSION = {"major": 8, "minor": 17}

#===----------------------------------------------------------------------===#
# nn_module_stack recording
#===----------------------------------------------------------------------===#


class _ModuleStack:
    """Stamps `nn_module_stack` on every fx node created while a submodule's
    forward runs (make_fx in torch 1.13 records none). The stack is kept by
    forward hooks; nodes get it through a patched `fx.Graph.create_node`.
    While a GraphModule is retraced, `current` is set from the node being
    interpreted instead, so the stack survives the second trace."""

    def __init__(self):
        self.frames = []
        self.current = None

    # Hooks must return None, or they would replace the module's input/output.
    def _enter(self, path, kind):
        self.frames.append((path, kind))

    def _exit(self):
        self.frames.pop()

    def stack(self):
        if self.current is not None:
            return self.current
        return list(self.frames)

    @contextmanager
    def recording(self, model=None):
        handles = []
        if model is not None:
            for path, module in model.named_modules():
                if not path:
                    continue
                kind = f"{type(module).__module__}.{type(module).__qualname__}"
                handles.append(module.register_forward_pre_hook(
                    lambda _m, _i, path=path, kind=kind: self._enter(path, kind)))
                handles.append(module.register_forward_hook(lambda _m, _i, _o: self._exit()))
        original = torch.fx.Graph.create_node
        recorder = self

        def create_node(graph, op, target, *args, **kwargs):
            node = original(graph, op, target, *args, **kwargs)
            stack = recorder.stack()
            if op == "call_function" and stack:
                node.meta["nn_module_stack"] = list(stack)
            return node

        torch.fx.Graph.create_node = create_node
        try:
            yield
        finally:
            torch.fx.Graph.create_node = original
            for handle in handles:
                handle.remove()


class _MetaInterpreter(torch.fx.Interpreter):
    """Runs a GraphModule, exposing each node's nn_module_stack while its
    target runs (so that the nodes it produces in a retrace inherit it)."""

    def __init__(self, module, recorder):
        super().__init__(module)
        self.recorder = recorder

    def run_node(self, node):
        self.recorder.current = node.meta.get("nn_module_stack", [])
        try:
            return super().run_node(node)
        finally:
            self.recorder.current = None

#===----------------------------------------------------------------------===#
# Tracing
#===----------------------------------------------------------------------===#


def _parameter_aliases(model):
    """Unique parameters in named_parameters() order, each with every FQN it
    has (tied weights have several)."""
    unique, aliases = [], {}
    for module_path, module in model.named_modules(remove_duplicate=False):
        for name, param in module._parameters.items():
            if param is None:
                continue
            fqn = f"{module_path}.{name}" if module_path else name
            if id(param) not in aliases:
                aliases[id(param)] = []
                unique.append(param)
            if fqn not in aliases[id(param)]:
                aliases[id(param)].append(fqn)
    primary = dict(model.named_parameters())
    order = {id(p): i for i, p in enumerate(primary.values())}
    unique.sort(key=lambda p: order[id(p)])
    return [(aliases[id(p)], p) for p in unique]


def _buffers(model):
    """(fqn, tensor, persistent) for every buffer, in named_buffers() order."""
    result = []
    for fqn, buffer in model.named_buffers():
        module_path, _, name = fqn.rpartition(".")
        module = model.get_submodule(module_path) if module_path else model
        persistent = name not in getattr(module, "_non_persistent_buffers_set", set())
        result.append((fqn, buffer, persistent))
    return result


def _compute_loss(model, state, model_inputs, loss_fn, loss_inputs):
    output = stateless.functional_call(model, state, tuple(model_inputs))
    return output if loss_fn is None else loss_fn(output, *loss_inputs)


def trace_joint(model, model_inputs, loss_fn=None, loss_inputs=(), mode="decomposed"):
    """Traces loss, gradients and new buffer values into one functional fx
    graph. Returns (graph_module, parameter_aliases, buffers, arguments): the
    graph returns the loss, the gradients and every buffer's new value (see
    `_lift_buffer_updates`); arguments are fresh copies of its inputs.

    Pass 1 runs the model and torch.autograd.grad with the mode's
    decompositions applied below autograd (native_batch_norm's
    running-statistics update becomes visible copy_ ops). Pass 2 retraces
    that graph under functionalize (in-place updates of buffers turn into
    trailing copy_ ops into the placeholders, which `_lift_buffer_updates`
    turns into outputs) with the mode's decompositions."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    params = _parameter_aliases(model)
    buffers = _buffers(model)
    inputs = list(model_inputs) + list(loss_inputs)
    n_model_inputs = len(model_inputs)

    # torch.autograd.grad rather than functorch.grad_and_value: functorch's
    # grad transform expands CompositeImplicit backward ops (silu_backward)
    # through their C++ kernels above make_fx, out of the decompositions'
    # reach. The parameters are leaves that require grad.
    def joint(param_values, buffer_values, *input_values):
        state = {}
        for (fqns, _), value in zip(params, param_values):
            for fqn in fqns:
                state[fqn] = value
        for (fqn, _, _), value in zip(buffers, buffer_values):
            state[fqn] = value
        loss = _compute_loss(model, state, input_values[:n_model_inputs],
                             loss_fn, input_values[n_model_inputs:])
        grads = torch.autograd.grad(loss, list(param_values), allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, param_values)]
        return [loss, *grads, *buffer_values]

    def fresh_args(requires_grad=False):
        return ([p.detach().clone().requires_grad_(requires_grad) for _, p in params],
                [b.detach().clone() for _, b, _ in buffers],
                *[x.detach().clone() for x in inputs])

    table = dict(ALWAYS_DECOMPOSED)
    if mode == "decomposed":
        table.update(_decomposition_table(CORE_ATEN_DECOMPOSITIONS))
        table.update(BACKPORTED_DECOMPOSITIONS)

    # The table applies in the first trace already: make_fx expands
    # CompositeImplicit ops (silu_backward, ...) through their C++ kernels
    # unless a Python decomposition takes them first. Decompositions into
    # view prims wait for the second trace, below functionalisation (which
    # has no kernels for prims).
    first_table = {op: fn for op, fn in table.items() if op not in _VIEW_PRIM_DECOMPOSITIONS}
    recorder = _ModuleStack()
    with recorder.recording(model):
        first = make_fx(joint, decomposition_table=first_table)(*fresh_args(requires_grad=True))

    def retrace(*flat):
        return _MetaInterpreter(first, recorder).run(*flat)

    # Interpreter.run takes the flattened placeholders of the first graph.
    param_args, buffer_args, *input_args = fresh_args()
    flat_args = param_args + buffer_args + input_args
    with recorder.recording():
        second = make_fx(functionalize(retrace), decomposition_table=table)(*flat_args)
    # Tracing ran the program on flat_args, which updated their buffers.
    param_args, buffer_args, *input_args = fresh_args()
    return second, params, buffers, param_args + buffer_args + input_args


def _lift_buffer_updates(gm, n_params, n_buffers):
    """Removes the copy_ ops that functionalize appends to write mutated
    inputs back and checks that each one's value is the buffer's output.
    Returns the indices (among buffers) of the mutated ones."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph.nodes if n.op == "output")
    outputs = list(output.args[0])
    buffer_outputs = outputs[1 + n_params:]
    assert len(buffer_outputs) == n_buffers
    mutated = []
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.copy_.default \
                and node.args[0].op == "placeholder":
            index = placeholders.index(node.args[0]) - n_params
            if not 0 <= index < n_buffers:
                raise RuntimeError(f"the program mutates input '{node.args[0].name}', "
                                   "which is not a buffer; only buffer mutations are supported")
            if buffer_outputs[index] is not node.args[1] and buffer_outputs[index] is not node:
                raise RuntimeError(f"buffer {index}'s output is not the value copied into it")
            buffer_outputs[index] = node.args[1]
            node.replace_all_uses_with(node.args[1])
            graph.erase_node(node)
            mutated.append(index)
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
                and node.target._schema.is_mutable:
            raise RuntimeError(f"node '{node.name}' ({node.target}) still mutates its input "
                               "after functionalisation")
    # torch's joint programs (aot_export_module with trace_joint) return the
    # mutated buffers first, then the loss, then the gradients.
    kept = [buffer_outputs[i] for i in sorted(mutated)]
    output.args = (kept + outputs[:1 + n_params],)
    _rewrite_reshape_alias(gm)
    graph.eliminate_dead_code()
    gm.recompile()
    return sorted(mutated)


def _rewrite_reshape_alias(gm):
    """`_reshape_alias(x, size, stride)` of a contiguous result is
    `view(x, size)`, which is what torch >= 2.0 emits for reshape."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten._reshape_alias.default:
            size, stride = node.args[1], node.args[2]
            if list(stride) != _contiguous_strides(size):
                raise RuntimeError(f"node '{node.name}' is a non-contiguous _reshape_alias")
            node.target = aten.view.default
            node.args = (node.args[0], list(size))


def _contiguous_strides(size):
    strides, running = [], 1
    for extent in reversed(list(size)):
        strides.append(running)
        running *= max(int(extent), 1)
    return list(reversed(strides))


class _ValueRecorder(torch.fx.Interpreter):
    """Runs the final graph on real inputs and keeps every node's value in
    node.meta["val"] (make_fx of real tensors records no values), which gives
    the tensor metadata to serialise and the graph's own outputs to check."""

    def run_node(self, node):
        result = super().run_node(node)
        node.meta["val"] = result
        return result


#===----------------------------------------------------------------------===#
# Serialisation of the graph (torch/_export/serde/serialize.py, schema 8)
#===----------------------------------------------------------------------===#


def _tensor_meta(value, requires_grad=False):
    return {
        "dtype": SCALAR_TYPES[value.dtype],
        "sizes": [{"as_int": int(s)} for s in value.shape],
        "requires_grad": bool(requires_grad),
        "device": {"type": value.device.type, "index": value.device.index},
        "strides": [{"as_int": int(s)} for s in value.stride()],
        "storage_offset": {"as_int": int(value.storage_offset())},
        "layout": LAYOUTS[value.layout],
    }


def _float(value):
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def _element_type(schema_type):
    """The element type of a (possibly optional) list type, else None."""
    if isinstance(schema_type, torch.OptionalType):
        schema_type = schema_type.getElementType()
    if isinstance(schema_type, torch.ListType):
        element = schema_type.getElementType()
        if isinstance(element, torch.OptionalType):
            element = element.getElementType()
        return element
    return None


class _GraphSerializer:
    def __init__(self, gm, names):
        self.gm = gm
        self.names = names  # fx node -> tensor name
        self.tensor_values = {}

    def tensor(self, node):
        return {"name": self.names[node]}

    def argument(self, value, schema_type):
        """One schema `Argument` union for a node input. Python numbers in
        Tensor positions stay numbers (as torch.export writes them)."""
        if isinstance(value, torch.fx.Node):
            return {"as_tensor": self.tensor(value)}
        if value is None:
            return {"as_none": True}
        if isinstance(value, bool):
            return {"as_bool": value}
        if isinstance(value, int):
            return {"as_int": value}
        if isinstance(value, float):
            return {"as_float": _float(value)}
        if isinstance(value, str):
            return {"as_string": value}
        if isinstance(value, torch.dtype):
            return {"as_scalar_type": SCALAR_TYPES[value]}
        if isinstance(value, torch.layout):
            return {"as_layout": LAYOUTS[value]}
        if isinstance(value, torch.memory_format):
            return {"as_memory_format": MEMORY_FORMATS[value]}
        if isinstance(value, torch.device):
            return {"as_device": {"type": value.type, "index": value.index}}
        if isinstance(value, (list, tuple)):
            values = list(value)
            if not values:
                element = _element_type(schema_type)
                key = {torch.BoolType: "as_bools", torch.IntType: "as_ints",
                       torch.FloatType: "as_floats", torch.StringType: "as_strings",
                       torch.TensorType: "as_tensors"}.get(type(element))
                if key is None:
                    raise TypeError(f"empty list of {schema_type} is not supported")
                return {key: []}
            if all(isinstance(v, bool) for v in values):
                return {"as_bools": values}
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return {"as_ints": values}
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                return {"as_floats": [_float(float(v)) for v in values]}
            if all(isinstance(v, torch.fx.Node) for v in values):
                return {"as_tensors": [self.tensor(v) for v in values]}
            if all(isinstance(v, torch.fx.Node) or v is None for v in values):
                return {"as_optional_tensors": [
                    {"as_none": True} if v is None else {"as_tensor": self.tensor(v)}
                    for v in values]}
        raise TypeError(f"cannot serialise argument {value!r} of type {schema_type}")

    def inputs(self, node):
        schema = node.target._schema
        renames = SERIALIZED_AS.get(node.target, (None, {}))[1]
        named = []
        for position, argument in enumerate(schema.arguments):
            if argument.name in node.kwargs:
                value = node.kwargs[argument.name]
            elif not argument.kwarg_only and position < len(node.args):
                value = node.args[position]
            else:
                continue  # left at the schema default, as torch does
            named.append({"name": renames.get(argument.name, argument.name),
                          "arg": self.argument(value, argument.type),
                          "kind": KEYWORD if argument.kwarg_only else POSITIONAL})
        return named

    def record(self, name, value):
        self.tensor_values[name] = _tensor_meta(value)

    def outputs(self, node):
        """Output arguments: the node's own name for a single Tensor return,
        else the names of its getitem users (or `<node>_unused_<i>`)."""
        returns = node.target._schema.returns
        value = node.meta["val"]
        if len(returns) == 1 and isinstance(returns[0].type, torch.TensorType):
            self.record(self.names[node], value)
            return [{"as_tensor": self.tensor(node)}]
        getitems = {}
        for user in node.users:
            if user.op == "call_function" and user.target is operator.getitem:
                getitems.setdefault(user.args[1], user)
        if len(returns) == 1 and isinstance(returns[0].type, torch.ListType):
            items = []
            for index, item in enumerate(value):
                user = getitems.get(index)
                name = (self.names[user] if user is not None
                        else f"{self.names[node]}_unused_0_{index}")
                self.record(name, item)
                items.append({"name": name})
            return [{"as_tensors": items}]
        result = []
        for index, item in enumerate(value):
            if item is None:
                result.append({"as_none": True})
                continue
            user = getitems.get(index)
            name = self.names[user] if user is not None else f"{self.names[node]}_unused_{index}"
            self.record(name, item)
            result.append({"as_tensor": {"name": name}})
        return result

    def node(self, node):
        entry = {"target": _op_target(node.target),
                 "inputs": self.inputs(node),
                 "outputs": self.outputs(node),
                 "metadata": {},
                 "is_hop_single_tensor_return": None,
                 "name": node.name}
        stack = node.meta.get("nn_module_stack")
        if stack:
            entry["metadata"]["nn_module_stack"] = ";".join(
                f"{path},{path},{kind}" for path, kind in stack)
        return entry


def _op_target(op):
    """"torch.ops.aten.<packet>.<overload>" for an OpOverload."""
    if op in SERIALIZED_AS:
        return SERIALIZED_AS[op][0]
    return f"torch.ops.{op.namespace}.{op._schema.name.split('::')[1]}.{op._overloadname}"


def serialize_program(gm, params, buffers, mutated, input_names, mode):
    """The `models/model.json` document and the stored tensors.

    Returns (model_json, weights, constants) where weights/constants map an
    FQN to (tensor, is_param)."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    n_params, n_buffers = len(params), len(buffers)
    names = {}
    input_specs, graph_inputs = [], []
    weights, constants = {}, {}

    taken = set()

    def placeholder_name(prefix, fqn):
        # As torch.export names them; "a.b_c" and "a_b.c" both give "p_a_b_c",
        # which fx's namespace makes unique with a suffix.
        base = name = prefix + fqn.replace(".", "_")
        suffix = 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        return name

    for (fqns, param), node in zip(params, placeholders[:n_params]):
        names[node] = placeholder_name("p_", fqns[0])
        input_specs.append({"parameter": {"arg": {"name": names[node]},
                                          "parameter_name": fqns[0]}})
        for fqn in fqns:
            weights[fqn] = (param, True)
    buffer_placeholders = placeholders[n_params:n_params + n_buffers]
    for (fqn, buffer, persistent), node in zip(buffers, buffer_placeholders):
        names[node] = placeholder_name("b_", fqn)
        input_specs.append({"buffer": {"arg": {"name": names[node]}, "buffer_name": fqn,
                                       "persistent": persistent}})
        (weights if persistent else constants)[fqn] = (buffer, False)
    for name, node in zip(input_names, placeholders[n_params + n_buffers:]):
        names[node] = name = placeholder_name("", name)
        input_specs.append({"user_input": {"arg": {"as_tensor": {"name": name}}}})

    # Tensor constants that the trace captured become lifted inputs, placed
    # after the buffers as torch.export orders them.
    lifted = []
    for node in graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            fqn = f"lifted_tensor_{len(lifted)}"
            names[node] = placeholder_name("c_", fqn)
            lifted.append({"tensor_constant": {"arg": {"name": names[node]},
                                               "tensor_constant_name": fqn}})
            constants[fqn] = (value, False)
            node.meta.setdefault("val", value)
    input_specs[n_params + n_buffers:n_params + n_buffers] = lifted

    # Operator nodes keep make_fx's names unless an input took the name.
    input_names_taken = set(names.values())
    used = input_names_taken | {n.name for n in graph.nodes if n.op == "call_function"}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = node.name
        if name in input_names_taken:
            suffix = 1
            while f"{node.name}_{suffix}" in used:
                suffix += 1
            name = f"{node.name}_{suffix}"
            used.add(name)
        names[node] = name
    # The fx graph takes the archive's names too, so that M.graph.txt reads
    # like model.json.
    for node, name in names.items():
        node.name = name
        if node.op == "placeholder":
            node.target = name
    gm.recompile()

    serializer = _GraphSerializer(gm, names)
    for spec in input_specs:
        kind, body = next(iter(spec.items()))
        name = body["arg"]["as_tensor"]["name"] if kind == "user_input" else body["arg"]["name"]
        graph_inputs.append({"as_tensor": {"name": name}})
    for node in placeholders:
        serializer.tensor_values[names[node]] = _tensor_meta(
            node.meta["val"], requires_grad=node in placeholders[:n_params])
    for node in graph.nodes:
        if node.op == "get_attr":
            serializer.tensor_values[names[node]] = _tensor_meta(node.meta["val"])

    nodes = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if not isinstance(node.target, torch._ops.OpOverload) or (
                node.target.namespace != "aten" and node.target not in SERIALIZED_AS):
            raise RuntimeError(f"node '{node.name}' calls {node.target}, not an ATen op")
        nodes.append(serializer.node(node))

    output = next(n for n in graph.nodes if n.op == "output")
    results = list(output.args[0])
    output_specs = []
    for index, node in zip(mutated, results):
        output_specs.append({"buffer_mutation": {"arg": {"name": names[node]},
                                                 "buffer_name": buffers[index][0]}})
    results = results[len(mutated):]
    output_specs.append({"loss_output": {"arg": {"name": names[results[0]]}}})
    for (fqns, _), node in zip(params, results[1:]):
        output_specs.append({"gradient_to_parameter": {"arg": {"name": names[node]},
                                                       "parameter_name": fqns[0]}})
    graph_outputs = [{"as_tensor": {"name": names[node]}} for node in output.args[0]]

    model_json = {
        "graph_module": {
            "graph": {
                "inputs": graph_inputs,
                "outputs": graph_outputs,
                "nodes": nodes,
                "tensor_values": serializer.tensor_values,
                "sym_int_values": {},
                "sym_bool_values": {},
                "is_single_tensor_return": False,
                "custom_obj_values": {},
                "sym_float_values": {},
            },
            "signature": {"input_specs": input_specs, "output_specs": output_specs},
            "module_call_graph": [{"fqn": "", "signature": None}],
            "metadata": {"mantissa_exporter": "tools/pt2-export/export_joint.py",
                         "mantissa_export_mode": mode},
            "treespec_namedtuple_fields": {},
        },
        "opset_version": {"aten": 10},
        "range_constraints": {},
        "schema_version": SCHEMA_VERSION,
        "verifiers": ["ATEN"],
        "torch_version": torch.__version__,
        "guards_code": [],
    }
    return model_json, weights, constants

#===----------------------------------------------------------------------===#
# Files
#===----------------------------------------------------------------------===#


def _payload_config(tensors, prefix):
    """(config json, {blob name: bytes}); tied tensors share one blob."""
    config, blobs, blob_of_storage = {}, {}, {}
    for fqn, (tensor, is_param) in tensors.items():
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if key not in blob_of_storage:
            blob_of_storage[key] = f"{prefix}_{len(blob_of_storage)}"
            blobs[blob_of_storage[key]] = _tensor_bytes(tensor)
        meta = _tensor_meta(tensor.contiguous(), requires_grad=is_param)
        config[fqn] = {"path_name": blob_of_storage[key], "is_param": is_param,
                       "use_pickle": False, "tensor_meta": meta}
    return {"config": config}, blobs


def write_pt2(path, archive_name, model_json, weights, constants):
    """Writes the zip layout of torch/export/pt2_archive/_package.py."""
    weights_config, weight_blobs = _payload_config(weights, "weight")
    constants_config, constant_blobs = _payload_config(constants, "tensor")
    entries = []
    for name, data in weight_blobs.items():
        entries.append((f"data/weights/{name}", data))
    entries.append(("data/weights/model_weights_config.json", json.dumps(weights_config)))
    for name, data in constant_blobs.items():
        entries.append((f"data/constants/{name}", data))
    entries.append(("data/constants/model_constants_config.json", json.dumps(constants_config)))
    # Compact separators keep the test archives small; the reader does not care.
    entries.append(("models/model.json", json.dumps(model_json, separators=(",", ":"))))
    entries += [("archive_format", "pt2"), ("archive_version", "0"),
                (".data/version", "6"), ("byteorder", "little")]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(f"{archive_name}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data.encode() if isinstance(data, str) else data)



#===----------------------------------------------------------------------===#
# Reference numbers from torch
#===----------------------------------------------------------------------===#


def _eager_loss(model, model_inputs, loss_fn, loss_inputs):
    output = model(*model_inputs)
    return output if loss_fn is None else loss_fn(output, *loss_inputs)


def _is_norm_weight(fqn):
    # The rule of export_corpus.py.
    return "norm" in fqn or fqn.startswith("ln") or ".ln_" in fqn


def reference_numbers(make_model, model_inputs, loss_fn, loss_inputs, init, steps, lr, arms):
    """Loss and gradients at `init`, then AdamW trajectories per arm, exactly
    as test/Inputs/corpus/export_corpus.py computes them."""
    model = make_model()
    model.load_state_dict(init)
    loss = _eager_loss(model, model_inputs, loss_fn, loss_inputs)
    loss.backward()
    grads = {"loss": loss.detach().reshape(1)}
    for fqn, param in model.named_parameters():
        grads[f"grad.{fqn}"] = param.grad.detach().clone()

    trajectories, finals = {}, {}
    for arm in arms:
        model = make_model()
        model.load_state_dict(init)
        inputs, targets = list(model_inputs), list(loss_inputs)
        if arm != "fp32":
            model = model.to(torch.bfloat16)
            inputs = [x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs]
            targets = [x.to(torch.bfloat16) if x.is_floating_point() else x for x in targets]
        params = list(model.parameters())
        if arm == "bf16_master":
            masters = [p.detach().float().clone().requires_grad_(True) for p in params]
            optimizer = torch.optim.AdamW(masters, lr=lr, weight_decay=0.01, foreach=False)
        else:
            optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=False)
        losses = []
        for _ in range(steps):
            for p in params:
                p.grad = None
            step_loss = _eager_loss(model, inputs, loss_fn, targets)
            step_loss.backward()
            losses.append(float(step_loss))
            if arm == "bf16_master":
                for p, master in zip(params, masters):
                    master.grad = p.grad.float()
                optimizer.step()
                with torch.no_grad():
                    for p, master in zip(params, masters):
                        p.copy_(master)
            else:
                optimizer.step()
        moved = {}
        for fqn, param in model.named_parameters():
            if _is_norm_weight(fqn):
                moved[fqn] = int((param.detach().float() != init[fqn].float()).sum())
        trajectories[arm] = {"losses": losses, "norm_elements_moved": moved}
        for fqn, param in model.named_parameters():
            finals[f"{arm}.{fqn}"] = param.detach().float().clone()
    traj = {"steps": steps, "lr": lr, "weight_decay": 0.01, "betas": [0.9, 0.999],
            "eps": 1e-8, "arms": trajectories}
    return grads, traj, finals

#===----------------------------------------------------------------------===#
# Entry point
#===----------------------------------------------------------------------===#


def joint_ops(gm):
    """The sorted set of "torch.ops.aten.<op>.<overload>" targets."""
    return sorted({_op_target(n.target) for n in gm.graph.nodes
                   if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)})


def _input_names(model, count, loss_fn):
    try:
        names = [p for p in inspect.signature(model.forward).parameters]
    except (TypeError, ValueError):
        names = []
    if loss_fn is not None:
        try:
            names = names + [p for p in inspect.signature(loss_fn).parameters][1:]
        except (TypeError, ValueError):
            pass
    names = names[:count]
    return names + [f"input_{i}" for i in range(len(names), count)]


def _relative_error(actual, expected, floor=1e-3):
    """max|a - e| / max(max|e|, floor): compare_safetensors.py's measure,
    except that a tensor which is zero in exact arithmetic (the bias of a
    convolution followed by batch norm) is measured against `floor`
    rather than against its rounding noise."""
    if not expected.numel():
        return 0.0
    scale = max(expected.abs().max().item(), floor)
    return (actual.float() - expected.float()).abs().max().item() / scale


def _stored_state(model):
    """The model's parameters and buffers by FQN, as the archive stores them:
    one copy per storage, so that tied weights (an embedding shared with the
    head) stay one blob, as torch.export.save stores them."""
    copies = {}

    def copy_of(value):
        key = (value.data_ptr(), value.dtype, tuple(value.shape), tuple(value.stride()))
        if key not in copies:
            copies[key] = value.detach().clone()
        return copies[key]

    stored = {fqn: copy_of(value) for fqn, value in model.state_dict().items()}
    stored.update({fqn: copy_of(value) for fqn, value in model.named_buffers()})
    return stored


def export_joint(model, model_inputs, out_dir, name, mode="decomposed", loss_fn=None,
                 loss_inputs=(), make_model=None, steps=20, lr=1e-3, arms=("fp32",),
                 input_names=None, check_tolerance=1e-4):
    """Writes NAME.pt2, .init/.inputs/.grads/.finals.safetensors, .traj.json
    and .graph.txt into OUT_DIR. Returns a summary: the joint graph's ATen op
    set ("ops"), the mutated buffers and the largest relative error of the
    traced graph's outputs (run by torch.fx on the same inputs) against
    torch's eager loss, gradients and buffer updates ("self_check_error";
    above `check_tolerance` raises, since it means the trace is wrong).

    `model(*model_inputs)` is the loss, or `loss_fn(model(*model_inputs),
    *loss_inputs)` when loss_fn is given. `make_model()` must rebuild the
    architecture (its weights are replaced by the initial state_dict); by
    default the model is deep-copied. The weights inside the archive are the
    initial state_dict, the same values as NAME.init.safetensors."""
    os.makedirs(out_dir, exist_ok=True)
    model.train()
    init = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    template = copy.deepcopy(model)
    make_model = make_model or (lambda: copy.deepcopy(template))
    all_inputs = list(model_inputs) + list(loss_inputs)
    input_names = input_names or _input_names(model, len(all_inputs), loss_fn)

    gm, params, buffers, flat_args = trace_joint(model, model_inputs, loss_fn, loss_inputs, mode)
    mutated = _lift_buffer_updates(gm, len(params), len(buffers))
    graph_results = _ValueRecorder(gm).run(*flat_args)
    grads, traj, finals = reference_numbers(make_model, model_inputs, loss_fn, loss_inputs,
                                            init, steps, lr, arms)

    # The traced graph must compute what torch computes eagerly.
    eager = make_model()
    eager.load_state_dict(init)
    _eager_loss(eager, model_inputs, loss_fn, loss_inputs)
    eager_buffers = dict(eager.named_buffers())
    expected = [eager_buffers[buffers[i][0]] for i in mutated]
    expected += [grads["loss"].reshape(())]
    expected += [grads[f"grad.{fqns[0]}"] for fqns, _ in params]
    labels = [f"buffer.{buffers[i][0]}" for i in mutated]
    labels += ["loss"] + [f"grad.{fqns[0]}" for fqns, _ in params]
    errors = {label: _relative_error(a.reshape(e.shape), e)
              for label, a, e in zip(labels, graph_results, expected)}
    error = max(errors.values())
    if error > check_tolerance:
        worst = max(errors, key=errors.get)
        raise RuntimeError(f"{name}: the traced graph differs from eager torch "
                           f"(relative error {error:.3e} in {worst})")

    # Tracing ran on copies, so the model still holds the initial values.
    stored = _stored_state(model)
    model_json, weights, constants = serialize_program(
        gm, params, buffers, mutated, input_names, mode)
    weights = {fqn: (stored[fqn], is_param) for fqn, (_, is_param) in weights.items()}
    constants = {fqn: (stored.get(fqn, value), is_param)
                 for fqn, (value, is_param) in constants.items()}
    write_pt2(os.path.join(out_dir, f"{name}.pt2"), name, model_json, weights, constants)

    with open(os.path.join(out_dir, f"{name}.graph.txt"), "w") as out:
        out.write(f"# {name}: joint forward+backward graph traced by torch {torch.__version__}"
                  f" make_fx, mode={mode}\n# (tools/pt2-export/export_joint.py). Outputs: "
                  f"{len(mutated)} buffer mutations, the loss, {len(params)} gradients.\n"
                  "# torch.ops.mantissa_export.<op> is serialised as torch.ops.aten.<op>, "
                  "torch.ops.prims.squeeze as torch.ops.aten.squeeze.dims.\n")
        out.write(gm.code.strip() + "\n")
    save_safetensors(init, os.path.join(out_dir, f"{name}.init.safetensors"))
    save_safetensors({f"input.{i}": x.detach().contiguous() for i, x in enumerate(all_inputs)},
                     os.path.join(out_dir, f"{name}.inputs.safetensors"))
    save_safetensors(grads, os.path.join(out_dir, f"{name}.grads.safetensors"))
    save_safetensors(finals, os.path.join(out_dir, f"{name}.finals.safetensors"))
    with open(os.path.join(out_dir, f"{name}.traj.json"), "w") as out:
        json.dump(traj, out, indent=1)
    return {"ops": joint_ops(gm), "mutated_buffers": [buffers[i][0] for i in mutated],
            "self_check_error": error, "self_check": errors, "mode": mode}


def export_graph(model, model_inputs, path, name, mode="decomposed", loss_fn=None,
                 loss_inputs=()):
    """Writes only the archive at PATH, its graph traced on the meta device:
    shapes and dtypes without arithmetic, so that a model far too large to
    run on this machine's CPU (the ~120M LLaMA at 8 x 512 tokens) exports in
    seconds, for the compiler and its cost model. No reference numbers, no
    self-check (there are no values); the weights inside are the model's
    own, as export_joint stores them."""
    model.train()
    meta_model = copy.deepcopy(model).to("meta")
    meta_inputs = [x.to("meta") for x in model_inputs]
    meta_loss_inputs = [x.to("meta") for x in loss_inputs]
    gm, params, buffers, flat_args = trace_joint(meta_model, meta_inputs, loss_fn,
                                                 meta_loss_inputs, mode)
    mutated = _lift_buffer_updates(gm, len(params), len(buffers))
    _ValueRecorder(gm).run(*flat_args)
    input_names = _input_names(model, len(model_inputs) + len(loss_inputs), loss_fn)
    model_json, weights, constants = serialize_program(
        gm, params, buffers, mutated, input_names, mode)

    # The program as traced on the CPU: every device (of a tensor's
    # metadata, of an op's `device` argument) the CPU, not meta.
    def on_cpu(node):
        if isinstance(node, list):
            for item in node:
                on_cpu(item)
        elif isinstance(node, dict):
            for key, item in node.items():
                if key in ("device", "as_device") and isinstance(item, dict) and \
                        item.get("type") == "meta":
                    item["type"] = "cpu"
                else:
                    on_cpu(item)

    on_cpu(model_json)
    stored = _stored_state(model)
    def real(fqn, value):
        if fqn in stored:
            return stored[fqn]
        if value.device.type == "meta":
            raise RuntimeError(f"{name}: the constant {fqn} exists only on the meta "
                               "device (the model makes it while it runs); export the "
                               "model with export_joint instead")
        return value

    weights = {fqn: (real(fqn, value), is_param) for fqn, (value, is_param) in weights.items()}
    constants = {fqn: (real(fqn, value), is_param)
                 for fqn, (value, is_param) in constants.items()}
    write_pt2(path, name, model_json, weights, constants)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("factory", help="module:function returning (model, inputs) or "
                                        "(model, inputs, loss_fn, loss_inputs)")
    parser.add_argument("out_dir")
    parser.add_argument("name")
    parser.add_argument("--mode", choices=MODES, default="decomposed")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--graph-only", action="store_true",
                        help="write only OUT_DIR/NAME.pt2, traced on the meta device "
                             "(no reference numbers; see export_graph)")
    args = parser.parse_args(argv)
    module_name, _, function_name = args.factory.partition(":")
    made = getattr(importlib.import_module(module_name), function_name)()
    model, inputs = made[0], made[1]
    loss_fn = made[2] if len(made) > 2 else None
    loss_inputs = made[3] if len(made) > 3 else ()
    torch.manual_seed(0)
    if args.graph_only:
        os.makedirs(args.out_dir, exist_ok=True)
        export_graph(model, inputs, os.path.join(args.out_dir, f"{args.name}.pt2"),
                     args.name, mode=args.mode, loss_fn=loss_fn, loss_inputs=loss_inputs)
        return
    summary = export_joint(model, inputs, args.out_dir, args.name, mode=args.mode,
                           loss_fn=loss_fn, loss_inputs=loss_inputs, steps=args.steps)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
