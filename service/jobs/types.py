"""What every job backend offers (``Jobs``) and what a job looks like from outside
(``JobInfo``): the in-process default and RQ (``service.jobs.queue``) both implement it.

A job is named by its kind; what each kind runs is the application's task table
(``service.tasks``), handed to the backend when it is built. Nothing here knows a kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from service.jobs.metrics import Counters


@dataclass
class JobInfo:
    id: str
    kind: str
    status: str  # queued | started | finished | failed | scheduled | deferred
    error: str | None = None
    result: dict[str, Any] | None = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Jobs(Protocol):
    counters: Counters

    def get(self, job_id: str) -> JobInfo: ...

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
        """Run a job of ``kind`` here or on a worker. ``delay_s`` schedules it (nothing
        sleeps meanwhile); ``queue`` names another queue than the main one (RQ);
        ``retries`` overrides the default number of retries of a lost or failed job."""
        ...

    def ready(self) -> tuple[bool, str]: ...

    def workers(self) -> str:
        """ "ok" or "in-process" when someone runs queued jobs, else why not."""
        ...

    def merge_workers(self) -> str:
        """ "ok" or "in-process" when someone listens on the merge queue, else why not."""
        ...

    def queue_sizes(self) -> dict[str, int]: ...
