"""`retarget serve | worker | migrate | openapi`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

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
    host = args.host or settings.host
    port = args.port or settings.port
    print(
        f"Retarget on http://{host}:{port}  database={_redact(settings.resolved_database_url)}  "
        f"blobs={settings.resolved_blob_dir}",
        flush=True,
    )
    uvicorn.run(create_app(settings), host=host, port=port, log_level=args.log_level)
    return 0


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
    parser = argparse.ArgumentParser(prog="retarget", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP API (migrates first unless disabled)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run an accounting worker (needs RETARGET_REDIS_URL)")
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    worker.add_argument("--name", default=None, help="worker name (default: host and pid)")
    worker.set_defaults(func=cmd_worker)

    migrate = sub.add_parser("migrate", help="bring the database schema to the newest revision")
    migrate.set_defaults(func=cmd_migrate)

    openapi = sub.add_parser("openapi", help="write the OpenAPI document")
    openapi.add_argument("--output", "-o", default=str(DEFAULT_OPENAPI))
    openapi.set_defaults(func=cmd_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    return int(args.func(args, Settings()))


if __name__ == "__main__":
    raise SystemExit(main())
