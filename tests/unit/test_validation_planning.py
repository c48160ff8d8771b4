"""objective 'validation': weights chosen by accuracy keep the joint release's guarantee."""

from __future__ import annotations

import pytest

from service.accounting.lc import accountant as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.profiles.profile import compute_profile
from service.errors import InfeasibleTarget, Unsupported
from tests.helpers import sgd


def candidate(name: str, sigma: float) -> Candidate:
    mech = parse_mechanism(sgd(sigma))
    return Candidate(
        id=name, mechanism=mech, profile=compute_profile(mech), run_id=name, signature_hash="s"
    )


@pytest.fixture(scope="module")
def three() -> list[Candidate]:
    return [candidate("a", 0.9), candidate("b", 1.6), candidate("c", 3.0)]


def spec(epsilon: float, method: str = "lc") -> PlanRequestSpec:
    return PlanRequestSpec(epsilon=epsilon, delta=1e-5, method=method, objective="validation")  # type: ignore[arg-type]


def test_validation_plan_is_guaranteed_by_the_joint_release_of_all_it_scored(three) -> None:
    seen: list[dict[str, float]] = []

    def evaluate(weights: dict[str, float]) -> float:
        seen.append(weights)
        return weights.get("b", 0.0) * 0.9 + weights.get("c", 0.0) * 0.7

    eps_a = three[0].profile.epsilon(1e-5, "pld")
    plan = make_plan(three, spec(eps_a * 0.9), evaluate)
    exposed = plan.exposed or []
    joint = min(
        lc.joint_epsilon([c.profile for c in three if c.id in exposed], 1e-5, acc)
        for acc in ("rdp", "pld")
    )
    assert plan.epsilon == pytest.approx(joint)
    assert plan.epsilon <= eps_a * 0.9
    # every model any scored weighting used is counted as exposed
    assert {m for w in seen for m in w} <= set(exposed)
    assert set(plan.weights) <= set(exposed)
    assert plan.weights.get("b", 0) == pytest.approx(1.0)  # the best weighting found


def test_validation_objective_refuses_random_selection_and_a_missing_split(three) -> None:
    with pytest.raises(Unsupported, match="method 'lc' or 'auto'"):
        make_plan(three, spec(5.0, "rs"), lambda w: 0.5)
    with pytest.raises(Unsupported, match="validation split"):
        make_plan(three, spec(5.0), None)


def test_validation_objective_below_every_model_is_infeasible(three) -> None:
    smallest = three[2].profile.epsilon(1e-5, "pld")
    with pytest.raises(InfeasibleTarget) as info:
        make_plan(three, spec(smallest * 0.5), lambda w: 0.5)
    assert info.value.extra["min_epsilon"] >= smallest


def test_a_validation_plan_scores_only_models_its_guarantee_covers() -> None:
    """Two models that each meet the target alone but not together: scoring both and
    keeping the better would make the answer a function of both, whose joint release
    breaks the target. Only one set, chosen from the mechanisms, may be scored."""
    twins = [candidate("x", 1.6), candidate("y", 1.6)]
    alone = min(twins[0].profile.epsilon(1e-5, acc) for acc in ("rdp", "pld"))
    together = min(lc.joint_epsilon([c.profile for c in twins], 1e-5, a) for a in ("rdp", "pld"))
    assert together > alone * 1.05
    target = (alone + together) / 2
    for better in ("x", "y"):  # whichever scores better, the answer may read only one
        seen: list[dict[str, float]] = []

        def evaluate(weights: dict[str, float], better: str = better, seen: list = seen) -> float:
            seen.append(weights)
            return weights.get(better, 0.0)

        plan = make_plan(twins, spec(target), evaluate)
        exposed = set(plan.exposed or [])
        assert {m for w in seen for m in w} <= exposed
        covered = min(
            lc.joint_epsilon([c.profile for c in twins if c.id in exposed], 1e-5, acc)
            for acc in ("rdp", "pld")
        )
        assert plan.epsilon == pytest.approx(covered) and covered <= target
