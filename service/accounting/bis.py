"""Balanced iteration subsampling: each example takes part in exactly k of d steps.

Source: papers/balanced-iteration-subsampling.txt, Theorem 3.1 (with Theorem 3.8:
d = T iterations, k participations, sensitivity c, noise std sigma, so
c / sigma = 1 / noise_multiplier). The mechanism is P = mean over the k-subsets
mu of N(c mu, sigma^2 I_d) against Q = N(0, sigma^2 I_d).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

#: What the profile says about how each direction was bounded.
FORWARD_METHOD = (
    "Theorem 3.1: exact eq. (2) first term (Lemma 3.12) at the orders it is tractable, "
    "eq. (3) first term elsewhere (D_alpha(P||Q))"
)
REVERSE_METHOD = (
    "AM-GM bound c^2 k / (2 sigma^2) (1 + (alpha - 1) k / d) on D_alpha(Q||P); the "
    "paper's second term is not used (it falls below numerical integration)"
)


def forward_rdp(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """D_alpha(P || Q) <= log( sum_l C(k,l) C(d-k,k-l) / C(d,k) * exp(alpha c^2 l / (2 sigma^2)) ).

    Source: Theorem 3.1, eq. (3), first term (via Lemma 3.13 and Corollary 3.14).
    Valid for integer alpha >= 2; computed in log space (log-sum-exp of the
    hypergeometric weights), exact up to rounding.
    """
    a = np.asarray(orders, dtype=np.float64)
    lam = 1.0 / (2.0 * noise_multiplier**2)
    l_vals = np.arange(0, k + 1, dtype=np.float64)
    valid = (k - l_vals) <= (d - k)
    l_vals = l_vals[valid]
    log_w = (
        _log_binom(k, l_vals) + _log_binom(d - k, k - l_vals) - float(_log_binom(d, np.array(k)))
    )
    terms = log_w[None, :] + a[:, None] * lam * l_vals[None, :]
    return np.asarray(special.logsumexp(terms, axis=1))


def reverse_rdp(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """A proven bound on D_alpha(Q || P):

    exp((alpha-1) D_alpha(Q||P)) = E_Q[(P/Q)^(1-alpha)], and P/Q(x) is the mean over
    mu of exp(c mu.x / sigma^2 - c^2 k / (2 sigma^2)), which by AM-GM is at least
    exp(c (k/d) sum_i x_i / sigma^2 - c^2 k / (2 sigma^2)) (the mean of mu is (k/d) 1).
    Since 1 - alpha < 0, E_Q[(P/Q)^(1-alpha)] <= exp((alpha-1) c^2 k / (2 sigma^2)
    + (alpha-1)^2 c^2 k^2 / (2 d sigma^2)), i.e.
    D_alpha(Q||P) <= c^2 k / (2 sigma^2) * (1 + (alpha - 1) k / d), for every alpha > 1.
    Looser than the paper's reverse term, which is not a valid bound.
    """
    a = np.asarray(orders, dtype=np.float64)
    lam = 1.0 / (2.0 * noise_multiplier**2)
    return np.asarray(lam * k * (1.0 + (a - 1.0) * k / d))


#: The random-allocation formula for the reverse direction. NOT a bound for this pair:
#: numerical integration puts D_alpha(Q||P) above it (d = 2, k = 1, sigma = 1, alpha = 3:
#: 0.8401 against 0.8168), so profiles do not use it.
ALLOCATION_METHOD = (
    "random allocation (Feldman and Shenfeld 2025, arXiv 2502.08202): RDP of the add "
    "direction, k of d steps, integer orders >= 2"
)


def reverse_rdp_allocation(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """The random-allocation formula for D_alpha(Q || P), k of d steps, at integer
    orders alpha >= 2; inf elsewhere. Kept for comparison only: it falls below the
    exact D_alpha(Q || P) of the pair (P = mean over k-subsets mu of N(mu, sigma^2 I),
    Q = N(0, sigma^2 I)) computed by quadrature, so it is not an upper bound for it.

    Source: Feldman and Shenfeld 2025, arXiv 2502.08202, the RDP bound of the add
    direction: with x = k (d - k) / (sigma^2 d^2),

        D_alpha <= alpha k^2 / (2 sigma^2 d) + alpha k (d - k) / (2 sigma^2 d (alpha - 1))
                   - d log(1 + alpha (e^x - 1)) / (2 (alpha - 1)).

    Computed with log1p/expm1 (the last two terms nearly cancel for large d).
    """
    a = np.asarray(orders, dtype=np.float64)
    s2 = noise_multiplier**2
    x = k * (d - k) / (s2 * d * d)
    with np.errstate(invalid="ignore", divide="ignore"):
        first = a * k * k / (2.0 * s2 * d)
        second = a * k * (d - k) / (2.0 * s2 * d * (a - 1.0))
        third = d * np.log1p(a * math.expm1(x)) / (2.0 * (a - 1.0))
        out = first + second - third
        # the last two terms nearly cancel: a margin of a few ulps of the largest
        # covers the rounding of the difference
        out = out + 8.0 * np.finfo(np.float64).eps * (first + second + np.abs(third))
    ok = (a >= 2) & (np.floor(a) == a) & np.isfinite(out)
    return np.where(ok, np.maximum(out, 0.0), np.inf)


def _log_binom(n: int | float, r: NDArray) -> NDArray:
    return np.asarray(special.gammaln(n + 1) - special.gammaln(r + 1) - special.gammaln(n - r + 1))


def forward_rdp_exact(
    d: int, k: int, noise_multiplier: float, orders: ArrayLike, max_work: int = 20_000
) -> NDArray:
    """D_alpha(P || Q) exactly at integer orders, by Lemma 3.12 (eq. (2), first term).

    Lemma 3.12 is an identity for integer alpha:
    exp((alpha-1) D) = E[exp(c^2 / (2 sigma^2) sum_{i != j} mu_i . mu_j)] over alpha
    independent uniform k-subsets mu_1..mu_alpha, and sum_{i != j} mu_i . mu_j =
    ||n||^2 - alpha k where n counts how often each of the d coordinates was picked.
    A dynamic program over the multiset of counts (the distribution is symmetric in
    the coordinates) adds one subset at a time; each transition picks j_v of the m_v
    coordinates currently at count v, with probability prod_v C(m_v, j_v) / C(d, k).
    Order alpha is read off after alpha steps, so one pass serves every order.
    Orders that are not integers >= 2, or that the pass does not reach within
    ``max_work`` transitions, get NaN (not computed).
    """
    a = np.asarray(orders, dtype=np.float64)
    out = np.full(a.shape, np.nan)
    wanted = {int(x) for x in a if float(x).is_integer() and x >= 2}
    if not wanted:
        return out
    lam = 1.0 / (2.0 * noise_multiplier**2)
    log_total = _log_comb(d, k)
    states: dict[tuple[int, ...], float] = {(d,): 0.0}  # histogram m_v by count v -> log prob
    work = 0
    for step in range(1, max(wanted) + 1):
        nxt: dict[tuple[int, ...], list[float]] = {}
        for hist, logp in states.items():
            choices = _choices(hist, k)
            work += len(choices)
            if work > max_work:
                return out
            for choice in choices:
                new = [*hist, 0]
                log_ways = 0.0
                for v, j in enumerate(choice):
                    if j:
                        log_ways += _log_comb(hist[v], j)
                        new[v] -= j
                        new[v + 1] += j
                while new and new[-1] == 0:
                    new.pop()
                nxt.setdefault(tuple(new), []).append(logp + log_ways - log_total)
        states = {h: _logsumexp(v) for h, v in nxt.items()}
        if step in wanted:
            terms = [
                logp + lam * (sum(v * v * m for v, m in enumerate(hist)) - step * k)
                for hist, logp in states.items()
            ]
            out[a == step] = _logsumexp(terms) / (step - 1)
    return out


def _log_comb(n: int, r: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def _choices(hist: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
    """All ways to pick k coordinates: j_v from the m_v coordinates at each count v."""
    out: list[tuple[int, ...]] = []

    def rec(v: int, left: int, acc: list[int]) -> None:
        if v == len(hist):
            if left == 0:
                out.append(tuple(acc))
            return
        for j in range(min(hist[v], left) + 1):
            rec(v + 1, left - j, [*acc, j])

    rec(0, k, [])
    return out
