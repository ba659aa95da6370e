"""Input-independent floating-point subgraphs, computed by torch at export.

Models compute tables that depend on no input, parameter or buffer: the
timestep sinusoid's frequencies `exp(-ln(10000) * arange(n) / n)` (DiT, SD3,
Flux), LTX-Video's rotary angles `10000 ** linspace(0, 1, n) * grid`. torch
computes them with its own vectorised kernels, which are accurate to an ulp
but not correctly rounded (its fp32 `exp` differs from the correctly rounded
value in 3 of DiT's 128 frequencies; its eager `linspace` rounds lanes as
`base + lane * step`, which the decomposed graph does not). Multiplied by
timesteps up to 1000 or by coordinates up to 1e5, one ulp of such a table
becomes 1e-5 to 1e-3 of a gradient. Folded here, before the joint program is
traced, the table is a constant of the program holding torch's own bits, so
the step imported from it computes what the user's torch computes.

Only floating results are folded: integer and boolean tables (positions,
masks) are exact whoever computes them and stay operators the importer can
recognise. A folded table is at most MAX_FOLDED_ELEMENTS elements, so a
large constant cannot grow the archive; larger ones stay in the graph.
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

#: The largest table folded (elements): the sinusoid tables are 10^2 to 10^4.
MAX_FOLDED_ELEMENTS = 1 << 20

#: The prefix of every folded constant's name in the program.
FOLDED_PREFIX = "_mantissa_folded_"


def _written(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Nodes an in-place operator writes (`torch.empty(8).uniform_()`): not
    constants, whatever computes them."""
    written = set()
    for node in graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        for index, argument in enumerate(target._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
            if isinstance(value, torch.fx.Node):
                written.add(value)
    return written


def _foldable(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    # Uninitialised memory: its values are whatever torch's allocator holds.
    if target._opname.startswith(("empty", "new_empty")):
        return False
    return all(isinstance(r.type, torch.TensorType) for r in schema.returns) and len(schema.returns) == 1


def _concrete(value) -> bool:
    """A tensor of known (not symbolic) shape."""
    return isinstance(value, torch.Tensor) and all(isinstance(s, int) for s in value.shape)


def fold_constants(program: "torch.export.ExportedProgram") -> list[str]:
    """Replaces each maximal input-independent floating subgraph of
    `program` (in place) by a lifted tensor constant computed by eager torch.
    Returns the folded constants' names."""
    graph = program.graph_module.graph
    signature = program.graph_signature
    constant_inputs = {spec.arg.name: spec.target for spec in signature.input_specs
                       if spec.kind == InputKind.CONSTANT_TENSOR}
    values: dict[torch.fx.Node, torch.Tensor] = {}
    written = _written(graph)
    for node in graph.nodes:
        if node.op == "placeholder":
            if node.name in constant_inputs:
                values[node] = program.constants[constant_inputs[node.name]]
            continue
        if node in written or not _foldable(node) or not _concrete(node.meta.get("val")):
            continue
        if any(input_node not in values for input_node in node.all_input_nodes):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: values[n])
        with torch.no_grad():
            values[node] = node.target(*args, **kwargs)

    def boundary(node: torch.fx.Node) -> bool:
        value = values[node]
        return (node.op == "call_function" and value.is_floating_point()
                and value.numel() <= MAX_FOLDED_ELEMENTS
                and any(user not in values for user in node.users))

    folded = [node for node in values if boundary(node)]
    if not folded:
        return []
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    # Lifted constants come after parameters and buffers, before user inputs:
    # the graph's placeholders and the signature's input specs in one order.
    specs = list(signature.input_specs)
    position = next((i for i, spec in enumerate(specs) if spec.kind == InputKind.USER_INPUT),
                    len(specs))
    anchor = placeholders[position] if position < len(placeholders) else None
    names = []
    for index, node in enumerate(folded):
        name = f"{FOLDED_PREFIX}{index}"
        while name in program.constants:
            name += "_"
        inserting = graph.inserting_before(anchor) if anchor is not None else \
            graph.inserting_after(placeholders[-1])
        with inserting:
            placeholder = graph.placeholder(name)
        placeholder.meta.update(node.meta)
        node.replace_all_uses_with(placeholder)
        specs.insert(position, InputSpec(kind=InputKind.CONSTANT_TENSOR,
                                         arg=TensorArgument(name=placeholder.name),
                                         target=name, persistent=None))
        position += 1
        if anchor is None:
            placeholders.append(placeholder)
        program.constants[name] = values[node].detach().clone().contiguous()
        names.append(name)
    graph.eliminate_dead_code()
    signature.input_specs[:] = specs
    program.graph_module.recompile()
    return names
