"""torch's training step on a zoo model, timed: the baseline of bench/zoo/run.sh.

usage: torch_step.py MODULE:FACTORY MODE [--steps N] [--repeats R] [--threads T]
                     [--weights INIT.safetensors]
MODE: eager, autocast (the forward under torch.autocast("cpu", bfloat16)),
compile (the model under torch.compile, inductor, CPU) or compile-autocast.

One step is what a user's loop does: zero the gradients, the forward and
the loss (the exporter's rule: loss_fn(output, batch), a scalar output,
output.loss), backward, torch.optim.AdamW(lr 1e-3, weight decay 0.01, torch's
default implementation) step. Two warm-up steps (torch.compile compiles the
forward and backward there, untimed), then R blocks of N steps; prints JSON
with each block's median step time, their median, and the items (tokens of
input_ids, else samples of the batch's first tensor) per step.
"""
import argparse
import json
import statistics
import time

import torch

from mantissa.zoo.check import call_factory, load_factory, training_loss


def items_per_step(batch) -> tuple[int, str]:
    if isinstance(batch, dict) and "input_ids" in batch:
        return batch["input_ids"].numel(), "tokens"
    first = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return first.shape[0], "samples"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("factory")
    parser.add_argument("mode", choices=["eager", "autocast", "compile", "compile-autocast"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", help="the initial state dict (the export's NAME.init.safetensors)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    name, factory = load_factory(args.factory)
    model, batch, loss_fn, _ = call_factory(name, factory)
    if args.weights:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(args.weights), strict=False)
    forward = torch.compile(model) if args.mode.startswith("compile") else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    autocast = args.mode.endswith("autocast")

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = training_loss(forward, batch, loss_fn)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    start = time.perf_counter()
    first_loss = step()
    step()
    warmup_s = time.perf_counter() - start
    blocks = []
    for _ in range(args.repeats):
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        blocks.append(1000 * statistics.median(times))
    items, unit = items_per_step(batch)
    print(json.dumps({"model": name, "mode": args.mode, "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "first_loss": first_loss, "warmup_s": round(warmup_s, 2),
                      "block_median_ms": [round(b, 3) for b in blocks],
                      "median_step_ms": round(statistics.median(blocks), 3), "items_per_step": items, "unit": unit}))


if __name__ == "__main__":
    main()
