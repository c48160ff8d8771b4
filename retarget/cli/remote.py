"""What every command that talks to a running service shares: where it is, the key,
``--json``, and parsing JSON given inline or as ``@file``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from retarget.client import RetargetClient

Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="RETARGET_URL",
        show_envvar=True,
        help="the service's base URL [default: http://127.0.0.1:8000]",
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option("--api-key", envvar="RETARGET_API_KEY", show_envvar=True, help="an API key"),
]
AsJson = Annotated[bool, typer.Option("--json", help="machine-readable JSON on stdout")]
Offset = Annotated[int, typer.Option(min=0, help="skip this many rows")]
Limit = Annotated[int, typer.Option(min=1, max=500, help="rows per page")]
Method = Annotated[str, typer.Option(help="rs | lc | auto | checkpoint_average | ensemble")]
Accountant = Annotated[str, typer.Option(help="rdp | pld | best")]


def connect(url: str | None, api_key: str | None) -> RetargetClient:
    return RetargetClient(url, api_key)


def json_arg(value: str, what: str) -> Any:
    """``value`` as JSON, or the JSON in the file ``@path``; a usage error otherwise."""
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise typer.BadParameter(
                f"cannot read {path}: {exc.strerror}", param_hint=what
            ) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint=what) from exc


def key_values(pairs: list[str] | None, what: str) -> dict[str, float]:
    """``name=number`` pairs as a dict (usage error on anything else)."""
    out: dict[str, float] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = float(value)
        except ValueError:
            raise typer.BadParameter(
                f"expected name=number, got {pair!r}", param_hint=what
            ) from None
    return out
