"""Random selection plans: Algorithms 1 and 2 of "Differentially Private Model Merging"
(arXiv:2604.20985).

Theorems 5.1 and 5.2 hold for a selection distribution pi fixed independently of the
models. pi chosen from the models' own metrics is a function of every model read, so
objective 'metric' with ``metric_source: "models"`` is bounded by the joint release of
every model whose metric was read (Theorem 6.1); ``"prior"`` (numbers fixed without
these models' outputs on private data) keeps Theorems 5.1/5.2, and the plan says so.
The default objective, 'noise', reads the mechanisms only.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from service.accounting.joint_release import profile_identity
from service.accounting.planning.joint import joint
from service.accounting.planning.private_selection import plan_private_selection
from service.accounting.planning.runs import latest_fitting
from service.accounting.planning.signal import noise_to_signal
from service.accounting.planning.types import (
    Candidate,
    Plan,
    PlanRequestSpec,
    infeasible,
    noise_variance,
    score,
)
from service.accounting.pld.curves import chord_upper_bound_rows
from service.accounting.profiles.profile import PrivacyProfile
from service.accounting.rs import bounds as rs
from service.errors import InvalidInput, Unsupported

#: Selection probabilities below this are moved to a more private model (re-certified).
MIN_WEIGHT = 1e-3

#: How a metric of each declared source may be read by a plan.
SOURCE_USE = {
    "prior": "plan with metric_source 'prior' (no cost)",
    "models": "plan with metric_source 'models' (scope publish; charged as the joint "
    "release of the models read)",
    "private": "plan with metric_source 'private' (a private selection, charged)",
}

PRIOR_NOTE = (
    "metric_source 'prior': the caller states the metrics were fixed without these "
    "models' outputs on private data (a public proxy run, a hyper-parameter table); "
    "Theorems 5.1/5.2 hold only under that assumption"
)


def metric_values(
    candidates: list[Candidate], spec: PlanRequestSpec
) -> tuple[list[Candidate], NDArray, list[str]]:
    """The models that carry the metric and their values, signed so larger is better."""
    if not spec.metric:
        raise InvalidInput("objective 'metric' needs a metric name (or a dataset metric)")
    if spec.metric_goal not in ("max", "min"):
        raise InvalidInput(
            f"objective 'metric' needs metric_goal 'max' or 'min' for {spec.metric!r} "
            "(the direction is never guessed from the name)"
        )
    keep = [c for c in candidates if spec.metric in c.metrics]
    for c in keep:
        declared = c.metric_sources.get(spec.metric)
        if declared is not None and declared != spec.metric_source:
            raise InvalidInput(
                f"metric {spec.metric!r} of model {c.label} is declared {declared!r}, not "
                f"{spec.metric_source!r}: "
                + SOURCE_USE.get(declared, "declare how it was computed at registration"),
                model_id=c.id,
            )
    notes = []
    if len(keep) < len(candidates):
        notes.append(
            f"{len(candidates) - len(keep)} model(s) without metric {spec.metric!r} left out"
        )
    if not keep:
        raise Unsupported(f"no candidate model has metric {spec.metric!r}")
    sign = 1.0 if spec.metric_goal == "max" else -1.0
    return keep, np.array([sign * c.metrics[spec.metric] for c in keep]), notes


def noise_values(
    candidates: list[Candidate], objective: str = "noise"
) -> tuple[list[Candidate], NDArray, list[str]]:
    """Minus each model's merged noise variance (objective 'noise') or noise-to-signal
    ratio ('signal'), for the models whose mechanism says."""
    proxy = noise_to_signal if objective == "signal" else noise_variance
    pairs = [(c, proxy(c.mechanism)) for c in candidates]
    keep = [c for c, v in pairs if v is not None]
    notes = []
    if len(keep) < len(candidates):
        notes.append(
            f"{len(candidates) - len(keep)} model(s) with no known noise (no learning rate "
            f"or no DP-SGD/Gaussian metadata) left out of objective {objective!r}"
        )
    if not keep:
        raise Unsupported(f"no candidate model can be scored by objective {objective!r}")
    return keep, np.array([-(v or 0.0) for _, v in pairs if v is not None]), notes


def plan_rs(candidates: list[Candidate], spec: PlanRequestSpec, objective: str) -> Plan:
    if objective == "metric" and spec.metric_source == "private":
        return plan_private_selection(candidates, spec)
    if objective == "metric":
        keep, utility, notes = metric_values(candidates, spec)
        if spec.metric_source == "models":
            return _rs_scored_by_models(keep, utility, spec, notes)
        notes.append(PRIOR_NOTE)
    else:
        run_notes: list[str] = []
        if objective == "signal":
            candidates, run_notes = latest_fitting(candidates, spec)
        keep, utility, notes = noise_values(candidates, objective)
        notes = run_notes + notes
    plans: list[Plan] = []
    mins: list[float] = []
    for acc in spec.accountants():
        plan, min_eps = _rs_one(keep, utility, spec, acc, objective)
        mins.append(min_eps)
        if plan is not None:
            plans.append(plan)
    if not plans:
        raise infeasible(spec, min(mins), "random selection")
    best = max(plans, key=lambda p: (score(p), -p.epsilon))
    best.notes = notes + best.notes
    if any(c.profile.heuristic for c in keep if best.weights.get(c.id)):
        best.heuristic = True
        best.notes.append("a selected model's profile is heuristic (shuffled batches)")
    return best


def _rs_scored_by_models(
    keep: list[Candidate], utility: NDArray, spec: PlanRequestSpec, notes: list[str]
) -> Plan:
    """pi read from the models' own metrics: a function of every model read, so the
    bound is their joint release, whatever pi is; the best model then costs no more."""
    eps, used = joint(spec, [c.profile for c in keep])
    if eps > spec.epsilon:
        raise infeasible(
            spec,
            eps,
            f"selection by metric {spec.metric!r} read from {len(keep)} model(s) (bounded "
            "by their joint release; use metric_source 'prior' for metrics fixed without "
            "these models, or name fewer models)",
        )
    best = int(np.argmax(utility))
    value = float(utility[best])
    return Plan(
        method="rs",
        accountant=used,  # type: ignore[arg-type]
        weights={keep[best].id: 1.0},
        epsilon=eps,
        delta=spec.delta,
        objective="metric",
        objective_value=value,
        expected_utility=value if spec.metric_goal == "max" else -value,
        bound="Theorem 6.1 (joint release of every model whose metric was read)",
        notes=[
            *notes,
            f"metric_source 'models': the selection reads {len(keep)} model(s)' metrics, so "
            "it is bounded by their joint release and exposes all of them",
        ],
        heuristic=any(c.profile.heuristic for c in keep),
        exposed=sorted(c.id for c in keep),
    )


def _distinct(keep: list[Candidate]) -> tuple[list[PrivacyProfile], NDArray]:
    """The distinct profiles among the candidates and, per candidate, its profile's
    index: a thousand models trained with a few configurations cost a few curves."""
    seen: dict[str, int] = {}
    distinct: list[PrivacyProfile] = []
    index = []
    for c in keep:
        key = profile_identity(c.profile)
        if key not in seen:
            seen[key] = len(distinct)
            distinct.append(c.profile)
        index.append(seen[key])
    return distinct, np.array(index, dtype=np.int64)


def _rs_one(
    keep: list[Candidate], utility: NDArray, spec: PlanRequestSpec, acc: str, objective: str
) -> tuple[Plan | None, float]:
    """One accountant's RS plan, or (None, smallest reachable epsilon)."""
    if acc == "rdp":
        distinct, index = _distinct(keep)

        def rows(a: NDArray) -> NDArray:  # one row per candidate, computed per mechanism
            return np.array([p.rdp_at(a) for p in distinct])[index]

        orders = rs.planning_orders([p.rdp_at for p in distinct], spec.delta)
        rdp = rows(orders)
        result = rs.plan_rs_rdp(utility, rdp, orders, spec.epsilon, spec.delta)
        if result is None:
            return None, rs.min_epsilon_rs_rdp(rdp, orders, spec.delta)
        achieved = rs.rs_rdp_epsilon_any_order(result.pi, rows, spec.delta)
        bound = "Theorem 5.1 (RS, RDP; Algorithm 1)"
    else:
        at = curves_at(keep)
        # At the target itself use each profile's exact deltas (the tabulated curves are
        # upper bounds a hair above them): a model that meets the target alone must be
        # feasible here. The curves serve the bisections below.
        distinct, index = _distinct(keep)
        exact = np.array([p.delta_directions(spec.epsilon) for p in distinct])[index]
        remove, add = exact[:, 0], exact[:, 1]
        result = rs.plan_rs_pld(utility, remove, add, spec.delta)
        if result is None:
            return None, rs.min_epsilon_rs_pld(at, spec.delta)
        used = result.pi > 0
        at_used = curves_at([c for c, u in zip(keep, used, strict=True) if u])
        # checked exactly at the target above; the curves may place it a hair higher
        achieved = min(rs.rs_pld_epsilon(result.pi[used], at_used, spec.delta), spec.epsilon)
        bound = "Theorem 5.2 (RS, PLD; Algorithm 2)"
    pi, achieved, tiny_notes = _without_tiny_weights(keep, result.pi, achieved, spec, acc)
    weights = {c.id: float(w) for c, w in zip(keep, pi, strict=True) if w > 0}
    value = float(pi @ utility)
    expected = None
    if objective == "metric":
        expected = value if spec.metric_goal == "max" else -value
    return (
        Plan(
            method="rs",
            accountant=acc,  # type: ignore[arg-type]
            weights=weights,
            epsilon=min(achieved, spec.epsilon),
            delta=spec.delta,
            objective=objective,  # type: ignore[arg-type]
            objective_value=value if objective == "metric" else -value,
            expected_utility=expected,
            bound=bound,
            notes=tiny_notes,
        ),
        math.inf,
    )


def _without_tiny_weights(
    keep: list[Candidate], pi: NDArray, achieved: float, spec: PlanRequestSpec, acc: str
) -> tuple[NDArray, float, list[str]]:
    """Probabilities under ``MIN_WEIGHT`` moved onto the support's most private model,
    kept only when the moved plan is re-certified within the target (Theorem 5.1 or
    5.2 for the new pi); otherwise the plan is kept and the note says they stay."""
    tiny = (pi > 0) & (pi < MIN_WEIGHT)
    big = pi >= MIN_WEIGHT
    if not tiny.any() or not big.any():
        return pi, achieved, []
    names = ", ".join(c.id for c, t in zip(keep, tiny, strict=True) if t)
    alone = [c.profile.epsilon(spec.delta, acc) for c in keep]  # type: ignore[arg-type]
    to = min(np.flatnonzero(big), key=lambda i: alone[i])
    moved = np.where(tiny, 0.0, pi)
    moved[to] += float(pi[tiny].sum())
    used = [c for c, w in zip(keep, moved, strict=True) if w > 0]
    w = moved[moved > 0]
    if acc == "rdp":
        eps = rs.rs_rdp_epsilon_any_order(
            w, lambda a: np.array([c.profile.rdp_at(a) for c in used]), spec.delta
        )
    else:
        exact = np.array([c.profile.delta_directions(spec.epsilon) for c in used])
        fits = max(float(w @ exact[:, 0]), float(w @ exact[:, 1])) <= spec.delta
        eps = (
            min(rs.rs_pld_epsilon(w, curves_at(used), spec.delta), spec.epsilon)
            if fits
            else math.inf
        )
    if eps > spec.epsilon:
        return (
            pi,
            achieved,
            [f"probabilities under {MIN_WEIGHT:g} kept ({names}): moving them breaks the target"],
        )
    return (
        moved,
        eps,
        [
            f"probabilities under {MIN_WEIGHT:g} ({names}) moved to {keep[to].id}, the "
            "support's most private model; the plan was re-certified"
        ],
    )


def curves_at(keep: list[Candidate]) -> rs.DeltaAt:
    remove = np.stack([c.profile.curves.remove for c in keep])
    add = np.stack([c.profile.curves.add for c in keep])

    def at(eps: float) -> tuple[NDArray, NDArray]:
        return chord_upper_bound_rows(remove, eps), chord_upper_bound_rows(add, eps)

    return at
