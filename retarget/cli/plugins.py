"""The server's commands, when the server is installed: found through the entry points
of group ``retarget.cli`` (the server registers its commands there), never imported by
name, so this package keeps to the SDK.

Without them, `retarget serve` and the other server commands still exist and say in
one line which extra to install.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import typer

#: what to install for the server's commands
SERVER_EXTRA = "retarget[server]"
#: the commands the server adds (what the SDK answers alone when it is missing)
SERVER_COMMANDS = {
    "serve": "Run the HTTP API.",
    "worker": "Run a worker (accounting jobs and release merges).",
    "migrate": "Bring the database schema to the newest revision.",
    "demo": "Train DP models on digits, retarget them, write a report.",
    "openapi": "Write the OpenAPI document.",
    "selftest": "Start a throwaway service and walk the whole path.",
}


@dataclass
class ServerHooks:
    """What the server lends the SDK's own commands (``keys`` without ``--remote``)."""

    #: create a key in the local database: (scopes, name, create) -> exit code
    local_keys_create: Callable[[list[str], str, bool], int] | None = None
    #: the local database's keys, after revoking one: (revoke) -> rows
    local_keys: Callable[[str | None], list[dict[str, Any]]] | None = None
    #: an error of the server's (its database, its own errors) -> exit code, or None
    handle_error: Callable[[BaseException], int | None] | None = None


HOOKS = ServerHooks()


def missing_server(what: str) -> typer.Exit:
    """The one-line answer of a server command where the server is not installed."""
    typer.echo(f"retarget: {what} needs the server: pip install '{SERVER_EXTRA}'", err=True)
    return typer.Exit(2)


def _placeholder(name: str, help_text: str) -> Callable[..., int]:
    def command(
        args: list[str] | None = typer.Argument(None, hidden=True),  # noqa: B008
    ) -> int:
        raise missing_server(f"`retarget {name}`")

    command.__doc__ = f"{help_text} (needs '{SERVER_EXTRA}')"
    return command


def load_server(app: typer.Typer) -> bool:
    """Add the server's commands to ``app``; placeholders where it is not installed."""
    loaded = False
    for point in entry_points(group="retarget.cli"):
        try:
            register = point.load()
        except ImportError:
            continue
        register(app, HOOKS)
        loaded = True
    if not loaded:
        for name, help_text in SERVER_COMMANDS.items():
            app.command(
                name, context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
            )(_placeholder(name, help_text))
    return loaded
