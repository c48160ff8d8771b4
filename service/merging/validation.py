"""A dataset's public validation split, and scoring merged weights on it.

The split is a safetensors file with two tensors: ``inputs`` (float, shape
[n, ...]) and ``labels`` (integer class indices, shape [n]). It is public data:
scoring a model on it reads nothing private beyond the model itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from service.errors import InvalidInput, InvalidUpload
from service.merging.architecture import Architecture, Linear, accuracy
from service.merging.base import merge_device

MAX_EXAMPLES = 1_000_000


@dataclass(frozen=True)
class ValidationSplit:
    inputs: torch.Tensor
    labels: torch.Tensor

    @property
    def examples(self) -> int:
        return int(self.labels.shape[0])

    @property
    def input_shape(self) -> list[int]:
        return list(self.inputs.shape[1:])


def read_split(path: Path) -> ValidationSplit:
    """Load and check a validation split. Raises ``InvalidUpload`` with the reason."""
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise InvalidUpload(f"not a valid safetensors file: {exc}") from exc
    if set(tensors) != {"inputs", "labels"}:
        raise InvalidUpload(
            "a validation split holds exactly the tensors 'inputs' and 'labels', "
            f"got {sorted(tensors)}"
        )
    inputs, labels = tensors["inputs"], tensors["labels"]
    if not inputs.is_floating_point() or inputs.dim() < 2:
        raise InvalidUpload(
            f"'inputs' must be a float tensor [n, ...], got {inputs.dtype} {list(inputs.shape)}"
        )
    if labels.is_floating_point() or labels.is_complex() or labels.dim() != 1:
        raise InvalidUpload(
            f"'labels' must be integer class indices [n], got {labels.dtype} {list(labels.shape)}"
        )
    n = labels.shape[0]
    if inputs.shape[0] != n or not 1 <= n <= MAX_EXAMPLES:
        raise InvalidUpload(f"'inputs' and 'labels' must hold the same 1..{MAX_EXAMPLES} examples")
    if not bool(torch.isfinite(inputs).all()):
        raise InvalidUpload("'inputs' holds NaN or infinite values")
    if int(labels.min()) < 0:
        raise InvalidUpload("'labels' must be >= 0")
    return ValidationSplit(inputs=inputs.float(), labels=labels.long())


class Scorer:
    """Accuracy on a validation split of sum_i w_i theta_i, merged in memory (on the GPU
    when there is one). ``load`` gives a model's tensors by id; each is loaded once."""

    def __init__(
        self,
        architecture: Architecture,
        split: ValidationSplit,
        load: Callable[[str], Mapping[str, torch.Tensor]],
    ) -> None:
        if split.input_shape != list(architecture.input_shape):
            raise InvalidInput(
                f"the validation inputs have shape {split.input_shape}, the architecture "
                f"expects {list(architecture.input_shape)}"
            )
        self.device = merge_device()
        self.architecture = architecture
        self.names = [
            name
            for layer in architecture.layers
            if isinstance(layer, Linear)
            for name in (layer.weight, layer.bias)
            if name is not None
        ]
        self.load = load
        self.models: dict[str, dict[str, torch.Tensor]] = {}
        self.inputs = split.inputs.to(self.device)
        self.labels = split.labels.to(self.device)

    def _model(self, model_id: str) -> dict[str, torch.Tensor]:
        if model_id not in self.models:
            tensors = self.load(model_id)
            self.models[model_id] = {
                n: tensors[n].to(self.device, torch.float32) for n in self.names
            }
        return self.models[model_id]

    def score(self, weights: Mapping[str, float]) -> float:
        params: dict[str, torch.Tensor] = {}
        for model_id, w in weights.items():
            for n, t in self._model(model_id).items():
                params[n] = params[n].add(t, alpha=w) if n in params else t * w
        return accuracy(self.architecture, params, self.inputs, self.labels)
