"""Step PMFs built from the closed form: a pair that dominates the step, exact at its grid.

Oracle: the hockey-stick divergence of the subsampled Gaussian pair by numerical
integration of (p(x) - e^eps q(x))_+ (scipy quad), and Balle and Wang's closed form for
the Gaussian mechanism; the PMF's delta is dp_accounting's sum over the PMF.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from scipy import integrate, optimize, stats

from service.accounting.pld.gaussian import gaussian_delta
from service.accounting.pld.step_pmfs import loss_moments, step_pmfs

H = 1e-3
STEPS = [(0.01, 1.0), (0.3, 0.7), (0.05, 3.0), (1.0, 2.0)]


def _exact_delta(q: float, sigma: float, eps: float, add: bool) -> float:
    """H_{e^eps}(P||Q) (remove) or H_{e^eps}(Q||P) (add) of the pair
    P = (1 - q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2), by quadrature: P/Q increases in
    x, so the set where the integrand is positive is a half-line, cut at the root of the
    log-likelihood ratio (brentq), and the integral over it is smooth."""
    if q >= 1.0:
        return gaussian_delta(1.0 / sigma, eps)

    def mix(x: float) -> float:
        return (1 - q) * stats.norm.pdf(x, 0, sigma) + q * stats.norm.pdf(x, 1, sigma)

    def base(x: float) -> float:
        return float(stats.norm.pdf(x, 0, sigma))

    def log_ratio(x: float) -> float:  # log P/Q, increasing
        return math.log(1 - q + q * math.exp((2 * x - 1) / (2 * sigma**2)))

    lo, hi = -40 * sigma, 1 + 40 * sigma
    level = -eps if add else eps
    if log_ratio(lo) >= level:
        cut = lo
    elif log_ratio(hi) <= level:
        cut = hi
    else:
        cut = optimize.brentq(lambda x: log_ratio(x) - level, lo, hi, xtol=1e-15, rtol=1e-15)
    scale = math.exp(eps)
    if add:  # Q/P > e^eps below the cut
        value = integrate.quad(
            lambda x: base(x) - scale * mix(x), lo, cut, limit=400, epsabs=0, epsrel=1e-12
        )[0]
    else:
        value = integrate.quad(
            lambda x: mix(x) - scale * base(x), cut, hi, limit=400, epsabs=0, epsrel=1e-12
        )[0]
    return max(0.0, value)


def _dense_rows(q: float, sigma: float, add: bool, base: int, tilt: float):
    pmfs = step_pmfs(np.array([q]), np.array([sigma]), H, add, 1e-18, base=base, tilt=tilt)
    lo = int(pmfs.k[0])
    probs = np.zeros(int(pmfs.k[-1]) - lo + 1)
    probs[pmfs.k - lo] = pmfs.mass
    pmf = pld_pmf.DensePLDPmf(H, lo, probs, float(pmfs.infinity[0]), True)
    return pmfs, pmf


@pytest.mark.parametrize("add", [False, True], ids=["remove", "add"])
@pytest.mark.parametrize(("q", "sigma"), STEPS)
def test_step_pmf_equals_the_hockey_stick_at_its_grid_and_lies_above_between(
    q: float, sigma: float, add: bool
) -> None:
    # a coarser body (2 grid widths) and wider tails: the grid is a subset of multiples of H
    pmfs, pmf = _dense_rows(q, sigma, add, base=1, tilt=1.0)
    assert np.all(pmfs.mass >= 0)
    total = pmfs.mass.sum() + pmfs.infinity[0]
    assert total == pytest.approx(1.0, abs=1e-12)
    # a pair: E_P[e^{-L}] is Q's mass, at most 1
    assert float(np.sum(pmfs.mass * np.exp(-pmfs.k * H))) <= 1.0 + 1e-12
    grid = pmfs.k * H
    chosen = np.unique(np.concatenate([grid[:: max(1, grid.size // 25)], grid[-3:]]))
    chosen = chosen[chosen >= 0][:30]
    for eps in chosen:
        exact = _exact_delta(q, sigma, float(eps), add)
        ours = float(pmf.get_delta_for_epsilon(float(eps)))
        assert ours >= exact * (1 - 1e-8) - 1e-16
        assert ours <= exact * (1 + 1e-6) + 1e-15
    # between grid points the chord lies above the curve
    gaps = np.flatnonzero(np.diff(pmfs.k) > 1)
    middles = (grid[gaps] + grid[gaps + 1]) / 2
    for eps in middles[middles >= 0][:: max(1, middles.size // 15)]:
        exact = _exact_delta(q, sigma, float(eps), add)
        assert float(pmf.get_delta_for_epsilon(float(eps))) >= exact * (1 - 1e-8) - 1e-16


def test_a_finer_grid_never_proves_more_than_the_truth_and_comes_closer() -> None:
    q, sigma = 0.02, 0.9
    eps = 0.5 + H / 3  # between grid points
    exact = _exact_delta(q, sigma, eps, False)
    coarse = float(_dense_rows(q, sigma, False, base=4, tilt=1.0)[1].get_delta_for_epsilon(eps))
    fine = float(_dense_rows(q, sigma, False, base=0, tilt=1.0)[1].get_delta_for_epsilon(eps))
    assert coarse >= fine >= exact * (1 - 1e-8)
    assert fine - exact < coarse - exact


@pytest.mark.parametrize("add", [False, True], ids=["remove", "add"])
def test_loss_moments_match_quadrature(add: bool) -> None:
    q, sigma = np.array([0.05, 1.0]), np.array([0.8, 2.0])
    mean, var = loss_moments(q, sigma, add)
    for i in range(2):
        qi, si = float(q[i]), float(sigma[i])

        def loss(x: float, qi: float = qi, si: float = si) -> float:
            value = math.log(1 - qi + qi * math.exp((2 * x - 1) / (2 * si**2)))
            return -value if add else value

        def density(x: float, qi: float = qi, si: float = si) -> float:
            if add:
                return float(stats.norm.pdf(x, 0, si))
            return (1 - qi) * stats.norm.pdf(x, 0, si) + qi * stats.norm.pdf(x, 1, si)

        lo, hi = -20 * si, 1 + 20 * si
        m1 = integrate.quad(lambda x: loss(x) * density(x), lo, hi, limit=400)[0]
        m2 = integrate.quad(lambda x: loss(x) ** 2 * density(x), lo, hi, limit=400)[0]
        assert mean[i] == pytest.approx(m1, rel=1e-8, abs=1e-14)
        assert var[i] == pytest.approx(m2 - m1**2, rel=1e-7)
