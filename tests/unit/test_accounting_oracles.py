"""Every bound against an oracle that is not our own code, with explicit tolerances."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from opacus.accountants.analysis.rdp import compute_rdp as opacus_rdp
from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

from service.accounting.bis import rdp as bis
from service.accounting.conversions import ORDERS, eps_from_rdp, eps_from_rdp_classic
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile, rdp_upper_bound
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp
from tests.helpers import sgd
from tests.oracles import (
    bis_divergences_gauss_hermite,
    eps_delta_profile,
    gaussian_delta,
    sampled_gaussian_rdp_quad,
)

Q_MNIST = 256 / 60000


@pytest.mark.parametrize(("sigma", "expected"), [(1.0, 0.6201), (0.5, 6.458)])
def test_poisson_dp_sgd_epsilon_matches_prv_accountant(sigma: float, expected: float) -> None:
    profile = compute_profile(parse_mechanism(sgd(sigma, 705, q=Q_MNIST)))
    ours = profile.epsilon(1e-5, "pld")
    prv = PRVAccountant(
        prvs=[
            PoissonSubsampledGaussianMechanism(noise_multiplier=sigma, sampling_probability=Q_MNIST)
        ],
        max_self_compositions=[705],
        eps_error=0.005,
        delta_error=1e-10,
    )
    low, estimate, _ = prv.compute_epsilon(delta=1e-5, num_self_compositions=[705])
    assert ours == pytest.approx(estimate, rel=1e-3)
    assert ours >= low
    assert ours == pytest.approx(expected, rel=1e-3)


def test_poisson_dp_sgd_epsilon_matches_dp_accounting_pld() -> None:
    import dp_accounting

    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    event = dp_accounting.PoissonSampledDpEvent(Q_MNIST, dp_accounting.GaussianDpEvent(1.0))
    acc.compose(event, 705)
    ours = compute_profile(parse_mechanism(sgd(1.0, 705, q=Q_MNIST))).epsilon(1e-5, "pld")
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)


@pytest.mark.parametrize(("q", "sigma"), [(0.004, 1.0), (0.05, 0.8), (0.3, 2.5), (1.0, 1.3)])
def test_rdp_equals_opacus_at_integer_orders(q: float, sigma: float) -> None:
    ints = [a for a in ORDERS if float(a).is_integer()]
    theirs = np.asarray(opacus_rdp(q=q, noise_multiplier=sigma, steps=300, orders=ints))
    # The RDP part does not depend on the PLD grid; a coarse one keeps this fast.
    mech = parse_mechanism(sgd(sigma, 300, q=q))
    ours = compute_profile(mech, discretization=0.05).rdp_at(ints)
    finite = np.isfinite(theirs)
    np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-8)
    assert np.all(ours[finite] >= theirs[finite])


@pytest.mark.parametrize(
    ("q", "sigma", "alpha"),
    [
        (0.01, 1.0, 1.25),
        (0.01, 1.0, 2.5),
        (0.15, 7.3, 1.5),
        (0.03, 2.45, 3.75),
        (0.2, 0.9, 1.75),
        (0.004, 0.5, 1.25),
        (0.5, 0.6, 1.5),
    ],
)
def test_fractional_order_rdp_matches_numerical_integration(
    q: float, sigma: float, alpha: float
) -> None:
    exact = sampled_gaussian_rdp_quad(q, sigma, alpha)
    ours = float(subsampled_gaussian_rdp([q], [sigma], [alpha])[0, 0])
    assert exact <= ours <= exact * (1 + 1e-6)
    profile_value = float(compute_profile(parse_mechanism(sgd(sigma, 1, q=q))).rdp_at([alpha])[0])
    assert profile_value >= exact


def test_fractional_orders_are_never_below_numerical_integration_for_tiny_rdp() -> None:
    """Where A_alpha is within 1e-8 of 1, float64 cancellation must not make us optimistic."""
    for q, sigma, alpha in [(1e-4, 3.0, 5.5), (1e-5, 10.0, 3.5), (1e-3, 20.0, 1.25)]:
        exact = sampled_gaussian_rdp_quad(q, sigma, alpha)
        assert float(subsampled_gaussian_rdp([q], [sigma], [alpha])[0, 0]) >= exact


def test_chord_bound_at_unlisted_orders_stays_above_the_exact_rdp() -> None:
    known = np.array([2.0, 4.0, 8.0, 16.0])
    vals = subsampled_gaussian_rdp([0.02], [1.1], known)[0]
    query = np.array([1.3, 2.5, 3.0, 5.0, 7.5, 12.0])
    bound = rdp_upper_bound(known, vals, query)
    exact = np.array([sampled_gaussian_rdp_quad(0.02, 1.1, a) for a in query])
    assert np.all(bound >= exact * (1 - 1e-12))
    assert np.isinf(rdp_upper_bound(known, vals, [32.0])[0])


def test_improved_conversion_matches_dp_accounting_and_beats_classic() -> None:
    rdp = subsampled_gaussian_rdp([Q_MNIST], [1.0], ORDERS)[0] * 705
    for delta in (1e-3, 1e-5, 1e-9):
        theirs, _ = dp_rdp.compute_epsilon(ORDERS, rdp, delta)
        assert eps_from_rdp(ORDERS, rdp, delta) == pytest.approx(theirs, rel=1e-9)
        assert eps_from_rdp(ORDERS, rdp, delta) <= eps_from_rdp_classic(ORDERS, rdp, delta)


@pytest.mark.parametrize(("sigma", "count"), [(2.0, 3), (0.8, 1), (5.0, 40)])
def test_gaussian_profile_is_above_the_analytic_gaussian_curve(sigma: float, count: int) -> None:
    mech = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": sigma, "count": count}
    profile = compute_profile(parse_mechanism(mech))
    mu = math.sqrt(count) / sigma
    for eps in (0.1, 0.5, 1.0, 2.0, 4.0):
        exact = gaussian_delta(mu, eps)
        for accountant in ("pld", "rdp", "best"):
            assert profile.delta(eps, accountant) >= exact * (1 - 1e-9)
        assert profile.delta(eps, "pld") == pytest.approx(exact, rel=2e-2, abs=1e-12)


@pytest.mark.parametrize(("eps0", "delta0"), [(3.0, 1e-6), (1.0, 0.0), (0.5, 1e-3)])
def test_epsilon_delta_profile_is_the_tight_generic_curve(eps0: float, delta0: float) -> None:
    mech = {"type": "epsilon_delta", "epsilon": eps0, "delta": delta0}
    profile = compute_profile(parse_mechanism(mech))
    for eps in (0.0, 0.2, eps0 / 2, eps0, eps0 + 1):
        exact = eps_delta_profile(eps0, delta0, eps)
        assert profile.delta(eps, "pld") >= exact * (1 - 1e-12)
        assert profile.delta(eps, "pld") == pytest.approx(exact, rel=1e-2, abs=1e-12)
    assert profile.epsilon(max(delta0, 1e-9) * 2, "pld") <= eps0 + 1e-3


@pytest.mark.parametrize(
    ("d", "k", "sigma", "alpha"),
    [(2, 1, 1.0, 2), (2, 1, 1.0, 3), (3, 1, 1.5, 2), (3, 2, 1.5, 3), (4, 2, 2.0, 4)],
)
def test_balanced_iteration_subsampling_bounds_are_above_numerical_integration(
    d: int, k: int, sigma: float, alpha: int
) -> None:
    forward, reverse = bis_divergences_gauss_hermite(
        d, k, sigma, alpha, points=60 if d <= 3 else 36
    )
    assert float(bis.forward_rdp(d, k, sigma, [alpha])[0]) >= forward * (1 - 1e-9)
    assert float(bis.reverse_rdp(d, k, sigma, [alpha])[0]) >= reverse * (1 - 1e-9)
    mech = {
        "type": "balanced_iteration_subsampling",
        "iterations": d,
        "participations": k,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
    }
    profile = compute_profile(parse_mechanism(mech))
    assert float(profile.rdp_at([alpha])[0]) >= max(forward, reverse) * (1 - 1e-9)


def test_the_printed_reverse_term_would_understate_where_ours_does_not() -> None:
    """The issue's counterexample: d=2, k=1, sigma/c=1, alpha=2, true reverse 0.5690."""
    _, reverse = bis_divergences_gauss_hermite(2, 1, 1.0, 2)
    assert reverse == pytest.approx(0.5690, abs=1e-3)
    assert reverse > 0.5502
    assert float(bis.reverse_rdp(2, 1, 1.0, [2])[0]) >= reverse


@pytest.mark.parametrize(("d", "k", "sigma"), [(2, 1, 1.0), (3, 2, 1.5), (4, 2, 2.0), (4, 1, 0.8)])
def test_exact_eq2_equals_numerical_integration_and_is_below_eq3(
    d: int, k: int, sigma: float
) -> None:
    orders = [2, 3, 4]
    exact = bis.forward_rdp_exact(d, k, sigma, orders)
    for alpha, value in zip(orders, exact, strict=True):
        forward, _ = bis_divergences_gauss_hermite(d, k, sigma, alpha, points=60 if d <= 3 else 36)
        assert value == pytest.approx(forward, rel=1e-8)
    assert np.all(exact <= bis.forward_rdp(d, k, sigma, orders) * (1 + 1e-12))


def test_exact_eq2_gives_up_where_it_is_not_tractable() -> None:
    values = bis.forward_rdp_exact(1000, 10, 2.7, [2, 3, 64, 1024])
    assert np.isfinite(values[0]) and np.isnan(values[-1])
