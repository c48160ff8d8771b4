"""`retarget plan`, `retarget release`, `retarget deployments ...` and `retarget jobs ...`
(on a running service)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from retarget.cli.output import (
    emit_json,
    is_file_target,
    plain,
    progress_bar,
    show,
    show_folder,
    show_rows,
    stdout,
)
from retarget.cli.remote import Accountant, ApiKey, AsJson, Limit, Method, Offset, Url, connect

deployments = typer.Typer(
    help="Deployments: create, list, show, set-policy, pull.", no_args_is_help=True
)
jobs = typer.Typer(help="Jobs: show one, wait for one.", no_args_is_help=True)

Dataset = Annotated[str, typer.Option("--dataset", help="the dataset's name or id")]
Epsilon = Annotated[float, typer.Option(help="the target epsilon")]
Delta = Annotated[float, typer.Option(help="the target delta")]
ModelIds = Annotated[
    list[str] | None,
    typer.Option(
        "--model", help="a candidate: NAME\\[@VERSION|@ALIAS] or an id (repeat; default all)"
    ),
]
Metric = Annotated[str | None, typer.Option(help="objective 'metric': the metric's name")]
MetricGoal = Annotated[str | None, typer.Option(help="max | min (required with --metric)")]
MetricSource = Annotated[str | None, typer.Option(help="models | prior | private")]
Objective = Annotated[
    str | None,
    typer.Option(help="signal | noise | metric | validation (default: chosen by the service)"),
]
RunId = Annotated[
    str | None, typer.Option(help="checkpoint_average | ensemble: the run (default: the only one)")
]
LastK = Annotated[
    int | None, typer.Option(help="checkpoint_average | ensemble: its last K checkpoints (3)")
]
EmaDecay = Annotated[
    float | None,
    typer.Option(help="checkpoint_average | ensemble: EMA weights decay^(k-j), not uniform"),
]
Combine = Annotated[
    str | None,
    typer.Option(help="ensemble: mean_probabilities (OPA, default) | majority_vote (OMV)"),
]
DEPLOYMENT_FIELDS = (
    "name",
    "dataset_id",
    "epsilon",
    "delta",
    "method",
    "accountant",
    "follows",
    "current_release_id",
    "model_url",
    "last_error",
)


def _options(
    model: list[str] | None,
    metric: str | None,
    metric_goal: str | None,
    metric_source: str | None,
    objective: str | None,
    checkpoints: tuple[str | None, int | None, float | None, str | None] = (None,) * 4,
) -> dict[str, Any]:
    run_id, last_k, ema_decay, combine = checkpoints
    options = {
        "model_ids": model or None,
        "metric": metric,
        "metric_goal": metric_goal,
        "metric_source": metric_source,
        "objective": objective,
        "run_id": run_id,
        "last_k": last_k,
        "ema_decay": ema_decay,
        "combine": combine,
    }
    return {k: v for k, v in options.items() if v is not None}


def _show_plan(plan: Any, as_json: bool, title: str) -> None:
    if as_json:
        emit_json(plan)
        return
    data = plain(plan)
    stdout.print(
        f"[bold]{title}[/bold]: {data['method']} ({data['accountant']}), epsilon "
        f"{data['epsilon']} at delta {data['delta']:g}  [dim]{data.get('bound', '')}[/dim]"
    )
    notes = list(data.get("notes", []))
    if data.get("objective"):
        # the first note says, in words, which objective chose the plan
        stdout.print(f"  chosen by: {notes.pop(0) if notes else data['objective']}", markup=False)
    if data.get("selection_epsilon") is not None:
        stdout.print(f"  of which the private selection: epsilon {data['selection_epsilon']:g}")
    if data.get("combine"):
        stdout.print(f"  ensemble: outputs combined by {data['combine']}", markup=False)
    if data.get("uncertainty"):
        u = data["uncertainty"]
        stdout.print(
            f"  uncertainty of {u['metric']}: {u['estimate']:.4g} +/- "
            f"{u['width_95'] / 2:.4g} (95%, k={u['k']}; a lower bound: checkpoints correlate)",
            markup=False,
        )
    show_rows(weight_rows(data["weights"]), False, ("model", "model_id", "weight"))
    for note in notes:
        stdout.print(f"  note: {note}", markup=False)
    for warning in data.get("warnings", []):
        stdout.print(f"  [yellow]warning[/yellow]: {warning}")


def weight_rows(weights: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plan weights as table rows: the model's name, its id, and the weight (under 0.001
    shown as such, never rounded to a misleading 0)."""
    return [
        {
            "model": w.get("model_name") or "",
            "model_id": w["model_id"],
            "weight": "<0.001" if w["weight"] < 1e-3 else f"{w['weight']:.3f}",
        }
        for w in weights
    ]


def plan(
    dataset: Dataset,
    epsilon: Epsilon,
    delta: Delta,
    method: Method = "auto",
    accountant: Accountant = "best",
    model: ModelIds = None,
    metric: Metric = None,
    metric_goal: MetricGoal = None,
    metric_source: MetricSource = None,
    objective: Objective = None,
    run_id: RunId = None,
    last_k: LastK = None,
    ema_decay: EmaDecay = None,
    combine: Combine = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Plan a release for the target: a dry run that costs no privacy."""
    options = _options(
        model, metric, metric_goal, metric_source, objective, (run_id, last_k, ema_decay, combine)
    )
    with connect(url, api_key) as rt:
        result = rt.plans.create(
            dataset, epsilon, delta, method=method, accountant=accountant, **options
        )
    _show_plan(result, as_json, "plan")
    return 0


def release(
    dataset: Dataset,
    epsilon: Epsilon,
    delta: Delta,
    method: Method = "auto",
    accountant: Accountant = "best",
    model: ModelIds = None,
    metric: Metric = None,
    metric_goal: MetricGoal = None,
    metric_source: MetricSource = None,
    objective: Objective = None,
    run_id: RunId = None,
    last_k: LastK = None,
    ema_decay: EmaDecay = None,
    combine: Combine = None,
    deployment: Annotated[str | None, typer.Option(help="record it for this deployment")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32 | bfloat16 | float16")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="download the merged model here")
    ] = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Release a merged model for the target (costs privacy; recorded in the ledger).
    The same request again returns the same release."""
    options = _options(
        model, metric, metric_goal, metric_source, objective, (run_id, last_k, ema_decay, combine)
    )
    if dtype is not None:
        options["dtype"] = dtype
    with connect(url, api_key) as rt:
        made = rt.releases.create(
            dataset,
            epsilon,
            delta,
            method=method,
            accountant=accountant,
            deployment=deployment,
            **options,
        )
        download = None
        if output is not None:
            with progress_bar(f"download {output.name}", not as_json) as bar:
                download = rt.releases.download(made.release_id, output, progress=bar)
    if as_json:
        emit_json({**plain(made), "output": plain(download) if download else None})
        return 0
    _show_plan(made.model_dump().get("plan", made.model_dump()), False, "release")
    show(made, False, ("release_id", "epsilon", "delta", "sha256", "size_bytes", "download_url"))
    if download is not None:
        stdout.print(f"wrote {download.path} ({download.size_bytes} bytes, sha256 verified)")
    return 0


@deployments.command("create")
def deployments_create(
    name: str,
    epsilon: Epsilon,
    delta: Delta,
    dataset: Annotated[
        str | None,
        typer.Option("--dataset", help="the dataset's name or id (or in --follows)"),
    ] = None,
    method: Annotated[str | None, typer.Option(help="rs | lc | auto")] = None,
    accountant: Annotated[str | None, typer.Option(help="rdp | pld | best")] = None,
    callback_url: Annotated[str | None, typer.Option(help="told of every new model")] = None,
    follows: Annotated[
        str | None,
        typer.Option(
            help="\\[DATASET/]NAME@ALIAS: serve that alias's version alone (a release of that "
            "one model, charged as one); moving the alias re-targets the deployment"
        ),
    ] = None,
    exist_ok: Annotated[
        bool,
        typer.Option(
            "--exist-ok",
            help="answer with the deployment of this name, as it is, when its dataset, "
            "method, accountant, callback and alias are these",
        ),
    ] = False,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Bind a name to a dataset and a policy, and release its first model."""
    if dataset is None and (follows is None or "/" not in follows):
        raise typer.BadParameter("give --dataset, or --follows DATASET/NAME@ALIAS")
    with connect(url, api_key) as rt:
        dep = rt.deployments.create(
            name,
            dataset,
            epsilon,
            delta,
            method=method,
            accountant=accountant,
            callback_url=callback_url,
            follows=follows,
            exist_ok=exist_ok,
        )
    show(dep, as_json, DEPLOYMENT_FIELDS)
    return 0


@deployments.command("list")
def deployments_list(
    offset: Offset = 0,
    limit: Limit = 50,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """List deployments."""
    with connect(url, api_key) as rt:
        page = rt.deployments.list(offset=offset, limit=limit)
    show_rows(page, as_json, ("name", "dataset_id", "epsilon", "delta", "current_release_id"))
    return 0


@deployments.command("show")
def deployments_show(
    name: str, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False
) -> int:
    """Show a deployment: its policy, current release and history."""
    with connect(url, api_key) as rt:
        dep = rt.deployments.get(name)
    show(dep, as_json, (*DEPLOYMENT_FIELDS, "history"))
    return 0


@deployments.command("set-policy")
def deployments_set_policy(
    name: str,
    epsilon: Epsilon,
    delta: Delta,
    reason: Annotated[str | None, typer.Option(help="kept in the history")] = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Re-target a deployment: plan, release and point it at the new model."""
    with connect(url, api_key) as rt:
        dep = rt.deployments.set_policy(name, epsilon, delta, reason=reason)
    show(dep, as_json, DEPLOYMENT_FIELDS)
    return 0


@deployments.command("pull")
def deployments_pull(
    name: str,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="a folder to pull the release's files into (a bundle, or model.safetensors),"
            " or a file ending in .safetensors for a single-file model",
        ),
    ],
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Download the deployment's current model (files already current are kept)."""
    with connect(url, api_key) as rt, progress_bar(f"pull {name}", not as_json) as bar:
        if is_file_target(output):
            got = rt.deployments.pull(name, output, progress=bar)
            show(got, as_json, ("path", "sha256", "size_bytes", "changed"))
            return 0
        folder = rt.deployments.pull_folder(name, output, progress=bar)
    show_folder(folder, as_json)
    return 0


@jobs.command("show")
def jobs_show(job_id: str, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False) -> int:
    """An accounting or plan job's state."""
    with connect(url, api_key) as rt:
        show(rt.jobs.get(job_id), as_json, ("id", "kind", "status", "error", "result"))
    return 0


@jobs.command("wait")
def jobs_wait(
    job_id: str,
    timeout: Annotated[float, typer.Option(help="seconds")] = 600.0,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Wait for a job to finish (exit 5 if it fails or the wait runs out)."""
    with connect(url, api_key) as rt:
        show(rt.jobs.wait(job_id, timeout=timeout), as_json, ("id", "kind", "status", "result"))
    return 0
