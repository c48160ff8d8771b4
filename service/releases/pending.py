"""Releases merged after the request: the budget is reserved at once, the files follow.

``retarget`` stores a large merge's release as ``pending``: the ledger counts it
from that moment (so concurrent releases cannot overdraw the cap), and the
dataset lock is released before any byte is merged. ``finish`` then runs the
merge: on success the row gets its files and becomes ``done``; on failure the row
is deleted, which gives its budget back (nothing of it was shown).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from service.errors import Conflict
from service.registry.db import session_scope
from service.registry.models import Release
from service.releases.retarget import Artifact

log = logging.getLogger(__name__)


def finish(
    factory: sessionmaker[Session], release_id: str, produce: Callable[[], Artifact]
) -> None:
    """Run a pending release's merge and store its result, or delete it on failure."""
    try:
        sha, size, kind, files = produce()
    except BaseException:
        log.exception("the merge of release %s failed; its budget is given back", release_id)
        abandon(factory, release_id)
        raise
    with session_scope(factory) as session:
        row = session.get(Release, release_id)
        if row is None:
            return
        row.sha256, row.size_bytes, row.kind, row.files = sha, size, kind, files
        row.status = "done"


def abandon(factory: sessionmaker[Session], release_id: str) -> None:
    """Delete a release still pending (its merge failed or was never queued): its
    budget is given back, as nothing of it was shown."""
    with session_scope(factory) as session:
        row = session.get(Release, release_id)
        if row is not None and row.status == "pending":
            session.delete(row)


def ready(release: Release) -> None:
    """Refuse to serve a release whose files are still being merged (409)."""
    if release.status == "pending":
        raise Conflict(
            f"release {release.id!r} is still being merged; poll it until its status is 'done'"
        )
