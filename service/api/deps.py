"""Dependencies as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from sqlalchemy.orm import Session

from service.api.context import AppContext, Principal
from service.api.gate import bearer, lookup
from service.config import Settings
from service.errors import Forbidden, Unauthenticated
from service.jobs.queue import Jobs
from service.registry.blobs import BlobStore


def get_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


ContextDep = Annotated[AppContext, Depends(get_context)]


def get_session(ctx: ContextDep) -> Iterator[Session]:
    session = ctx.session_factory()
    try:
        yield session
    finally:
        session.close()


def get_blobs(ctx: ContextDep) -> BlobStore:
    return ctx.blobs


def get_settings_dep(ctx: ContextDep) -> Settings:
    return ctx.settings


SessionDep = Annotated[Session, Depends(get_session)]
BlobsDep = Annotated[BlobStore, Depends(get_blobs)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_jobs(ctx: ContextDep) -> Jobs:
    return ctx.jobs


JobsDep = Annotated[Jobs, Depends(get_jobs)]

#: Every list endpoint pages the same way: ``?offset=&limit=`` in, and
#: ``{data, count, offset, limit}`` out (``count``: all the rows there are).
Offset = Annotated[int, Query(ge=0, le=10**9)]
Limit = Annotated[int, Query(ge=1, le=500)]


def _principal(request: Request, ctx: AppContext) -> Principal:
    if not ctx.settings.auth:
        return Principal(None, "auth disabled", ("admin",))
    known: Principal | None = getattr(request.state, "principal", None)
    if known is not None:  # checked by the gate (service.api.gate)
        return known
    key = bearer(request.headers.get("authorization"))
    if key is None:
        raise Unauthenticated("send an API key: Authorization: Bearer <key>")
    principal = lookup(ctx, key)
    if principal is None:
        raise Unauthenticated("unknown or revoked API key")
    return principal


def require(scope: str) -> Any:
    """A dependency that admits keys with ``scope`` (or ``admin``)."""

    def check(request: Request, ctx: ContextDep) -> Principal:
        principal = _principal(request, ctx)
        if not principal.can(scope):
            raise Forbidden(f"this operation needs an API key with scope {scope!r}")
        return principal

    check.required_scope = scope  # type: ignore[attr-defined]
    return Depends(check)


def required_scope(route: Any) -> str | None:
    """The scope a route's ``require`` dependency asks for (None: an open route)."""
    dependant = getattr(route, "dependant", None)
    for dep in dependant.dependencies if dependant is not None else []:
        scope = getattr(dep.call, "required_scope", None)
        if scope is not None:
            return str(scope)
    return None
