from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.api.context import Principal
from service.api.deps import ContextDep, JobsDep, require
from service.api.schemas import JobPublic, Problem
from service.deployments import outbox
from service.errors import Forbidden, NotFound
from service.jobs.queue import JobInfo, Jobs

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


def job_public(job: JobInfo) -> JobPublic:
    return JobPublic(
        id=job.id,
        kind=job.kind,
        status=job.status,
        error=job.error,
        result=job.result,
        enqueued_at=job.enqueued_at,
        started_at=job.started_at,
        ended_at=job.ended_at,
    )


def job_or_queued(jobs: Jobs, job_id: str) -> JobInfo:
    """A pending job's state; one being enqueued by a concurrent request shows as queued."""
    try:
        return jobs.get(job_id)
    except NotFound:
        return JobInfo(id=job_id, kind="profile", status="queued")


def pending_response(jobs: list[JobInfo]) -> JSONResponse:
    """202: the answer needs profiles that are queued or being computed."""
    body = {
        "status": "pending",
        "detail": "privacy profiles are being computed; retry after the indicated delay",
        "jobs": [job_public(j).model_dump(mode="json") for j in jobs],
    }
    headers = {"Retry-After": "2"}
    if len(jobs) == 1:
        headers["Location"] = f"/v1/jobs/{jobs[0].id}"
    return JSONResponse(body, status_code=202, headers=headers)


@router.get(
    "/{job_id}",
    operation_id="jobs_get",
    response_model=JobPublic,
    responses={403: {"model": Problem}, 404: {"model": Problem}},
)
def get_job(
    job_id: str, jobs: JobsDep, ctx: ContextDep, who: Annotated[Principal, require("read")]
) -> JobPublic:
    """An accounting, plan or deployment (``outbox-...``) job's state; a failed job keeps
    its error, a finished plan job holds the plan in ``result``. The job of a plan scored
    by the models needs what that plan needs (scope ``publish``)."""
    if ctx.plan_jobs.owns(job_id):
        scope = ctx.plan_jobs.scope_of(job_id)
        if scope is not None and not who.can(scope):
            raise Forbidden(f"this job computes a plan scored by the models: scope {scope!r}")
        return job_public(ctx.plan_jobs.get(job_id))
    return job_public(outbox.find_job(ctx.session_factory, jobs, job_id))
