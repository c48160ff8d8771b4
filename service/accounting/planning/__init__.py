"""Plans: the best random selection or linear combination that meets a target (eps, delta).

Pure: candidates come in with their mechanisms and profiles, a ``Plan`` goes out.
One module per method behind ``make_plan``'s dispatch table: ``rs`` (Theorems 5.1/5.2),
``lc`` (the sound LC bound of ``lc.accountant``), ``auto`` (the better of the two),
``checkpoints`` (averaging one run) and ``validation`` (weights scored on a public
split, bounded by the joint release of every model scored). Every plan's achieved
epsilon is recomputed with the full bound for the weights returned; an infeasible
target raises ``InfeasibleTarget`` with the smallest epsilon found reachable.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from service.accounting.conversions import check_delta
from service.accounting.planning.auto import plan_auto
from service.accounting.planning.checkpoints import average_weights, plan_checkpoint_average
from service.accounting.planning.lc import lc_candidates, plan_lc
from service.accounting.planning.rs import curves_at, plan_rs
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

_BY_METHOD: dict[str, Callable[[list[Candidate], PlanRequestSpec, str], Plan]] = {
    "rs": plan_rs,
    "lc": plan_lc,
    "auto": plan_auto,
}


def default_objective(spec: PlanRequestSpec) -> str:
    """'noise' (reads the mechanisms only) unless the request names an objective, or
    names a metric, which asks for objective 'metric'."""
    if spec.objective is not None:
        return spec.objective
    return "metric" if spec.metric and spec.method == "rs" else "noise"


def reads_models(spec: PlanRequestSpec) -> bool:
    """Whether the plan's answer is computed from the models themselves, not only from
    their mechanisms: weights scored on the validation split (forward passes through
    every model scored) or a selection read from the models' own metrics
    (``metric_source: "models"``). Such an answer, dry run or not, is a function of
    every model read, so it exposes them (Theorem 6.1 bounds it by their joint
    release); the default objective, 'noise', reads the mechanisms only."""
    objective = default_objective(spec)
    if objective == "validation":
        return True
    return (
        objective == "metric" and spec.metric_source == "models" and spec.method in ("rs", "auto")
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
        return plan_validation(candidates, spec, evaluate)
    if spec.method == "checkpoint_average":
        return plan_checkpoint_average(candidates, spec)
    return _BY_METHOD[spec.method](candidates, spec, objective)


__all__ = [
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
    "noise_variance",
    "reads_models",
]
