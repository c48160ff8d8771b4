"""Files sent ahead of a bundle's registration, one blob at a time, named by sha256.

A client uploads each file of a folder with ``PUT /v1/uploads/{sha256}`` and then
registers the bundle by naming the files' paths and sha256s; after an interruption
it asks which are still missing (``missing``) and sends only those. Bounded:

- each upload is streamed into a staged blob (never whole in memory), checked to
  hash to the sha256 it names, and refused past ``max_bytes`` minus what the same
  key already has waiting (one key holds at most one bundle's worth of pending
  uploads: ``RETARGET_MAX_UPLOAD_BYTES``; concurrent uploads of one key may pass it
  by at most one file each);
- rows expire after ``RETARGET_UPLOAD_TTL_S``; each upload and each ``missing`` call
  sweeps a few expired rows, and removes a blob the expired upload created when no
  row (model, release, validation split, other upload) names it.

Possession: a row says that its ``owner`` (the API key) sent these bytes. A
registration may name only its own key's uploads, so a sha256 shown by the API (a
model's or release's files) never lets another key claim private weights it never
had, and ``missing`` answers about the caller's uploads only (no oracle for what
the store holds).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.errors import InvalidInput, PayloadTooLarge
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.models import Upload

#: expired rows removed per sweep (each sweep is bounded work)
SWEEP_ROWS = 100
#: the most sha256s one ``missing`` call asks about (a bundle's files, at most)
MAX_ASKED = 1024


def owner_of(key_id: str | None) -> str:
    """The owner recorded for a key ("" when auth is off: one tenant)."""
    return key_id or ""


def check_sha256(value: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise InvalidInput(f"not a lowercase sha256 hex digest: {value[:80]!r}")
    return value


def pending_bytes(*, session: Session, owner: str, besides: str | None = None) -> int:
    """What ``owner`` has uploaded and not registered yet (``besides`` left out)."""
    query = select(func.coalesce(func.sum(Upload.size_bytes), 0)).where(Upload.owner == owner)
    if besides is not None:
        query = query.where(Upload.sha256 != besides)
    return int(session.scalar(query) or 0)


def receive(
    *,
    session: Session,
    blobs: BlobStore,
    owner: str,
    sha256: str,
    chunks: Iterable[bytes],
    max_bytes: int,
    ttl_s: int,
) -> tuple[Upload, bool]:
    """Store the bytes of one upload and record that ``owner`` sent them; commits.
    Returns the row and whether it is new (an upload sent again refreshes it)."""
    check_sha256(sha256)
    sweep(session=session, blobs=blobs, ttl_s=ttl_s)
    room = max_bytes - pending_bytes(session=session, owner=owner, besides=sha256)
    if room <= 0:
        raise PayloadTooLarge(
            f"this key already has {max_bytes - room} bytes uploaded and not registered "
            f"(the limit is {max_bytes}): register them, or wait {ttl_s} s for them to expire",
            limit=max_bytes,
        )
    staged = blobs.stage(chunks, max_bytes=room)
    if staged.sha256 != sha256:
        blobs.discard(staged)
        raise InvalidInput(
            f"the bytes sent hash to {staged.sha256}, not to the sha256 in the path {sha256}",
            sha256=staged.sha256,
        )
    created = blobs.promote(staged)
    row = session.get(Upload, (owner, sha256))
    new = row is None
    if row is None:
        row = Upload(owner=owner, sha256=sha256, size_bytes=staged.size, created=created)
        session.add(row)
    else:
        row.created = row.created or created
        row.created_at = datetime.now(UTC)
    try:
        session.commit()
    except IntegrityError:  # the same key sent the same bytes at the same time: recorded
        session.rollback()
        row = session.get(Upload, (owner, sha256)) or row
        new = False
    except BaseException:
        session.rollback()
        if created and not repository._blob_referenced(session, sha256):
            blobs.delete(sha256)
        raise
    return row, new


def missing(
    *, session: Session, blobs: BlobStore, owner: str, shas: list[str], ttl_s: int
) -> list[str]:
    """Which of ``shas`` ``owner`` has not uploaded (or whose blob is gone), in order."""
    if len(shas) > MAX_ASKED:
        raise InvalidInput(f"ask about at most {MAX_ASKED} sha256s at once, got {len(shas)}")
    for sha in shas:
        check_sha256(sha)
    sweep(session=session, blobs=blobs, ttl_s=ttl_s)
    have = set(
        session.scalars(
            select(Upload.sha256).where(Upload.owner == owner, Upload.sha256.in_(set(shas)))
        )
    )
    gone = {sha for sha in have if not blobs.exists(sha)}
    if gone:
        session.execute(delete(Upload).where(Upload.owner == owner, Upload.sha256.in_(gone)))
        session.commit()
    return list(dict.fromkeys(s for s in shas if s not in have or s in gone))


def consume(*, session: Session, owner: str, shas: Iterable[str]) -> None:
    """The registration that names these uploads is being committed: they are no longer
    pending (flushed with the caller's transaction)."""
    names = set(shas)
    if names:
        session.execute(delete(Upload).where(Upload.owner == owner, Upload.sha256.in_(names)))


def sweep(*, session: Session, blobs: BlobStore, ttl_s: int, now: datetime | None = None) -> int:
    """Remove up to ``SWEEP_ROWS`` expired uploads (committed), and the blobs they
    created that nothing names any more. Returns the rows removed."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=ttl_s)
    rows = list(
        session.scalars(
            select(Upload)
            .where(Upload.created_at < cutoff)
            .order_by(Upload.created_at)
            .limit(SWEEP_ROWS)
        )
    )
    if not rows:
        return 0
    created = {r.sha256 for r in rows if r.created}
    for row in rows:
        session.delete(row)
    session.commit()
    for sha in sorted(created):
        still = session.scalar(select(Upload.sha256).where(Upload.sha256 == sha).limit(1))
        if still is None and not repository._blob_referenced(session, sha):
            blobs.delete(sha)
    return len(rows)
