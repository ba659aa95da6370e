"""Hugging Face transformers models of the zoo, from small configs.

Each factory builds a real ``transformers`` model class from a config of
0.2-5 M parameters with a fixed seed (nothing is downloaded) and returns
``(model, batch)`` as ``mantissa.export`` takes it: the batch is a dict of
keyword tensors with ``labels``, so the model's ``output.loss`` is the
training loss. Every model is fp32, in training mode, with dropout
probabilities 0 (dropout is another issue), ``use_cache=False`` and torch's
``scaled_dot_product_attention`` (``attn_implementation="sdpa"``).

Status per model (import, gradients and a 20-step AdamW trajectory against
eager torch, GPU code generation) and the reasons for the configuration
choices below: docs/zoo/transformers-notes.md.

Export one with ``python3 -m mantissa.export
mantissa.zoo.transformers_models:llama OUT llama --reference-steps 20``.
"""

from __future__ import annotations

import torch
import transformers

Batch = dict[str, torch.Tensor]

_SEED = 0
_BATCH = 2
_SEQ = 24
_VOCAB = 256


def _seeded() -> torch.Generator:
    torch.manual_seed(_SEED)
    return torch.Generator().manual_seed(_SEED + 1)


def _finish(model: torch.nn.Module) -> torch.nn.Module:
    """Training mode, fp32: what every factory hands the exporter."""
    return model.float().train()


def _lm_batch(gen: torch.Generator, vocab: int = _VOCAB) -> Batch:
    """Tokens and next-token labels: HF causal LMs shift the labels themselves."""
    ids = torch.randint(0, vocab, (_BATCH, _SEQ), generator=gen)
    return {"input_ids": ids, "labels": ids.clone()}


def _padded_lm_batch(gen: torch.Generator, pad: int = 5) -> Batch:
    """`_lm_batch` whose second sequence ends in `pad` padding positions: an
    attention mask that hides them and -100 labels that drop them."""
    batch = _lm_batch(gen)
    mask = torch.ones_like(batch["input_ids"])
    mask[1, _SEQ - pad :] = 0
    batch["labels"][1, _SEQ - pad :] = -100
    return {"input_ids": batch["input_ids"], "attention_mask": mask, "labels": batch["labels"]}


def _decoder(**overrides) -> dict:
    """The decoder LMs' shared config: 2 layers of width 128, 4 heads,
    positions up to 64, no dropout, no KV cache, SDPA attention; each model
    adds or overrides its own entries."""
    config = dict(vocab_size=_VOCAB, hidden_size=128, intermediate_size=256,
                  num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64, attention_dropout=0.0,
                  use_cache=False, attn_implementation="sdpa")
    config.update(overrides)
    return config


def llama() -> tuple[torch.nn.Module, Batch]:
    """LlamaForCausalLM: RMSNorm, RoPE, GQA (4 query heads, 2 key/value heads), SwiGLU."""
    gen = _seeded()
    config = transformers.LlamaConfig(**_decoder(
        intermediate_size=344,
        num_key_value_heads=2,
    ))
    return _finish(transformers.LlamaForCausalLM(config)), _lm_batch(gen)


def gpt2(dropout: float = 0.0) -> tuple[torch.nn.Module, Batch]:
    """GPT2LMHeadModel: learned positions, LayerNorm, Conv1D projections, tanh-GELU, tied LM head."""
    gen = _seeded()
    config = transformers.GPT2Config(
        vocab_size=_VOCAB,
        n_positions=64,
        n_embd=128,
        n_layer=2,
        n_head=4,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
        # torch 2.11's decomposition of the CPU flash attention returns its
        # output with other strides than the fused kernel, and GPT-2's
        # Conv1D `view` of it then fails inside _export_forward_backward:
        # GPT-2 is exported with its own (eager) attention.
        attn_implementation="eager",
    )
    return _finish(transformers.GPT2LMHeadModel(config)), _lm_batch(gen)


def gpt2_dropout() -> tuple[torch.nn.Module, Batch]:
    """gpt2 with dropout 0.1 on the embeddings, the attention probabilities
    and the residual branches, drawn inside the step (docs/randomness.md);
    evaluation runs it off. Not in MODELS: the zoo's checks compare with
    torch's own draws, which differ."""
    return gpt2(dropout=0.1)


def bert() -> tuple[torch.nn.Module, Batch]:
    """BertForMaskedLM: post-LayerNorm encoder, token types, exact GELU; a padding mask, -100 labels."""
    gen = _seeded()
    config = transformers.BertConfig(
        vocab_size=_VOCAB,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="sdpa",
    )
    model = transformers.BertForMaskedLM(config)
    ids = torch.randint(0, _VOCAB, (_BATCH, _SEQ), generator=gen)
    mask = torch.ones(_BATCH, _SEQ, dtype=torch.int64)
    mask[1, _SEQ - 5 :] = 0  # the second sequence is padded
    masked = torch.rand(_BATCH, _SEQ, generator=gen) < 0.3
    labels = torch.where(masked & (mask == 1), ids, torch.full_like(ids, -100))
    return _finish(model), {"input_ids": ids, "attention_mask": mask, "labels": labels}


def qwen3() -> tuple[torch.nn.Module, Batch]:
    """Qwen3ForCausalLM: Llama's layout with RMSNorm on each head's queries and keys, GQA; a padded batch."""
    gen = _seeded()
    config = transformers.Qwen3Config(**_decoder(
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=False,
    ))
    return _finish(transformers.Qwen3ForCausalLM(config)), _padded_lm_batch(gen)


def mistral() -> tuple[torch.nn.Module, Batch]:
    """MistralForCausalLM: Llama's layout with a sliding window shorter than the sequence."""
    gen = _seeded()
    config = transformers.MistralConfig(**_decoder(
        num_key_value_heads=1,
        sliding_window=8,
    ))
    return _finish(transformers.MistralForCausalLM(config)), _lm_batch(gen)


def phi3() -> tuple[torch.nn.Module, Batch]:
    """Phi3ForCausalLM: fused qkv and gate_up projections, partial RoPE."""
    gen = _seeded()
    config = transformers.Phi3Config(**_decoder(
        num_key_value_heads=2,
        partial_rotary_factor=0.5,
        original_max_position_embeddings=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        pad_token_id=0,
    ))
    return _finish(transformers.Phi3ForCausalLM(config)), _lm_batch(gen)


def gemma2() -> tuple[torch.nn.Module, Batch]:
    """Gemma2ForCausalLM: attention and final-logit soft-capping, GeGLU, (1 + w) RMSNorm, sliding layers."""
    gen = _seeded()
    config = transformers.Gemma2Config(**_decoder(
        num_key_value_heads=2,
        head_dim=32,
        sliding_window=8,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        attn_implementation="eager",
    ))
    return _finish(transformers.Gemma2ForCausalLM(config)), _lm_batch(gen)


def vit() -> tuple[torch.nn.Module, Batch]:
    """ViTForImageClassification: conv patch embedding, CLS token, pre-LayerNorm encoder."""
    gen = _seeded()
    config = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=10,
        attn_implementation="sdpa",
    )
    model = transformers.ViTForImageClassification(config)
    pixels = torch.randn(_BATCH * 2, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (_BATCH * 2,), generator=gen)
    return _finish(model), {"pixel_values": pixels, "labels": labels}


MODELS = {
    "llama": llama,
    "gpt2": gpt2,
    "bert": bert,
    "qwen3": qwen3,
    "mistral": mistral,
    "phi3": phi3,
    "gemma2": gemma2,
    "vit": vit,
}
