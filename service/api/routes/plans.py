from __future__ import annotations

import math
import threading
import time
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from service.accounting.conversions import round_up
from service.accounting.planning import Plan, PlanRequestSpec, reads_models
from service.api.context import Principal
from service.api.deps import ContextDep, require
from service.api.routes.jobs import job_or_queued, job_public, pending_response
from service.api.schemas import (
    GuaranteePublic,
    GuaranteeRequest,
    PendingPublic,
    PlanPublic,
    PlanRequest,
    PlanWeight,
    Problem,
    UncertaintyPublic,
)
from service.errors import Forbidden, InvalidInput, ProfilesPending
from service.jobs.queue import JobInfo
from service.ledger.charges import expose
from service.plans.planner import guarantee_for, plan_for
from service.registry import names
from service.registry.db import session_scope
from service.releases.retarget import cap_warning, exposed_by
from service.releases.selection import draw as draw_selection

router = APIRouter(prefix="/v1/plans", tags=["plans"])


class RecentPlans:
    """Plan answers of the last ``ttl_s`` seconds, by request, in this process.

    A plan is a dry run and a pure function of the request and the dataset's models,
    so the same request within a moment gets the same answer without a database
    round trip. When an answer expires, one request recomputes it while the others
    are still given the previous one (for at most ``stale_s`` more). A model
    registered meanwhile shows in plans within ``ttl_s`` (at once in the process that
    registered it). Releases never use this: they re-plan under the dataset's lock.
    """

    def __init__(self, ttl_s: float = 2.0, stale_s: float = 5.0, size: int = 4096) -> None:
        self.ttl_s = ttl_s
        self.stale_s = stale_s
        self.size = size
        self.items: dict[str, tuple[float, PlanPublic]] = {}
        self.refreshing: set[str] = set()
        self.lock = threading.Lock()

    def get(self, key: str) -> PlanPublic | None:
        """The answer, or None: then the caller computes it (and ``put``s it)."""
        now = time.monotonic()
        with self.lock:
            hit = self.items.get(key)
            if hit is None or now > hit[0] + self.stale_s:
                return None
            if now <= hit[0]:
                return hit[1]
            if key in self.refreshing:
                return hit[1]  # another request is recomputing it
            self.refreshing.add(key)
            return None

    def put(self, key: str, plan: PlanPublic) -> None:
        with self.lock:
            if len(self.items) >= self.size:
                self.items.clear()
            self.items[key] = (time.monotonic() + self.ttl_s, plan)
            self.refreshing.discard(key)

    def forget(self, key: str) -> None:
        with self.lock:
            self.refreshing.discard(key)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.refreshing.clear()


RECENT = RecentPlans()


def to_public(plan: Plan, target_epsilon: float, *, show_all: bool = True) -> PlanPublic:
    """The plan as a caller sees it: an uncertainty computed from metrics not declared
    'prior' only with ``show_all`` (admin keys; a release shows it, being charged for
    the checkpoints it reads)."""
    weights = sorted(plan.weights.items(), key=lambda kv: -kv[1])
    uncertainty = plan.uncertainty
    notes = list(plan.notes)
    if uncertainty is not None and uncertainty.get("source") == "models" and not show_all:
        uncertainty = None
        notes = [n for n in notes if not n.startswith("uncertainty of ")]
        notes.append(
            "an uncertainty from metric values not declared 'prior' is shown to admin keys "
            "and in the release"
        )
    return PlanPublic(
        method=plan.method,
        accountant=plan.accountant,
        weights=[
            PlanWeight(model_id=m, model_name=plan.names.get(m), weight=w) for m, w in weights
        ],
        # rounded up, but never past the target the plan was checked against
        epsilon=min(round_up(plan.epsilon), target_epsilon),
        delta=plan.delta,
        objective=plan.objective,
        objective_value=plan.objective_value,
        expected_utility=plan.expected_utility,
        bound=plan.bound,
        heuristic=plan.heuristic,
        notes=notes,
        exposed_model_ids=exposed_by(plan),
        paper_epsilon=round_up(plan.paper_epsilon) if plan.paper_epsilon is not None else None,
        selection_epsilon=plan.selection_epsilon,
        combine=plan.combine,
        uncertainty=UncertaintyPublic.model_validate(uncertainty) if uncertainty else None,
    )


def spec_from(body: PlanRequest) -> PlanRequestSpec:
    return PlanRequestSpec(
        epsilon=body.epsilon,
        delta=body.delta,
        method=body.method,
        accountant=body.accountant,
        objective=body.objective,
        metric=body.metric,
        metric_goal=body.metric_goal,
        metric_source=body.metric_source,
        strict=body.model_ids is not None,
        run_id=body.run_id,
        last_k=body.last_k,
        ema_decay=body.ema_decay,
        combine=body.combine,
        selection_epsilon=body.selection_epsilon,
    )


@router.post(
    "",
    operation_id="plans_create",
    response_model=PlanPublic,
    responses={
        202: {
            "model": PendingPublic,
            "description": "profiles are being computed, or the plan is computed as a job",
        },
        403: {
            "model": Problem,
            "description": "a plan scored by the models themselves needs scope 'publish'",
        },
        404: {"model": Problem},
        409: {"model": Problem, "description": "a scored plan would break the dataset's cap"},
        422: {"model": Problem},
        503: {"model": Problem},
    },
)
async def create_plan(
    body: PlanRequest, ctx: ContextDep, who: Annotated[Principal, require("read")]
) -> PlanPublic | JSONResponse:
    """A dry run: the best RS or LC plan for the target.

    A plan from the mechanisms (the default objective, 'noise', or a metric with
    ``metric_source: "prior"``) costs no privacy. A plan computed from the models
    themselves (objective 'validation', or a metric with ``metric_source:
    "models"``) is a function of every model it read: it needs scope ``publish``
    (403 otherwise) and is recorded in the dataset's ledger as an exposure of those
    models, refused with 409 when that would break the dataset's cap.

    An unreachable target is a 422 whose ``min_epsilon`` is the smallest epsilon
    reachable at that delta; a method the models do not support is a 422 with
    the reason. A plan that takes longer than ``RETARGET_PLAN_REQUEST_BUDGET_S``
    becomes a job: 202 with its link; the same request shares that job and,
    once it is done, gets its answer.
    """
    spec = spec_from(body)
    may_score = who.can("publish")
    if reads_models(spec) and not may_score:
        raise Forbidden(
            "this plan is computed from the models themselves (objective 'validation', or "
            "a metric with metric_source 'models' or 'private'): its answer exposes them, "
            "so it needs an API key with scope 'publish' and is recorded in the dataset's "
            "ledger"
        )
    # a scored answer is recorded once per key: never served from another key's request
    # (a default objective may resolve to a scored one for keys that may score)
    scored = reads_models(spec) or (spec.objective is None and may_score)
    # admin keys see more of a plan (to_public): their answers are cached apart
    key = (
        body.model_dump_json()
        + (f"#{who.key_id}" if scored else "")
        + ("#admin" if who.can("admin") else "")
    )
    if not scored:
        hit = RECENT.get(key)
        if hit is not None:
            return hit

    def run() -> PlanPublic | JSONResponse:
        try:
            return compute()
        finally:
            RECENT.forget(key)  # an error or a 202: the next request tries again

    def compute() -> PlanPublic | JSONResponse:
        try:
            with session_scope(ctx.session_factory) as session:
                dataset_id = names.dataset_id(session=session, ref=body.dataset_id)
                plan = plan_for(
                    session=session,
                    profiles=ctx.profiles,
                    blobs=ctx.blobs,
                    dataset_id=dataset_id,
                    model_ids=names.model_ids(
                        session=session, dataset_id=dataset_id, refs=body.model_ids
                    ),
                    spec=spec,
                    compute=ctx.plan_jobs.compute,
                    may_score=may_score,
                )
                if plan.selection is not None:  # drawn once, charged with its epsilon
                    plan = draw_selection(
                        session=session,
                        profiles=ctx.profiles,
                        dataset_id=body.dataset_id,
                        plan=plan,
                        key_id=who.key_id,
                        key_name=who.name,
                    )
                elif plan.exposed is not None:
                    expose(
                        session=session,
                        profiles=ctx.profiles,
                        dataset_id=dataset_id,
                        kind="scored_plan",
                        model_ids=exposed_by(plan),
                        key_id=who.key_id,
                        key_name=who.name,
                        detail=scored_detail(spec, plan),
                    )
                warning = cap_warning(session, ctx.profiles, dataset_id, plan)
        except ProfilesPending as exc:
            return pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
        public = to_public(plan, body.epsilon, show_all=who.can("admin"))
        if warning is not None:
            public.warnings.append(warning)
        if plan.exposed is None:
            RECENT.put(key, public)
        return public

    budget = ctx.settings.plan_request_budget_s
    answer, job = await run_in_threadpool(
        ctx.plan_jobs.run,
        key,
        run,
        budget,
        lambda v: isinstance(v, PlanPublic),
        "publish" if scored else None,
    )
    if job is not None:
        return plan_job_response(job)
    result: PlanPublic | JSONResponse = answer
    return result


def scored_detail(spec: PlanRequestSpec, plan: Plan) -> dict[str, Any]:
    """What a scored plan asked and answered, for the ledger's audit trail."""
    return {
        "objective": plan.objective,
        "method": spec.method,
        "metric": spec.metric,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "plan_epsilon": round_up(plan.epsilon),
        "bound": plan.bound,
    }


def plan_job_response(job: JobInfo) -> JSONResponse:
    """202: the plan outgrew the request's budget and is computed as a job."""
    body = {
        "status": "pending",
        "detail": "the plan takes longer than a request may; it is computed as a job: "
        "poll the job, or send the same request again",
        "jobs": [job_public(job).model_dump(mode="json")],
    }
    headers = {"Retry-After": "2", "Location": f"/v1/jobs/{job.id}"}
    return JSONResponse(body, status_code=202, headers=headers)


@router.post(
    "/guarantee",
    operation_id="plans_guarantee",
    dependencies=[require("read")],
    response_model=GuaranteePublic,
    responses={
        202: {"model": PendingPublic, "description": "profiles are being computed"},
        404: {"model": Problem},
        422: {"model": Problem},
        503: {"model": Problem},
    },
)
async def plan_guarantee(body: GuaranteeRequest, ctx: ContextDep) -> GuaranteePublic | JSONResponse:
    """The guarantee of weights you already have (an RS or LC mix of the dataset's
    models, each by id or name) at ``delta``, under each accountant, rounded up. Costs
    no privacy."""
    accountants = ("rdp", "pld") if body.accountant == "best" else (body.accountant,)

    def run() -> GuaranteePublic | JSONResponse:
        try:
            with session_scope(ctx.session_factory) as session:
                dataset_id = names.dataset_id(session=session, ref=body.dataset_id)
                refs = [w.model_id for w in body.weights]
                ids = names.model_ids(session=session, dataset_id=dataset_id, refs=refs) or []
                weights: dict[str, float] = {}
                for ref, model_id, w in zip(refs, ids, body.weights, strict=True):
                    if model_id in weights:
                        raise InvalidInput(f"model {ref!r} is named twice in weights")
                    weights[model_id] = w.weight
                result = guarantee_for(
                    session=session,
                    profiles=ctx.profiles,
                    dataset_id=dataset_id,
                    weights=weights,
                    method=body.method,
                    delta=body.delta,
                    accountants=accountants,
                    compute=ctx.plan_jobs.compute,
                )
        except ProfilesPending as exc:
            return pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
        eps, used = result.best
        return GuaranteePublic(
            method=result.method,
            delta=result.delta,
            epsilon=round_up(eps) if math.isfinite(eps) else None,
            accountant=used,
            by_accountant={
                k: round_up(v) if math.isfinite(v) else None
                for k, v in result.by_accountant.items()
            },
            bound=result.bound,
            heuristic=result.heuristic,
            notes=result.notes,
            paper_epsilon=round_up(result.paper_epsilon)
            if result.paper_epsilon is not None
            else None,
        )

    return await run_in_threadpool(run)
