"""Plans that outgrow a request: computed as jobs, shared by identical requests, cached,
and bounded in time and memory.

A plan request waits at most ``request_budget_s`` for its answer. Past that it
becomes a job: the caller gets 202 and the job's link; the job goes on in one of
``workers`` worker threads, and its answer is cached under the request's canonical
key, so the same request asked again (or polled through ``/v1/jobs/{id}``) gets
it at once. Identical requests share one job, a client that goes away leaves the
job to finish for the next asker (no work is wasted), and at most ``workers``
plans compute at a time (others wait in line).

A job's thread does the database work (rows, profiles, the ledger); the
accounting itself runs in a plan process (``compute``, ``service.jobs.process_pool``):
``workers`` + 1 persistent child processes, so plan jobs never take the last one
from a release or a guarantee computed in its request. A job's wall-clock budget
(``budget_s``) runs from its start; its plan process is killed when it runs past
it, or ends when it needs more than ``memory_bytes``, and the job fails with that
reason (``ComputeLimitExceeded``) while the service and the other jobs go on.
Outside a job (a release, a guarantee) a computation gets ``budget_s`` of its own
and waits at most ``wait_s`` for a free process (then ``Busy``).

``close`` (the app's shutdown, on SIGTERM) ends the plan processes within seconds:
a plan is a dry run, so nothing is half-written; worker threads are daemons.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from service.accounting.planning import Candidate
from service.errors import NotFound, RetargetError
from service.jobs.queue import JobInfo
from service.plans.pool import PlanPool

#: How long a finished plan job's answer is kept (and served to identical requests).
RESULT_TTL_S = 30.0

#: A job still running this long past its budget is reported failed (its plan
#: process, if it has one, was stopped at the budget and says so itself).
OVERRUN_S = 5.0

#: Memory a plan process may allocate beyond its loaded code, unless told otherwise.
DEFAULT_MEMORY_BYTES = 2 * 1024**3


@dataclass
class _Job:
    info: JobInfo
    key: str
    fn: Callable[[], Any]
    keep: Callable[[Any], bool] = lambda _: True
    #: the API scope needed to read the job (a plan scored by the models: 'publish')
    scope: str | None = None
    #: held to the wall-clock budget (a release's merge is not: it takes what it takes)
    bounded: bool = True
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    started: float | None = None
    finished: float | None = None


def _now() -> datetime:
    return datetime.now(UTC)


class PlanJobs:
    """In-process plan jobs keyed by the canonical request."""

    def __init__(
        self,
        workers: int = 2,
        budget_s: float = 600.0,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        wait_s: float = 30.0,
    ) -> None:
        if workers < 1 or not budget_s > 0:
            raise ValueError(f"workers >= 1 and budget_s > 0 needed, got {workers}, {budget_s}")
        self.budget_s = budget_s
        self.workers = workers
        self.wait_s = wait_s
        self.pool = PlanPool(workers + 1, memory_bytes)
        #: the deadline of the job the current worker thread runs
        self._local = threading.local()
        self._by_key: dict[str, _Job] = {}
        self._by_id: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._threads: list[threading.Thread] = []

    def _start_workers(self) -> None:
        """Start the worker threads on first use (called under ``_lock``)."""
        while len(self._threads) < self.workers:
            thread = threading.Thread(
                target=self._work, name=f"plan-job-{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            job.started = time.monotonic()
            job.info.status = "started"
            job.info.started_at = _now()
            self._local.deadline = job.started + self.budget_s if job.bounded else None
            try:
                job.value = job.fn()
                job.info.status = "finished"
            except BaseException as exc:  # kept on the job, re-raised to its askers
                job.error = exc
                job.info.status = "failed"
                job.info.error = getattr(exc, "detail", None) or "the plan failed"
            finally:
                self._local.deadline = None
            job.finished = time.monotonic()
            job.info.ended_at = _now()
            if job.error is None and not job.keep(job.value):
                self._forget(job)  # a reply not to serve again ("still computing")
            job.done.set()

    def compute(self, name: str, candidates: list[Candidate], *args: Any) -> Any:
        """Task ``name`` (``service.plans.tasks.TASKS``) in a plan process: by the current job's
        deadline in a job's thread, else within ``budget_s`` from now, waiting at most
        ``wait_s`` for a free process. A ``service.plans.tasks.Compute``."""
        deadline = getattr(self._local, "deadline", None)
        wait_s: float | None = None
        if deadline is None:
            deadline, wait_s = time.monotonic() + self.budget_s, self.wait_s
        return self.pool.run(
            name, candidates, args, deadline=deadline, budget_s=self.budget_s, wait_s=wait_s
        )

    def close(self) -> None:
        """End the plan processes (the app's shutdown); jobs computing fail."""
        self.pool.close()

    def run(
        self,
        key: str,
        fn: Callable[[], Any],
        wait_s: float,
        keep: Callable[[Any], bool] = lambda _: True,
        scope: str | None = None,
        bounded: bool = True,
    ) -> tuple[Any, JobInfo | None]:
        """``(answer, None)`` when the plan for ``key`` is ready within ``wait_s``
        (a domain error it raised is raised here); else ``(None, job)``. An answer
        ``keep`` refuses (a "profiles are still being computed" reply) is not served
        to later requests: they compute again. ``scope``: what reading the job through
        ``/v1/jobs/{id}`` needs besides 'read' (``scope_of``)."""
        with self._lock:
            self._expire()
            job = self._by_key.get(key)
            if job is None:
                info = JobInfo(id=f"plan-{uuid.uuid4()}", kind="plan", status="queued")
                info.enqueued_at = _now()
                job = _Job(info=info, key=key, fn=fn, keep=keep, scope=scope, bounded=bounded)
                self._by_key[key] = job
                self._by_id[info.id] = job
                self._start_workers()
                self._queue.put(job)
        if job.done.wait(timeout=max(0.0, wait_s)):
            if job.error is not None:
                self._forget(job)  # an error is not cached: the next request tries again
                raise job.error
            return job.value, None
        return None, self.get(job.info.id)

    def _forget(self, job: _Job) -> None:
        with self._lock:
            if self._by_key.get(job.key) is job:
                del self._by_key[job.key]

    def get(self, job_id: str) -> JobInfo:
        """The job's state; its answer (``result``) once finished."""
        with self._lock:
            job = self._by_id.get(job_id)
        if job is None:
            raise NotFound(f"no job with id {job_id!r}")
        info = job.info
        running_s = time.monotonic() - job.started if job.started is not None else 0.0
        if not job.done.is_set() and job.bounded and running_s > self.budget_s + OVERRUN_S:
            # past its budget outside a plan process (loading rows or profiles), where
            # it cannot be stopped: failed for its askers; the thread ends when it can
            info.status = "failed"
            info.error = f"the plan ran past its wall-clock budget of {self.budget_s:g} s"
        if job.done.is_set() and job.error is None and info.result is None:
            value = job.value
            if hasattr(value, "model_dump"):
                info.result = value.model_dump(mode="json")
            elif isinstance(value, dict):  # the explorer's plans, JSON already
                info.result = value
        if job.error is not None and isinstance(job.error, RetargetError):
            info.result = {"problem": type(job.error).__name__, **job.error.extra}
        return info

    def scope_of(self, job_id: str) -> str | None:
        """The scope needed to read this job (None: 'read' is enough)."""
        with self._lock:
            job = self._by_id.get(job_id)
        if job is None:
            raise NotFound(f"no job with id {job_id!r}")
        return job.scope

    def owns(self, job_id: str) -> bool:
        return job_id.startswith("plan-")

    def wait(self, job_id: str, timeout_s: float) -> bool:
        """Block until the job ends (tests and benchmarks); False on timeout."""
        with self._lock:
            job = self._by_id.get(job_id)
        if job is None:
            raise NotFound(f"no job with id {job_id!r}")
        return job.done.wait(timeout_s)

    def clear(self) -> None:
        """Forget cached answers (a model was registered: plans may change)."""
        with self._lock:
            for key, job in list(self._by_key.items()):
                if job.done.is_set():
                    del self._by_key[key]

    def _expire(self) -> None:
        now = time.monotonic()
        for key, job in list(self._by_key.items()):
            if job.finished is not None and now - job.finished > RESULT_TTL_S:
                del self._by_key[key]
        for job_id, job in list(self._by_id.items()):
            if job.finished is not None and now - job.finished > 10 * RESULT_TTL_S:
                del self._by_id[job_id]
