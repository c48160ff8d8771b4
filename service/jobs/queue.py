"""Profile jobs: on RQ (Redis) when configured, in this process otherwise.

RQ was chosen over arq because the work is CPU-bound numpy, not asyncio: RQ's
synchronous workers fork one process per job (a crash or a memory blow-up
takes down only that job), and it brings what the service needs without new
code: job ids, retries with backoff (``Retry``), a failed-job registry that
keeps the error, and recovery of jobs whose worker died (the started-job
registry's heartbeat expiry puts them back while retries are left).

A profile is requested by mechanism. On a cache hit the answer is immediate;
on a miss exactly one job is enqueued for that mechanism, however many
requests and API replicas ask at once: a ``SET NX`` lock on the profile key
decides who enqueues, and the job id is derived from the key, so every asker
watches the same job. The worker deletes the lock when the profile is cached;
the lock's expiry re-opens the door after a job that failed for good.

Jobs are serialised as JSON, not pickle: whoever can write to Redis must not
be able to run code on the workers.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from rq import Callback, Queue, Retry, Worker
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.serializers import JSONSerializer
from sqlalchemy.orm import Session, sessionmaker

from service.accounting.cost import CostLimits
from service.accounting.mechanisms import Mechanism, canonical_mechanism, mechanism_hash
from service.accounting.pld import DEFAULT_DISCRETIZATION
from service.accounting.profiles import PrivacyProfile
from service.config import Settings
from service.errors import NotFound, ProfileFailed, ProfilesPending, StorageError
from service.jobs.claims import apply_claim_checks
from service.jobs.job_types import JobInfo, Jobs
from service.jobs.local_pool import DelayedPool
from service.jobs.metrics import Counters, LocalCounters, RedisCounters
from service.jobs.profile_task import lock_key, on_failure, profile_task
from service.jobs.profiles import DEFAULT_CACHE_BYTES, MemoryProfileStore, Profiles, profile_key
from service.jobs.store import RedisProfileStore
from service.registry.db import session_scope


class InProcessJobs:
    """The embedded default: profiles computed in the request, cached in memory."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        discretization: float = DEFAULT_DISCRETIZATION,
        limits: CostLimits | None = None,
        background_workers: int = 4,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.profiles = Profiles(MemoryProfileStore(cache_bytes), discretization, limits)
        #: background and delayed jobs: a bounded pool, delays in a heap (no sleeping thread)
        self.pool = DelayedPool(background_workers)
        self.session_factory = session_factory
        self.counters: Counters = LocalCounters()
        #: where deployment jobs run (set by the app factory: settings, sessions, blobs, jobs)
        self.context: Any = None
        #: the deployment jobs it runs, by kind (set by the app factory, which sees them)
        self.runners: Mapping[str, Callable[..., Any]] = {}
        self._jobs: dict[str, JobInfo] = {}
        self._lock = threading.Lock()

    def profile(self, mechanism: Mechanism) -> tuple[PrivacyProfile | None, JobInfo | None]:
        cached = self.profiles.cached(mechanism)
        if cached is not None:
            self.counters.incr("profile_cache_hits")
            return cached, None
        self.counters.incr("profile_cache_misses")
        job = JobInfo(
            id=f"local-{uuid.uuid4().hex[:16]}",
            kind="profile",
            status="started",
            enqueued_at=datetime.now(UTC),
            started_at=datetime.now(UTC),
        )
        with self._lock:
            self._jobs[job.id] = job
        self.counters.incr("jobs_queued")
        self.counters.incr("jobs_started")
        try:
            start = datetime.now(UTC)
            profile = self.profiles.get(mechanism)
            seconds = (datetime.now(UTC) - start).total_seconds()
            self.counters.incr("profile_computations")
            self.counters.incr("profile_compute_seconds", seconds)
            with session_scope(self.session_factory) as session:
                claims = apply_claim_checks(
                    session=session, mech_hash=profile.mechanism_hash, profile=profile
                )
        except Exception as exc:
            self.counters.incr("jobs_failed")
            job.status, job.error, job.ended_at = "failed", repr(exc), datetime.now(UTC)
            raise
        job.status, job.ended_at = "finished", datetime.now(UTC)
        job.result = {"mechanism_hash": profile.mechanism_hash, "claims_checked": claims}
        return profile, job

    def warm(self, mechanism: Mechanism) -> None:
        """Nothing here: a profile in the process is computed on its first use."""

    def submit(
        self,
        kind: str,
        kwargs: dict[str, Any],
        background: bool = False,
        *,
        job_id: str | None = None,
        delay_s: float = 0.0,
    ) -> JobInfo:
        """In the process: at once, or on the bounded background pool (later: delayed)."""
        if self.context is None:
            raise RuntimeError("InProcessJobs.context is not set")
        job = JobInfo(
            id=job_id or f"local-{uuid.uuid4().hex[:16]}",
            kind=kind,
            status="scheduled" if delay_s > 0 else "queued",
            enqueued_at=datetime.now(UTC),
        )
        with self._lock:
            self._jobs[job.id] = job

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


def profiles_or_pending(jobs: Jobs, items: list[tuple[str, Mechanism]]) -> list[PrivacyProfile]:
    """The profiles of ``items`` ((label, mechanism) pairs), in order.

    Raises ``ProfileFailed`` when one failed for good, else ``ProfilesPending`` (each job
    once) while any is still queued or running.
    """
    out: list[PrivacyProfile] = []
    pending: dict[str, JobInfo] = {}
    for label, mechanism in items:
        profile, job = jobs.profile(mechanism)
        if profile is not None:
            out.append(profile)
            continue
        assert job is not None
        if job.status == "failed":
            raise ProfileFailed(f"the profile of {label} failed: {job.error}", job_id=job.id)
        pending[job.id] = job
    if pending:
        raise ProfilesPending(
            f"{len(pending)} privacy profile(s) are being computed", job_ids=list(pending)
        )
    return out


def profile_job_id(key: str) -> str:
    return "profile-" + hashlib.sha256(key.encode()).hexdigest()[:40]


class RQJobs:
    """Profiles cached in Redis and computed by ``retarget worker`` processes."""

    def __init__(
        self,
        client: redis.Redis,
        settings: Settings,
        discretization: float = DEFAULT_DISCRETIZATION,
        task: Callable[..., Any] = profile_task,
        tasks: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.discretization = discretization
        self.store = RedisProfileStore(client, local_bytes=settings.profile_cache_bytes)
        self.queue = Queue(settings.queue_name, connection=client, serializer=JSONSerializer)
        self.counters: Counters = RedisCounters(client)
        self.task = task
        #: the deployment jobs it can queue: kind -> import path (service.jobs.tasks.TASKS)
        self.tasks: Mapping[str, str] = tasks or {}
        #: A claimed enqueue that never happened (a crash in between) heals after this.
        self.lock_ttl_s = settings.job_timeout_s + 600

    def profile(self, mechanism: Mechanism) -> tuple[PrivacyProfile | None, JobInfo | None]:
        key = profile_key(mechanism_hash(mechanism), self.discretization)
        cached = self.store.get(key)
        if cached is not None:
            self.counters.incr("profile_cache_hits")
            return cached, None
        self.counters.incr("profile_cache_misses")
        job_id = profile_job_id(key)
        try:
            won = bool(self.client.set(lock_key(key), job_id, nx=True, ex=self.lock_ttl_s))
            if won:
                self.queue.enqueue(
                    self.task,
                    canonical_mechanism(mechanism),
                    self.discretization,
                    job_id=job_id,
                    description=f"profile {key}",
                    job_timeout=self.settings.job_timeout_s,
                    result_ttl=24 * 3600,
                    failure_ttl=7 * 24 * 3600,
                    # first retry at once (a lost worker is not the job's fault), then back off
                    retry=Retry(max=self.settings.job_retries, interval=[0, 10, 60])
                    if self.settings.job_retries
                    else None,
                    on_failure=Callback(on_failure),
                    meta={"kind": "profile", "key": key},
                )
                self.counters.incr("jobs_queued")
        except redis.RedisError as exc:
            raise StorageError(f"the job queue (Redis) is unreachable: {exc}") from exc
        try:
            return None, self.get(job_id)
        except NotFound:
            if won:
                raise
            # Another request holds the lock and is enqueueing this very job right now
            # (or crashed doing so: the lock's expiry heals that).
            return None, JobInfo(id=job_id, kind="profile", status="queued")

    def warm(self, mechanism: Mechanism) -> None:
        """Queue the profile now, so the first plan that needs it does not wait."""
        self.profile(mechanism)

    def submit(
        self,
        kind: str,
        kwargs: dict[str, Any],
        background: bool = False,
        *,
        job_id: str | None = None,
        delay_s: float = 0.0,
    ) -> JobInfo:
        """Queue it (``delay_s``: RQ's schedule, queued when due by a worker's scheduler).
        Outbox attempts carry no RQ retry: the outbox schedules its own."""
        retries = self.settings.job_retries if kind != "outbox" else 0
        options: dict[str, Any] = dict(
            kwargs=kwargs,
            job_id=job_id,
            job_timeout=self.settings.job_timeout_s,
            result_ttl=7 * 24 * 3600,
            failure_ttl=7 * 24 * 3600,
            retry=Retry(max=retries, interval=[0, 10, 60]) if retries else None,
            on_failure=Callback(on_failure),
            meta={"kind": kind},
        )
        try:
            if delay_s > 0:
                job = self.queue.enqueue_in(timedelta(seconds=delay_s), self.tasks[kind], **options)
            else:
                job = self.queue.enqueue(self.tasks[kind], **options)
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
