#!/usr/bin/env python3
"""Joint graphs of models that call F.scaled_dot_product_attention, as torch
>= 2.9 exports them, with torch's own numbers: what the device machine
(torch 2.11) can make and this one (torch 1.13, no torch.export) cannot.

usage: export_sdpa_models.py OUT_DIR [NAME,NAME,...]

The models are the corpus' TinyLlama (test/Inputs/corpus/export_corpus.py)
with its attention computed by `F.scaled_dot_product_attention` instead of
the explicit products, masked fill and softmax:

  llama_sdpa          the corpus llama's shapes (heads of 8, 8 positions),
                      `is_causal=True` (its own initial parameters: they
                      depend on what the process made before, as the
                      corpus' do, so compare with NAME.init.safetensors);
  llama_medium_sdpa   llama_medium's shapes (4 heads of 32, 32 positions),
                      `is_causal=True`;
  encoder_sdpa        llama_medium's shapes without a mask (`is_causal=False`:
                      every position sees every other, as an encoder).

For each, export_corpus.py's own export and references write NAME.pt2 (the
joint forward+backward graph from torch.export's _export_forward_backward),
NAME.graph.txt, NAME.joint.json, NAME.inputs.safetensors,
NAME.init.safetensors, NAME.grads.safetensors, NAME.traj.json and
NAME.finals.safetensors, in the corpus' formats; summary.json lists each
graph's operators, which say what torch emits for the attention (the fused
`_scaled_dot_product_flash_attention_for_cpu` and its backward, or a
decomposition). bench/device/check_gpu.sh runs it in its `exports` stage
and returns the files. safetensors is used where it is installed, else
safetensors_file.py's writer of the same format.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

from corpus_models import with_attention
from safetensors_file import save_safetensors

CORPUS_SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "test", "Inputs", "corpus", "export_corpus.py")

def corpus_namespace(out):
    """export_corpus.py's definitions and functions, writing into `out`."""
    source = open(CORPUS_SCRIPT).read().split('if __name__ == "__main__":')[0]
    source = source.replace("OUT = sys.argv[1]", "OUT = __out__")
    namespace = {"__out__": out, "__name__": "export_corpus"}
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        source = source.replace("from safetensors.torch import save_file", "")
        namespace["save_file"] = save_safetensors
    exec(compile(source, CORPUS_SCRIPT, "exec"), namespace)
    return namespace


def sdpa_models(ns):
    """The corpus' TinyLlama with F.scaled_dot_product_attention, causal or
    not, and `make` for the names above (the corpus' own otherwise)."""
    corpus_make = ns["make"]

    def with_sdpa(model, causal):
        return with_attention(model, lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=causal))

    def make(name):
        if name == "llama_sdpa":
            model, args = corpus_make("llama")
            return with_sdpa(model, True), args
        if name == "llama_medium_sdpa":
            model, args = corpus_make("llama_medium")
            return with_sdpa(model, True), args
        if name == "encoder_sdpa":
            model, args = corpus_make("llama_medium")
            return with_sdpa(model, False), args
        return corpus_make(name)

    return make


def main():
    out = sys.argv[1]
    names = (sys.argv[2] if len(sys.argv) > 2 else
             "llama_sdpa,llama_medium_sdpa,encoder_sdpa").split(",")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    ns = corpus_namespace(out)
    ns["make"] = sdpa_models(ns)
    summary = {"torch": torch.__version__}
    failed = False
    for name in names:
        for stage in ("export_one", "references"):
            try:
                ns[stage](name, summary)
            except Exception as error:  # the other models still run
                failed = True
                summary.setdefault(name, {})[f"{stage}_error"] = repr(error)[-1500:]
                print(f"{stage} {name} FAILED: {error!r}", flush=True)
                break
        if name in summary and "ops" in summary[name]:
            attention = sorted(op for op in summary[name]["ops"]
                               if "attention" in op or "softmax" in op)
            print(f"{name}: {len(summary[name]['ops'])} operators; "
                  f"attention and softmax: {', '.join(attention)}", flush=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
