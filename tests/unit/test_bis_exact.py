"""Balanced iteration subsampling: the exact reverse divergence and the block reduction.

Oracles, each independent of the code under test: Gauss-Hermite quadrature of
D_alpha(Q||P) in d = 2, 3, 4, 6 dimensions (the mixture written out over all k-subsets),
Monte Carlo with a control variate and a 4-sigma interval (seeded), mpmath at 30 digits
for the inner integral r(u), scipy's adaptive quadrature of the Laplace representation
for large d, the exact dynamic program of Lemma 3.12 for the forward direction, and the
Gaussian mechanism (d = 1).
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from random_allocation.random_allocation_scheme.direct import allocation_RDP_remove
from scipy import integrate

from service.accounting.bis import rdp as bis
from service.accounting.bis.forward import forward_rdp_single
from service.accounting.bis.reverse import _r_upper, reverse_rdp_single


def _quadrature(d: int, k: int, s: float, alphas: list[float], nodes: int) -> np.ndarray:
    """D_alpha(Q||P) by a d-dimensional Gauss-Hermite rule (first axis looped)."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / math.sqrt(2 * math.pi)
    rest = np.stack(np.meshgrid(*([x] * (d - 1)), indexing="ij"), -1).reshape(-1, d - 1)
    w_rest = np.prod(np.stack(np.meshgrid(*([w] * (d - 1)), indexing="ij"), -1), -1).ravel()
    z_rest = np.exp(rest / s - 1 / (2 * s * s))
    subsets = [list(c) for c in itertools.combinations(range(d), k)]
    acc = np.zeros(len(alphas))
    for x0, w0 in zip(x, w, strict=True):
        z = np.concatenate(
            [np.full((z_rest.shape[0], 1), math.exp(x0 / s - 1 / (2 * s * s))), z_rest], 1
        )
        ratio = sum(np.prod(z[:, c], axis=1) for c in subsets) / len(subsets)
        for i, a in enumerate(alphas):
            acc[i] += w0 * np.sum(w_rest * ratio ** (1 - a))
    return np.log(acc) / (np.array(alphas) - 1)


def _monte_carlo(d: int, s: float, alpha: float, n: int) -> tuple[float, float]:
    """A 4-sigma interval for D_alpha(Q||P), k = 1, from n samples of S (control variate
    1 - m (S - 1) + m (m + 1) / 2 (S - 1)^2, whose mean is known)."""
    rng = np.random.default_rng(20261127)
    m = alpha - 1
    s_vals = np.concatenate(
        [
            np.exp(rng.standard_normal((10_000, d)) / s - 1 / (2 * s * s)).mean(1)
            for _ in range(n // 10_000)
        ]
    )
    x = s_vals**-m
    c = 1 - m * (s_vals - 1) + m * (m + 1) / 2 * (s_vals - 1) ** 2
    mean_c = 1 + m * (m + 1) / 2 * math.expm1(1 / s**2) / d
    cov = np.cov(x, c)
    y = x - cov[0, 1] / cov[1, 1] * (c - mean_c)
    est, se = float(y.mean()), float(y.std() / math.sqrt(y.shape[0]))
    return math.log(est - 4 * se) / m, math.log(est + 4 * se) / m


def _laplace_scipy(d: int, s: float, alpha: float) -> float:
    """The Laplace representation by scipy's adaptive quadrature (nested), no bounding."""
    m, gs = alpha - 1, 1 / (2 * s)

    def r(u: float) -> float:
        def f(g: float) -> float:
            zm1 = math.expm1(g / s - 1 / (2 * s * s))
            return math.exp(-g * g / 2) / math.sqrt(2 * math.pi) * (math.expm1(-u * zm1) + u * zm1)

        cuts = [-30.0, -8.0, -3.0, gs, 30.0]
        return math.log1p(
            sum(
                integrate.quad(f, lo, hi, epsabs=1e-300, epsrel=1e-10, limit=400)[0]
                for lo, hi in itertools.pairwise(cuts)
            )
        )

    def g(t: float) -> float:
        return t ** (m - 1) * math.exp(-t) * math.expm1(d * r(t / d)) / math.gamma(m)

    pts = [0, m / 8, m / 2, m, 2 * m, 4 * m, 8 * m + 20, 30 * m + 60]
    excess = sum(
        integrate.quad(g, lo, hi, epsabs=0, epsrel=1e-10, limit=200)[0]
        for lo, hi in itertools.pairwise(pts)
    )
    return math.log1p(excess) / m


# -- one participation: the reverse divergence ------------------------------------


@pytest.mark.parametrize(
    ("d", "s", "alphas"),
    [
        (2, 1.0, [1.25, 1.5, 2.0, 3.0]),
        (2, 2.0, [1.5, 2.0, 5.0, 8.0, 16.0]),
        (3, 3.0, [1.25, 2.0, 5.0, 16.0]),
        (3, 1.0, [2.0, 3.0]),
    ],
)
def test_single_reverse_is_above_quadrature_and_within_1e_4(
    d: int, s: float, alphas: list[float]
) -> None:
    exact = _quadrature(d, 1, s, alphas, 120 if d == 2 else 60)
    finer = _quadrature(d, 1, s, alphas, 160 if d == 2 else 80)
    np.testing.assert_allclose(exact, finer, rtol=1e-10)  # the oracle has converged
    ours = reverse_rdp_single(d, s, alphas)
    assert np.all(ours >= exact * (1 + 1e-12))
    assert np.all(ours <= exact * (1 + 1e-4))


def test_single_reverse_where_the_tail_bound_binds_is_still_above() -> None:
    """d = 3, s = 0.7: at order 5 the tail beyond the grid is bounded crudely (1.9% over);
    at order 8 the bound gives up (inf) and the caller falls back to AM-GM."""
    alphas = [3.0, 5.0, 8.0]
    exact = _quadrature(3, 1, 0.7, alphas, 60)
    ours = reverse_rdp_single(3, 0.7, alphas)
    assert np.all(ours >= exact)
    assert ours[1] <= exact[1] * 1.03 and np.isinf(ours[2])


@settings(max_examples=12, deadline=None)
@given(s=st.floats(0.8, 5.0), alpha=st.floats(1.2, 10.0))
def test_single_reverse_is_never_below_the_exact_value(s: float, alpha: float) -> None:
    """Property: for d = 2, wherever it is finite, never below the quadrature value (160
    nodes a side, converged to about 1e-13 on this domain)."""
    exact = float(_quadrature(2, 1, s, [alpha], 160)[0])
    ours = float(reverse_rdp_single(2, s, [alpha])[0])
    assert ours >= exact


@pytest.mark.parametrize(("d", "s", "alpha"), [(20, 1.0, 3.0), (100, 2.0, 8.0), (50, 0.7, 2.0)])
def test_single_reverse_lies_in_the_monte_carlo_interval(d: int, s: float, alpha: float) -> None:
    lo, hi = _monte_carlo(d, s, alpha, 300_000)
    ours = float(reverse_rdp_single(d, s, [alpha])[0])
    assert lo <= ours <= hi


@pytest.mark.parametrize(
    ("d", "s", "alpha"), [(1000, 1.0, 3.0), (100, 2.0, 5.0), (10_000, 0.8, 2.0), (300, 1.5, 10.0)]
)
def test_single_reverse_is_above_adaptive_quadrature_and_within_5e_5(
    d: int, s: float, alpha: float
) -> None:
    ref = _laplace_scipy(d, s, alpha)
    ours = float(reverse_rdp_single(d, s, [alpha])[0])
    assert ref <= ours <= ref * (1 + 5e-5)


@pytest.mark.parametrize("s", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("u", [1e-4, 0.1, 1.0, 30.0])
def test_inner_integral_is_above_mpmath_and_within_5e_5(s: float, u: float) -> None:
    mp.mp.dps = 30
    ms, mu = mp.mpf(s), mp.mpf(u)

    def f(g: mp.mpf) -> mp.mpf:
        return mp.npdf(g) * mp.exp(mu * (1 - mp.exp(g / ms - 1 / (2 * ms * ms))))

    gs = 1 / (2 * ms)
    exact = float(mp.log(mp.quad(f, [-40, -10, -5, -2, gs, gs + 2, gs + 6, 40])))
    ours = float(_r_upper(np.array([u]), s)[0])
    assert exact <= ours <= exact * (1 + 5e-5)


def test_one_step_is_the_gaussian_mechanism() -> None:
    orders = np.array([1.5, 2.0, 7.0])
    np.testing.assert_allclose(reverse_rdp_single(1, 1.3, orders), orders / (2 * 1.3**2))


@pytest.mark.parametrize(("d", "s"), [(1000, 1.0), (10_000, 3.0)])
def test_single_reverse_is_amplified_far_below_amgm(d: int, s: float) -> None:
    """About alpha (e^(1/s^2) - 1) / (2 d) at small orders (Poisson-like), not 1 / (2 s^2)."""
    orders = np.array([2.0, 4.0, 8.0])
    ours = reverse_rdp_single(d, s, orders)
    assert np.all(ours < 0.02 * bis.reverse_rdp(d, 1, s, orders))
    second_order = orders * math.expm1(1 / s**2) / (2 * d)
    np.testing.assert_allclose(ours, second_order, rtol=0.05)


def test_single_reverse_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="noise multiplier"):
        reverse_rdp_single(10, 0.0, [2.0])


# -- one participation: the forward divergence --------------------------------------


@pytest.mark.parametrize(("d", "s"), [(100, 1.0), (10_000, 3.0), (7, 0.8), (2, 2.0)])
def test_single_forward_matches_the_package_partition_sum(d: int, s: float) -> None:
    """The random-allocation package sums over the partitions of alpha (independent code);
    Miller's recurrence (alpha <= d + 1) and binary powering (beyond) must agree."""
    orders = [2, 3, 5, 8, 12]
    ours = forward_rdp_single(d, s, orders)
    theirs = np.array([allocation_RDP_remove(alpha=a, sigma=s, num_steps=d) for a in orders])
    assert np.all(ours >= theirs * (1 - 1e-12))
    np.testing.assert_allclose(ours, theirs, rtol=1e-7)


@pytest.mark.parametrize(("d", "s"), [(2, 1.0), (3, 0.7), (10, 2.0), (300, 1.2)])
def test_single_forward_matches_the_dynamic_program_at_every_order_it_reaches(
    d: int, s: float
) -> None:
    orders = np.arange(2.0, 80.0)
    dp = bis.forward_rdp_exact(d, 1, s, orders)
    ours = forward_rdp_single(d, s, orders)
    reached = ~np.isnan(dp)
    assert reached.sum() >= 10 and np.all(np.isfinite(ours))
    assert np.all(ours[reached] >= dp[reached] * (1 - 1e-9))
    np.testing.assert_allclose(ours[reached], dp[reached], rtol=1e-7)
    # and never above eq. (3), which bounds it (up to the rounding cover)
    assert np.all(ours <= bis.forward_rdp(d, 1, s, orders) * (1 + 1e-9))


def test_single_forward_is_the_quadrature_value() -> None:
    x, w = np.polynomial.hermite_e.hermegauss(160)
    w = w / math.sqrt(2 * math.pi)
    z = np.exp(x / 1.5 - 1 / (2 * 1.5**2))
    mean = (z[:, None] + z[None, :]) / 2
    weight = w[:, None] * w[None, :]
    for a in (2, 3, 6):
        exact = math.log(np.sum(weight * mean**a)) / (a - 1)
        assert float(forward_rdp_single(2, 1.5, [a])[0]) == pytest.approx(exact, rel=1e-10)


# -- k participations: the block reduction -----------------------------------------


def test_blocks_cover_the_steps() -> None:
    assert bis.blocks(10, 4) == [(3, 2), (2, 2)]
    assert bis.blocks(6, 3) == [(2, 3)]
    assert bis.blocks(7, 7) == [(1, 7)]
    for d, k in [(10, 3), (1000, 7), (5, 5)]:
        assert sum(size * count for size, count in bis.blocks(d, k)) == d
        assert sum(count for _, count in bis.blocks(d, k)) == k


@pytest.mark.parametrize(("d", "k"), [(4, 2), (6, 2), (6, 3)])
@pytest.mark.parametrize("s", [0.8, 1.0, 2.0])
def test_block_reduction_is_above_the_exact_forward_divergence(d: int, k: int, s: float) -> None:
    orders = [2.0, 3.0, 4.0, 6.0]
    exact = bis.forward_rdp_exact(d, k, s, orders)
    assert not np.any(np.isnan(exact))
    blocks = bis.forward_rdp_blocks(d, k, s, orders)
    assert np.all(blocks >= exact)
    assert np.all(blocks <= 1.2 * exact)  # and not vacuous


@pytest.mark.parametrize(
    ("d", "k", "s", "nodes"),
    [(4, 2, 0.8, 40), (4, 2, 1.0, 40), (4, 2, 2.0, 40), (6, 2, 1.0, 10), (6, 3, 1.0, 10)],
)
def test_block_reduction_is_above_the_exact_reverse_divergence(
    d: int, k: int, s: float, nodes: int
) -> None:
    orders = [2.0, 3.0, 4.0]
    exact = _quadrature(d, k, s, orders, nodes)
    finer = _quadrature(d, k, s, orders, nodes + 2)
    np.testing.assert_allclose(exact, finer, rtol=1e-4)
    blocks = bis.reverse_rdp_blocks(d, k, s, orders)
    assert np.all(blocks >= exact * (1 + 1e-3))  # a margin far above the oracle's error
    assert np.all(blocks <= 1.05 * exact)
    assert np.all(blocks < bis.reverse_rdp(d, k, s, orders))  # tighter than AM-GM


def test_per_epoch_rdp_reports_which_bound_certified_each_order() -> None:
    orders = np.array([2.0, 3.0, 8.0, 64.0, 1024.0])
    for d, k, s in [(1000, 10, 1.0), (200, 1, 0.8)]:
        rdp, certified = bis.per_epoch_rdp(d, k, s, orders)
        assert sorted(a for used in certified.values() for a in used) == orders.tolist()
        assert set(certified) <= set(bis.LABELS.values())
        if k == 1:
            exact = bis.forward_rdp_single(d, s, orders)
        else:
            exact = bis.forward_rdp_exact(d, k, s, orders)
        forward = np.fmin(bis.forward_rdp(d, k, s, orders), exact)
        reverse = bis.reverse_rdp(d, k, s, orders)
        if k == 1:
            reverse = np.minimum(reverse, reverse_rdp_single(d, s, orders))
        else:
            forward = np.minimum(forward, bis.forward_rdp_blocks(d, k, s, orders))
            reverse = np.minimum(reverse, bis.reverse_rdp_blocks(d, k, s, orders))
        np.testing.assert_array_equal(rdp, np.maximum(forward, reverse))
    # with the reverse divergence computed exactly, the forward one is the larger here
    # (at order 2, eq. (3) is exact too and ties)
    assert {3.0, 8.0} <= set(certified[bis.LABELS["forward_exact"]])
    assert all(label.startswith("forward") for label in certified)


def test_certified_note_lists_runs_of_adjacent_orders() -> None:
    orders = np.array([2.0, 3.0, 4.0, 8.0, 16.0])
    note = bis.certified_note({"a": [2.0, 3.0, 8.0, 16.0], "b": [4.0]}, orders)
    assert note == "RDP per order certified by: a at orders 2-3, 8-16; b at orders 4"
