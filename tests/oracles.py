"""Independent oracles for the accounting tests: numerical integration and closed forms.

Nothing here calls service.accounting.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
from scipy import special, stats


def sampled_gaussian_rdp_quad(q: float, sigma: float, alpha: float) -> float:
    """D_alpha((1-q)N(0,s^2) + qN(1,s^2) || N(0,s^2)) by adaptive quadrature (mpmath)."""
    mp.mp.dps = 40

    def f(x: mp.mpf) -> mp.mpf:
        ratio = (1 - q) + q * mp.exp((2 * x - 1) / (2 * sigma * sigma))
        return mp.npdf(x, 0, sigma) * ratio**alpha

    total = mp.quad(f, [-mp.inf, -20 * sigma, 0, 1, 20 * sigma + 1, mp.inf])
    return float(mp.log(total) / (alpha - 1))


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Exact hockey-stick of N(mu,1) vs N(0,1) (Balle and Wang 2018, Theorem 8)."""
    return float(
        stats.norm.cdf(-epsilon / mu + mu / 2)
        - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
    )


def eps_delta_profile(eps0: float, delta0: float, epsilon: float) -> float:
    """Tight privacy profile of a generic (eps0, delta0)-DP mechanism (Kairouz et al. 2015)."""
    if epsilon >= eps0:
        return delta0
    return delta0 + (1 - delta0) * (math.exp(eps0) - math.exp(epsilon)) / (1 + math.exp(eps0))


def bis_divergences_gauss_hermite(
    d: int, k: int, sigma: float, alpha: float, points: int = 60
) -> tuple[float, float]:
    """(D_alpha(P||Q), D_alpha(Q||P)) for P = mean_mu N(mu, s^2 I_d), mu in the k-subsets,
    Q = N(0, s^2 I_d), c = 1, by a tensor Gauss-Hermite rule under Q."""
    nodes, weights = special.roots_hermite(points)
    x1 = math.sqrt(2.0) * sigma * nodes
    w1 = weights / math.sqrt(math.pi)
    mus = [np.array(m, dtype=float) for m in itertools.combinations(range(d), k)]
    grids = np.meshgrid(*([x1] * d), indexing="ij")
    xs = np.stack([g.ravel() for g in grids], axis=1)
    ws = np.prod(np.meshgrid(*([w1] * d), indexing="ij"), axis=0).ravel()
    ratio = np.zeros(xs.shape[0])
    for subset in mus:
        mu = np.zeros(d)
        mu[subset.astype(int)] = 1.0
        ratio += np.exp((xs @ mu) / sigma**2 - k / (2 * sigma**2))
    ratio /= len(mus)
    forward = math.log(np.sum(ws * ratio**alpha)) / (alpha - 1)
    reverse = math.log(np.sum(ws * ratio ** (1 - alpha))) / (alpha - 1)
    return forward, reverse


def rs_gaussian_pair(pi: float, s1: float, s2: float, shift: float):
    """Exact output laws of RS between two Gaussian mechanisms N(mu, s1^2), N(mu, s2^2)
    on neighbouring data (mean moved by ``shift``): densities of P (shifted) and Q."""

    def p(x: float) -> float:
        return pi * stats.norm.pdf(x, shift, s1) + (1 - pi) * stats.norm.pdf(x, shift, s2)

    def q(x: float) -> float:
        return pi * stats.norm.pdf(x, 0, s1) + (1 - pi) * stats.norm.pdf(x, 0, s2)

    return p, q


def hockey_stick_quad(p, q, epsilon: float, span: float) -> float:
    """int (p - e^eps q)_+ by adaptive quadrature over [-span, span]."""
    from scipy import integrate

    val, _ = integrate.quad(
        lambda x: max(0.0, p(x) - math.exp(epsilon) * q(x)),
        -span,
        span,
        limit=500,
        epsabs=1e-14,
        epsrel=1e-10,
    )
    return val


def renyi_quad(p, q, alpha: float, span: float) -> float:
    """D_alpha(p || q) by adaptive quadrature (mpmath, high precision)."""
    mp.mp.dps = 30

    def f(x: mp.mpf) -> mp.mpf:
        return mp.mpf(p(float(x))) ** alpha * mp.mpf(q(float(x))) ** (1 - alpha)

    total = mp.quad(f, [-span, 0, span])
    return float(mp.log(total) / (alpha - 1))


def clopper_pearson_upper(k: int, n: int, confidence: float) -> float:
    """Upper end of the one-sided Clopper-Pearson interval for a binomial rate."""
    if k >= n:
        return 1.0
    return float(stats.beta.ppf(confidence, k + 1, n - k))
