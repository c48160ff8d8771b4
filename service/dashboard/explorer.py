"""The plan explorer: RS and LC plans for a target slider, and the frontier chart."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.conversions import round_up
from service.api.deps import AppContext, ContextDep
from service.dashboard.common import (
    Viewer,
    dataset_delta,
    model_profiles,
    page,
)
from service.dashboard.frontier import Frontier, compute_frontier, explorer_plans
from service.dashboard.svg import render
from service.jobs.lru import Lru
from service.jobs.plans import candidate_rows, candidates_from
from service.registry import repository
from service.registry.db import session_scope
from service.registry.models import Model

router = APIRouter(prefix="/admin", include_in_schema=False)


# ---- plan explorer ---------------------------------------------------------------------


def _candidates(session: Session, ctx: AppContext, dataset_id: str) -> tuple[list[Any], dict]:
    rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=None)
    return candidates_from(rows, ctx.jobs, for_lc=True), {m.id: m.name for m in rows}


@router.get("/datasets/{dataset_id}/explorer", response_class=HTMLResponse)
def explorer_page(request: Request, dataset_id: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        models = list(session.scalars(select(Model).where(Model.dataset_id == dataset_id)))
        delta = dataset_delta(dataset)
        profiles = model_profiles(ctx, models)
        eps = sorted(e for e in ctx.epsilons.many(profiles or [], delta) if math.isfinite(e))
        lo = round_up(eps[0] * 0.5) if eps else 0.1
        hi = round_up(eps[-1] * 1.2) if eps else 10.0
        start = round_up(math.sqrt(eps[0] * eps[-1])) if eps else 1.0
        return page(
            request,
            "explorer.html",
            who,
            dataset=dataset,
            delta=delta,
            lo=lo,
            hi=hi,
            start=start,
            names={m.id: m.name for m in models},
            pending=profiles is None,
        )


@router.get("/datasets/{dataset_id}/plans.json")
async def explorer_json(
    dataset_id: str,
    ctx: ContextDep,
    who: Viewer,
    epsilon: Annotated[float, Query(gt=0, le=1e6, allow_inf_nan=False)],
) -> JSONResponse:
    def run() -> dict[str, Any]:
        with session_scope(ctx.session_factory) as session:
            dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
            candidates, names = _candidates(session, ctx, dataset_id)
            plans = explorer_plans(candidates, epsilon, dataset_delta(dataset), dataset.metric)
            return {"epsilon": epsilon, "names": names, "plans": plans}

    return JSONResponse(_finite(await run_in_threadpool(run)))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


#: The last frontiers, by dataset, delta and the models' mechanisms.
_FRONTIERS: Lru[tuple[Any, ...], Frontier] = Lru(32)


@router.get("/datasets/{dataset_id}/frontier.svg")
async def frontier_svg(dataset_id: str, ctx: ContextDep, who: Viewer) -> Response:
    def run() -> str:
        with session_scope(ctx.session_factory) as session:
            dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
            candidates, names = _candidates(session, ctx, dataset_id)
            delta = dataset_delta(dataset)
            key = (
                dataset_id,
                delta,
                tuple(sorted((c.id, c.profile.mechanism_hash) for c in candidates)),
            )
            frontier = _FRONTIERS.get(key)
            if frontier is None:
                frontier = compute_frontier(candidates, names, delta)
                _FRONTIERS.put(key, frontier)
            return render(frontier.chart(f"{dataset.name}: RS vs LC (delta {delta:g})"))

    return Response(await run_in_threadpool(run), media_type="image/svg+xml")
