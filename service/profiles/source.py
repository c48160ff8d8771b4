"""Where plans get profiles: computed here (embedded), or by the workers (Redis).

A profile is requested by mechanism. ``InProcessProfiles`` computes a missing one in
the request, caches it in memory and records the computation as a finished job.
``RQProfiles`` serves it from Redis on a hit; on a miss exactly one job is enqueued
for that mechanism, however many requests and API replicas ask at once: a ``SET NX``
lock on the profile key decides who enqueues, and the job id is derived from the key,
so every asker watches the same job. The worker deletes the lock when the profile is
cached; the lock's expiry re-opens the door after a job that failed for good.

After a profile is computed, the claims registered with its mechanism are checked
(``service.profiles.claims``).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Protocol

import redis
from sqlalchemy.orm import Session, sessionmaker

from service.accounting.cost import CostLimits
from service.accounting.mechanisms import Mechanism, canonical_mechanism, mechanism_hash
from service.accounting.pld.pair import DEFAULT_DISCRETIZATION
from service.accounting.profiles.profile import PrivacyProfile
from service.errors import NotFound, ProfileFailed, ProfilesPending, StorageError
from service.jobs.queue import InProcessJobs, JobInfo, RQJobs
from service.profiles.cache import DEFAULT_CACHE_BYTES, MemoryProfileStore, Profiles, profile_key
from service.profiles.claims import apply_claim_checks
from service.profiles.store import RedisProfileStore
from service.profiles.task import PROFILE, lock_key
from service.registry.db import session_scope


class ProfileSource(Protocol):
    def profile(self, mechanism: Mechanism) -> tuple[PrivacyProfile | None, JobInfo | None]:
        """The profile if cached (or computed here); else the job computing it."""
        ...

    def warm(self, mechanism: Mechanism) -> None:
        """Have the profile computed ahead of its first use where that costs no request."""
        ...


class InProcessProfiles:
    """The embedded default: profiles computed in the request, cached in memory."""

    def __init__(
        self,
        jobs: InProcessJobs,
        session_factory: sessionmaker[Session],
        discretization: float = DEFAULT_DISCRETIZATION,
        limits: CostLimits | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.jobs = jobs
        self.profiles = Profiles(MemoryProfileStore(cache_bytes), discretization, limits)
        self.session_factory = session_factory

    def profile(self, mechanism: Mechanism) -> tuple[PrivacyProfile | None, JobInfo | None]:
        counters = self.jobs.counters
        cached = self.profiles.cached(mechanism)
        if cached is not None:
            counters.incr("profile_cache_hits")
            return cached, None
        counters.incr("profile_cache_misses")
        with self.jobs.track(PROFILE) as job:
            start = datetime.now(UTC)
            profile = self.profiles.get(mechanism)
            seconds = (datetime.now(UTC) - start).total_seconds()
            counters.incr("profile_computations")
            counters.incr("profile_compute_seconds", seconds)
            with session_scope(self.session_factory) as session:
                claims = apply_claim_checks(
                    session=session, mech_hash=profile.mechanism_hash, profile=profile
                )
            job.result = {"mechanism_hash": profile.mechanism_hash, "claims_checked": claims}
        return profile, job

    def warm(self, mechanism: Mechanism) -> None:
        """Nothing here: a profile in the process is computed on its first use."""


def profile_job_id(key: str) -> str:
    return "profile-" + hashlib.sha256(key.encode()).hexdigest()[:40]


class RQProfiles:
    """Profiles cached in Redis and computed by ``retarget worker`` processes."""

    def __init__(self, jobs: RQJobs, discretization: float = DEFAULT_DISCRETIZATION) -> None:
        self.jobs = jobs
        self.client = jobs.client
        self.discretization = discretization
        self.store = RedisProfileStore(jobs.client, local_bytes=jobs.settings.profile_cache_bytes)
        #: A claimed enqueue that never happened (a crash in between) heals after this.
        self.lock_ttl_s = jobs.settings.job_timeout_s + 600

    def profile(self, mechanism: Mechanism) -> tuple[PrivacyProfile | None, JobInfo | None]:
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


def profiles_or_pending(
    source: ProfileSource, items: list[tuple[str, Mechanism]]
) -> list[PrivacyProfile]:
    """The profiles of ``items`` ((label, mechanism) pairs), in order.

    Raises ``ProfileFailed`` when one failed for good, else ``ProfilesPending`` (each job
    once) while any is still queued or running.
    """
    out: list[PrivacyProfile] = []
    pending: dict[str, JobInfo] = {}
    for label, mechanism in items:
        profile, job = source.profile(mechanism)
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
