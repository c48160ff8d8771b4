"""Uncertainty from the checkpoints of one run ("Recycling Scraps: Improving Private
Learning by Leveraging Checkpoints", Shejwalkar et al., PoPETs 2025, Section 5 and
Appendix A).

Given a statistic f on public data at k checkpoints of one run, theta_{t_1}, ...,
theta_{t_k}, and weights p_i >= 0 summing to 1, the paper estimates the variance that
the DP noise gives sum_i p_i f(theta_{t_i}) by the rescaled sample variance

    S = (sum_i p_i^2) / (k - 1) * sum_i (f(theta_{t_i}) - mu)^2,   mu = (1/k) sum_i f_i

(uniform weights: sum p_i^2 = 1/k; the latest checkpoint alone, p_k = 1: the plain
sample variance). Theorem 5.1 bounds its bias when the first checkpoint is past a
burn-in time and the checkpoints are far enough apart; closer checkpoints are
correlated, which shrinks the spread, so the estimate is a lower bound on the true
variance (the paper's experiments find it within a factor of 2 of independent runs).

A width is the normal 95% interval's, 2 * 1.96 * sqrt(S), around sum_i p_i f_i. For
a parameter average it is a proxy: the estimator is of the weighted mean of the
checkpoints' metric, not of the averaged model's own.

Nothing here reads a model: the values are each checkpoint's declared metric. Only
values computed without private data (declared ``prior``, or ``models``: from the
model on public data) are used; a function of the checkpoints of one run is
post-processing of the run up to its latest checkpoint, which the plan's certificate
already covers. A value computed on private data (``private``) is never used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from service.accounting.planning import Plan
from service.registry.model_rows import metric_sources
from service.registry.models import Model

#: the two-sided 95% normal quantile
Z95 = 1.959963984540054
USABLE_SOURCES = ("prior", "models")


def checkpoint_variance(values: Sequence[float], weights: Sequence[float]) -> float:
    """The paper's estimator S = (sum p_i^2) / (k - 1) * sum (f_i - mean f)^2."""
    k = len(values)
    if k < 2 or len(weights) != k:
        raise ValueError(f"need at least 2 values and one weight each, got {k} and {len(weights)}")
    if any(not math.isfinite(v) for v in values):
        raise ValueError(f"metric values must be finite, got {list(values)}")
    if any(w < 0 for w in weights) or not math.isclose(sum(weights), 1.0, abs_tol=1e-9):
        raise ValueError(f"weights must be >= 0 and sum to 1, got {list(weights)}")
    mean = sum(values) / k
    sample = sum((v - mean) ** 2 for v in values) / (k - 1)
    return sum(w * w for w in weights) * sample


def uncertainty_record(
    metric: str, source: str, members: Sequence[tuple[str, int | None, float, float]]
) -> dict[str, Any]:
    """The record plans and releases carry: ``members`` = (model id, step, value,
    weight), oldest first."""
    values = [m[2] for m in members]
    weights = [m[3] for m in members]
    k = len(values)
    variance = checkpoint_variance(values, weights)
    estimate = sum(v * w for v, w in zip(values, weights, strict=True))
    std = math.sqrt(variance)
    return {
        "metric": metric,
        "source": source,
        "k": k,
        "members": [
            {"model_id": mid, "step": step, "value": value, "weight": weight}
            for mid, step, value, weight in members
        ],
        "estimate": estimate,
        "sample_variance": sum((v - sum(values) / k) ** 2 for v in values) / (k - 1),
        "sum_p_squared": sum(w * w for w in weights),
        "variance": variance,
        "std_error": std,
        "width_95": 2 * Z95 * std,
        "interval_95": [estimate - Z95 * std, estimate + Z95 * std],
        "lower_bound": True,
    }


def checkpoint_uncertainty(
    rows: Sequence[Model],
    weights: dict[str, float],
    metric: str | None,
    scores: dict[str, float] | None = None,
) -> tuple[dict[str, Any] | None, list[str]]:
    """(the record or None, notes saying what was estimated or why nothing was) for a
    checkpoint plan whose members are ``weights``; the values are ``scores`` (computed
    on the public validation split, source ``validation_split``) when given, else each
    checkpoint's declared ``metric``."""
    if metric is None:
        return None, []
    by_id = {m.id: m for m in rows}
    members = sorted(
        (by_id[m] for m in weights if m in by_id), key=lambda m: (m.lineage_step or 0, m.id)
    )
    if len(members) != len(weights) or len(members) < 2:
        return None, [
            f"no uncertainty for metric {metric!r}: it needs at least 2 checkpoints, "
            f"the plan has {len(weights)}"
        ]
    if scores is not None:
        values = [(m.id, m.lineage_step, float(scores[m.id]), weights[m.id]) for m in members]
        record = uncertainty_record(metric, "validation_split", values)
        return record, [_note(metric, record)]
    missing = [m.id for m in members if metric not in (m.metrics or {})]
    if missing:
        return None, [f"no uncertainty for metric {metric!r}: not declared by {', '.join(missing)}"]
    sources = {metric_sources(m)[metric] for m in members}
    if not sources <= set(USABLE_SOURCES):
        return None, [
            f"no uncertainty for metric {metric!r}: some checkpoints declare it 'private' "
            "(computed on private data), which only a private selection may read"
        ]
    try:
        values = [(m.id, m.lineage_step, float(m.metrics[metric]), weights[m.id]) for m in members]
        record = uncertainty_record(metric, "prior" if sources == {"prior"} else "models", values)
    except (TypeError, ValueError) as exc:
        return None, [f"no uncertainty for metric {metric!r}: {exc}"]
    return record, [_note(metric, record)]


def _note(metric: str, record: dict[str, Any]) -> str:
    return (
        f"uncertainty of {metric!r}: the sample variance of its values on the {record['k']} "
        "checkpoints times sum p_i^2 (uniform: 1/k) estimates the variance the DP noise gives "
        "the released model's metric (Recycling Scraps, Shejwalkar et al., Section 5): "
        f"95% width {record['width_95']:.4g} around {record['estimate']:.4g}. Consecutive "
        "checkpoints are correlated, so this is a lower bound on the true spread"
    )


def with_uncertainty(
    plan: Plan, rows: Sequence[Model], metric: str | None, scores: dict[str, float] | None = None
) -> Plan:
    """A checkpoint plan (``checkpoint_average``, ``ensemble``) with its uncertainty
    record and notes; any other plan as it is. ``scores``: each checkpoint's value of
    ``metric`` computed by the service on the public validation split."""
    if plan.method not in ("checkpoint_average", "ensemble"):
        return plan
    plan.uncertainty, notes = checkpoint_uncertainty(rows, plan.weights, metric, scores)
    plan.notes.extend(notes)
    return plan
