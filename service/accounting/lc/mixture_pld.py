"""The privacy loss distribution of the merged LC step: the Gaussian mixture of
``service.accounting.lc.mixture`` against N(0, 1), in closed form and discretised.

Source: Theorem 6.4 of "Differentially Private Model Merging" (arXiv:2604.20985). Also the exact
Gaussian
hockey-stick curve (Balle and Wang 2018) used where the mixture has one component.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pldlib
from numpy.typing import NDArray
from scipy import special

from service.accounting.lc.mixture import (
    BLOCK,
    Mixture,
    log_m,
    log_m_derivatives,
    lse_rows,
)
from service.accounting.pld.gaussian import connect_dots, gaussian_step_pld

#: Probability mass left out at each tail when choosing the loss range.
_TAIL = 1e-18


def _inverse_log_m(mix: Mixture, targets: NDArray, lo: float, hi: float) -> NDArray:
    """x with log M(x) = target, for targets inside [log M(lo), log M(hi)].

    log M is convex and increasing (shifts >= 0): a table gives the start and Newton's
    method (derivative = tilted mean shift > 0) polishes it to rounding.
    """
    table_x = np.linspace(lo, hi, 4096)
    table_l = log_m(mix, table_x)
    x = np.interp(targets, table_l, table_x)
    for _ in range(8):
        value, mean, _ = log_m_derivatives_blocked(mix, x)
        step = (value - targets) / np.maximum(mean, 1e-300)
        x = np.clip(x - step, lo, hi)
        if float(np.max(np.abs(step))) < 1e-13 * max(1.0, float(np.max(np.abs(x)))):
            break
    return x


def log_m_derivatives_blocked(mix: Mixture, x: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    out = [np.empty_like(x) for _ in range(3)]
    step = max(1, BLOCK // mix.shifts.shape[0])
    for start in range(0, x.shape[0], step):
        parts = log_m_derivatives(mix, x[start : start + step])
        for o, p in zip(out, parts, strict=True):
            o[start : start + step] = p
    return out[0], out[1], out[2]


def _log_tail_p(mix: Mixture, x: NDArray, upper: bool) -> NDArray:
    """log P(X > x) (upper) or log P(X < x), X ~ sum_k p_k N(a_k, 1), blocked."""
    logp = np.log(mix.probs)[:, None]
    out = np.empty_like(x)
    step = max(1, BLOCK // mix.shifts.shape[0])
    for start in range(0, x.shape[0], step):
        xs = x[start : start + step]
        diff = mix.shifts[:, None] - xs if upper else xs - mix.shifts[:, None]
        block = special.log_ndtr(diff) + logp
        out[start : start + step] = lse_rows(block)
    return out


def mixture_hockey_stick(mix: Mixture, eps: NDArray) -> tuple[NDArray, NDArray]:
    """Closed-form H_{e^eps}(P||Q) and H_{e^eps}(Q||P) of the mixture, upper-rounded.

    log M is increasing, so {P/Q > e^eps} = {x > x_eps} with log M(x_eps) = eps:
      remove: P(X > x_eps) - e^eps Q(X > x_eps)
      add:    Q(X < x_{-eps}) - e^eps P(X < x_{-eps})
    computed as e^a (1 - e^(b - a)) from log-tails (scipy's log_ndtr), plus a margin
    for the rounding of a and b. Where eps is below the smallest loss the set is
    everything (remove: 1 - e^eps); where it is above the largest, empty (0).
    """
    eps = np.asarray(eps, dtype=np.float64)
    z = float(-special.ndtri(_TAIL))
    lo, hi = -z - 1.0, float(mix.shifts.max()) + z + 1.0
    l_lo, l_hi = log_m(mix, np.array([lo, hi]))
    out = []
    for sign, upper in ((1.0, True), (-1.0, False)):
        level = sign * eps
        inside = (level > l_lo) & (level < l_hi)
        x = np.full(eps.shape, np.nan)
        x[inside] = _inverse_log_m(mix, level[inside], lo, hi)
        delta = np.zeros_like(eps)
        if np.any(inside):
            xi = x[inside]
            e = eps[inside]
            if upper:
                a = _log_tail_p(mix, xi, upper=True)
                b = e + special.log_ndtr(-xi)
            else:
                a = special.log_ndtr(xi)
                b = e + _log_tail_p(mix, xi, upper=False)
            with np.errstate(over="ignore", invalid="ignore"):
                val = np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
            margin = np.exp(a) * 8 * np.finfo(np.float64).eps * (np.abs(a) + np.abs(b) + 16)
            delta[inside] = val + margin
        below = level <= l_lo
        if upper:
            # every x counts: delta = 1 - e^eps (only possible for eps < 0)
            delta[below] = np.maximum(0.0, -np.expm1(eps[below]))
            delta[level >= l_hi] = _tail_mass(mix, hi, upper=True)
        else:
            delta[below] = 0.0
            delta[level >= l_hi] = np.maximum(0.0, -np.expm1(eps[level >= l_hi]))
        out.append(np.minimum(1.0, delta))
    return out[0], out[1]


def _tail_mass(mix: Mixture, x: float, upper: bool) -> float:
    return float(np.exp(_log_tail_p(mix, np.array([x]), upper)[0]))


def mixture_pld(mix: Mixture, discretization: float) -> pldlib.PrivacyLossDistribution:
    """A pessimistic discretised PLD of the mixture step, both directions.

    Source: Theorem 6.4 of "Differentially Private Model Merging" (arXiv:2604.20985) (the
    surrogate loss is this
    mixture against N(0, 1)) and the connect-the-dots construction (Doroshenko et al.
    2022): the hockey-stick curve is evaluated in closed form at every loss on the grid
    k * discretization, and the PMF is the one whose curve is the piecewise-linear
    interpolation of those points in gamma = e^eps, starting at (gamma=0, delta=1) and
    flat past the last point. The curve is convex in gamma, so the interpolation lies
    above it: every delta of the PMF is an upper bound. Losses past the range hold
    less than 1e-18 of mass and go to the infinite loss (remove) or nowhere (add: its
    losses are bounded by -log p_0).
    """
    if mix.trivial:
        return pldlib.identity(discretization)
    if mix.shifts.shape[0] == 1:
        # q = 1 for every model: the step is the Gaussian mechanism N(A, 1) vs N(0, 1).
        return gaussian_step_pld(1.0, 1.0, discretization, sensitivity=float(mix.shifts[0]))
    z = float(-special.ndtri(_TAIL))
    lo, hi = -z, float(mix.shifts.max()) + z
    l_lo, l_hi = (float(v) for v in log_m(mix, np.array([lo, hi])))
    pmfs = []
    for eps_lo, eps_hi, direction in ((l_lo, l_hi, 0), (-l_hi, -l_lo, 1)):
        k = np.arange(math.floor(eps_lo / discretization), math.ceil(eps_hi / discretization) + 1)
        eps = k * discretization
        remove, add = mixture_hockey_stick(mix, eps)
        delta = remove if direction == 0 else add
        pmfs.append(connect_dots(int(k[0]), eps, delta, discretization))
    return pldlib.PrivacyLossDistribution(pmfs[0], pmfs[1])
