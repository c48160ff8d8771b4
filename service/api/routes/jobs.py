from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.api.deps import ContextDep, JobsDep, require
from service.api.schemas import JobPublic, Problem
from service.errors import NotFound
from service.jobs import outbox
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
    dependencies=[require("read")],
    response_model=JobPublic,
    responses={404: {"model": Problem}},
)
def get_job(job_id: str, jobs: JobsDep, ctx: ContextDep) -> JobPublic:
    """An accounting, plan or deployment (``outbox-...``) job's state; a failed job keeps
    its error, a finished plan job holds the plan in ``result``."""
    if ctx.plan_jobs.owns(job_id):
        return job_public(ctx.plan_jobs.get(job_id))
    return job_public(outbox.find_job(ctx.session_factory, jobs, job_id))
