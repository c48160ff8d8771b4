"""Grouping many distinct DP-SGD steps to fit a work limit: never below the ungrouped steps.

Oracles: the RDP of every distinct step (exact, composed by summation); dp_accounting's
optimistic PLD of every ungrouped step (a lower estimate of the true curve); and the
composition of the ungrouped steps on the same uniform step grids (a dominating step's
connect-the-dots PMF dominates its members' on a common grid, so grouping can only raise
every delta, up to floating point).
"""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.accounting.pld import fourier as fourier_pld
from service.accounting.pld import step_pmfs
from service.accounting.pld.fourier import composed_pld
from service.accounting.pld.grouping import CHECK_ORDERS, group_steps, groups_within
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp


def _schedule(n: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.uniform(0.001, 0.05, n)
    sigma = rng.uniform(0.7, 3.0, n)
    return q, sigma, rng.integers(1, 20, n)


def _total_rdp(q, sigma, counts) -> np.ndarray:
    q, sigma, counts = (np.asarray(x) for x in (q, sigma, counts))
    return np.sum(subsampled_gaussian_rdp(q, sigma, CHECK_ORDERS) * counts[:, None], axis=0)


def _arrays(groups):
    return (np.array(x) for x in zip(*groups, strict=True))


def test_groups_within_fit_the_limit_keep_every_step_and_dominate() -> None:
    q, sigma, counts = _schedule(2000)
    groups = groups_within(q, sigma, counts, 150)
    assert 100 < len(groups) <= 150
    gq, gs, gc = _arrays(groups)
    assert gc.sum() == counts.sum()
    exact = _total_rdp(q, sigma, counts)
    assert np.all(_total_rdp(gq, gs, gc) >= exact * (1 - 1e-12))


def test_equal_rises_lose_less_than_relative_budgets_for_as_many_groups() -> None:
    q, sigma, counts = _schedule(2000)
    exact = _total_rdp(q, sigma, counts)
    relative = group_steps(q, sigma, counts, 0.05)
    equal = groups_within(q, sigma, counts, len(relative))
    assert len(equal) <= len(relative)
    rise_relative = _total_rdp(*_arrays(relative)) / exact - 1
    rise_equal = _total_rdp(*_arrays(equal)) / exact - 1
    assert rise_equal.max() < rise_relative.max()


def test_fewer_groups_than_one_are_refused() -> None:
    with pytest.raises(ValueError, match="max_groups"):
        groups_within(np.array([0.1]), np.array([1.0]), np.array([1]), 0)


def _floor(groups, width: float):
    total = None
    for q, sigma, count in groups:
        step = pldlib.from_gaussian_mechanism(
            sigma,
            sampling_prob=q,
            value_discretization_interval=width,
            pessimistic_estimate=False,
            use_connect_dots=False,
        )
        step = step.self_compose(count) if count > 1 else step
        total = step if total is None else total.compose(step)
    return total


schedules = st.integers(66, 90).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0.005, 0.1), min_size=n, max_size=n),
        st.lists(st.floats(1.0, 4.0), min_size=n, max_size=n),
        st.lists(st.integers(1, 3), min_size=n, max_size=n),
        st.integers(3, 40),
    )
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules)
def test_grouping_never_proves_less_than_the_ungrouped_steps(schedule) -> None:
    rates, noise, repeats, limit = schedule
    q, sigma, counts = np.array(rates), np.array(noise), np.array(repeats)
    exact = [(float(a), float(b), int(c)) for a, b, c in zip(q, sigma, counts, strict=True)]
    groups = groups_within(q, sigma, counts, limit)
    assert len(groups) <= limit and sum(g[2] for g in groups) == counts.sum()
    width = 2e-3
    grouped = composed_pld(groups, width)
    floor = _floor(exact, width)
    for delta in (1e-9, 1e-5, 1e-3):
        assert grouped.epsilon(delta) >= floor.get_epsilon_for_delta(delta)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules)
def test_on_common_step_grids_grouping_only_raises_every_delta(schedule) -> None:
    rates, noise, repeats, limit = schedule
    q, sigma, counts = np.array(rates), np.array(noise), np.array(repeats)
    exact = [(float(a), float(b), int(c)) for a, b, c in zip(q, sigma, counts, strict=True)]
    groups = groups_within(q, sigma, counts, limit)
    with pytest.MonkeyPatch.context() as patch:
        # every step on every multiple of the grid: a common grid for all PMFs
        patch.setattr(fourier_pld, "ACCURACY", 0.0)
        patch.setattr(step_pmfs, "TAIL_LEVELS", 0)
        width = 4e-3
        grouped = composed_pld(groups, width)
        ungrouped = composed_pld(exact, width)
    # up to the rounding of the transforms: about 1e-16 of the mass per grid point
    noise = 1e-12
    for eps in (0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0):
        assert grouped.delta_remove(eps) >= ungrouped.delta_remove(eps) - noise
        assert grouped.delta_add(eps) >= ungrouped.delta_add(eps) - noise
    for delta in (1e-9, 1e-5, 1e-3):
        assert grouped.epsilon(delta) >= ungrouped.epsilon(delta + noise)
