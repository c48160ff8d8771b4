"""`retarget models alias ...` and `retarget models tag ...` (on a running service).

A model is named by its id or by ``DATASET/NAME[@VERSION|@ALIAS]``: ``digits/sigma1.2``
(the latest version), ``digits/sigma1.2@3``, ``digits/sigma1.2@champion``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from retarget.cli.output import REFUSED, emit_json, plain, show_rows, stderr, stdout
from retarget.cli.remote import ApiKey, AsJson, Url, connect

alias = typer.Typer(
    help="Aliases naming one version of a model (champion, staging): set, show, delete.",
    no_args_is_help=True,
)
tag = typer.Typer(help="Tags of one model version: set, delete, show.", no_args_is_help=True)

Model = Annotated[str, typer.Argument(help="DATASET/NAME\\[@VERSION|@ALIAS], or a model id")]


@alias.command("set")
def alias_set(
    model: Annotated[
        str, typer.Argument(help="DATASET/NAME@VERSION (or @ALIAS, @latest: its version now)")
    ],
    name: Annotated[str, typer.Argument(help="the alias, e.g. champion")],
    wait: Annotated[
        float, typer.Option(help="seconds to wait for following deployments to re-target")
    ] = 600.0,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Point an alias at a version (create or move it). Deployments that follow it are
    re-targeted; exit 4 when one of them was refused (it keeps its current model)."""
    outcomes: list[dict[str, Any]] = []
    with connect(url, api_key) as rt:
        moved = rt.models.set_alias(model, name)
        for retarget in moved.retargets:
            job = rt.jobs.wait(retarget["job_id"], timeout=wait)
            outcomes.append({"deployment": retarget["deployment"], **(job.result or {})})
    refused = [o for o in outcomes if o.get("status") != "changed"]
    if as_json:
        emit_json({**plain(moved), "retargets": outcomes})
    else:
        was = moved.previous_version
        stdout.print(
            f"{moved.alias.ref} -> version {moved.alias.version}"
            + (f" (was {was})" if was is not None and was != moved.alias.version else ""),
            markup=False,
        )
        for o in outcomes:
            what = o.get("release_id") or o.get("reason") or ""
            stdout.print(f"  deployment {o['deployment']}: {o.get('status')} {what}", markup=False)
    for o in refused:
        stderr.print(
            f"retarget: deployment {o['deployment']} stays on its current model: "
            f"{o.get('reason') or o.get('status')}",
            markup=False,
            highlight=False,
        )
    return REFUSED if refused else 0


@alias.command("show")
def alias_show(
    model: Annotated[str, typer.Argument(help="DATASET/NAME (or a model id)")],
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """The aliases of a model's versions, and their history (newest first)."""
    with connect(url, api_key) as rt:
        found = rt.models.aliases(model)
    if as_json:
        emit_json(found)
        return 0
    show_rows(plain(found.aliases), False, ("alias", "version", "model_id", "updated_at"))
    show_rows(
        plain(found.history),
        False,
        ("created_at", "alias", "previous_version", "version", "key_name"),
        title="history",
    )
    return 0


@alias.command("delete")
def alias_delete(
    model: Annotated[str, typer.Argument(help="DATASET/NAME@ALIAS, or DATASET/NAME ALIAS")],
    name: Annotated[str | None, typer.Argument(help="the alias")] = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Remove an alias (kept in the history); refused while a deployment follows it."""
    if name is None:
        model, at, name = model.rpartition("@")
        if not at or not model:
            raise typer.BadParameter("name the alias: DATASET/NAME@ALIAS", param_hint="MODEL")
    with connect(url, api_key) as rt:
        event = rt.models.delete_alias(model, name)
    if as_json:
        emit_json(event)
    else:
        stdout.print(f"deleted alias {name} (was version {event.previous_version})", markup=False)
    return 0


def _tags(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not key:
            raise typer.BadParameter(f"expected KEY=VALUE or LABEL, got {pair!r}")
        out[key] = value
    return out


@tag.command("set")
def tag_set(
    model: Model,
    tags: Annotated[list[str], typer.Argument(help="KEY=VALUE, or LABEL (an empty value)")],
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Set tags of one version (``@champion``: the version the alias names now)."""
    with connect(url, api_key) as rt:
        now = rt.models.set_tags(model, _tags(tags))
    _show_tags(now, as_json)
    return 0


@tag.command("delete")
def tag_delete(
    model: Model,
    keys: Annotated[list[str], typer.Argument(help="the keys to remove")],
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Remove tags of one version."""
    with connect(url, api_key) as rt:
        now = rt.models.set_tags(model, remove=keys)
    _show_tags(now, as_json)
    return 0


@tag.command("show")
def tag_show(model: Model, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False) -> int:
    """The tags of one version."""
    with connect(url, api_key) as rt:
        now = rt.models.get(model).tags
    _show_tags(now, as_json)
    return 0


def _show_tags(tags: dict[str, str], as_json: bool) -> None:
    if as_json:
        emit_json(tags)
        return
    show_rows([{"key": k, "value": v} for k, v in tags.items()], False, ("key", "value"))
