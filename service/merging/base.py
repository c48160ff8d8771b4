"""The merge-method interface and the name-keyed registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch


@dataclass(frozen=True)
class MergeInput:
    """One model to merge: its safetensors file and its weight."""

    path: Path
    weight: float


class MergeMethod(ABC):
    name: ClassVar[str]

    @abstractmethod
    def chunks(
        self, inputs: list[MergeInput], provenance: dict[str, str] | None = None
    ) -> Iterator[bytes | memoryview]:
        """The merged safetensors file, streamed as byte chunks. A method that writes a
        new file keeps the ``__metadata__`` entries its inputs agree on and adds
        ``provenance`` (the release's ``retarget.*`` keys)."""


def merge_device() -> torch.device:
    """The GPU when there is one (the GPU host), else the CPU; same result either way."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
