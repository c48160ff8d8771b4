"""Random selection (Theorems 5.1, 5.2) against the exact output distribution and an audit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from service.accounting.conversions import ORDERS
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile
from service.accounting.rs import bounds as rs
from tests.oracles import (
    clopper_pearson_upper,
    hockey_stick_quad,
    renyi_quad,
    rs_gaussian_pair,
)

SHIFT = 0.02  # mean of n=100 samples clipped to [-1, 1], one sample replaced
STDS = (0.01, 0.05)


@pytest.fixture(scope="module")
def profiles():
    return [
        compute_profile(parse_mechanism({"type": "gaussian", "sensitivity": SHIFT, "noise_std": s}))
        for s in STDS
    ]


@pytest.mark.parametrize("pi", [0.0, 0.25, 0.5, 0.9])
def test_rs_pld_bound_is_above_the_exact_hockey_stick(profiles, pi: float) -> None:
    p, q = rs_gaussian_pair(pi, STDS[0], STDS[1], SHIFT)
    weights = np.array([pi, 1 - pi])
    for eps in (0.2, 1.0, 2.0):
        remove = np.array([pr.curves.at(eps)[0][0] for pr in profiles])
        add = np.array([pr.curves.at(eps)[1][0] for pr in profiles])
        bound = rs.rs_pld_delta(weights, remove, add)
        exact = max(hockey_stick_quad(p, q, eps, 1.0), hockey_stick_quad(q, p, eps, 1.0))
        assert bound >= exact * (1 - 1e-9) - 1e-15


@pytest.mark.parametrize("pi", [0.25, 0.5, 0.9])
def test_rs_rdp_bound_is_above_the_exact_renyi_divergence(profiles, pi: float) -> None:
    p, q = rs_gaussian_pair(pi, STDS[0], STDS[1], SHIFT)
    rdp = np.array([pr.rdp_at(ORDERS) for pr in profiles])
    weights = np.array([pi, 1 - pi])
    for alpha in (1.5, 4.0):
        bound = rs.rs_rdp(weights, rdp, ORDERS)[list(ORDERS).index(alpha)]
        exact = max(renyi_quad(p, q, alpha, 1.0), renyi_quad(q, p, alpha, 1.0))
        assert bound >= exact * (1 - 1e-9)


def test_empirical_audit_never_exceeds_the_reported_epsilon(profiles) -> None:
    """Sample the released RS mechanism on neighbouring datasets; a threshold test with
    Clopper-Pearson (99.9%) upper bounds on its error rates lower-bounds epsilon."""
    rng = np.random.default_rng(7)
    pi, delta, n = 0.5, 1e-5, 400_000
    weights = np.array([pi, 1 - pi])
    at = lambda e: tuple(  # noqa: E731
        np.array([c.at(e)[k][0] for c in (pr.curves for pr in profiles)]) for k in (0, 1)
    )
    reported = rs.rs_pld_epsilon(weights, at, delta)  # type: ignore[arg-type]

    def sample(shift: float) -> np.ndarray:
        pick = rng.random(n) < pi
        return shift + rng.standard_normal(n) * np.where(pick, STDS[0], STDS[1])

    on_d, on_d_prime = sample(SHIFT), sample(0.0)
    best = 0.0
    for t in np.linspace(0.0, 0.08, 81):
        fpr = clopper_pearson_upper(int(np.sum(on_d_prime > t)), n, 0.999)
        fnr = clopper_pearson_upper(int(np.sum(on_d <= t)), n, 0.999)
        if fpr > 0 and 1 - delta - fnr > 0:
            best = max(best, math.log((1 - delta - fnr) / fpr))
    assert 0 < best <= reported


def _grid(n: int, step: float):
    ticks = round(1 / step)
    for combo in itertools.product(range(ticks + 1), repeat=n - 1):
        if sum(combo) <= ticks:
            yield np.array([*combo, ticks - sum(combo)], dtype=float) / ticks


@pytest.fixture(scope="module")
def three():
    mechs = [
        {
            "type": "dp_sgd",
            "sampling_rate": q,
            "noise_multiplier": s,
            "clipping_norm": 1.0,
            "steps": t,
        }
        for q, s, t in [(0.02, 0.7, 300), (0.01, 1.2, 400), (0.01, 3.0, 200)]
    ]
    return [compute_profile(parse_mechanism(m)) for m in mechs], np.array([0.93, 0.88, 0.71])


def test_rs_rdp_plan_is_optimal_against_brute_force(three) -> None:
    profs, utility = three
    rdp = np.array([p.rdp_at(ORDERS) for p in profs])
    for target in (0.8, 1.5, 3.0):
        plan = rs.plan_rs_rdp(utility, rdp, ORDERS, target, 1e-5)
        assert plan is not None
        assert rs.rs_rdp_epsilon(plan.pi, rdp, ORDERS, 1e-5) <= target
        assert np.count_nonzero(plan.pi) <= 2
        for pi in _grid(3, 0.01):
            if rs.rs_rdp_epsilon(pi, rdp, ORDERS, 1e-5) <= target:
                assert pi @ utility <= plan.utility + 1e-9


def test_rs_pld_plan_is_optimal_against_brute_force(three) -> None:
    profs, utility = three
    for target in (0.6, 1.2, 2.5):
        remove = np.array([p.curves.at(target)[0][0] for p in profs])
        add = np.array([p.curves.at(target)[1][0] for p in profs])
        plan = rs.plan_rs_pld(utility, remove, add, 1e-5)
        assert plan is not None
        assert rs.rs_pld_delta(plan.pi, remove, add) <= 1e-5
        assert np.count_nonzero(plan.pi > 1e-12) <= 3
        for pi in _grid(3, 0.005):
            if rs.rs_pld_delta(pi, remove, add) <= 1e-5:
                assert pi @ utility <= plan.utility + 1e-9


def test_non_private_model_gets_no_more_weight_than_the_pld_allows(three) -> None:
    profs, utility = three
    non_private = compute_profile(parse_mechanism({"type": "non_private"}))
    allp = [*profs, non_private]
    u = np.append(utility, 0.99)
    target, delta = 6.0, 1e-5  # the best private model meets it with room to spare
    remove = np.array([p.curves.at(target)[0][0] for p in allp])
    add = np.array([p.curves.at(target)[1][0] for p in allp])
    plan = rs.plan_rs_pld(u, remove, add, delta)
    assert plan is not None
    assert 0 < plan.pi[-1] <= delta
    rdp = np.array([p.rdp_at(ORDERS) for p in allp])
    rdp_plan = rs.plan_rs_rdp(u, rdp, ORDERS, target, delta)
    assert rdp_plan is not None and rdp_plan.pi[-1] == 0


def test_min_epsilon_is_the_best_single_model_under_rdp(three) -> None:
    profs, _ = three
    rdp = np.array([p.rdp_at(ORDERS) for p in profs])
    expected = min(p.epsilon(1e-5, "rdp") for p in profs)
    assert rs.min_epsilon_rs_rdp(rdp, ORDERS, 1e-5) >= expected
    any_order = rs.min_epsilon_rs_rdp_any_order([p.rdp_at for p in profs], 1e-5)
    assert any_order == pytest.approx(expected, rel=1e-12)
