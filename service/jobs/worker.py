"""`retarget worker`: an RQ worker on the accounting queue."""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from rq import Queue, Worker
from rq.serializers import JSONSerializer

from service.config import Settings
from service.merging.base import configure_threads

log = logging.getLogger(__name__)


class RetargetWorker(Worker):
    """RQ's forking worker with a configurable heartbeat slack.

    A job whose worker stops heartbeating for ``monitoring interval + slack`` is
    taken as lost: the next maintenance pass of any worker retries it (while
    retries are left) or marks it failed.
    """

    heartbeat_slack_s = 60

    def get_heartbeat_ttl(self, job: Any) -> int:
        if job.timeout and job.timeout > 0:
            remaining = int(job.timeout - self.current_job_working_time)
            return int(min(remaining, self.job_monitoring_interval)) + self.heartbeat_slack_s
        return int(self.job_monitoring_interval) + self.heartbeat_slack_s


def build_worker(settings: Settings, name: str | None = None) -> RetargetWorker:
    configure_threads(settings.torch_threads_per_merge)
    if not settings.redis_url:
        raise SystemExit("retarget worker needs RETARGET_REDIS_URL (a Redis server)")
    # No socket timeout here: the worker blocks on the queue for up to a minute.
    connection = redis.Redis.from_url(settings.redis_url)
    worker = RetargetWorker(
        [Queue(settings.queue_name, connection=connection, serializer=JSONSerializer)],
        connection=connection,
        serializer=JSONSerializer,
        name=name,
        job_monitoring_interval=settings.worker_monitoring_interval_s,
        maintenance_interval=settings.worker_maintenance_interval_s,
        # The idle wait must end in time for the next maintenance pass.
        worker_ttl=min(420, settings.worker_maintenance_interval_s + 15),
    )
    worker.heartbeat_slack_s = settings.worker_heartbeat_slack_s
    return worker


#: Waits between attempts to reach Redis again after it went away (then the last, repeated).
RECONNECT_DELAYS_S = (0.5, 1, 2, 5, 10)


def run_worker(settings: Settings, burst: bool = False, name: str | None = None) -> bool:
    """Work the queue; when Redis goes away, wait for it and work on (a new worker
    registration: the old one's job, if any, is retried once its heartbeat lapses)."""
    attempt = 0
    while True:
        try:
            worker = build_worker(settings, name)
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
