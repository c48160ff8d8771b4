"""The privacy/utility frontier of RS and LC under RDP and PLD for a dataset's models
(the paper's Figures 1 and 3), and the plans behind the plan explorer's slider: pure
functions of the candidates, run as plan-process tasks (``service.plans.tasks.TASKS``:
"frontier" and "explorer") within the plan budgets, like every other plan.

Each point is a real plan at a target, chosen by the default mechanism objective
('signal': it reads no model). Utility is the dataset's metric when every model has
one the viewer may see: E_pi[metric] for RS (its expected value), the model's own
metric for an LC plan that releases one model; an LC merge of several models has no
known metric without evaluating it, so it is not drawn (the chart says so). Without
a metric, utility falls back to the merged noise variance (E_pi[v_i] for RS,
sum_i lambda_i^2 v_i for LC; lower is better), labelled as a proxy. LC under PLD is
drawn at the epsilon PLD proves for the LC-RDP plan's own weights (the same merged
model, a tighter bound). Every LC point is the sound bound; the paper's per-step
composition is drawn beside it (noise proxy only), dashed and labelled: it holds
only if gradients do not depend on hidden state, which DP-SGD does not give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.accounting.conversions import round_up
from service.accounting.planning import Candidate, Plan, PlanRequestSpec, make_plan, noise_variance
from service.accounting.planning.guarantees import guarantee
from service.errors import InfeasibleTarget, Unsupported

PAPER_LABEL = "LC, paper's composition (holds only if gradients do not depend on hidden state)"


#: the y axis when no metric is known
PROXY_LABEL = "merged noise variance (a proxy: no metric known; lower is better)"


@dataclass
class Frontier:
    """The frontier's points by series (label -> (epsilon, utility)); the dashboard
    draws it (``service.dashboard.frontier``). Utility is ``metric`` when set, else
    the merged noise variance (``y_label`` says which)."""

    delta: float
    inputs: list[tuple[str, float, float]]  # (model name, epsilon (best), utility)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    metric: str | None = None

    @property
    def y_label(self) -> str:
        return f"{self.metric} (RS: expected)" if self.metric else PROXY_LABEL


def _spec(
    epsilon: float, delta: float, method: str, accountant: str, objective: str = "noise"
) -> PlanRequestSpec:
    return PlanRequestSpec(
        epsilon=epsilon,
        delta=delta,
        method=method,  # type: ignore[arg-type]
        accountant=accountant,  # type: ignore[arg-type]
        objective=objective,  # type: ignore[arg-type]
    )


def compute_frontier(
    candidates: list[Candidate],
    names: dict[str, str],
    delta: float,
    metric: str | None = None,
    points: int = 8,
) -> Frontier:
    """``metric``: the metric to plot, when the viewer may see it (None: the proxy)."""
    if metric and all(metric in c.metrics for c in candidates if not c.profile.non_private):
        return _metric_frontier(candidates, names, delta, metric, points)
    scored = [(c, noise_variance(c.mechanism)) for c in candidates]
    usable = [(c, v) for c, v in scored if v is not None and not c.profile.non_private]
    inputs = [(names.get(c.id, c.id), c.profile.epsilon(delta, "best"), v) for c, v in usable]
    frontier = Frontier(delta, inputs)
    if len(usable) < len(candidates):
        frontier.notes.append(
            f"{len(candidates) - len(usable)} model(s) without a known noise variance left out"
        )
    finite = [e for _, e, _ in inputs if math.isfinite(e)]
    if not finite:
        return frontier
    lo, hi = min(finite), max(finite)
    targets = np.geomspace(lo, hi * 1.05, points) if hi > lo else np.array([lo])
    cands = [c for c, _ in usable]
    for t in targets:
        for method, acc, label in (("rs", "rdp", "RS, RDP"), ("rs", "pld", "RS, PLD")):
            plan = _try(cands, _spec(float(t), delta, method, acc))
            if plan is not None and plan.objective_value is not None:
                frontier.series.setdefault(label, []).append((plan.epsilon, plan.objective_value))
        plan = _try(cands, _spec(float(t), delta, "lc", "rdp"))
        if plan is None or plan.objective_value is None:
            continue
        frontier.series.setdefault("LC, RDP", []).append((plan.epsilon, plan.objective_value))
        if plan.paper_epsilon is not None and len(plan.weights) > 1:
            frontier.series.setdefault(PAPER_LABEL, []).append(
                (plan.paper_epsilon, plan.objective_value)
            )
        chosen = [c for c in cands if c.id in plan.weights]
        try:
            g = guarantee(chosen, [plan.weights[c.id] for c in chosen], "lc", delta, ("pld",))
        except Unsupported:
            continue
        frontier.series.setdefault("LC, PLD (same weights)", []).append(
            (g.by_accountant["pld"], plan.objective_value)
        )
    return frontier


def _metric_frontier(
    candidates: list[Candidate], names: dict[str, str], delta: float, metric: str, points: int
) -> Frontier:
    """The frontier in the metric's terms: plans by the default objective ('signal'),
    each drawn at its expected metric."""
    usable = [c for c in candidates if not c.profile.non_private]
    value = {c.id: c.metrics[metric] for c in usable}
    inputs = [
        (names.get(c.id, c.id), c.profile.epsilon(delta, "best"), value[c.id]) for c in usable
    ]
    frontier = Frontier(delta, inputs, metric=metric)
    finite = [e for _, e, _ in inputs if math.isfinite(e)]
    if not finite:
        return frontier
    lo, hi = min(finite), max(finite)
    targets = np.geomspace(lo, hi * 1.05, points) if hi > lo else np.array([lo])
    skipped = 0
    for t in targets:
        for method, acc, label in (
            ("rs", "rdp", "RS, RDP"),
            ("rs", "pld", "RS, PLD"),
            ("lc", "rdp", "LC, RDP"),
            ("lc", "pld", "LC, PLD (same weights)"),
        ):
            plan = _try(usable, _spec(float(t), delta, method, acc, "signal"))
            if plan is None:
                continue
            if method == "lc" and len(plan.weights) > 1:
                skipped += 1
                continue
            y = sum(w * value[m] for m, w in plan.weights.items())
            frontier.series.setdefault(label, []).append((plan.epsilon, y))
    if skipped:
        frontier.notes.append(
            f"{skipped} LC merge(s) of several models not drawn: their {metric} is not known "
            "without evaluating them"
        )
    return frontier


def _try(candidates: list[Candidate], spec: PlanRequestSpec) -> Plan | None:
    try:
        return make_plan(candidates, spec)
    except (InfeasibleTarget, Unsupported):
        return None


def explorer_plans(candidates: list[Candidate], epsilon: float, delta: float) -> dict[str, Any]:
    """RS and LC at one target under each accountant, as JSON for the explorer: each
    epsilon rounded up (one that is not finite is None). Both use the noise objective,
    which reads the mechanisms only (a selection read from the models' metrics would be
    bounded by their joint release)."""
    out: dict[str, Any] = {}
    for method in ("rs", "lc"):
        for acc in ("rdp", "pld"):
            try:
                plan = make_plan(candidates, _spec(epsilon, delta, method, acc))
            except (InfeasibleTarget, Unsupported) as exc:
                out[f"{method}_{acc}"] = {"error": exc.detail, **exc.extra}
                continue
            out[f"{method}_{acc}"] = {
                # rounded up, but never past the target the plan was checked against
                "epsilon": min(round_up(plan.epsilon), epsilon),
                "accountant": plan.accountant,
                "objective": plan.objective,
                "objective_value": plan.objective_value,
                "weights": dict(sorted(plan.weights.items(), key=lambda kv: -kv[1])),
                "bound": plan.bound,
                "notes": plan.notes,
                "paper_epsilon": (
                    round_up(plan.paper_epsilon) if plan.paper_epsilon is not None else None
                ),
            }
    return finite(out)


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (JSON has none)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
