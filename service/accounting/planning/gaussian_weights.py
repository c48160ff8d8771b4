"""Least-noise LC weights for fixed Gaussian queries, solved exactly.

The problem (every merged model a fixed-query Gaussian release with the same count k;
query shifts Delta_i, noise stds s_i):

    minimise  S(lam) = sum_i lam_i^2 s_i^2
    subject to  sum_i lam_i = 1,  lam >= 0,  t(lam) = sum_i lam_i Delta_i <= m sqrt(S(lam))

where m = mu_max / sqrt(k) and mu_max is the largest Gaussian mu meeting the target.
The merged noise variance is k S, so this is the plan's objective. The constraint is
not convex (unequal sensitivities give several local optima; a local solver started
from a feasible vertex was measured stopping 1% to 113% above the optimum), so it is
solved through its optimality conditions instead. Fritz John conditions hold at every
local minimum without any constraint qualification: with g = m^2 S - t^2, multipliers
(c0, c) >= 0, not both zero, give (c0 - c m^2) 2 s_i^2 lam_i + 2 c t Delta_i + gamma = 0
on the support P of lam (and the matching inequality off it). Either

  * c = 0: lam is the inverse-variance point of the whole simplex (no other support
    meets the conditions), which must then be feasible; or
  * c0 != c m^2: lam_i = (alpha + beta Delta_i) / s_i^2 on P. With A_j = sum_P
    Delta_i^j / s_i^2, K = A_2 - A_1^2 / A_0 and t_0 = A_1 / A_0, summing to one gives
    S = 1/A_0 + beta^2 K and t = t_0 + beta K; the constraint binds (c > 0), a
    quadratic in beta: at most two points per support. When c0 > c m^2, P is the set
    where alpha + beta Delta_i > 0: a threshold set in sensitivity order; or
  * c0 = c m^2 > 0: Delta_i is constant (d) on P; every feasible point there has
    S >= d^2 / m^2, reached on the segment from P's inverse-variance point to its
    noisiest model (or P's inverse-variance point, when that is already feasible).

The global minimum is among these candidates. Up to ``EXACT_SUPPORTS`` models every
support is enumerated, so the feasible candidate with least S is the exact optimum;
beyond, only the threshold sets (the c0 > c m^2 points). The caller certifies the
weights it returns with the LC accountant; nothing here is a privacy bound.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.typing import NDArray

from service.accounting.pld.gaussian import gaussian_epsilon
from service.accounting.rdp.orders import epsilon_any_order

#: Up to this many models every support is tried (2^n small vectorised solves).
EXACT_SUPPORTS = 14


def optimal_gaussian_weights(sens: NDArray, std: NDArray, m: float) -> NDArray | None:
    """The weights minimising sum lam_i^2 std_i^2 on the simplex with
    sum lam_i sens_i <= m sqrt(sum lam_i^2 std_i^2); None when no weights meet it."""
    sens = np.asarray(sens, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    n = sens.shape[0]
    cands = [np.eye(n), _inverse_variance(np.ones((1, n), dtype=bool), std)]
    cands.append(_binding(_supports(sens), sens, std, m))
    for group in _equal_groups(sens):
        point = _equal_sensitivity_point(group, sens, std, m)
        if point is not None:
            cands.append(point[None, :])
    lam = np.concatenate(cands)
    shift = lam @ sens
    var = (lam**2) @ (std**2)
    ok = shift <= m * np.sqrt(var) * (1 + 1e-12)
    if not np.any(ok):
        return None
    best = lam[ok][int(np.argmin(var[ok]))]
    return np.asarray(best / best.sum())


def _supports(sens: NDArray) -> NDArray:
    n = sens.shape[0]
    if n <= EXACT_SUPPORTS:
        masks = (np.arange(1 << n)[:, None] >> np.arange(n)[None, :]) & 1
        return np.asarray(masks[masks.sum(axis=1) >= 2], dtype=bool)
    order = np.argsort(sens, kind="stable")
    rows = []
    for k in range(2, n + 1):
        for chosen in (order[:k], order[n - k :]):
            row = np.zeros(n, dtype=bool)
            row[chosen] = True
            rows.append(row)
    return np.array(rows)


def _inverse_variance(masks: NDArray, std: NDArray) -> NDArray:
    w = masks / std**2
    return np.asarray(w / w.sum(axis=1, keepdims=True))


def _binding(masks: NDArray, sens: NDArray, std: NDArray, m: float) -> NDArray:
    """On each support, the (at most two) points lam_i = (alpha + beta Delta_i) / s_i^2
    summing to one where t = m sqrt(S); only those with lam >= 0 are returned."""
    inv = masks / std**2
    a0, a1, a2 = inv.sum(axis=1), inv @ sens, inv @ sens**2
    t0 = a1 / a0
    k = np.maximum(a2 - a1 * t0, 0.0)
    live = k > 1e-12 * a2
    a0, a1, t0, k, inv = a0[live], a1[live], t0[live], k[live], inv[live]
    qa = k * k - m * m * k
    qb = 2 * t0 * k
    qc = t0 * t0 - m * m / a0
    disc = qb * qb - 4 * qa * qc
    real = disc >= 0
    sq = np.sqrt(np.where(real, disc, 0.0))
    base = inv / a0[:, None]  # the support's inverse-variance weights
    u = (sens[None, :] - t0[:, None]) * inv  # d lam / d beta
    out = []
    for sign in (1.0, -1.0):
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = np.where(
                np.abs(qa) > 1e-300, (-qb + sign * sq) / (2 * qa), -qc / np.where(qb != 0, qb, 1)
            )
            for _ in range(4):  # Newton on t - m sqrt(S), evaluated directly (K may be tiny)
                lam = base + beta[:, None] * u
                var = (lam**2) @ std**2
                h = lam @ sens - m * np.sqrt(var)
                dh = u @ sens - m * ((lam * u) @ std**2) / np.sqrt(var)
                beta = np.where(np.isfinite(h / dh) & (dh != 0), beta - h / dh, beta)
        lam = base + beta[:, None] * u
        scale = np.abs(lam).max(axis=1)[:, None]
        good = real & np.isfinite(beta) & np.all(lam >= -1e-12 * scale, axis=1)
        out.append(np.clip(lam[good], 0.0, None))
    return np.concatenate(out)


def _equal_groups(sens: NDArray) -> list[list[int]]:
    groups: list[list[int]] = []
    for _, members in itertools.groupby(
        sorted(range(sens.shape[0]), key=lambda i: sens[i]), key=lambda i: sens[i]
    ):
        group = list(members)
        if len(group) >= 2:
            groups.append(group)
    return groups


def _equal_sensitivity_point(
    group: list[int], sens: NDArray, std: NDArray, m: float
) -> NDArray | None:
    """On models sharing sensitivity d the least feasible S is d^2 / m^2 (or their
    inverse-variance S when larger): the point on the segment from their
    inverse-variance weights to their noisiest model where S reaches it."""
    n = sens.shape[0]
    mask = np.zeros((1, n), dtype=bool)
    mask[0, group] = True
    start = _inverse_variance(mask, std)[0]
    end = np.zeros(n)
    end[max(group, key=lambda i: std[i])] = 1.0
    goal = (sens[group[0]] / m) ** 2
    d = end - start
    a, b = float(np.sum(d * d * std**2)), float(2 * np.sum(start * d * std**2))
    c = float(np.sum(start**2 * std**2)) - goal
    if c >= 0:
        return start
    if a <= 0 or a + b + c < 0:
        return None
    s = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    return np.asarray(start + min(max(s, 0.0), 1.0) * d)


def largest_gaussian_mu(epsilon: float, delta: float, accountant: str) -> float:
    """The largest mu whose Gaussian curve meets (epsilon, delta) under ``accountant``
    (bisection on the monotone curve, kept on the feasible side)."""
    lo, hi = 0.0, 1.0

    def ok(mu: float) -> bool:
        if accountant == "rdp":
            return epsilon_any_order(lambda a: a * mu * mu / 2.0, delta) <= epsilon
        return gaussian_epsilon(mu, delta) <= epsilon

    while ok(hi):
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
