"""Method 'auto': the better of the best RS and the best LC plan (LC only for the
mechanism objectives 'signal' and 'noise').

Under the default objective, 'signal', LC is weighed only for fixed-query Gaussian
releases (mean estimation, where LC's merged noise is the release's real error and
its bound is exact). For trained models the merged noise-to-signal ratio assumes the
models share their signal, which independently initialised networks do not (the
demo's MLP merges lost up to 20 points of accuracy), and for multi-step DP-SGD the
sound LC bound is at least the joint release of the runs' earlier steps: auto then
answers with RS, and method 'lc' still merges when asked.
"""

from __future__ import annotations

import math

from service.accounting.mechanisms import Gaussian
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
    weigh_lc = objective == "noise" or (objective == "signal" and _fixed_queries(candidates))
    if objective == "signal" and not weigh_lc:
        notes.append(
            "linear combination not weighed by the default objective: the models were "
            "trained, and averaging independently trained networks adds their signal only "
            "when they share a basin, which the mechanisms cannot show; ask for method "
            "'lc' to merge them"
        )
    if weigh_lc or (objective == "signal" and not plans):
        try:
            plans.append(plan_lc(candidates, spec, objective))
            if not weigh_lc:
                notes[-1] = "random selection cannot meet the target: a linear combination can"
        except InfeasibleTarget as exc:
            mins.append(exc.extra.get("min_epsilon") or math.inf)
        except Unsupported as exc:
            notes.append(f"linear combination not possible: {exc.detail}")
    elif objective not in ("noise", "signal"):
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


def _fixed_queries(candidates: list[Candidate]) -> bool:
    """Every candidate is a Gaussian release of fixed queries (mean estimation)."""
    return all(
        isinstance(c.mechanism, Gaussian) and (c.mechanism.count == 1 or not c.mechanism.adaptive)
        for c in candidates
    )
