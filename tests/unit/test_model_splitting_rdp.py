"""Model splitting and dropout: one step's RDP against oracles independent of the code.

Oracles: Gauss-Hermite quadrature of E_Q[(1 - q + q X)^(+-m)] over the shared and the
split coordinates written out (d = 2, 3: dropout and a three-way split), the Poisson-
subsampled Gaussian of dp_accounting (d = 1, and the shared part alone), and the BIS
profile (q = 1 without a shared part is one participation in d steps).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from benchmarks.tightness_splitting import mechanism as splitting_mechanism
from benchmarks.tightness_splitting import quadrature_rdp
from benchmarks.tightness_splitting import reference as splitting_reference
from service.accounting.bis import rdp as bis
from service.accounting.bis.splitting import forward_rdp_step, reverse_rdp_step, step_rdp
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile


def _quadrature(d: int, s: float, shared: float, q: float, alphas: list[float]) -> tuple:
    """(forward, reverse) D_alpha of one step by a (d + 1)-point Gauss-Hermite product rule
    (k = 1): X = Z_0 (1/d) sum_j Z_j with the coordinates written out (the tightness
    suite's reference)."""
    return quadrature_rdp(d, s, shared, q, np.asarray(alphas, dtype=np.float64))


@pytest.mark.parametrize(
    ("d", "s", "shared", "q"),
    [(2, 1.5, 0.0, 0.3), (2, 1.5, 1.0, 0.3), (3, 2.0, 1.0, 0.5), (2, 2.0, 0.5, 1.0)],
)
def test_step_rdp_is_above_quadrature_and_within_one_percent(d, s, shared, q):
    alphas = [2.0, 3.0, 5.0, 8.0]
    fwd, rev = step_rdp(d, 1, s, shared, q, alphas)
    f_oracle, r_oracle = _quadrature(d, s, shared, q, alphas)
    assert np.all(fwd >= f_oracle * (1 - 1e-9))
    assert np.all(rev >= r_oracle * (1 - 1e-9))
    both, oracle = np.maximum(fwd, rev), np.maximum(f_oracle, r_oracle)
    assert np.all(both <= oracle * 1.01), (both, oracle)


def test_one_part_is_the_subsampled_gaussian_of_dp_accounting():
    # d = 1 (nothing split) with a shared part: one Gaussian of sensitivity sqrt(1 + a^2)
    s, shared, q = 1.3, 0.75, 0.2
    alphas = np.arange(2.0, 33.0)
    acc = rdp_acc.RdpAccountant(orders=list(alphas))
    sigma = s / math.sqrt(1 + shared**2)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)))
    oracle = np.array(acc._rdp)
    fwd = forward_rdp_step(1, 1, s, shared, q, alphas)
    np.testing.assert_allclose(fwd, oracle, rtol=1e-8)
    assert np.all(fwd >= oracle * (1 - 1e-12))


def test_without_sampling_or_shared_part_it_is_one_bis_participation():
    alphas = np.arange(2.0, 20.0)
    fwd, rev = step_rdp(4, 1, 1.2, 0.0, 1.0, alphas)
    per_epoch, _ = bis.per_epoch_rdp(4, 1, 1.2, alphas)
    np.testing.assert_allclose(np.maximum(fwd, rev), per_epoch, rtol=1e-12)


def test_joint_sampling_costs_more_than_the_parts_sampled_apart():
    # one Poisson draw for both parts: adding the parts' RDPs would understate it
    alphas = np.arange(2.0, 40.0)
    d, s, q = 3, 2.72, 0.1
    joint = forward_rdp_step(d, 1, s, 1.0, q, alphas)
    split = forward_rdp_step(d, 1, s, 0.0, q, alphas)
    shared = forward_rdp_step(1, 1, s, 0.0, q, alphas)
    assert np.all(joint > split + shared)


def test_k_of_d_parts_under_sampling_falls_back_to_the_subsampled_gaussian():
    alphas = np.arange(2.0, 10.0)
    rev = reverse_rdp_step(6, 2, 2.0, 1.0, 0.1, alphas)
    acc = rdp_acc.RdpAccountant(orders=list(alphas))
    acc.compose(dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(2.0 / math.sqrt(3))))
    np.testing.assert_allclose(rev, acc._rdp, rtol=1e-6)
    # the forward direction still sees the split: below the unsplit Gaussian
    fwd = forward_rdp_step(6, 2, 2.0, 1.0, 0.1, alphas)
    assert np.all(fwd < np.array(acc._rdp))


@pytest.mark.parametrize(
    "bad",
    [(2, 3, 1.0, 0.0, 0.5), (2, 1, 0.0, 0.0, 0.5), (2, 1, 1.0, -1.0, 0.5), (2, 1, 1.0, 0.0, 0.0)],
)
def test_invalid_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        forward_rdp_step(*bad, [2.0])


def test_subsets_in_the_quadrature_are_the_parts():
    # the oracle's own check: with q = 1 and no shared part, d = 2, its forward value is
    # the closed form log((1 + e^(1/s^2)) / 2) at alpha = 2
    s = 1.5
    fwd, _ = _quadrature(2, s, 0.0, 1.0, [2.0])
    assert fwd[0] == pytest.approx(math.log((1 + math.exp(1 / s**2)) / 2), rel=1e-9)


def test_unsampled_split_without_shared_part_is_a_bis_profile_with_its_pld():
    mech = parse_mechanism(
        {
            "type": "model_splitting",
            "parts": 4,
            "noise_multiplier": 1.5,
            "clipping_norm": 1.0,
            "steps": 3,
        }
    )
    bis_mech = parse_mechanism(
        {
            "type": "balanced_iteration_subsampling",
            "iterations": 4,
            "participations": 1,
            "noise_multiplier": 1.5,
            "clipping_norm": 1.0,
            "epochs": 3,
        }
    )
    ours, ref = compute_profile(mech), compute_profile(bis_mech)
    assert ours.pld is not None
    assert ours.epsilon(1e-5, "best") == ref.epsilon(1e-5, "best")


def test_profile_epsilon_is_within_one_percent_of_the_quadrature_curve():
    # the tightest sound figure without a PLD: the exact RDP (quadrature), composed and
    # converted the same way
    d, s, shared, q, steps = 2, 1.5, 1.0, 0.3, 20
    mech = parse_mechanism(splitting_mechanism(d, s, shared, q, steps))
    ours = compute_profile(mech).epsilon(1e-5, "rdp")
    reference = splitting_reference(d, s, shared, q, steps, 1e-5)
    assert ours <= reference * 1.01, (ours, reference)
    assert ours >= reference * 0.97  # the chord's fractional orders gain a little at most


def test_reverse_at_eight_parts_is_within_a_monte_carlo_interval():
    # d = 8 is past quadrature: Monte Carlo of E[R^-m] - 1 with a 5-sigma interval (seeded)
    d, s, shared, q = 8, 2.49, 1.0, 0.1
    alphas = np.array([2.0, 4.0, 8.0, 16.0])
    rng = np.random.default_rng(33)
    n = 400_000
    x = np.exp(rng.standard_normal((n, d)) / s - 1 / (2 * s * s)).mean(1)
    x = x * np.exp(rng.standard_normal(n) * shared / s - shared**2 / (2 * s * s))
    r = 1 - q + q * x
    rev = reverse_rdp_step(d, 1, s, shared, q, alphas)
    for a, ours in zip(alphas, rev, strict=True):
        vals = r ** (1 - a) - 1
        mean, err = vals.mean(), 5 * vals.std() / math.sqrt(n)
        low, high = math.log1p(mean - err) / (a - 1), math.log1p(mean + err) / (a - 1)
        assert ours >= low, (a, ours, low)
        assert ours <= high * 1.01, (a, ours, high)
