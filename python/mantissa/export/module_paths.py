"""Module paths (`nn_module_stack`) for the nodes of the joint program.

torch.export records for every node the module call it was traced in, but
`_export_forward_backward` loses it: `aot_export_module` traces the joint
graph once through an fx.Interpreter with `preserve_node_meta` (which keeps
the metadata), then traces that graph again with
`make_fx(flattened_joint, record_module_stack=True)`, calling it directly, so
every node of the result has an empty `nn_module_stack` (torch 2.9 to 2.11).
Without it, mantissa-compile and this exporter cannot say which module an
operator came from.

The forward part of the joint graph computes what the forward program with
torch's core ATen decompositions computes, and `run_decompositions` keeps
the metadata. So each joint node is matched structurally with a node of
that decomposed forward: the same operator on the same (matched) arguments,
looking through identities (alias, detach, clone) that one side has and the
other not. A match is exact, never a guess by name or position; nodes that
find none (the backward) keep no module path. Backward kernels
(`<op>_backward`) take the module of their forward `<op>` node (see
_backward_kernels).
"""

from __future__ import annotations

import operator
from collections import defaultdict, deque
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

# Operators whose result equals their first argument: autograd's tracing
# adds some to the joint graph's forward (alias, detach, clone before a
# view) and drops others, so matching looks through them on both sides.
_IDENTITIES = ("alias", "detach", "clone")


def _opname(target) -> str:
    return target._opname if isinstance(target, torch._ops.OpOverload) else ""


def _key(node: torch.fx.Node, resolve) -> Any:
    def normalise(value):
        if isinstance(value, torch.fx.Node):
            return ("node", resolve(value))
        if isinstance(value, (list, tuple)):
            return tuple(normalise(item) for item in value)
        if isinstance(value, dict):
            return tuple(sorted((k, normalise(v)) for k, v in value.items()))
        if isinstance(value, float):
            return ("float", repr(value))
        if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
            return ("torch", str(value))
        return value
    try:
        key = (node.target, normalise(node.args), normalise(node.kwargs))
        hash(key)
        return key
    except TypeError:  # an argument torch gives no hash: the node is not matched
        return None


def _is_identity(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and _opname(node.target) in _IDENTITIES and bool(node.args) \
        and isinstance(node.args[0], torch.fx.Node)


def _through_identities(node: torch.fx.Node) -> torch.fx.Node:
    while _is_identity(node):
        node = node.args[0]
    return node


def restore_module_stacks(joint: ExportedProgram, decomposed_forward: ExportedProgram) -> int:
    """Copies nn_module_stack from `decomposed_forward` onto the matching nodes
    of `joint`; returns how many call_function nodes got one."""
    forward_nodes = list(decomposed_forward.graph.nodes)
    placeholders = {node.name: node for node in forward_nodes if node.op == "placeholder"}
    identity = {node: index for index, node in enumerate(forward_nodes)}

    def forward_id(node):
        node = _through_identities(node)
        return identity.get(node, ("unmatched", id(node)))

    index: dict[Any, deque] = defaultdict(deque)
    for node in forward_nodes:
        if node.op == "call_function":
            key = _key(node, forward_id)
            if key is not None:
                index[key].append(node)

    matched: dict[torch.fx.Node, torch.fx.Node] = {}

    def resolve(node):
        return forward_id(matched[node]) if node in matched else ("unmatched", id(node))

    restored = 0
    for node in joint.graph.nodes:
        if node.op == "placeholder" and node.name in placeholders:
            matched[node] = placeholders[node.name]
        if node.op != "call_function":
            continue
        key = _key(node, resolve)
        candidates = index.get(key) if key is not None else None
        if not candidates:
            # An identity the forward program does not have stands for its
            # argument, without a module of its own.
            if _is_identity(node) and node.args[0] in matched:
                matched[node] = matched[node.args[0]]
            continue
        origin = candidates.popleft()
        matched[node] = origin
        stack = origin.meta.get("nn_module_stack")
        if stack:
            node.meta["nn_module_stack"] = dict(stack)
            restored += 1
    restored += _backward_kernels(joint.graph)
    return restored


def _backward_kernels(graph: torch.fx.Graph) -> int:
    """A backward kernel (`<op>_backward...`) without a module takes that of
    its forward `<op>` node: the one whose results it reads (the mask of
    native_dropout), else the one reading at least two of the same tensors
    (convolution's input and weight). Where the forward `<op>` was
    decomposed away (the CPU flash attention, whose backward stays one
    kernel), it takes the module all the forward tensors it reads come
    from, when they agree."""
    def source(arg):
        return arg.args[0] if arg.target is operator.getitem else arg

    restored = 0
    for node in graph.nodes:
        name = _opname(node.target)
        if node.op != "call_function" or "_backward" not in name or node.meta.get("nn_module_stack"):
            continue
        forward_name = name.split("_backward")[0]
        inputs = [source(arg) for arg in node.all_input_nodes]
        reads = [arg for arg in inputs if _opname(arg.target) == forward_name]
        if not reads:
            shared = {user for arg in inputs for user in arg.users
                      if _opname(user.target) == forward_name
                      and len(set(user.all_input_nodes) & set(inputs)) >= 2}
            reads = list(shared) if len(shared) == 1 else []
        stacks = [arg.meta.get("nn_module_stack") for arg in reads]
        if not reads:
            stacks = [arg.meta.get("nn_module_stack") for arg in inputs]
            paths = {list(stack.values())[-1][0] for stack in stacks if stack}
            stacks = [stack for stack in stacks if stack] if len(paths) == 1 else []
        if stacks and stacks[0]:
            node.meta["nn_module_stack"] = dict(stacks[0])
            restored += 1
    return restored
