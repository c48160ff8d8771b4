"""Checkpoint averaging plans ("Recycling Scraps" (Shejwalkar et al., PoPETs 2025)).

Checkpoints of one run with verified lineage (each a prefix of the next, checked at
registration) are post-processing of that run up to the latest one used, so any
average of them costs exactly the latest checkpoint's guarantee. Checkpoints whose
lineage was not verified (registered before the check) are independent models: they
are never averaged here.
"""

from __future__ import annotations

from service.accounting.planning.types import Candidate, Plan, PlanRequestSpec, infeasible
from service.errors import InvalidInput, Unsupported


def plan_checkpoint_average(candidates: list[Candidate], spec: PlanRequestSpec) -> Plan:
    """Average the last k checkpoints of one run ("Recycling Scraps" (Shejwalkar et al., PoPETs
    2025)).

    The average is post-processing of the run up to its latest checkpoint used, so its
    guarantee is exactly that checkpoint's profile.
    """
    runs = {c.run_id for c in candidates if c.run_id is not None and c.lineage_verified}
    run_id = spec.run_id
    if run_id is None:
        if len(runs) != 1:
            raise InvalidInput(
                "checkpoint_average needs run_id (the candidates span runs)"
                if runs
                else "checkpoint_average needs checkpoints of one run with verified lineage"
            )
        run_id = next(iter(runs))
    steps = sorted(
        (c for c in candidates if c.run_id == run_id and c.step is not None and c.lineage_verified),
        key=lambda c: c.step or 0,
    )
    unverified = [c.id for c in candidates if c.run_id == run_id and not c.lineage_verified]
    if not steps:
        raise InvalidInput(
            f"no checkpoints of run {run_id!r} with verified lineage"
            + (f" ({', '.join(unverified)} were registered unverified)" if unverified else "")
        )
    if spec.last_k < 1:
        raise InvalidInput(f"last_k must be >= 1, got {spec.last_k}")
    chosen = steps[-spec.last_k :]
    if len({c.signature_hash for c in chosen}) > 1:
        raise Unsupported("the checkpoints' tensor names, shapes or dtypes differ")
    weights = average_weights(len(chosen), spec.ema_decay)
    latest = chosen[-1].profile
    accountants = spec.accountants()
    eps, used = min((latest.epsilon(spec.delta, a), a) for a in accountants)  # type: ignore[arg-type]
    if eps > spec.epsilon:
        raise infeasible(spec, eps, "the latest averaged checkpoint")
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
        ]
        + (
            [
                "left out (lineage not verified, so not known to be this run's "
                f"checkpoints): {', '.join(unverified)}"
            ]
            if unverified
            else []
        ),
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
