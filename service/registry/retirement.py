"""Retiring a model: kept for the ledger's history, left out of every plan.

A retired model is no candidate of its dataset's plans, releases and deployment
re-plans (``service.plans.planner.candidate_rows``), and a request that names it is
refused. Its rows, blobs and exposures stay: what was released from it stays charged.
A model a live deployment serves (its current release holds it with weight, or drew
it) is retired only with ``force``: the deployment keeps serving its current release
until its next policy change re-plans without the model.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Conflict, InvalidInput
from service.registry.models import Deployment, Model, Release
from service.registry.repository import get_model

MAX_REASON = 2000


def serving_deployments(*, session: Session, model_id: str) -> list[str]:
    """The names of the deployments whose current release holds ``model_id``."""
    rows = session.execute(
        select(Deployment.name, Release.weights, Release.drawn_model_id)
        .join(Release, Release.id == Deployment.current_release_id)
        .order_by(Deployment.name)
    )
    return [
        name
        for name, weights, drawn in rows
        if drawn == model_id or float((weights or {}).get(model_id, 0.0)) > 0.0
    ]


def retire_model(*, session: Session, model_id: str, reason: str, force: bool = False) -> Model:
    """Retire ``model_id`` (idempotent: a retired model keeps its first reason)."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("a reason is needed to retire a model")
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"the reason is over {MAX_REASON} characters")
    model = get_model(session=session, model_id=model_id)
    if model.retired_at is not None:
        return model
    serving = serving_deployments(session=session, model_id=model_id)
    if serving and not force:
        raise Conflict(
            f"model {model_id!r} is served by deployment(s) {', '.join(serving)}: retire it "
            "with force to leave it out of their next policy change (they keep serving "
            "their current release until then)",
            deployments=serving,
        )
    model.retired_at = datetime.now(UTC)
    model.retired_reason = reason
    session.flush()
    return model


def restore_model(*, session: Session, model_id: str) -> Model:
    """Make a retired model a candidate again (its guarantee has not changed)."""
    model = get_model(session=session, model_id=model_id)
    model.retired_at = None
    model.retired_reason = None
    session.flush()
    return model
