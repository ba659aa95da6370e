#!/usr/bin/env python3
"""Generates the attention test model of test/Import/attention.test.

usage: make_attention_models.py OUT_DIR

torch >= 2.1 exports F.scaled_dot_product_attention on the CPU as
`aten._scaled_dot_product_flash_attention_for_cpu` (output, logsumexp) and,
in a joint graph, its backward `..._for_cpu_backward`; torch 1.13, the torch
that runs here, has neither. So this script defines both operators with
torch's schemas (in a test namespace: 1.13 reserves `aten`), implements them
with the math of torch's kernels (scores q k^T * scale, the top-left causal
mask, a bool attn_mask that keeps where true, softmax, and the backward from
the saved log-sum-exp), lets torch 1.13 trace a model that calls them
(tools/pt2-export/export_joint.py computes torch's gradients and trajectory
eagerly with the same implementation) and serialises the two operators
under their `aten` names. The rest of the graph is torch's own.

  attention  a causal self-attention block, a masked cross-attention call
             with an explicit scale and an attention written out with
             _safe_softmax (one query sees no key) and with its
             decomposition (eq, all, where), then a squared-error loss. _safe_softmax (torch >= 2.5) is defined here too.
  attention_bf16  the same model and batch in bf16 (the bf16 test compares
             compiled code with the interpreter).
  llama_sdpa  the corpus' TinyLlama at llama_ragged's shapes (2 layers of
             width 64, 4 heads of 16, 40 positions; test/Inputs/aten/
             make_models.py, the same initial weights and batch) with its
             attention computed by F.scaled_dot_product_attention(q, k, v,
             is_causal=True) as torch exports it: the fused operator and
             its backward (test/e2e/compute-autocast.test: their fusion on
             the GPU). Under torch.autocast the operator takes q, k and v
             in bf16, as autocast's lower_precision_fp list casts them.
  encoder_sdpa_padded  make_models.py's encoder_padded (same weights and
             batch: sequences of 48 and 29 tokens) with its attention
             through the operator and a bool attn_mask [B, 1, 1, S] that
             keeps each sequence's own keys.
  encoder_sdpa  the same encoder and tokens without a mask (every position
             sees every other, as an encoder over unpadded sequences).
  encoder_sdpa_float_mask  encoder_sdpa_padded with the attn_mask as
             Hugging Face builds it: fp32, 0 where seen and finfo.min where
             not, which SDPA adds to the scores.
  llama_sdpa_bf16  llama_sdpa cast to bf16 before tracing, as a model
             trained in bf16 is exported (the operator takes bf16 q, k, v;
             test/e2e/train-gpu-bf16.test: its fusion on the GPU). One
             step: torch's loss and gradients.
  encoder_sdpa_float_mask_bf16  encoder_sdpa_float_mask cast to bf16, its
             mask built in the model's dtype as Hugging Face builds it (0
             or finfo(bf16).min, bf16) and its loss from fp32 logits, as
             Hugging Face's models compute it. One step.
  encoder_sdpa_offset  encoder_sdpa with one head of 64 and a large
             component shared by queries and keys (their biases raised by
             2.5): scores near 50, where rounding them to bf16 would move
             the probabilities by up to 13% (torch's kernel keeps them in
             fp32).

usage: make_attention_models.py OUT_DIR [NAME ...]   (default: all)
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "tools", "pt2-export"))
import export_joint as exporter  # noqa: E402
from corpus_models import corpus_definitions, with_attention  # noqa: E402
import make_models  # noqa: E402

NAMESPACE = "mantissa_test"
SAFE_SOFTMAX = "_safe_softmax"
FORWARD = "_scaled_dot_product_flash_attention_for_cpu"
BACKWARD = "_scaled_dot_product_flash_attention_for_cpu_backward"

_library = torch.library.Library(NAMESPACE, "DEF")
_library.define(
    FORWARD + "(Tensor query, Tensor key, Tensor value, float dropout_p=0.0, "
    "bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) "
    "-> (Tensor output, Tensor logsumexp)")
_library.define(SAFE_SOFTMAX + "(Tensor self, int dim, ScalarType? dtype=None) -> Tensor")
_library.define(
    BACKWARD + "(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
    "Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, *, "
    "Tensor? attn_mask=None, float? scale=None) "
    "-> (Tensor grad_query, Tensor grad_key, Tensor grad_value)")


def _scores(query, key, is_causal, attn_mask, scale):
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query.float(), key.float().transpose(-2, -1)) * scale
    if is_causal:
        rows, cols = scores.shape[-2:]
        future = torch.ones(rows, cols, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask.float()
    return scores, scale


def _rounded(x, dtype):
    """x as torch's CPU kernel hands it to a product for inputs of `dtype`:
    rounded to it when that is bf16 or fp16 (its *_reduced buffers)."""
    return x.to(dtype).float() if dtype in (torch.bfloat16, torch.float16) else x


# torch's CPU kernels (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp)
# compute in fp32 whatever the inputs: scores q k^T * scale (+ mask) and
# their softmax in fp32, exp(s - max) rounded to the inputs' dtype for the
# product with v (normalised after, in fp32; for fp32 inputs the same as
# softmax then the product, as written here), out rounded once; backward:
# p = exp(s - lse) in fp32, rounded for dv = p^T dout, ds = p (dp - delta)
# in fp32, rounded for dq = ds k * scale and dk = ds^T q * scale. Being C++,
# they run under torch.autocast as they are: the products inside are not
# autocast's (hence `enabled=False`).
def _forward(query, key, value, dropout_p=0.0, is_causal=False, attn_mask=None,
             scale=None):
    with torch.autocast("cpu", enabled=False):
        scores, _ = _scores(query, key, is_causal, attn_mask, scale)
        if query.dtype == torch.float32:
            output = torch.matmul(torch.softmax(scores, -1), value)
        else:
            maximum = scores.amax(-1, keepdim=True)
            exps = torch.exp(scores - maximum)
            output = torch.matmul(_rounded(exps, query.dtype), value.float())
            output = output / exps.sum(-1, keepdim=True)
        return output.to(query.dtype), torch.logsumexp(scores, -1)


def _backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
              attn_mask=None, scale=None):
    with torch.autocast("cpu", enabled=False):
        scores, scale = _scores(query, key, is_causal, attn_mask, scale)
        probabilities = torch.exp(scores - logsumexp.unsqueeze(-1))
        grad_out, out = grad_out.float(), out.float()
        grad_value = torch.matmul(
            _rounded(probabilities, query.dtype).transpose(-2, -1), grad_out)
        grad_probabilities = torch.matmul(grad_out,
                                          value.float().transpose(-2, -1))
        row_dot = (grad_out * out).sum(-1, keepdim=True)
        grad_scores = _rounded(
            probabilities * (grad_probabilities - row_dot), query.dtype)
        grad_query = torch.matmul(grad_scores, key.float()) * scale
        grad_key = torch.matmul(grad_scores.transpose(-2, -1),
                                query.float()) * scale
        return (grad_query.to(query.dtype), grad_key.to(key.dtype),
                grad_value.to(value.dtype))


def _safe_softmax(self, dim, dtype=None):
    """torch's _safe_softmax: rows of only -inf give zeros, not NaN."""
    out = torch.softmax(self, dim)
    masked_rows = self.eq(float("-inf")).all(dim, keepdim=True)
    return out.masked_fill(masked_rows, 0.0)


_library.impl(SAFE_SOFTMAX, _safe_softmax, "CPU")
_library.impl(FORWARD, _forward, "CPU")
_library.impl(BACKWARD, _backward, "CPU")
_forward_op = getattr(getattr(torch.ops, NAMESPACE), FORWARD).default
_backward_op = getattr(getattr(torch.ops, NAMESPACE), BACKWARD).default
_safe_softmax_op = getattr(getattr(torch.ops, NAMESPACE), SAFE_SOFTMAX).default
for _op, _name in ((_forward_op, FORWARD), (_backward_op, BACKWARD),
                   (_safe_softmax_op, SAFE_SOFTMAX)):
    exporter.SERIALIZED_AS[_op] = (f"torch.ops.aten.{_name}.default", {})


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, is_causal, attn_mask, scale):
        output, logsumexp = _forward_op(query, key, value, 0.0, is_causal,
                                        attn_mask=attn_mask, scale=scale)
        ctx.save_for_backward(query, key, value, output, logsumexp)
        ctx.is_causal, ctx.attn_mask, ctx.scale = is_causal, attn_mask, scale
        return output

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, output, logsumexp = ctx.saved_tensors
        grads = _backward_op(grad_out, query, key, value, output, logsumexp,
                             0.0, ctx.is_causal, attn_mask=ctx.attn_mask,
                             scale=ctx.scale)
        return grads[0], grads[1], grads[2], None, None, None


class _SafeSoftmax(torch.autograd.Function):
    """Its backward is softmax's (zero rows have zero gradient)."""
    @staticmethod
    def forward(ctx, scores, dim):
        out = _safe_softmax_op(scores, dim)
        ctx.save_for_backward(out)
        ctx.dim = dim
        return out

    @staticmethod
    def backward(ctx, grad):
        out, = ctx.saved_tensors
        return torch.ops.aten._softmax_backward_data(grad, out, ctx.dim, out.dtype), None


class AttentionBlock(torch.nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.memory = torch.nn.Linear(dim, 2 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def split(self, x):
        batch, length, dim = x.shape
        return x.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)

    def forward(self, x, context, mask, target):
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=-1)
        q, k, v = self.split(q), self.split(k), self.split(v)
        h = _Attention.apply(q, k, v, True, None, None)
        mk, mv = self.memory(context).split(dim, dim=-1)
        h = h + _Attention.apply(q, self.split(mk), self.split(mv), False, mask, 0.3)
        # Attention written out with _safe_softmax; the last query sees no
        # key at all, so its row of probabilities is zero.
        scores = torch.matmul(q, k.transpose(-2, -1)) * 0.25
        blind = torch.zeros(length, length, dtype=torch.bool)
        blind[-1] = True
        probabilities = _SafeSoftmax.apply(scores.masked_fill(blind, float("-inf")), -1)
        h = h + torch.matmul(probabilities, v)
        # The same written as torch's decomposition of _safe_softmax, which
        # torch >= 2.5's exports contain (eq -inf, all over the keys, where).
        masked = scores.masked_fill(blind, float("-inf"))
        masked_rows = masked.eq(float("-inf")).all(-1, keepdim=True)
        decomposed = torch.where(masked_rows, torch.zeros_like(masked),
                                 torch.softmax(masked, -1))
        h = h + torch.matmul(decomposed, v) * 0.5
        out = self.proj(h.transpose(1, 2).reshape(batch, length, dim))
        return ((out - target) ** 2).mean()


def sdpa(query, key, value, is_causal=False, attn_mask=None, scale=None):
    """F.scaled_dot_product_attention as torch >= 2.1 runs it on the CPU;
    under torch.autocast, with q, k and v in the autocast dtype (SDPA is on
    autocast's lower_precision_fp list; torch 1.13 knows nothing of this
    operator, so the cast is made here, and only when autocast is on: the
    exported graph has none)."""
    if torch.is_autocast_cpu_enabled():
        dtype = torch.get_autocast_cpu_dtype()
        query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    return _Attention.apply(query, key, value, is_causal, attn_mask, scale)


def make_llama_sdpa():
    """llama_ragged of make_models.py (same seed, weights and batch) with
    its attention through the SDPA operator, causal."""
    torch.manual_seed(0)
    model = corpus_definitions()["TinyLlama"](v=64, d=64, h=4, f=128, t=40, n=2)
    model = with_attention(model, lambda q, k, v: sdpa(q, k, v, is_causal=True))
    g = torch.Generator().manual_seed(1234)
    return model, (torch.randint(0, 64, (2, 40), generator=g),
                   torch.randint(0, 64, (2, 40), generator=g))


class PaddedEncoderSdpa(make_models.PaddedEncoder):
    # The loss from fp32 logits, as Hugging Face's models compute it (a
    # model in bf16 then has an fp32 loss).
    fp32_logits = False

    def forward(self, tokens, lengths, targets):
        # True where the key is the sequence's own: seen by every query.
        keep = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
        return self.loss(tokens, keep[:, None, None, :], targets)

    def loss(self, tokens, keep, targets):
        b, t = tokens.shape
        d = self.tok.weight.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t))
        for layer in self.layers:
            qkv = layer["qkv"](layer["ln1"](x))
            q, k, v = qkv.view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            y = sdpa(q, k, v, attn_mask=keep)
            x = x + layer["proj"](y.transpose(1, 2).reshape(b, t, d))
            x = x + layer["mlp"](layer["ln2"](x))
        logits = self.head(self.ln_f(x))
        if self.fp32_logits:
            logits = logits.float()
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]),
                                                 targets.view(-1))


class FloatMaskEncoderSdpa(PaddedEncoderSdpa):
    """The attn_mask as Hugging Face builds it: fp32, 0 where the key is
    seen and finfo.min where not, added to the scores."""

    def forward(self, tokens, lengths, targets):
        keep = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
        added = torch.zeros(keep.shape).masked_fill(
            keep.logical_not(), torch.finfo(torch.float32).min)
        return self.loss(tokens, added[:, None, None, :], targets)


class DtypeMaskEncoderSdpa(PaddedEncoderSdpa):
    """The float attn_mask in the model's dtype, as Hugging Face builds it
    for a model in bf16: 0 where seen, finfo(bf16).min where not; the loss
    in fp32."""
    fp32_logits = True

    def forward(self, tokens, lengths, targets):
        dtype = self.tok.weight.dtype
        keep = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
        added = torch.zeros(keep.shape, dtype=dtype).masked_fill(
            keep.logical_not(), torch.finfo(dtype).min)
        return self.loss(tokens, added[:, None, None, :], targets)


class EncoderSdpa(PaddedEncoderSdpa):
    """Without a mask: every position sees every other."""

    def forward(self, tokens, targets):
        return self.loss(tokens, None, targets)


def make_encoder_sdpa_padded():
    _, inputs = make_models.make_encoder_padded()
    torch.manual_seed(0)
    return PaddedEncoderSdpa(), inputs


def make_encoder_sdpa_float_mask():
    _, inputs = make_models.make_encoder_padded()
    torch.manual_seed(0)
    return FloatMaskEncoderSdpa(), inputs


def make_encoder_sdpa():
    (tokens, _, targets) = make_models.make_encoder_padded()[1]
    torch.manual_seed(0)
    return EncoderSdpa(), (tokens, targets)


def make_encoder_sdpa_offset():
    """encoder_sdpa with one head of 64 whose queries and keys share a
    large component (2.5 added to every element of their biases): the
    scores carry an offset of about 50 (scale 1/8), where bf16's step is
    0.25. Softmax ignores an offset common to a row, but not its
    rounding: scores rounded to bf16 (as a bf16 bmm would round them)
    move every probability by up to 13%, where torch's kernel, which keeps
    them in fp32, does not. Large shared components of queries and keys
    are what trained transformers have (attention sinks, massive
    activations)."""
    (tokens, _, targets) = make_models.make_encoder_padded()[1]
    torch.manual_seed(0)
    model = EncoderSdpa(heads=1)
    with torch.no_grad():
        for layer in model.layers:
            d = layer["qkv"].bias.shape[0] // 3
            layer["qkv"].bias[:2 * d] += 2.5
    return model, (tokens, targets)


# name -> (factory, mode), as make_models.py's MODELS (autocast_reference.py
# reads both).
MODELS = {"llama_sdpa": (make_llama_sdpa, "decomposed"),
          "encoder_sdpa_padded": (make_encoder_sdpa_padded, "decomposed"),
          "encoder_sdpa": (make_encoder_sdpa, "decomposed"),
          "encoder_sdpa_float_mask": (make_encoder_sdpa_float_mask, "decomposed"),
          "encoder_sdpa_offset": (make_encoder_sdpa_offset, "decomposed")}


def make_attention(out_dir):
    torch.manual_seed(0)
    model = AttentionBlock()
    x, context, target = torch.randn(2, 5, 16), torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    mask = torch.rand(2, 1, 5, 3) > 0.3
    mask[..., 0] = True  # every query sees at least one memory slot
    summary = exporter.export_joint(model, (x, context, mask, target), out_dir, "attention",
                           mode="decomposed", steps=20)
    print("attention", summary["self_check_error"], " ".join(summary["ops"]))
    bf16 = AttentionBlock()
    bf16.load_state_dict(model.state_dict())
    bf16 = bf16.to(torch.bfloat16)
    summary = exporter.export_joint(
        bf16, (x.bfloat16(), context.bfloat16(), mask, target.bfloat16()), out_dir,
        "attention_bf16", mode="decomposed", steps=1, check_tolerance=2e-2)
    print("attention_bf16", summary["self_check_error"])


def make_encoder_sdpa_dtype_mask():
    _, inputs = make_models.make_encoder_padded()
    torch.manual_seed(0)
    return DtypeMaskEncoderSdpa(), inputs


# Models cast to bf16 before tracing, as models trained in bf16 are
# exported (one step: torch's loss and gradients): name -> factory of the
# fp32 model, and how far the traced graph's numbers may be from eager
# torch's (in bf16, torch's decompositions round differently: the encoder's
# LayerNorm backward by up to 3% in a bias gradient near zero).
BF16_MODELS = {"llama_sdpa_bf16": (make_llama_sdpa, 2e-2),
               "encoder_sdpa_float_mask_bf16": (make_encoder_sdpa_dtype_mask, 5e-2)}


def make_bf16(out_dir, name):
    factory, tolerance = BF16_MODELS[name]
    model, inputs = factory()
    summary = exporter.export_joint(
        model.to(torch.bfloat16), inputs, out_dir, name, mode="decomposed",
        steps=1, check_tolerance=tolerance,
        make_model=lambda: factory()[0].to(torch.bfloat16))
    print(name, summary["self_check_error"])


def main():
    out_dir = sys.argv[1]
    names = sys.argv[2:] or ["attention"] + list(BF16_MODELS) + list(MODELS)
    for name in names:
        if name == "attention":
            make_attention(out_dir)
            continue
        # As make_models.py: one thread, so that a rerun writes the same bytes.
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        if name in BF16_MODELS:
            make_bf16(out_dir, name)
            continue
        factory, mode = MODELS[name]
        model, inputs = factory()
        summary = exporter.export_joint(model, inputs, out_dir, name, mode=mode,
                                        make_model=lambda factory=factory: factory()[0])
        print(name, summary["self_check_error"], " ".join(summary["ops"]))


if __name__ == "__main__":
    main()
