"""What the CLI prints: JSON with ``--json``, tables otherwise; progress bars on a TTY;
and the exit codes.

Exit codes (documented in docs/api.md, "The CLI"):

    0  done
    1  a local failure (the database, a file)
    2  usage: a bad option or argument (the command was not run)
    4  the service refused the request (4xx: invalid input, not found, infeasible
       target, over the cap, no key or scope)
    5  the service failed or could not be reached (5xx, connection, still pending)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from retarget.client.errors import (
    ApiError,
    ClientError,
    DownloadCorrupt,
    InfeasibleTarget,
    RetargetClientError,
)

OK, LOCAL_FAILURE, USAGE, REFUSED, SERVICE_FAILED = 0, 1, 2, 4, 5

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def plain(value: Any) -> Any:
    """JSON-ready data of a record, a page or anything JSON already."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(plain(value), indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def show(value: Any, as_json: bool, fields: Sequence[str], title: str | None = None) -> None:
    """One record: JSON, or a two-column table of ``fields``."""
    if as_json:
        emit_json(value)
        return
    data = plain(value)
    table = Table(title=title, show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name in fields:
        if name in data and data[name] not in (None, [], {}):
            table.add_row(name, _cell(data[name]))
    stdout.print(table)


def show_rows(rows: Any, as_json: bool, columns: Sequence[str], title: str | None = None) -> None:
    """A list (or a page: ``data`` and ``count``): JSON, or a table of ``columns``."""
    if as_json:
        emit_json(rows)
        return
    data = plain(rows)
    items = data["data"] if isinstance(data, dict) else data
    table = Table(title=title)
    for name in columns:
        table.add_column(name, overflow="fold")
    for item in items:
        table.add_row(*(_cell(item.get(name)) for name in columns))
    stdout.print(table)
    if isinstance(data, dict) and data.get("count", 0) > len(items):
        end = data["offset"] + len(items)
        stderr.print(f"{data['offset'] + 1}-{end} of {data['count']} (--offset to see more)")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


@contextmanager
def progress_bar(description: str, enabled: bool) -> Iterator[Any]:
    """A byte progress bar on stderr when it is a terminal (and not ``--json``); yields
    the callback ``(done, total)`` to hand to the client, or None."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=False,
    )
    task = bar.add_task(description, total=None)

    def update(done: int, total: int | None) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


def is_file_target(path: Path) -> bool:
    """Whether a download's ``-o`` names one file (``*.safetensors``) rather than a folder."""
    return path.suffix == ".safetensors" and not path.is_dir()


def show_folder(folder: Any, as_json: bool) -> None:
    """A folder pulled: JSON, or one line per file and a summary."""
    if as_json:
        emit_json(folder)
        return
    data = plain(folder)
    show_rows(data["files"], False, ("path", "size_bytes", "sha256", "changed"))
    for path in data.get("removed", []):
        stdout.print(f"removed {path} (not in this release)", markup=False)
    what = f"release {data['release_id']}" if data.get("release_id") else data.get("kind", "")
    state = "updated" if data.get("changed") else "already current"
    stdout.print(
        f"{data['path']}: {what}, {len(data['files'])} files, sha256 verified ({state})",
        markup=False,
    )


def exit_code_for(exc: RetargetClientError) -> int:
    if isinstance(exc, ClientError):
        return REFUSED
    return SERVICE_FAILED if not isinstance(exc, DownloadCorrupt) else LOCAL_FAILURE


def report_error(exc: RetargetClientError) -> int:
    """Say what went wrong on stderr, in one line (plus the field errors); the exit code."""
    if isinstance(exc, ApiError):
        line = f"retarget: {exc.status} {exc.slug or 'error'}: {exc.detail}"
        if isinstance(exc, InfeasibleTarget) and exc.min_epsilon is not None:
            line += f" (min_epsilon {exc.min_epsilon})"
        stderr.print(line, markup=False, highlight=False)
        for err in exc.errors[:10]:
            stderr.print(
                f"  {err.get('field')}: {err.get('message')}", markup=False, highlight=False
            )
    else:  # ConnectionFailed, PendingTimeout, JobFailed, DownloadCorrupt
        stderr.print(f"retarget: {exc}", markup=False, highlight=False)
    return exit_code_for(exc)
