"""The dp_event mechanism: an allow-listed DpEvent tree, bounded, accounted soundly."""

from __future__ import annotations

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib
from pydantic import ValidationError

from service.accounting.cost import CostLimits, refusal
from service.accounting.lc.accountant import lc_input
from service.accounting.mechanisms import NODE_KINDS, error_messages, parse_mechanism
from service.accounting.mechanisms.dp_accounting_events import (
    CONSTRUCTORS,
    supported,
    to_dp_accounting,
)
from service.accounting.mechanisms.dp_event import MAX_DEPTH, MAX_NODES
from service.accounting.profiles.profile import compute_profile


def gaussian(sigma: float) -> dict:
    return {"kind": "GaussianDpEvent", "noise_multiplier": sigma}


def laplace(b: float) -> dict:
    return {"kind": "LaplaceDpEvent", "noise_multiplier": b}


def poisson(q: float, event: dict) -> dict:
    return {"kind": "PoissonSampledDpEvent", "sampling_probability": q, "event": event}


def times(count: int, event: dict) -> dict:
    return {"kind": "SelfComposedDpEvent", "count": count, "event": event}


def composed(*events: dict) -> dict:
    return {"kind": "ComposedDpEvent", "events": list(events)}


def dp_event(event: dict) -> dict:
    return {"type": "dp_event", "event": event}


def dp_sgd(q: float, sigma: float, steps: int) -> dict:
    return {
        "type": "dp_sgd",
        "sampling_rate": q,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "steps": steps,
        "learning_rate": 0.1,
    }


@pytest.mark.parametrize("delta", [1e-5, 1e-7])
def test_a_dp_event_equal_to_a_dp_sgd_record_gets_the_same_epsilon(delta: float) -> None:
    event = compute_profile(parse_mechanism(dp_event(times(700, poisson(0.01, gaussian(1.1))))))
    record = compute_profile(parse_mechanism(dp_sgd(0.01, 1.1, 700)))
    for accountant in ("rdp", "pld", "best"):
        ours, theirs = event.epsilon(delta, accountant), record.epsilon(delta, accountant)
        assert math.isfinite(ours)
        assert abs(ours - theirs) <= 1e-3 * theirs, (accountant, ours, theirs)


def test_a_composed_schedule_equals_the_dp_sgd_schedule() -> None:
    tree = composed(
        times(300, poisson(0.01, gaussian(1.2))), times(400, poisson(0.02, gaussian(1.0)))
    )
    schedule = {
        "type": "dp_sgd",
        "schedule": [
            {"steps": 300, "sampling_rate": 0.01, "noise_multiplier": 1.2, "clipping_norm": 1.0},
            {"steps": 400, "sampling_rate": 0.02, "noise_multiplier": 1.0, "clipping_norm": 1.0},
        ],
    }
    ours = compute_profile(parse_mechanism(dp_event(tree))).epsilon(1e-5)
    theirs = compute_profile(parse_mechanism(schedule)).epsilon(1e-5)
    assert abs(ours - theirs) <= 1e-3 * theirs


@pytest.mark.parametrize(
    "kind",
    [
        "UnsupportedDpEvent",
        "ZCDpEvent",
        "dp_accounting.dp_event.GaussianDpEvent",
        "os.system",
        "__class__",
        "gaussiandpevent",
    ],
)
def test_a_kind_off_the_allow_list_is_refused(kind: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_mechanism(dp_event(times(3, {"kind": kind, "noise_multiplier": 1.0})))
    (err,) = error_messages(info.value, prefix="mechanism")
    assert err["field"] == "mechanism.event.event"
    assert "does not match any of the expected tags" in err["message"]


def test_the_allow_list_is_exactly_the_constructors_table() -> None:
    assert set(NODE_KINDS) == set(CONSTRUCTORS)


@pytest.mark.parametrize(
    "event, message",
    [
        ({"kind": "GaussianDpEvent", "noise_multiplier": 1.0, "extra": 1}, "Extra inputs"),
        (gaussian(0.0), "greater than 0"),
        (poisson(1.5, gaussian(1.0)), "less than or equal to 1"),
        (times(-1, gaussian(1.0)), "greater than or equal to 0"),
        (times(10**5, times(10**5, gaussian(1.0))), "over the limit"),
        (
            {
                "kind": "SampledWithoutReplacementDpEvent",
                "source_dataset_size": 10,
                "sample_size": 11,
                "event": gaussian(1.0),
            },
            "sample_size",
        ),
    ],
)
def test_invalid_fields_are_refused_with_the_field_named(event: dict, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_mechanism(dp_event(event))
    assert message in str(info.value)


def test_deep_and_wide_trees_are_refused_before_validation() -> None:
    deep = gaussian(1.0)
    for _ in range(MAX_DEPTH):
        deep = times(1, deep)
    with pytest.raises(ValidationError, match="deeper than"):
        parse_mechanism(dp_event(deep))
    parse_mechanism(dp_event(deep["event"]))  # one level less is fine
    wide = composed(*[gaussian(1.0)] * MAX_NODES)
    with pytest.raises(ValidationError, match="more than"):
        parse_mechanism(dp_event(wide))


def test_laplace_compositions_sit_between_the_optimistic_pld_and_pure_dp() -> None:
    """Oracle: k Laplace steps of scale b are exactly (k / b)-DP; dp_accounting's
    optimistic PLD is a lower bound on the true curve."""
    k, b, delta = 20, 10.0, 1e-6
    profile = compute_profile(parse_mechanism(dp_event(times(k, laplace(b)))))
    optimistic = (
        pldlib.from_laplace_mechanism(
            b, pessimistic_estimate=False, value_discretization_interval=1e-4
        )
        .self_compose(k)
        .get_epsilon_for_delta(delta)
    )
    for accountant in ("rdp", "pld", "best"):
        eps = profile.epsilon(delta, accountant)
        assert optimistic <= eps <= k / b * (1 + 1e-9), (accountant, eps, optimistic)


def test_a_mixed_tree_is_bounded_by_both_accountants_and_above_the_optimistic_pld() -> None:
    tree = composed(times(200, poisson(0.05, gaussian(1.5))), times(5, laplace(20.0)))
    profile = compute_profile(parse_mechanism(dp_event(tree)))
    assert profile.rdp is not None and profile.pld is not None
    delta = 1e-5
    opt = (
        pldlib.from_gaussian_mechanism(
            1.5, sampling_prob=0.05, pessimistic_estimate=False, value_discretization_interval=1e-4
        )
        .self_compose(200)
        .compose(
            pldlib.from_laplace_mechanism(
                20.0, pessimistic_estimate=False, value_discretization_interval=1e-4
            ).self_compose(5)
        )
    )
    lower = opt.get_epsilon_for_delta(delta)
    pld, rdp = profile.epsilon(delta, "pld"), profile.epsilon(delta, "rdp")
    assert lower <= pld <= rdp
    assert pld <= lower * 1.02  # pessimistic and optimistic PLDs close in on the truth


def test_a_poisson_sampled_laplace_has_only_a_pld() -> None:
    mech = parse_mechanism(dp_event(times(100, poisson(0.1, laplace(2.0)))))
    assert supported(mech) == {"rdp": False, "pld": True}
    profile = compute_profile(mech)
    assert math.isinf(profile.epsilon(1e-5, "rdp"))
    assert 0 < profile.epsilon(1e-5, "pld") < 100 / 2.0


@pytest.mark.parametrize(
    "event",
    [
        {"kind": "RandomizedResponseDpEvent", "noise_parameter": 0.5, "num_buckets": 4},
        {
            "kind": "SampledWithoutReplacementDpEvent",
            "source_dataset_size": 1000,
            "sample_size": 10,
            "event": gaussian(1.0),
        },
    ],
)
def test_replace_one_only_events_are_refused_with_the_reason(event: dict) -> None:
    reason = refusal(parse_mechanism(dp_event(times(10, event))), CostLimits())
    assert reason is not None and "replace-one" in reason


def test_a_pld_only_tree_too_costly_is_refused() -> None:
    mech = parse_mechanism(dp_event(times(10**9, poisson(0.5, laplace(0.01)))))
    reason = refusal(mech, CostLimits())
    assert reason is not None and "no RDP curve" in reason
    assert (
        refusal(parse_mechanism(dp_event(times(100, poisson(0.1, laplace(2.0))))), CostLimits())
        is None
    )


def test_a_non_private_leaf_makes_the_model_non_private() -> None:
    mech = parse_mechanism(dp_event(composed(gaussian(2.0), {"kind": "NonPrivateDpEvent"})))
    assert compute_profile(mech).epsilon(1e-5) == math.inf


def test_no_op_branches_cost_nothing() -> None:
    alone = compute_profile(parse_mechanism(dp_event(times(10, gaussian(3.0)))))
    padded = compute_profile(
        parse_mechanism(dp_event(composed(times(10, gaussian(3.0)), {"kind": "NoOpDpEvent"})))
    )
    assert padded.epsilon(1e-5) == pytest.approx(alone.epsilon(1e-5), rel=1e-9)


def test_linear_combination_bounds_a_dp_event_by_its_joint_release() -> None:
    mech = parse_mechanism(dp_event(times(100, poisson(0.01, gaussian(1.0)))))
    inp = lc_input(mech)
    assert inp.final is None and inp.released == mech
    assert inp.note is not None and "learning rate" in inp.note


def test_events_are_built_from_our_own_table() -> None:
    built = to_dp_accounting(
        parse_mechanism(dp_event(times(3, poisson(0.5, gaussian(1.0))))).event  # type: ignore[union-attr]
    )
    assert type(built).__name__ == "SelfComposedDpEvent"
    assert built.count == 3 and built.event.sampling_probability == 0.5


def test_a_tree_of_many_distinct_events_keeps_only_its_rdp_curve() -> None:
    """Each distinct leaf is one more PLD convolution: past the limit only RDP is kept."""
    tree = composed(*[times(3, laplace(10.0 + i)) for i in range(70)])
    profile = compute_profile(parse_mechanism(dp_event(tree)))
    assert profile.pld is None and any("over the limit" in n for n in profile.notes)
    pure = sum(3 / (10.0 + i) for i in range(70))
    assert 0 < profile.epsilon(1e-6) <= pure * (1 + 1e-9)
    sampled = composed(*[times(3, poisson(0.1, laplace(1.0 + i))) for i in range(70)])
    reason = refusal(parse_mechanism(dp_event(sampled)), CostLimits())
    assert reason is not None and "no RDP curve" in reason
