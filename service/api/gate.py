"""Authentication before anything else: a /v1 request without a valid API key is
answered 401 before its body is read or parsed, so a caller without a key learns
nothing about what the body would have done (not even that it was malformed).

The key's principal is left in the request state for ``deps.require`` to check
the scope. Lookups are cached for a few seconds per process (a revoked key stops
working on this replica at once, on others within ``KEY_CACHE_TTL_S``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.context import AppContext, KeyCache, Principal
from service.api.problems import problem
from service.registry.keys import find_key

log = logging.getLogger(__name__)

#: Paths under /v1 that are authenticated otherwise (signed webhooks).
OPEN_PREFIXES = ("/v1/webhooks/",)


def lookup(ctx: AppContext, key: str) -> Principal | None:
    """The principal of ``key`` (None: unknown or revoked), cached briefly."""
    cache: KeyCache = ctx.key_cache
    digest = hashlib.sha256(key.encode()).hexdigest()
    found, principal = cache.get(digest)
    if found:
        return principal
    session = ctx.session_factory()
    try:
        row = find_key(session=session, key=key)
        principal = Principal(row.id, row.name, tuple(row.scopes)) if row is not None else None
    finally:
        session.close()
    cache.put(digest, principal)
    return principal


def bearer(header: str | None) -> str | None:
    scheme, _, key = (header or "").partition(" ")
    return key.strip() if scheme.lower() == "bearer" and key.strip() else None


class ApiKeyGate:
    def __init__(self, app: ASGIApp, context: Callable[[], AppContext]) -> None:
        self.app = app
        self.context = context

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        ctx = self.context()
        if (
            scope["type"] != "http"
            or not path.startswith("/v1/")
            or path.startswith(OPEN_PREFIXES)
            or not ctx.settings.auth
        ):
            await self.app(scope, receive, send)
            return
        key = bearer(Headers(scope=scope).get("authorization"))
        principal = None
        if key:
            found, principal = ctx.key_cache.get(hashlib.sha256(key.encode()).hexdigest())
            if not found:  # a database lookup: off the event loop
                try:
                    principal = await run_in_threadpool(lookup, ctx, key)
                except SQLAlchemyError as exc:
                    # outside the app's error handlers: answer the outage here (503, or
                    # 429 when the pool stayed taken), never a 500
                    busy = isinstance(exc, PoolTimeoutError)
                    log.warning("API key lookup failed: %s", type(exc).__name__)
                    response = problem(
                        429 if busy else 503,
                        "busy" if busy else "storage-unavailable",
                        "Busy, retry later" if busy else "Storage unavailable",
                        "the service is busy; retry shortly"
                        if busy
                        else "the database is unreachable; try again shortly",
                        headers={"Retry-After": "1" if busy else "2"},
                    )
                    await response(scope, receive, send)
                    return
        if principal is None:
            detail = (
                "unknown or revoked API key"
                if key
                else "send an API key: Authorization: Bearer <key>"
            )
            response = problem(
                401, "unauthorized", "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
