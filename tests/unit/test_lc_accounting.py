"""Linear combination accounting against independent references: the merged step's
mixture (quadrature, numerical integration, dp_accounting) and the sound LC bound."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting.conversions import ORDERS
from service.accounting.lc import accountant as lc
from service.accounting.lc.merged_step import merged_step_mixture
from service.accounting.lc.mixture import lc_mixture, mixture_rdp, mixture_rdp_literal
from service.accounting.lc.mixture_pld import mixture_pld
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp
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


def _accountant(mechs: list, delta: float = 1e-5) -> lc.LCAccountant:
    inputs = [lc.lc_input(m) for m in mechs]
    released = [
        lc.released_profile(i, compute_profile(m)) for i, m in zip(inputs, mechs, strict=True)
    ]
    return lc.LCAccountant(inputs, released, delta)


def _dp_accounting_pld(q: float, sigma: float, steps: int, pessimistic: bool = True):
    return pldlib.from_gaussian_mechanism(
        sigma,
        sampling_prob=q,
        value_discretization_interval=1e-4,
        pessimistic_estimate=pessimistic,
    ).self_compose(steps)


def test_lc_of_one_run_is_that_runs_own_mechanism() -> None:
    """One run with weight 1: its first T-1 steps composed with its own last step is the
    run itself; dp_accounting's PLD of the run is the reference."""
    mech = parse_mechanism(sgd(1.0, 500))
    ours = _accountant([mech]).epsilon(np.array([1.0]), "pld")
    ref = _dp_accounting_pld(0.01, 1.0, 500).get_epsilon_for_delta(1e-5)
    optimistic = _dp_accounting_pld(0.01, 1.0, 500, False).get_epsilon_for_delta(1e-5)
    assert ours >= optimistic
    assert ours == pytest.approx(ref, rel=2e-3)


def test_fixed_query_gaussian_lc_is_the_exact_merged_gaussian() -> None:
    """Mean estimation (section 4.1): the merge is Gaussian with s^2 = sum lambda^2 std^2
    and shift sum lambda Delta: closed-form curve."""
    g1 = parse_mechanism({"type": "gaussian", "sensitivity": 0.02, "noise_std": 0.02})
    g2 = parse_mechanism({"type": "gaussian", "sensitivity": 0.02, "noise_std": 0.08})
    lam = np.array([0.3, 0.7])
    mu = 0.02 / np.sqrt((0.3 * 0.02) ** 2 + (0.7 * 0.08) ** 2)
    eps = _accountant([g1, g2]).epsilon(lam, "pld")
    assert gaussian_delta(mu, eps) <= 1e-5 * (1 + 1e-9)
    assert gaussian_delta(mu, eps * (1 - 1e-6)) > 1e-5


def test_non_adaptive_queries_merge_query_by_query() -> None:
    """k fixed queries per model, equal counts: k merged Gaussians, mu^2 = k A^2 / s^2."""
    spec = {"type": "gaussian", "sensitivity": 1.0, "adaptive": False, "count": 3}
    g1 = parse_mechanism({**spec, "noise_std": 2.0})
    g2 = parse_mechanism({**spec, "noise_std": 3.0})
    lam = np.array([0.6, 0.4])
    mu = np.sqrt(3 * 1.0 / ((0.6 * 2.0) ** 2 + (0.4 * 3.0) ** 2))
    eps = _accountant([g1, g2]).epsilon(lam, "pld")
    assert gaussian_delta(mu, eps) <= 1e-5 * (1 + 1e-9) < gaussian_delta(mu, eps * 0.999)


def test_adaptive_gaussian_queries_are_never_k_times_the_one_shot_bound() -> None:
    adaptive = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 2.0, "count": 2}
    acct = _accountant([parse_mechanism(adaptive)] * 2)
    joint = np.sqrt(2 * 2 / 4.0)  # both runs, both queries: the joint release
    assert not acct.uses_final_step
    eps = acct.epsilon(np.array([0.9, 0.1]), "pld")
    assert gaussian_delta(joint, eps) <= 1e-5 * (1 + 1e-9)
    additive = parse_mechanism({**adaptive, "additive": True})
    acct = _accountant([additive] * 2)
    mu = np.sqrt(2 * 1 / 4.0 + 1.0 / (0.82 * 4.0))  # DP-SGD rule with q = 1
    eps = acct.epsilon(np.array([0.9, 0.1]), "pld")
    assert gaussian_delta(mu, eps) <= 1e-5 * (1 + 1e-9) < gaussian_delta(mu, eps * 0.999)


def test_last_gradient_coefficient_follows_the_optimizer() -> None:
    base = sgd(1.0, 10, lr=0.2)
    assert lc.lc_input(parse_mechanism(base)).final.shift == pytest.approx(0.2)  # type: ignore[union-attr]
    heavy = parse_mechanism(
        {**base, "optimizer": "sgd_momentum", "momentum": 0.9, "dampening": 0.5}
    )
    assert lc.lc_input(heavy).final.shift == pytest.approx(0.1)  # type: ignore[union-attr]
    nesterov = parse_mechanism(
        {**base, "optimizer": "sgd_momentum", "momentum": 0.9, "nesterov": True}
    )
    assert lc.lc_input(nesterov).final.shift == pytest.approx(0.38)  # type: ignore[union-attr]
    for unknown in (
        {**base, "optimizer": "adam"},
        {**base, "optimizer": "sgd_momentum"},
        {k: v for k, v in base.items() if k != "learning_rate"},
    ):
        inp = lc.lc_input(parse_mechanism(unknown))
        assert inp.final is None and inp.note  # joint release, with the reason


def test_per_group_clipping_takes_the_smallest_group_noise() -> None:
    mech = parse_mechanism(
        {
            "type": "dp_sgd",
            "sampling_rate": 0.1,
            "steps": 5,
            "learning_rate": 1.0,
            "groups": [
                {"clipping_norm": 3.0, "noise_multiplier": 1.0},
                {"clipping_norm": 4.0, "noise_multiplier": 2.0},
            ],
        }
    )
    final = lc.lc_input(mech).final
    assert final is not None
    assert final.shift == pytest.approx(5.0) and final.noise == pytest.approx(3.0)


@pytest.mark.parametrize("seed", range(6))
def test_every_dp_sgd_certificate_covers_the_joint_prefix(seed: int) -> None:
    """Whatever the weights, an LC certificate is at least dp_accounting's optimistic PLD
    of the runs' first T_i - 1 steps released jointly (what an observer can recover)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    runs = [
        (float(rng.uniform(0.01, 0.2)), float(rng.uniform(0.7, 3.0)), int(rng.integers(2, 40)))
        for _ in range(n)
    ]
    mechs = [parse_mechanism(sgd(s, t, q=q, lr=float(rng.uniform(0.05, 1)))) for q, s, t in runs]
    lam = rng.dirichlet(np.ones(n))
    ours = _accountant(mechs).epsilon(lam, "pld")
    joint = None
    for q, s, t in runs:
        part = _dp_accounting_pld(q, s, t - 1, pessimistic=False)
        joint = part if joint is None else joint.compose(part)
    assert joint is not None
    assert ours >= joint.get_epsilon_for_delta(1e-5)


def test_grid_convolution_rounds_shifts_up_and_stays_tight() -> None:
    """More runs than are enumerated: the convolution's mixture dominates the exact one
    (its hockey-stick curve is above) and is within 0.2% in epsilon."""
    from service.accounting.lc import merged_step

    rng = np.random.default_rng(3)
    q, a = rng.uniform(0.02, 0.3, 9), rng.uniform(0.05, 0.4, 9)
    exact = merged_step.lc_mixture(q, a)
    old = merged_step.EXACT_UP_TO
    merged_step.EXACT_UP_TO = 0
    try:
        grid = merged_step_mixture(q, a)
    finally:
        merged_step.EXACT_UP_TO = old
    e_exact = mixture_pld(exact, 1e-4).get_epsilon_for_delta(1e-6)
    e_grid = mixture_pld(grid, 1e-4).get_epsilon_for_delta(1e-6)
    assert e_exact <= e_grid <= e_exact * 1.002 + 1e-4
    assert abs(grid.probs.sum() - 1.0) < 1e-12


def test_many_runs_are_accounted_without_enumerating_patterns() -> None:
    mechs = [parse_mechanism(sgd(1.0 + 0.05 * i, 20, q=0.05)) for i in range(40)]
    acct = _accountant(mechs)
    eps = acct.epsilon(np.full(40, 1 / 40), "rdp")
    assert np.isfinite(eps) and eps >= acct.joint_epsilon("rdp")
