"""Where plans get profiles: computed in this process's profile processes (embedded,
``service.profiles.local``), or by the workers (Redis, here).

A profile is requested by mechanism. ``RQProfiles`` serves it from Redis on a hit; on
a miss exactly one job is enqueued for that mechanism, however many requests and API
replicas ask at once: a ``SET NX`` lock on the profile key decides who enqueues, and
the job id is derived from the key, so every asker watches the same job. The worker
deletes the lock when the profile is cached; the lock's expiry re-opens the door after
a job that failed for good. A profile job runs within ``RETARGET_PROFILE_BUDGET_S``
and is retried once (a lost worker), not more.

After a profile is computed, the claims registered with its mechanism are checked
(``service.profiles.claims``).
"""

from __future__ import annotations

import hashlib
import time
from typing import Protocol

import redis

from service.accounting.mechanisms import Mechanism, canonical_mechanism, mechanism_hash
from service.accounting.pld.pair import DEFAULT_DISCRETIZATION
from service.accounting.profiles.profile import PrivacyProfile
from service.errors import (
    NotFound,
    ProfileFailed,
    ProfileOverLimit,
    ProfilesPending,
    StorageError,
)
from service.jobs.queue import JobInfo, RQJobs
from service.profiles.cache import profile_key
from service.profiles.compute import PROFILE
from service.profiles.store import RedisProfileStore
from service.profiles.task import lock_key


class ProfileSource(Protocol):
    def profile(
        self, mechanism: Mechanism, wait_s: float | None = None
    ) -> tuple[PrivacyProfile | None, JobInfo | None]:
        """The profile if cached (or computed within ``wait_s``, where the source waits);
        else the job computing it, or the job that failed."""
        ...

    def warm(self, mechanism: Mechanism) -> None:
        """Have the profile computed ahead of its first use where that costs no request."""
        ...


def profile_job_id(key: str) -> str:
    return "profile-" + hashlib.sha256(key.encode()).hexdigest()[:40]


class RQProfiles:
    """Profiles cached in Redis and computed by ``retarget worker`` processes."""

    def __init__(self, jobs: RQJobs, discretization: float = DEFAULT_DISCRETIZATION) -> None:
        self.jobs = jobs
        self.client = jobs.client
        self.discretization = discretization
        self.store = RedisProfileStore(jobs.client, local_bytes=jobs.settings.profile_cache_bytes)
        settings = jobs.settings
        #: a profile job's limit, and its retries: one (a lost worker), not the settings'
        #: (a profile past its budget would only spend it again)
        self.timeout_s = settings.profile_budget_s
        self.retries = min(settings.job_retries, 1)
        #: A claimed enqueue that never happened (a crash in between) heals after this.
        self.lock_ttl_s = int(self.timeout_s * (self.retries + 1)) + 600

    def profile(
        self, mechanism: Mechanism, wait_s: float | None = None
    ) -> tuple[PrivacyProfile | None, JobInfo | None]:
        counters = self.jobs.counters
        key = profile_key(mechanism_hash(mechanism), self.discretization)
        cached = self.store.get(key)
        if cached is not None:
            counters.incr("profile_cache_hits")
            return cached, None
        counters.incr("profile_cache_misses")
        job_id = profile_job_id(key)
        try:
            won = bool(self.client.set(lock_key(key), job_id, nx=True, ex=self.lock_ttl_s))
        except redis.RedisError as exc:
            raise StorageError(f"the job queue (Redis) is unreachable: {exc}") from exc
        if won:
            self.jobs.submit(
                PROFILE,
                {
                    "mechanism": canonical_mechanism(mechanism),
                    "discretization": self.discretization,
                },
                job_id=job_id,
                description=f"profile {key}",
                result_ttl_s=24 * 3600,
                meta={"key": key},
                timeout_s=self.timeout_s,
                retries=self.retries,
            )
        try:
            return None, self.jobs.get(job_id)
        except NotFound:
            if won:
                raise
            # Another request holds the lock and is enqueueing this very job right now
            # (or crashed doing so: the lock's expiry heals that).
            return None, JobInfo(id=job_id, kind=PROFILE, status="queued")

    def warm(self, mechanism: Mechanism) -> None:
        """Queue the profile now, so the first plan that needs it does not wait."""
        self.profile(mechanism)


def profiles_or_failures(
    source: ProfileSource, items: list[tuple[str, Mechanism]], wait_s: float | None = None
) -> list[PrivacyProfile | ProfileFailed]:
    """The profiles of ``items`` ((label, mechanism) pairs), in order, a ``ProfileFailed``
    in place of each that failed for good. Raises ``ProfilesPending`` (each job once)
    while any is still queued or running. Every missing profile is started before any
    is waited for, and all the waiting together takes at most ``wait_s`` (default: the
    source's own ``wait_s``, 0 where it has none)."""
    found = [source.profile(mechanism, wait_s=0.0) for _, mechanism in items]
    budget = getattr(source, "wait_s", 0.0) if wait_s is None else wait_s
    deadline = time.monotonic() + budget
    for i, (_, mechanism) in enumerate(items):
        profile, job = found[i]
        if profile is None and job is not None and job.status != "failed":
            left = deadline - time.monotonic()
            if left > 0:
                found[i] = source.profile(mechanism, wait_s=left)
    out: list[PrivacyProfile | ProfileFailed] = []
    pending: dict[str, JobInfo] = {}
    for (label, _), (profile, job) in zip(items, found, strict=True):
        if profile is not None:
            out.append(profile)
            continue
        assert job is not None
        if job.status == "failed":
            out.append(_failure(label, job))
            continue
        pending[job.id] = job
    if pending:
        raise ProfilesPending(
            f"{len(pending)} privacy profile(s) are being computed", job_ids=list(pending)
        )
    return out


def _failure(label: str, job: JobInfo) -> ProfileFailed:
    """The error of a failed profile job: the limit it hit, when it was stopped at one."""
    detail = f"the profile of {label} failed: {job.error}"
    limit = job.meta.get("limit")
    if isinstance(limit, dict):
        return ProfileOverLimit(detail, job_id=job.id, **limit)
    return ProfileFailed(detail, job_id=job.id)


def profiles_or_pending(
    source: ProfileSource, items: list[tuple[str, Mechanism]], wait_s: float | None = None
) -> list[PrivacyProfile]:
    """The profiles of ``items`` ((label, mechanism) pairs), in order.

    Raises ``ProfileFailed`` when one failed for good, else ``ProfilesPending`` (each job
    once) while any is still queued or running.
    """
    out: list[PrivacyProfile] = []
    for found in profiles_or_failures(source, items, wait_s):
        if isinstance(found, ProfileFailed):
            raise found
        out.append(found)
    return out
