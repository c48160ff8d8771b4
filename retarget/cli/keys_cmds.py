"""`retarget keys create | list | revoke`: in the service's database where the command
runs (the default, as `retarget keys create` always did), or through the API of a
running service with ``--remote`` (or ``--url``). The local database is the server's
(``retarget.cli.plugins``): without the server installed, only ``--remote`` works."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from retarget.cli.output import emit_json, show, show_rows
from retarget.cli.plugins import HOOKS, missing_server
from retarget.cli.remote import ApiKey, AsJson, Limit, Offset, connect

keys = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True)

KEY_COLUMNS = ("id", "name", "prefix", "scopes", "created_at", "revoked_at")


class Scope(StrEnum):
    """The service's scopes (service.registry.keys.SCOPES, which a test holds this to)."""

    admin = "admin"
    publish = "publish"
    release = "release"
    read = "read"
    models_download = "models:download"


Remote = Annotated[
    bool,
    typer.Option(
        "--remote",
        help="through the API of a running service (RETARGET_URL) instead of the local database",
    ),
]


@keys.command("create")
def keys_create(
    scope: Annotated[list[Scope], typer.Option("--scope", help="repeat for several scopes")],
    name: Annotated[str, typer.Option()] = "cli",
    create: Annotated[
        bool,
        typer.Option(
            "--create",
            help="local: start a new database if there is none (default: refuse, so a key is "
            "never created where no service will read it)",
        ),
    ] = False,
    remote: Remote = False,
    url: Annotated[str | None, typer.Option("--url", help="the service (implies --remote)")] = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Create an API key and print it (once): the key alone on stdout."""
    scopes = [s.value for s in scope]
    if not (remote or url):
        if HOOKS.local_keys_create is None:
            raise missing_server("a key in the local database (without --remote)")
        return HOOKS.local_keys_create(scopes, name, create)
    with connect(url, api_key) as rt:
        made = rt.keys.create(name, scopes)
    if as_json:
        emit_json(made)
    else:
        typer.echo(f"key {made.id} ({', '.join(made.scopes)}; shown once):", err=True)
        typer.echo(made.key)
    return 0


@keys.command("list")
def keys_list(
    remote: Remote = False,
    offset: Offset = 0,
    limit: Limit = 50,
    url: Annotated[str | None, typer.Option("--url", help="the service (implies --remote)")] = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """List API keys (never their secrets)."""
    if not (remote or url):
        if HOOKS.local_keys is None:
            raise missing_server("the local database's keys (without --remote)")
        rows = HOOKS.local_keys(None)
        show_rows(rows[offset : offset + limit], as_json, KEY_COLUMNS)
        return 0
    with connect(url, api_key) as rt:
        show_rows(rt.keys.list(offset=offset, limit=limit), as_json, KEY_COLUMNS)
    return 0


@keys.command("revoke")
def keys_revoke(
    key_id: str,
    remote: Remote = False,
    url: Annotated[str | None, typer.Option("--url", help="the service (implies --remote)")] = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Revoke a key (refused at once by the service that revokes it)."""
    if not (remote or url):
        if HOOKS.local_keys is None:
            raise missing_server("revoking a key in the local database (without --remote)")
        rows = {r["id"]: r for r in HOOKS.local_keys(key_id)}
        show(rows[key_id], as_json, KEY_COLUMNS)
        return 0
    with connect(url, api_key) as rt:
        show(rt.keys.revoke(key_id), as_json, KEY_COLUMNS)
    return 0
