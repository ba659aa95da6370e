#!/usr/bin/env python3
"""Generates the small joint training graphs of this folder with torch 1.13.

usage: python3 test/Inputs/aten/make_models.py OUT_DIR [NAME ...]

Each model is exported by tools/pt2-export/export_joint.py in the modes
listed in MODELS ("raw": make_fx's ATen ops, backward ops whole;
"decomposed": torch's core-ATen decompositions, as torch 2.11's export
applies them), with torch's own reference numbers beside it. Everything is
seeded, so a rerun with the same torch writes the same files. Each joint
graph's ATen ops are printed and written to OUT_DIR/ops.json, the source of
README.md's table.
"""

import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "pt2-export"))

from export_joint import export_joint  # noqa: E402
from corpus_models import corpus_definitions  # noqa: E402

#===----------------------------------------------------------------------===#
# gpt2_block: GPT-2 in miniature
#===----------------------------------------------------------------------===#


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, seq, use_sdpa):
        super().__init__()
        self.heads, self.use_sdpa = heads, use_sdpa
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        if self.use_sdpa:
            y = F._scaled_dot_product_attention(q, k, v, is_causal=True)[0]
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))


class GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, d, heads, seq, use_sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq, use_sdpa)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = GPT2MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """Token + learned position embeddings, one block, final LayerNorm, LM
    head tied to the token embedding, cross-entropy."""

    def __init__(self, vocab=32, d=16, heads=2, seq=8, use_sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList([GPT2Block(d, heads, seq, use_sdpa)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for module in self.modules():  # GPT-2's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.shape[1], dtype=torch.long)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

#===----------------------------------------------------------------------===#
# convnet: ResNet-style stem
#===----------------------------------------------------------------------===#


class ConvNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool2 = nn.AvgPool2d(2)
        self.head_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x, y):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = self.head_pool(x).flatten(1)
        return F.cross_entropy(self.fc(x), y)

#===----------------------------------------------------------------------===#
# dit_block: a DiT block with adaLN conditioning
#===----------------------------------------------------------------------===#


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        att = F.softmax((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5, dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class DiTBlock(nn.Module):
    """Patch embedding, one adaLN-conditioned transformer block (LayerNorm
    without affine parameters, shift/scale/gate from the conditioning vector
    through SiLU + Linear), a final LayerNorm + Linear, unpatchified back to
    the latent's shape."""

    def __init__(self, channels=4, d=16, heads=2, patch=2, mlp_ratio=2):
        super().__init__()
        self.patch, self.channels = patch, channels
        self.x_embedder = nn.Conv2d(channels, d, kernel_size=patch, stride=patch)
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = DiTAttention(d, heads)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, mlp_ratio * d), nn.GELU(),
                                 nn.Linear(mlp_ratio * d, d))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.norm_final = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_linear = nn.Linear(d, patch * patch * channels)

    def forward(self, x, c, target):
        b, _, h, w = x.shape
        p = self.patch
        tokens = self.x_embedder(x).flatten(2).transpose(1, 2)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            self.adaLN_modulation(c).chunk(6, dim=1)
        tokens = tokens + gate_msa.unsqueeze(1) * self.attn(
            modulate(self.norm1(tokens), shift_msa, scale_msa))
        tokens = tokens + gate_mlp.unsqueeze(1) * self.mlp(
            modulate(self.norm2(tokens), shift_mlp, scale_mlp))
        out = self.final_linear(self.norm_final(tokens))
        out = out.reshape(b, h // p, w // p, p, p, self.channels)
        out = out.permute(0, 5, 1, 3, 2, 4).reshape(b, self.channels, h, w)
        return F.mse_loss(out, target)

#===----------------------------------------------------------------------===#
# encoder_padded: bidirectional attention over a padded batch
#===----------------------------------------------------------------------===#


class PaddedEncoder(nn.Module):
    """Token and learned position embeddings, two pre-LayerNorm layers of
    attention that every position runs over the keys of its own sequence
    (a key padding mask from each sequence's length, as a padded batch of
    an encoder has) and a GELU MLP, a final LayerNorm and a cross-entropy
    over every position."""

    def __init__(self, vocab=64, d=64, heads=4, seq=48, layers=2):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d),
                "proj": nn.Linear(d, d), "ln2": nn.LayerNorm(d),
                "mlp": nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(),
                                     nn.Linear(2 * d, d))}))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, lengths, targets):
        b, t = tokens.shape
        d = self.tok.weight.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t))
        # True where the key is padding: hidden from every query.
        padding = torch.arange(t)[None, :] >= lengths[:, None]
        for layer in self.layers:
            qkv = layer["qkv"](layer["ln1"](x))
            q, k, v = qkv.view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
            att = att.masked_fill(padding[:, None, None, :], float("-inf"))
            y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + layer["proj"](y)
            x = x + layer["mlp"](layer["ln2"](x))
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

class AdditiveMaskEncoder(PaddedEncoder):
    """PaddedEncoder with BERT's additive mask: (1 - keep) * -10000 added
    to the scaled scores instead of -inf filled in."""

    def forward(self, tokens, lengths, targets):
        b, t = tokens.shape
        d = self.tok.weight.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t))
        keep = (torch.arange(t)[None, :] < lengths[:, None]).float()
        additive = ((1.0 - keep) * -10000.0)[:, None, None, :]
        for layer in self.layers:
            qkv = layer["qkv"](layer["ln1"](x))
            q, k, v = qkv.view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5 + additive
            y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + layer["proj"](y)
            x = x + layer["mlp"](layer["ln2"](x))
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

#===----------------------------------------------------------------------===#
# unet_block: one down and one up level with a skip connection
#===----------------------------------------------------------------------===#


class ConvGroupNormSiLU(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


class UNetBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1 = ConvGroupNormSiLU(3, 8, 2)
        self.down2 = ConvGroupNormSiLU(8, 16, 4)
        self.up_conv = nn.Conv2d(16, 8, 3, padding=1)
        self.up = ConvGroupNormSiLU(16, 8, 2)
        self.out = nn.Conv2d(8, 3, 1)

    def forward(self, x, target):
        skip = self.down1(x)
        h = self.down2(F.avg_pool2d(skip, 2))
        h = self.up_conv(F.interpolate(h, scale_factor=2, mode="nearest"))
        h = self.up(torch.cat([h, skip], dim=1))
        return F.mse_loss(self.out(h), target)

#===----------------------------------------------------------------------===#
# conv1d_3d: dilated Conv1d and a Conv3d patch embedding
#===----------------------------------------------------------------------===#


class Conv1d3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1d = nn.Conv1d(4, 8, kernel_size=3, dilation=2, padding=2)
        self.patch3d = nn.Conv3d(2, 8, kernel_size=(2, 4, 4), stride=(2, 4, 4))
        self.head = nn.Linear(16, 4)

    def forward(self, signal, video, target):
        a = F.relu(self.conv1d(signal)).mean(-1)
        b = self.patch3d(video).flatten(2).mean(-1)
        return F.mse_loss(self.head(torch.cat([a, b], dim=1)), target)

#===----------------------------------------------------------------------===#
# The table
#===----------------------------------------------------------------------===#


def make_gpt2(use_sdpa=False):
    torch.manual_seed(0)
    model = GPT2(use_sdpa=use_sdpa)
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, 32, (2, 8), generator=g)
    targets = torch.randint(0, 32, (2, 8), generator=g)
    return model, (tokens, targets)


def make_convnet():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return ConvNet(), (torch.randn(4, 3, 16, 16, generator=g),
                       torch.randint(0, 5, (4,), generator=g))


def make_dit():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return DiTBlock(), (torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 16, generator=g),
                        torch.randn(2, 4, 8, 8, generator=g))


def make_unet():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return UNetBlock(), (torch.randn(2, 3, 8, 8, generator=g),
                         torch.randn(2, 3, 8, 8, generator=g))


def make_conv1d_3d():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return Conv1d3d(), (torch.randn(2, 4, 16, generator=g),
                        torch.randn(2, 2, 4, 8, 8, generator=g),
                        torch.randn(2, 4, generator=g))


def make_llama_ragged():
    """The corpus' LLaMA with 40 positions and heads of 16: a sequence that
    neither the fused attention's 16 rows per warp nor its 32 columns per
    step divide."""
    torch.manual_seed(0)
    model = corpus_definitions()["TinyLlama"](v=64, d=64, h=4, f=128, t=40, n=2)
    g = torch.Generator().manual_seed(1234)
    return model, (torch.randint(0, 64, (2, 40), generator=g),
                   torch.randint(0, 64, (2, 40), generator=g))


def make_llama_gqa():
    """llama_ragged with grouped-query attention as Hugging Face writes it:
    2 key/value heads for 4 query heads, repeated (repeat_kv: expand and
    reshape) before the explicit causal attention."""
    torch.manual_seed(0)
    model = corpus_definitions()["TinyLlama"](v=64, d=64, h=4, f=128, t=40, n=2)
    kv_heads = 2

    def forward(self, x):
        b, t, d = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, kv_heads, self.hd).transpose(1, 2)
        q, k = self.rope(q), self.rope(k)

        def repeat_kv(x):
            repeats = self.h // kv_heads
            return x[:, :, None].expand(b, kv_heads, repeats, t, self.hd).reshape(
                b, self.h, t, self.hd)

        k, v = repeat_kv(k), repeat_kv(v)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        s = s.masked_fill(self.mask, float("-inf"))
        p = torch.softmax(s.float(), -1).to(q.dtype)
        return self.o_proj((p @ v).transpose(1, 2).reshape(b, t, d))

    for layer in model.layers:
        attn = layer.self_attn
        attn.k_proj = nn.Linear(64, kv_heads * attn.hd, bias=False)
        attn.v_proj = nn.Linear(64, kv_heads * attn.hd, bias=False)
        attn.forward = forward.__get__(attn)
    g = torch.Generator().manual_seed(1234)
    return model, (torch.randint(0, 64, (2, 40), generator=g),
                   torch.randint(0, 64, (2, 40), generator=g))


def make_encoder_padded():
    """48 positions (a step and a half of 32), heads of 16, a batch of two
    sequences of 48 and 29 tokens (the second padded)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return PaddedEncoder(), (torch.randint(0, 64, (2, 48), generator=g),
                             torch.tensor([48, 29]),
                             torch.randint(0, 64, (2, 48), generator=g))


def make_encoder_additive():
    """encoder_padded's weights and batch, BERT's additive mask."""
    _, inputs = make_encoder_padded()
    torch.manual_seed(0)
    return AdditiveMaskEncoder(), inputs


# name -> (factory, mode). Modes are named by suffix: NAME.pt2 is "raw" and
# NAME_decomposed.pt2 "decomposed". Raw exports are kept where their whole
# backward ops matter (layer norm, batch norm, NLL, MSE, convolution); the
# rest exist in the decomposed mode only, to keep the folder small.
MODELS = {
    "gpt2_block": (make_gpt2, "raw"),
    "gpt2_block_decomposed": (make_gpt2, "decomposed"),
    "gpt2_block_sdpa_decomposed": (lambda: make_gpt2(use_sdpa=True), "decomposed"),
    "convnet": (make_convnet, "raw"),
    "convnet_decomposed": (make_convnet, "decomposed"),
    "dit_block_decomposed": (make_dit, "decomposed"),
    "unet_block_decomposed": (make_unet, "decomposed"),
    "conv1d_3d": (make_conv1d_3d, "raw"),
    "conv1d_3d_decomposed": (make_conv1d_3d, "decomposed"),
    "llama_ragged_decomposed": (make_llama_ragged, "decomposed"),
    "llama_gqa_decomposed": (make_llama_gqa, "decomposed"),
    "encoder_padded_decomposed": (make_encoder_padded, "decomposed"),
    "encoder_additive_decomposed": (make_encoder_additive, "decomposed"),
}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else HERE
    names = sys.argv[2:] or list(MODELS)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    summary = {}
    for name in names:
        factory, mode = MODELS[name]
        model, inputs = factory()
        count = sum(p.numel() for p in model.parameters())
        result = export_joint(model, inputs, out_dir, name, mode=mode,
                              make_model=lambda factory=factory: factory()[0])
        summary[name] = {"mode": mode, "parameters": count, **result}
        print(f"{name} ({mode}, {count} parameters, graph vs eager torch: "
              f"{result['self_check_error']:.1e}, mutated buffers: "
              f"{', '.join(result['mutated_buffers']) or 'none'})")
        for op in result["ops"]:
            print(f"  {op}")
    table_path = os.path.join(out_dir, "ops.json")
    table = {}
    if os.path.exists(table_path):
        with open(table_path) as existing:
            table = json.load(existing)
    table.update({name: {"mode": s["mode"], "parameters": s["parameters"],
                         "mutated_buffers": s["mutated_buffers"], "ops": s["ops"]}
                  for name, s in summary.items()})
    with open(table_path, "w") as out:
        json.dump({name: table[name] for name in MODELS if name in table}, out, indent=1)
        out.write("\n")


if __name__ == "__main__":
    main()
