"""Retiring a model (admin): left out of its dataset's plans, kept in the ledger."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import ContextDep, SessionDep, require
from service.api.routes.model_views import to_public
from service.api.routes.plans import RECENT as RECENT_PLANS
from service.api.schemas import ModelPublic, ModelRetire, Problem
from service.registry import retirement

router = APIRouter(prefix="/v1/models", tags=["models"], dependencies=[require("admin")])


def _forget_plans(ctx: ContextDep) -> None:
    """Recent answers had (or lacked) this candidate (the plan cache's keys name the
    candidates, so it needs no clearing)."""
    RECENT_PLANS.clear()
    ctx.plan_jobs.clear()


@router.post(
    "/{model_id}/retire",
    response_model=ModelPublic,
    responses={404: {"model": Problem}, 409: {"model": Problem}, 422: {"model": Problem}},
    operation_id="models_retire",
)
def retire_model(
    model_id: str, body: ModelRetire, session: SessionDep, ctx: ContextDep
) -> ModelPublic:
    """Retire a model: it is left out of every plan, release and deployment re-plan of its
    dataset, and requests that name it are refused; what was released from it stays in the
    ledger. A model a deployment serves needs ``force`` (409 otherwise, naming them)."""
    model = retirement.retire_model(
        session=session, model_id=model_id, reason=body.reason, force=body.force
    )
    session.commit()
    _forget_plans(ctx)
    return to_public(model)


@router.post(
    "/{model_id}/restore",
    response_model=ModelPublic,
    responses={404: {"model": Problem}},
    operation_id="models_restore",
)
def restore_model(model_id: str, session: SessionDep, ctx: ContextDep) -> ModelPublic:
    """Make a retired model a candidate of its dataset's plans again."""
    model = retirement.restore_model(session=session, model_id=model_id)
    session.commit()
    _forget_plans(ctx)
    return to_public(model)
