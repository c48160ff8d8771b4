"""Checkpoint averaging ("Recycling Scraps" (Shejwalkar et al., PoPETs 2025)): weights over
checkpoints
of one run, merged like a linear combination. Its privacy is that of the latest checkpoint
used: the average is post-processing of that one run.

Convention for the EMA: checkpoints sorted by step theta_1..theta_k, weights proportional to
decay^(k - j) for theta_j (the latest gets the largest weight), normalised to sum to 1.
"""

from __future__ import annotations

from collections.abc import Iterator

from service.accounting.planning import average_weights
from service.merging.base import MergeInput, MergeMethod
from service.merging.linear import LinearMerge

__all__ = ["CheckpointAverage", "average_weights"]


class CheckpointAverage(MergeMethod):
    name = "checkpoint_average"

    def chunks(
        self, inputs: list[MergeInput], provenance: dict[str, str] | None = None
    ) -> Iterator[bytes | memoryview]:
        return LinearMerge().chunks(inputs, provenance)
