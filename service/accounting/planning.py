"""Plans: the best random selection or linear combination that meets a target (eps, delta).

Pure: candidates come in with their mechanisms and profiles, a ``Plan`` goes
out. Every plan's achieved epsilon is recomputed with the full bound for the
weights returned; an infeasible target raises ``InfeasibleTarget`` with the
smallest epsilon found reachable.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from service.accounting import linear_combination as lc
from service.accounting import random_selection as rs
from service.accounting.conversions import ORDERS, check_delta, round_up
from service.accounting.curves import chord_upper_bound_rows
from service.accounting.mechanisms import DPSGD, Gaussian, Mechanism
from service.accounting.pld import DEFAULT_DISCRETIZATION
from service.accounting.profiles import PrivacyProfile
from service.errors import InfeasibleTarget, InvalidInput, Unsupported

Method = Literal["rs", "lc", "auto", "checkpoint_average"]
AccountantName = Literal["rdp", "pld", "best"]
Objective = Literal["metric", "noise", "validation"]

#: Metric names that are better when lower (any other metric is maximised).
LOWER_IS_BETTER = ("loss", "error", "mse", "rmse", "mae", "perplexity", "nll")


@dataclass(frozen=True)
class Candidate:
    id: str
    mechanism: Mechanism
    profile: PrivacyProfile
    metrics: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    step: int | None = None
    signature_hash: str = ""


@dataclass
class Plan:
    method: Literal["rs", "lc", "checkpoint_average"]
    accountant: Literal["rdp", "pld"]
    weights: dict[str, float]
    epsilon: float
    delta: float
    objective: Literal["metric", "noise", "validation"]
    objective_value: float | None
    expected_utility: float | None
    bound: str
    notes: list[str] = field(default_factory=list)
    heuristic: bool = False
    #: models the release reveals beyond those with weight (objective 'validation': every
    #: model scored, since the choice of weights depends on all of them)
    exposed: list[str] | None = None


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
    strict: bool = False  # the caller named the candidates: refuse rather than drop
    run_id: str | None = None  # checkpoint_average: the run
    last_k: int = 3  # checkpoint_average: how many of its latest checkpoints
    ema_decay: float | None = None  # checkpoint_average: EMA weights instead of uniform


def noise_variance(mechanism: Mechanism) -> float | None:
    """Variance of the noise a run added to its weights: sum_t (lr sigma C)^2 (Gaussian:
    count * std^2). None when the mechanism does not say (no learning rate, not DP-SGD)."""
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


def metric_goal(name: str, goal: str | None) -> Literal["max", "min"]:
    if goal in ("max", "min"):
        return goal  # type: ignore[return-value]
    return "min" if any(word in name.lower() for word in LOWER_IS_BETTER) else "max"


def make_plan(
    candidates: list[Candidate], spec: PlanRequestSpec, evaluate: Evaluate | None = None
) -> Plan:
    if not candidates:
        raise InvalidInput("no candidate models: register models for this dataset first")
    check_delta(spec.delta)
    if not (spec.epsilon > 0 and math.isfinite(spec.epsilon)):
        raise InvalidInput(f"epsilon must be finite and > 0, got {spec.epsilon}")
    objective = spec.objective or ("metric" if spec.method == "rs" and spec.metric else "noise")
    if objective == "validation":
        from service.accounting.validation_planning import plan_validation

        return plan_validation(candidates, spec, evaluate)
    if spec.method == "checkpoint_average":
        return plan_checkpoint_average(candidates, spec)
    if spec.method == "rs":
        return plan_rs(candidates, spec, objective)
    if spec.method == "lc":
        return plan_lc(candidates, spec, objective)
    return plan_auto(candidates, spec, objective)


# ---- random selection ---------------------------------------------------------------


def _utilities(
    candidates: list[Candidate], spec: PlanRequestSpec, objective: str
) -> tuple[list[Candidate], NDArray, list[str]]:
    notes: list[str] = []
    if objective == "metric":
        if not spec.metric:
            raise InvalidInput("objective 'metric' needs a metric name (or a dataset metric)")
        keep = [c for c in candidates if spec.metric in c.metrics]
        if len(keep) < len(candidates):
            notes.append(
                f"{len(candidates) - len(keep)} model(s) without metric {spec.metric!r} left out"
            )
        sign = 1.0 if metric_goal(spec.metric, spec.metric_goal) == "max" else -1.0
        values = np.array([sign * c.metrics[spec.metric] for c in keep])
    else:
        pairs = [(c, noise_variance(c.mechanism)) for c in candidates]
        keep = [c for c, v in pairs if v is not None]
        if len(keep) < len(candidates):
            notes.append(
                f"{len(candidates) - len(keep)} model(s) with no known noise (no learning rate "
                "or no DP-SGD/Gaussian metadata) left out of the noise objective"
            )
        values = np.array([-(v or 0.0) for c, v in pairs if v is not None])
    if not keep:
        raise Unsupported(f"no candidate model can be scored by objective {objective!r}")
    return keep, values, notes


def plan_rs(candidates: list[Candidate], spec: PlanRequestSpec, objective: str) -> Plan:
    """Algorithms 1 and 2, with the linear programs of ``random_selection``."""
    keep, utility, notes = _utilities(candidates, spec, objective)
    accountants = ("rdp", "pld") if spec.accountant == "best" else (spec.accountant,)
    plans: list[Plan] = []
    mins: list[float] = []
    for acc in accountants:
        plan, min_eps = _rs_one(keep, utility, spec, acc, objective)
        mins.append(min_eps)
        if plan is not None:
            plans.append(plan)
    if not plans:
        raise _infeasible(spec, min(mins), "random selection")
    best = max(plans, key=lambda p: (_score(p), -p.epsilon))
    best.notes = notes + best.notes
    if any(keep[i].profile.heuristic for i in range(len(keep)) if best.weights.get(keep[i].id)):
        best.heuristic = True
        best.notes.append("a selected model's profile is heuristic (shuffled batches)")
    return best


def _rs_one(
    keep: list[Candidate], utility: NDArray, spec: PlanRequestSpec, acc: str, objective: str
) -> tuple[Plan | None, float]:
    """One accountant's RS plan, or (None, smallest reachable epsilon)."""
    if acc == "rdp":
        rdp = np.array([c.profile.rdp_at(ORDERS) for c in keep])
        result = rs.plan_rs_rdp(utility, rdp, ORDERS, spec.epsilon, spec.delta)
        if result is None:
            return None, rs.min_epsilon_rs_rdp(rdp, ORDERS, spec.delta)
        achieved = rs.rs_rdp_epsilon(result.pi, rdp, ORDERS, spec.delta)
        bound = "Theorem 5.1 (RS, RDP; Algorithm 1)"
    else:
        at = _curves_at(keep)
        # At the target itself use each profile's exact deltas (the tabulated curves are
        # upper bounds a hair above them): a model that meets the target alone must be
        # feasible here. The curves serve the bisections below.
        exact = [c.profile.delta_directions(spec.epsilon) for c in keep]
        remove = np.array([d[0] for d in exact])
        add = np.array([d[1] for d in exact])
        result = rs.plan_rs_pld(utility, remove, add, spec.delta)
        if result is None:
            return None, rs.min_epsilon_rs_pld(at, spec.delta)
        used = result.pi > 0
        at_used = _curves_at([c for c, u in zip(keep, used, strict=True) if u])
        # checked exactly at the target above; the curves may place it a hair higher
        achieved = min(rs.rs_pld_epsilon(result.pi[used], at_used, spec.delta), spec.epsilon)
        bound = "Theorem 5.2 (RS, PLD; Algorithm 2)"
    weights = {c.id: float(w) for c, w in zip(keep, result.pi, strict=True) if w > 0}
    value = float(result.pi @ utility)
    return (
        Plan(
            method="rs",
            accountant=acc,  # type: ignore[arg-type]
            weights=weights,
            epsilon=min(achieved, spec.epsilon),
            delta=spec.delta,
            objective=objective,  # type: ignore[arg-type]
            objective_value=value if objective == "metric" else -value,
            expected_utility=_expected(value, spec, objective),
            bound=bound,
        ),
        math.inf,
    )


def _expected(value: float, spec: PlanRequestSpec, objective: str) -> float | None:
    if objective != "metric" or not spec.metric:
        return None
    return value if metric_goal(spec.metric, spec.metric_goal) == "max" else -value


def _curves_at(keep: list[Candidate]) -> rs.DeltaAt:
    remove = np.stack([c.profile.curves.remove for c in keep])
    add = np.stack([c.profile.curves.add for c in keep])

    def at(eps: float) -> tuple[NDArray, NDArray]:
        return chord_upper_bound_rows(remove, eps), chord_upper_bound_rows(add, eps)

    return at


def _score(plan: Plan) -> float:
    """Higher is better: expected metric, or minus the merged noise variance."""
    value = plan.objective_value if plan.objective_value is not None else -math.inf
    return value if plan.objective == "metric" else -value


def _infeasible(spec: PlanRequestSpec, min_eps: float, what: str) -> InfeasibleTarget:
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


# ---- linear combination ---------------------------------------------------------------


def lc_candidates(
    candidates: list[Candidate], strict: bool
) -> tuple[list[Candidate], list[lc.LCStructure | None], list[str]]:
    """The models LC may merge, or ``Unsupported`` with the reason (strict), or the
    largest compatible subset with notes on what was left out (not strict)."""
    notes: list[str] = []

    def refuse_or_drop(bad: list[Candidate], reason: str) -> None:
        if not bad:
            return
        if strict:
            raise Unsupported(f"linear combination refused: {reason}; random selection still works")
        notes.append(f"left out of LC ({reason}): {', '.join(c.id for c in bad)}")

    pool = list(candidates)
    bad = [c for c in pool if c.profile.non_private]
    refuse_or_drop(bad, "a non-private model has no guarantee to combine")
    pool = [c for c in pool if c not in bad]

    runs: dict[str, list[Candidate]] = {}
    for c in pool:
        if c.run_id is not None:
            runs.setdefault(c.run_id, []).append(c)
    correlated = [c for group in runs.values() if len(group) > 1 for c in group]
    if strict:
        refuse_or_drop(
            correlated,
            "checkpoints of one run share their noise (paper section 6.3), so the LC "
            "analysis does not apply",
        )
    else:
        latest = {run: max(group, key=lambda c: c.step or 0) for run, group in runs.items()}
        dropped = [c for c in correlated if latest[c.run_id or ""] is not c]
        refuse_or_drop(dropped, "an earlier checkpoint of a run already represented")
        pool = [c for c in pool if c not in dropped]

    if pool:
        common, _ = Counter(c.signature_hash for c in pool).most_common(1)[0]
        bad = [c for c in pool if c.signature_hash != common]
        refuse_or_drop(bad, "tensor names, shapes or dtypes differ from the others")
        pool = [c for c in pool if c not in bad]

    structures: list[lc.LCStructure | None] = []
    kept: list[Candidate] = []
    for c in pool:
        try:
            structures.append(lc.lc_structure(c.mechanism))
            kept.append(c)
        except Unsupported as exc:
            if strict:
                raise Unsupported(f"linear combination refused for {c.id}: {exc.detail}") from exc
            notes.append(f"left out of LC ({exc.detail}): {c.id}")
    if not kept:
        raise Unsupported("no candidate model can be linearly combined")
    return kept, structures, notes


def plan_lc(candidates: list[Candidate], spec: PlanRequestSpec, objective: str) -> Plan:
    if objective != "noise":
        raise Unsupported(
            "a linear combination's metric is not known without evaluating it: use objective "
            "'noise' (the merged noise variance, the mean-estimation optimum)"
        )
    kept, structures, notes = lc_candidates(candidates, spec.strict)
    variances = np.array([noise_variance(c.mechanism) or math.nan for c in kept])
    if np.any(~np.isfinite(variances)):
        raise Unsupported(
            "objective 'noise' needs every merged model's noise (DP-SGD with learning rates, "
            "or Gaussian metadata)"
        )
    mixed_types = len({c.mechanism.type for c in kept}) > 1
    if all(s is not None for s in structures) and not mixed_types:
        structs = [s for s in structures if s is not None]
        plan = _lc_structured(kept, structs, variances, spec)
        plan.heuristic = any(s.heuristic for s in structs)
    else:
        notes.append(
            "the models do not share one DP-SGD (or Gaussian) structure: linear combination "
            "is accounted as the joint release of the models it uses (Theorem 6.1)"
        )
        plan = _lc_joint(kept, variances, spec)
    plan.notes = notes + plan.notes
    return plan


def _inverse_variance(v: NDArray) -> NDArray:
    w = 1.0 / v
    return np.asarray(w / w.sum())


def _lc_structured(
    kept: list[Candidate], structs: list[lc.LCStructure], v: NDArray, spec: PlanRequestSpec
) -> Plan:
    """Minimise sum_i lambda_i^2 v_i subject to the LC bound <= epsilon.

    The objective is convex with its minimum at inverse-variance weights lam*. If lam*
    is infeasible, start from the best feasible single model and bisect the segment
    toward lam* for its last feasible point, then improve by pairwise weight transfers
    that lower the objective and stay feasible. Every accepted lambda was checked.
    """
    accountants = ("rdp", "pld") if spec.accountant == "best" else (spec.accountant,)
    best: Plan | None = None
    min_seen = math.inf
    start_lam: NDArray | None = None
    for acc in accountants:
        eps_of = _lc_eps_fn(structs, spec.delta, acc)
        lam, eps, seen = _search(eps_of, v, spec.epsilon, start_lam)
        min_seen = min(min_seen, seen)
        if lam is None:
            continue
        start_lam = lam  # the RDP answer is a good start for the tighter PLD search
        plan = Plan(
            method="lc",
            accountant=acc,  # type: ignore[arg-type]
            weights={c.id: float(w) for c, w in zip(kept, lam, strict=True) if w > 0},
            epsilon=eps,
            delta=spec.delta,
            objective="noise",
            objective_value=float(np.sum(lam**2 * v)),
            expected_utility=None,
            bound="Theorem 6.2 (LC, RDP; Algorithm 3)"
            if acc == "rdp"
            else "Theorem 6.4 (LC, PLD; Algorithm 4)",
        )
        if best is None or (plan.objective_value, plan.epsilon) < (
            best.objective_value,
            best.epsilon,
        ):
            best = plan
    if best is None:
        raise _infeasible(spec, min_seen, "linear combination")
    return best


def _lc_eps_fn(structs: list[lc.LCStructure], delta: float, acc: str) -> Callable[[NDArray], float]:
    if acc == "rdp":
        return lambda lam: lc.lc_rdp_epsilon(structs, lam, delta)
    return lambda lam: lc.lc_pld_epsilon(structs, lam, delta, DEFAULT_DISCRETIZATION)


def _search(
    eps_of: Callable[[NDArray], float],
    v: NDArray,
    target: float,
    start: NDArray | None,
    budget: int = 60,
) -> tuple[NDArray | None, float, float]:
    """(lambda, its epsilon, smallest epsilon seen); lambda None when nothing is feasible."""
    n = v.shape[0]
    evaluated: dict[bytes, float] = {}

    def eps(lam: NDArray) -> float:
        key = np.round(lam, 12).tobytes()
        if key not in evaluated:
            evaluated[key] = eps_of(lam)
        return evaluated[key]

    def f(lam: NDArray) -> float:
        return float(np.sum(lam**2 * v))

    star = _inverse_variance(v)
    if eps(star) <= target:
        return star, eps(star), eps(star)
    vertices = [np.eye(n)[i] for i in range(n)]
    feasible = [lam for lam in vertices if eps(lam) <= target]
    if start is not None and eps(start) <= target:
        feasible.append(start)
    if not feasible:
        return None, math.inf, min(evaluated.values())
    lam = min(feasible, key=f)
    lo, hi = 0.0, 1.0
    origin = lam.copy()
    for _ in range(14):
        mid = 0.5 * (lo + hi)
        if eps((1 - mid) * origin + mid * star) <= target:
            lo = mid
        else:
            hi = mid
    lam = (1 - lo) * origin + lo * star
    for step in (0.05, 0.01, 0.002):
        improved = True
        while improved and len(evaluated) < budget:
            improved = False
            for i in range(n):
                for j in range(n):
                    if i == j or lam[j] < step:
                        continue
                    cand = lam.copy()
                    cand[i] += step
                    cand[j] -= step
                    if f(cand) < f(lam) and len(evaluated) < budget and eps(cand) <= target:
                        lam, improved = cand, True
    return lam, eps(lam), min(evaluated.values())


MAX_SUBSET_MODELS = 12


def _joint(spec: PlanRequestSpec, profiles: list[PrivacyProfile]) -> tuple[float, str]:
    """Theorem 6.1 under the requested accountant (best: the smaller of the two)."""
    if spec.accountant != "best":
        return lc.joint_epsilon(profiles, spec.delta, spec.accountant), spec.accountant
    r = lc.joint_epsilon(profiles, spec.delta, "rdp")
    p = lc.joint_epsilon(profiles, spec.delta, "pld")
    return (p, "pld") if p <= r else (r, "rdp")


def _lc_joint(kept: list[Candidate], v: NDArray, spec: PlanRequestSpec) -> Plan:
    """Theorem 6.1: the bound does not depend on lambda beyond its support S, so the best
    plan is inverse-variance weights on the feasible S of least merged noise."""
    n = len(kept)
    if n > MAX_SUBSET_MODELS:
        raise Unsupported(
            f"the joint-release fallback enumerates subsets: at most {MAX_SUBSET_MODELS} models"
        )
    subsets = []
    for mask in range(1, 2**n):
        idx = [i for i in range(n) if mask >> i & 1]
        subsets.append((1.0 / float(np.sum(1.0 / v[idx])), idx))
    subsets.sort()
    min_seen = math.inf
    for noise, idx in subsets:
        eps, used = _joint(spec, [kept[i].profile for i in idx])
        min_seen = min(min_seen, eps)
        if eps <= spec.epsilon:
            lam = _inverse_variance(v[idx])
            return Plan(
                method="lc",
                accountant=used,  # type: ignore[arg-type]
                weights={kept[i].id: float(w) for i, w in zip(idx, lam, strict=True)},
                epsilon=eps,
                delta=spec.delta,
                objective="noise",
                objective_value=noise,
                expected_utility=None,
                bound="Theorem 6.1 (joint release of the merged models)",
            )
    raise _infeasible(spec, min_seen, "linear combination (joint release)")


# ---- auto ---------------------------------------------------------------------


def plan_auto(candidates: list[Candidate], spec: PlanRequestSpec, objective: str) -> Plan:
    """The better of the best RS and the best LC plan on the objective (LC only for 'noise')."""
    notes: list[str] = []
    plans: list[Plan] = []
    mins: list[float] = []
    try:
        plans.append(plan_rs(candidates, spec, objective))
    except InfeasibleTarget as exc:
        mins.append(exc.extra.get("min_epsilon") or math.inf)
    except Unsupported as exc:
        notes.append(f"random selection not possible: {exc.detail}")
    if objective == "noise":
        try:
            plans.append(plan_lc(candidates, spec, objective))
        except InfeasibleTarget as exc:
            mins.append(exc.extra.get("min_epsilon") or math.inf)
        except Unsupported as exc:
            notes.append(f"linear combination not possible: {exc.detail}")
    else:
        notes.append("linear combination cannot be scored by a metric: random selection only")
    if not plans:
        if mins:
            raise _infeasible(spec, min(mins), "neither random selection nor linear combination")
        raise Unsupported("; ".join(notes) or "no plan is possible for these models")
    best = max(plans, key=lambda p: (_score(p), p.method == "rs", -p.epsilon))
    other = [p for p in plans if p is not best]
    if other:
        notes.append(
            f"chose {best.method} over {other[0].method}: objective {best.objective_value:.6g} "
            f"vs {other[0].objective_value:.6g}"
        )
    best.notes = best.notes + notes
    return best


# ---- checkpoint averaging ---------------------------------------------------------


def plan_checkpoint_average(candidates: list[Candidate], spec: PlanRequestSpec) -> Plan:
    """Average the last k checkpoints of one run (papers/recycling-scraps-checkpoints.txt).

    The average is post-processing of the run up to its latest checkpoint used, so its
    guarantee is exactly that checkpoint's profile.
    """
    runs = {c.run_id for c in candidates if c.run_id is not None}
    run_id = spec.run_id
    if run_id is None:
        if len(runs) != 1:
            raise InvalidInput("checkpoint_average needs run_id (the candidates span runs)")
        run_id = next(iter(runs))
    steps = sorted(
        (c for c in candidates if c.run_id == run_id and c.step is not None),
        key=lambda c: c.step or 0,
    )
    if not steps:
        raise InvalidInput(f"no checkpoints of run {run_id!r} with a lineage step")
    if spec.last_k < 1:
        raise InvalidInput(f"last_k must be >= 1, got {spec.last_k}")
    chosen = steps[-spec.last_k :]
    if len({c.signature_hash for c in chosen}) > 1:
        raise Unsupported("the checkpoints' tensor names, shapes or dtypes differ")
    weights = average_weights(len(chosen), spec.ema_decay)
    latest = chosen[-1].profile
    accountants = ("rdp", "pld") if spec.accountant == "best" else (spec.accountant,)
    eps, used = min((latest.epsilon(spec.delta, a), a) for a in accountants)  # type: ignore[arg-type]
    if eps > spec.epsilon:
        raise _infeasible(spec, eps, "the latest averaged checkpoint")
    return Plan(
        method="checkpoint_average",
        accountant=used,  # type: ignore[arg-type]
        weights={c.id: w for c, w in zip(chosen, weights, strict=True)},
        epsilon=eps,
        delta=spec.delta,
        objective="noise",
        objective_value=None,
        expected_utility=None,
        bound="post-processing of one run: the latest averaged checkpoint's profile",
        notes=[
            f"average of the last {len(chosen)} checkpoints of run {run_id!r}"
            + (f" (EMA, decay {spec.ema_decay})" if spec.ema_decay else " (uniform)")
        ],
        heuristic=latest.heuristic,
    )


def average_weights(count: int, ema_decay: float | None = None) -> list[float]:
    """Checkpoint-averaging weights, oldest first: uniform 1/k, or the EMA convention
    weight_j proportional to decay^(k - j) (the latest checkpoint weighs most), normalised."""
    if count < 1:
        raise InvalidInput("checkpoint averaging needs at least one checkpoint")
    if ema_decay is None:
        return [1.0 / count] * count
    if not 0 < ema_decay <= 1:
        raise InvalidInput(f"ema_decay must be in (0, 1], got {ema_decay}")
    raw = [ema_decay ** (count - 1 - j) for j in range(count)]
    total = sum(raw)
    return [w / total for w in raw]
