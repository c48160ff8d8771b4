from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from service.accounting.mechanisms import (
    DPSGD,
    canonical_mechanism,
    error_messages,
    mechanism_hash,
    parse_mechanism,
)
from tests.helpers import DP_SGD

SEGMENT = {
    "sampling_rate": 0.004,
    "noise_multiplier": 1.0,
    "clipping_norm": 1.0,
    "learning_rate": 0.1,
}


def test_equal_dp_sgd_runs_hash_equal_however_written() -> None:
    constant = parse_mechanism(DP_SGD)
    schedule = parse_mechanism(
        {
            "type": "dp_sgd",
            "schedule": [{"steps": 300, **SEGMENT}, {"steps": 400, **SEGMENT, "clipping_norm": 1}],
        }
    )
    per_step = parse_mechanism(
        {
            "type": "dp_sgd",
            "per_step": {
                "sampling_rate": [0.004] * 700,
                "noise_multiplier": 1,
                "clipping_norm": 1.0,
                "learning_rate": 0.1,
            },
        }
    )
    hashes = {mechanism_hash(m) for m in (constant, schedule, per_step)}
    assert len(hashes) == 1
    assert canonical_mechanism(per_step)["schedule"] == [{"steps": 700, **SEGMENT}]


def test_different_mechanisms_hash_differently() -> None:
    base = mechanism_hash(parse_mechanism(DP_SGD))
    for change in ({"steps": 701}, {"noise_multiplier": 1.01}, {"optimizer": "adam"}):
        assert mechanism_hash(parse_mechanism({**DP_SGD, **change})) != base


def test_gaussian_noise_std_and_multiplier_spellings_agree() -> None:
    a = parse_mechanism({"type": "gaussian", "sensitivity": 2.0, "noise_std": 6.0, "count": 3})
    b = parse_mechanism(
        {"type": "gaussian", "sensitivity": 2.0, "noise_multiplier": 3.0, "count": 3}
    )
    assert mechanism_hash(a) == mechanism_hash(b)
    assert a.sigma == b.sigma == 3.0


def test_rdp_curve_order_does_not_matter_but_contradictions_do() -> None:
    a = parse_mechanism({"type": "rdp_curve", "orders": [2, 8, 4], "epsilons": [0.1, 0.5, 0.2]})
    b = parse_mechanism({"type": "rdp_curve", "orders": [4, 2, 8], "epsilons": [0.2, 0.1, 0.5]})
    assert mechanism_hash(a) == mechanism_hash(b)
    with pytest.raises(ValidationError, match="given twice"):
        parse_mechanism({"type": "rdp_curve", "orders": [2, 2], "epsilons": [0.1, 0.2]})


def test_per_step_schedule_merges_runs_of_equal_steps() -> None:
    sigmas = [1.0] * 5 + [2.0] * 3 + [1.0] * 2
    mech = parse_mechanism(
        {
            "type": "dp_sgd",
            "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
        }
    )
    assert isinstance(mech, DPSGD)
    assert [(s.steps, s.noise_multiplier) for s in mech.segments()] == [
        (5, 1.0),
        (3, 2.0),
        (2, 1.0),
    ]
    assert mech.total_steps == 10


def test_per_group_clipping_has_effective_multiplier_sigma_over_sqrt_groups() -> None:
    groups = [{"clipping_norm": c, "noise_multiplier": 2.0} for c in (0.5, 1.0, 3.0, 7.0)]
    mech = parse_mechanism({"type": "dp_sgd", "sampling_rate": 0.01, "steps": 10, "groups": groups})
    assert isinstance(mech, DPSGD)
    seg = mech.segments()[0]
    assert seg.effective_noise_multiplier == pytest.approx(2.0 / math.sqrt(4), rel=1e-12)
    assert seg.total_clipping_norm == pytest.approx(math.sqrt(0.25 + 1 + 9 + 49))
    mixed = [
        {"clipping_norm": 1.0, "noise_multiplier": 1.0},
        {"clipping_norm": 1.0, "noise_multiplier": 3.0},
    ]
    mech = parse_mechanism({"type": "dp_sgd", "sampling_rate": 0.01, "steps": 1, "groups": mixed})
    assert isinstance(mech, DPSGD)
    assert mech.segments()[0].effective_noise_multiplier == pytest.approx(1 / math.sqrt(1 + 1 / 9))


def test_shuffle_sampling_needs_explicit_poisson_approximation() -> None:
    shuffle = {**DP_SGD, "sampling": "shuffle"}
    with pytest.raises(ValidationError, match="accept_poisson_approximation"):
        parse_mechanism(shuffle)
    mech = parse_mechanism({**shuffle, "accept_poisson_approximation": True})
    assert isinstance(mech, DPSGD) and mech.heuristic
    assert canonical_mechanism(mech)["accept_poisson_approximation"] is True


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({**DP_SGD, "sampling_rate": 0}, "sampling_rate"),
        ({**DP_SGD, "sampling_rate": 1.2}, "sampling_rate"),
        ({**DP_SGD, "noise_multiplier": -1}, "noise_multiplier"),
        ({**DP_SGD, "steps": 0}, "steps"),
        ({**DP_SGD, "steps": 1.5}, "steps"),
        ({**DP_SGD, "steps": True}, "steps"),
        ({**DP_SGD, "sampling_rate": "0.1"}, "sampling_rate"),
        ({**DP_SGD, "optimizer": "lion"}, "optimizer"),
        ({**DP_SGD, "surprise": 1}, "surprise"),
        ({"type": "epsilon_delta", "epsilon": 1.0, "delta": 1.0}, "delta"),
        ({"type": "epsilon_delta", "epsilon": float("inf"), "delta": 0.1}, "epsilon"),
        ({"type": "rdp_curve", "orders": [1.0], "epsilons": [0.1]}, "orders.0"),
        ({"type": "rdp_curve", "orders": [2.0], "epsilons": [-0.1]}, "epsilons.0"),
        (
            {
                "type": "balanced_iteration_subsampling",
                "iterations": 10,
                "participations": 0,
                "noise_multiplier": 1.0,
                "clipping_norm": 1.0,
            },
            "participations",
        ),
    ],
)
def test_invalid_fields_are_named(data: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_mechanism(data)
    assert field in [e["field"] for e in error_messages(info.value)]


@pytest.mark.parametrize(
    "data",
    [
        {**DP_SGD, "schedule": [{"steps": 1, **SEGMENT}]},
        {"type": "dp_sgd", "sampling_rate": 0.1, "noise_multiplier": 1.0, "clipping_norm": 1.0},
        {
            "type": "dp_sgd",
            "per_step": {
                "sampling_rate": [0.1, 0.1],
                "noise_multiplier": [1.0],
                "clipping_norm": 1.0,
            },
        },
        {
            "type": "dp_sgd",
            "per_step": {"sampling_rate": 0.1, "noise_multiplier": 1.0, "clipping_norm": 1.0},
        },
        {"type": "gaussian", "sensitivity": 1.0, "noise_std": 1.0, "noise_multiplier": 1.0},
        {
            "type": "balanced_iteration_subsampling",
            "iterations": 10,
            "participations": 11,
            "noise_multiplier": 1.0,
            "clipping_norm": 1.0,
        },
        {
            "type": "dp_sgd",
            "sampling_rate": 0.1,
            "steps": 3,
            "noise_multiplier": 1.0,
            "clipping_norm": 1.0,
            "groups": [{"clipping_norm": 1.0, "noise_multiplier": 1.0}],
        },
    ],
    ids=[
        "two-spellings",
        "no-steps",
        "unequal-lists",
        "no-lists",
        "two-noises",
        "k-over-t",
        "groups-and-flat",
    ],
)
def test_contradictory_spellings_are_refused(data: dict) -> None:
    with pytest.raises(ValidationError):
        parse_mechanism(data)
