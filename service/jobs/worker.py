"""An RQ worker on the main queue and the merge queue, with a periodic drain.

What the jobs are and what the drain queues is the application's (``service.tasks``
builds the worker with its outbox drain); this module knows only the queues."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

import redis
from rq import Queue, Worker
from rq.serializers import JSONSerializer

from service.config import Settings
from service.merging.base import configure_threads
from service.merging.device import configure_device
from service.merging.pipeline import configure_merge_threads

log = logging.getLogger(__name__)


class RetargetWorker(Worker):
    """RQ's forking worker with a configurable heartbeat slack and an outbox drain.

    A job whose worker stops heartbeating for ``monitoring interval + slack`` is
    taken as lost: the next maintenance pass of any worker retries it (while
    retries are left) or marks it failed.

    With each heartbeat of the main process (idle: at least every
    ``outbox_interval_s``, to which the wait for a job is capped; busy: each
    monitoring interval), the worker calls its drain (the application queues the due
    items of the database's outbox: work recorded while the queue was down, or whose
    job was lost), at most once per interval. The forked work horse never drains.
    """

    heartbeat_slack_s = 60
    outbox_interval_s: float = 10.0
    #: queues the due outbox items (None: no drain); set by ``build_worker``
    outbox_drain: Callable[[], int] | None = None
    #: the process that drains (the worker's main process)
    drain_pid = 0
    _last_drain = 0.0

    @property
    def dequeue_timeout(self) -> int:
        return max(1, min(self.worker_ttl - 15, math.ceil(self.outbox_interval_s)))

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        super().heartbeat(timeout, pipeline)
        if pipeline is None:
            self.drain_outbox()

    def drain_outbox(self, force: bool = False) -> None:
        """Queue due outbox items if the interval has passed; never fails the worker."""
        now = time.monotonic()
        if (
            self.outbox_drain is None
            or os.getpid() != self.drain_pid
            or (not force and now - self._last_drain < self.outbox_interval_s)
        ):
            return
        self._last_drain = now
        try:
            queued = self.outbox_drain()
        except Exception:  # the database may be down: the next pass tries again
            log.exception("the outbox drain failed")
            return
        if queued:
            log.info("queued %d outbox item(s)", queued)

    def get_heartbeat_ttl(self, job: Any) -> int:
        if job.timeout and job.timeout > 0:
            remaining = int(job.timeout - self.current_job_working_time)
            return int(min(remaining, self.job_monitoring_interval)) + self.heartbeat_slack_s
        return int(self.job_monitoring_interval) + self.heartbeat_slack_s


def worker_queues(settings: Settings, queues: list[str] | None = None) -> list[str]:
    """The queues a worker listens on, first first: those named, else the main queue and
    the merge queue (one worker does everything)."""
    return list(dict.fromkeys(queues or [settings.queue_name, settings.merge_queue]))


def build_worker(
    settings: Settings,
    drain: Callable[[], int] | None = None,
    name: str | None = None,
    queues: list[str] | None = None,
) -> RetargetWorker:
    configure_threads(settings.torch_threads_per_merge)
    configure_merge_threads(settings.merge_threads)
    names = worker_queues(settings, queues)
    try:  # a missing GPU refuses to start here, not in the middle of a merge
        configure_device(settings.merge_device)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    if not settings.redis_url:
        raise SystemExit("retarget worker needs RETARGET_REDIS_URL (a Redis server)")
    # No socket timeout here: the worker blocks on the queue for up to a minute.
    connection = redis.Redis.from_url(settings.redis_url)
    worker = RetargetWorker(
        [Queue(q, connection=connection, serializer=JSONSerializer) for q in names],
        connection=connection,
        serializer=JSONSerializer,
        name=name,
        job_monitoring_interval=settings.worker_monitoring_interval_s,
        maintenance_interval=settings.worker_maintenance_interval_s,
        # The idle wait must end in time for the next maintenance pass.
        worker_ttl=min(420, settings.worker_maintenance_interval_s + 15),
    )
    worker.heartbeat_slack_s = settings.worker_heartbeat_slack_s
    worker.outbox_interval_s = settings.outbox_interval_s
    worker.outbox_drain = drain
    worker.drain_pid = os.getpid()
    return worker


#: Waits between attempts to reach Redis again after it went away (then the last, repeated).
RECONNECT_DELAYS_S = (0.5, 1, 2, 5, 10)


def run_worker(
    settings: Settings,
    drain: Callable[[], int] | None = None,
    burst: bool = False,
    name: str | None = None,
    queues: list[str] | None = None,
) -> bool:
    """Work the queue; when Redis goes away, wait for it and work on (a new worker
    registration: the old one's job, if any, is retried once its heartbeat lapses)."""
    attempt = 0
    while True:
        try:
            worker = build_worker(settings, drain, name, queues)
            worker.connection.ping()
            attempt = 0
            return bool(worker.work(burst=burst, with_scheduler=True))
        except redis.ConnectionError as exc:
            if burst:
                raise
            delay = RECONNECT_DELAYS_S[min(attempt, len(RECONNECT_DELAYS_S) - 1)]
            attempt += 1
            log.warning("Redis unreachable (%s); trying again in %s s", exc, delay)
            time.sleep(delay)
