"""Balanced iteration subsampling: the random-allocation formula beside the paper's.

Oracles: the ``random-allocation`` package (Feldman and Shenfeld's own code) and
Gauss-Hermite quadrature of both Renyi divergences of the pair (P = mean over k-subsets
mu of N(mu, sigma^2 I_d), Q = N(0, sigma^2 I_d)) for small d.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from random_allocation.comparisons.definitions import PrivacyParams, SchemeConfig
from random_allocation.random_allocation_scheme.lower_bound import (
    allocation_epsilon_lower_bound,
)
from random_allocation.random_allocation_scheme.RDP_DCO import allocation_RDP_DCO_add

from service.accounting.bis import rdp as bis
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile


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


def _divergences(
    d: int, k: int, sigma: float, alpha: float, nodes: int = 60
) -> tuple[float, float]:
    """(D_alpha(P||Q), D_alpha(Q||P)) by a d-dimensional Gauss-Hermite rule."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    grid = np.stack(np.meshgrid(*([x * sigma] * d), indexing="ij"), axis=-1)
    weight = np.ones(grid.shape[:-1])
    for g in np.meshgrid(*([w] * d), indexing="ij"):
        weight = weight * g
    subsets = list(itertools.combinations(range(d), k))
    ratio = np.zeros(weight.shape)
    for s in subsets:
        ratio += np.exp(grid[..., list(s)].sum(-1) / sigma**2 - k / (2 * sigma**2))
    ratio /= len(subsets)
    forward = np.log(np.sum(weight * ratio**alpha)) / (alpha - 1)
    reverse = np.log(np.sum(weight * ratio ** (1 - alpha))) / (alpha - 1)
    return float(forward), float(reverse)


def test_quadrature_reproduces_the_gaussian_closed_form() -> None:
    # d = k = 1: both directions are alpha / (2 sigma^2)
    fwd, rev = _divergences(1, 1, 0.8, 3.0)
    assert fwd == pytest.approx(3.0 / (2 * 0.64), rel=1e-10)
    assert rev == pytest.approx(3.0 / (2 * 0.64), rel=1e-10)


def test_the_allocation_formula_falls_below_the_exact_reverse_divergence() -> None:
    """Why profiles do not use it: it is not an upper bound on D_alpha(Q||P)."""
    _, rev = _divergences(2, 1, 1.0, 3.0)
    assert rev == pytest.approx(0.84012025, rel=1e-6)
    assert bis.reverse_rdp_allocation(2, 1, 1.0, [3.0])[0] < 0.98 * rev


@pytest.mark.parametrize(
    ("d", "k", "sigma"), [(2, 1, 1.0), (3, 1, 0.7), (3, 2, 1.0), (4, 1, 1.5), (3, 1, 3.0)]
)
def test_bis_profile_never_falls_below_either_exact_divergence(
    d: int, k: int, sigma: float
) -> None:
    mech = parse_mechanism(
        {
            "type": "balanced_iteration_subsampling",
            "iterations": d,
            "participations": k,
            "noise_multiplier": sigma,
            "clipping_norm": 1.0,
        }
    )
    profile = compute_profile(mech)
    for alpha in (2.0, 3.0, 5.0, 8.0):
        fwd, rev = _divergences(d, k, sigma, alpha, nodes=60 if d < 4 else 30)
        ours = float(profile.rdp_at(np.array([alpha]))[0])
        assert ours >= max(fwd, rev) * (1 - 1e-9)


@pytest.mark.parametrize(("d", "sigma", "delta"), [(100, 1.0, 1e-5), (200, 0.8, 1e-5)])
def test_bis_profile_is_above_the_lower_bound(d: int, sigma: float, delta: float) -> None:
    mech = parse_mechanism(
        {
            "type": "balanced_iteration_subsampling",
            "iterations": d,
            "participations": 1,
            "noise_multiplier": sigma,
            "clipping_norm": 1.0,
        }
    )
    ours = compute_profile(mech).epsilon(delta)
    assert "random allocation" not in compute_profile(mech).methods["rdp"]
    params = PrivacyParams(sigma=sigma, num_steps=d, num_selected=1, num_epochs=1, delta=delta)
    assert ours >= allocation_epsilon_lower_bound(params, SchemeConfig())
