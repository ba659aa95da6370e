#!/usr/bin/env python3
"""torch's own numbers for compute precision: AdamW trajectories with the
forward under torch.autocast("cpu", dtype=torch.bfloat16), next to fp32.

usage: autocast_reference.py OUT_DIR SOURCE:NAME [SOURCE:NAME ...] [--steps N]
                             [--grads-at K[,K...]]

SOURCE is `corpus` (the models of test/Inputs/corpus/export_corpus.py, from
NAME.init.safetensors and NAME.inputs.safetensors there) or `aten` (the
models of test/Inputs/aten/make_models.py and make_attention_models.py,
from NAME.init.safetensors).
Writes NAME.autocast.traj.json (arms `fp32` and `autocast_bf16`: the loss of
every step and, per norm weight, how many elements moved) into OUT_DIR.

Trajectories of bf16 arithmetic are chaotic: moving one rounding anywhere
(e.g. computing RoPE in fp32 instead of after casting its tables to bf16)
makes torch's own autocast run drift from itself by the same order as it
drifts from fp32 within a few steps. So that a test can also compare what
one step computes, `--grads-at K,...` writes NAME.autocast.grads.safetensors:
at the weights after K steps of the fp32-accumulating autocast trajectory (0: the initial
weights), the loss and gradients of both arms (`<arm>.step<K>.loss`,
`<arm>.step<K>.grad.<fqn>`, fp32) and, for K > 0, the state_dict itself
as NAME.autocast.step<K>.safetensors (a `--weights` file).

A third arm, `autocast_bf16_fp32acc`, is the same autocast run with every
bf16 matrix product accumulated in fp32 and rounded once: torch 1.13's CPU
GEMM accumulates small bf16 products (below about 8192 multiply-adds, such
as the corpus llama's 8x8x8 attention products) in bf16, rounding every
partial sum (61% of an 8x8x8 product's elements differ from fp32
accumulation), while oneDNN above that size, torch >= 2.0 and CUDA
accumulate in fp32. The arm runs the products of forward and backward
through a dispatch mode that computes them as `aten.mm(a.float(),
b.float()).bfloat16()`; its numbers are what Mantissa's `compute: bf16`
promises (fp32 accumulation, one rounding).

All arms keep fp32 parameters and fp32 AdamW state (lr 1e-3, betas
0.9/0.999, eps 1e-8, weight decay 0.01, single-tensor AdamW), as the
trainers that run autocast on top of fp32 masters do; the backward runs
outside the autocast region, as torch recommends, so autograd replays each
forward op's dtype. Runs with Debian's torch 1.13 on one CPU thread,
deterministically: a rerun writes identical bytes.
"""
import argparse
import importlib.util
import json
import os
import struct
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(ROOT, "test", "Inputs", "corpus")
ATEN = os.path.join(ROOT, "test", "Inputs", "aten")


def _load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    # Registered first, so that a module importing it by name (make_models.py
    # imports export_joint) gets this one instead of defining its operators
    # twice.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


export_joint = _load_module(os.path.join(HERE, "export_joint.py"), "export_joint")
corpus_definitions = _load_module(os.path.join(HERE, "corpus_models.py"),
                                  "corpus_models").corpus_definitions

SAFETENSORS_TYPES = {"F32": torch.float32, "I64": torch.int64, "BF16": torch.bfloat16,
                     "F16": torch.float16, "I32": torch.int32, "BOOL": torch.bool}


def load_safetensors(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(data[8 + length + begin:8 + length + end])
        tensor = torch.frombuffer(raw, dtype=SAFETENSORS_TYPES[entry["dtype"]]) if raw else \
            torch.empty(0, dtype=SAFETENSORS_TYPES[entry["dtype"]])
        tensors[name] = tensor.reshape(entry["shape"]).clone()
    return tensors


_PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default,
             torch.ops.aten.addmm.default, torch.ops.aten.baddbmm.default}


class Fp32Accumulation(TorchDispatchMode):
    """bf16 matrix products accumulated in fp32 and rounded once."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _PRODUCTS and any(isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16
                                     for a in args):
            wide = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a
                    for a in args]
            return func(*wide, **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


# arm -> (autocast, products accumulated in fp32)
ARMS = {"fp32": (False, False), "autocast_bf16": (True, False),
        "autocast_bf16_fp32acc": (True, True)}


def in_mode(fp32acc, function, *args):
    if not fp32acc:
        return function(*args)
    with Fp32Accumulation():
        return function(*args)


def corpus_model(name):
    """The corpus model NAME with its initial weights and batch."""
    model, _ = corpus_definitions()["make"](name)
    init = load_safetensors(os.path.join(CORPUS, f"{name}.init.safetensors"))
    batch = load_safetensors(os.path.join(CORPUS, f"{name}.inputs.safetensors"))
    inputs = [batch[f"input.{i}"] for i in range(len(batch))]
    return model, init, inputs


def aten_model(name):
    """The test/Inputs/aten model NAME (of make_models.py or
    make_attention_models.py) with its initial weights and batch."""
    models = _load_module(os.path.join(ATEN, "make_models.py"), "make_models")
    if name not in models.MODELS:
        # Loaded once: it registers its operators with torch.
        models = sys.modules.get("make_attention_models") or _load_module(
            os.path.join(ATEN, "make_attention_models.py"), "make_attention_models")
    factory, _ = models.MODELS[name]
    model, inputs = factory()
    init = load_safetensors(os.path.join(ATEN, f"{name}.init.safetensors"))
    return model, init, list(inputs)


def loss_and_grads(model, state, inputs, autocast):
    model.load_state_dict(state)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(*inputs)
    loss.float().backward()
    grads = {"loss": loss.detach().float().reshape(1).clone()}
    for fqn, p in model.named_parameters():
        grads[f"grad.{fqn}"] = p.grad.detach().float().clone().contiguous()
    return grads


def trajectory(model, init, inputs, steps, autocast, keep_states=()):
    """Losses and norm movement over `steps` AdamW steps; the parameters
    after each step in `keep_states` (by the number of steps taken)."""
    model.load_state_dict(init)
    model.train()
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=False)
    losses, states = [], {}
    for step in range(steps):
        if step in keep_states:
            states[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for p in params:
            p.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(*inputs)
        loss.float().backward()
        losses.append(float(loss))
        optimizer.step()
    moved = {fqn: int((p.detach().float() != init[fqn].float()).sum())
             for fqn, p in model.named_parameters() if export_joint._is_norm_weight(fqn)}
    return {"losses": losses, "norm_elements_moved": moved}, states


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--grads-at", default="",
                        help="comma-separated step counts of the autocast trajectory")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out_dir, exist_ok=True)
    for item in args.models:
        source, _, name = item.partition(":")
        build = {"corpus": corpus_model, "aten": aten_model}[source]
        grads_at = [int(k) for k in args.grads_at.split(",") if k]
        arms, states = {}, {}
        for arm, (autocast, fp32acc) in ARMS.items():
            model, init, inputs = build(name)
            # The states to take gradients at are those of torch's autocast
            # as it accumulates (the fp32-accumulating arm's drift away).
            keep = grads_at if arm == "autocast_bf16_fp32acc" else ()
            arms[arm], arm_states = in_mode(fp32acc, trajectory, model, init, inputs,
                                            args.steps, autocast, keep)
            if keep:
                states = arm_states
        gap = max(abs(a - b) / abs(b) for a, b in
                  zip(arms["autocast_bf16_fp32acc"]["losses"], arms["fp32"]["losses"]))
        traj = {"torch": torch.__version__, "source": item, "steps": args.steps, "lr": 1e-3,
                "weight_decay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
                "autocast": {"device": "cpu", "dtype": "bfloat16"}, "arms": arms}
        with open(os.path.join(args.out_dir, f"{name}.autocast.traj.json"), "w") as out:
            json.dump(traj, out, indent=1)
            out.write("\n")
        if grads_at:
            tensors = {}
            for k in grads_at:
                if k > 0:
                    export_joint.save_safetensors(
                        {fqn: t.contiguous() for fqn, t in states[k].items()},
                        os.path.join(args.out_dir, f"{name}.autocast.step{k}.safetensors"))
                for arm, (autocast, fp32acc) in ARMS.items():
                    model, init, inputs = build(name)
                    grads = in_mode(fp32acc, loss_and_grads, model, states[k], inputs, autocast)
                    tensors.update({f"{arm}.step{k}.{key}": t for key, t in grads.items()})
            export_joint.save_safetensors(tensors, os.path.join(args.out_dir,
                                                                f"{name}.autocast.grads.safetensors"))
        print(f"{item}: loss step 0 {arms['fp32']['losses'][0]:.6f}, step {args.steps - 1} fp32 "
              f"{arms['fp32']['losses'][-1]:.6f} autocast {arms['autocast_bf16']['losses'][-1]:.6f} "
              f"(fp32 accumulation {arms['autocast_bf16_fp32acc']['losses'][-1]:.6f}), "
              f"worst autocast-vs-fp32 loss rel_diff {gap:.3e}")


if __name__ == "__main__":
    main()
