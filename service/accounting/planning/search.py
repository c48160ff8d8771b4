"""Weights on a fixed support: least merged noise sum_i lambda_i^2 v_i whose LC bound meets
the target. Every returned lambda was itself checked against the target."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray


def inverse_variance(v: NDArray) -> NDArray:
    w = 1.0 / v
    return np.asarray(w / w.sum())


def search_weights(
    eps_of: Callable[[NDArray], float],
    v: NDArray,
    target: float,
    start: NDArray | None = None,
    budget: int = 60,
) -> tuple[NDArray | None, float, float]:
    """(lambda, its epsilon, smallest epsilon seen); lambda None when nothing is feasible.

    The objective is convex with its minimum at inverse-variance weights lam*. If lam* is
    infeasible, start from the best feasible vertex (or ``start``), bisect the segment
    toward lam* for its last feasible point, then improve by pairwise weight transfers
    that lower the objective and stay feasible, within ``budget`` evaluations.
    """
    n = v.shape[0]
    evaluated: dict[bytes, float] = {}

    def eps(lam: NDArray) -> float:
        key = np.round(lam, 12).tobytes()
        if key not in evaluated:
            evaluated[key] = eps_of(lam)
        return evaluated[key]

    def f(lam: NDArray) -> float:
        return float(np.sum(lam**2 * v))

    star = inverse_variance(v)
    if eps(star) <= target:
        return star, eps(star), eps(star)
    feasible = []
    if start is not None and eps(start) <= target:
        feasible.append(start)
    else:
        for lam in sorted((np.eye(n)[i] for i in range(n)), key=f):
            if len(evaluated) >= budget:
                break
            if eps(lam) <= target:
                feasible.append(lam)
                break
    if not feasible:
        return None, math.inf, min(evaluated.values())
    lam = min(feasible, key=f)
    lo, hi = 0.0, 1.0
    origin = lam.copy()
    for _ in range(12):
        mid = 0.5 * (lo + hi)
        if eps((1 - mid) * origin + mid * star) <= target:
            lo = mid
        else:
            hi = mid
    lam = (1 - lo) * origin + lo * star
    for step in (0.05, 0.01, 0.002):
        improved = True
        while improved and len(evaluated) < budget:
            improved = False
            order = np.argsort(-lam)
            for j in order:
                for i in np.argsort(v):
                    if i == j or lam[j] < step or len(evaluated) >= budget:
                        continue
                    cand = lam.copy()
                    cand[i] += step
                    cand[j] -= step
                    if f(cand) < f(lam) and eps(cand) <= target:
                        lam, improved = cand, True
    return lam, eps(lam), min(evaluated.values())
