"""Model splitting and dropout: the RDP of one training step, split and shared parts jointly.

Source: "Leveraging Randomness in Model and Data Partitioning for Privacy Amplification"
(Dong, Chen, Ozgur, arXiv 2503.03043), Theorems 3.1, 3.4-3.6 and Corollary 3.7. At each
step the model's split part is cut into d disjoint parts and each example's clipped
gradient reaches k of them, chosen uniformly (dropout with p = 0.5 is d = 2, k = 1); a
shared part (never split) receives every sampled example's gradient. With the split
part clipped to 1 per part reached (noise multiplier s = noise std / clipping norm) and
the shared part to ``shared`` (in the same unit), the pair of one step is

    M = (1 - q) Q + q P,   P = mean over k-subsets mu of N((a e_0, mu) / s, I),
    Q = N(0, I)  (coordinates rescaled by the noise std; a = shared),

under Poisson subsampling at rate q (q = 1: none). Its likelihood ratio under Q is
R = 1 - q + q X, X = Z_0 S: Z_0 a mean-one lognormal (log-variance a^2 / s^2) from the
shared part, S = P_split / Q the mean over the k-subsets of products of lognormals,
independent of Z_0. The two parts share one Poisson draw, so they are one mechanism:
adding the RDP of the shared part (a subsampled Gaussian) to that of the split part
(a subsampled mixture) treats the draws as independent and understates the divergence
(E[(1 - q + q Z_0 S)^2] > E[(1 - q + q Z_0)^2] E[(1 - q + q S)^2] - 1 + 1 when both
parts are present; the tests show the understatement).

Forward, integer orders alpha (``forward_rdp``), exactly up to the moments' bounds:

    E_Q[R^alpha] = sum_j C(alpha, j) (1 - q)^(alpha - j) q^j E[Z_0^j] E[S^j],

E[Z_0^j] = exp(j (j - 1) a^2 / (2 s^2)), E[S^j] = exp((j - 1) D_j(P_split || Q)) with
D_j bounded above as balanced iteration subsampling does (``bis.rdp``: exact for k = 1,
Lemma 3.12, eq. (3) and the block reduction for k > 1). Every term is nonnegative, so
upper bounds on the moments give an upper bound.

Reverse, D_alpha(Q || M) (``reverse_rdp``):
- q = 1: the pair is a product (the shared coordinate is independent), so
  D_alpha = alpha a^2 / (2 s^2) + D_alpha(Q || P_split), the latter certified by
  ``bis.rdp.per_epoch_rdp`` (which returns the larger direction).
- q < 1, k = 1: E_Q[R^-m] (m = alpha - 1) by the Laplace representation of
  ``bis.reverse``: E[R^-m] = (1 / Gamma(m)) int t^(m-1) e^-t exp(K(t)) dt with
  K(t) = log E[exp(t q (1 - Z_0 S))], convex (a cumulant generating function),
  K(0) = 0, slope below q. K is bounded above on a grid: Z_0 is replaced by its split
  onto the grid points i h (``bis.grid.split_step``, a mean-preserving spread; the
  integrand exp(u (1 - Z_0 S)) is convex in Z_0, so by Jensen the split only raises it),
  its mass above the grid's top W put on W (the integrand decreases in Z_0), and
  E[exp(-v S)] = exp(-v + L(v)), L(v) = d r(v / d) of ``bis.reverse`` (certified upper
  values on a geometric grid, chords in between: L is convex, so the chord of upper values
  lies above it; L(v) <= v beyond the grid since r' < 1). The integral beyond the grid's
  end T is at most (1 - q)^-m Q(m, T (1 - q)) (R >= 1 - q, and x^-m Q(m, T x)
  decreases).
- q < 1, k > 1: by quasi-convexity in the mixture (every mu gives a Poisson-subsampled
  Gaussian of sensitivity sqrt(a^2 + k) / s), the subsampled Gaussian's RDP (Mironov,
  Talwar, Zhang 2019, Theorem 5): sound, without amplification; the profile says so.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from service.accounting.bis import reverse as rev
from service.accounting.bis.forward import forward_rdp_single
from service.accounting.bis.grid import split_step
from service.accounting.bis.rdp import (
    forward_rdp,
    forward_rdp_blocks,
    forward_rdp_exact,
    per_epoch_rdp,
)
from service.accounting.mechanisms.splitting import SHARED_BINS
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp

#: Highest integer order computed (the moments of one participation are exact up to 256).
TOP_ORDER = 256
#: Split of the shared part's lognormal: finest bin width, most bins, and the z-score of
#: log Z_0 at the grid's top.
_SHARED_BIN = 0.005
_SHARED_BINS = SHARED_BINS
_SHARED_TAIL_Z = 9.0
#: Relative rounding cover of K's log-sum-exp and of the binomial sums.
_ROUND = 1e-12
#: Growth factor of the geometric grid of L (chords between its nodes: relative looseness
#: about (ratio - 1)^2 / 8 where L is quadratic).
_L_RATIO = 1.02
#: Target of the tail of the Laplace integral (absolute, on E[R^-m] >= 1).
_LOG_TAIL_TARGET = -45.0

FORWARD_METHOD = (
    "E[(1 - q + q Z_0 S)^alpha] by the binomial expansion, exact at integer orders given "
    "the moments of the shared lognormal (closed form) and of the split mixture (exact for "
    "k = 1, Theorem 3.1 eq. (3), Lemma 3.12 and the block reduction for k > 1)"
)
REVERSE_METHOD = (
    "q = 1: the shared Gaussian plus the split mixture's certified reverse divergence; "
    "q < 1, k = 1: E[(1 - q + q Z_0 S)^-(alpha - 1)] by its Laplace representation, the "
    "shared lognormal split onto a grid (convex order), every step rounded up; "
    "q < 1, k > 1: the Poisson-subsampled Gaussian of sensitivity sqrt(shared^2 + k) "
    "(no amplification)"
)


def _check(d: int, k: int, s: float, shared: float, q: float) -> None:
    if not 1 <= k <= d:
        raise ValueError(f"need 1 <= k <= d, got d={d}, k={k}")
    if not s > 0 or not math.isfinite(s):
        raise ValueError(f"noise multiplier must be positive and finite, got {s}")
    if not shared >= 0 or not math.isfinite(shared):
        raise ValueError(f"shared must be nonnegative and finite, got {shared}")
    if not 0 < q <= 1:
        raise ValueError(f"sampling rate must be in (0, 1], got {q}")


def split_moments_rdp(d: int, k: int, s: float, orders: NDArray) -> NDArray:
    """Upper bounds on D_j(P_split || Q) at integer orders j >= 2 (inf where none is
    computed): the smallest of the forward bounds of ``bis.rdp``."""
    if d == k:  # every part: the Gaussian mechanism of sensitivity sqrt(k)
        return np.asarray(orders * k / (2.0 * s * s))
    bounds = [forward_rdp(d, k, s, orders)]
    if k == 1:
        bounds.append(forward_rdp_single(d, s, orders))
    else:
        bounds.append(forward_rdp_exact(d, k, s, orders))
        bounds.append(forward_rdp_blocks(d, k, s, orders))
    stacked = np.stack([np.where(np.isnan(b), np.inf, b) for b in bounds])
    return np.asarray(stacked.min(axis=0))


def forward_rdp_step(
    d: int, k: int, s: float, shared: float, q: float, orders: ArrayLike
) -> NDArray:
    """D_alpha(M || Q) of one step at integer orders 2 <= alpha <= TOP_ORDER (NaN at
    others), rounded up (module docstring)."""
    a = np.asarray(orders, dtype=np.float64)
    _check(d, k, s, shared, q)
    out = np.full(a.shape, np.nan)
    ints = (a >= 2) & (np.floor(a) == a) & (a <= TOP_ORDER)
    if not np.any(ints):
        return out
    top = int(a[ints].max())
    j = np.arange(top + 1, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        split = split_moments_rdp(d, k, s, np.maximum(j, 2.0))
    log_moment = np.where(j >= 2, (j - 1.0) * split, 0.0) + j * (j - 1.0) * shared**2 / (
        2.0 * s * s
    )
    if q == 1.0:
        out[ints] = log_moment[a[ints].astype(int)] / (a[ints] - 1.0)
        return out
    log_q, log_1mq = math.log(q), math.log1p(-q)
    for i in np.flatnonzero(ints):
        n = int(a[i])
        jj = np.arange(n + 1)
        terms = (
            special.gammaln(n + 1.0)
            - special.gammaln(jj + 1.0)
            - special.gammaln(n - jj + 1.0)
            + (n - jj) * log_1mq
            + jj * log_q
            + log_moment[: n + 1]
        )
        log_e = float(special.logsumexp(terms))
        cover = _ROUND + 4.0 * n * np.finfo(np.float64).eps * float(np.max(np.abs(terms)))
        out[i] = (log_e + cover) / (n - 1.0)
    return out


def _shared_law(shared: float, s: float) -> tuple[NDArray, NDArray]:
    """(grid points, masses) of the split of Z_0, its mass above the grid's top W put on W
    (the integrand exp(u (1 - z S)) decreases in z); a point mass at 1 without a shared
    part."""
    if shared == 0.0:
        return np.ones(1), np.ones(1)
    s0 = s / shared  # noise multiplier of the shared part alone
    top = math.exp((_SHARED_TAIL_Z - 1.0 / (2.0 * s0)) / s0)
    bins = max(2, min(_SHARED_BINS, math.ceil(top / _SHARED_BIN)))
    h = top / bins
    masses = split_step(s0, h, bins + 1, bins)
    above = float(special.ndtr(-(s0 * math.log(bins * h) + 1.0 / (2.0 * s0))))
    masses[-1] += above * (1.0 + 1e-9) + 1e-300
    return h * np.arange(bins + 1, dtype=np.float64), masses


def _l_grid(d: int, s: float, v_max: float) -> tuple[NDArray, NDArray]:
    """Upper values of L(v) = d r(v / d) on a geometric grid of v from 0 to min(v_max,
    600 d) (``bis.reverse``)."""
    v_top = min(v_max, rev._U_MAX * d)
    n = max(2, math.ceil(math.log(max(v_top, 2e-3) / 1e-3) / math.log(_L_RATIO)))
    v = np.concatenate([[0.0], 1e-3 * _L_RATIO ** np.arange(n + 1)])
    v = v[v <= v_top * _L_RATIO + 1e-3]
    values = np.concatenate([[0.0], d * rev._r_upper(v[1:] / d, s)])
    return v, values


def _l_upper(v: NDArray, grid: NDArray, values: NDArray) -> NDArray:
    """Chords of the upper values (L convex), and L(v) <= v past the grid."""
    inside = np.interp(v, grid, values)
    return np.where(v <= grid[-1], np.minimum(inside, v), v)


def reverse_rdp_step(
    d: int, k: int, s: float, shared: float, q: float, orders: ArrayLike
) -> NDArray:
    """An upper bound on D_alpha(Q || M) of one step at the orders > 1 given (inf where not
    computed; module docstring)."""
    a = np.asarray(orders, dtype=np.float64)
    _check(d, k, s, shared, q)
    if q == 1.0:
        split, _ = per_epoch_rdp(d, k, s, a) if d > k else (a * k / (2 * s * s), None)
        return np.asarray(a * shared**2 / (2.0 * s * s) + split)
    if k > 1 or d == 1:
        sigma = s / math.sqrt(shared**2 + k)
        return np.asarray(subsampled_gaussian_rdp([q], [sigma], a)[0])
    ms = a - 1.0
    # grid end: (1 - q)^-m Q(m, T (1 - q)) below e^_LOG_TAIL_TARGET for the largest m
    m_top = float(ms.max())
    t_end = m_top + 10.0
    while _log_tail(m_top, t_end, q) > _LOG_TAIL_TARGET:
        t_end *= 1.2
    n = max(1, math.ceil(math.log(t_end / rev._T_MIN) / math.log(rev._RHO)))
    t = np.concatenate([[0.0], rev._T_MIN * rev._RHO ** np.arange(n + 1)])
    z, p = _shared_law(shared, s)
    grid, values = _l_grid(d, s, float(t[-1] * q * z[-1]))
    kvals = np.zeros(t.shape)
    log_p = np.where(p > 0, np.log(np.maximum(p, 1e-320)), -np.inf)
    for start in range(1, t.shape[0], 64):
        u = t[start : start + 64, None] * q
        log_terms = log_p + u * (1.0 - z) + _l_upper(u * z, grid, values)
        kvals[start : start + 64] = special.logsumexp(log_terms, axis=1) + _ROUND
    kvals[1:] = np.maximum(kvals[1:], 0.0)  # K >= 0 (Jensen); a rounding below it is raised
    out = np.full(a.shape, np.inf)
    for i, m in enumerate(ms):
        if m <= 0:
            continue
        j = min(int(np.searchsorted(t, t_end)), t.shape[0] - 1)
        log_e = rev._log_moment_upper(
            float(m), t[: j + 1], kvals[: j + 1], d, s, _log_tail(float(m), float(t[j]), q)
        )
        out[i] = log_e / m
    return out


def _log_tail(m: float, t_end: float, q: float) -> float:
    """log of (1 - q)^-m Q(m, T (1 - q)) (module docstring)."""
    x = t_end * (1.0 - q)
    if x > m + 1.0:  # Q(m, x) <= x^(m-1) e^-x / (Gamma(m) (1 - (m - 1) / x)) there
        log_q = (m - 1) * math.log(x) - x - math.log1p(-max(m - 1.0, 0.0) / x) - math.lgamma(m)
    else:
        log_q = math.log(max(float(special.gammaincc(m, x)), 1e-300))
    return -m * math.log1p(-q) + log_q


def step_rdp(
    d: int, k: int, s: float, shared: float, q: float, orders: ArrayLike
) -> tuple[NDArray, NDArray]:
    """(forward, reverse) RDP of one step at the integer orders given."""
    a = np.asarray(orders, dtype=np.float64)
    fwd = forward_rdp_step(d, k, s, shared, q, a)
    rev_ = reverse_rdp_step(d, k, s, shared, q, a)
    return np.where(np.isnan(fwd), np.inf, fwd), rev_
