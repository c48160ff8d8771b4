"""The job queue: RQ (Redis) when configured, a bounded pool in this process otherwise.

RQ was chosen over arq because the work is CPU-bound numpy, not asyncio: RQ's
synchronous workers fork one process per job (a crash or a memory blow-up
takes down only that job), and it brings what the service needs without new
code: job ids, retries with backoff (``Retry``), a failed-job registry that
keeps the error, and recovery of jobs whose worker died (the started-job
registry's heartbeat expiry puts them back while retries are left).

Jobs are named by kind; the application's task table (``service.tasks``) says what
each kind runs: import paths for RQ, callables for the in-process pool. Jobs are
serialised as JSON, not pickle: whoever can write to Redis must not be able to run
code on the workers.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from rq import Callback, Queue, Retry, Worker
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.serializers import JSONSerializer

from service.config import Settings
from service.errors import NotFound, StorageError
from service.jobs.local_pool import DelayedPool
from service.jobs.metrics import Counters, LocalCounters, RedisCounters
from service.jobs.types import JobInfo, Jobs

__all__ = [
    "InProcessJobs",
    "JobInfo",
    "Jobs",
    "RQJobs",
    "on_failure",
    "redis_client",
    "retry_intervals",
]

#: the waits before the first, second and third retry of a job (seconds)
RETRY_BACKOFF_S = (0, 10, 60)


def retry_intervals(retries: int) -> list[int]:
    """The waits before each of ``retries`` retries: the first at once, then backing off.

    RQ reads its interval list from the end when a job has fewer retries than the list
    has entries (a job with one retry would wait the last, 60 s, interval), so the list is
    cut to the job's retries."""
    return list(RETRY_BACKOFF_S[: max(1, retries)])


class InProcessJobs:
    """The embedded default: jobs run in this process, at once or on a bounded pool."""

    def __init__(self, background_workers: int = 4) -> None:
        #: background and delayed jobs: a bounded pool, delays in a heap (no sleeping thread)
        self.pool = DelayedPool(background_workers)
        self.counters: Counters = LocalCounters()
        #: what the jobs run with (set by the app factory: settings, sessions, blobs, ...)
        self.context: Any = None
        #: what each kind runs (set by the app factory: ``service.tasks.RUNNERS``)
        self.runners: Mapping[str, Callable[..., Any]] = {}
        self._jobs: dict[str, JobInfo] = {}
        self._lock = threading.Lock()

    def _new(self, kind: str, status: str, job_id: str | None = None) -> JobInfo:
        job = JobInfo(
            id=job_id or f"local-{uuid.uuid4().hex[:16]}",
            kind=kind,
            status=status,
            enqueued_at=datetime.now(UTC),
        )
        with self._lock:
            self._jobs[job.id] = job
        return job

    def start(self, kind: str, job_id: str | None = None) -> JobInfo:
        """A job record for work the caller runs itself (here or on its own threads):
        "started" now; ``finish`` it."""
        job = self._new(kind, "started", job_id)
        job.started_at = job.enqueued_at
        self.counters.incr("jobs_queued")
        self.counters.incr("jobs_started")
        return job

    def finish(
        self, job: JobInfo, *, error: str | None = None, result: dict[str, Any] | None = None
    ) -> None:
        """The end of a job ``start`` recorded: "finished", or "failed" with ``error``."""
        if error is not None:
            self.counters.incr("jobs_failed")
            job.status, job.error = "failed", error
        else:
            job.status, job.result = "finished", result
        job.ended_at = datetime.now(UTC)

    @contextmanager
    def track(self, kind: str) -> Iterator[JobInfo]:
        """A job record for work the caller does itself, right now: "started" on entry,
        "finished" (or "failed", re-raising) on exit; the caller may set its result."""
        job = self.start(kind)
        try:
            yield job
        except Exception as exc:
            self.finish(job, error=repr(exc))
            raise
        self.finish(job, result=job.result)

    def submit(
        self,
        kind: str,
        kwargs: dict[str, Any],
        background: bool = False,
        *,
        job_id: str | None = None,
        delay_s: float = 0.0,
        queue: str | None = None,
        retries: int | None = None,
        description: str | None = None,
    ) -> JobInfo:
        """In the process: at once, or on the bounded background pool (later: delayed).
        There is one queue here, and no retry: the callers' own records retry."""
        if self.context is None:
            raise RuntimeError("InProcessJobs.context is not set")
        job = self._new(kind, "scheduled" if delay_s > 0 else "queued", job_id)

        def run() -> None:
            job.status, job.started_at = "started", datetime.now(UTC)
            try:
                runner: Any = self.runners[kind]
                job.result = runner(self.context, **kwargs)
                job.status = "finished"
            except Exception as exc:
                job.status, job.error = "failed", repr(exc)
            job.ended_at = datetime.now(UTC)

        if background or delay_s > 0:
            self.pool.submit(run, delay_s)
        else:
            run()
        return job

    def get(self, job_id: str) -> JobInfo:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job with id {job_id!r}")
        return job

    def ready(self) -> tuple[bool, str]:
        return True, "in-process"

    def workers(self) -> str:
        return "in-process"

    def merge_workers(self) -> str:
        return "in-process"

    def queue_sizes(self) -> dict[str, int]:
        return {}


class RQJobs:
    """Jobs on RQ queues in Redis, run by ``retarget worker`` processes."""

    def __init__(
        self,
        client: redis.Redis,
        settings: Settings,
        tasks: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.queue = Queue(settings.queue_name, connection=client, serializer=JSONSerializer)
        self.counters: Counters = RedisCounters(client)
        #: what each kind runs: kind -> import path (``service.tasks.TASKS``)
        self.tasks: Mapping[str, str] = tasks or {}

    def submit(
        self,
        kind: str,
        kwargs: dict[str, Any],
        background: bool = False,
        *,
        job_id: str | None = None,
        delay_s: float = 0.0,
        queue: str | None = None,
        retries: int | None = None,
        description: str | None = None,
        result_ttl_s: int = 7 * 24 * 3600,
        meta: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> JobInfo:
        """Queue it (``delay_s``: RQ's schedule, queued when due by a worker's scheduler).
        A lost or failed job is retried ``retries`` times (default: the settings'), the
        first retry at once (a lost worker is not the job's fault), then backing off.
        ``timeout_s``: the job's own limit (default: the settings' job timeout)."""
        retries = self.settings.job_retries if retries is None else retries
        options: dict[str, Any] = dict(
            kwargs=kwargs,
            job_id=job_id,
            description=description,
            job_timeout=int(timeout_s or self.settings.job_timeout_s),
            result_ttl=result_ttl_s,
            failure_ttl=7 * 24 * 3600,
            retry=Retry(max=retries, interval=retry_intervals(retries)) if retries else None,
            on_failure=Callback(on_failure),
            meta={**(meta or {}), "kind": kind},
        )
        target = self.queue
        if queue is not None and queue != self.queue.name:
            target = Queue(queue, connection=self.client, serializer=JSONSerializer)
        try:
            if delay_s > 0:
                job = target.enqueue_in(timedelta(seconds=delay_s), self.tasks[kind], **options)
            else:
                job = target.enqueue(self.tasks[kind], **options)
        except redis.RedisError as exc:
            raise StorageError(f"the job queue (Redis) is unreachable: {exc}") from exc
        self.counters.incr("jobs_queued")
        return self.get(job.id)

    def get(self, job_id: str) -> JobInfo:
        try:
            job = Job.fetch(job_id, connection=self.client, serializer=JSONSerializer)
        except NoSuchJobError as exc:
            raise NotFound(f"no job with id {job_id!r}") from exc
        except redis.RedisError as exc:
            raise StorageError(f"the job queue (Redis) is unreachable: {exc}") from exc
        status = job.get_status(refresh=False)
        error = None
        if status is not None and status.value == "failed":
            info = job.latest_result()
            error = (info.exc_string if info is not None else None) or "failed"
            error = error.strip().splitlines()[-1]
        result = job.return_value(refresh=False) if status and status.value == "finished" else None
        return JobInfo(
            id=job.id,
            kind=str(job.meta.get("kind", "job")),
            status=status.value if status is not None else "unknown",
            error=error,
            result=result if isinstance(result, dict) else None,
            enqueued_at=_aware(job.enqueued_at),
            started_at=_aware(job.started_at),
            ended_at=_aware(job.ended_at),
            meta={"retries_left": job.retries_left},
        )

    def ready(self) -> tuple[bool, str]:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            return False, f"unreachable: {type(exc).__name__}"
        return True, "ok"

    def workers(self) -> str:
        return _listening(self.queue)

    def merge_workers(self) -> str:
        return _listening(Queue(self.settings.merge_queue, connection=self.client))

    def queue_sizes(self) -> dict[str, int]:
        try:
            return {
                "queued": self.queue.count,
                "running": StartedJobRegistry(queue=self.queue).count,
                "failed_kept": FailedJobRegistry(queue=self.queue).count,
            }
        except redis.RedisError:
            return {}


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _listening(queue: Queue) -> str:
    """ "ok" when a worker listens on ``queue``: a worker registers itself and renews its
    key with each heartbeat, and RQ lets the key expire when the heartbeats stop, so a
    count of zero means none is alive."""
    try:
        alive = Worker.count(queue=queue)
    except redis.RedisError as exc:
        return f"unreachable: {type(exc).__name__}"
    return "ok" if alive else f"no worker is listening on queue {queue.name!r}"


def on_failure(job: Any, connection: Any, exc_type: Any, exc_value: Any, tb: Any) -> None:
    """RQ failure callback: count it (the job itself keeps the error)."""
    RedisCounters(connection).incr("jobs_failed")


def redis_client(url: str) -> redis.Redis:
    """A client that fails fast when Redis is down, instead of hanging a request."""
    return redis.Redis.from_url(
        url, socket_connect_timeout=1.0, socket_timeout=5.0, health_check_interval=30
    )
