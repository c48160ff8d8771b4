"""The plan explorer: RS and LC plans for a target slider, and the frontier chart.

Both compute plans, and LC plans over many models can take tens of seconds: they run
like every other plan, as plan jobs in the plan processes (``PlanJobs``), with the
same budgets. Within ``RETARGET_PLAN_REQUEST_BUDGET_S`` the answer comes in the
request (200); past it the request answers 202 with the job's link and
``Retry-After``, and the job goes on. Its answer is cached by its canonical key
(``task_cache_key``: the dataset, the target, the task, the models' mechanisms), so
the same request asked again, or polled, is served from the cache; identical
requests share one job. A task past its wall-clock or memory budget answers the
problem ``compute-limit-exceeded`` (422), like ``/v1/plans``; profiles still being
computed answer 202 too. The page's script polls both (``static/explorer.js``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy import select

from service.accounting.conversions import round_up
from service.api.deps import AppContext, ContextDep
from service.api.routes.jobs import job_or_queued, pending_response
from service.api.routes.plans import plan_job_response
from service.dashboard.common import (
    Viewer,
    dataset_delta,
    model_profiles,
    page,
)
from service.dashboard.frontier import frontier_chart
from service.dashboard.svg import render
from service.errors import ProfilesPending
from service.plans.planner import TASK_CACHE, candidate_rows, task_cache_key, usable_candidates
from service.registry import repository
from service.registry.db import session_scope
from service.registry.model_rows import metric_sources
from service.registry.models import Dataset, Model

router = APIRouter(prefix="/admin", include_in_schema=False)


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
) -> Response:
    """RS and LC under RDP and PLD at target ``epsilon``: 200 with the plans, or 202
    while they are computed (the same request again gets them)."""
    answer = await run_in_threadpool(
        bounded, ctx, dataset_id, "explorer", lambda dataset, _: [epsilon, dataset_delta(dataset)]
    )
    if isinstance(answer, Response):
        return answer
    plans, _, names = answer
    return JSONResponse({"epsilon": epsilon, "names": names, "plans": plans})


@router.get("/datasets/{dataset_id}/frontier.svg")
async def frontier_svg(dataset_id: str, ctx: ContextDep, who: Viewer) -> Response:
    """The frontier chart (SVG): 200, or 202 (JSON, with the job's link) while its plans
    are computed."""
    answer = await run_in_threadpool(
        bounded,
        ctx,
        dataset_id,
        "frontier",
        lambda dataset, rows: [
            {m.id: m.name for m in rows},
            dataset_delta(dataset),
            frontier_metric(dataset, rows, admin="admin" in who.scopes),
        ],
    )
    if isinstance(answer, Response):
        return answer
    frontier, dataset_name, _ = answer
    title = f"{dataset_name}: RS vs LC (delta {frontier.delta:g})"
    return Response(render(frontier_chart(frontier, title)), media_type="image/svg+xml")


def frontier_metric(dataset: Dataset, rows: list[Model], admin: bool) -> str | None:
    """The metric the frontier plots: the dataset's, when every model has it and the
    viewer may see its values (admin, or every model declares it 'prior'); else None
    (the chart falls back to the noise proxy)."""
    metric = dataset.metric
    if metric is None or not rows or any(metric not in (m.metrics or {}) for m in rows):
        return None
    if admin or all(metric_sources(m).get(metric) == "prior" for m in rows):
        return metric
    return None


def bounded(
    ctx: AppContext,
    dataset_id: str,
    task: str,
    args_of: Callable[[Dataset, list[Model]], list[Any]],
) -> tuple[Any, str, dict[str, str]] | Response:
    """Task ``task`` (``service.plans.tasks.TASKS``) over the dataset's models, with the arguments
    ``args_of`` gives: ``(answer, the dataset's name, {model id: name})``, from the cache
    or from a plan job that ends within the request's budget; else the 202 to send (the
    job goes on; profiles still computed answer 202 too). A domain error of the task (a
    limit it ran past: ``ComputeLimitExceeded``) is raised here, and the app answers it
    with its problem+json."""
    with session_scope(ctx.session_factory) as session:
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=None)
        args = args_of(dataset, rows)
        key = task_cache_key(task, dataset_id, args, rows)
        seen, names = dataset.name, {m.id: m.name for m in rows}
    hit = TASK_CACHE.get(key)
    if hit is not None:
        return hit, seen, names

    def job() -> Any:
        try:
            with session_scope(ctx.session_factory) as session:
                rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=None)
                fresh = task_cache_key(task, dataset_id, args, rows)
                candidates, _ = usable_candidates(rows, ctx.profiles, for_lc=True)
        except ProfilesPending as exc:
            return pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
        value = ctx.plan_jobs.compute(task, candidates, *args)
        TASK_CACHE.put(fresh, value)
        return value

    answer, info = ctx.plan_jobs.run(
        f"dashboard:{key}",
        job,
        ctx.settings.plan_request_budget_s,
        lambda v: not isinstance(v, Response),  # "profiles pending" is asked again
    )
    if info is not None:
        return plan_job_response(info)
    if isinstance(answer, Response):
        return answer
    return answer, seen, names
