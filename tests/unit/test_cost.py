"""The profile cost estimator: upper estimates of the PLD grid, and the fallback it drives."""

from __future__ import annotations

import numpy as np
import pytest

from service.accounting.conversions import ORDERS
from service.accounting.cost import CostLimits, gaussian_pld_points, refusal
from service.accounting.mechanisms import parse_mechanism
from service.accounting.pld.pair import subsampled_gaussian_pld
from service.accounting.profiles.profile import compute_profile
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp
from tests.helpers import sgd


@pytest.mark.parametrize(
    ("q", "sigma", "steps"), [(0.01, 1.0, 400), (1.0, 2.0, 2), (0.01, 0.5, 200)]
)
def test_pld_grid_estimate_is_not_below_the_real_grid(q: float, sigma: float, steps: int) -> None:
    rdp = subsampled_gaussian_rdp(np.array([q]), np.array([sigma]), ORDERS)[0] * steps
    estimate = gaussian_pld_points([(q, sigma, steps)], ORDERS, rdp, 1e-4)
    pld = subsampled_gaussian_pld([(q, sigma, steps)], 1e-4)
    actual = max(len(pld.remove._probs), len(pld.add._probs))
    assert actual <= estimate <= 4 * actual


def test_costly_pld_falls_back_to_rdp_and_stays_an_upper_bound() -> None:
    mech = parse_mechanism(sgd(1.0, steps=400))
    full = compute_profile(mech)
    rdp_only = compute_profile(mech, limits=CostLimits(max_pld_points=1000))
    assert full.pld is not None and rdp_only.pld is None
    assert any("no PLD" in note for note in rdp_only.notes)
    for delta in (1e-3, 1e-5, 1e-9):
        assert rdp_only.epsilon(delta) >= full.epsilon(delta, "pld") - 1e-9
        assert rdp_only.epsilon(delta) == full.epsilon(delta, "rdp")


def test_noise_005_for_ten_million_steps_is_rdp_only() -> None:
    profile = compute_profile(parse_mechanism(sgd(0.05, steps=10**7)))
    assert profile.pld is None
    assert np.isfinite(profile.epsilon(1e-5)) and profile.epsilon(1e-5) > 1e6


def test_pure_dp_past_exp_range_keeps_its_rdp_and_answers_every_epsilon() -> None:
    profile = compute_profile(
        parse_mechanism({"type": "epsilon_delta", "epsilon": 800.0, "delta": 0})
    )
    assert profile.pld is None
    assert 799.0 < profile.epsilon(1e-5) <= 800.01  # pure 800-DP: at most 800
    assert profile.delta(900.0) == 0.0 or profile.delta(900.0) < 1e-100


def test_refusal_names_what_cannot_be_computed() -> None:
    assert refusal(parse_mechanism(sgd(1.0)), CostLimits()) is None
    approx = parse_mechanism({"type": "epsilon_delta", "epsilon": 710.0, "delta": 1e-6})
    assert "non_private" in (refusal(approx, CostLimits()) or "")
    assert "RDP" in (refusal(parse_mechanism(sgd(1.0)), CostLimits(max_rdp_evaluations=1)) or "")


def test_pmf_delta_above_the_largest_loss_is_the_infinity_mass() -> None:
    pld = subsampled_gaussian_pld([(0.01, 1.0, 10)], 1e-4)
    assert pld.delta(800.0) == pld.remove._infinity_mass or pld.delta(800.0) < 1e-300
