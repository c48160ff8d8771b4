"""API keys: created random, shown once, stored as a sha256 of the whole key.

A key is ``rt_`` + 43 URL-safe characters (256 random bits), so a plain sha256
is enough to store it: there is nothing to brute-force. Scopes:
``admin`` (everything), ``publish`` (datasets and models; dry-run plans scored
by the models themselves), ``release`` (retarget, deployments), ``read`` (every
GET but raw model weights, and dry-run plans from the mechanisms),
``models:download`` (raw weights of registered models: private inputs, each
download charged to the dataset's ledger).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.errors import InvalidInput, NotFound
from service.registry.models import ApiKey

__all__ = [
    "DOWNLOAD_SCOPE",
    "SCOPES",
    "ApiKey",
    "count_keys",
    "create_key",
    "find_key",
    "list_keys",
    "revoke_key",
]

#: raw weights of registered models (every download is charged to the ledger)
DOWNLOAD_SCOPE = "models:download"
SCOPES = ("admin", "publish", "release", "read", DOWNLOAD_SCOPE)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(*, session: Session, name: str, scopes: list[str]) -> tuple[ApiKey, str]:
    """A new key row and the key itself (the only time it exists in clear)."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not scopes:
        raise InvalidInput(f"scopes must be a non-empty subset of {SCOPES}, got {scopes}")
    key = "rt_" + secrets.token_urlsafe(32)
    row = ApiKey(name=name, prefix=key[:10], key_hash=hash_key(key), scopes=sorted(set(scopes)))
    session.add(row)
    session.flush()
    return row, key


def find_key(*, session: Session, key: str) -> ApiKey | None:
    """The live key with this value, if any (lookup by hash; revoked keys count as none)."""
    row = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(key)))
    if row is None or row.revoked_at is not None:
        return None
    return row


def list_keys(*, session: Session, offset: int = 0, limit: int | None = None) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id).offset(offset)
    return list(session.scalars(query.limit(limit) if limit is not None else query))


def count_keys(*, session: Session) -> int:
    return session.scalar(select(func.count()).select_from(ApiKey)) or 0


def revoke_key(*, session: Session, key_id: str) -> ApiKey:
    row = session.get(ApiKey, key_id)
    if row is None:
        raise NotFound(f"no API key with id {key_id!r}")
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
    return row


def count_live_keys(*, session: Session) -> int:
    return (
        session.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.revoked_at.is_(None)))
        or 0
    )
