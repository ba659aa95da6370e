"""The ~120M LLaMA of ../shared/bench/torch_step_anchor.py (d 1024, 8 layers,
16 heads, MLP 2816, vocab 8192, 8 x 512 tokens), built from the corpus' own
model definition (test/Inputs/corpus/export_corpus.py), for the GPU cost
model (docs/gpu-cost-model.md). Far too large to trace with real tensors on
a 2-core CPU, so it is exported on the meta device:

    PYTHONPATH=bench/step python3 tools/pt2-export/export_joint.py \\
        llama120m:factory OUT llama120m --graph-only
    mantissa-compile OUT/llama120m.pt2 \\
        --precision test/e2e/Inputs/compute_bf16_master.yaml --cost-report
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "pt2-export"))
from corpus_models import corpus_definitions  # noqa: E402


def factory():
    torch.manual_seed(0)
    model = corpus_definitions()["TinyLlama"](v=8192, d=1024, h=16, f=2816, t=512, n=8)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 8192, (8, 512), generator=generator)
    targets = torch.randint(0, 8192, (8, 512), generator=generator)
    return model, (tokens, targets)
