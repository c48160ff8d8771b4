"""What the routes share to name things: a model's labels on its public record
(``DATASET/NAME@VERSION``, aliases, tags), the ``exist_ok`` query flag, and the
``exist_ok`` check of a model registration (``service.registry.idempotency``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Annotated

from fastapi import Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import AppContext
from service.api.schemas import ModelCreate, ModelPublic
from service.formats.streams import iter_file
from service.registry import idempotency, names
from service.registry.aliases import labels
from service.registry.db import session_scope
from service.registry.model_rows import ModelSpec
from service.registry.models import Dataset, Model
from service.registry.references import open_reference

ExistOk = Annotated[
    bool,
    Query(
        description="answer 200 with what already exists under this name when it is the "
        "same (409 naming what differs), so that a script can run twice"
    ),
]


def dataset_id_of(ctx: AppContext, ref: str) -> str:
    """The id of the dataset with this id or name (404 suggesting close names)."""
    with session_scope(ctx.session_factory) as session:
        return names.dataset_id(session=session, ref=ref)


def with_labels(
    session: Session, rows: list[Model], publics: list[ModelPublic]
) -> list[ModelPublic]:
    """``publics`` (one per row, in order) with ``ref``, ``aliases`` and ``tags``, in
    three queries for a whole page."""
    found = labels(session=session, model_ids=[m.id for m in rows])
    wanted = {m.dataset_id for m in rows}
    query = select(Dataset.id, Dataset.name).where(Dataset.id.in_(wanted))
    dataset_names = {i: n for i, n in session.execute(query)} if wanted else {}
    return [
        public.model_copy(
            update={
                "ref": f"{dataset_names.get(row.dataset_id, row.dataset_id)}/{row.name}"
                f"@{row.version}",
                "aliases": found[row.id][0],
                "tags": found[row.id][1],
            }
        )
        for row, public in zip(rows, publics, strict=True)
    ]


def labelled(session: Session, row: Model, public: ModelPublic) -> ModelPublic:
    return with_labels(session, [row], [public])[0]


def existing_model(
    ctx: AppContext,
    meta: ModelCreate,
    spec: ModelSpec,
    weights: IO[bytes] | None,
    files: list[tuple[str, IO[bytes]]] | None,
    to_public: Callable[[Model], ModelPublic],
) -> ModelPublic | None:
    """``exist_ok``: the model at the spec's dataset, name and version when it is this
    very one (409 when it differs); None when that name and version are free."""
    with session_scope(ctx.session_factory) as session:
        found = idempotency.taken(session, spec)
        if found is None:
            return None
        limit = ctx.settings.max_upload_bytes
        if files is not None:
            idempotency.same_model(found, spec, files=files, max_bytes=limit)
        else:
            chunks = (
                iter_file(weights)
                if weights is not None
                else open_reference(str(meta.weights_uri), ctx.settings, ctx.blobs)
            )
            idempotency.same_model(found, spec, chunks=chunks, max_bytes=limit)
        return labelled(session, found, to_public(found))
