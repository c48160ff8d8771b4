"""The embedded mode's profiles: computed in a process of their own, within a budget.

A request asks for a mechanism's profile. A cached one is answered at once. A missing
one becomes one background job per mechanism (however many requests ask): a thread
hands it to a profile process (``service.jobs.process_pool``: killed past
``budget_s``, limited in memory) and caches the result; the first request that sees it
checks the claims registered with the mechanism. A request waits for the job at most
``wait_s`` (its caller may give less), then goes on: a plan answers 202 with the job,
a registration is stored without it. So no request computes a profile in its own
thread, and a mechanism whose profile never ends costs one process for ``budget_s``,
not the API.

A profile that failed (over its budget or memory, or an error) stays failed for
``failure_ttl_s``: asking again answers the failed job at once rather than starting the
same work again. Plans leave such a model out and say so (``service.plans.planner``).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from service.accounting.cost import CostLimits
from service.accounting.mechanisms import Mechanism, canonical_mechanism
from service.accounting.pld.pair import DEFAULT_DISCRETIZATION
from service.accounting.profiles.profile import PrivacyProfile
from service.errors import ComputeLimitExceeded
from service.jobs.process_pool import Labels, ProcessPool
from service.jobs.queue import InProcessJobs, JobInfo
from service.profiles.cache import DEFAULT_CACHE_BYTES, MemoryProfileStore, Profiles
from service.profiles.claims import apply_claim_checks
from service.profiles.compute import PROFILE
from service.registry.db import session_scope

log = logging.getLogger(__name__)

#: what the profile processes' fork server imports first: one BLAS thread per process,
#: then the accounting
PRELOAD = ["service.jobs.single_thread", "service.profiles.compute"]

LABELS = Labels(
    nouns={PROFILE: "the privacy profile"},
    process="profile process",
    budget_setting="RETARGET_PROFILE_BUDGET_S",
    memory_setting="RETARGET_PLAN_JOB_MEMORY_BYTES",
)


@dataclass
class _Running:
    job: JobInfo
    done: threading.Event = field(default_factory=threading.Event)


class InProcessProfiles:
    """Profiles computed by background jobs of this process, in profile processes."""

    def __init__(
        self,
        jobs: InProcessJobs,
        session_factory: sessionmaker[Session],
        discretization: float = DEFAULT_DISCRETIZATION,
        limits: CostLimits | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        *,
        budget_s: float = 600.0,
        wait_s: float = 60.0,
        failure_ttl_s: float = 600.0,
        memory_bytes: int = 2 * 1024**3,
        processes: int = 1,
    ) -> None:
        self.jobs = jobs
        self.profiles = Profiles(MemoryProfileStore(cache_bytes), discretization, limits)
        self.session_factory = session_factory
        self.budget_s = budget_s
        self.wait_s = wait_s
        self.failure_ttl_s = failure_ttl_s
        self.pool = ProcessPool(
            processes,
            memory_bytes,
            handler="service.profiles.compute:compute_in_child",
            preload=PRELOAD,
            labels=LABELS,
            name="retarget-profile",
        )
        self._threads = ThreadPoolExecutor(processes, thread_name_prefix="retarget-profile")
        self._running: dict[str, _Running] = {}
        self._failed: dict[str, tuple[JobInfo, float]] = {}
        #: profiles computed whose claims no request has checked yet
        self._unchecked: set[str] = set()
        self._lock = threading.Lock()

    def profile(
        self, mechanism: Mechanism, wait_s: float | None = None
    ) -> tuple[PrivacyProfile | None, JobInfo | None]:
        """The profile if cached; else (None, its job), after waiting for it up to
        ``wait_s`` (default: this source's ``wait_s``), computed if it finished by then."""
        counters = self.jobs.counters
        key = self.profiles.key(mechanism)
        cached = self.profiles.store.get(key)
        if cached is not None:
            counters.incr("profile_cache_hits")
            self._check_claims(key, cached)
            return cached, None
        counters.incr("profile_cache_misses")
        with self._lock:
            failed = self._failed.get(key)
            if failed is not None and failed[1] > time.monotonic():
                return None, failed[0]
            running = self._running.get(key)
            if running is None:
                running = _Running(self.jobs.start(PROFILE))
                self._running[key] = running
                self._threads.submit(self._compute, key, mechanism, running)
        running.done.wait(self.wait_s if wait_s is None else max(0.0, wait_s))
        profile = self.profiles.store.get(key)
        if profile is None:
            return None, running.job
        self._check_claims(key, profile)
        return profile, running.job

    def _check_claims(self, key: str, profile: PrivacyProfile) -> None:
        """The claims registered with a mechanism, checked once its profile exists: by the
        first request that sees the profile (the background thread touches no database,
        so it never shares a connection with a request)."""
        with self._lock:
            if key not in self._unchecked:
                return
            self._unchecked.discard(key)
        try:
            with session_scope(self.session_factory) as session:
                apply_claim_checks(
                    session=session, mech_hash=profile.mechanism_hash, profile=profile
                )
        except Exception:
            log.exception("claims of %s not checked; the next request tries again", key)
            with self._lock:
                self._unchecked.add(key)

    def warm(self, mechanism: Mechanism) -> None:
        """Start the profile now (a background job), without waiting for it."""
        self.profile(mechanism, wait_s=0.0)

    def _compute(self, key: str, mechanism: Mechanism, running: _Running) -> None:
        counters = self.jobs.counters
        try:
            self.pool.start()  # the budget is the computation's, not the processes' start
            start = time.monotonic()
            payload = {
                "mechanism": canonical_mechanism(mechanism),
                "discretization": self.profiles.discretization,
                "limits": asdict(self.profiles.limits),
            }
            profile: PrivacyProfile = self.pool.call(
                PROFILE, payload, {}, deadline=start + self.budget_s, budget_s=self.budget_s
            )
            with self._lock:
                self._unchecked.add(key)
            self.profiles.store.put(key, profile)
            seconds = time.monotonic() - start
            counters.incr("profile_computations")
            counters.incr("profile_compute_seconds", seconds)
            result = {"mechanism_hash": profile.mechanism_hash, "seconds": seconds}
            self.jobs.finish(running.job, result=result)
        except Exception as exc:  # over its budget or memory, an error, or shutting down
            log.warning("the profile of %s failed: %s", key, exc)
            if isinstance(exc, ComputeLimitExceeded):  # which limit, for the answer
                running.job.meta["limit"] = dict(exc.extra)
            self.jobs.finish(running.job, error=f"{type(exc).__name__}: {exc}")
            with self._lock:
                self._failed[key] = (running.job, time.monotonic() + self.failure_ttl_s)
        finally:
            with self._lock:
                self._running.pop(key, None)
            running.done.set()

    def close(self) -> None:
        """End the profile processes (the app's shutdown)."""
        self.pool.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
