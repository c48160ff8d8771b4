"""The task table: which function runs a job of each kind, on a worker or in the API.

The top of the application layer: RQ imports the worker's tasks by the paths in
``TASKS`` (keep them stable: queued jobs name them), the embedded API runs
``RUNNERS`` on its own pool, and ``worker_context`` builds what a worker's job runs
with. The queue and the worker underneath (``service.jobs``) know no kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.config import Settings
from service.deployments.runner import (
    WorkContext,
    drain,
    run_notify,
    run_outbox,
    run_policy_change,
)
from service.jobs import worker as queue_worker
from service.jobs.queue import RQJobs, redis_client
from service.profiles.compute import PROFILE
from service.profiles.source import RQProfiles
from service.profiles.task import profile_task
from service.registry.db import make_engine, make_sessionmaker
from service.registry.stores import make_blob_store
from service.releases.merge_jobs import MERGE, run_merge

#: What a worker runs for each kind of job (import paths RQ resolves).
TASKS = {
    PROFILE: "service.profiles.task.profile_task",
    "outbox": "service.tasks.outbox_task",
    "policy_change": "service.tasks.policy_change_task",
    "notify": "service.tasks.notify_task",
    MERGE: "service.tasks.merge_task",
}

#: What the embedded API runs in process for each kind it submits (given its context).
RUNNERS: dict[str, Callable[..., Any]] = {
    "outbox": run_outbox,
    "policy_change": run_policy_change,
    "notify": run_notify,
}

__all__ = [
    "RUNNERS",
    "TASKS",
    "build_worker",
    "merge_task",
    "notify_task",
    "outbox_task",
    "policy_change_task",
    "profile_task",
    "run_worker",
    "worker_context",
]


def worker_context(settings: Settings | None = None, **engine_options: Any) -> WorkContext:
    """Where deployment jobs run on a worker (and the worker's own outbox drain)."""
    settings = settings or Settings()
    assert settings.redis_url, "the worker needs RETARGET_REDIS_URL"
    engine = make_engine(settings.resolved_database_url, **engine_options)
    jobs = RQJobs(redis_client(settings.redis_url), settings, tasks=TASKS)
    return WorkContext(
        settings=settings,
        session_factory=make_sessionmaker(engine),
        blobs=make_blob_store(settings),
        jobs=jobs,
        profiles=RQProfiles(jobs),
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


def _outbox_drain(settings: Settings) -> Callable[[], int]:
    """The worker's periodic drain of the deployments' outbox, on its own connections,
    opened per drain (none is held open when the worker forks)."""
    from sqlalchemy.pool import NullPool

    ctx = worker_context(settings, poolclass=NullPool)
    return lambda: drain(ctx)


def build_worker(
    settings: Settings, name: str | None = None, queues: list[str] | None = None
) -> queue_worker.RetargetWorker:
    """The queue's worker, draining the deployments' outbox with each heartbeat."""
    return queue_worker.build_worker(settings, _outbox_drain(settings), name, queues)


def run_worker(
    settings: Settings,
    burst: bool = False,
    name: str | None = None,
    queues: list[str] | None = None,
) -> bool:
    """`retarget worker`: work the queues, draining the outbox (see ``build_worker``)."""
    return queue_worker.run_worker(
        settings, _outbox_drain(settings), burst=burst, name=name, queues=queues
    )
