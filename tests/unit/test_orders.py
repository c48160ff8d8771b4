"""The continuous order search: never looser than dp_accounting's best grid order."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from service.accounting.rdp.gaussian import subsampled_gaussian_rdp
from service.accounting.rdp.orders import REFERENCE_ORDERS, best_delta, best_epsilon
from tests import oracles


def _dp_accounting_rdp_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    acc = rdp_lib.RdpAccountant(list(REFERENCE_ORDERS))
    event = dp_accounting.GaussianDpEvent(sigma)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    acc.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return float(acc.get_epsilon(delta))


CASES = [
    (1.0, 50.0, 1, 1e-5),  # strong privacy: optimum far above order 1024
    (1.0, 0.3, 1, 1e-3),  # weak privacy: optimum close to order 1
    (0.01, 1.0, 1000, 1e-5),
    (0.001, 4.0, 100, 1e-10),
    (0.2, 0.6, 500, 1e-3),
]


@pytest.mark.parametrize(("q", "sigma", "steps", "delta"), CASES)
def test_continuous_order_is_never_looser_than_the_reference_grid(
    q: float, sigma: float, steps: int, delta: float
) -> None:
    ours, order = best_epsilon(lambda a: steps * subsampled_gaussian_rdp(q, sigma, a)[0], delta)
    reference = _dp_accounting_rdp_epsilon(q, sigma, steps, delta)
    assert ours <= reference * (1 + 1e-9)
    assert order > 1


def test_gaussian_optimum_is_found_beyond_order_1024() -> None:
    # Gaussian with sigma = 1000 at delta = 1e-5: the optimum order is in the thousands.
    sigma, delta = 1000.0, 1e-5
    ours, order = best_epsilon(lambda a: a / (2 * sigma**2), delta)
    assert order > 1024
    reference = _dp_accounting_rdp_epsilon(1.0, sigma, 1, delta)
    assert ours < reference * 0.9
    # Never below the exact Gaussian curve (Balle and Wang 2018): RDP is an upper bound.
    assert oracles.gaussian_delta(1 / sigma, ours) <= delta * (1 + 1e-9)


def test_gaussian_optimum_is_found_below_order_1_25() -> None:
    sigma, delta = 0.03, 1e-3
    ours, order = best_epsilon(lambda a: a / (2 * sigma**2), delta)
    assert order < 1.25
    assert ours <= _dp_accounting_rdp_epsilon(1.0, sigma, 1, delta)
    assert oracles.gaussian_delta(1 / sigma, ours) <= delta * (1 + 1e-9)


@pytest.mark.parametrize(("sigma", "epsilon"), [(1.0, 1.0), (20.0, 0.05), (0.5, 8.0)])
def test_epsilon_delta_round_trip_and_oracle(sigma: float, epsilon: float) -> None:
    rdp = lambda a: a / (2 * sigma**2)  # noqa: E731
    delta, _ = best_delta(rdp, epsilon)
    assert oracles.gaussian_delta(1 / sigma, epsilon) <= delta
    back, _ = best_epsilon(rdp, delta)
    assert math.isclose(back, epsilon, rel_tol=1e-5, abs_tol=1e-9)


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"1\.5"):
        best_epsilon(lambda a: a, 1.5)
    with pytest.raises(ValueError, match="-1"):
        best_delta(lambda a: a, -1.0)


def test_infinite_rdp_gives_infinite_epsilon() -> None:
    eps, _ = best_epsilon(lambda a: np.full(np.shape(a), np.inf), 1e-5)
    assert eps == math.inf


def test_subsampled_optimum_is_found_beyond_order_1024() -> None:
    # q = 1e-4, sigma = 50 at delta = 1e-10: the best order is in the tens of thousands.
    q, sigma, delta = 1e-4, 50.0, 1e-10
    ours, order = best_epsilon(lambda a: subsampled_gaussian_rdp(q, sigma, a)[0], delta)
    assert order > 1024
    assert ours < 0.1 * _dp_accounting_rdp_epsilon(q, sigma, 1, delta)
    # Sound: dp_accounting's exact RDP at the integer orders around ours proves no less.
    acc = rdp_lib.RdpAccountant([math.floor(order), math.ceil(order)])
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
    assert ours >= 0.999 * float(acc.get_epsilon(delta))


@pytest.mark.parametrize("order", [300.5, 1024.5, 4096.25, 1e5 + 0.5, 1e9, 1e300, math.inf])
def test_huge_orders_give_finite_bounds_without_giant_arrays(order: float) -> None:
    q, sigma = np.array([1e-3, 0.05]), np.array([3.0, 0.9])
    values = subsampled_gaussian_rdp(q, sigma, [order])[:, 0]
    assert not np.any(np.isnan(values))
    gaussian = order / (2 * sigma**2)
    assert np.all(values <= gaussian)
    if order < 1e5:
        # the chord of the integer neighbours bounds the fractional order from above,
        # and monotonicity in the order from below
        below = subsampled_gaussian_rdp(q, sigma, [math.floor(order)])[:, 0]
        assert np.all(values >= below)
