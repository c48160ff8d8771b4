"""Properties every profile must have, for every mechanism type."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib
from hypothesis import given
from hypothesis import strategies as st

from service.accounting.conversions import ORDERS, round_up
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import PROFILE_FORMAT, PrivacyProfile, compute_profile

MECHANISMS = {
    "gaussian": {"type": "gaussian", "sensitivity": 1.0, "noise_std": 2.0, "count": 4},
    "dp_sgd": {
        "type": "dp_sgd",
        "sampling_rate": 0.01,
        "noise_multiplier": 1.1,
        "clipping_norm": 1.0,
        "steps": 500,
    },
    "dp_sgd_schedule": {
        "type": "dp_sgd",
        "schedule": [
            {"steps": 200, "sampling_rate": 0.01, "noise_multiplier": 1.5, "clipping_norm": 1.0},
            {"steps": 300, "sampling_rate": 0.02, "noise_multiplier": 1.0, "clipping_norm": 1.0},
            {"steps": 100, "sampling_rate": 0.01, "noise_multiplier": 2.0, "clipping_norm": 1.0},
        ],
    },
    "bis": {
        "type": "balanced_iteration_subsampling",
        "iterations": 100,
        "participations": 5,
        "noise_multiplier": 2.0,
        "clipping_norm": 1.0,
        "epochs": 2,
    },
    "rdp_curve": {
        "type": "rdp_curve",
        "orders": [2, 4, 8, 16, 32, 64],
        "epsilons": [0.05, 0.1, 0.2, 0.4, 0.8, 1.6],
    },
    "epsilon_delta": {"type": "epsilon_delta", "epsilon": 2.0, "delta": 1e-6},
    "pure_dp": {"type": "epsilon_delta", "epsilon": 1.0, "delta": 0.0},
}


@pytest.fixture(scope="module")
def profiles() -> dict[str, PrivacyProfile]:
    return {name: compute_profile(parse_mechanism(m)) for name, m in MECHANISMS.items()}


@pytest.mark.parametrize("name", list(MECHANISMS))
@pytest.mark.parametrize("accountant", ["rdp", "pld", "best"])
def test_epsilon_delta_round_trip(profiles: dict, name: str, accountant: str) -> None:
    profile = profiles[name]
    for eps in (0.5, 1.0, 3.0):
        delta = profile.delta(eps, accountant)
        if not 0 < delta < 1:
            continue
        back = profile.epsilon(delta, accountant)
        # epsilon(delta(eps)) <= eps (up to the PLD grid), and the epsilon found really
        # gives that delta (on a flat stretch of the curve it may be well below eps).
        assert back <= eps + 2e-3
        assert profile.delta(back, accountant) <= delta * (1 + 1e-2) + 1e-12


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_pld_epsilon_never_above_rdp_epsilon(profiles: dict, name: str) -> None:
    profile = profiles[name]
    for delta in (1e-3, 1e-5, 1e-8):
        assert profile.epsilon(delta, "pld") <= profile.epsilon(delta, "rdp") + 1e-9
        assert profile.epsilon(delta, "best") == min(
            profile.epsilon(delta, "pld"), profile.epsilon(delta, "rdp")
        )


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_profile_survives_serialisation_with_its_versions(profiles: dict, name: str) -> None:
    profile = profiles[name]
    data = json.loads(json.dumps(profile.to_json()))
    again = PrivacyProfile.from_json(data)
    assert data["versions"]["format"] == str(PROFILE_FORMAT)
    assert "dp_accounting" in data["versions"]
    for delta in (1e-4, 1e-7):
        for accountant in ("rdp", "pld"):
            assert again.epsilon(delta, accountant) == profile.epsilon(delta, accountant)
    for eps in (0.3, 2.0):
        assert again.delta_directions(eps) == profile.delta_directions(eps)


def test_non_private_profile_gives_no_guarantee() -> None:
    profile = compute_profile(parse_mechanism({"type": "non_private"}))
    assert profile.delta(5.0) == 1.0 and math.isinf(profile.epsilon(1e-5))
    assert np.all(np.isinf(profile.rdp_at(ORDERS)))


def test_approximate_dp_has_no_finite_rdp() -> None:
    profile = compute_profile(parse_mechanism(MECHANISMS["epsilon_delta"]))
    assert math.isinf(profile.epsilon(1e-5, "rdp"))
    assert profile.epsilon(1e-5, "pld") <= 2.0 + 1e-3


def test_per_group_clipping_equals_single_group_with_sigma_over_sqrt_groups() -> None:
    groups = [{"clipping_norm": c, "noise_multiplier": 2.0} for c in (0.1, 1.0, 4.0, 9.0)]
    grouped = compute_profile(
        parse_mechanism({"type": "dp_sgd", "sampling_rate": 0.01, "steps": 300, "groups": groups})
    )
    single = compute_profile(
        parse_mechanism(
            {
                "type": "dp_sgd",
                "sampling_rate": 0.01,
                "steps": 300,
                "noise_multiplier": 1.0,
                "clipping_norm": 1.0,
            }
        )
    )
    assert grouped.epsilon(1e-5, "rdp") == pytest.approx(single.epsilon(1e-5, "rdp"), rel=1e-12)
    assert grouped.epsilon(1e-5, "pld") == pytest.approx(single.epsilon(1e-5, "pld"), rel=1e-9)


def test_schedule_order_does_not_change_the_profile() -> None:
    segs = MECHANISMS["dp_sgd_schedule"]["schedule"]
    a = compute_profile(parse_mechanism(MECHANISMS["dp_sgd_schedule"]))
    b = compute_profile(parse_mechanism({"type": "dp_sgd", "schedule": segs[::-1]}))
    assert a.epsilon(1e-5, "pld") == pytest.approx(b.epsilon(1e-5, "pld"), rel=1e-9)
    np.testing.assert_allclose(a.rdp_at(ORDERS), b.rdp_at(ORDERS), rtol=1e-12)


def test_many_nearly_equal_steps_are_merged_for_the_pld_within_a_tenth_of_a_percent() -> None:
    sigmas = [1.0 + 1e-6 * i for i in range(300)]
    mech = {
        "type": "dp_sgd",
        "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
    }
    profile = compute_profile(parse_mechanism(mech))
    assert any("grouped" in n for n in profile.notes)
    delta = 1e-5
    # Floor: dp_accounting's optimistic PLD with every step at the largest sigma.
    floor = pldlib.from_gaussian_mechanism(
        standard_deviation=max(sigmas),
        sampling_prob=0.01,
        value_discretization_interval=1e-4,
        pessimistic_estimate=False,
    ).self_compose(len(sigmas))
    # Reference: pessimistic PLD with every step at the smallest sigma (less private).
    ceiling = pldlib.from_gaussian_mechanism(
        standard_deviation=min(sigmas), sampling_prob=0.01, value_discretization_interval=1e-4
    ).self_compose(len(sigmas))
    ours = profile.epsilon(delta, "pld")
    assert floor.get_epsilon_for_delta(delta) <= ours
    assert ours <= ceiling.get_epsilon_for_delta(delta) * 1.001
    few = compute_profile(
        parse_mechanism(
            {
                "type": "dp_sgd",
                "schedule": [
                    {"steps": 1, "sampling_rate": 0.01, "noise_multiplier": s, "clipping_norm": 1.0}
                    for s in sigmas[:3]
                ],
            }
        )
    )
    assert not any("grouped" in n for n in few.notes)


def test_shuffle_profile_is_marked_heuristic() -> None:
    mech = {**MECHANISMS["dp_sgd"], "sampling": "shuffle", "accept_poisson_approximation": True}
    profile = compute_profile(parse_mechanism(mech))
    assert profile.heuristic and any("heuristic" in n for n in profile.notes)


def test_bad_queries_raise_value_errors_naming_the_value(profiles: dict) -> None:
    profile = profiles["dp_sgd"]
    with pytest.raises(ValueError, match="delta must be in"):
        profile.epsilon(1.5)
    with pytest.raises(ValueError, match="epsilon must be"):
        profile.delta(-1.0)
    with pytest.raises(ValueError, match="accountant"):
        profile.epsilon(1e-5, "moments")  # type: ignore[arg-type]


@given(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False))
def test_round_up_is_never_below_its_input(value: float) -> None:
    out = round_up(value)
    assert out >= value
    assert out <= value * (1 + 1e-5)


@pytest.mark.parametrize("name", ["gaussian", "dp_sgd", "dp_sgd_schedule", "epsilon_delta"])
def test_fast_delta_queries_are_never_below_the_direct_pmf_sum(profiles: dict, name: str) -> None:
    pld = profiles[name].pld
    for eps in np.concatenate([np.linspace(0, 6, 97), [0.6201, 1e-4, 2.0]]):
        for pmf, fast in ((pld.remove, pld.delta_remove), (pld.add, pld.delta_add)):
            direct = float(pmf.get_delta_for_epsilon(float(eps)))
            assert fast(float(eps)) >= direct
            assert fast(float(eps)) <= direct * (1 + 1e-7) + 1e-300
