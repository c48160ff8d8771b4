"""The deployment jobs a worker runs (RQ imports them by name; keep the paths stable).

The top of jobs/: builds the worker's context and calls the runner. The profile job
lives below the queue (service.jobs.profile_task) and is re-exported here for jobs
queued under its old path."""

from __future__ import annotations

from typing import Any

from service.config import Settings
from service.jobs.profile_task import lock_key, on_failure, profile_task
from service.jobs.queue import RQJobs
from service.jobs.runner import WorkContext, run_notify, run_policy_change
from service.jobs.store import redis_client
from service.registry.blobs import LocalBlobStore
from service.registry.db import make_engine, make_sessionmaker

#: The deployment jobs by kind, as queued for a worker (import paths RQ resolves).
TASKS = {
    "policy_change": "service.jobs.tasks.policy_change_task",
    "notify": "service.jobs.tasks.notify_task",
}

__all__ = ["TASKS", "lock_key", "notify_task", "on_failure", "policy_change_task", "profile_task"]


def _worker_context() -> WorkContext:
    settings = Settings()
    assert settings.redis_url, "the worker needs RETARGET_REDIS_URL"
    engine = make_engine(settings.resolved_database_url)
    return WorkContext(
        settings=settings,
        session_factory=make_sessionmaker(engine),
        blobs=LocalBlobStore(settings.resolved_blob_dir),
        jobs=RQJobs(redis_client(settings.redis_url), settings, tasks=TASKS),
    )


def policy_change_task(**kwargs: Any) -> dict[str, Any]:
    """Re-target a deployment (from a signed webhook)."""
    return run_policy_change(_worker_context(), **kwargs)


def notify_task(**kwargs: Any) -> dict[str, Any]:
    """Notify a deployment's callback URL of its new release (retries inside)."""
    return run_notify(_worker_context(), **kwargs)
