"""What plans take and give: candidates, the request, the plan, shared helpers."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from service.accounting.conversions import round_up
from service.accounting.mechanisms import DPSGD, Gaussian, Mechanism
from service.accounting.profiles.profile import PrivacyProfile
from service.errors import InfeasibleTarget

Method = Literal["rs", "lc", "auto", "checkpoint_average", "ensemble"]
#: how an ensemble's members' outputs combine: the mean of their probabilities (OPA) or
#: the majority of their labels (OMV), from "Recycling Scraps" (Shejwalkar et al.)
Combine = Literal["mean_probabilities", "majority_vote"]
AccountantName = Literal["rdp", "pld", "best"]
Objective = Literal["metric", "noise", "signal", "validation"]
MetricSource = Literal["models", "prior", "private"]


@dataclass(frozen=True)
class Candidate:
    id: str
    mechanism: Mechanism
    profile: PrivacyProfile
    metrics: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    step: int | None = None
    signature_hash: str = ""
    #: profile of the part of the model LC composes jointly (the run before its last
    #: step), when the caller has it cached; computed on demand otherwise
    released_profile: PrivacyProfile | None = None
    #: the run and step were checked at registration (service.accounting.mechanisms.lineage); an
    #: unverified checkpoint is treated as an independent model
    lineage_verified: bool = False
    #: the model's name, for notes (its id when empty)
    name: str = ""
    #: per metric, how it was computed: "prior" | "models" | "private" (see planning.metrics)
    metric_sources: dict[str, str] = field(default_factory=dict)
    #: per private metric, its declared sensitivity
    metric_sensitivities: dict[str, float] = field(default_factory=dict)
    #: the tensors' names, dtypes and shapes (``{name: {dtype, shape}}``), to name the
    #: first that differs when LC refuses models whose signatures differ
    signature: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return self.name or self.id


def first_difference(a: Candidate, b: Candidate) -> str:
    """The first tensor (in name order) whose presence, shape or dtype differs between
    the two models, described with both sides."""
    left, right = a.signature or {}, b.signature or {}
    for name in sorted(set(left) | set(right)):
        if name not in right:
            return f"tensor {name!r} is in {a.label} only"
        if name not in left:
            return f"tensor {name!r} is in {b.label} only"
        x, y = left[name], right[name]
        if x.get("shape") != y.get("shape") or x.get("dtype") != y.get("dtype"):
            return (
                f"tensor {name!r} is {x.get('shape')} {x.get('dtype')} in {a.label}, "
                f"{y.get('shape')} {y.get('dtype')} in {b.label}"
            )
    return "their signatures differ"


@dataclass
class Plan:
    method: Literal["rs", "lc", "checkpoint_average", "ensemble"]
    accountant: Literal["rdp", "pld"]
    weights: dict[str, float]
    epsilon: float
    delta: float
    objective: Objective
    objective_value: float | None
    expected_utility: float | None
    bound: str
    notes: list[str] = field(default_factory=list)
    heuristic: bool = False
    #: models the release reveals beyond those with weight (weights or a selection
    #: chosen by reading models: every model read)
    exposed: list[str] | None = None
    #: the paper's per-step LC composition for these weights: a labelled comparison,
    #: never a guarantee (it holds only if gradients do not depend on hidden state)
    paper_epsilon: float | None = None
    #: model names by id, for every model with weight or exposed (tables and notes)
    names: dict[str, str] = field(default_factory=dict)
    #: a private selection's own epsilon (pure DP), charged besides the models read
    selection_epsilon: float | None = None
    #: a private selection to draw: {"metric", "eligible", "values", "scale"}; after the
    #: draw {"metric", "eligible", "chosen", "scale"} (the values never leave the service)
    selection: dict[str, Any] | None = None
    #: an ensemble: how its members' outputs combine
    combine: Combine | None = None
    #: checkpoints of one run: the spread of a metric over them as a confidence width on
    #: the released model's metric (``service.plans.uncertainty``), when they carry one
    uncertainty: dict[str, Any] | None = None


#: Accuracy of sum_i w_i theta_i on the dataset's public validation split, by model id.
Evaluate = Callable[[dict[str, float]], float]


@dataclass(frozen=True)
class PlanRequestSpec:
    epsilon: float
    delta: float
    method: Method = "auto"
    accountant: AccountantName = "best"
    objective: Objective | None = None
    metric: str | None = None
    metric_goal: Literal["max", "min"] | None = None
    metric_source: MetricSource = "models"
    strict: bool = False  # the caller named the candidates: refuse rather than drop
    run_id: str | None = None  # checkpoint_average: the run
    last_k: int = 3  # checkpoint_average: how many of its latest checkpoints
    ema_decay: float | None = None  # checkpoint_average: EMA weights instead of uniform
    combine: Combine = "mean_probabilities"  # ensemble: how the members' outputs combine
    #: private selection: the selection's own epsilon (None: SELECTION_SHARE of the target)
    selection_epsilon: float | None = None
    #: why the objective was chosen when the request left it out (notes of the plan)
    context_notes: tuple[str, ...] = ()

    def accountants(self) -> tuple[str, ...]:
        return ("rdp", "pld") if self.accountant == "best" else (self.accountant,)


def noise_variance(mechanism: Mechanism) -> float | None:
    """Variance of the noise a run added to its weights: sum_t (lr sigma C)^2 (Gaussian:
    count * std^2). None when the mechanism does not say (no learning rate, not DP-SGD).
    Reads the mechanism only, never the model."""
    if isinstance(mechanism, Gaussian):
        return float(mechanism.count * mechanism.std**2)
    if isinstance(mechanism, DPSGD):
        total = 0.0
        for seg in mechanism.segments():
            if seg.learning_rate is None:
                return None
            noise = seg.effective_noise_multiplier * seg.total_clipping_norm
            total += seg.steps * (seg.learning_rate * noise) ** 2
        return total
    return None


def score(plan: Plan) -> float:
    """Higher is better: expected metric, or minus the merged noise variance or
    noise-to-signal ratio."""
    value = plan.objective_value if plan.objective_value is not None else -math.inf
    return value if plan.objective in ("metric", "validation") else -value


def infeasible(spec: PlanRequestSpec, min_eps: float, what: str) -> InfeasibleTarget:
    shown = None if not math.isfinite(min_eps) else round_up(min_eps)
    reach = (
        f"the smallest epsilon reachable at delta={spec.delta} is {shown}"
        if shown is not None
        else f"no epsilon is reachable at delta={spec.delta}"
    )
    return InfeasibleTarget(
        f"{what} cannot meet epsilon={spec.epsilon} at delta={spec.delta}: {reach}",
        min_epsilon=shown,
    )
