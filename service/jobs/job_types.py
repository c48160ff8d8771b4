"""What every job backend offers (``Jobs``) and what a job looks like from outside
(``JobInfo``): the in-process default and RQ (``service.jobs.queue``) both implement it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from service.accounting.mechanisms import Mechanism
from service.accounting.profiles import PrivacyProfile
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

    def profile(self, mechanism: Mechanism) -> tuple[PrivacyProfile | None, JobInfo | None]:
        """The profile if cached (or computed here); else the job computing it."""
        ...

    def warm(self, mechanism: Mechanism) -> None:
        """Have the profile computed ahead of its first use where that costs no request."""
        ...

    def get(self, job_id: str) -> JobInfo: ...

    def submit(
        self,
        kind: str,
        kwargs: dict[str, Any],
        background: bool = False,
        *,
        job_id: str | None = None,
        delay_s: float = 0.0,
    ) -> JobInfo:
        """Run a deployment job (``outbox``: an outbox item's attempt) here or on a
        worker; ``delay_s`` schedules it on the queue (nothing sleeps meanwhile)."""
        ...

    def ready(self) -> tuple[bool, str]: ...

    def workers(self) -> str:
        """ "ok" or "in-process" when someone computes queued jobs, else why not."""
        ...

    def merge_workers(self) -> str:
        """ "ok" or "in-process" when someone runs queued release merges, else why not."""
        ...

    def queue_sizes(self) -> dict[str, int]: ...
