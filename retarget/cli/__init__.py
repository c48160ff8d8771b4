"""The `retarget` command.

Client side (any machine that reaches a service; `--url` or RETARGET_URL, `--api-key`
or RETARGET_API_KEY, `--json` for machine-readable output): `datasets`, `models`,
`plan`, `release`, `releases`, `deployments`, `jobs`, `keys --remote`. Server side, added by the
server when it is installed (``retarget.cli.plugins``): `serve`, `worker`, `migrate`,
`demo`, `openapi`, `selftest` and the local `keys`. Exit codes are in
``retarget.cli.output``.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from retarget._version import __version__
from retarget.cli import output
from retarget.cli.keys_cmds import keys
from retarget.cli.name_cmds import alias, tag
from retarget.cli.plugins import HOOKS, load_server
from retarget.cli.registry_cmds import datasets, models
from retarget.cli.release_cmds import deployments, jobs, plan, release
from retarget.cli.transfer_cmds import releases  # also adds `models download`
from retarget.client.errors import RetargetClientError

__all__ = ["app", "main"]

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


app.add_typer(keys, name="keys")
app.add_typer(datasets, name="datasets")
app.add_typer(models, name="models")
models.add_typer(alias, name="alias")
models.add_typer(tag, name="tag")
app.command("plan")(plan)
app.command("release")(release)
app.add_typer(releases, name="releases")
app.add_typer(deployments, name="deployments")
app.add_typer(jobs, name="jobs")
load_server(app)


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
    except FileNotFoundError as exc:  # a local file
        print(f"retarget: {exc}", file=sys.stderr)
        return output.LOCAL_FAILURE
    except BrokenPipeError:  # the reader went away (| head): nothing more to say
        sys.stderr.close()
        return 0
    except Exception as exc:
        # the server's own failures (its database, its errors), where it is installed
        code = HOOKS.handle_error(exc) if HOOKS.handle_error is not None else None
        if code is None:
            raise
        return code
