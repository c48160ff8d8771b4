"""Dashboard sessions: log in with an API key (admin or read scope), get a signed cookie.

The cookie holds the key's id, an expiry and an HMAC-SHA256 of both under the
session secret; never the key. Every page checks that the key still exists, is
not revoked and still has a scope that may read.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from sqlalchemy.orm import Session

from service.registry.models import ApiKey

COOKIE = "retarget_session"
READ_SCOPES = ("admin", "read")


class SessionSigner:
    def __init__(self, secret: str | None, ttl_s: int) -> None:
        self.secret = (secret or secrets.token_hex(32)).encode()
        self.ttl_s = ttl_s

    def _mac(self, payload: str) -> str:
        return hmac.new(self.secret, payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, key_id: str, now: float | None = None) -> str:
        payload = f"{key_id}.{int((now or time.time()) + self.ttl_s)}"
        return f"{payload}.{self._mac(payload)}"

    def key_id(self, cookie: str | None, now: float | None = None) -> str | None:
        """The key id a valid, unexpired cookie names; None otherwise."""
        if not cookie or cookie.count(".") != 2:
            return None
        key_id, expires, mac = cookie.split(".")
        if not hmac.compare_digest(mac, self._mac(f"{key_id}.{expires}")):
            return None
        if not expires.isdigit() or int(expires) < (now or time.time()):
            return None
        return key_id


def readable_key(session: Session, key_id: str) -> ApiKey | None:
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return None
    return row if any(s in READ_SCOPES for s in row.scopes) else None
