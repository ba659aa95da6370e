"""The diffusion example's model: a class-conditional DiT trained by
rectified flow on 16x16 digits, with its noise and timesteps drawn inside
the step.

Factories for ``python3 -m mantissa.export examples/diffusion/model.py:FACTORY``:

- ``train``: the training step. The batch is the dataset's sample, ``x0``
  (float32 [B, 1, 16, 16] in [-1, 1]) and ``class_labels`` (int64 [B],
  0..9); everything random is drawn by the step itself (docs/randomness.md),
  from ``mantissa-run --seed`` and the global sample index, so any (W, K)
  split and a resume draw the same numbers:

  - ``t = torch.rand(B)``, uniform on [0, 1) per sample;
  - ``noise = torch.randn_like(x0)``, per sample;
  - DiT's own class dropout for classifier-free guidance
    (``torch.rand(B) < 0.1`` replaces the label by the null class 10),
    drawn afresh by each block's conditioning and by the output layer's
    (diffusers calls the first block's embedding again there).

  With ``x_t = (1 - t) x0 + t noise`` the model predicts the velocity
  ``v = model(x_t, timestep=1000 t, class_labels)`` and the loss is
  ``mse(v, noise - x0)`` (rectified flow: ``dx_t/dt = noise - x0``).
- ``denoiser``: the same model in eval mode (no class dropout) as a
  function of given ``x_t``, ``t`` and ``class_labels``, for sampling
  (sample.py): its step's user output ``velocity`` is ``v``; its loss,
  ``mse(v, target)`` against a given ``target``, is only there because a
  step has one. Parameters are named as in ``train``
  (``transformer.transformer_blocks.0.attn1.to_q.weight``), so the training
  run's ``--final-params`` are the denoiser's ``--weights``.
- ``train_tiny``, ``denoiser_tiny``: the same at 8x8 with one small block,
  for the test that runs in CI (test/Python/example-diffusion.test).

The model is diffusers' ``DiTTransformer2DModel`` (patch embedding with
fixed sine-cosine positions, adaLN-Zero blocks conditioned on the timestep
and the class, self-attention, tanh-GELU MLP, unpatchify) with
``out_channels = in_channels = 1``: it predicts the velocity only, not
DiT's learned variance.
"""

from __future__ import annotations

import diffusers
import torch
import torch.nn.functional as F

NUM_CLASSES = 10
NULL_CLASS = NUM_CLASSES  # DiT's label table has one more row, for "no class"
CLASS_DROPOUT = 0.1
TIMESTEP_SCALE = 1000.0
EXPORT_BATCH = 4

# (image side, patch, layers, heads, head dim)
CONFIGS = {
    "example": dict(sample_size=16, patch_size=2, num_layers=4, num_attention_heads=4,
                    attention_head_dim=16),
    "tiny": dict(sample_size=8, patch_size=2, num_layers=1, num_attention_heads=2,
                 attention_head_dim=8),
}


def make_dit(config: str) -> diffusers.DiTTransformer2DModel:
    """The DiT of ``config``, its weights from torch.manual_seed(0)."""
    torch.manual_seed(0)
    model = diffusers.DiTTransformer2DModel(
        in_channels=1, out_channels=1, num_embeds_ada_norm=NUM_CLASSES,
        **CONFIGS[config])
    for block in model.transformer_blocks:
        block.norm1.emb.class_embedder.dropout_prob = CLASS_DROPOUT
    return model


def velocity(model: torch.nn.Module, x_t: torch.Tensor, t: torch.Tensor,
             class_labels: torch.Tensor) -> torch.Tensor:
    """The model's velocity at x_t, t in [0, 1]."""
    return model(x_t, timestep=t * TIMESTEP_SCALE, class_labels=class_labels).sample


class RectifiedFlow(torch.nn.Module):
    """One training example of rectified flow; returns (velocity, target)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = model

    def forward(self, x0: torch.Tensor, class_labels: torch.Tensor):
        t = torch.rand(x0.shape[0])
        noise = torch.randn_like(x0)
        s = t.reshape(-1, 1, 1, 1)
        x_t = (1.0 - s) * x0 + s * noise
        return velocity(self.transformer, x_t, t, class_labels), noise - x0


class Denoiser(torch.nn.Module):
    """The velocity at given (x_t, t, class_labels)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = model

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, class_labels: torch.Tensor):
        return velocity(self.transformer, x_t, t, class_labels)


def mse_loss(output, batch):
    prediction, target = output
    return F.mse_loss(prediction, target)


def denoiser_loss(output, batch):
    return F.mse_loss(output, batch["target"])


def denoiser_outputs(output, batch):
    return {"velocity": output}


def _batch(config: str, batch: int = EXPORT_BATCH) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    side = CONFIGS[config]["sample_size"]
    return {
        "x0": torch.rand(batch, 1, side, side, generator=gen) * 2.0 - 1.0,
        "class_labels": torch.randint(0, NUM_CLASSES, (batch,), generator=gen),
    }


def _train(config: str):
    return RectifiedFlow(make_dit(config)).train(), _batch(config), mse_loss


def _denoiser(config: str):
    clean = _batch(config)
    gen = torch.Generator().manual_seed(2)
    batch = {
        "x_t": torch.randn(clean["x0"].shape, generator=gen),
        "t": torch.rand(EXPORT_BATCH, generator=gen),
        "class_labels": clean["class_labels"],
        "target": torch.zeros(clean["x0"].shape),
    }
    return Denoiser(make_dit(config)).eval(), batch, denoiser_loss, denoiser_outputs


def train():
    return _train("example")


def denoiser():
    return _denoiser("example")


def train_tiny():
    return _train("tiny")


def denoiser_tiny():
    return _denoiser("tiny")
