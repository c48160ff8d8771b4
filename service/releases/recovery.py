"""Start-up recovery of releases whose merge died with its process.

A release merged after its request is stored ``pending`` first, and the ledger counts
its budget from then (``service.releases.pending``). If the process running the
merge dies (a SIGKILL, an out-of-memory kill, a power cut) the row would stay
``pending`` for good: its budget reserved, the same request answered 202 forever.
So when the service starts, every pending release whose merge is not running is
merged again: embedded, on this process's job threads (nothing else could be merging
it); with Redis, put back on the merge queue unless its job is still queued or
running there. Merges are deterministic (the plan, the weights and the drawn model
are stored with the release), so a merge run twice stores the same files.

Each take-up bumps ``merge_recoveries`` by a conditional update, so of several
processes starting at once one takes each release; past ``MAX_RECOVERIES`` (a merge
that keeps killing its process) the release is abandoned: deleted, which frees its
budget, as nothing of it was shown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from service.registry.db import session_scope
from service.registry.models import Release
from service.releases.pending import abandon

log = logging.getLogger(__name__)

#: how many starts may take up one pending merge before it is abandoned
MAX_RECOVERIES = 3


@dataclass
class Recovered:
    """What a start did with the pending releases it found."""

    resubmitted: list[str] = field(default_factory=list)
    #: release id -> the id of the job merging it again (when the queue gives one)
    jobs: dict[str, str] = field(default_factory=dict)
    abandoned: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)


def recover_pending(
    factory: sessionmaker[Session],
    *,
    running: Callable[[str], bool],
    resubmit: Callable[[str], str | None],
    limit: int = 10_000,
) -> Recovered:
    """Take up every pending release whose merge is not ``running``: ``resubmit`` it
    (after counting the take-up), or abandon it past ``MAX_RECOVERIES`` or when
    ``resubmit`` fails. At most ``limit`` releases per start (oldest first)."""
    out = Recovered()
    with session_scope(factory) as session:
        rows = session.execute(
            select(Release.id, Release.merge_recoveries)
            .where(Release.status == "pending")
            .order_by(Release.created_at)
            .limit(limit)
        ).all()
    for release_id, taken in rows:
        if running(release_id):
            out.running.append(release_id)
            continue
        if taken >= MAX_RECOVERIES:
            log.error(
                "release %s: its merge died with its process %d times; abandoned, its "
                "budget given back",
                release_id,
                taken,
            )
            abandon(factory, release_id)
            out.abandoned.append(release_id)
            continue
        if not _claim(factory, release_id, taken):
            continue  # another process starting now took it
        try:
            job_id = resubmit(release_id)
        except Exception:
            log.exception("release %s: its merge could not be queued again", release_id)
            abandon(factory, release_id)
            out.abandoned.append(release_id)
            continue
        log.warning(
            "release %s was left pending by a process that died: merging it again", release_id
        )
        out.resubmitted.append(release_id)
        if job_id is not None:
            out.jobs[release_id] = job_id
    return out


def _claim(factory: sessionmaker[Session], release_id: str, taken: int) -> bool:
    with session_scope(factory) as session:
        result = session.execute(
            update(Release)
            .where(
                Release.id == release_id,
                Release.status == "pending",
                Release.merge_recoveries == taken,
            )
            .values(merge_recoveries=taken + 1)
        )
        return bool(getattr(result, "rowcount", 0) == 1)
