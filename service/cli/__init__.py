"""The `retarget` command.

Server side (where the service runs): `serve`, `worker`, `migrate`, `demo`, `openapi`,
`keys` (local database). Client side (any machine that reaches a service; `--url` or
RETARGET_URL, `--api-key` or RETARGET_API_KEY, `--json` for machine-readable output):
`datasets`, `models`, `plan`, `release`, `deployments`, `jobs`, `keys --remote`.
`selftest` starts a throwaway service and walks the whole path. Exit codes are in
``service.cli.output``.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from service import __version__
from service.cli import output, server
from service.cli.keys_cmds import keys
from service.cli.registry_cmds import datasets, models
from service.cli.release_cmds import deployments, jobs, plan, release
from service.cli.selftest import selftest
from service.cli.server import openapi_document, render_openapi
from service.client.errors import RetargetClientError
from service.errors import RetargetError

__all__ = ["app", "main", "openapi_document", "render_openapi"]

app = typer.Typer(
    name="retarget",
    help="Retarget: merge differentially private models to meet a new privacy target.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"retarget {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """Retarget: merge differentially private models to meet a new privacy target."""


server.register(app)
app.add_typer(keys, name="keys")
app.add_typer(datasets, name="datasets")
app.add_typer(models, name="models")
app.command("plan")(plan)
app.command("release")(release)
app.add_typer(deployments, name="deployments")
app.add_typer(jobs, name="jobs")
app.command("selftest")(selftest)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        result = app(args=argv, prog_name="retarget", standalone_mode=False)
        return int(result or 0)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        output.stderr.print("aborted")
        return 130
    except typer.TyperException as exc:  # usage: a bad option or argument
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print(f"retarget: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", output.USAGE))
    except RetargetClientError as exc:
        return output.report_error(exc)
    except (FileNotFoundError, RetargetError) as exc:  # a local file or database row
        print(f"retarget: {exc}", file=sys.stderr)
        return output.LOCAL_FAILURE
    except BrokenPipeError:  # the reader went away (| head): nothing more to say
        sys.stderr.close()
        return 0
    except Exception as exc:
        # an unreachable, unreadable or not-a database (SQLAlchemy is imported only by
        # the server-side commands, so it is looked at only here)
        from sqlalchemy.exc import DBAPIError

        if not isinstance(exc, DBAPIError):
            raise
        from service.config import Settings

        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        url = server._redact(Settings().resolved_database_url)
        print(f"retarget: cannot use the database {url}: {reason}", file=sys.stderr)
        return output.LOCAL_FAILURE
