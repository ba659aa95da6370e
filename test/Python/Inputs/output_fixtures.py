"""Factories whose fourth element, outputs_fn, names tensors the exported
step returns beside the loss (mantissa-run --outputs writes them), and
outputs_fn's bad returns. Each returns (model, batch, loss_fn, outputs_fn).
"""

import torch
import torch.nn as nn

from mantissa.zoo import diffusers_models


def dit_prediction():
    """The zoo's DiT (diffusers DiTTransformer2DModel, DDPM noise
    prediction) with its prediction of the noise as the user output."""
    model, batch, loss_fn = diffusers_models.dit()

    def outputs_fn(output, batch):
        prediction, _ = output
        return {"prediction": prediction}
    return model, batch, loss_fn, outputs_fn


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8))

    def forward(self, x):
        return self.body(x)


def _regressor_batch():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    return Regressor(), {"x": torch.randn(4, 16, generator=g),
                         "target": torch.randn(4, 8, generator=g)}


def _mse(output, batch):
    return ((output - batch["target"]) ** 2).mean()


def regressor():
    """The regressor without outputs_fn: its training losses must be those
    of regressor_outputs, bit for bit."""
    model, batch = _regressor_batch()
    return model, batch, _mse


def regressor_outputs():
    """Two outputs of different shapes and values, in this order: the
    prediction [4, 8] and the per-sample squared error [4]."""
    model, batch = _regressor_batch()

    def outputs_fn(output, batch):
        return {"prediction": output,
                "sample_error": ((output - batch["target"]) ** 2).sum(dim=1)}
    return model, batch, _mse, outputs_fn


def _with_outputs(outputs_fn):
    model, batch = _regressor_batch()
    return model, batch, _mse, outputs_fn


def outputs_not_dict():
    return _with_outputs(lambda output, batch: [output])


def outputs_not_tensor():
    return _with_outputs(lambda output, batch: {"prediction": output, "scale": 2.0})


def outputs_named_loss():
    return _with_outputs(lambda output, batch: {"loss": output})


def outputs_bad_name():
    return _with_outputs(lambda output, batch: {"noise-prediction": output})


def outputs_not_function():
    model, batch = _regressor_batch()
    return model, batch, _mse, "prediction"


class NoisyRegressor(nn.Module):
    """Draws noise inside the step (randn_like): the outputs depend on
    mantissa-run's --seed."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8))

    def forward(self, x):
        return self.body(x + 0.5 * torch.randn_like(x))


def noisy_regressor_outputs():
    _, batch = _regressor_batch()
    torch.manual_seed(0)
    return NoisyRegressor(), batch, _mse, lambda output, batch: {"prediction": output}
