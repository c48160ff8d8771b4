"""The admin dashboard's shared parts: templates, the logged-in viewer, small formatters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from service.accounting.conversions import round_up
from service.accounting.mechanisms import parse_mechanism
from service.api.deps import AppContext, ContextDep
from service.dashboard.auth import (
    COOKIE,
    CSRF_COOKIE,
    CSRF_FIELD,
    SessionSigner,
    readable_key,
    same_origin,
)
from service.dashboard.svg import Chart, render
from service.deployments.callbacks import redact_url
from service.errors import InvalidInput, ProfileFailed, ProfilesPending, Unsupported
from service.profiles.source import profiles_or_pending
from service.registry.db import session_scope
from service.registry.keys import DOWNLOAD_SCOPE
from service.registry.models import ApiKey, Dataset, Model

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
DEFAULT_DELTA = 1e-5


class LoginRequired(Exception):
    pass


def signer(request: Request) -> SessionSigner:
    signer: SessionSigner = request.app.state.session_signer
    return signer


def viewer(request: Request, ctx: ContextDep) -> ApiKey:
    """The key of a live session: a valid cookie whose epoch is still its key's."""
    found = signer(request).session(request.cookies.get(COOKIE))
    if found is None:
        raise LoginRequired
    key_id, epoch = found
    with session_scope(ctx.session_factory) as session:
        row = readable_key(session, key_id)
        if row is None or row.session_epoch != epoch:
            raise LoginRequired
        session.expunge(row)
        return row


Viewer = Annotated[ApiKey, Depends(viewer)]


def viewer_can(viewer_key: ApiKey, scope: str) -> bool:
    """Whether the logged-in key carries ``scope`` (``admin`` carries every scope)."""
    return scope in viewer_key.scopes or "admin" in viewer_key.scopes


def secure_cookies(request: Request) -> bool:
    """Over TLS: the request's scheme, which a trusted proxy's X-Forwarded-Proto sets
    (``RETARGET_FORWARDED_ALLOW_IPS``; service.api.proxy)."""
    return request.url.scheme == "https"


def page(
    request: Request,
    name: str,
    viewer_key: ApiKey | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """A rendered page; its forms get the CSRF token: the session's when logged in, else
    the login form's (made, and set as a cookie, on the first page a browser sees)."""
    sign = signer(request)
    session_cookie = request.cookies.get(COOKIE)
    token = request.cookies.get(CSRF_COOKIE)
    fresh = False
    if viewer_key is not None and session_cookie:
        token = sign.session_csrf(session_cookie)
    elif not sign.csrf_valid(token):
        token, fresh = sign.csrf_token(), True
    response = templates.TemplateResponse(
        request,
        name,
        {
            "viewer": viewer_key,
            "round_up": round_up,
            "csrf_field": CSRF_FIELD,
            "csrf": token,
            "safe_url": redact_url,
            "can_download": viewer_key is not None and viewer_can(viewer_key, DOWNLOAD_SCOPE),
            **context,
        },
        status_code=status_code,
    )
    if fresh:
        response.set_cookie(
            CSRF_COOKIE,
            str(token),
            httponly=True,
            samesite="strict",
            secure=secure_cookies(request),
            path="/admin",
        )
    return response


def from_here(request: Request) -> bool:
    """Whether a POST came from a page of this origin (``auth.same_origin``)."""
    headers = request.headers
    return same_origin(
        headers.get("origin"), headers.get("sec-fetch-site"), headers.get("host", "")
    )


def csrf_checked(request: Request, form_token: str | None) -> bool:
    """The login form's post: from here, with the double-submitted token."""
    return from_here(request) and signer(request).csrf_ok(
        request.cookies.get(CSRF_COOKIE), form_token
    )


def session_post_checked(request: Request, form_token: str | None) -> bool:
    """A logged-in post (logout, a charged download): from here, with the session's token."""
    return from_here(request) and signer(request).session_csrf_ok(
        request.cookies.get(COOKIE), form_token
    )


def svg_response(chart: Chart) -> Response:
    return Response(render(chart), media_type="image/svg+xml")


def dataset_delta(dataset: Dataset) -> float:
    return dataset.delta_cap or DEFAULT_DELTA


def mechanism_summary(mech: dict[str, Any]) -> str:
    kind = mech.get("type", "?")
    if kind == "dp_sgd":
        segments = mech.get("schedule") or [mech]
        optimizer = mech.get("optimizer", "sgd")
        steps = sum(int(seg.get("steps") or 0) for seg in segments)
        first = segments[0]
        if len(segments) == 1 and first.get("noise_multiplier") is not None:
            return (
                f"DP-SGD q={first['sampling_rate']:.4g} sigma={first['noise_multiplier']:g} "
                f"C={first['clipping_norm']:g} T={steps} ({optimizer})"
            )
        return f"DP-SGD, {len(segments)} segments, T={steps} ({optimizer})"
    if kind == "gaussian":
        return f"Gaussian x{mech.get('count', 1)}"
    if kind == "epsilon_delta":
        return f"({mech.get('epsilon')}, {mech.get('delta')})-DP"
    return kind.replace("_", " ")


def model_epsilons(
    ctx: AppContext, models: list[Model], delta: float
) -> tuple[list[float | str | None], bool]:
    """Each model's epsilon at ``delta`` (best of RDP and PLD): one profile lookup and one
    cached epsilon (``ctx.epsilons``) per distinct mechanism. None while its profile is
    computed, "failed" when it failed: one costly model never hides the others. Also
    whether any is pending."""
    by_hash: dict[str, float | str | None] = {}
    pending = False
    for m in models:
        if m.mechanism_hash in by_hash:
            continue
        try:
            profile, job = ctx.profiles.profile(parse_mechanism(m.mechanism))
        except (ProfileFailed, InvalidInput, Unsupported):
            by_hash[m.mechanism_hash] = "failed"
            continue
        if profile is None:
            failed = job is not None and job.status == "failed"
            by_hash[m.mechanism_hash] = "failed" if failed else None
            pending = pending or not failed
            continue
        by_hash[m.mechanism_hash] = ctx.epsilons.epsilon(profile, delta, "best")
    return [by_hash[m.mechanism_hash] for m in models], pending


def model_profiles(ctx: AppContext, models: list[Model]) -> list[Any] | None:
    """The models' profiles, or None while any is still being computed."""
    try:
        return profiles_or_pending(
            ctx.profiles, [(f"model {m.id!r}", parse_mechanism(m.mechanism)) for m in models]
        )
    except ProfilesPending:
        return None
