"""Renyi DP of Gaussian mechanisms, plain and Poisson-subsampled, vectorised over steps.

A DP-SGD schedule with thousands of distinct steps needs the RDP of many
(q, sigma) pairs at every order; these functions take arrays of pairs and
compute all of them at once in log space.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

#: Rows per block when the (pairs x terms) arrays would otherwise get large.
_BLOCK_ELEMENTS = 4_000_000


def gaussian_rdp(sigma: float, orders: ArrayLike) -> NDArray[np.float64]:
    """Source: Mironov 2017, Proposition 7. rdp_alpha = alpha / (2 sigma^2), exact."""
    a = np.asarray(orders, dtype=np.float64)
    return a / (2.0 * sigma**2)


def _signed_logsumexp(log_terms: NDArray[np.float64], signs: NDArray[np.float64]) -> NDArray:
    """log(sum_j sign_j exp(log_terms_j)) along the last axis; the sum must be positive."""
    m = np.max(log_terms, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    total = np.sum(signs * np.exp(log_terms - m), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(total) + m[..., 0]


def _log_a_int(alpha: int, log_q: NDArray, log_1mq: NDArray, inv_2s2: NDArray) -> NDArray:
    """log A_alpha for integer alpha (Mironov, Talwar, Zhang 2019, Section 3.3):

    A_alpha = sum_{k=0}^{alpha} C(alpha, k) q^k (1-q)^(alpha-k) exp((k^2 - k) / (2 sigma^2)).
    Since the binomial weights sum to 1, A_alpha - 1 = sum_{k>=2} C(alpha, k) q^k
    (1-q)^(alpha-k) expm1((k^2 - k) / (2 sigma^2)): every term is positive, so its
    log-sum-exp is exact up to rounding, and log A_alpha = log1p(A_alpha - 1) keeps
    full relative precision even when A_alpha - 1 is 1e-15 (summing A_alpha itself
    would lose it all to the leading 1). Rows that share q share the binomial part;
    the work is one (rows x alpha+1) array per block.
    """
    k = np.arange(alpha + 1, dtype=np.float64)
    log_binom = special.gammaln(alpha + 1) - special.gammaln(k + 1) - special.gammaln(alpha - k + 1)
    quad = k * k - k
    out = np.empty(log_q.shape[0])
    rows = max(1, _BLOCK_ELEMENTS // (alpha + 1))
    uniq, inverse = np.unique(log_q, return_inverse=True)
    if uniq.shape[0] > 8 and uniq.shape[0] * 2 > log_q.shape[0]:
        # mostly distinct rates: one array per block of rows instead of a loop per rate
        for start in range(0, log_q.shape[0], rows):
            end = start + rows
            terms = _log_expm1(np.multiply.outer(inv_2s2[start:end], quad[2:]))
            terms += log_binom[2:] + np.multiply.outer(log_q[start:end], k[2:])
            terms += np.multiply.outer(log_1mq[start:end], alpha - k[2:])
            top = terms.max(axis=1)
            terms -= top[:, None]
            np.exp(terms, out=terms)
            out[start:end] = np.logaddexp(0.0, np.log(terms.sum(axis=1)) + top)
        return out
    for u, lq in enumerate(uniq):
        idx = np.flatnonzero(inverse == u)
        base = log_binom + k * lq + (alpha - k) * log_1mq[idx[0]]
        for start in range(0, idx.shape[0], rows):
            sel = idx[start : start + rows]
            terms = _log_expm1(np.multiply.outer(inv_2s2[sel], quad[2:]))
            terms += base[2:]
            top = terms.max(axis=1)
            terms -= top[:, None]
            np.exp(terms, out=terms)
            out[sel] = np.logaddexp(0.0, np.log(terms.sum(axis=1)) + top)
    return out


def _log_expm1(x: NDArray) -> NDArray:
    """log(e^x - 1) for x > 0, without overflow for large x or loss for tiny x."""
    big = x > 30.0
    out = np.empty_like(x)
    out[big] = x[big] + np.log1p(-np.exp(-x[big]))
    out[~big] = np.log(np.expm1(x[~big]))
    return out


#: Terms of the fractional-order series summed before the remainder is bounded.
FRACTIONAL_TERMS = 96


def _log_erfcx(x: NDArray) -> NDArray:
    """log(e^(x^2) erfc(x)) without overflow or underflow."""
    out = np.empty_like(x)
    neg = x < 0
    out[neg] = x[neg] ** 2 + np.log(special.erfc(x[neg]))
    out[~neg] = np.log(special.erfcx(x[~neg]))
    return out


def _log_a_frac(alpha: float, q: NDArray, sigma: NDArray) -> NDArray:
    """An upper bound on log A_alpha for fractional alpha, tight to ~1e-9 relative.

    Source: Mironov, Talwar, Zhang 2019, Section 3.3: two series split at
    z0 = sigma^2 log(1/q - 1) + 1/2. Completing the squares, their i-th terms are
    C(alpha, i) K erfcx(x0_i) / 2 and C(alpha, i) K erfcx(x1_i) / 2 with
    K = (1-q)^alpha exp(-z0^2 / (2 sigma^2)), x0_i = (i - z0) / (sqrt2 sigma) and
    x1_i = (i + z0 - alpha) / (sqrt2 sigma); erfcx(x) = e^(x^2) erfc(x) is
    decreasing, so for i >= ceil(alpha) the terms alternate in sign with
    decreasing magnitude. By Leibniz' bound the sum lies between two consecutive
    partial sums: we sum FRACTIONAL_TERMS terms and add the next one if it is
    positive, which can only overstate. Everything is in log space (erfcx never
    underflows, unlike erfc in the tail, which would silently drop mass).
    """
    ceil_alpha = math.ceil(alpha)
    n_terms = max(FRACTIONAL_TERMS, ceil_alpha + 2)
    i = np.arange(n_terms + 1, dtype=np.float64)
    coef = special.binom(alpha, i)
    log_abs = np.log(np.abs(coef))
    sign = np.sign(coef)
    s2 = sigma**2
    z0 = s2 * np.log(1.0 / q - 1.0) + 0.5
    log_k = alpha * np.log1p(-q) - z0**2 / (2.0 * s2)
    scale = math.sqrt(2.0) * sigma[:, None]
    x0 = (i[None, :] - z0[:, None]) / scale
    x1 = (i[None, :] + z0[:, None] - alpha) / scale
    log_terms = np.logaddexp(_log_erfcx(x0), _log_erfcx(x1)) - math.log(2.0) + log_abs
    summed = log_terms[:, :n_terms]
    top = summed.max(axis=1, keepdims=True)
    partial = np.sum(sign[:n_terms] * np.exp(summed - top), axis=1)
    nxt = sign[n_terms] * np.exp(log_terms[:, n_terms] - top[:, 0])
    total = partial + np.maximum(nxt, 0.0)
    # Rounding: each log term carries an absolute error of a few ulps of the
    # largest exponent it was built from (x^2 and z0^2 / (2 sigma^2) reach
    # hundreds when q is small), which exp() turns into a relative error of the
    # term; the sum's relative error is that times sum|t| / total. The margin
    # added in log space covers it with room to spare.
    magnitude = np.maximum(np.abs(log_k), np.max(np.maximum(x0, x1) ** 2, axis=1))
    magnitude = np.maximum(magnitude, np.max(np.minimum(x0, 0.0) ** 2, axis=1))
    abs_sum = np.sum(np.exp(summed - top), axis=1)
    eps = np.finfo(np.float64).eps
    margin = (abs_sum / total) * eps * (16.0 * (magnitude + 64.0) + 4.0 * n_terms)
    return np.asarray(np.log(total) + top[:, 0] + log_k + margin)


def subsampled_gaussian_rdp(
    q: ArrayLike, sigma: ArrayLike, orders: ArrayLike
) -> NDArray[np.float64]:
    """RDP of the Poisson-subsampled Gaussian mechanism, one row per (q, sigma) pair.

    Source: Mironov, Talwar, Zhang 2019, "Renyi Differential Privacy of the Sampled
    Gaussian Mechanism", Sections 3.3 (integer and fractional orders):
    rdp_alpha = log(A_alpha) / (alpha - 1). The same quantity as Opacus'
    ``compute_rdp`` and dp_accounting's RDP accountant. It bounds both the
    add and the remove direction (ibid., Theorem 5). q = 0 costs nothing; q = 1
    is the plain Gaussian mechanism.
    Returns an array of shape (len(q), len(orders)).
    """
    qa = np.atleast_1d(np.asarray(q, dtype=np.float64))
    sa = np.atleast_1d(np.asarray(sigma, dtype=np.float64))
    qa, sa = np.broadcast_arrays(qa, sa)
    a = np.asarray(orders, dtype=np.float64)
    if np.any((qa < 0) | (qa > 1)):
        raise ValueError(f"sampling rates must be in [0, 1], got {qa[(qa < 0) | (qa > 1)][:3]}")
    if np.any(sa <= 0):
        raise ValueError(f"noise multipliers must be > 0, got {sa[sa <= 0][:3]}")
    out = np.zeros((qa.shape[0], a.shape[0]))
    full = qa == 1.0
    out[full] = a[None, :] / (2.0 * sa[full, None] ** 2)
    part = (qa > 0) & ~full
    if not np.any(part):
        return out
    qp, sp = qa[part], sa[part]
    log_q, log_1mq, inv_2s2 = np.log(qp), np.log1p(-qp), 1.0 / (2.0 * sp**2)
    ceiling = exact_order_limit(int(np.unique(qp).shape[0]))
    cols = np.empty((qp.shape[0], a.shape[0]))
    for col, alpha in enumerate(a):
        log_a = _log_a(float(alpha), qp, sp, log_q, log_1mq, inv_2s2, ceiling)
        with np.errstate(invalid="ignore"):
            cols[:, col] = log_a / (alpha - 1)
    # Quasi-convexity of the Renyi divergence: the subsampled pair never exceeds the
    # plain Gaussian's alpha / (2 sigma^2); the min also replaces a NaN from overflow.
    cols = np.fmin(cols, a[None, :] * inv_2s2[:, None])
    # q > 0 has a positive RDP: where it underflowed (q ~ 1e-200), the smallest
    # positive float is still above it, and 0 would prove delta 0 at epsilon 0.
    out[part] = np.maximum(cols, np.finfo(np.float64).smallest_subnormal)
    return out


#: Fractional orders above this are bounded through the two neighbouring integers
#: (the series' binomial coefficients overflow float64 near order 1000).
FRACTIONAL_LIMIT = 256.0
#: Work per evaluation (distinct rates x order) below which integer orders are summed exactly.
EXACT_WORK = 1 << 19


def exact_order_limit(distinct_rates: int) -> int:
    """The largest order summed exactly; past it the Gaussian bound alpha / (2 sigma^2)
    applies (valid at every order, and the optimum there is that of a tiny epsilon, which
    the PLD gives anyway). Bounded work and memory whatever the order asked for."""
    return max(4096, EXACT_WORK // max(1, distinct_rates))


def _log_a(
    alpha: float,
    q: NDArray,
    sigma: NDArray,
    log_q: NDArray,
    log_1mq: NDArray,
    inv_2s2: NDArray,
    ceiling: int,
) -> NDArray:
    """An upper bound on log A_alpha = (alpha - 1) D_alpha at any real order > 1.

    Integer orders up to ``ceiling``: the exact sum. Fractional orders below
    FRACTIONAL_LIMIT: the two-series bound. Fractional orders between: the chord of
    the two neighbouring integers, an upper bound because (alpha - 1) D_alpha is
    convex in alpha (van Erven and Harremoes 2014, Theorem 11). Past ``ceiling``:
    inf, so that the Gaussian bound of the caller applies.
    """
    if alpha > ceiling or not math.isfinite(alpha):
        return np.full(q.shape, np.inf)
    if alpha.is_integer():
        return _log_a_int(int(alpha), log_q, log_1mq, inv_2s2)
    if alpha < FRACTIONAL_LIMIT:
        return _log_a_frac(alpha, q, sigma)
    lo, hi = math.floor(alpha), math.ceil(alpha)
    if hi > ceiling:
        return np.full(q.shape, np.inf)
    at_lo = _log_a_int(lo, log_q, log_1mq, inv_2s2)
    at_hi = _log_a_int(hi, log_q, log_1mq, inv_2s2)
    t = alpha - lo
    chord = (1.0 - t) * at_lo + t * at_hi
    # the interpolation rounds: a relative ulp margin keeps it above the chord
    return np.asarray(chord + 4.0 * np.finfo(np.float64).eps * np.abs(chord))
