"""The batch a training step is exported with: its checks, names and batch dims."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

import torch

from .errors import ExportError

# What mantissa-compile imports as a user input: floating data in the dtypes
# the precision plans know, and integer or boolean indices and masks.
_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64,
                 torch.int32, torch.bool)


class Batch:
    """One batch: keyword tensors (as Hugging Face models take them) or
    positional ones, checked before anything is traced."""

    def __init__(self, batch: Any, model_name: str):
        if isinstance(batch, Mapping):
            self.kwargs = dict(batch)
            self.args: tuple = ()
            labelled = [(f"batch[{key!r}]", key, value) for key, value in self.kwargs.items()]
            for key in self.kwargs:
                if not isinstance(key, str):
                    raise ExportError(f"model {model_name}: batch key {key!r} is not a string; "
                                      "a dict batch holds the model's keyword arguments")
        elif isinstance(batch, (tuple, list)):
            self.kwargs = {}
            self.args = tuple(batch)
            labelled = [(f"batch[{index}]", str(index), value)
                        for index, value in enumerate(self.args)]
        else:
            raise ExportError(
                f"model {model_name}: the batch is a {type(batch).__name__}; give a dict of "
                "keyword tensors (as Hugging Face models take them) or a tuple of positional ones")
        if not labelled:
            raise ExportError(f"model {model_name}: the batch is empty")
        for label, key, value in labelled:
            _check_tensor(model_name, label, key, value)
        self._unalias()

    def _unalias(self) -> None:
        """Entries that are one tensor (HF's `labels=input_ids`) become
        copies: torch.export traces aliased inputs as one, and the step
        would read `input_ids` where the user's data gives `labels`."""
        seen: set[int] = set()

        def distinct(value: torch.Tensor) -> torch.Tensor:
            storage = value.untyped_storage().data_ptr()
            if storage in seen and value.numel():
                return value.clone()
            seen.add(storage)
            return value
        self.args = tuple(distinct(value) for value in self.args)
        self.kwargs = {key: distinct(value) for key, value in self.kwargs.items()}

    def call(self, module: torch.nn.Module) -> Any:
        return module(*self.args, **self.kwargs)

    def tensors(self) -> list[torch.Tensor]:
        return list(self.args) + list(self.kwargs.values())


def _check_tensor(model_name: str, label: str, key: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        raise ExportError(
            f"model {model_name}: {label} is a {type(value).__name__}, not a tensor; every "
            "batch entry becomes an input of the compiled step (make constants part of the model)")
    if value.dtype not in _INPUT_DTYPES:
        hint = " (x.float())" if value.is_floating_point() else ""
        raise ExportError(
            f"model {model_name}: {label} has dtype {_dtype_name(value.dtype)}; Mantissa's inputs "
            f"are float32, bfloat16, float16, int64, int32 or bool{hint}")
    # Hugging Face spells token and position indices *_ids: as floats they
    # would fail deep inside an embedding, far from the argument at fault.
    if key.endswith("_ids") and value.is_floating_point():
        raise ExportError(
            f"model {model_name}: {label} has dtype {_dtype_name(value.dtype)}, but token ids "
            "are integers: pass it as torch.long")
    if value.device.type != "cpu":
        raise ExportError(f"model {model_name}: {label} is on {value.device}; export on the CPU")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def batch_dims(names: list[str], tensors: list[torch.Tensor]) -> dict[str, int | None]:
    """Dimension 0 of every batched user input, None for the others.

    The batch size is the commonest size of dimension 0 among the inputs;
    an input whose first dimension differs (a mask broadcast over the batch,
    a 0-d scalar) is not batched.
    """
    sizes = Counter(t.shape[0] for t in tensors if t.dim() >= 1)
    if not sizes:
        return {name: None for name in names}
    batch_size = sizes.most_common(1)[0][0]
    return {name: 0 if t.dim() >= 1 and t.shape[0] == batch_size else None
            for name, t in zip(names, tensors)}
