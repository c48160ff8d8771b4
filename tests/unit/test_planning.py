"""Plans: frontiers, refusals, infeasible targets."""

from __future__ import annotations

import numpy as np
import pytest

from service.accounting.lc import accountant as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.planning.guarantees import guarantee
from service.accounting.profiles.profile import compute_profile
from service.errors import InfeasibleTarget, InvalidInput, Unsupported
from tests.helpers import sgd

SHIFT = 0.02  # n = 100 samples clipped to [-1, 1]


def candidate(
    mid: str,
    mech: dict,
    run: str | None = None,
    step: int | None = None,
    sig: str = "s",
    **metrics: float,
) -> Candidate:
    m = parse_mechanism(mech)
    return Candidate(mid, m, compute_profile(m), dict(metrics), run or mid, step, sig)


@pytest.fixture(scope="module")
def mean_estimation() -> list[Candidate]:
    return [
        candidate("low-noise", {"type": "gaussian", "sensitivity": SHIFT, "noise_std": 0.01}),
        candidate("high-noise", {"type": "gaussian", "sensitivity": SHIFT, "noise_std": 0.04}),
    ]


def test_mean_estimation_lc_beats_rs_and_pld_beats_rdp(mean_estimation) -> None:
    """Sections 4.1 and 8.1: at every target between the two models, LC's MSE is at most
    RS's under the same accountant, and PLD reaches at least as low an MSE as RDP."""
    eps_hi = mean_estimation[0].profile.epsilon(1e-5, "pld")
    eps_lo = mean_estimation[1].profile.epsilon(1e-5, "rdp")
    for target in np.linspace(eps_lo * 1.05, eps_hi * 0.95, 5):
        mse = {}
        for method in ("rs", "lc"):
            for acc in ("rdp", "pld"):
                plan = make_plan(
                    mean_estimation,
                    PlanRequestSpec(float(target), 1e-5, method, acc, "noise"),
                )
                assert plan.epsilon <= target
                mse[method, acc] = plan.objective_value
                if method == "lc":
                    lam = [plan.weights.get(c.id, 0.0) for c in mean_estimation]
                    g = guarantee(mean_estimation, lam, "lc", 1e-5, ("rdp", "pld"))
                    assert g.by_accountant["pld"] <= g.by_accountant["rdp"]
        for acc in ("rdp", "pld"):
            assert mse["lc", acc] <= mse["rs", acc] * (1 + 1e-9)
        for method in ("rs", "lc"):
            assert mse[method, "pld"] <= mse[method, "rdp"] * (1 + 1e-3)


def test_infeasible_target_reports_the_smallest_reachable_epsilon(mean_estimation) -> None:
    with pytest.raises(InfeasibleTarget) as info:
        make_plan(mean_estimation, PlanRequestSpec(0.01, 1e-5, "rs", "rdp", "noise"))
    smallest = min(c.profile.epsilon(1e-5, "rdp") for c in mean_estimation)
    assert info.value.extra["min_epsilon"] == pytest.approx(smallest, rel=1e-5)
    assert info.value.extra["min_epsilon"] >= smallest
    # and that epsilon is then reachable
    plan = make_plan(
        mean_estimation,
        PlanRequestSpec(info.value.extra["min_epsilon"], 1e-5, "rs", "rdp", "noise"),
    )
    assert plan.epsilon <= info.value.extra["min_epsilon"]


def test_rs_is_feasible_wherever_one_model_alone_meets_the_target() -> None:
    cands = [
        candidate(f"m{i}", sgd(s), accuracy=a)
        for i, (s, a) in enumerate([(0.8, 0.9), (1.5, 0.85), (3.0, 0.7)])
    ]
    for c in cands:
        for acc in ("rdp", "pld"):
            target = c.profile.epsilon(1e-5, acc) * 1.0001
            spec = PlanRequestSpec(
                target, 1e-5, "rs", acc, "metric", "accuracy", "max", metric_source="prior"
            )
            plan = make_plan(cands, spec)
            assert plan.epsilon <= target
            assert plan.expected_utility is not None
            assert plan.expected_utility >= c.metrics["accuracy"] - 1e-12


def test_lc_is_refused_with_a_reason_for_named_incompatible_models() -> None:
    base = candidate("a", sgd(1.0), run="r1", step=100)
    cases = {
        "checkpoints of one run": [base, candidate("b", sgd(1.0, steps=800), run="r1", step=800)],
        "tensor names": [base, candidate("c", sgd(2.0), sig="other")],
        "non-private": [base, candidate("e", {"type": "non_private"})],
    }
    for reason, cands in cases.items():
        with pytest.raises(Unsupported, match=reason):
            make_plan(cands, PlanRequestSpec(5.0, 1e-5, "lc", "rdp", "noise", strict=True))
        rs_plan = make_plan(cands, PlanRequestSpec(5.0, 1e-5, "rs", "rdp", "noise"))
        assert rs_plan.method == "rs"


def test_implicit_candidates_drop_what_lc_cannot_use_and_say_so() -> None:
    cands = [
        candidate("early", sgd(1.0, steps=200), run="r1", step=200),
        candidate("late", sgd(1.0, steps=400), run="r1", step=400),
        candidate("other", sgd(2.0), run="r2"),
        candidate("adam", sgd(2.0, optimizer="adam"), run="r3"),
    ]
    plan = make_plan(cands, PlanRequestSpec(5.0, 1e-5, "lc", "rdp", "noise"))
    assert "early" not in plan.weights  # one run is represented by its latest checkpoint
    joined = " ".join(plan.notes)  # adam may be merged, accounted as its joint release
    assert "early" in joined and "adam" in joined


def test_models_without_a_mergeable_last_step_are_accounted_as_their_joint_release() -> None:
    cands = [
        candidate("adam", {**sgd(1.5), "optimizer": "adam"}),
        candidate("adam2", {**sgd(2.0), "optimizer": "adam"}),
    ]
    cands = [Candidate(c.id, c.mechanism, c.profile, {}, c.id, None, "s") for c in cands]
    plan = make_plan(cands, PlanRequestSpec(20.0, 1e-5, "lc", "best", "noise", strict=True))
    assert "Theorem 6.1" in plan.bound
    assert any("non-linearly" in n for n in plan.notes)
    if len(plan.weights) == 2:
        eps = lc.joint_epsilon([c.profile for c in cands], 1e-5, plan.accountant)
        assert plan.epsilon == pytest.approx(eps) and eps <= 20.0


def test_a_one_shot_gaussian_merges_with_dp_sgd_runs_soundly() -> None:
    cands = [
        candidate("g", {"type": "gaussian", "sensitivity": 1.0, "noise_std": 4.0}),
        candidate("s", sgd(1.5)),
    ]
    plan = make_plan(cands, PlanRequestSpec(10.0, 1e-5, "lc", "best", "noise"))
    lam = [plan.weights.get(c.id, 0.0) for c in cands]
    if len(plan.weights) == 2:
        g = guarantee(cands, lam, "lc", 1e-5, ("pld",))
        # at least the DP-SGD run before its last step, released alone
        prefix = compute_profile(parse_mechanism(sgd(1.5, steps=399)))
        assert g.by_accountant["pld"] >= prefix.epsilon(1e-5, "pld") * (1 - 1e-3)
    assert plan.epsilon <= 10.0


def test_objectives_lc_cannot_score_are_refused() -> None:
    cands = [candidate("a", sgd(1.0), accuracy=0.9), candidate("b", sgd(2.0), accuracy=0.8)]
    metric = {"metric": "accuracy", "metric_goal": "max", "metric_source": "prior"}
    with pytest.raises(Unsupported, match="metric"):
        make_plan(cands, PlanRequestSpec(5.0, 1e-5, "lc", "rdp", "metric", **metric))  # type: ignore[arg-type]
    with pytest.raises(Unsupported, match="validation"):
        make_plan(cands, PlanRequestSpec(5.0, 1e-5, "auto", "rdp", "validation"))
    auto = make_plan(cands, PlanRequestSpec(5.0, 1e-5, "auto", "rdp", "metric", **metric))  # type: ignore[arg-type]
    assert auto.method == "rs" and any("random selection only" in n for n in auto.notes)


def test_auto_picks_the_lower_noise_plan() -> None:
    cands = [candidate("a", sgd(0.9)), candidate("b", sgd(2.5))]
    target = 0.5 * (cands[0].profile.epsilon(1e-5, "rdp") + cands[1].profile.epsilon(1e-5, "rdp"))
    rs_plan = make_plan(cands, PlanRequestSpec(target, 1e-5, "rs", "rdp", "noise"))
    lc_plan = make_plan(cands, PlanRequestSpec(target, 1e-5, "lc", "rdp", "noise"))
    auto = make_plan(cands, PlanRequestSpec(target, 1e-5, "auto", "rdp", "noise"))
    best = min((rs_plan, lc_plan), key=lambda p: p.objective_value)
    assert auto.method == best.method
    assert auto.objective_value == pytest.approx(best.objective_value)


def test_bad_targets_and_empty_candidate_lists_are_invalid() -> None:
    cands = [candidate("a", sgd(1.0))]
    with pytest.raises(ValueError, match="delta"):
        make_plan(cands, PlanRequestSpec(1.0, 1.5))
    with pytest.raises(InvalidInput, match="epsilon"):
        make_plan(cands, PlanRequestSpec(-1.0, 1e-5))
    with pytest.raises(InvalidInput, match="no candidate"):
        make_plan([], PlanRequestSpec(1.0, 1e-5))


def _scored() -> list[Candidate]:
    return [
        candidate(f"m{i}", sgd(s), accuracy=a)
        for i, (s, a) in enumerate([(0.8, 0.9), (1.5, 0.85), (3.0, 0.7)])
    ]


def test_a_metric_without_its_goal_is_refused() -> None:
    with pytest.raises(InvalidInput, match="metric_goal"):
        make_plan(_scored(), PlanRequestSpec(5.0, 1e-5, "rs", "best", "metric", "accuracy"))


def test_selection_read_from_the_models_metrics_costs_their_joint_release() -> None:
    cands = _scored()
    joint = min(lc.joint_epsilon([c.profile for c in cands], 1e-5, a) for a in ("rdp", "pld"))
    spec = PlanRequestSpec(joint * 1.01, 1e-5, "rs", "best", "metric", "accuracy", "max")
    plan = make_plan(cands, spec)
    assert plan.epsilon >= joint * (1 - 1e-9)
    assert sorted(plan.exposed or []) == sorted(c.id for c in cands)
    assert plan.weights == {"m0": 1.0}
    # below the joint release: refused, naming the joint release as the smallest epsilon
    single = min(c.profile.epsilon(1e-5) for c in cands)
    with pytest.raises(InfeasibleTarget) as info:
        make_plan(
            cands, PlanRequestSpec(single * 1.5, 1e-5, "rs", "best", "metric", "accuracy", "max")
        )
    assert info.value.extra["min_epsilon"] >= joint


def test_prior_metrics_keep_theorems_5_and_say_what_was_assumed() -> None:
    cands = _scored()
    target = cands[1].profile.epsilon(1e-5) * 1.01
    spec = PlanRequestSpec(
        target, 1e-5, "rs", "best", "metric", "accuracy", "max", metric_source="prior"
    )
    plan = make_plan(cands, spec)
    assert "Theorem 5" in plan.bound and plan.epsilon <= target
    assert any("prior" in n for n in plan.notes)


def test_the_default_rs_plan_reads_no_metric() -> None:
    plan = make_plan(_scored(), PlanRequestSpec(5.0, 1e-5, "rs"))
    assert plan.objective == "signal"


def test_gaussian_lc_weights_with_unequal_sensitivities_are_optimal() -> None:
    """Fixed Gaussian queries: the plan's merged noise is the optimum found by a fine
    brute-force grid over the simplex (closed-form mu, independent of the planner)."""
    from tests.oracles import gaussian_delta

    specs = [(0.0116, 0.0612), (0.0346, 0.0120), (0.0388, 0.0111)]  # (sensitivity, noise std)
    cands = [
        candidate(f"g{i}", {"type": "gaussian", "sensitivity": d, "noise_std": s})
        for i, (d, s) in enumerate(specs)
    ]
    target = 15.85
    plan = make_plan(cands, PlanRequestSpec(target, 1e-5, "lc", "pld", "noise"))
    best = np.inf
    steps = 240
    for i in range(steps + 1):
        for j in range(steps + 1 - i):
            lam = np.array([i, j, steps - i - j]) / steps
            shift = sum(w * d for w, (d, _) in zip(lam, specs, strict=True))
            std2 = sum((w * s) ** 2 for w, (_, s) in zip(lam, specs, strict=True))
            if gaussian_delta(shift / np.sqrt(std2), target) <= 1e-5:
                best = min(best, float(std2))
    assert plan.objective_value is not None and plan.epsilon <= target
    assert plan.objective_value <= best * 1.001


def test_lc_supports_pruned_by_their_noise_floor_lose_nothing() -> None:
    """Supports are searched in order of their least possible noise and skipped once that
    floor is above the best plan: the plan is as good as searching every support."""
    from functools import partial

    from service.accounting.planning.lc import _supports, lc_candidates, released_profiles
    from service.accounting.planning.search import search_weights
    from service.accounting.planning.types import noise_variance

    cands = [candidate(f"m{i}", sgd(0.9 + 0.15 * i, 60, q=0.05), run=f"r{i}") for i in range(6)]
    for target in (1.2, 2.0, 3.5):
        spec = PlanRequestSpec(target, 1e-5, "lc", "best", "noise")
        plan = make_plan(cands, spec)
        assert plan.epsilon <= target
        kept, inputs, _ = lc_candidates(cands, True)
        released = released_profiles(kept, inputs)
        v = np.array([noise_variance(c.mechanism) for c in kept])
        singles = {i: c.profile.epsilon(1e-5) for i, c in enumerate(kept)}
        values = [v[i] for i, e in singles.items() if e <= target]
        for idx in _supports(inputs, released, v, singles, spec):
            acct = lc.LCAccountant([inputs[i] for i in idx], [released[i] for i in idx], 1e-5)
            for acc in ("pld", "rdp"):
                found, _, _ = search_weights(partial(acct.epsilon, accountant=acc), v[idx], target)
                if found is not None:
                    values.append(float(np.sum(found**2 * v[idx])))
        assert plan.objective_value <= min(values) * (1 + 1e-9)
