"""The one-dimensional Gaussian mixture behind a linearly combined DP-SGD step.

Source: Theorem 6.2, Lemma 6.3 and Theorem 6.4 of "Differentially Private Model Merging"
(arXiv:2604.20985).
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
from numpy.typing import ArrayLike, NDArray
from scipy import special

from service.accounting.rdp.gaussian import subsampled_gaussian_rdp

#: Trapezoid step for integer orders' forward integrand, a finite sum of unit-variance
#: Gaussians: the rule's own error is about 2 exp(-2 pi^2 / h^2) = 3e-18 at 0.7; with
#: rounding the results stay within 1e-10 relative of the exact sum (tested), far inside
#: the 1e-9 margin every RDP value gets.
INTEGER_STEP = 0.7

#: Points per block when tabulating log M(x) (components x points).
BLOCK = 2_000_000


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


def lse_rows(values: NDArray) -> NDArray:
    """log-sum-exp along axis 0, in place (``values`` is overwritten)."""
    top = values.max(axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    values -= top
    np.exp(values, out=values)
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(values.sum(axis=0)) + top)


def log_m(mix: Mixture, x: NDArray) -> NDArray:
    """log M(x), M = P/Q = sum_k p_k exp(a_k x - a_k^2 / 2), in blocks."""
    logp = np.log(mix.probs)[:, None] - 0.5 * mix.shifts[:, None] ** 2
    out = np.empty(x.shape[0])
    step = max(1, BLOCK // mix.shifts.shape[0])
    for start in range(0, x.shape[0], step):
        block = np.multiply.outer(mix.shifts, x[start : start + step])
        block += logp
        out[start : start + step] = lse_rows(block)
    return out


def log_m_derivatives(mix: Mixture, x: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """log M and its first two derivatives (M'/M and the tilted variance) at points x."""
    w = np.multiply.outer(mix.shifts, x)
    w += np.log(mix.probs)[:, None] - 0.5 * mix.shifts[:, None] ** 2
    top = w.max(axis=0)
    w -= top
    np.exp(w, out=w)  # the weights over the largest: one exp per term
    total = w.sum(axis=0)
    value = np.log(total) + top
    mean = (mix.shifts @ w) / total
    var = np.maximum((mix.shifts**2 @ w) / total - mean**2, 0.0)
    return value, mean, var


def _trapezoid_log(mix: Mixture, lo: float, hi: float, h: float, powers: NDArray) -> NDArray:
    """log of int_lo^hi phi(x) M(x)^t dx by the trapezoid rule, for every t in ``powers``,
    plus a bound on its rounding error.

    Each log term v = t log M(x) - x^2 / 2 carries an absolute error of a few ulps of
    the magnitudes it was built from (|t| times those of log M's own log-sum-exp: |a x|,
    a^2 / 2, -log p; and x^2 / 2), which exp() turns into a relative error of the term;
    the sum's relative error is their average weighted by the terms, plus n ulps. When
    the RDP is tiny (huge noise, a small q) the integral is 1 + O(a^2) and this error is
    all that is left of it: without the margin the result could fall below the exact
    RDP, down to 0."""
    x = np.arange(lo, hi + h, h)
    base = log_m(mix, x)
    log_phi = -0.5 * x**2 - 0.5 * math.log(2 * math.pi)
    vals = np.multiply.outer(base, powers)
    vals += log_phi[:, None]
    out = lse_rows(vals)  # vals now holds each term over the column's largest
    top = float(mix.shifts.max())
    inner = np.abs(base) + top * np.abs(x) + 0.5 * top * top - float(np.log(mix.probs).min())
    weights = vals / vals.sum(axis=0)
    magnitude = np.abs(powers) * (weights.T @ (inner + 8.0)) + weights.T @ (0.5 * x**2 + 8.0)
    eps = float(np.finfo(np.float64).eps)
    return out + math.log(h) + 16.0 * eps * (magnitude + x.shape[0])


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
    if mix.shifts.shape[0] == 2 and mix.shifts[0] == 0:
        # one model: the subsampled Gaussian, exact to full relative precision, and
        # bounding the reverse direction too (Mironov, Talwar, Zhang 2019, Theorem 5)
        sg = subsampled_gaussian_rdp(mix.probs[1], 1.0 / mix.shifts[1], a)[0]
        return sg, sg.copy()
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
        _, mean, var = log_m_derivatives(mix, x)
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
