"""The PLD of many distinct DP-SGD steps, composed in one Fourier pass, against dp_accounting.

Oracles: dp_accounting's PLDs of every step composed one by one, optimistic (privacy
buckets rounded down: a lower estimate of the true curve, so ours must never be below
it) and pessimistic (connect the dots: ours must be within 0.1% of it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting.pld import fourier as fourier_pld
from service.accounting.pld.fourier import composed_pld

H = 1e-3
DELTAS = (1e-10, 1e-6, 1e-3)


def _reference(groups: list[tuple[float, float, int]], pessimistic: bool):
    total = None
    for q, sigma, count in groups:
        if q >= 1.0:
            step = pldlib.from_gaussian_mechanism(
                sigma / math.sqrt(count),
                value_discretization_interval=H,
                pessimistic_estimate=pessimistic,
                use_connect_dots=pessimistic,
            )
        else:
            step = pldlib.from_gaussian_mechanism(
                sigma,
                sampling_prob=q,
                value_discretization_interval=H,
                pessimistic_estimate=pessimistic,
                use_connect_dots=pessimistic,
            )
            step = step.self_compose(count) if count > 1 else step
        total = step if total is None else total.compose(step)
    return total


def _schedules() -> dict[str, list[tuple[float, float, int]]]:
    rng = np.random.default_rng(3)
    sigmas = np.linspace(1.2, 2.5, 120)
    decaying = [(0.02, float(s), 1) for s in sigmas]
    rates = np.linspace(0.005, 0.05, 100)
    noise = np.linspace(3.0, 1.0, 100)
    repeats = rng.integers(1, 5, 100)
    both = [(float(a), float(b), int(c)) for a, b, c in zip(rates, noise, repeats, strict=True)]
    mixed = [(0.03, float(s), 2) for s in np.linspace(1.5, 4.0, 100)]
    mixed += [(1.0, 5.0, 2), (1.0, 8.0, 1)]
    return {"120 sigmas": decaying, "100 rates and sigmas": both, "100 and Gaussians": mixed}


SCHEDULES = _schedules()


@pytest.fixture(scope="module", params=list(SCHEDULES))
def composed(request: pytest.FixtureRequest):
    groups = SCHEDULES[request.param]
    return composed_pld(groups, H), _reference(groups, True), _reference(groups, False)


def test_many_distinct_steps_lie_between_dp_accountings_two_estimates(composed) -> None:
    ours, pessimistic, optimistic = composed
    for delta in DELTAS:
        eps = ours.epsilon(delta)
        assert eps >= optimistic.get_epsilon_for_delta(delta)
        assert eps <= pessimistic.get_epsilon_for_delta(delta) * 1.001
    # each direction on its own too (random selection reads them apart); dp_accounting
    # books the tails it truncates (1e-15 per composition) as infinite loss even when
    # optimistic, so its floor is its finite part
    for eps in (0.1, 0.5, 1.0, 2.0, 4.0):
        for mine, theirs in (
            (ours.delta_remove(eps), optimistic._pmf_remove),
            (ours.delta_add(eps), optimistic._pmf_add),
        ):
            assert mine >= theirs.get_delta_for_epsilon(eps) - theirs._infinity_mass


def test_a_window_too_small_moves_the_mass_it_misses_to_infinity(monkeypatch) -> None:
    groups = SCHEDULES["120 sigmas"]
    full = composed_pld(groups, H)
    monkeypatch.setattr(fourier_pld, "WINDOW_TAIL", 1e-6)
    small = composed_pld(groups, H)
    optimistic = _reference(groups, False)
    for pmf, whole in ((small.remove, full.remove), (small.add, full.add)):
        top = (pmf._lower_loss + len(pmf._probs)) * H
        probs = np.asarray(whole._probs)
        losses = (whole._lower_loss + np.arange(probs.size)) * H
        beyond = float(probs[losses >= top - H / 2].sum()) + whole._infinity_mass
        assert pmf._infinity_mass >= beyond * (1 - 1e-9)
    for delta in DELTAS:
        assert small.epsilon(delta) >= optimistic.get_epsilon_for_delta(delta)
        assert small.epsilon(delta) >= full.epsilon(delta) * (1 - 1e-12)
