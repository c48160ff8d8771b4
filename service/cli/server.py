"""The commands that run the service where it is: `retarget serve | worker | migrate |
demo | openapi`, and the local `keys` (written straight into the service's database).

The server's modules are imported inside each command, after ``require_server`` has
checked that the server's dependencies are installed (the `server` extra)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from service.config import Settings

DEFAULT_OPENAPI = Path("openapi/openapi.json")

#: what the server's commands import (the `server` extra brings them)
SERVER_MODULES = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "pydantic_settings", "torch")


def require_server(command: str) -> None:
    """Stop with one line naming the extra when the server's dependencies are missing."""
    from importlib.util import find_spec

    missing = [m for m in SERVER_MODULES if find_spec(m) is None]
    if missing:
        typer.echo(
            f"retarget: `retarget {command}` needs the server ({', '.join(missing)} missing): "
            "pip install 'retarget[server]'",
            err=True,
        )
        raise typer.Exit(2)


def _settings() -> Settings:
    from service.config import Settings

    return Settings()


def _migrate(settings: Settings) -> None:
    from service.registry.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(url=settings.resolved_database_url)


def cmd_migrate() -> int:
    """Bring the database schema to the newest revision (idempotent)."""
    require_server("migrate")
    settings = _settings()
    _migrate(settings)
    print(f"schema is at the newest revision ({_redact(settings.resolved_database_url)})")
    return 0


def cmd_serve(
    host: Annotated[str | None, typer.Option(help="default RETARGET_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="default RETARGET_PORT")] = None,
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
    workers: Annotated[int, typer.Option(help="API processes (each reads the RETARGET_* env)")] = 1,
) -> int:
    """Run the HTTP API (migrates first unless RETARGET_AUTO_MIGRATE=false)."""
    require_server("serve")
    import uvicorn

    settings = _settings()
    from service.api.app import create_app

    if settings.auto_migrate:
        _migrate(settings)
    if settings.auth:
        _bootstrap_admin_key(settings)
    host = host or settings.host
    port = port or settings.port
    print(
        f"Retarget on http://{host}:{port}  database={_redact(settings.resolved_database_url)}  "
        f"blobs={settings.resolved_blob_dir}",
        flush=True,
    )
    if workers > 1:  # processes import the app and read the same environment
        uvicorn.run(
            "service.api.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            # forwarded headers: only the app's own check (RETARGET_FORWARDED_ALLOW_IPS)
            proxy_headers=False,
            timeout_graceful_shutdown=settings.shutdown_grace_s,
        )
    else:
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            log_level=log_level,
            proxy_headers=False,
            # SIGTERM: requests in flight get this long, then the app's shutdown ends the
            # plan processes (service.api.app._lifespan)
            timeout_graceful_shutdown=settings.shutdown_grace_s,
        )
    return 0


def _bootstrap_admin_key(settings: Settings) -> None:
    """With no live API key yet, make an admin key and print it (shown this once)."""
    from service.registry import keys
    from service.registry.db import make_engine, make_sessionmaker, session_scope

    engine = make_engine(settings.resolved_database_url)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            if keys.count_live_keys(session=session):
                return
            _, key = keys.create_key(session=session, name="first admin", scopes=["admin"])
    finally:
        engine.dispose()
    print(f"No API key existed: created an admin key (shown once): {key}", flush=True)
    if settings.database_url is None:  # the embedded default: also leave it for scripts
        path = settings.data_dir / "admin-key"
        path.touch(mode=0o600)
        path.write_text(key + "\n")
        print(f"(also written to {path}, readable by you only)", flush=True)


def local_keys_create(scopes: list[str], name: str, create: bool) -> int:
    """Create a key in the service's database; the key alone goes to stdout (once), after
    it is committed, so `retarget keys create ... | head -1` never prints a lost key."""
    require_server("keys")
    from service.registry import keys
    from service.registry.db import make_engine, make_sessionmaker, session_scope

    settings = _settings()
    url = settings.resolved_database_url
    missing = _missing_sqlite_file(url)
    if missing is not None and not create and not _data_place_given():
        print(
            f"retarget: no database at {missing}. Run this where the service keeps its data "
            "(the folder holding retarget-data), set RETARGET_DATA_DIR or "
            "RETARGET_DATABASE_URL, or pass --create to start a new database there.",
            file=sys.stderr,
        )
        return 2
    if settings.auto_migrate or missing is not None:
        _migrate(settings)
    engine = make_engine(url)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            row, key = keys.create_key(session=session, name=name, scopes=scopes)
            key_id, shown = row.id, ", ".join(row.scopes)
    finally:
        engine.dispose()
    print(f"key {key_id} ({shown}; shown once) in {_redact(url)}:", file=sys.stderr, flush=True)
    print(key, flush=True)
    return 0


def _missing_sqlite_file(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist yet (None otherwise)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    path = Path(parsed.database)
    return None if path.exists() else path


def _data_place_given() -> bool:
    return any(os.environ.get(v) for v in ("RETARGET_DATA_DIR", "RETARGET_DATABASE_URL"))


def cmd_worker(
    burst: Annotated[bool, typer.Option(help="exit when the queue is empty")] = False,
    name: Annotated[str | None, typer.Option(help="worker name (default: host and pid)")] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option(
            help="a queue to listen on (repeatable; default: the main queue and the merge "
            "queue; a merge host: --queue merges)"
        ),
    ] = None,
) -> int:
    """Run a worker (needs RETARGET_REDIS_URL): accounting jobs and release merges."""
    require_server("worker")
    from service.jobs.worker import worker_queues
    from service.tasks import run_worker

    settings = _settings()
    if settings.auto_migrate:
        _migrate(settings)
    print(
        f"Retarget worker on queue(s) {worker_queues(settings, queue)} at {settings.redis_url}; "
        f"database={_redact(settings.resolved_database_url)}",
        flush=True,
    )
    run_worker(settings, burst=burst, name=name, queues=queue)
    return 0


def cmd_demo(
    out: Annotated[str, typer.Option(help="folder for models and report")] = "retarget-demo",
    quick: Annotated[
        bool, typer.Option(help="tiny settings: one family, 2 epochs (about 30 s)")
    ] = False,
) -> int:
    """Train DP models on digits, retarget them through the API, write a report."""
    require_server("demo")
    try:
        from service.demo.run import main as demo_main
    except ImportError as exc:  # opacus / scikit-learn are the 'demo' extra
        print(f"the demo needs the 'demo' extra: pip install 'retarget[demo]' ({exc})")
        return 2
    return demo_main(Path(out), quick=quick)


def openapi_document() -> dict[str, object]:
    from service.api.app import create_app
    from service.config import Settings

    return create_app(Settings(database_url="sqlite://")).openapi()


def render_openapi() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def cmd_openapi(
    output: Annotated[
        str, typer.Option("--output", "-o", help="file to write, - for stdout")
    ] = str(DEFAULT_OPENAPI),
) -> int:
    """Write the OpenAPI document (a test fails when the committed one is stale)."""
    require_server("openapi")
    text = render_openapi()
    if output == "-":
        sys.stdout.write(text)
    else:
        out = Path(output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out}")
    return 0


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def register(app: typer.Typer) -> None:
    """Add the server-side commands to ``app``."""
    app.command("serve")(cmd_serve)
    app.command("worker")(cmd_worker)
    app.command("migrate")(cmd_migrate)
    app.command("demo")(cmd_demo)
    app.command("openapi")(cmd_openapi)


def local_keys(revoke: str | None = None) -> list[dict[str, object]]:
    """Every key in the service's database (none of their secrets), after revoking
    ``revoke`` when given. Refuses, like ``keys create``, where there is no database."""
    require_server("keys")
    from service.registry import keys
    from service.registry.db import make_engine, make_sessionmaker, session_scope

    settings = _settings()
    url = settings.resolved_database_url
    missing = _missing_sqlite_file(url)
    if missing is not None:
        raise FileNotFoundError(
            f"no database at {missing}: run this where the service keeps its data, or set "
            "RETARGET_DATA_DIR or RETARGET_DATABASE_URL"
        )
    engine = make_engine(url)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            if revoke is not None:
                keys.revoke_key(session=session, key_id=revoke)
            return [
                {
                    "id": k.id,
                    "name": k.name,
                    "prefix": k.prefix,
                    "scopes": list(k.scopes),
                    "created_at": k.created_at.isoformat(),
                    "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
                }
                for k in keys.list_keys(session=session)
            ]
    finally:
        engine.dispose()
