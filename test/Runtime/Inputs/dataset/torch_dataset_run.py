#!/usr/bin/env python3
"""torch's own run of what test/Runtime/dataset-torch.test asks mantissa-run:
cond.py's model trained from a tensor dataset in docs/data.md's global sample
order (its Python, copied below), M micro-batches of B samples a step, their
gradients averaged, torch's AdamW (foreach=False) with mantissa-run's default
hyperparameters; the validation loss every EVERY steps over the first
EVAL micro-batches. Compares with mantissa-run's --metrics and prints PASS.

  torch_dataset_run.py INIT TRAIN VAL METRICS STEPS M SEED EVERY EVAL RTOL
"""
import json, os, sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cond import CondMLP  # noqa: E402

M64 = (1 << 64) - 1


def splitmix64(state):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        yield z ^ (z >> 31)


def permutation(num_samples, seed, epoch):
    rng = splitmix64(seed ^ ((epoch * 0xD1B54A32D192ED03) & M64))
    perm = list(range(num_samples))
    for i in range(num_samples - 1, 0, -1):
        j = next(rng) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def sample(global_index, num_samples, seed=None):
    epoch, position = divmod(global_index, num_samples)
    return position if seed is None else permutation(num_samples, seed, epoch)[position]


def main():
    init, train, val, metrics = sys.argv[1:5]
    steps, micro, seed, every, evals = map(int, sys.argv[5:10])
    rtol = float(sys.argv[10])
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = CondMLP()
    model.load_state_dict(load_file(init))
    data, held = load_file(train), load_file(val)
    names = ["x", "label", "y", "mask"]
    n = data["x"].shape[0]
    batch = 2
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=False)
    rows = [json.loads(line) for line in open(metrics)]
    assert len(rows) == steps, "expected %d metrics lines" % steps
    failures = 0
    for step in range(steps):
        opt.zero_grad()
        losses = []
        for m in range(micro):
            first = (step * micro + m) * batch
            index = torch.tensor([sample(first + b, n, seed) for b in range(batch)])
            loss = model(*[data[k][index] for k in names])
            loss.backward()
            losses.append(loss.item())
        for p in model.parameters():
            p.grad /= micro
        loss = sum(losses) / micro
        opt.step()
        ours = rows[step]["loss"]
        if abs(ours - loss) > rtol * abs(loss):
            print("step %d: loss %.8g, torch %.8g" % (step + 1, ours, loss))
            failures += 1
        if (step + 1) % every == 0:
            with torch.no_grad():
                value = sum(model(*[held[k][m * batch:(m + 1) * batch] for k in names]).item()
                            for m in range(evals)) / evals
            ours = rows[step].get("eval_loss")
            if ours is None or abs(ours - value) > rtol * abs(value):
                print("step %d: eval loss %s, torch %.8g" % (step + 1, ours, value))
                failures += 1
    print("PASS" if failures == 0 else "FAIL")


if __name__ == "__main__":
    main()
