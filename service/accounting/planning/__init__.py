"""Plans: the best random selection or linear combination that meets a target (eps, delta).

Pure: candidates come in with their mechanisms and profiles, a ``Plan`` goes out.
One module per method behind ``make_plan``'s dispatch table: ``rs`` (Theorems 5.1/5.2),
``lc`` (the sound LC bound of ``lc.accountant``), ``auto`` (the better of the two),
``checkpoints`` (averaging one run, or shipping its checkpoints as an ensemble) and
``validation`` (weights scored on a public split, bounded by the joint release of every
model scored). Every plan's achieved epsilon is recomputed with the full bound for the
weights returned; an infeasible target raises ``InfeasibleTarget`` with the smallest
epsilon found reachable.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from service.accounting.conversions import check_delta, round_up
from service.accounting.planning.auto import plan_auto
from service.accounting.planning.checkpoints import average_weights, plan_checkpoint_average
from service.accounting.planning.lc import lc_candidates, plan_lc
from service.accounting.planning.rs import curves_at, plan_rs
from service.accounting.planning.signal import SIGNAL_NOTE, noise_to_signal
from service.accounting.planning.types import (
    AccountantName,
    Candidate,
    Evaluate,
    Method,
    MetricSource,
    Objective,
    Plan,
    PlanRequestSpec,
    noise_variance,
)
from service.accounting.planning.validation import plan_validation
from service.errors import InvalidInput

#: the metric a checkpoint plan's uncertainty is computed from when the request names
#: it: each checkpoint's accuracy on the dataset's public validation split
SPLIT_METRIC = "validation_accuracy"

_BY_METHOD: dict[str, Callable[[list[Candidate], PlanRequestSpec, str], Plan]] = {
    "rs": plan_rs,
    "lc": plan_lc,
    "auto": plan_auto,
}


def default_objective(spec: PlanRequestSpec) -> str:
    """'signal' (the noise-to-signal ratio of each model's training, read from the
    mechanisms only: ``planning.signal``) unless the request names an objective, or
    names a metric, which asks for objective 'metric'."""
    if spec.objective is not None:
        return spec.objective
    return "metric" if spec.metric and spec.method == "rs" else "signal"


def objective_note(objective: str, spec: PlanRequestSpec) -> str:
    """Which objective chose the plan, in words (the first note of every plan)."""
    if objective == "signal":
        return SIGNAL_NOTE
    if objective == "noise":
        return (
            "objective 'noise': the merged noise variance sum_t (lr sigma C)^2 (lower is "
            "better); it grows with every step, so it favours the least trained models"
        )
    if objective == "metric":
        return (
            f"objective 'metric': {'largest' if spec.metric_goal == 'max' else 'smallest'} "
            f"expected {spec.metric!r}, metric_source {spec.metric_source!r}"
        )
    return "objective 'validation': accuracy of the merged weights on the public validation split"


def reads_models(spec: PlanRequestSpec) -> bool:
    """Whether the plan's answer is computed from the models themselves, not only from
    their mechanisms: weights scored on the validation split (forward passes through
    every model scored) or a selection read from the models' own metrics
    (``metric_source: "models"``). Such an answer, dry run or not, is a function of
    every model read, so it exposes them (Theorem 6.1 bounds it by their joint
    release). A private selection (``metric_source: "private"``) reads them too, and
    costs its own epsilon besides. The mechanism objectives read the mechanisms only.
    A checkpoint plan (``checkpoint_average``, ``ensemble``) reads them when its
    uncertainty is asked of the public validation split (``SPLIT_METRIC``)."""
    if spec.method in ("checkpoint_average", "ensemble"):
        return spec.metric == SPLIT_METRIC
    objective = default_objective(spec)
    if objective == "validation":
        return True
    return (
        objective == "metric"
        and spec.metric_source in ("models", "private")
        and spec.method in ("rs", "auto")
    )


def make_plan(
    candidates: list[Candidate], spec: PlanRequestSpec, evaluate: Evaluate | None = None
) -> Plan:
    if not candidates:
        raise InvalidInput("no candidate models: register models for this dataset first")
    check_delta(spec.delta)
    if not (spec.epsilon > 0 and math.isfinite(spec.epsilon)):
        raise InvalidInput(f"epsilon must be finite and > 0, got {spec.epsilon}")
    objective = default_objective(spec)
    if objective == "validation":
        plan = plan_validation(candidates, spec, evaluate)
    elif spec.method in ("checkpoint_average", "ensemble"):
        return _named(plan_checkpoint_average(candidates, spec), candidates)
    else:
        plan = _BY_METHOD[spec.method](candidates, spec, objective)
    plan.notes = [
        objective_note(objective, spec),
        *spec.context_notes,
        *plan.notes,
        *released_notes(plan, candidates),
    ]
    return _named(plan, candidates)


def _named(plan: Plan, candidates: list[Candidate]) -> Plan:
    shown = set(plan.weights) | set(plan.exposed or ())
    plan.names = {c.id: c.name for c in candidates if c.id in shown and c.name}
    return plan


def released_notes(plan: Plan, candidates: list[Candidate]) -> list[str]:
    """What the plan releases, in one plain sentence, where it could surprise: one model
    (whatever the method), or an LC whose certificate exceeds every merged model's own."""
    by_id = {c.id: c for c in candidates}
    support = [by_id[m] for m, w in plan.weights.items() if w > 0 and m in by_id]
    if len(support) == 1:
        only = support[0]
        own = min(only.profile.epsilon(plan.delta, a) for a in ("rdp", "pld"))
        what = {"lc": "linear combination", "rs": "random selection"}.get(plan.method, plan.method)
        return [
            f"this {what} releases one model, {only.label} ({only.id}), unchanged: its own "
            f"epsilon at delta {plan.delta:g} is {round_up(own):g}"
        ]
    if plan.method == "lc" and support:
        alone = {
            c.label: min(c.profile.epsilon(plan.delta, a) for a in ("rdp", "pld")) for c in support
        }
        if plan.epsilon > max(alone.values()):
            worst = max(alone, key=lambda k: alone[k])
            return [
                f"this linear combination of {len(support)} models is certified at epsilon "
                f"{round_up(plan.epsilon):g}, more than any one of them costs alone (the "
                f"largest, {worst}, {round_up(alone[worst]):g}): the merge is paid for as their "
                "joint release, not as its least private input"
            ]
    return []


__all__ = [
    "SPLIT_METRIC",
    "AccountantName",
    "Candidate",
    "Evaluate",
    "Method",
    "MetricSource",
    "Objective",
    "Plan",
    "PlanRequestSpec",
    "average_weights",
    "curves_at",
    "default_objective",
    "lc_candidates",
    "make_plan",
    "noise_to_signal",
    "noise_variance",
    "objective_note",
    "reads_models",
    "released_notes",
]
