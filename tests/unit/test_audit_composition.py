"""Grouped DP-SGD steps and joint releases never prove less than the truth.

Oracles: dp_accounting's composition of every ungrouped step (optimistic rounding, a
lower estimate of the true curve), and the closed form of composed Gaussians
(mu-GDP with mu^2 = sum of count / sigma^2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib
from scipy import optimize, stats

from service.accounting.joint_release import joint_release_epsilon
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.builders import _pessimistic_groups
from service.accounting.profiles.profile import compute_profile


def _sgd_pld(q: float, sigma: float, count: int, pessimistic: bool, width: float):
    one = pldlib.from_gaussian_mechanism(
        sigma,
        sampling_prob=q,
        value_discretization_interval=width,
        pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )
    return one.self_compose(count) if count > 1 else one


def _compose(parts):
    total = parts[0]
    for p in parts[1:]:
        total = total.compose(p)
    return total


def test_grouping_an_alternating_schedule_never_proves_less_than_the_steps() -> None:
    # high rate with much noise beside low rate with little: neither dominates the
    # other, and similar RDP costs interleave them once sorted
    n = 80
    i = np.arange(n)
    high = i % 2 == 0
    q = np.where(high, 0.2 + 0.001 * i, 0.01 + 0.0001 * i)
    sigma = np.where(high, 4.0 + 0.01 * i, 0.9 + 0.002 * i)
    counts = np.where(high, 3, 5)
    groups, grouped = _pessimistic_groups(q, sigma, counts)
    assert grouped and len(groups) < n
    assert sum(c for _, _, c in groups) == counts.sum()
    width = 4e-3
    ours = _compose([_sgd_pld(a, b, c, True, width) for a, b, c in groups])
    truth = _compose(
        [
            _sgd_pld(float(a), float(b), int(c), False, width)
            for a, b, c in zip(q, sigma, counts, strict=True)
        ]
    )
    for delta in (1e-3, 1e-6, 1e-9):
        assert ours.get_epsilon_for_delta(delta) >= truth.get_epsilon_for_delta(delta)
    for eps in (0.5, 1.0, 2.0, 4.0):
        assert ours.get_delta_for_epsilon(eps) >= truth.get_delta_for_epsilon(eps)


def _gaussian_delta(mu: float, eps: float) -> float:
    return float(
        stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    )


def _gaussian_epsilon(mu: float, delta: float) -> float:
    if _gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    return float(optimize.brentq(lambda e: _gaussian_delta(mu, e) - delta, 0.0, 100.0, xtol=1e-12))


def _gaussian(sigma: float, count: int, discretization: float):
    mech = parse_mechanism(
        {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": sigma, "count": count}
    )
    return compute_profile(mech, discretization=discretization)


@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_joint_release_never_falls_below_the_composed_gaussian(delta: float) -> None:
    # repeats (self-composition), distinct mechanisms, and grids of different widths
    specs = [(3.0, 2, 1e-4), (3.0, 2, 1e-4), (3.0, 2, 1e-4), (8.0, 10, 1e-3), (1.5, 1, 3e-4)]
    specs += [(8.0, 10, 1e-3)] * 4
    profiles = [_gaussian(s, c, w) for s, c, w in specs]
    mu = math.sqrt(sum(c / s**2 for s, c, _ in specs))
    eps, how = joint_release_epsilon(profiles, delta)
    exact = _gaussian_epsilon(mu, delta)
    assert eps >= exact
    assert eps <= exact * 1.05 + 0.01  # and still useful
    # composing the profiles one by one proves no less
    one_by_one = profiles[0].pld
    for p in profiles[1:]:
        one_by_one = one_by_one.compose(p.pld)
    assert one_by_one.epsilon(delta) >= exact
    assert how in ("pld", "rdp")


def test_a_pld_regridded_coarser_never_lowers_a_delta() -> None:
    fine = _gaussian(2.0, 5, 1e-4).pld
    coarse = fine.regrid(3.7e-3)
    mu = math.sqrt(5 / 4.0)
    for eps in (0.0, 0.3, 1.0, 2.5, 5.0):
        exact = _gaussian_delta(mu, eps)
        assert fine.delta(eps) >= exact
        assert coarse.delta(eps) >= fine.delta(eps)


def test_cached_epsilons_are_kept_apart_by_accountant_delta_and_multiset() -> None:
    from service.ledger.charges import joint_bound
    from service.profiles.epsilons import EpsilonCache

    cache = EpsilonCache()
    p = _gaussian(2.0, 4, 1e-4)
    best = cache.epsilon(p, 1e-6, "best")
    assert cache.epsilon(p, 1e-6, "rdp") == p.epsilon(1e-6, "rdp") > best
    assert cache.epsilon(p, 1e-9, "best") == p.epsilon(1e-9, "best") > best
    # a repeated profile is a second composition, not a cache hit of the pair
    q = _gaussian(5.0, 1, 1e-3)
    pair = joint_bound([p, q], 1e-6)[0]
    triple = joint_bound([p, q, p], 1e-6)[0]
    assert triple > pair
    assert triple >= _gaussian_epsilon(math.sqrt(2 * 4 / 4.0 + 1 / 25.0), 1e-6)
