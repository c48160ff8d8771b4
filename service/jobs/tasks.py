"""The deployment jobs a worker runs (RQ imports them by name; keep the paths stable).

The top of jobs/: builds the worker's context and calls the runner. The profile job
lives below the queue (service.jobs.profile_task) and is re-exported here for jobs
queued under its old path."""

from __future__ import annotations

from typing import Any

from service.config import Settings
from service.jobs.merge_jobs import run_merge
from service.jobs.profile_task import lock_key, on_failure, profile_task
from service.jobs.queue import RQJobs
from service.jobs.runner import WorkContext, run_notify, run_outbox, run_policy_change
from service.jobs.store import redis_client
from service.registry.db import make_engine, make_sessionmaker
from service.registry.stores import make_blob_store

#: The deployment jobs by kind, as queued for a worker (import paths RQ resolves).
TASKS = {
    "outbox": "service.jobs.tasks.outbox_task",
    "policy_change": "service.jobs.tasks.policy_change_task",
    "notify": "service.jobs.tasks.notify_task",
    "merge": "service.jobs.tasks.merge_task",
}

__all__ = [
    "TASKS",
    "lock_key",
    "merge_task",
    "notify_task",
    "on_failure",
    "outbox_task",
    "policy_change_task",
    "profile_task",
    "worker_context",
]


def worker_context(settings: Settings | None = None, **engine_options: Any) -> WorkContext:
    """Where deployment jobs run on a worker (and the worker's own outbox drain)."""
    settings = settings or Settings()
    assert settings.redis_url, "the worker needs RETARGET_REDIS_URL"
    engine = make_engine(settings.resolved_database_url, **engine_options)
    return WorkContext(
        settings=settings,
        session_factory=make_sessionmaker(engine),
        blobs=make_blob_store(settings),
        jobs=RQJobs(redis_client(settings.redis_url), settings, tasks=TASKS),
    )


def outbox_task(**kwargs: Any) -> dict[str, Any]:
    """One attempt at an outbox item: a webhook's policy change or a notification."""
    return run_outbox(worker_context(), **kwargs)


def policy_change_task(**kwargs: Any) -> dict[str, Any]:
    """Re-target a deployment (a job queued before the outbox)."""
    return run_policy_change(worker_context(), **kwargs)


def notify_task(**kwargs: Any) -> dict[str, Any]:
    """Announce a deployment's release (a job queued before the outbox)."""
    return run_notify(worker_context(), **kwargs)


def merge_task(release_id: str) -> dict[str, Any]:
    """Merge a pending release's files (a job of the merge queue)."""
    ctx = worker_context()
    return run_merge(ctx.session_factory, ctx.blobs, release_id)
