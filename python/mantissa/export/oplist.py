"""The graph's operators against what mantissa-compile imports.

The one list of supported operators is the importer's handler table, which
`mantissa-compile --list-ops` prints; the exporter reads it from the binary
rather than keeping a copy that could drift.
"""

from __future__ import annotations

import operator
import os
import shutil
import subprocess
from dataclasses import dataclass

import torch
import torch.fx

from .errors import ExportError


def find_mantissa_compile(given: str | None) -> str:
    """`given`, else $MANTISSA_COMPILE, else mantissa-compile on PATH."""
    for source, path in (("--mantissa-compile", given),
                         ("MANTISSA_COMPILE", os.environ.get("MANTISSA_COMPILE"))):
        if path:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ExportError(f"{source}={path} is not an executable mantissa-compile")
            return path
    found = shutil.which("mantissa-compile")
    if found:
        return found
    raise ExportError(
        "mantissa-compile not found, so the graph's operators cannot be checked against "
        "what Mantissa imports: give --mantissa-compile PATH (mantissa_compile= in Python), "
        "set MANTISSA_COMPILE, or put build/bin on PATH")


def supported_operators(mantissa_compile: str) -> set[str]:
    """`mantissa-compile --list-ops`: one `torch.ops.<ns>.<op>.<overload>` a line."""
    try:
        listed = subprocess.run([mantissa_compile, "--list-ops"], capture_output=True,
                                text=True, check=False, timeout=120)
    except OSError as error:
        raise ExportError(f"cannot run {mantissa_compile} --list-ops: {error}") from None
    names = {line.strip() for line in listed.stdout.splitlines() if line.strip()}
    if listed.returncode != 0 or not names:
        raise ExportError(f"{mantissa_compile} --list-ops failed (exit {listed.returncode}): "
                          f"{listed.stderr.strip() or 'no operators listed'}")
    return names


def target_name(target) -> str:
    """The operator as torch.export's serializer and mantissa-compile spell it."""
    if isinstance(target, torch._ops.OpOverload):
        return f"torch.ops.{target}"
    # Python functions on sizes (operator.mul, torch.sym_float), as the
    # serializer writes them: "_operator.mul", "torch.sym_float".
    name = getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    return f"{module}.{name}" if name and module else str(target)


def module_path(node: torch.fx.Node) -> str | None:
    """The innermost module the node was traced in, as mantissa-compile names it."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path, _ = list(stack.values())[-1]
    return path


def describe(node: torch.fx.Node, where_else: "OperatorSites | None" = None) -> str:
    """`torch.ops.aten.sort.default (node 'sort', module 'ranker')`, as
    mantissa-compile reports a node. Without a module path (see
    module_paths.py), says what is known: the node is in the backward, and
    which modules run the operator in the forward program."""
    path = module_path(node)
    if path is not None:
        where = f"module '{path}'"
    else:
        where = "module unknown"
        if where_else is not None:
            if node not in where_else.forward_nodes:
                where += ", in the backward"
            paths = where_else.forward_modules.get(target_name(node.target))
            if paths:
                where += ("; the forward runs this operator in module "
                          + ", ".join(f"'{p}'" for p in paths))
    return f"{target_name(node.target)} (node '{node.name}', {where})"


@dataclass
class OperatorSites:
    """Where operators sit when a joint node has no module path: the joint
    graph's forward nodes (the loss's ancestors) and, per operator, the
    modules that run it in the forward programs (which keep their paths)."""
    forward_nodes: set
    forward_modules: dict[str, list[str]]

    @staticmethod
    def of(joint: torch.fx.Graph, forward_modules: dict[str, list[str]]) -> "OperatorSites":
        loss = joint.output_node().args[0][0]
        ancestors, pending = set(), [loss]
        while pending:
            node = pending.pop()
            if node not in ancestors:
                ancestors.add(node)
                pending.extend(node.all_input_nodes)
        return OperatorSites(ancestors, forward_modules)


def operator_modules(graphs: list[torch.fx.Graph]) -> dict[str, list[str]]:
    """Per operator, the module paths of the nodes that run it."""
    modules: dict[str, list[str]] = {}
    for graph in graphs:
        for node in graph.nodes:
            path = module_path(node) if node.op == "call_function" else None
            if path is not None:
                paths = modules.setdefault(target_name(node.target), [])
                if path not in paths:
                    paths.append(path)
    return modules


_MISSING = object()


def _argument(node: torch.fx.Node, name: str):
    """The value of the operator's argument `name` at this node (its schema
    default when not passed), or _MISSING when the operator has none."""
    for position, argument in enumerate(node.target._schema.arguments):
        if argument.name != name:
            continue
        if position < len(node.args):
            return node.args[position]
        if name in node.kwargs:
            return node.kwargs[name]
        return argument.default_value if argument.has_default_value() else None
    return _MISSING


def draws_random_numbers(node: torch.fx.Node) -> bool:
    """Operators torch tags nondeterministic_seeded (rand, randn, bernoulli,
    randint, normal, dropout, attention with dropout, ...), except those
    whose dropout probability is 0 or that run in eval mode (dropout's
    `train`), which draw nothing."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded not in target.tags:
        return False
    for name in ("p", "dropout_p"):
        probability = _argument(node, name)
        if probability is not _MISSING:
            train = _argument(node, "train")
            return probability != 0 and train is not False
    return True


# Random operators of the forward program that the joint program spells as
# another the importer supports (F.dropout becomes native_dropout, in-place
# draws their functional forms).
_JOINT_SPELLING = {
    "torch.ops.aten.dropout.default": "torch.ops.aten.native_dropout.default",
    "torch.ops.aten.normal_.default": "torch.ops.aten.normal_functional.default",
    "torch.ops.aten.uniform_.default": "torch.ops.aten.uniform.default",
    "torch.ops.aten.bernoulli_.float": "torch.ops.aten.bernoulli.p",
}


def check_random(graph: torch.fx.Graph, model_name: str, supported: set[str]) -> None:
    """Refuses the random operators mantissa-compile does not import
    (docs/randomness.md lists those it does: their draws are made inside the
    step from the run's --seed)."""
    drawing = [node for node in graph.nodes if draws_random_numbers(node)
               and _JOINT_SPELLING.get(target_name(node.target), target_name(node.target))
               not in supported]
    if drawing:
        where = ", ".join(describe(node) for node in drawing)
        raise ExportError(
            f"model {model_name} draws random numbers in {len(drawing)} node"
            f"{'s' if len(drawing) != 1 else ''} of an operator Mantissa does not import: "
            f"{where}; the random operators it imports are randn, rand, randint, normal, "
            "uniform, bernoulli and dropout (docs/randomness.md) - for the others set the "
            "probability to 0 or put the model in eval mode (in Hugging Face and diffusers "
            "configs: the *dropout* and *dropout_prob* entries, class_dropout_prob)")


@dataclass
class OperatorCheck:
    counts: dict[str, int]
    unsupported: list[torch.fx.Node]


def check_operators(graph: torch.fx.Graph, supported: set[str]) -> OperatorCheck:
    """Every call_function node against the importer's list. getitem only
    selects a result of a multi-output node: the serializer folds it away."""
    counts: dict[str, int] = {}
    unsupported = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        name = target_name(node.target)
        counts[name] = counts.get(name, 0) + 1
        if name not in supported:
            unsupported.append(node)
    return OperatorCheck(dict(sorted(counts.items())), unsupported)


def unsupported_message(model_name: str, unsupported: list[torch.fx.Node],
                        sites: OperatorSites) -> str:
    count = len(unsupported)
    return (f"model {model_name}: {count} unsupported operator{'s' if count != 1 else ''}: "
            + ", ".join(describe(node, sites) for node in unsupported)
            + " (mantissa-compile --list-ops prints the operators Mantissa imports)")
