"""The best Renyi order, found over all real orders > 1 (no fixed grid, no ceiling).

An RDP guarantee holds at every order alpha > 1 at once, so *any* order gives a
valid (epsilon, delta) bound; picking the best one is an optimisation that can
only make the bound tighter, never unsound. We evaluate the conversion on
dp_accounting's default grid (so the result is never looser than the best order
of that grid), extend the bracket geometrically past either end while the bound
still improves, and refine with Brent's method in log(alpha - 1). The answer is
the smallest bound among all orders actually evaluated.

Conversion: Canonne, Kamath, Steinke 2020, Proposition 12 (equivalently Balle,
Barthe, Gaboardi, Hsu, Sato 2020, Theorem 21), the one dp_accounting uses:

    epsilon(alpha) = rdp_alpha + log1p(-1/alpha) - (log(delta) + log(alpha)) / (alpha - 1),

taken no larger than Mironov's classic rdp_alpha + log(1/delta) / (alpha - 1),
and epsilon = 0 when delta >= sqrt(1 - exp(-rdp_alpha)) (the KL route, via the
Bretagnolle-Huber inequality, valid because KL <= D_alpha). Solved for delta:

    log delta(alpha) = (alpha - 1)(rdp_alpha - epsilon + log1p(-1/alpha)) - log(alpha).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from scipy import optimize

#: dp_accounting's DEFAULT_RDP_ORDERS: the bracket starts from it, so a result is
#: never looser than the best order of that grid.
REFERENCE_ORDERS: NDArray[np.float64] = np.array(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024],
    dtype=np.float64,
)

#: Factor by which alpha - 1 grows (or shrinks) per step when the best order lies
#: beyond the current bracket. The walk stops only when the bound stops improving
#: (or alpha - 1 leaves the floating-point range), so there is no fixed ceiling.
_STEP = 4.0
_MAX_WALK = 400

#: An RDP curve: orders (1-D array, all > 1) -> RDP upper bounds at those orders.
RdpFunction = Callable[[NDArray[np.float64]], NDArray[np.float64]]


def conversion_epsilon(orders: NDArray, rdp: NDArray, delta: float) -> NDArray[np.float64]:
    """epsilon(alpha) at each order (see the module docstring); inf where undefined."""
    a = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    log_delta = math.log(delta)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        improved = r + np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1.0)
        classic = r - log_delta / (a - 1.0)
        eps = np.fmin(improved, classic)
        kl = 0.5 * np.log(-np.expm1(-r)) <= log_delta  # exact for tiny r
    eps = np.where(kl & (r >= 0), 0.0, eps)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return np.maximum(eps, 0.0)


def conversion_log_delta(orders: NDArray, rdp: NDArray, epsilon: float) -> NDArray[np.float64]:
    """log delta(alpha) at each order, also bounded by the KL route; inf where undefined."""
    a = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        log_delta = (a - 1.0) * (r - epsilon + np.log1p(-1.0 / a)) - np.log(a)
        kl = 0.5 * np.log(-np.expm1(-r))
    out = np.fmin(np.nan_to_num(log_delta, nan=np.inf), np.nan_to_num(kl, nan=np.inf))
    return np.minimum(out, 0.0)


def minimize_over_orders(
    objective: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    seed: NDArray[np.float64] = REFERENCE_ORDERS,
) -> tuple[float, float]:
    """(min value, argmin order) of ``objective`` over real orders > 1.

    ``objective`` maps an array of orders to values; every value it returns must
    be a valid bound, so the minimum over the evaluated orders is one too.
    """
    seen_orders: list[float] = []
    seen_values: list[float] = []

    def evaluate(orders: NDArray[np.float64]) -> NDArray[np.float64]:
        values = np.asarray(objective(orders), dtype=np.float64)
        values = np.where(np.isnan(values), np.inf, values)
        seen_orders.extend(orders.tolist())
        seen_values.extend(values.tolist())
        return values

    grid = np.unique(np.asarray(seed, dtype=np.float64))
    values = evaluate(grid)
    logs = list(np.log(grid - 1.0))
    vals = list(values)
    i = int(np.argmin(vals))
    if math.isfinite(vals[i]):
        # Walk past the ends of the grid while the bound still improves.
        walked = 0
        while i == len(vals) - 1 and walked < _MAX_WALK and logs[-1] < 700:
            nxt = logs[-1] + math.log(_STEP)
            logs.append(nxt)
            vals.append(float(evaluate(np.array([1.0 + math.exp(nxt)]))[0]))
            if vals[-1] < vals[i]:
                i = len(vals) - 1
            walked += 1
        while i == 0 and walked < _MAX_WALK and logs[0] > -700:
            nxt = logs[0] - math.log(_STEP)
            logs.insert(0, nxt)
            vals.insert(0, float(evaluate(np.array([1.0 + math.exp(nxt)]))[0]))
            i = 0 if vals[0] < vals[1] else 1
            walked += 1
        lo = logs[max(i - 1, 0)]
        hi = logs[min(i + 1, len(logs) - 1)]
        if hi > lo:

            def scalar(t: float) -> float:
                return float(evaluate(np.array([1.0 + math.exp(t)]))[0])

            optimize.minimize_scalar(
                scalar, bounds=(lo, hi), method="bounded", options={"xatol": 1e-7, "maxiter": 60}
            )
    best = int(np.argmin(seen_values))
    return seen_values[best], seen_orders[best]


def best_epsilon(rdp: RdpFunction, delta: float) -> tuple[float, float]:
    """(epsilon, order): the smallest epsilon the RDP curve proves at ``delta``."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return minimize_over_orders(lambda a: conversion_epsilon(a, rdp(a), delta))


def best_delta(rdp: RdpFunction, epsilon: float) -> tuple[float, float]:
    """(delta, order): the smallest delta the RDP curve proves at ``epsilon``."""
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon}")
    log_delta, order = minimize_over_orders(lambda a: conversion_log_delta(a, rdp(a), epsilon))
    return min(1.0, math.exp(log_delta)), order


def epsilon_any_order(rdp: RdpFunction, delta: float) -> float:
    """The epsilon of ``best_epsilon`` alone: the one call callers need."""
    return max(0.0, best_epsilon(rdp, delta)[0])
