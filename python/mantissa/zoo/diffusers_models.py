"""diffusers models of the zoo, from small configs, with their training objective.

Each factory builds a real ``diffusers`` model class from a config of
0.2-5 M parameters with a fixed seed (nothing is downloaded) and returns
``(objective, batch, loss_fn)`` as ``mantissa.export`` takes it:

- ``objective`` is a :class:`DenoisingObjective` holding the model as
  ``transformer`` (or ``unet``), the attribute a diffusers pipeline gives it,
  so parameters are named e.g. ``transformer.transformer_blocks.0.attn1.to_q.weight``.
  Its forward is one training example of the model's objective on GIVEN
  noise and timesteps: it noises the clean latents, runs the model and
  returns ``(prediction, target)``. Drawing the noise and the timesteps is
  the sampling of the any-objective issue; here they are part of the batch,
  so the step is a deterministic function of the batch.
- ``batch`` holds the clean latents ``x0``, the ``noise``, the ``timestep``
  and the conditioning each model requires, as keyword tensors.
- ``loss_fn(output, batch)`` is the mean squared error of the prediction
  against the target.

Two objectives: DDPM noise prediction (``x_t = sqrt(a) x0 + sqrt(1 - a) noise``
with ``a`` from the linear-beta ``alphas_cumprod`` table of Stable Diffusion's
scheduler, integer timesteps; DiT, PixArt-alpha, UNet2DModel) and rectified
flow (``x_t = (1 - s) x0 + s noise``, target ``noise - x0``, sigmas in
[0, 1]; SD3, Flux, LTX-Video), as each model family is trained.

Every model is fp32, in training mode, with dropout 0. DiT's label embedding
drops class labels at random for classifier-free guidance (``torch.rand``);
that is random-number drawing, which the any-objective issue brings, so its
``dropout_prob`` is set to 0 after construction (the null-class row of the
table stays, with a zero gradient).

Export one with ``python3 -m mantissa.export
mantissa.zoo.diffusers_models:dit OUT dit --reference-steps 20``.
"""

from __future__ import annotations

import math
from typing import Callable

import diffusers
import torch
import torch.nn.functional as F

Batch = dict[str, torch.Tensor]
Output = tuple[torch.Tensor, torch.Tensor]

_SEED = 0
_BATCH = 2
_TRAIN_TIMESTEPS = 1000


def _seeded() -> torch.Generator:
    torch.manual_seed(_SEED)
    return torch.Generator().manual_seed(_SEED + 1)


def _ddpm_alphas_cumprod() -> torch.Tensor:
    """Stable Diffusion's "scaled_linear" betas (0.00085 to 0.012), as
    diffusers' DDPMScheduler computes its alphas_cumprod."""
    betas = (
        torch.linspace(
            math.sqrt(0.00085),
            math.sqrt(0.012),
            _TRAIN_TIMESTEPS,
            dtype=torch.float64,
        )
        ** 2
    )
    return torch.cumprod(1.0 - betas, dim=0).to(torch.float32)


def mse_loss(output: Output, batch: Batch) -> torch.Tensor:
    """The diffusion loss: MSE of the model's prediction against the target."""
    prediction, target = output
    return F.mse_loss(prediction, target)


class DenoisingObjective(torch.nn.Module):
    """One training example of a diffusion model on given noise and timesteps.

    ``kind`` is ``"ddpm"`` (predict the noise of ``sqrt(a_t) x0 +
    sqrt(1 - a_t) noise``, integer ``timestep``) or ``"flow"`` (predict the
    velocity ``noise - x0`` of ``(1 - s) x0 + s noise``, ``timestep`` = s in
    [0, 1], handed to the model times ``timestep_scale``). ``call`` runs the
    model on the noised latents, the batch's conditioning and the
    timesteps, and returns its prediction; non-tensor arguments of the model
    (frame counts, sizes) are bound into it.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        attribute: str,
        kind: str,
        call: Callable[..., torch.Tensor],
        timestep_scale: float = 1.0,
    ) -> None:
        super().__init__()
        if kind not in ("ddpm", "flow"):
            raise ValueError(f"DenoisingObjective: unknown kind {kind!r}")
        self.attribute = attribute
        self.add_module(attribute, model)
        self.kind = kind
        self.call = call
        self.timestep_scale = timestep_scale
        if kind == "ddpm":
            # Not a buffer: a constant of the objective, not state to train
            # or to save with the model.
            self.alphas_cumprod = _ddpm_alphas_cumprod()

    def forward(
        self,
        x0: torch.Tensor,
        noise: torch.Tensor,
        timestep: torch.Tensor,
        **conditioning: torch.Tensor,
    ) -> Output:
        model = getattr(self, self.attribute)
        shape = (-1,) + (1,) * (x0.dim() - 1)
        if self.kind == "ddpm":
            table = self.alphas_cumprod.to(x0.device)
            alpha = table.index_select(0, timestep).reshape(shape)
            noisy = alpha.sqrt() * x0 + (1.0 - alpha).sqrt() * noise
            target = noise
            model_timestep = timestep
        else:
            sigma = timestep.reshape(shape)
            noisy = (1.0 - sigma) * x0 + sigma * noise
            target = noise - x0
            model_timestep = timestep * self.timestep_scale
        prediction = self.call(model, noisy, model_timestep, **conditioning)
        return prediction, target


def _finish(
    objective: DenoisingObjective, batch: Batch
) -> tuple[torch.nn.Module, Batch, Callable[[Output, Batch], torch.Tensor]]:
    """Training mode, fp32: what every factory hands the exporter."""
    return objective.float().train(), batch, mse_loss


def _ddpm_timesteps(gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, _TRAIN_TIMESTEPS, (_BATCH,), generator=gen)


def _sigmas(gen: torch.Generator) -> torch.Tensor:
    return torch.rand(_BATCH, generator=gen)


def dit():
    """DiTTransformer2DModel: patch embedding, adaLN-Zero from timestep and
    class label, self-attention, tanh-GELU MLP, unpatchify; DDPM noise
    prediction on 8x8x4 latents of 16 classes."""
    gen = _seeded()
    model = diffusers.DiTTransformer2DModel(
        num_attention_heads=4,
        attention_head_dim=16,
        in_channels=4,
        num_layers=2,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=16,
    )
    for block in model.transformer_blocks:
        block.norm1.emb.class_embedder.dropout_prob = 0.0

    def call(m, noisy, t, class_labels):
        return m(noisy, timestep=t, class_labels=class_labels).sample

    batch = {
        "x0": torch.randn(_BATCH, 4, 8, 8, generator=gen),
        "noise": torch.randn(_BATCH, 4, 8, 8, generator=gen),
        "timestep": _ddpm_timesteps(gen),
        "class_labels": torch.randint(0, 16, (_BATCH,), generator=gen),
    }
    return _finish(DenoisingObjective(model, "transformer", "ddpm", call), batch)


def unet():
    """UNet2DModel: the convolutional model. ResNet blocks (GroupNorm, SiLU,
    3x3 convolutions, time embedding added), a strided-convolution
    downsample, self-attention at the lower resolution, nearest upsampling
    and skip concatenations; DDPM noise prediction on 16x16 RGB images."""
    gen = _seeded()
    model = diffusers.UNet2DModel(
        sample_size=16,
        in_channels=3,
        out_channels=3,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
        attention_head_dim=16,
    )

    def call(m, noisy, t):
        return m(noisy, t).sample

    batch = {
        "x0": torch.randn(_BATCH, 3, 16, 16, generator=gen),
        "noise": torch.randn(_BATCH, 3, 16, 16, generator=gen),
        "timestep": _ddpm_timesteps(gen),
    }
    return _finish(DenoisingObjective(model, "unet", "ddpm", call), batch)


def pixart():
    """PixArtTransformer2DModel (PixArt-alpha): adaLN-single from the
    timestep, self-attention, cross-attention to projected caption features
    with a key padding mask (made additive by the model), tanh-GELU MLP;
    DDPM noise prediction on 8x8x4 latents, 6 caption tokens (the second
    caption padded after 4)."""
    gen = _seeded()
    model = diffusers.PixArtTransformer2DModel(
        num_attention_heads=4,
        attention_head_dim=16,
        in_channels=4,
        out_channels=4,
        num_layers=3,
        cross_attention_dim=64,
        sample_size=8,
        patch_size=2,
        caption_channels=24,
        use_additional_conditions=False,
    )

    def call(m, noisy, t, encoder_hidden_states, encoder_attention_mask):
        return m(
            noisy,
            encoder_hidden_states=encoder_hidden_states,
            timestep=t,
            encoder_attention_mask=encoder_attention_mask,
        ).sample

    mask = torch.ones(_BATCH, 6)
    mask[1, 4:] = 0.0
    batch = {
        "x0": torch.randn(_BATCH, 4, 8, 8, generator=gen),
        "noise": torch.randn(_BATCH, 4, 8, 8, generator=gen),
        "timestep": _ddpm_timesteps(gen),
        "encoder_hidden_states": torch.randn(_BATCH, 6, 24, generator=gen),
        "encoder_attention_mask": mask,
    }
    return _finish(DenoisingObjective(model, "transformer", "ddpm", call), batch)


def sd3():
    """SD3Transformer2DModel (MMDiT): joint attention over image patches and
    projected text tokens, adaLN-Zero from the timestep and the pooled text
    projection, a context-only last block; rectified flow on 8x8x4 latents
    (timesteps are sigmas times 1000, as SD3's scheduler hands them)."""
    gen = _seeded()
    model = diffusers.SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=4,
        joint_attention_dim=32,
        caption_projection_dim=64,
        pooled_projection_dim=32,
        out_channels=4,
        pos_embed_max_size=8,
    )

    def call(m, noisy, t, encoder_hidden_states, pooled_projections):
        return m(
            noisy,
            encoder_hidden_states=encoder_hidden_states,
            pooled_projections=pooled_projections,
            timestep=t,
        ).sample

    batch = {
        "x0": torch.randn(_BATCH, 4, 8, 8, generator=gen),
        "noise": torch.randn(_BATCH, 4, 8, 8, generator=gen),
        "timestep": _sigmas(gen),
        "encoder_hidden_states": torch.randn(_BATCH, 6, 32, generator=gen),
        "pooled_projections": torch.randn(_BATCH, 32, generator=gen),
    }
    objective = DenoisingObjective(
        model, "transformer", "flow", call, timestep_scale=1000.0
    )
    return _finish(objective, batch)


def flux():
    """FluxTransformer2DModel: double-stream (joint) blocks and single-stream
    blocks with 3-axis rotary position embeddings from image and text ids,
    guidance embedding; rectified flow on 16 packed latent tokens of 16
    channels (a 4x4 grid), 6 text tokens (Flux scales the sigma by 1000
    itself)."""
    gen = _seeded()
    model = diffusers.FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=4,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        guidance_embeds=True,
        axes_dims_rope=(4, 6, 6),
    )

    def call(m, noisy, t, encoder_hidden_states, pooled_projections, img_ids,
             txt_ids, guidance):
        return m(
            noisy,
            encoder_hidden_states=encoder_hidden_states,
            pooled_projections=pooled_projections,
            timestep=t,
            img_ids=img_ids,
            txt_ids=txt_ids,
            guidance=guidance,
        ).sample

    # Position ids (frame, row, column) per token: integers, which Flux's
    # position embedding converts to fp32 itself.
    rows, cols = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    img_ids = torch.stack(
        [torch.zeros(16, dtype=torch.long), rows.flatten(), cols.flatten()], dim=1
    )
    batch = {
        "x0": torch.randn(_BATCH, 16, 16, generator=gen),
        "noise": torch.randn(_BATCH, 16, 16, generator=gen),
        "timestep": _sigmas(gen),
        "encoder_hidden_states": torch.randn(_BATCH, 6, 32, generator=gen),
        "pooled_projections": torch.randn(_BATCH, 32, generator=gen),
        "img_ids": img_ids,
        "txt_ids": torch.zeros(6, 3, dtype=torch.long),
        "guidance": torch.full((_BATCH,), 3.5),
    }
    return _finish(DenoisingObjective(model, "transformer", "flow", call), batch)


def ltx_video():
    """LTXVideoTransformer3DModel: 3-D rotary position embeddings over
    frames, rows and columns, RMS norm of queries and keys across heads,
    adaLN-single, cross-attention to projected captions with a padding mask;
    rectified flow on 2 frames of 4x4 latents of 8 channels (packed as 32
    tokens), timesteps as sigmas times 1000."""
    gen = _seeded()
    frames, height, width = 2, 4, 4
    model = diffusers.LTXVideoTransformer3DModel(
        in_channels=8,
        out_channels=8,
        patch_size=1,
        patch_size_t=1,
        num_attention_heads=4,
        attention_head_dim=16,
        cross_attention_dim=64,
        num_layers=3,
        caption_channels=24,
    )

    def call(m, noisy, t, encoder_hidden_states, encoder_attention_mask):
        return m(
            noisy,
            encoder_hidden_states=encoder_hidden_states,
            timestep=t,
            encoder_attention_mask=encoder_attention_mask,
            num_frames=frames,
            height=height,
            width=width,
        ).sample

    tokens = frames * height * width
    mask = torch.ones(_BATCH, 6)
    mask[1, 4:] = 0.0
    batch = {
        "x0": torch.randn(_BATCH, tokens, 8, generator=gen),
        "noise": torch.randn(_BATCH, tokens, 8, generator=gen),
        "timestep": _sigmas(gen),
        "encoder_hidden_states": torch.randn(_BATCH, 6, 24, generator=gen),
        "encoder_attention_mask": mask,
    }
    objective = DenoisingObjective(
        model, "transformer", "flow", call, timestep_scale=1000.0
    )
    return _finish(objective, batch)
