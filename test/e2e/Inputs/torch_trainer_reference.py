#!/usr/bin/python3
"""Torch's own numbers for the trainer's data path on the corpus llama (torch 1.13, CPU, fp32).

usage: /usr/bin/python3 torch_trainer_reference.py CORPUS_DIR DATA.bin OUT_PREFIX
           [--steps N] [--batch B] [--seq T] [--micro-batches M] [--lr LR]
           [--schedule constant|cosine|linear|wsd] [--warmup W] [--min-lr-ratio R]
           [--decay-steps D] [--clip C] [--weight-decay WD] [--shuffle SEED]
           [--val VAL.bin --eval-every E --eval-batches K]

Starts from CORPUS_DIR/llama.init.safetensors and trains N AdamW steps on the llm.c shard
DATA.bin; writes OUT_PREFIX.json ({"losses", "lrs", "grad_norms", "eval", "config"}) and
OUT_PREFIX.finals.safetensors (final parameters by FQN, fp32). The definitions below (samples,
shuffle, micro-batches, clipping, schedule) are the ones the C++ trainer is compared against.
"""
import argparse
import json
import math
import struct

import numpy as np
import torch

MASK64 = (1 << 64) - 1


def load_model(corpus):
    """The corpus llama from export_corpus.py's make() (its model half only), at llama.init."""
    src = open(f"{corpus}/export_corpus.py").read().split("def arg_json")[0]
    src = src.replace("from safetensors.torch import save_file", "")
    src = src.replace("OUT = sys.argv[1]\nos.makedirs(OUT, exist_ok=True)", "")
    ns = {}
    exec(compile(src, "export_corpus_models", "exec"), ns)
    model, _ = ns["make"]("llama")
    model.load_state_dict(load_safetensors(f"{corpus}/llama.init.safetensors"))
    return model.float()


def load_safetensors(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        s, e = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(b[8 + n + s:8 + n + e], dtype="<f4").reshape(v["shape"]).copy())
    return out


def save_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # pad the header so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_shard(path):
    """llm.c shard: 256 int32 header (magic 20240520 = uint16 tokens, 20240801 = uint32), tokens."""
    b = open(path, "rb").read()
    header = struct.unpack("<256i", b[:1024])
    dtype = {20240520: "<u2", 20240801: "<u4"}[header[0]]
    tokens = np.frombuffer(b[1024:], dtype=dtype)
    assert len(tokens) == header[2], (path, len(tokens), header[2])
    return tokens.astype(np.int64)


def splitmix64_permutation(count, seed, epoch):
    """Fisher-Yates over range(count), driven by SplitMix64 seeded with SEED ^ (epoch * 0xD1B54A32D192ED03)."""
    state = (seed ^ (epoch * 0xD1B54A32D192ED03)) & MASK64

    def next64():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    perm = list(range(count))
    for i in range(count - 1, 0, -1):
        j = next64() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Samples:
    """Sample s = the T+1 tokens from s*T; S = (n-1)//T samples an epoch; global index g -> epoch g//S."""

    def __init__(self, tokens, seq, shuffle=None):
        self.tokens, self.seq, self.shuffle = tokens, seq, shuffle
        self.count = (len(tokens) - 1) // seq
        self.perms = {}

    def window(self, g):
        epoch, p = divmod(g, self.count)
        if self.shuffle is not None:
            if epoch not in self.perms:
                self.perms[epoch] = splitmix64_permutation(self.count, self.shuffle, epoch)
            p = self.perms[epoch][p]
        return self.tokens[p * self.seq:p * self.seq + self.seq + 1]

    def batch(self, first, size):
        """Global samples [first, first + size) stacked into [size, T] int64 tokens and targets."""
        w = np.stack([self.window(g) for g in range(first, first + size)])
        return torch.from_numpy(w[:, :-1].copy()), torch.from_numpy(w[:, 1:].copy())


def learning_rate(s, a):
    """Learning rate for step s (0-based): linear warmup over W steps, then the schedule."""
    lr, lr_min, n, w = a.lr, a.min_lr_ratio * a.lr, a.steps, a.warmup
    if s < w:
        return lr * (s + 1) / w
    if a.schedule == "constant":
        return lr
    if a.schedule == "cosine":
        return lr_min + 0.5 * (1 + math.cos(math.pi * (s - w) / (n - w))) * (lr - lr_min)
    if a.schedule == "linear":
        return lr - (s - w) / (n - w) * (lr - lr_min)
    # wsd: warmup, stable at lr until the last D steps, then linear decay towards lr_min
    if s < n - a.decay_steps:
        return lr
    return lr - (s - (n - a.decay_steps)) / a.decay_steps * (lr - lr_min)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("data")
    p.add_argument("out_prefix")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--schedule", choices=["constant", "cosine", "linear", "wsd"], default="constant")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--min-lr-ratio", type=float, default=0.0)
    p.add_argument("--decay-steps", type=int, default=0)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--shuffle", type=int, default=None)
    p.add_argument("--val")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=0)
    a = p.parse_args()
    assert a.schedule != "wsd" or 0 < a.decay_steps <= a.steps - a.warmup

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = load_model(a.corpus)
    train = Samples(read_shard(a.data), a.seq, a.shuffle)
    val = Samples(read_shard(a.val), a.seq) if a.val else None
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay, foreach=False)
    M, B = a.micro_batches, a.batch
    losses, lrs, norms, evals = [], [], [], []
    for s in range(a.steps):
        total = 0.0
        for m in range(M):  # micro-batch m = global samples [s*G + m*B, s*G + (m+1)*B), G = B*M
            loss = model(*train.batch(s * B * M + m * B, B))
            loss.backward()  # gradients accumulate over the micro-batches
            total += float(loss)
        for prm in model.parameters():
            prm.grad.div_(M)  # the mean gradient
        # the global L2 norm before clipping; with C > 0 the grads are scaled by min(1, C/(norm+1e-6))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip if a.clip > 0 else math.inf)
        lr = learning_rate(s, a)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total / M)
        lrs.append(lr)
        norms.append(float(norm))
        if val is not None and a.eval_every > 0 and (s + 1) % a.eval_every == 0:
            with torch.no_grad():  # validation micro-batch k = samples [k*B, (k+1)*B), no shuffle
                ev = sum(float(model(*val.batch(k * B, B))) for k in range(a.eval_batches)) / a.eval_batches
            evals.append([s + 1, ev])
        print(f"step {s + 1} loss {losses[-1]:.6f} lr {lr:.3e} grad_norm {norms[-1]:.4f}"
              + (f" eval {evals[-1][1]:.6f}" if evals and evals[-1][0] == s + 1 else ""))

    config = {k: v for k, v in vars(a).items() if k not in ("corpus", "out_prefix")}
    config["torch"] = torch.__version__
    with open(a.out_prefix + ".json", "w") as f:
        json.dump({"losses": losses, "lrs": lrs, "grad_norms": norms, "eval": evals, "config": config}, f, indent=1)
        f.write("\n")
    save_safetensors(a.out_prefix + ".finals.safetensors", dict(model.named_parameters()))


if __name__ == "__main__":
    main()
