"""A DP-SGD profile with many distinct steps: every step composed, grouped only past the
work limit, and then never below the ungrouped composition.

Oracle for soundness: dp_accounting's optimistic PLD of every step (a lower estimate).
"""

from __future__ import annotations

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting import cost
from service.accounting.mechanisms import parse_mechanism
from service.accounting.pld.schedule import EXACT_PLD_GROUPS
from service.accounting.profiles.profile import compute_profile

SIGMAS = np.linspace(1.5, 3.0, 100)
MECHANISM = {
    "type": "dp_sgd",
    "per_step": {"sampling_rate": 0.02, "noise_multiplier": SIGMAS.tolist(), "clipping_norm": 1.0},
}


def _floor(width: float):
    total = None
    for sigma in SIGMAS:
        step = pldlib.from_gaussian_mechanism(
            float(sigma),
            sampling_prob=0.02,
            value_discretization_interval=width,
            pessimistic_estimate=False,
            use_connect_dots=False,
        )
        total = step if total is None else total.compose(step)
    return total


def test_many_distinct_steps_are_grouped_only_past_the_work_limit(monkeypatch) -> None:
    exact = compute_profile(parse_mechanism(MECHANISM), discretization=1e-3)
    assert not any("grouped" in n for n in exact.notes)
    assert exact.parameters["distinct_steps"] == 100
    assert "Fourier" in exact.methods["pld"]
    monkeypatch.setattr(cost, "MAX_PLD_WORK", 1.0)
    grouped = compute_profile(parse_mechanism(MECHANISM), discretization=1e-3)
    (note,) = [n for n in grouped.notes if "grouped into" in n]
    assert int(note.split("grouped into ")[1].split()[0]) <= EXACT_PLD_GROUPS
    floor = _floor(float(exact.parameters["discretization"]) / 2)
    for delta in (1e-10, 1e-6, 1e-3):
        ours, merged = exact.epsilon(delta, "pld"), grouped.epsilon(delta, "pld")
        assert ours >= floor.get_epsilon_for_delta(delta)
        # 36 merges of neighbours 1.5% apart in sigma: a loss far above the grids' 1e-4
        assert ours < merged < ours * 1.05
