"""The forward divergence of balanced iteration subsampling with k = 1, exactly.

The pair: P = (1/d) sum_t N(e_t, s^2 I_d) against Q = N(0, s^2 I_d) (sensitivity 1,
noise multiplier s). Under Q, P/Q = S = (1/d) sum_t Z_t with Z_t i.i.d. lognormal,
E[Z^j] = exp(j (j - 1) / (2 s^2)). At an integer order alpha >= 2,

    exp((alpha - 1) D_alpha(P||Q)) = E[S^alpha] = alpha! P_alpha / d^alpha,

where P = M^d is the d-th power of the exponential generating function of the moments,
M(x) = sum_j E[Z^j] x^j / j! (a formal power series: E[(sum_t Z_t)^n] = n! [x^n] M^d by
the multinomial theorem and independence). This is Theorem 3.1's eq. (2) first term
("Leveraging Randomness in Model and Data Partitioning for Privacy Amplification" (Dong, Chen,
Ozgur), Lemma 3.12) for k = 1, computed without
enumerating partitions.

Two ways to P, both sums of nonnegative terms only (no cancellation), in log space:
- alpha <= d + 1: J. C. P. Miller's recurrence for a power of a series with M_0 = 1,
  P_0 = 1, P_n = (1/n) sum_{j=1}^n ((d + 1) j - n) M_j P_{n-j}: every coefficient
  (d + 1) j - n is >= 0 for n <= d + 1. O(alpha^2).
- otherwise (d small): binary powering, products of series truncated at degree alpha.
  O(alpha^2 log d).
A relative 1e-12 on E[S^alpha], plus 4 n ulps of the magnitudes combined into
log E[S^n], covers the rounding of either (about one ulp per step, n steps). Orders
above max(d + 1, 256) are left to eq. (3), which is within a fraction of a percent of
the exact value there.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

#: Relative rounding cover of E[S^alpha] (each step of either sum loses about 1e-16).
_ROUND = 1e-12
#: Binary powering (small d) stops at this order; eq. (3) is as tight above it.
_POWER_TOP = 256


def forward_rdp_single(d: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """D_alpha(P || Q) exactly (up to a relative 1e-12 of E[S^alpha], rounded up) for one
    participation in d steps, at integer orders 2 <= alpha <= max(d + 1, 256); NaN at
    other orders."""
    a = np.asarray(orders, dtype=np.float64)
    if d < 1 or noise_multiplier <= 0:
        raise ValueError(
            f"need d >= 1 and a positive noise multiplier, got {d}, {noise_multiplier}"
        )
    out = np.full(a.shape, np.nan)
    ints = (a >= 2) & (np.floor(a) == a) & (a <= max(d + 1, _POWER_TOP))
    if not np.any(ints):
        return out
    top = int(np.max(a[ints]))
    j = np.arange(top + 1, dtype=np.float64)
    log_m = j * (j - 1) / (2.0 * noise_multiplier**2) - special.gammaln(j + 1)
    log_p = _miller(log_m, d) if top <= d + 1 else _power(log_m, d)
    n = a[ints].astype(int)
    parts = (special.gammaln(n + 1.0), log_p[n], -n * math.log(d))
    # rounding cover: the relative 1e-12, plus n steps' worth of ulps of the terms summed
    cover = _ROUND + 4.0 * n * np.finfo(np.float64).eps * sum(np.abs(x) for x in parts)
    log_e = sum(parts) + cover
    out[ints] = log_e / (n - 1.0)
    return out


def _miller(log_m: NDArray, d: int) -> NDArray:
    log_p = np.zeros(log_m.shape)
    with np.errstate(divide="ignore"):  # the j = 1 term of n = d + 1 is 0
        for n in range(1, log_m.shape[0]):
            jj = np.arange(1, n + 1)
            terms = np.log((d + 1.0) * jj - n) + log_m[1 : n + 1] + log_p[n - jj]
            log_p[n] = float(special.logsumexp(terms)) - math.log(n)
    return log_p


def _power(log_m: NDArray, d: int) -> NDArray:
    result: NDArray | None = None
    base = log_m
    while True:
        if d & 1:
            result = base if result is None else _product(result, base)
        d >>= 1
        if not d:
            break
        base = _product(base, base)
    assert result is not None
    return result


def _product(x: NDArray, y: NDArray) -> NDArray:
    """log coefficients of the product of two series given by log coefficients,
    truncated at their length."""
    idx = np.arange(x.shape[0])
    lag = idx[None, :] - idx[:, None]  # n - j
    terms = np.where(lag >= 0, x[:, None] + y[np.clip(lag, 0, None)], -np.inf)
    return np.asarray(special.logsumexp(terms, axis=0))
