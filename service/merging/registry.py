"""Merge methods by name."""

from __future__ import annotations

from service.merging.base import MergeMethod
from service.merging.checkpoint_average import CheckpointAverage
from service.merging.linear import LinearMerge
from service.merging.random_selection import RandomSelection

METHODS: dict[str, type[MergeMethod]] = {
    LinearMerge.name: LinearMerge,
    RandomSelection.name: RandomSelection,
    CheckpointAverage.name: CheckpointAverage,
}
