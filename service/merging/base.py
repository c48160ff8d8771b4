"""The merge-method interface and the name-keyed registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from service.merging.device import merge_device

__all__ = ["MergeInput", "MergeMethod", "configure_threads", "merge_device"]


@dataclass(frozen=True)
class MergeInput:
    """One model to merge: its safetensors file and its weight."""

    path: Path
    weight: float
    #: the model's name (or id), for messages
    label: str = ""


class MergeMethod(ABC):
    name: ClassVar[str]

    @abstractmethod
    def chunks(
        self, inputs: list[MergeInput], provenance: dict[str, str] | None = None
    ) -> Iterator[bytes | memoryview]:
        """The merged safetensors file, streamed as byte chunks. A method that writes a
        new file keeps the ``__metadata__`` entries its inputs agree on and adds
        ``provenance`` (the release's ``retarget.*`` keys)."""


def configure_threads(threads_per_merge: int) -> None:
    """Intra-op torch threads for merging (process-wide; 0 keeps torch's default).

    Merges stream tensors, bound by memory copies: under concurrent merges the
    default (one thread per core, each merge) oversubscribes the cores, while one
    thread per merge keeps each near memory-copy speed.
    """
    if threads_per_merge < 0:
        raise ValueError(f"threads_per_merge must be >= 0, got {threads_per_merge}")
    if threads_per_merge > 0 and torch.get_num_threads() != threads_per_merge:
        torch.set_num_threads(threads_per_merge)
