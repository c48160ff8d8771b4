"""Grouping distinct DP-SGD steps for the PLD: dominating, and costing at most the budget."""

from __future__ import annotations

import numpy as np

from service.accounting.pld.grouping import CHECK_ORDERS, group_steps
from service.accounting.profiles.builders import MAX_PLD_GROUPS, _pessimistic_groups
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp


def _schedule(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    q = np.sort(rng.uniform(0.001, 0.05, n))
    sigma = np.sort(rng.uniform(0.7, 3.0, n))[::-1]
    return q, sigma, rng.integers(1, 20, n)


def _total_rdp(q: np.ndarray, sigma: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.sum(subsampled_gaussian_rdp(q, sigma, CHECK_ORDERS) * counts[:, None], axis=0)


def test_groups_keep_every_step_and_rise_by_at_most_the_budget() -> None:
    q, sigma, counts = _schedule(400)
    budget = 1e-3
    groups = group_steps(q, sigma, counts, budget)
    gq, gs, gc = (np.array(x) for x in zip(*groups, strict=True))
    assert gc.sum() == counts.sum()
    assert len(groups) < 400
    exact = _total_rdp(q, sigma, counts)
    merged = _total_rdp(gq, gs, gc)
    # an upper bound (dominating steps) that costs at most the budget
    assert np.all(merged >= exact * (1 - 1e-12))
    assert np.all(merged <= exact * (1 + budget))


def test_many_distinct_steps_fit_the_group_limit() -> None:
    q, sigma, counts = _schedule(3000)
    groups, grouped = _pessimistic_groups(q, sigma, counts)
    assert grouped and len(groups) <= MAX_PLD_GROUPS
    gq, gs, gc = (np.array(x) for x in zip(*groups, strict=True))
    assert gc.sum() == counts.sum()
    assert np.all(_total_rdp(gq, gs, gc) >= _total_rdp(q, sigma, counts) * (1 - 1e-12))


def test_equal_rates_many_sigmas_share_the_vectorised_path() -> None:
    q = np.linspace(0.001, 0.5, 40)
    sigma = np.linspace(3.0, 0.7, 40)
    orders = np.array([2.0, 3.0, 33.0, 256.0])
    together = subsampled_gaussian_rdp(q, sigma, orders)
    one_by_one = np.vstack([subsampled_gaussian_rdp(q[i], sigma[i], orders) for i in range(40)])
    np.testing.assert_allclose(together, one_by_one, rtol=1e-13)
