"""Balanced iteration subsampling: the random-allocation bound beside the paper's.

Oracle: the ``random-allocation`` package (Feldman and Shenfeld's own code).
"""

from __future__ import annotations

import numpy as np
import pytest
from random_allocation.comparisons.definitions import PrivacyParams, SchemeConfig
from random_allocation.random_allocation_scheme.lower_bound import (
    allocation_epsilon_lower_bound,
)
from random_allocation.random_allocation_scheme.RDP_DCO import allocation_RDP_DCO_add

from service.accounting import bis
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles import compute_profile


@pytest.mark.parametrize(
    ("d", "k", "sigma"),
    [(100, 1, 1.0), (1000, 10, 0.8), (50, 5, 2.0), (10, 3, 0.5), (10**4, 1, 3.0)],
)
def test_allocation_rdp_matches_the_package_and_never_falls_below_it(
    d: int, k: int, sigma: float
) -> None:
    orders = np.array([2.0, 3.0, 8.0, 32.0, 100.0])
    ours = bis.reverse_rdp_allocation(d, k, sigma, orders)
    ref = np.array([allocation_RDP_DCO_add(sigma, d, k, float(a)) for a in orders])
    # the package evaluates the same formula with less cancellation control
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    assert np.all(ours >= ref * (1 - 1e-7))


def test_allocation_rdp_is_inf_where_the_theorem_does_not_apply() -> None:
    assert np.all(np.isinf(bis.reverse_rdp_allocation(100, 1, 1.0, [1.5, 2.5])))


@pytest.mark.parametrize(("d", "sigma", "delta"), [(100, 1.0, 1e-5), (200, 0.8, 1e-5)])
def test_bis_profile_is_tighter_than_the_paper_bound_and_above_the_lower_bound(
    d: int, sigma: float, delta: float
) -> None:
    mech = parse_mechanism(
        {
            "type": "balanced_iteration_subsampling",
            "iterations": d,
            "participations": 1,
            "noise_multiplier": sigma,
            "clipping_norm": 1.0,
        }
    )
    profile = compute_profile(mech)
    ours = profile.epsilon(delta)
    assert "random allocation" in profile.methods["rdp"]
    # the paper's bound alone (AM-GM reverse direction) proves more
    ints = np.arange(2.0, 257.0)
    paper = np.maximum(bis.forward_rdp(d, 1, sigma, ints), bis.reverse_rdp(d, 1, sigma, ints))
    paper_eps = np.min(paper + np.log1p(-1 / ints) - (np.log(delta) + np.log(ints)) / (ints - 1))
    assert ours < 0.8 * paper_eps
    # sound: never below the package's lower bound on the scheme's epsilon
    params = PrivacyParams(sigma=sigma, num_steps=d, num_selected=1, num_epochs=1, delta=delta)
    assert ours >= allocation_epsilon_lower_bound(params, SchemeConfig())
