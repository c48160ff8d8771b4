"""The PLD grid is refined from the epsilon it must resolve: small epsilons stay tight."""

from __future__ import annotations

import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile


def _reference(q: float, sigma: float, steps: int, delta: float, width: float, pess: bool) -> float:
    pld = pldlib.from_gaussian_mechanism(
        sigma,
        sampling_prob=q,
        value_discretization_interval=width,
        pessimistic_estimate=pess,
    ).self_compose(steps)
    return float(pld.get_epsilon_for_delta(delta))


@pytest.mark.parametrize(
    ("q", "sigma", "steps", "delta"),
    [
        (0.001, 10.0, 10, 1e-10),
        (1e-4, 50.0, 1, 1e-10),
        (1.0, 100.0, 1, 1e-5),
        (0.001, 5.0, 100, 1e-6),
    ],
)
def test_small_epsilon_is_within_a_percent_of_a_fine_pessimistic_pld(
    q: float, sigma: float, steps: int, delta: float
) -> None:
    mech = {
        "type": "dp_sgd",
        "sampling_rate": q,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "steps": steps,
    }
    profile = compute_profile(parse_mechanism(mech))
    ours = profile.epsilon(delta)
    width = float(profile.parameters["discretization"])
    assert width < 1e-4  # refined below the default grid
    fine = width / 3
    # Sound: never below dp_accounting's optimistic PLD on a finer grid.
    assert ours >= _reference(q, sigma, steps, delta, fine, pess=False)
    # Tight: within 1% of its pessimistic PLD on that finer grid.
    assert ours <= 1.01 * _reference(q, sigma, steps, delta, fine, pess=True)


def test_large_epsilon_keeps_the_default_grid() -> None:
    mech = {
        "type": "dp_sgd",
        "sampling_rate": 0.1,
        "noise_multiplier": 0.8,
        "clipping_norm": 1.0,
        "steps": 20,
    }
    profile = compute_profile(parse_mechanism(mech))
    assert profile.parameters["discretization"] == pytest.approx(1e-4)


def test_profiles_on_different_grids_compose_pessimistically() -> None:
    import numpy as np

    from service.accounting.pld.pair import subsampled_gaussian_pld

    fine = subsampled_gaussian_pld([(0.01, 2.0, 50)], 3.7e-5)
    coarse = fine.regrid(1e-4)
    assert coarse.discretization == 1e-4
    for eps in np.linspace(0.0, 1.0, 41):
        assert coarse.delta_remove(eps) >= fine.delta_remove(eps)
        assert coarse.delta_add(eps) >= fine.delta_add(eps)
    other = subsampled_gaussian_pld([(0.02, 1.5, 20)], 1e-4)
    both = fine.compose(other)
    assert both.discretization == 1e-4
    assert both.epsilon(1e-5) >= coarse.compose(other).epsilon(1e-5) * (1 - 1e-12)
