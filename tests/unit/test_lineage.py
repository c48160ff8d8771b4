"""prefix_mismatch: when one mechanism is exactly the first steps of another."""

from __future__ import annotations

import pytest

from service.accounting.mechanisms import parse_mechanism
from service.accounting.mechanisms.lineage import prefix_mismatch
from tests.helpers import sgd


def m(data: dict):
    return parse_mechanism(data)


def groups(sigma: float, steps: int, q: float = 0.01) -> dict:
    return {
        "type": "dp_sgd",
        "schedule": [
            {
                "steps": steps,
                "sampling_rate": q,
                "groups": [
                    {"clipping_norm": 1.0, "noise_multiplier": sigma},
                    {"clipping_norm": 0.5, "noise_multiplier": 2.0},
                ],
                "learning_rate": 0.1,
            }
        ],
    }


def test_a_constant_run_is_a_prefix_of_its_longer_self_in_any_spelling() -> None:
    per_step = {
        "type": "dp_sgd",
        "per_step": {
            "sampling_rate": 0.01,
            "noise_multiplier": [1.0] * 30 + [0.7] * 10,
            "clipping_norm": 1.0,
            "learning_rate": 0.1,
        },
    }
    assert prefix_mismatch(m(sgd(1.0, steps=30)), m(per_step)) is None
    assert prefix_mismatch(m(sgd(1.0, steps=30)), m(sgd(1.0, steps=30))) is None
    assert prefix_mismatch(m(groups(1.0, 5)), m(groups(1.0, 9))) is None


@pytest.mark.parametrize(
    ("early", "late", "expected"),
    [
        (
            sgd(1.0, steps=31),
            {
                "type": "dp_sgd",
                "per_step": {
                    "sampling_rate": 0.01,
                    "noise_multiplier": [1.0] * 30 + [0.7] * 10,
                    "clipping_norm": 1.0,
                    "learning_rate": 0.1,
                },
            },
            "step 31: noise_multiplier",
        ),
        (sgd(1.0, steps=50), sgd(1.0, steps=40), "steps 50 > 40"),
        (sgd(1.0, steps=5), sgd(1.0, steps=9, optimizer="sgd_momentum", momentum=0.9), "optimizer"),
        (
            sgd(1.0, steps=5, optimizer="sgd_momentum", momentum=0.5),
            sgd(1.0, steps=9, optimizer="sgd_momentum", momentum=0.9),
            "momentum",
        ),
        (groups(1.0, 5), groups(1.1, 9), "step 1: groups"),
        (groups(1.0, 5), sgd(1.0, steps=9), "step 1: noise_multiplier"),
        (sgd(1.0, steps=5, lr=0.1), sgd(1.0, steps=9, lr=0.05), "step 1: learning_rate"),
        (
            {"type": "gaussian", "sensitivity": 1.0, "noise_std": 2.0, "count": 2},
            {
                "type": "gaussian",
                "sensitivity": 1.0,
                "noise_std": 2.0,
                "count": 5,
                "adaptive": False,
            },
            "adaptive",
        ),
        (
            {"type": "gaussian", "sensitivity": 1.0, "noise_std": 2.0, "count": 2},
            {"type": "gaussian", "sensitivity": 2.0, "noise_multiplier": 1.0, "count": 5},
            "sensitivity",
        ),
        (
            {
                "type": "balanced_iteration_subsampling",
                "iterations": 10,
                "participations": 2,
                "noise_multiplier": 1.0,
                "clipping_norm": 1.0,
                "epochs": 1,
            },
            {
                "type": "balanced_iteration_subsampling",
                "iterations": 10,
                "participations": 3,
                "noise_multiplier": 1.0,
                "clipping_norm": 1.0,
                "epochs": 2,
            },
            "participations",
        ),
        ({"type": "epsilon_delta", "epsilon": 1.0, "delta": 0.0}, sgd(1.0), "only dp_sgd"),
    ],
)
def test_first_mismatch_is_named(early: dict, late: dict, expected: str) -> None:
    why = prefix_mismatch(m(early), m(late))
    assert why is not None and expected in why, why


def test_gaussian_and_bis_prefixes() -> None:
    g = {"type": "gaussian", "sensitivity": 1.0, "noise_std": 2.0}
    assert prefix_mismatch(m({**g, "count": 2}), m({**g, "count": 7})) is None
    spelled = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 2.0, "count": 7}
    assert prefix_mismatch(m({**g, "count": 2}), m(spelled)) is None  # the same noise std
    bis = {
        "type": "balanced_iteration_subsampling",
        "iterations": 10,
        "participations": 2,
        "noise_multiplier": 1.0,
        "clipping_norm": 1.0,
    }
    assert prefix_mismatch(m({**bis, "epochs": 1}), m({**bis, "epochs": 3})) is None
