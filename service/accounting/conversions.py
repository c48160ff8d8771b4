"""RDP -> (epsilon, delta) conversions and rounding that never understates.

All functions take order grids as numpy arrays and return the best bound over
the grid. Infinite RDP values are allowed (they simply never win the min).
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: The order grid every computed profile uses: fractional orders near 1 (where
#: large epsilons are converted best) up to 1024 (small epsilons).
ORDERS: NDArray[np.float64] = np.array(
    [
        *(1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, 4.0, 4.5, 5.0, 5.5),
        *(6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 14.0, 16.0, 18.0, 20.0, 24.0, 28.0, 32.0),
        *(40.0, 48.0, 56.0, 64.0, 80.0, 96.0, 128.0, 160.0, 192.0, 256.0, 384.0, 512.0),
        *(768.0, 1024.0),
    ]
)


#: Default width of the privacy-loss grid (PLDs). Finer is tighter and slower.
DEFAULT_DISCRETIZATION = 1e-4


def check_delta(delta: float) -> float:
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return float(delta)


def check_epsilon(epsilon: float) -> float:
    if not (isinstance(epsilon, int | float) and epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon}")
    return float(epsilon)


def _arrays(orders: ArrayLike, rdp: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    a = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    if a.shape != r.shape or a.ndim != 1:
        raise ValueError(f"orders and rdp must be 1-D of equal length, got {a.shape}, {r.shape}")
    if np.any(a <= 1):
        raise ValueError("orders must be > 1")
    return a, r


def eps_from_rdp_classic(orders: ArrayLike, rdp: ArrayLike, delta: float) -> float:
    """Source: Mironov 2017, Proposition 3 (the paper's Algorithms 1 and 3).

    epsilon = min_alpha rdp_alpha + log(1/delta) / (alpha - 1).
    """
    a, r = _arrays(orders, rdp)
    check_delta(delta)
    return float(np.min(r + math.log(1 / delta) / (a - 1)))


def eps_from_rdp(orders: ArrayLike, rdp: ArrayLike, delta: float) -> float:
    """Source: Balle, Barthe, Gaboardi, Hsu, Sato 2020, Theorem 21 (improved conversion).

    epsilon = min_alpha rdp_alpha + log1p(-1/alpha) - (log(delta) + log(alpha)) / (alpha - 1),
    taken no larger than the classic conversion (it never is larger for alpha > 1,
    the min only guards rounding). Clipped at 0 from below (epsilon >= 0 always holds).
    """
    a, r = _arrays(orders, rdp)
    check_delta(delta)
    with np.errstate(invalid="ignore"):
        improved = r + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
        classic = r + math.log(1 / delta) / (a - 1)
    eps = np.minimum(improved, classic)
    eps = eps[~np.isnan(eps)]
    if eps.size == 0:
        return math.inf
    return max(0.0, float(np.min(eps)))


def delta_from_rdp(orders: ArrayLike, rdp: ArrayLike, epsilon: float) -> float:
    """Source: Balle et al. 2020, Theorem 21, solved for delta.

    delta = min_alpha exp((alpha - 1)(rdp_alpha - epsilon + log1p(-1/alpha)) - log(alpha)),
    also bounded by the KL route delta <= sqrt(1 - exp(-rdp_alpha)) (Pinsker-type bound
    via Bretagnolle-Huber, valid since KL <= D_alpha for alpha > 1); capped at 1.
    """
    a, r = _arrays(orders, rdp)
    check_epsilon(epsilon)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        log_delta = (a - 1) * (r - epsilon + np.log1p(-1 / a)) - np.log(a)
        kl_route = 0.5 * np.log(-np.expm1(-r))  # exact for tiny r
    log_delta = np.minimum(np.nan_to_num(log_delta, nan=np.inf), kl_route)
    return float(min(1.0, math.exp(float(np.min(log_delta)))))


def delta_from_rdp_grid(orders: ArrayLike, rdp: ArrayLike, epsilons: ArrayLike) -> NDArray:
    """``delta_from_rdp`` at many epsilons at once (same bound, vectorised)."""
    a, r = _arrays(orders, rdp)
    eps = np.asarray(epsilons, dtype=np.float64)[:, None]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        log_delta = (a - 1) * (r - eps + np.log1p(-1 / a)) - np.log(a)
        kl_route = 0.5 * np.log(-np.expm1(-r))  # exact for tiny r
    log_delta = np.minimum(np.nan_to_num(log_delta, nan=np.inf), kl_route)
    return np.minimum(1.0, np.exp(np.min(log_delta, axis=1)))


def round_up(value: float, digits: int = 6) -> float:
    """``value`` rounded up to ``digits`` significant digits; the result is never below it.

    Rounds the shortest decimal that reads back as ``value`` (its ``repr``), so a value
    that is already short (2.37) stays itself instead of gaining a last digit from the
    binary expansion (2.37001); the comparison below keeps the result >= ``value``."""
    if not math.isfinite(value) or value == 0:
        return value
    exponent = math.floor(math.log10(abs(value)))
    quantum = Decimal(1).scaleb(exponent - digits + 1)
    out = float(Decimal(repr(value)).quantize(quantum, rounding=ROUND_CEILING))
    while out < value:
        out = math.nextafter(out, math.inf)
    return out
