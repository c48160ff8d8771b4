"""Dashboard login and logout: an API key with the admin or read scope, a signed cookie."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.api.deps import ContextDep
from service.api.problems import problem
from service.dashboard.auth import COOKIE, readable_key
from service.dashboard.common import (
    csrf_checked,
    page,
    secure_cookies,
    session_post_checked,
    signer,
)
from service.registry.db import session_scope
from service.registry.keys import find_key
from service.registry.models import ApiKey

router = APIRouter(prefix="/admin", include_in_schema=False)


# ---- login ------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, error: str | None = None) -> HTMLResponse:
    return page(request, "login.html", None, error=error)


@router.post("/login")
def login(
    request: Request,
    ctx: ContextDep,
    key: Annotated[str, Form()] = "",
    csrf: Annotated[str, Form()] = "",
) -> Response:
    if not csrf_checked(request, csrf):
        return page(
            request,
            "login.html",
            None,
            status_code=403,
            error="the form expired or came from elsewhere; try again",
        )
    with session_scope(ctx.session_factory) as session:
        row = find_key(session=session, key=key.strip()) if key.strip() else None
        ok = row is not None and readable_key(session, row.id) is not None
        key_id = row.id if row is not None else ""
        epoch = row.session_epoch if row is not None else 0
    if not ok:
        return page(request, "login.html", None, error="unknown, revoked or not a read/admin key")
    response = RedirectResponse("/admin", status_code=303)
    response.set_cookie(
        COOKIE,
        signer(request).issue(key_id, epoch),
        max_age=ctx.settings.session_ttl_s,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request),
        path="/admin",
    )
    return response


@router.post("/logout")
def logout(request: Request, ctx: ContextDep, csrf: Annotated[str, Form()] = "") -> Response:
    """Ends the session server-side: the key's session epoch moves on, so this cookie
    (and any copy of it, and the key's other dashboard sessions) no longer opens a page."""
    found = signer(request).session(request.cookies.get(COOKIE))
    if found is not None:
        if not session_post_checked(request, csrf):
            return problem(403, "forbidden", "Forbidden", "the form expired or came from elsewhere")
        key_id, epoch = found
        with session_scope(ctx.session_factory) as session:
            session.query(ApiKey).filter(ApiKey.id == key_id, ApiKey.session_epoch == epoch).update(
                {ApiKey.session_epoch: ApiKey.session_epoch + 1}
            )
    response = RedirectResponse("/admin/login", status_code=303)
    response.delete_cookie(COOKIE, path="/admin")
    return response
