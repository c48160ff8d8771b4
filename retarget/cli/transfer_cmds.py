"""`retarget releases list|show|download` and `retarget models download` (on a running
service): files out of the service, into a folder (or one .safetensors file)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from retarget.cli.output import is_file_target, progress_bar, show, show_folder, show_rows, stderr
from retarget.cli.registry_cmds import models
from retarget.cli.remote import ApiKey, AsJson, Limit, Offset, Url, connect

releases = typer.Typer(help="Releases: list, show, download.", no_args_is_help=True)

RELEASE_FIELDS = (
    "release_id",
    "dataset_id",
    "method",
    "accountant",
    "epsilon",
    "delta",
    "kind",
    "status",
    "sha256",
    "size_bytes",
    "deployment",
    "created_at",
)
Output = Annotated[
    Path,
    typer.Option(
        "--output",
        "-o",
        help="a folder to write the files into, or a file ending in .safetensors for a "
        "single-file model",
    ),
]


@releases.command("list")
def releases_list(
    dataset: Annotated[str | None, typer.Option("--dataset", help="only this dataset's")] = None,
    offset: Offset = 0,
    limit: Limit = 50,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """List releases, newest first."""
    with connect(url, api_key) as rt:
        page = rt.releases.list(dataset_id=dataset, offset=offset, limit=limit)
    columns = ("release_id", "dataset_id", "method", "epsilon", "delta", "kind", "deployment")
    show_rows(page, as_json, columns)
    return 0


@releases.command("show")
def releases_show(
    release_id: str, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False
) -> int:
    """Show one release: its guarantee, weights and files."""
    with connect(url, api_key) as rt:
        show(rt.releases.get(release_id), as_json, (*RELEASE_FIELDS, "weights"))
    return 0


@releases.command("download")
def releases_download(
    release_id: str,
    output: Output,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Download a release's files, each checked against its sha256 (run again, it
    resumes and keeps the files already current)."""
    with connect(url, api_key) as rt, progress_bar(f"download {release_id}", not as_json) as bar:
        if is_file_target(output):
            got = rt.releases.download(release_id, output, progress=bar)
            show(got, as_json, ("path", "sha256", "size_bytes", "resumed_from"))
            return 0
        folder = rt.releases.download_folder(release_id, output, progress=bar)
    show_folder(folder, as_json)
    return 0


@models.command("download")
def models_download(
    model_id: str,
    output: Output,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="do not ask: the download is charged")
    ] = False,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Download a registered model's raw weights (scope models:download). Charged: the
    download is recorded in the dataset's ledger as an exposure of this model, and
    refused when that would pass the dataset's cap. Asks first unless --yes."""
    with connect(url, api_key) as rt:
        model = rt.models.get(model_id)
        dataset = rt.datasets.get(model.dataset_id)
        cap = (
            f"its cap is epsilon {dataset.epsilon_cap} at delta {dataset.delta_cap}"
            if dataset.epsilon_cap is not None
            else "it has no cap"
        )
        stderr.print(
            f"Downloading the raw weights of model {model.name!r} v{model.version} ({model_id}) "
            f"is charged to dataset {dataset.name!r}'s privacy ledger: the model counts as "
            f"released from then on, as if a release had selected it ({cap}).",
            markup=False,
            highlight=False,
        )
        if not yes:
            if not sys.stdin.isatty():
                stderr.print("retarget: not a terminal to ask on: pass --yes to download")
                return 2
            if not typer.confirm("Download and charge the ledger?", default=False, err=True):
                stderr.print("not downloaded; nothing was charged")
                return 1
        if is_file_target(output) and model.files:
            raise typer.BadParameter(
                f"model {model_id} is a {model.kind} bundle: give a folder", param_hint="-o"
            )
        with progress_bar(f"download {model.name}", not as_json) as bar:
            if is_file_target(output):
                got = rt.models.download(model_id, output, progress=bar)
                show(got, as_json, ("path", "sha256", "size_bytes", "resumed_from"))
                return 0
            folder = rt.models.download_folder(model_id, output, progress=bar)
    show_folder(folder, as_json)
    return 0
