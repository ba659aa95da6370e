"""torch's own numbers for the exported step: loss and gradients at the
initial weights, and eager AdamW over a fixed batch.

Computed as test/Inputs/corpus/export_corpus.py computes the reference
corpus: seeded, deterministic algorithms, one thread, torch's single-tensor
AdamW (`foreach=False`, the order of operations Mantissa's fused update
reproduces).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field

import torch

from .batch import Batch
from .training_module import step_loss

BETAS = (0.9, 0.999)
EPS = 1e-8


@contextlib.contextmanager
def deterministic_torch(seed: int = 0):
    """Seeded, deterministic, single-threaded torch; the caller's settings
    (threads, determinism, RNG state) come back afterwards."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    rng = torch.get_rng_state()
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_rng_state(rng)


@dataclass
class EagerStep:
    """One eager forward and backward at the initial weights."""
    loss: torch.Tensor
    #: Under every name of each parameter (tied weights have several).
    gradients: dict[str, torch.Tensor]
    #: Parameters that require a gradient but got none from this loss (a
    #: pooler an MLM loss never reads): exported as non-trainable.
    no_gradient: list[str] = field(default_factory=list)


def eager_step(loss_module: torch.nn.Module, batch: Batch) -> EagerStep:
    """Runs on a copy, so that buffers the forward updates (batch norm's
    running statistics) and .grad stay out of the module exported next."""
    module = copy.deepcopy(loss_module)
    loss = step_loss(batch.call(module))
    loss.backward()
    gradients, no_gradient, seen = {}, [], set()
    for fqn, parameter in module.named_parameters(remove_duplicate=False):
        if not parameter.requires_grad:
            continue
        if parameter.grad is not None:
            gradients[fqn] = parameter.grad.detach().float().clone().contiguous()
        elif id(parameter) not in seen:
            no_gradient.append(fqn)
        seen.add(id(parameter))
    return EagerStep(loss.detach().float().reshape(1), gradients, no_gradient)


def _norm_gains(module: torch.nn.Module) -> list[str]:
    """Parameters held by normalization layers themselves (gains and biases of
    LayerNorm, RMSNorm, GroupNorm, ..., not the linear inside an adaptive norm):
    the tensors whose bf16 updates stall."""
    names = []
    for path, child in module.named_modules():
        if "Norm" in type(child).__name__:
            names += [f"{path}.{name}" if path else name
                      for name, _ in child.named_parameters(recurse=False)]
    return names


_SHORT_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _arm_name(dtypes: set[torch.dtype]) -> str:
    """The reference corpus's arm names: `fp32`, and `bf16_plain` for a
    model whose parameters and AdamW state are all bf16."""
    if dtypes == {torch.float32}:
        return "fp32"
    if len(dtypes) == 1:
        return f"{_SHORT_NAMES.get(next(iter(dtypes)), 'other')}_plain"
    return "mixed_plain"


@dataclass
class Trajectory:
    arm: str
    losses: list[float]
    norm_elements_moved: dict[str, int]
    finals: dict[str, torch.Tensor]


def adamw_trajectory(loss_module: torch.nn.Module, batch: Batch, trainable: list[str],
                     steps: int, lr: float, weight_decay: float) -> Trajectory:
    """`steps` AdamW steps of eager torch on the fixed batch: the loss before
    each update, then the parameters after the last one."""
    module = copy.deepcopy(loss_module)
    parameters = dict(module.named_parameters(remove_duplicate=False))
    initial = {fqn: p.detach().clone() for fqn, p in parameters.items()}
    optimizer = torch.optim.AdamW([parameters[fqn] for fqn in trainable], lr=lr, betas=BETAS,
                                  eps=EPS, weight_decay=weight_decay, foreach=False)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = step_loss(batch.call(module))
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    arm = _arm_name({p.dtype for p in parameters.values()})
    moved = {fqn: int((parameters[fqn].detach() != initial[fqn]).sum())
             for fqn in _norm_gains(module) if fqn in parameters}
    finals = {f"{arm}.{fqn}": p.detach().float().clone().contiguous()
              for fqn, p in parameters.items()}
    return Trajectory(arm, losses, moved, finals)
