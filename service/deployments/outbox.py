"""The outbox: deployment work recorded in the database, put on the queue after the commit.

Whatever asks for the work (a signed webhook, a policy change that must be announced)
adds an ``OutboxItem`` in its own transaction, so the request and its work are stored
together or not at all. After the commit the item is dispatched to the queue; when the
queue is down it stays due, and a drain (every worker, every few seconds; the API at
start-up and when the same webhook is delivered again) dispatches it later.

Exactly once, whatever runs twice: an attempt claims the item by moving ``attempts``
from n to n + 1 (a conditional UPDATE: one claimer wins), and work that changes state
marks the item done in the same transaction as the change, again conditionally on the
attempt it claimed; a stale or duplicated attempt finds the row moved on and stops
(``Superseded``), its transaction rolled back.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from service.errors import NotFound, StorageError
from service.jobs.queue import JobInfo, Jobs
from service.registry.db import session_scope
from service.registry.models import OutboxItem

log = logging.getLogger(__name__)

JOB_PREFIX = "outbox-"
#: after a failed enqueue, a drain may try again this soon
REDISPATCH_S = 5.0


class Superseded(Exception):
    """Another attempt claimed or finished this item first: this one must change nothing."""


def job_id(item_id: str) -> str:
    """The public job id of an item (``GET /v1/jobs/{id}``)."""
    return f"{JOB_PREFIX}{item_id}"


def _now() -> datetime:
    return datetime.now(UTC)


def add(session: Session, kind: str, payload: dict[str, Any]) -> OutboxItem:
    """Record work in the caller's transaction (due at once)."""
    item = OutboxItem(kind=kind, payload=payload, status="pending", attempts=0)
    item.next_attempt_at = _now()
    session.add(item)
    session.flush()
    return item


def _submit(jobs: Jobs, item_id: str, attempt: int, kind: str, delay_s: float) -> None:
    jobs.submit(
        "outbox",
        {"item_id": item_id, "attempt": attempt},
        background=kind == "notify",
        job_id=f"{JOB_PREFIX}{item_id}-{attempt}",
        delay_s=delay_s,
        retries=0,  # an attempt is not retried by the queue: the outbox schedules its own
    )


def dispatch(
    *,
    session_factory: sessionmaker[Session],
    jobs: Jobs,
    item_id: str,
    lease_s: float,
    overdue_only: bool = True,
) -> bool:
    """Put a due item on the queue unless another dispatcher just did: the dispatcher
    that moves ``next_attempt_at`` past the lease owns it. A queue that is down leaves
    the item due again shortly. True when this call queued it.

    ``overdue_only=False`` also takes items whose lease has not lapsed: for a process
    that starts where nothing else can hold them (the embedded mode's start-up)."""
    now = _now()
    horizon = now if overdue_only else datetime.max.replace(tzinfo=UTC)
    with session_scope(session_factory) as session:
        item = session.get(OutboxItem, item_id)
        if item is None or item.status != "pending" or item.next_attempt_at > horizon:
            return False
        attempt, kind = item.attempts, item.kind
        claimed = session.execute(
            update(OutboxItem)
            .where(
                OutboxItem.id == item_id,
                OutboxItem.status == "pending",
                OutboxItem.attempts == attempt,
                OutboxItem.next_attempt_at <= horizon,
            )
            .values(next_attempt_at=now + timedelta(seconds=lease_s), updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            return False
    try:
        _submit(jobs, item_id, attempt, kind, 0.0)
    except StorageError as exc:
        log.warning("outbox item %s stays due: the queue is unreachable (%s)", item_id, exc)
        _due_again(session_factory, item_id, attempt, REDISPATCH_S)
        return False
    return True


def schedule_retry(
    *,
    session_factory: sessionmaker[Session],
    jobs: Jobs,
    item_id: str,
    attempts: int,
    delay_s: float,
    lease_s: float,
) -> None:
    """Queue the item's next attempt ``delay_s`` from now (the queue holds the wait)."""
    now = _now()
    with session_scope(session_factory) as session:
        item = session.get(OutboxItem, item_id)
        if item is None or item.status != "pending" or item.attempts != attempts:
            return
        kind = item.kind
        item.next_attempt_at = now + timedelta(seconds=delay_s + lease_s)
        item.updated_at = now
    try:
        _submit(jobs, item_id, attempts, kind, delay_s)
    except StorageError as exc:
        log.warning("outbox item %s: retry left to the drain (%s)", item_id, exc)
        _due_again(session_factory, item_id, attempts, delay_s)


def _due_again(
    session_factory: sessionmaker[Session], item_id: str, attempt: int, after_s: float
) -> None:
    now = _now()
    with session_scope(session_factory) as session:
        session.execute(
            update(OutboxItem)
            .where(
                OutboxItem.id == item_id,
                OutboxItem.status == "pending",
                OutboxItem.attempts == attempt,
            )
            .values(next_attempt_at=now + timedelta(seconds=after_s), updated_at=now)
            .execution_options(synchronize_session=False)
        )


def drain(
    *,
    session_factory: sessionmaker[Session],
    jobs: Jobs,
    lease_s: float,
    limit: int = 100,
    overdue_only: bool = True,
) -> int:
    """Dispatch every due item (at most ``limit``; ``overdue_only``: see ``dispatch``);
    the number queued."""
    query = select(OutboxItem.id).where(OutboxItem.status == "pending")
    if overdue_only:
        query = query.where(OutboxItem.next_attempt_at <= _now())
    with session_scope(session_factory) as session:
        due = list(session.scalars(query.order_by(OutboxItem.next_attempt_at).limit(limit)))
    queued = 0
    for item_id in due:
        if dispatch(
            session_factory=session_factory,
            jobs=jobs,
            item_id=item_id,
            lease_s=lease_s,
            overdue_only=overdue_only,
        ):
            queued += 1
    return queued


def claim(
    session_factory: sessionmaker[Session], item_id: str, attempt: int, lease_s: float
) -> OutboxItem | None:
    """Start attempt ``attempt`` (the item's attempts move to attempt + 1); None when
    another attempt got there first or the item is finished."""
    now = _now()
    with session_scope(session_factory) as session:
        won = session.execute(
            update(OutboxItem)
            .where(
                OutboxItem.id == item_id,
                OutboxItem.status == "pending",
                OutboxItem.attempts == attempt,
            )
            .values(
                attempts=attempt + 1,
                next_attempt_at=now + timedelta(seconds=lease_s),
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        if won.rowcount != 1:  # type: ignore[attr-defined]
            return None
        item = session.get(OutboxItem, item_id)
        assert item is not None
        session.expunge(item)
        return item


def finish(
    session: Session,
    item_id: str,
    attempts: int,
    status: str,
    result: dict[str, Any],
) -> None:
    """Mark the item ``done`` or ``failed`` in the caller's transaction, only if attempt
    ``attempts`` still owns it; else raise ``Superseded`` (the caller rolls back)."""
    now = _now()
    moved = session.execute(
        update(OutboxItem)
        .where(
            OutboxItem.id == item_id,
            OutboxItem.status == "pending",
            OutboxItem.attempts == attempts,
        )
        .values(status=status, result=result, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        raise Superseded(f"outbox item {item_id} was finished by another attempt")


def note(session_factory: sessionmaker[Session], item_id: str, result: dict[str, Any]) -> None:
    """Keep the latest outcome on a pending item (shown on its job)."""
    with session_scope(session_factory) as session:
        item = session.get(OutboxItem, item_id)
        if item is not None and item.status == "pending":
            item.result = result


def job_info(session: Session, public_id: str) -> JobInfo:
    """An outbox item as a job: queued, started (or scheduled for a retry), finished, failed."""
    item = (
        session.get(OutboxItem, public_id.removeprefix(JOB_PREFIX))
        if public_id.startswith(JOB_PREFIX)
        else None
    )
    if item is None:
        raise NotFound(f"no job with id {public_id!r}")
    result = item.result or None
    if item.status == "done":
        status, error = "finished", None
    elif item.status == "failed":
        status, error = "failed", str((result or {}).get("reason") or "failed")
    elif item.attempts == 0:
        status, error = "queued", None
    else:
        status, error = ("scheduled" if result else "started"), None
    return JobInfo(
        id=public_id,
        kind=item.kind,
        status=status,
        error=error,
        result=result,
        enqueued_at=item.created_at,
        ended_at=item.updated_at if item.status in ("done", "failed") else None,
        meta={"attempts": item.attempts},
    )


def find_job(session_factory: sessionmaker[Session], jobs: Jobs, public_id: str) -> JobInfo:
    """A job by its public id: an outbox item's, else the queue's (``NotFound``)."""
    if public_id.startswith(JOB_PREFIX):
        with session_scope(session_factory) as session:
            return job_info(session, public_id)
    return jobs.get(public_id)


def item_id(public_id: str) -> str | None:
    """The outbox item behind a public job id (None: not an outbox job)."""
    return public_id.removeprefix(JOB_PREFIX) if public_id.startswith(JOB_PREFIX) else None
