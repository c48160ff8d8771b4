"""scikit-learn's digits (8x8 images, 10 classes, shipped inside the wheel), split into
train (private), a public validation split and test."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Split:
    inputs: torch.Tensor  # float32 [n, 64], pixel values scaled to [0, 1]
    labels: torch.Tensor  # int64 [n]


@dataclass(frozen=True)
class Digits:
    train: Split
    validation: Split
    test: Split


def load_digits_splits(seed: int = 42, validation: int = 100, test: int = 1000) -> Digits:
    """A fixed random split of the 1,797 digits: the first ``validation`` and next
    ``test`` examples of a seeded permutation are the public validation split and the
    held-out test split; the remaining 697 are the private training set.

    The test split is large (1,000) so that accuracies differing by a point or two are
    told apart (its standard error is at most 1.6 points); training on 697 rather than
    1,197 examples costs the models some accuracy, which is the same for every method."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    x = torch.tensor(x[order] / 16.0, dtype=torch.float32)
    y = torch.tensor(y[order], dtype=torch.int64)

    def part(lo: int, hi: int | None) -> Split:
        return Split(x[lo:hi].contiguous(), y[lo:hi].contiguous())

    return Digits(
        validation=part(0, validation),
        test=part(validation, validation + test),
        train=part(validation + test, None),
    )
