"""The admin dashboard at /admin: server-rendered pages over the registry, the ledger and
the deployments, and the plan explorer. Read-only; logging in takes an API key with the
admin or read scope. No page shows a secret: keys appear by name and prefix, callback
URLs without credentials or query, webhook secrets never."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from service.config import Settings
from service.dashboard import explorer, login, registry_pages, release_pages
from service.dashboard.auth import SessionSigner
from service.dashboard.common import HERE, LoginRequired


def install(app: FastAPI, settings: Settings) -> None:
    """Mount the dashboard, its static files and the login redirect on ``app``."""
    app.state.session_signer = SessionSigner(settings.session_secret, settings.session_ttl_s)

    async def to_login(request: Request, exc: Exception) -> Response:
        return RedirectResponse("/admin/login", status_code=303)

    app.add_exception_handler(LoginRequired, to_login)
    app.mount("/admin/static", StaticFiles(directory=str(HERE / "static")), name="admin-static")
    for module in (login, registry_pages, explorer, release_pages):
        app.include_router(module.router)
