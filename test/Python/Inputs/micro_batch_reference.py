"""torch's loss and gradients for a fixture at another micro-batch.

usage: micro_batch_reference.py MODULE:FACTORY EXPORTED_GRADS B INPUTS_OUT GRADS_OUT
       micro_batch_reference.py token-loss MODULE:FACTORY TOKENS.bin B LOSSES.json

The factory's model with its own initial weights (the exported
.init.safetensors holds the same), and a batch of B samples drawn like the
factory's (floats normal, integers uniform in the factory's range, constant
tensors kept constant, one tensor passed twice drawn once); writes the batch under the graph's input names and
torch's `loss` and `grad.<fqn>` under the keys of the exported reference
(EXPORTED_GRADS), which check_export.py grads compares.
"""

import sys

import torch
from safetensors.torch import load_file, save_file

from mantissa.export.__main__ import call_factory, load_factory
from mantissa.export.batch import Batch
from mantissa.export.references import deterministic_torch, eager_step
from mantissa.export.training_module import loss_returning_copy


def resized(tensor, size, generator):
    shape = (size,) + tuple(tensor.shape[1:])
    if tensor.is_floating_point():
        return torch.randn(shape, generator=generator, dtype=tensor.dtype)
    low, high = int(tensor.min()), int(tensor.max())
    if low == high:
        return torch.full(shape, low, dtype=tensor.dtype)
    return torch.randint(low, high + 1, shape, generator=generator, dtype=tensor.dtype)


def main(spec, exported_grads, size, inputs_out, grads_out):
    size = int(size)
    model, batch, loss_fn, _ = call_factory(spec, load_factory(spec))
    generator = torch.Generator().manual_seed(size)
    # One tensor passed twice (a LM's labels are its input_ids) stays one.
    drawn = {}

    def resize(value):
        if id(value) not in drawn:
            drawn[id(value)] = resized(value, size, generator)
        return drawn[id(value)]
    if isinstance(batch, dict):
        batch = {key: resize(value) for key, value in batch.items()}
        names = list(batch)
        tensors = list(batch.values())
    else:
        batch = tuple(resize(value) for value in batch)
        names = [f"input.{i}" for i in range(len(batch))]
        tensors = list(batch)
    checked = Batch(batch, type(model).__name__)
    with deterministic_torch():
        module = loss_returning_copy(model, loss_fn, type(model).__name__, list(checked.kwargs))
        eager = eager_step(module, checked)
    save_file({n: t.clone().contiguous() for n, t in zip(names, tensors)}, inputs_out)
    wanted = load_file(exported_grads)
    out = {"loss": eager.loss}
    out.update({key: eager.gradients[key[len("grad."):]] for key in wanted if key != "loss"})
    save_file(out, grads_out)
    print(f"batch of {size}: loss {float(eager.loss):.6f}")


def token_loss(spec, tokens_path, size, losses_path):
    """The first step's loss on raw-u16 token data (docs/data.md: sample s
    is tokens [s*T, s*T + T]) against mantissa-run's --losses."""
    import json

    import numpy
    size = int(size)
    model, batch, loss_fn, _ = call_factory(spec, load_factory(spec))
    length = batch[0].shape[1]
    stream = torch.from_numpy(numpy.fromfile(tokens_path, dtype="<u2").astype("int64"))
    windows = torch.stack([stream[s * length:s * length + length + 1] for s in range(size)])
    with deterministic_torch(), torch.no_grad():
        want = float(model(windows[:, :-1].contiguous(), windows[:, 1:].contiguous()))
    got = json.load(open(losses_path))["losses"][0]
    ok = abs(got - want) <= 1e-5 * max(1.0, abs(want))
    print(f"step 1 loss {got:.6f}, torch {want:.6f}: {'ok' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if sys.argv[1] == "token-loss":
        token_loss(*sys.argv[2:])
    else:
        main(*sys.argv[1:])
