"""`retarget datasets ...` and `retarget models ...` (on a running service)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from retarget.cli.output import progress_bar, show, show_rows
from retarget.cli.remote import ApiKey, AsJson, Limit, Offset, Url, connect, json_arg, key_values

datasets = typer.Typer(help="Datasets: create, list, show, ledger.", no_args_is_help=True)
models = typer.Typer(
    help="Models: register a checkpoint or a bundle folder, list, show, epsilon, download, "
    "alias, tag, retire. A model is named by DATASET/NAME\\[@VERSION|@ALIAS] (e.g. "
    "digits/sigma1.2@champion) or its id.",
    no_args_is_help=True,
)
#: a dataset, wherever one is taken: its name or its id
DatasetRef = Annotated[str, typer.Argument(help="the dataset's name or id")]
ModelRef = Annotated[str, typer.Argument(help="DATASET/NAME\\[@VERSION|@ALIAS], or a model id")]
ExistOk = Annotated[
    bool,
    typer.Option(
        "--exist-ok", help="answer with what exists under this name when it is the same (scripts)"
    ),
]

DATASET_FIELDS = ("id", "name", "description", "metric", "epsilon_cap", "delta_cap", "created_at")
MODEL_FIELDS = (
    "id",
    "ref",
    "name",
    "version",
    "aliases",
    "tags",
    "dataset_id",
    "mechanism",
    "lineage",
    "metrics",
    "sha256",
    "size_bytes",
    "claim_check",
    "download_url",
    "retired_at",
    "retired_reason",
)


@datasets.command("create")
def datasets_create(
    name: str,
    description: Annotated[str | None, typer.Option()] = None,
    metric: Annotated[str | None, typer.Option(help="the utility metric plans maximise")] = None,
    epsilon_cap: Annotated[float | None, typer.Option(help="the ledger's epsilon cap")] = None,
    delta_cap: Annotated[float | None, typer.Option(help="the delta the ledger is held to")] = None,
    exist_ok: ExistOk = False,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Create a dataset (names are unique; --exist-ok: the one of this name when its
    settings are these)."""
    with connect(url, api_key) as rt:
        ds = rt.datasets.create(
            name,
            description=description,
            metric=metric,
            epsilon_cap=epsilon_cap,
            delta_cap=delta_cap,
            exist_ok=exist_ok,
        )
    show(ds, as_json, DATASET_FIELDS)
    return 0


@datasets.command("list")
def datasets_list(
    offset: Offset = 0,
    limit: Limit = 50,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """List datasets."""
    with connect(url, api_key) as rt:
        page = rt.datasets.list(offset=offset, limit=limit)
    show_rows(page, as_json, ("id", "name", "metric", "epsilon_cap", "delta_cap"))
    return 0


@datasets.command("show")
def datasets_show(
    dataset_id: DatasetRef, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False
) -> int:
    """Show one dataset."""
    with connect(url, api_key) as rt:
        show(rt.datasets.get(dataset_id), as_json, DATASET_FIELDS)
    return 0


@datasets.command("ledger")
def datasets_ledger(
    dataset_id: DatasetRef, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False
) -> int:
    """What the dataset's releases exposed, and the cumulative bound."""
    with connect(url, api_key) as rt:
        ledger = rt.datasets.ledger(dataset_id)
    show(
        ledger,
        as_json,
        ("dataset_id", "cumulative", "epsilon_cap", "delta_cap", "exposed_model_ids"),
    )
    return 0


@models.command("register")
def models_register(
    path: Annotated[
        Path,
        typer.Argument(
            exists=True,
            help="a safetensors file, or a bundle folder (shards and index, a PEFT "
            "adapter, sidecars): uploaded file by file, resumed when run again",
        ),
    ],
    dataset: Annotated[str, typer.Option("--dataset", help="the dataset's name or id")],
    name: Annotated[str, typer.Option(help="the model's name")],
    mechanism: Annotated[
        str, typer.Option(help='what trained it: JSON ({"type": "dp_sgd", ...}) or @file')
    ],
    metric: Annotated[
        list[str] | None, typer.Option(help="a utility metric, name=value (repeat)")
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="lineage: the training run")] = None,
    step: Annotated[int | None, typer.Option(help="lineage: the checkpoint's step")] = None,
    version: Annotated[int | None, typer.Option(help="default 1")] = None,
    meta: Annotated[
        str | None, typer.Option(help="more metadata fields, JSON or @file (passed through)")
    ] = None,
    exist_ok: ExistOk = False,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Register a checkpoint (a file or a bundle folder) with the mechanism that trained it."""
    mech = json_arg(mechanism, "--mechanism")
    extra = json_arg(meta, "--meta") if meta is not None else None
    if step is not None and run_id is None:
        raise typer.BadParameter("--step needs --run-id", param_hint="--step")
    with connect(url, api_key) as rt, progress_bar(f"upload {path.name}", not as_json) as bar:
        model = rt.models.register(
            path,
            dataset_id=dataset,
            name=name,
            mechanism=mech,
            version=version,
            run_id=run_id,
            step=step,
            metrics=key_values(metric, "--metric"),
            extra=extra,
            progress=bar,
            exist_ok=exist_ok,
        )
    show(model, as_json, MODEL_FIELDS)
    return 0


@models.command("list")
def models_list(
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="only this dataset's (its name or id)")
    ] = None,
    offset: Offset = 0,
    limit: Limit = 50,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """List models, each with its epsilon at its dataset's delta (the ledger's: the delta
    cap, else 1e-05)."""
    with connect(url, api_key) as rt:
        page = rt.models.list(dataset_id=dataset, offset=offset, limit=limit)
        if as_json:
            show_rows(page, True, ())
            return 0
        deltas: dict[str, float] = {}
        rows = []
        for m in page.data:
            if m.dataset_id not in deltas:
                deltas[m.dataset_id] = rt.datasets.get(m.dataset_id).delta_cap or 1e-5
            delta = deltas[m.dataset_id]
            row = m.model_dump()
            row["epsilon"] = f"{rt.models.epsilon(m.id, delta=delta).epsilon:.4g}"
            row["delta"] = f"{delta:g}"
            row["metrics"] = {k: round(v, 3) for k, v in m.metrics.items()}
            rows.append(row)
    show_rows(
        {"data": rows, "count": page.count, "offset": page.offset},
        False,
        ("ref", "epsilon", "delta", "aliases", "tags", "metrics", "id"),
    )
    return 0


@models.command("show")
def models_show(
    model_id: ModelRef, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False
) -> int:
    """Show one model."""
    with connect(url, api_key) as rt:
        show(rt.models.get(model_id), as_json, MODEL_FIELDS)
    return 0


@models.command("epsilon")
def models_epsilon(
    model_id: ModelRef,
    delta: Annotated[float, typer.Option(help="the delta to prove epsilon at")] = 1e-5,
    accountant: Annotated[str, typer.Option(help="rdp | pld | best")] = "best",
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """The model's epsilon at delta (an upper bound, rounded up)."""
    with connect(url, api_key) as rt:
        eps = rt.models.epsilon(model_id, delta=delta, accountant=accountant)
    show(eps, as_json, ("epsilon", "delta", "accountant", "used", "heuristic", "notes"))
    return 0


@models.command("retire")
def models_retire(
    model_id: str,
    reason: Annotated[str, typer.Option("--reason", help="why (kept with the model)")],
    force: Annotated[
        bool,
        typer.Option("--force", help="even if a deployment serves it (it keeps its release)"),
    ] = False,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> int:
    """Retire a model (admin): left out of every plan of its dataset; its releases stay in
    the ledger."""
    with connect(url, api_key) as rt:
        show(rt.models.retire(model_id, reason, force=force), as_json, MODEL_FIELDS)
    return 0


@models.command("restore")
def models_restore(
    model_id: str, url: Url = None, api_key: ApiKey = None, as_json: AsJson = False
) -> int:
    """Make a retired model a candidate of its dataset's plans again (admin)."""
    with connect(url, api_key) as rt:
        show(rt.models.restore(model_id), as_json, MODEL_FIELDS)
    return 0
