"""The admin dashboard's shared parts: templates, the logged-in viewer, small formatters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from service.accounting.conversions import round_up
from service.accounting.mechanisms import parse_mechanism
from service.api.deps import AppContext, ContextDep
from service.dashboard.auth import COOKIE, SessionSigner, readable_key
from service.dashboard.svg import Chart, render
from service.errors import ProfilesPending
from service.jobs.queue import profiles_or_pending
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
    key_id = signer(request).key_id(request.cookies.get(COOKIE))
    if key_id is None:
        raise LoginRequired
    with session_scope(ctx.session_factory) as session:
        row = readable_key(session, key_id)
        if row is None:
            raise LoginRequired
        session.expunge(row)
        return row


Viewer = Annotated[ApiKey, Depends(viewer)]


def viewer_can(viewer_key: ApiKey, scope: str) -> bool:
    """Whether the logged-in key carries ``scope`` (``admin`` carries every scope)."""
    return scope in viewer_key.scopes or "admin" in viewer_key.scopes


def page(request: Request, name: str, viewer_key: ApiKey | None, **context: Any) -> HTMLResponse:
    can_download = viewer_key is not None and viewer_can(viewer_key, DOWNLOAD_SCOPE)
    return templates.TemplateResponse(
        request,
        name,
        {"viewer": viewer_key, "round_up": round_up, "can_download": can_download, **context},
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


def safe_url(url: str | None) -> str | None:
    """A URL without user info, query or fragment (they may carry credentials)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def model_profiles(ctx: AppContext, models: list[Model]) -> list[Any] | None:
    """The models' profiles, or None while any is still being computed."""
    try:
        return profiles_or_pending(
            ctx.jobs, [(f"model {m.id!r}", parse_mechanism(m.mechanism)) for m in models]
        )
    except ProfilesPending:
        return None
