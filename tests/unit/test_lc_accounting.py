"""Linear combination accounting (Theorems 6.1, 6.2, 6.4) against independent references."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting import linear_combination as lc
from service.accounting.conversions import ORDERS, eps_from_rdp
from service.accounting.mechanisms import parse_mechanism
from service.accounting.mixture import (
    lc_mixture,
    mixture_pld,
    mixture_rdp,
    mixture_rdp_literal,
)
from service.accounting.profiles import compute_profile
from service.accounting.rdp import subsampled_gaussian_rdp
from service.errors import Unsupported
from tests.helpers import sgd
from tests.oracles import gaussian_delta


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quadrature_equals_the_literal_theorem_6_2_sum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    q = rng.uniform(0.01, 0.3, 3)
    a = rng.uniform(0.1, 1.0, 3)
    orders = [2, 3, 4, 5, 6, 7, 8]
    forward, _ = mixture_rdp(lc_mixture(q, a), orders)
    literal = [mixture_rdp_literal(q, a, alpha) for alpha in orders]
    np.testing.assert_allclose(forward, literal, rtol=1e-9)


def test_reverse_direction_matches_numerical_integration() -> None:
    from scipy import integrate, stats

    q, a = np.array([0.2, 0.1]), np.array([0.8, 1.2])
    mix = lc_mixture(q, a)
    orders = [1.5, 2.0, 3.5, 6.0]
    _, reverse = mixture_rdp(mix, orders)
    for alpha, ours in zip(orders, reverse, strict=True):

        def integrand(x: float, alpha: float = alpha) -> float:
            m = float(np.sum(mix.probs * np.exp(mix.shifts * x - mix.shifts**2 / 2)))
            return float(stats.norm.pdf(x)) * m ** (1 - alpha)

        val, _ = integrate.quad(integrand, -40, 40, epsabs=1e-15, epsrel=1e-12, limit=400)
        assert ours == pytest.approx(np.log(val) / (alpha - 1), rel=1e-8)


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.004, 0.6), (0.2, 2.0), (0.05, 0.8)])
def test_quadrature_stays_within_1e_10_of_the_exact_integer_order_rdp(
    q: float, sigma: float
) -> None:
    ints = np.array([a for a in ORDERS if float(a).is_integer()])
    forward, _ = mixture_rdp(lc_mixture([q], [1.0 / sigma]), ints)
    exact = subsampled_gaussian_rdp([q], [sigma], ints)[0]
    np.testing.assert_allclose(forward, exact, rtol=1e-10)


def test_single_component_is_the_exact_gaussian() -> None:
    forward, reverse = mixture_rdp(lc_mixture([1.0, 1.0], [0.3, 0.4]), [2.0, 10.0])
    np.testing.assert_allclose(forward, np.array([2.0, 10.0]) * 0.7**2 / 2, rtol=1e-14)
    np.testing.assert_allclose(reverse, forward)


def test_mixture_pld_matches_dp_accounting_builder() -> None:
    mix = lc_mixture([0.02, 0.05, 0.01, 0.03], [0.4, 0.3, 0.6, 0.5])
    ours = mixture_pld(mix, 1e-3).self_compose(300)
    ref = pldlib.from_mixture_gaussian_mechanism(
        1.0, list(mix.shifts), list(mix.probs), value_discretization_interval=1e-3
    ).self_compose(300)
    for delta in (1e-3, 1e-5, 1e-7):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(
            ref.get_epsilon_for_delta(delta), rel=1e-3, abs=1e-6
        )


def test_lc_at_a_vertex_is_that_models_own_profile() -> None:
    mechs = [parse_mechanism(sgd(1.0, 500)), parse_mechanism(sgd(2.0, 700))]
    structs = [lc.lc_structure(m) for m in mechs]
    assert all(s is not None for s in structs)
    profile = compute_profile(mechs[0])
    lam = np.array([1.0, 0.0])
    rdp_eps = lc.lc_rdp_epsilon(structs, lam, 1e-5)  # type: ignore[arg-type]
    pld_eps = lc.lc_pld_epsilon(structs, lam, 1e-5, 1e-4)  # type: ignore[arg-type]
    assert rdp_eps == pytest.approx(profile.epsilon(1e-5, "rdp"), rel=1e-6)
    # both carry the 1e-9 rounding margin; LC must stay above the exact, unmargined value
    exact = eps_from_rdp(ORDERS, subsampled_gaussian_rdp([0.01], [1.0], ORDERS)[0] * 500, 1e-5)
    assert rdp_eps >= exact
    assert pld_eps == pytest.approx(profile.epsilon(1e-5, "pld"), rel=1e-4)


def test_gaussian_lc_is_the_exact_merged_gaussian() -> None:
    """Mean estimation (section 4.1): the merge is Gaussian with s^2 = sum lambda^2 sigma^2
    and shift sum lambda Delta, whose curve has a closed form."""
    g1 = parse_mechanism({"type": "gaussian", "sensitivity": 0.02, "noise_std": 0.02})
    g2 = parse_mechanism({"type": "gaussian", "sensitivity": 0.02, "noise_std": 0.08})
    structs = [lc.lc_structure(g1), lc.lc_structure(g2)]
    lam = np.array([0.3, 0.7])
    mu = 0.02 / np.sqrt((0.3 * 0.02) ** 2 + (0.7 * 0.08) ** 2)
    pld = lc.lc_pld(structs, lam, 1e-4)  # type: ignore[arg-type]
    for eps in (0.1, 0.5, 1.0):
        exact = gaussian_delta(mu, eps)
        assert pld.delta(eps) >= exact * (1 - 1e-9)
        assert pld.delta(eps) == pytest.approx(exact, rel=1e-2)


def test_merging_beats_each_model_somewhere_and_pld_beats_rdp() -> None:
    structs = [lc.lc_structure(parse_mechanism(sgd(s, 600))) for s in (1.0, 2.0)]
    lam = np.array([0.5, 0.5])
    rdp_eps = lc.lc_rdp_epsilon(structs, lam, 1e-5)  # type: ignore[arg-type]
    pld_eps = lc.lc_pld_epsilon(structs, lam, 1e-5, 1e-4)  # type: ignore[arg-type]
    assert pld_eps <= rdp_eps
    joint = lc.joint_epsilon(
        [compute_profile(parse_mechanism(sgd(s, 600))) for s in (1.0, 2.0)], 1e-5, "rdp"
    )
    assert rdp_eps < joint  # Theorem 6.2 is tighter than the joint release (Thm 6.1)


def test_unequal_lengths_are_padded_with_virtual_steps() -> None:
    a = lc.lc_structure(parse_mechanism(sgd(1.0, 300)))
    b = lc.lc_structure(parse_mechanism(sgd(1.0, 500)))
    steps = lc.joint_steps([a, b])  # type: ignore[list-item]
    assert sum(n for n, _ in steps) == 500
    assert any(params[0].q == 0 for _, params in steps)


def test_adaptive_optimizer_and_missing_learning_rate_are_refused() -> None:
    with pytest.raises(Unsupported, match="plain SGD"):
        lc.lc_structure(parse_mechanism(sgd(1.0, 10, optimizer="adam")))
    no_lr = sgd(1.0, 10)
    del no_lr["learning_rate"]
    with pytest.raises(Unsupported, match="learning_rate"):
        lc.lc_structure(parse_mechanism(no_lr))
    assert (
        lc.lc_structure(parse_mechanism({"type": "epsilon_delta", "epsilon": 1, "delta": 0}))
        is None
    )


def test_closed_form_gaussian_epsilon_matches_the_pld_route() -> None:
    g1 = parse_mechanism({"type": "gaussian", "sensitivity": 0.02, "noise_std": 0.02})
    g2 = parse_mechanism({"type": "gaussian", "sensitivity": 0.02, "noise_std": 0.08})
    structs = [lc.lc_structure(g1), lc.lc_structure(g2)]
    lam = np.array([0.6, 0.4])
    exact = lc.lc_pld_epsilon(structs, lam, 1e-5, 1e-4)  # type: ignore[arg-type]
    discretised = lc.lc_pld(structs, lam, 1e-4).epsilon(1e-5)  # type: ignore[arg-type]
    assert exact <= discretised <= exact + 1e-3
    mu = 0.02 / np.sqrt((0.6 * 0.02) ** 2 + (0.4 * 0.08) ** 2)
    assert gaussian_delta(mu, exact) <= 1e-5 * (1 + 1e-9)
    assert gaussian_delta(mu, exact - 1e-6) > 1e-5
