"""The one-dimensional Gaussian mixture behind a linearly combined DP-SGD step.

Source: Theorem 6.2, Lemma 6.3 and Theorem 6.4 of papers/dp-model-merging.txt.
With unit noise (everything divided by the merged noise std s), one merged
step compares P = sum_J p_J N(A_J, 1) with Q = N(0, 1), where J runs over the
subsets of models whose batch held the differing record, p_J = prod_{i in J} q_i
prod_{i not in J} (1 - q_i) and A_J = sum_{i in J} w_i / s. The paper's sum over
gamma in Theorem 6.2 is exactly E_Q[(P/Q)^alpha] expanded by the multinomial
theorem; here it is computed by a one-dimensional quadrature instead, for any
order, in both directions.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pldlib
from numpy.typing import ArrayLike, NDArray
from scipy import special

#: Trapezoid step for integer orders' forward integrand, a finite sum of unit-variance
#: Gaussians: the rule's own error is about 2 exp(-2 pi^2 / h^2) = 3e-18 at 0.7; with
#: rounding the results stay within 1e-10 relative of the exact sum (tested), far inside
#: the 1e-9 margin every RDP value gets.
INTEGER_STEP = 0.7

#: Points per block when tabulating log M(x) (components x points).
_BLOCK = 2_000_000


@dataclass(frozen=True)
class Mixture:
    """P = sum_k probs_k N(shifts_k, 1) against Q = N(0, 1); shifts >= 0, probs sum to 1."""

    probs: NDArray[np.float64]
    shifts: NDArray[np.float64]

    @property
    def trivial(self) -> bool:
        return bool(np.all(self.shifts == 0))


def lc_mixture(q: ArrayLike, a: ArrayLike) -> Mixture:
    """The mixture of one merged step: models with inclusion probability q_i and
    normalised shift a_i = w_i / s. Models with q_i = 0 (virtual steps) drop out;
    subsets with equal total shift are merged (to 1e-13 relative, keeping the larger)."""
    qa = np.asarray(q, dtype=np.float64)
    aa = np.asarray(a, dtype=np.float64)
    active = (qa > 0) & (aa > 0)
    qa, aa = qa[active], aa[active]
    n = qa.shape[0]
    if n == 0:
        return Mixture(np.array([1.0]), np.array([0.0]))
    if n > 16:
        raise ValueError(f"at most 16 models can be merged per step, got {n}")
    masks = np.array(list(itertools.product([0, 1], repeat=n)), dtype=bool)
    with np.errstate(divide="ignore"):
        logp = np.where(masks, np.log(qa), np.log1p(-qa)).sum(axis=1)
    shifts = masks.astype(np.float64) @ aa
    keep = np.isfinite(logp)
    logp, shifts = logp[keep], shifts[keep]
    order = np.argsort(shifts)
    logp, shifts = logp[order], shifts[order]
    merged_p: list[float] = []
    merged_s: list[float] = []
    for lp, sh in zip(logp, shifts, strict=True):
        if merged_s and sh - merged_s[-1] <= 1e-13 * max(1.0, sh):
            merged_p[-1] = float(np.logaddexp(merged_p[-1], lp))
            merged_s[-1] = float(sh)
        else:
            merged_p.append(float(lp))
            merged_s.append(float(sh))
    probs = np.exp(np.array(merged_p))
    return Mixture(probs / probs.sum(), np.array(merged_s))


def _lse_rows(values: NDArray) -> NDArray:
    """log-sum-exp along axis 0, in place (``values`` is overwritten)."""
    top = values.max(axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    values -= top
    np.exp(values, out=values)
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(values.sum(axis=0)) + top)


def _log_m(mix: Mixture, x: NDArray) -> NDArray:
    """log M(x), M = P/Q = sum_k p_k exp(a_k x - a_k^2 / 2), in blocks."""
    logp = np.log(mix.probs)[:, None] - 0.5 * mix.shifts[:, None] ** 2
    out = np.empty(x.shape[0])
    step = max(1, _BLOCK // mix.shifts.shape[0])
    for start in range(0, x.shape[0], step):
        block = np.multiply.outer(mix.shifts, x[start : start + step])
        block += logp
        out[start : start + step] = _lse_rows(block)
    return out


def _log_m_derivatives(mix: Mixture, x: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """log M and its first two derivatives (M'/M and the tilted variance) at points x."""
    logw = np.log(mix.probs)[:, None] - 0.5 * mix.shifts[:, None] ** 2 + mix.shifts[:, None] * x
    log_m = special.logsumexp(logw, axis=0)
    w = np.exp(logw - log_m)
    mean = mix.shifts @ w
    var = np.maximum((mix.shifts**2) @ w - mean**2, 0.0)
    return log_m, mean, var


def _trapezoid_log(mix: Mixture, lo: float, hi: float, h: float, powers: NDArray) -> NDArray:
    """log of int_lo^hi phi(x) M(x)^t dx by the trapezoid rule, for every t in ``powers``."""
    x = np.arange(lo, hi + h, h)
    base = _log_m(mix, x)
    log_phi = -0.5 * x**2 - 0.5 * math.log(2 * math.pi)
    vals = np.multiply.outer(base, powers)
    vals += log_phi[:, None]
    return _lse_rows(vals) + math.log(h)


#: Fractional orders above this are bounded by the chord between integer orders.
FRACTIONAL_EXACT_UP_TO = 8.0


def mixture_rdp(mix: Mixture, orders: ArrayLike) -> tuple[NDArray, NDArray]:
    """(D_alpha(P||Q), D_alpha(Q||P)) for every order, by trapezoid quadrature in log space.

    E_Q[(P/Q)^t] = int phi(x) M(x)^t dx, t = alpha (forward) or 1 - alpha (reverse). Step
    sizes: for integer alpha the forward integrand is a finite sum of unit-variance
    Gaussians (the multinomial expansion), on which the trapezoid rule with h = 0.7 errs by
    ~2 exp(-2 pi^2 / h^2) = 3e-18 relative (1e-10 with rounding, tested). Otherwise the
    integrand is analytic in the strip |Im x| < pi / A (A the largest shift; M's nearest
    complex zeros), and h = min(1/2, 1/(2A)) errs by ~exp(-2 pi^2 / (h A)) <= e^-39. Ranges:
    forward peaks solve x = alpha (log M)'(x) with (log M)' in [0, A], so [-40, alpha A +
    40] holds every peak with e^-800 tails beyond. The reverse log-integrand has curvature
    <= -1 (log M is convex), so its mass lies within 45 of its single peak, found by
    Newton's method. Fractional orders above FRACTIONAL_EXACT_UP_TO are bounded by the chord
    of (alpha - 1) D_alpha between the neighbouring integers (convex in alpha): an upper
    bound, tight to the curvature over one unit. A single component (q = 1 for every model)
    is the Gaussian alpha A^2 / 2, exact.
    """
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1):
        raise ValueError(f"orders must be > 1, got {a[a <= 1][:3]}")
    if mix.trivial:
        return np.zeros_like(a), np.zeros_like(a)
    if mix.shifts.shape[0] == 1:
        exact = a * mix.shifts[0] ** 2 / 2.0
        return exact, exact.copy()
    integer = np.array([float(x).is_integer() for x in a])
    chorded = ~integer & (a > FRACTIONAL_EXACT_UP_TO)
    direct = np.unique(np.concatenate([a[~chorded], np.floor(a[chorded]), np.ceil(a[chorded])]))
    fwd, rev = _direct_rdp(mix, direct)
    forward = np.interp(a, direct, (direct - 1.0) * fwd) / (a - 1.0)
    reverse = np.interp(a, direct, (direct - 1.0) * rev) / (a - 1.0)
    return np.maximum(forward, 0.0), np.maximum(reverse, 0.0)


def _direct_rdp(mix: Mixture, a: NDArray) -> tuple[NDArray, NDArray]:
    top = float(mix.shifts.max())
    fine = min(0.5, 0.5 / top)
    forward = np.empty_like(a)
    integer = np.array([float(x).is_integer() for x in a])
    for mask, h in ((integer, INTEGER_STEP), (~integer, fine)):
        if np.any(mask):
            hi = float(a[mask].max()) * top + 40.0
            forward[mask] = _trapezoid_log(mix, -40.0, hi, h, a[mask]) / (a[mask] - 1.0)
    peaks = _reverse_peaks(mix, a)
    reverse = np.empty_like(a)
    # One shared grid over every window [peak - 45, peak + 45]; clusters share points.
    order = np.argsort(peaks)
    start = 0
    while start < order.shape[0]:
        stop = start + 1
        while stop < order.shape[0] and peaks[order[stop]] - peaks[order[stop - 1]] < 90.0:
            stop += 1
        idx = order[start:stop]
        lo, hi = float(peaks[idx].min()) - 45.0, float(peaks[idx].max()) + 45.0
        reverse[idx] = _trapezoid_log(mix, lo, hi, fine, 1.0 - a[idx]) / (a[idx] - 1.0)
        start = stop
    return forward, reverse


def _reverse_peaks(mix: Mixture, a: NDArray) -> NDArray:
    """argmax of -x^2/2 + (1 - alpha) log M(x) for each alpha (concave: Newton converges)."""
    x = np.zeros_like(a)
    for _ in range(200):
        _, mean, var = _log_m_derivatives(mix, x)
        step = (-x + (1.0 - a) * mean) / (-1.0 - (a - 1.0) * var)
        x = x - step
        if float(np.max(np.abs(step))) < 1e-9:
            break
    return x


def mixture_rdp_literal(q: ArrayLike, a: ArrayLike, alpha: int) -> float:
    """Theorem 6.2 as printed: the multinomial sum over gamma (exponential cost; tests).

    e^{(alpha-1) eps} = sum_{gamma} multinomial(alpha; gamma) prod_J p_J^gamma_J
                        exp(((sum_J gamma_J A_J)^2 - sum_J gamma_J A_J^2) / 2).
    """
    qa = np.asarray(q, dtype=np.float64)
    aa = np.asarray(a, dtype=np.float64)
    n = qa.shape[0]
    subsets = list(itertools.product([0, 1], repeat=n))
    logp = [
        sum(math.log(qa[i]) if z else math.log1p(-qa[i]) for i, z in enumerate(js))
        for js in subsets
    ]
    shifts = [sum(aa[i] for i, z in enumerate(js) if z) for js in subsets]
    terms = []
    for gamma in _compositions(alpha, len(subsets)):
        lm = math.lgamma(alpha + 1) - sum(math.lgamma(g + 1) for g in gamma)
        lp = sum(g * lp_ for g, lp_ in zip(gamma, logp, strict=True) if g)
        tot = sum(g * s for g, s in zip(gamma, shifts, strict=True))
        sq = sum(g * s * s for g, s in zip(gamma, shifts, strict=True))
        terms.append(lm + lp + 0.5 * (tot * tot - sq))
    return float(special.logsumexp(terms)) / (alpha - 1)


def _compositions(total: int, parts: int) -> itertools.chain[tuple[int, ...]]:
    """All tuples of ``parts`` non-negative integers summing to ``total``."""

    def rec(left: int, k: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(left,)]
        return [(i, *rest) for i in range(left + 1) for rest in rec(left - i, k - 1)]

    return itertools.chain(rec(total, parts))


# ---- privacy loss distribution (Theorem 6.4) ----------------------------------------

#: Probability mass left out at each tail when choosing the loss range.
_TAIL = 1e-18


def _inverse_log_m(mix: Mixture, targets: NDArray, lo: float, hi: float) -> NDArray:
    """x with log M(x) = target, for targets inside [log M(lo), log M(hi)].

    log M is convex and increasing (shifts >= 0): a table gives the start and Newton's
    method (derivative = tilted mean shift > 0) polishes it to rounding.
    """
    table_x = np.linspace(lo, hi, 4096)
    table_l = _log_m(mix, table_x)
    x = np.interp(targets, table_l, table_x)
    for _ in range(8):
        log_m, mean, _ = _log_m_derivatives_blocked(mix, x)
        step = (log_m - targets) / np.maximum(mean, 1e-300)
        x = np.clip(x - step, lo, hi)
        if float(np.max(np.abs(step))) < 1e-13 * max(1.0, float(np.max(np.abs(x)))):
            break
    return x


def _log_m_derivatives_blocked(mix: Mixture, x: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    out = [np.empty_like(x) for _ in range(3)]
    step = max(1, _BLOCK // mix.shifts.shape[0])
    for start in range(0, x.shape[0], step):
        parts = _log_m_derivatives(mix, x[start : start + step])
        for o, p in zip(out, parts, strict=True):
            o[start : start + step] = p
    return out[0], out[1], out[2]


def _log_tail_p(mix: Mixture, x: NDArray, upper: bool) -> NDArray:
    """log P(X > x) (upper) or log P(X < x), X ~ sum_k p_k N(a_k, 1), blocked."""
    logp = np.log(mix.probs)[:, None]
    out = np.empty_like(x)
    step = max(1, _BLOCK // mix.shifts.shape[0])
    for start in range(0, x.shape[0], step):
        xs = x[start : start + step]
        diff = mix.shifts[:, None] - xs if upper else xs - mix.shifts[:, None]
        block = special.log_ndtr(diff) + logp
        out[start : start + step] = _lse_rows(block)
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
    l_lo, l_hi = _log_m(mix, np.array([lo, hi]))
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

    Source: Theorem 6.4 of papers/dp-model-merging.txt (the surrogate loss is this
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
        return pldlib.from_gaussian_mechanism(
            standard_deviation=1.0,
            sensitivity=float(mix.shifts[0]),
            value_discretization_interval=discretization,
            pessimistic_estimate=True,
        )
    z = float(-special.ndtri(_TAIL))
    lo, hi = -z, float(mix.shifts.max()) + z
    l_lo, l_hi = (float(v) for v in _log_m(mix, np.array([lo, hi])))
    pmfs = []
    for eps_lo, eps_hi, direction in ((l_lo, l_hi, 0), (-l_hi, -l_lo, 1)):
        k = np.arange(math.floor(eps_lo / discretization), math.ceil(eps_hi / discretization) + 1)
        eps = k * discretization
        remove, add = mixture_hockey_stick(mix, eps)
        delta = remove if direction == 0 else add
        pmfs.append(_connect_dots(int(k[0]), eps, delta, discretization))
    return pldlib.PrivacyLossDistribution(pmfs[0], pmfs[1])


def _connect_dots(
    lower: int, eps: NDArray, delta: NDArray, discretization: float
) -> pld_pmf.DensePLDPmf:
    """The PMF whose hockey-stick curve interpolates (0, 1), (e^eps_j, delta_j) linearly
    in gamma and stays at delta_last beyond: mass e^eps_j (slope right - slope left) at
    eps_j, and delta_last at infinity. Negative masses from rounding are raised to 0
    (more mass only raises delta)."""
    gamma = np.exp(eps)
    points_g = np.concatenate([[0.0], gamma])
    points_d = np.concatenate([[1.0], delta])
    slopes = np.diff(points_d) / np.diff(points_g)
    slopes = np.concatenate([slopes, [0.0]])
    masses = gamma * (slopes[1:] - slopes[:-1])
    masses = np.maximum(masses, 0.0)
    return pld_pmf.DensePLDPmf(discretization, lower, masses, float(delta[-1]), True)


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Exact hockey-stick of N(mu, 1) vs N(0, 1) (Balle and Wang 2018, Theorem 8):
    Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), in log space, with a rounding margin."""
    a = float(special.log_ndtr(mu / 2 - epsilon / mu))
    b = epsilon + float(special.log_ndtr(-mu / 2 - epsilon / mu))
    if b >= a:
        return 0.0
    value = math.exp(a) * -math.expm1(b - a)
    return value + math.exp(a) * 8 * np.finfo(np.float64).eps * (abs(a) + abs(b) + 16)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon (to 1e-10, rounded up) with gaussian_delta(mu, eps) <= delta."""
    if mu <= 0:
        return 0.0
    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(mu, hi) > delta:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mu, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi
