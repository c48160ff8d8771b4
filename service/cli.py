"""`retarget serve | worker | keys create | migrate | demo | openapi`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from service.config import Settings

DEFAULT_OPENAPI = Path("openapi/openapi.json")


def _migrate(settings: Settings) -> None:
    from service.registry.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(url=settings.resolved_database_url)


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    _migrate(settings)
    print(f"schema is at the newest revision ({_redact(settings.resolved_database_url)})")
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from service.api.app import create_app

    if settings.auto_migrate:
        _migrate(settings)
    if settings.auth:
        _bootstrap_admin_key(settings)
    host = args.host or settings.host
    port = args.port or settings.port
    print(
        f"Retarget on http://{host}:{port}  database={_redact(settings.resolved_database_url)}  "
        f"blobs={settings.resolved_blob_dir}",
        flush=True,
    )
    if args.workers > 1:  # processes import the app and read the same environment
        uvicorn.run(
            "service.api.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=args.workers,
            log_level=args.log_level,
        )
    else:
        uvicorn.run(create_app(settings), host=host, port=port, log_level=args.log_level)
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


def cmd_keys_create(args: argparse.Namespace, settings: Settings) -> int:
    """Create a key in the service's database; the key alone goes to stdout (once), after
    it is committed, so `retarget keys create ... | head -1` never prints a lost key."""
    from service.registry import keys
    from service.registry.db import make_engine, make_sessionmaker, session_scope

    url = settings.resolved_database_url
    missing = _missing_sqlite_file(url)
    if missing is not None and not args.create and not _data_place_given():
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
            row, key = keys.create_key(session=session, name=args.name, scopes=args.scope)
            key_id, scopes = row.id, ", ".join(row.scopes)
    finally:
        engine.dispose()
    print(f"key {key_id} ({scopes}; shown once) in {_redact(url)}:", file=sys.stderr, flush=True)
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


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from service.jobs.worker import run_worker

    if settings.auto_migrate:
        _migrate(settings)
    print(
        f"Retarget worker on queue {settings.queue_name!r} at {settings.redis_url}; "
        f"database={_redact(settings.resolved_database_url)}",
        flush=True,
    )
    run_worker(settings, burst=args.burst, name=args.name)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    try:
        from service.demo.run import main as demo_main
    except ImportError as exc:  # opacus / scikit-learn are the 'demo' extra
        print(f"the demo needs the 'demo' extra: pip install -e '.[demo]' ({exc})")
        return 2
    return demo_main(Path(args.out), quick=args.quick)


def openapi_document() -> dict[str, object]:
    from service.api.app import create_app

    return create_app(Settings(database_url="sqlite://")).openapi()


def render_openapi() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def cmd_openapi(args: argparse.Namespace, settings: Settings) -> int:
    text = render_openapi()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out}")
    return 0


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def build_parser() -> argparse.ArgumentParser:
    from service.registry.keys import SCOPES

    parser = argparse.ArgumentParser(prog="retarget", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP API (migrates first unless disabled)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--log-level", default="info")
    serve.add_argument(
        "--workers", type=int, default=1, help="API processes (each reads the RETARGET_* env)"
    )
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run an accounting worker (needs RETARGET_REDIS_URL)")
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    worker.add_argument("--name", default=None, help="worker name (default: host and pid)")
    worker.set_defaults(func=cmd_worker)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create an API key and print it (once)")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        choices=list(SCOPES),
        help="repeat for several scopes",
    )
    create.add_argument("--name", default="cli")
    create.add_argument(
        "--create",
        action="store_true",
        help="start a new database if there is none (default: refuse, so a key is never "
        "created where no service will read it)",
    )
    create.set_defaults(func=cmd_keys_create)

    migrate = sub.add_parser("migrate", help="bring the database schema to the newest revision")
    migrate.set_defaults(func=cmd_migrate)

    demo = sub.add_parser(
        "demo",
        help="train DP models on digits, retarget them through the API, write a report",
    )
    demo.add_argument("--out", default="retarget-demo", help="folder for models and report")
    demo.add_argument(
        "--quick", action="store_true", help="tiny settings: one family, 2 epochs (about 30 s)"
    )
    demo.set_defaults(func=cmd_demo)

    openapi = sub.add_parser("openapi", help="write the OpenAPI document")
    openapi.add_argument("--output", "-o", default=str(DEFAULT_OPENAPI))
    openapi.set_defaults(func=cmd_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    settings = Settings()
    try:
        return int(args.func(args, settings))
    except DBAPIError as exc:  # unreachable, unreadable or not a database
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        print(
            f"retarget: cannot use the database {_redact(settings.resolved_database_url)}: "
            f"{reason}",
            file=sys.stderr,
        )
        return 1
    except BrokenPipeError:  # the reader went away (| head): nothing more to say
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
