"""Dashboard sessions: log in with an API key (admin or read scope), get a signed cookie.

The cookie holds the key's id, an expiry and an HMAC-SHA256 of both under the
session secret; never the key. Every page checks that the key still exists, is
not revoked and still has a scope that may read. The secret is
``RETARGET_SESSION_SECRET`` or, unset, one made once in the database, so every
replica (and every process of ``serve --workers N``) accepts the others' cookies.

Every form post (login, logout) carries a CSRF token: a random nonce and its HMAC
under the same secret, in a cookie and in the form (signed double submit); a post
whose two copies differ, whose MAC fails, or whose ``Origin`` names another host is
refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from service.registry.models import ApiKey

COOKIE = "retarget_session"
CSRF_COOKIE = "retarget_csrf"
CSRF_FIELD = "csrf"
READ_SCOPES = ("admin", "read")


class SessionSigner:
    def __init__(self, secret: Callable[[], str], ttl_s: int) -> None:
        """``secret`` is asked once, on first use (it may read the database)."""
        self._source = secret
        self._secret: bytes | None = None
        self._lock = threading.Lock()
        self.ttl_s = ttl_s

    @property
    def secret(self) -> bytes:
        if self._secret is None:
            with self._lock:
                if self._secret is None:
                    self._secret = self._source().encode()
        return self._secret

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
        if not hmac.compare_digest(mac.encode(), self._mac(f"{key_id}.{expires}").encode()):
            return None
        if not expires.isdigit() or int(expires) < (now or time.time()):
            return None
        return key_id

    def csrf_token(self) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._mac('csrf.' + nonce)}"

    def csrf_valid(self, token: str | None) -> bool:
        if not token or token.count(".") != 1:
            return False
        nonce, mac = token.split(".")
        return hmac.compare_digest(mac.encode(), self._mac("csrf." + nonce).encode())

    def csrf_ok(self, cookie: str | None, form: str | None, origin: str | None, host: str) -> bool:
        """The form's token is the cookie's, both are ours, and the post came from here."""
        if origin is not None and urlsplit(origin).netloc != host:
            return False
        if not cookie or not form or not hmac.compare_digest(cookie.encode(), form.encode()):
            return False
        return self.csrf_valid(cookie)


def readable_key(session: Session, key_id: str) -> ApiKey | None:
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return None
    return row if any(s in READ_SCOPES for s in row.scopes) else None
