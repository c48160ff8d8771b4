"""`retarget worker`: an RQ worker on the accounting queue."""

from __future__ import annotations

from typing import Any

import redis
from rq import Queue, Worker
from rq.serializers import JSONSerializer

from service.config import Settings


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


def run_worker(settings: Settings, burst: bool = False, name: str | None = None) -> bool:
    return bool(build_worker(settings, name).work(burst=burst, with_scheduler=True))
