"""The oracle the demo's report measures the default plan against (for the report only).

For one seed's models and a target: the best held-out test accuracy that any single
model meeting the target, or any random selection among the models that meets it,
achieves in expectation. It reads the test labels, which no plan may: it is the
yardstick, never a plan. Computed with the service's own RS planner (Theorems
5.1/5.2, an exact linear program) with the test accuracies as 'prior' metrics, so the
oracle and the default plan are held to the same certificate.
"""

from __future__ import annotations

from typing import Any

from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.profiles.profile import compute_profile
from service.errors import InfeasibleTarget


def oracle_accuracy(models: list[dict[str, Any]], target: float, delta: float) -> float | None:
    """Best expected test accuracy of an RS plan (a single model included) meeting
    ``target``; None when nothing meets it. ``models``: the demo's entries (mechanism,
    test_accuracy)."""
    candidates = []
    for m in models:
        mech = parse_mechanism(m["mechanism"])
        candidates.append(
            Candidate(m["id"], mech, compute_profile(mech), {"test": m["test_accuracy"]})
        )
    spec = PlanRequestSpec(
        target, delta, "rs", "best", "metric", "test", "max", metric_source="prior"
    )
    try:
        plan = make_plan(candidates, spec)
    except InfeasibleTarget:
        return None
    return plan.expected_utility


def regret_rows(regret: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (family, target): the default plan's and the oracle's mean accuracy over
    seeds, the gap's mean and spread, and at how many seeds it is within one point."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in regret:
        if r["oracle"] is not None and r["default"] is not None:
            groups.setdefault((r["family"], r["target"]), []).append(r)
    out = []
    for (family, target), rows in sorted(groups.items()):
        gaps = [r["oracle"] - r["default"] for r in rows]
        mean = sum(gaps) / len(gaps)
        sd = (sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)) ** 0.5 if len(gaps) > 1 else 0.0
        signal = [r["signal"] for r in rows if r.get("signal") is not None]
        out.append(
            {
                "signal": sum(signal) / len(signal) if signal else None,
                "signal_within_1pt": sum(
                    r["oracle"] - r["signal"] <= 0.01 for r in rows if r.get("signal") is not None
                ),
                "family": family,
                "target": target,
                "default": sum(r["default"] for r in rows) / len(rows),
                "oracle": sum(r["oracle"] for r in rows) / len(rows),
                "gap": mean,
                "gap_sd": sd,
                "within_1pt": sum(g <= 0.01 for g in gaps),
                "seeds": len(rows),
                "methods": sorted({r["method"] + "/" + r["objective"] for r in rows}),
            }
        )
    return out
