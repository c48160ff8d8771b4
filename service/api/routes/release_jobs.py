"""202 answers for releases merged as jobs (``service.releases.pending``)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.responses import JSONResponse

from service.api.deps import AppContext
from service.api.routes.jobs import job_public
from service.api.schemas import ReleasePublic
from service.jobs.queue import RQJobs
from service.releases.merge_jobs import enqueue_merge
from service.releases.pending import finish
from service.releases.retarget import Artifact

#: deferred merges a request collects: (release id, the merge)
Deferred = list[tuple[str, Callable[[], Artifact]]]


def pending_release(public: ReleasePublic, job_id: str | None = None) -> JSONResponse:
    """202: the release exists (its budget is counted) and its files are being merged."""
    body = {
        "status": "pending",
        "detail": "the release is large: its budget is reserved and its files are being "
        "merged; poll the release (status 'done') or the job",
        "release": public.model_dump(mode="json"),
    }
    headers = {"Retry-After": "5", "Location": f"/v1/releases/{public.release_id}"}
    if job_id is not None:
        body["job_id"] = job_id
    return JSONResponse(body, status_code=202, headers=headers)


def submit(ctx: AppContext, public: ReleasePublic, deferred: Deferred) -> JSONResponse:
    """Queue the deferred merge (with Redis: on the merge queue, for a merge worker; else
    on the API's job threads) and answer 202."""
    release_id, produce = deferred[0]
    if isinstance(ctx.jobs, RQJobs):
        queued = enqueue_merge(ctx.jobs, ctx.session_factory, release_id)
        return pending_release(public, queued.id)

    def work() -> None:
        finish(ctx.session_factory, release_id, produce)

    _, job = ctx.plan_jobs.run(
        f"release\x00{release_id}", work, wait_s=0.0, scope="release", bounded=False
    )
    return pending_release(public, job_public(job).id if job is not None else None)
