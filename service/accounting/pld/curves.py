"""Hockey-stick curves delta(epsilon) on a fixed epsilon grid, per direction.

Random selection plans (Theorem 5.2 of "Differentially Private Model Merging" (arXiv:2604.20985))
need
delta_i(epsilon) of many models at many epsilons; evaluating PMFs each time is
slow, so a profile tabulates its two curves once on ``EPS_GRID``.

Between grid points the curve is bounded by the chord in gamma = e^epsilon:
H_gamma(P||Q) is convex in gamma, so the chord lies above it. Past the last
grid point delta is bounded by its value there (delta is non-increasing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: 0 to 2 by 0.002, to 10 by 0.01, to 64 by 0.05: 3,881 points.
EPS_GRID: NDArray[np.float64] = np.unique(
    np.concatenate(
        [np.arange(0, 2, 0.002), np.arange(2, 10, 0.01), np.arange(10, 64.0001, 0.05)]
    ).round(10)
)


@dataclass(frozen=True)
class DeltaCurves:
    """delta_remove(eps) = H_{e^eps}(P||Q) and delta_add(eps) = H_{e^eps}(Q||P) on EPS_GRID."""

    remove: NDArray[np.float64]
    add: NDArray[np.float64]

    def at(self, epsilon: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Upper bounds on both directions at any epsilon >= 0."""
        return chord_upper_bound(self.remove, epsilon), chord_upper_bound(self.add, epsilon)


def chord_upper_bound(values: NDArray[np.float64], epsilon: ArrayLike) -> NDArray[np.float64]:
    eps = np.atleast_1d(np.asarray(epsilon, dtype=np.float64))
    if np.any(eps < 0):
        raise ValueError(f"epsilon must be >= 0, got {eps[eps < 0][:3]}")
    grid = EPS_GRID
    j = np.clip(np.searchsorted(grid, eps, side="right") - 1, 0, grid.shape[0] - 1)
    nxt = np.minimum(j + 1, grid.shape[0] - 1)
    g0, g1 = np.exp(grid[j]), np.exp(grid[nxt])
    d0, d1 = values[j], values[nxt]
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(nxt > j, (np.exp(eps) - g0) / (g1 - g0), 0.0)
    out = d0 + np.clip(t, 0.0, 1.0) * (d1 - d0)
    return np.where(eps >= grid[-1], values[-1], out)


def chord_upper_bound_rows(values: NDArray[np.float64], epsilon: float) -> NDArray[np.float64]:
    """``chord_upper_bound`` of every row of ``values`` (models x grid) at one epsilon."""
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    grid = EPS_GRID
    if epsilon >= grid[-1]:
        return np.asarray(values[:, -1])
    j = int(np.searchsorted(grid, epsilon, side="right")) - 1
    g0, g1 = math.exp(grid[j]), math.exp(grid[j + 1])
    t = min(1.0, max(0.0, (math.exp(epsilon) - g0) / (g1 - g0)))
    return np.asarray(values[:, j] + t * (values[:, j + 1] - values[:, j]))
