"""Async release merges as jobs: on the merge queue of RQ (Redis), or in the API process.

With Redis, a pending release's merge is an RQ job on ``RETARGET_MERGE_QUEUE``, so a
host with a GPU can run only merges (``retarget worker --queue merges``). The job
carries only the release id (JSON): the worker reloads the release, its models and
its plan from the database and rebuilds the same files the API would have merged.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from service.errors import StorageError
from service.jobs.queue import JobInfo, RQJobs
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.db import session_scope
from service.registry.models import Release
from service.releases.artifacts import produce
from service.releases.pending import abandon, finish
from service.releases.retarget import SAFETENSORS_DTYPE, plan_from_record, release_provenance

#: the kind of a merge job (``service.tasks.TASKS``)
MERGE = "merge"


def enqueue_merge(jobs: RQJobs, factory: sessionmaker[Session], release_id: str) -> JobInfo:
    """Queue a pending release's merge on the merge queue. If Redis cannot take it, the
    pending release is deleted (its budget given back) and the error raised. A lost
    worker is retried; a merge that raised has deleted its release."""
    try:
        return jobs.submit(
            MERGE,
            {"release_id": release_id},
            job_id=f"merge-{release_id}",
            queue=jobs.settings.merge_queue,
            description=f"merge of release {release_id}",
        )
    except Exception as exc:
        abandon(factory, release_id)
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"the job queue (Redis) is unreachable: {exc}") from exc


def run_merge(factory: sessionmaker[Session], blobs: BlobStore, release_id: str) -> dict[str, Any]:
    """Merge a pending release's files from what the database holds (a worker's job)."""
    with session_scope(factory) as session:
        release = session.get(Release, release_id)
        if release is None:  # a retry of a merge that raised (and deleted it): failed
            raise RuntimeError(
                f"release {release_id!r} is gone: its merge failed and its budget was given back"
            )
        if release.status != "pending":  # merged by an attempt whose worker was lost
            return {"release_id": release_id, "status": "done"}
        args = _produce_args(session, release)
    finish(factory, release_id, lambda: produce(blobs=blobs, **args))
    return {"release_id": release_id, "status": "done"}


def _produce_args(session: Session, release: Release) -> dict[str, Any]:
    """What ``service.releases.artifacts.produce`` needs, as the release request computed it."""
    weights = dict(release.weights)
    drawn = release.drawn_model_id
    models = repository.models_by_id(session=session, model_ids=weights)
    plan = plan_from_record(release.plan or {})
    request = release.request or {}
    dtype = request.get("dtype")
    for model in models.values():
        session.expunge(model)  # read after the session closes
    return {
        "models": models,
        "method": release.method,
        "weights": weights,
        "drawn": drawn,
        "out_dtype": SAFETENSORS_DTYPE[dtype] if dtype is not None else None,
        "max_shard_size": request.get("max_shard_size"),
        "provenance": release_provenance(release.id, release.dataset_id, plan),
    }
