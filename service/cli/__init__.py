"""The server's commands of the one `retarget` console script: `serve`, `worker`,
`migrate`, `demo`, `openapi`, `selftest`, and the local `keys` (written straight into
the service's database).

The SDK's CLI (``retarget.cli``) finds ``register`` through the entry point group
``retarget.cli`` and adds these commands. Importing this module costs typer only:
each command checks the server's dependencies when it runs, and names the extra to
install when they are missing.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from service.cli import server
from service.cli.selftest import selftest
from service.cli.server import openapi_document, render_openapi

__all__ = ["openapi_document", "register", "render_openapi"]


def register(app: typer.Typer, hooks: Any) -> None:
    """Add the server's commands to the SDK's ``app`` and lend it the local key commands
    and the server's error reports (``retarget.cli.plugins.ServerHooks``)."""
    server.register(app)
    app.command("selftest")(selftest)
    hooks.local_keys_create = server.local_keys_create
    hooks.local_keys = server.local_keys
    hooks.handle_error = handle_error


def handle_error(exc: BaseException) -> int | None:
    """The exit code for the server's own failures (None: not one of them)."""
    from service.errors import RetargetError

    if isinstance(exc, RetargetError):  # a database row
        print(f"retarget: {exc}", file=sys.stderr)
        return 1
    try:
        from sqlalchemy.exc import DBAPIError
    except ImportError:
        return None
    if not isinstance(exc, DBAPIError):
        return None
    # an unreachable, unreadable or not-a database
    from service.config import Settings

    reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
    url = server._redact(Settings().resolved_database_url)
    print(f"retarget: cannot use the database {url}: {reason}", file=sys.stderr)
    return 1
