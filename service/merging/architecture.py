"""Declared architectures: forward passes the service runs without executing uploaded code.

A model may declare its network as a sequence of layers from a closed
vocabulary (``flatten``, ``linear``, ``relu``, ``tanh``, ``sigmoid``, ``gelu``).
Layers name the checkpoint tensors they use; registration checks the
declaration against the checkpoint's tensor signature (names exist, shapes
chain from ``input_shape`` to the logits), and the forward pass is a loop over
``torch.nn.functional``. Nothing the uploader wrote is ever executed: no
pickle, no exported program, no module import.

Why a vocabulary rather than ``torch.export`` programs: an exported program is
loaded by unpickling parts of it, and even a pickle-free graph can call any
operator torch registers. A vocabulary is small to audit and covers the
models DP training is used for here (linear models and MLPs); adding a layer
kind is a new ``op``, never a change to an existing one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from service.errors import InvalidInput

TensorName = Annotated[str, StringConstraints(min_length=1, max_length=300)]
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


class _Layer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Linear(_Layer):
    """y = x W^T + b with W of shape [out, in] and b of shape [out]."""

    op: Literal["linear"]
    weight: TensorName
    bias: TensorName | None = None


class Flatten(_Layer):
    """Flatten every dimension after the batch dimension."""

    op: Literal["flatten"]


class Activation(_Layer):
    op: Literal["relu", "tanh", "sigmoid", "gelu"]


Layer = Annotated[Linear | Flatten | Activation, Field(discriminator="op")]

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
}


class Architecture(BaseModel):
    """A sequential classifier: inputs of ``input_shape`` to one logit per class."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["sequential"] = "sequential"
    task: Literal["classification"] = "classification"
    input_shape: list[Annotated[int, Field(ge=1, le=1_000_000)]] = Field(min_length=1, max_length=4)
    layers: list[Layer] = Field(min_length=1, max_length=64)

    def check(self, signature: Mapping[str, Any]) -> int:
        """The number of classes, after checking the layers against ``signature``
        (``{name: {dtype, shape}}``). Raises ``InvalidInput`` naming the first problem."""
        width: list[int] = list(self.input_shape)
        for i, layer in enumerate(self.layers):
            where = f"architecture.layers[{i}]"
            if isinstance(layer, Flatten):
                width = [math.prod(width)]
            elif isinstance(layer, Linear):
                if len(width) != 1:
                    raise InvalidInput(f"{where}: linear needs flat inputs; add a flatten layer")
                w = _tensor(signature, layer.weight, where)
                if len(w["shape"]) != 2 or w["shape"][1] != width[0]:
                    raise InvalidInput(
                        f"{where}: weight {layer.weight!r} has shape {w['shape']}, "
                        f"expected [out, {width[0]}]"
                    )
                out = int(w["shape"][0])
                if layer.bias is not None:
                    b = _tensor(signature, layer.bias, where)
                    if b["shape"] != [out]:
                        raise InvalidInput(
                            f"{where}: bias {layer.bias!r} has shape {b['shape']}, expected [{out}]"
                        )
                width = [out]
        if len(width) != 1 or width[0] < 2:
            raise InvalidInput(
                f"architecture: the last layer gives shape {width}; a classifier ends in "
                "one logit per class (at least 2)"
            )
        return width[0]

    def forward(self, params: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Logits for the batch ``x`` (shape [n, *input_shape]) with the tensors ``params``."""
        for layer in self.layers:
            if isinstance(layer, Flatten):
                x = x.flatten(1)
            elif isinstance(layer, Linear):
                bias = params[layer.bias].to(x.dtype) if layer.bias is not None else None
                x = F.linear(x, params[layer.weight].to(x.dtype), bias)
            else:
                x = _ACTIVATIONS[layer.op](x)
        return x


def _tensor(signature: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    entry = signature.get(name)
    if entry is None:
        raise InvalidInput(f"{where}: the checkpoint has no tensor {name!r}")
    if entry["dtype"] not in FLOAT_DTYPES:
        raise InvalidInput(f"{where}: tensor {name!r} is {entry['dtype']}, not a float type")
    return entry


@torch.no_grad()
def accuracy(
    architecture: Architecture,
    params: Mapping[str, torch.Tensor],
    inputs: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int = 4096,
) -> float:
    """Top-1 accuracy of the declared network with ``params`` on (inputs, labels)."""
    correct = 0
    for start in range(0, inputs.shape[0], batch_size):
        logits = architecture.forward(params, inputs[start : start + batch_size])
        correct += int((logits.argmax(dim=1) == labels[start : start + batch_size]).sum())
    return correct / max(1, inputs.shape[0])
