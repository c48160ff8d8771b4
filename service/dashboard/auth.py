"""Dashboard sessions: log in with an API key (admin or read scope), get a signed cookie.

The cookie holds the key's id, the key's session epoch at login, an expiry and an
HMAC-SHA256 of the three under the session secret; never the key. Every page checks
that the key still exists, is not revoked, still has a scope that may read, and that
its epoch in the database is still the cookie's: logout bumps it, which ends the
session server-side (a copied cookie stops working; so do the key's other sessions).
The secret is ``RETARGET_SESSION_SECRET`` or, unset, one made once in the database,
so every replica (and every process of ``serve --workers N``) accepts the others'
cookies.

Every dashboard POST (login, logout, a charged download) is refused unless it came
from this origin (``Sec-Fetch-Site``, when the browser sends it, is ``same-origin``;
``Origin``, when sent, names this scheme-less host and port) and carries a CSRF
token in its form. Logged in, the token is bound to the session: an HMAC of the
session cookie (which scripts cannot read), so a token from another session, or
from before logging in, fails. The login form, which has no session yet, uses a
signed double submit: a random nonce and its HMAC, in a cookie and in the form.
Side effects never ride on a GET.
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

    def issue(self, key_id: str, epoch: int, now: float | None = None) -> str:
        payload = f"{key_id}.{epoch}.{int((now or time.time()) + self.ttl_s)}"
        return f"{payload}.{self._mac(payload)}"

    def session(self, cookie: str | None, now: float | None = None) -> tuple[str, int] | None:
        """The key id and session epoch a valid, unexpired cookie names; None otherwise."""
        if not cookie or cookie.count(".") != 3:
            return None
        key_id, epoch, expires, mac = cookie.split(".")
        expected = self._mac(f"{key_id}.{epoch}.{expires}")
        if not hmac.compare_digest(mac.encode(), expected.encode()):
            return None
        if not epoch.isdigit() or not expires.isdigit() or int(expires) < (now or time.time()):
            return None
        return key_id, int(epoch)

    def session_csrf(self, cookie: str) -> str:
        """The CSRF token of the session whose cookie is ``cookie``."""
        return "s." + self._mac("csrf-session." + cookie)

    def session_csrf_ok(self, cookie: str | None, form: str | None) -> bool:
        if not cookie or not form:
            return False
        return hmac.compare_digest(form.encode(), self.session_csrf(cookie).encode())

    def csrf_token(self) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._mac('csrf.' + nonce)}"

    def csrf_valid(self, token: str | None) -> bool:
        if not token or token.count(".") != 1:
            return False
        nonce, mac = token.split(".")
        return hmac.compare_digest(mac.encode(), self._mac("csrf." + nonce).encode())

    def csrf_ok(self, cookie: str | None, form: str | None) -> bool:
        """The form's token is the cookie's and both are ours (the login form)."""
        if not cookie or not form or not hmac.compare_digest(cookie.encode(), form.encode()):
            return False
        return self.csrf_valid(cookie)


def same_origin(origin: str | None, fetch_site: str | None, host: str) -> bool:
    """Whether a POST came from a page of this origin: ``Sec-Fetch-Site`` (sent by every
    current browser) must say ``same-origin`` (``same-site`` is another port or
    subdomain of the host, a different origin), and ``Origin``, when sent, must name
    this host and port. A request with neither (not a browser's) passes here and still
    needs its token."""
    if fetch_site is not None and fetch_site != "same-origin":
        return False
    return origin is None or urlsplit(origin).netloc == host


def readable_key(session: Session, key_id: str) -> ApiKey | None:
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return None
    return row if any(s in READ_SCOPES for s in row.scopes) else None
