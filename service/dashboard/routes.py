"""The admin dashboard at /admin: server-rendered pages over the registry, the ledger and
the deployments, and the plan explorer. Read-only; logging in takes an API key with the
admin or read scope. No page shows a secret: keys appear by name and prefix, callback
URLs as scheme://host[:port]/… only, webhook secrets never.

Every /admin response carries a Content-Security-Policy that allows scripts, styles and
images from this origin only (no inline script or style: the pages have none), forbids
framing (``frame-ancestors 'none'`` and ``X-Frame-Options: DENY``), and sends no
referrer to other sites; form posts carry CSRF tokens (service.dashboard.auth)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.config import Settings
from service.dashboard import explorer, login, registry_pages, release_pages
from service.dashboard.auth import SessionSigner
from service.dashboard.common import HERE, LoginRequired
from service.registry.app_secrets import app_secret

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    # same-origin: no referrer leaves the site, and form posts keep their Origin header
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class DashboardHeaders:
    """Adds ``SECURITY_HEADERS`` to every response under /admin (errors included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not (path == "/admin" or path.startswith("/admin/")):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install(app: FastAPI, settings: Settings) -> None:
    """Mount the dashboard, its static files and the login redirect on ``app``."""

    def secret() -> str:
        if settings.session_secret:
            return settings.session_secret
        return app_secret(session_factory=app.state.ctx.session_factory, name="session")

    app.state.session_signer = SessionSigner(secret, settings.session_ttl_s)

    async def to_login(request: Request, exc: Exception) -> Response:
        return RedirectResponse("/admin/login", status_code=303)

    app.add_exception_handler(LoginRequired, to_login)
    app.mount("/admin/static", StaticFiles(directory=str(HERE / "static")), name="admin-static")
    for module in (login, registry_pages, explorer, release_pages):
        app.include_router(module.router)
    app.add_middleware(DashboardHeaders)
