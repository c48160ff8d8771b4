"""Plans from the registry: load candidates and their profiles, then plan.

Plans need every candidate's profile. Missing ones are queued (embedded default:
computed right away) and the plan answers 202 until they are cached; a plan over
cached profiles is computed in the request (milliseconds for RS, seconds at most
for an LC search under PLD).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, Plan, PlanRequestSpec, make_plan
from service.errors import InvalidInput, NotFound
from service.jobs.queue import Jobs, profiles_or_pending
from service.registry import repository
from service.registry.models import Model


def load_candidates(
    *, session: Session, jobs: Jobs, dataset_id: str, model_ids: list[str] | None
) -> list[Candidate]:
    """The dataset's models (or the named ones, which must all belong to it) with profiles."""
    repository.get_dataset(session=session, dataset_id=dataset_id)
    if model_ids:
        rows = list(session.scalars(select(Model).where(Model.id.in_(model_ids))))
        found = {m.id for m in rows}
        missing = [m for m in model_ids if m not in found]
        if missing:
            raise NotFound(f"no model with id {missing[0]!r}", missing=missing)
        foreign = [m.id for m in rows if m.dataset_id != dataset_id]
        if foreign:
            raise InvalidInput(
                f"model {foreign[0]!r} belongs to another dataset: models trained on "
                "different data cannot be merged or selected among for this dataset",
                foreign=foreign,
            )
        order = {m: i for i, m in enumerate(model_ids)}
        rows.sort(key=lambda m: order[m.id])
    else:
        rows = list(
            session.scalars(
                select(Model).where(Model.dataset_id == dataset_id).order_by(Model.created_at)
            )
        )
    mechanisms = [parse_mechanism(row.mechanism) for row in rows]
    profiles = profiles_or_pending(
        jobs, [(f"model {row.id!r}", m) for row, m in zip(rows, mechanisms, strict=True)]
    )
    return [
        Candidate(
            id=row.id,
            mechanism=mechanism,
            profile=profile,
            metrics={k: float(v) for k, v in (row.metrics or {}).items()},
            run_id=row.lineage_run_id,
            step=row.lineage_step,
            signature_hash=row.signature_hash,
        )
        for row, mechanism, profile in zip(rows, mechanisms, profiles, strict=True)
    ]


def plan_for(
    *,
    session: Session,
    jobs: Jobs,
    dataset_id: str,
    model_ids: list[str] | None,
    spec: PlanRequestSpec,
) -> Plan:
    dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
    if spec.metric is None and dataset.metric:
        spec = PlanRequestSpec(**{**spec.__dict__, "metric": dataset.metric})
    candidates = load_candidates(
        session=session, jobs=jobs, dataset_id=dataset_id, model_ids=model_ids
    )
    return make_plan(candidates, spec)
