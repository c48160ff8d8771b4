"""Method 'auto': the better of the best RS and the best LC plan (LC only for 'noise')."""

from __future__ import annotations

import math

from service.accounting.planning.lc import plan_lc
from service.accounting.planning.rs import plan_rs
from service.accounting.planning.types import Candidate, Plan, PlanRequestSpec, infeasible, score
from service.errors import InfeasibleTarget, Unsupported


def plan_auto(candidates: list[Candidate], spec: PlanRequestSpec, objective: str) -> Plan:
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
            raise infeasible(spec, min(mins), "neither random selection nor linear combination")
        raise Unsupported("; ".join(notes) or "no plan is possible for these models")
    best = max(plans, key=lambda p: (score(p), p.method == "rs", -p.epsilon))
    other = [p for p in plans if p is not best]
    if other:
        notes.append(
            f"chose {best.method} over {other[0].method}: objective {best.objective_value:.6g} "
            f"vs {other[0].objective_value:.6g}"
        )
    best.notes = best.notes + notes
    return best
