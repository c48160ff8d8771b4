"""Models by name: ``/v1/datasets/{dataset}/models/{NAME[@VERSION|@ALIAS]}``, their
aliases (set, moved, deleted, with history) and their tags.

``{dataset}`` is the dataset's id or name; ``{model}`` is ``NAME``, ``NAME@latest``
(the same), ``NAME@3`` (a version), ``NAME@champion`` (an alias) or the model's id.
Unknown names answer 404 with close names in ``suggestions``. Moving an alias
re-targets the deployments that follow it (``service.deployments.follow``): their
jobs are recorded in the move's transaction and listed in the answer.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from sqlalchemy.orm import Session

from service.api.context import Principal
from service.api.deps import ContextDep, SessionDep, require
from service.api.naming import labelled
from service.api.routes.model_views import to_public
from service.api.schemas import (
    AliasesPublic,
    AliasEventPublic,
    AliasMoved,
    AliasPublic,
    AliasSet,
    ModelPublic,
    Problem,
    RetargetQueued,
    TagsPublic,
    TagsUpdate,
)
from service.deployments import follow, outbox
from service.deployments.runner import dispatch
from service.errors import NotFound
from service.registry import aliases, names, repository
from service.registry.db import session_scope
from service.registry.models import Dataset, Model, ModelAlias, ModelAliasEvent

router = APIRouter(prefix="/v1/datasets/{dataset}/models", tags=["models"])

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "no such dataset, model, version or alias"}
}


def _model(session: Session, dataset: str, model: str) -> tuple[Dataset, Model]:
    ds = names.dataset_by_ref(session=session, ref=dataset)
    row = names.model_by_ref(session=session, ref=model, dataset_id=ds.id)
    if row.dataset_id != ds.id:
        raise NotFound(f"model {model!r} is not a model of dataset {ds.name!r}")
    return ds, row


def _named(session: Session, dataset: str, name: str) -> Dataset:
    """The dataset, once it is known to have a model called ``name`` (404 otherwise)."""
    ds = names.dataset_by_ref(session=session, ref=dataset)
    names.model_in(session=session, dataset=ds, ref=names.ModelRef(None, name, names.LATEST))
    return ds


def _alias_public(session: Session, ds: Dataset, row: ModelAlias) -> AliasPublic:
    model = session.get(Model, row.model_id)
    return AliasPublic(
        alias=row.alias,
        model_id=row.model_id,
        version=model.version if model is not None else 0,
        ref=f"{ds.name}/{row.name}@{row.alias}",
        updated_at=row.updated_at,
    )


def _event_public(event: ModelAliasEvent) -> AliasEventPublic:
    return AliasEventPublic.model_validate(event, from_attributes=True)


@router.get(
    "/{model}",
    operation_id="models_get_by_name",
    response_model=ModelPublic,
    responses=NOT_FOUND,
)
def get_model_by_name(
    dataset: str, model: str, session: SessionDep, who: Annotated[Principal, require("read")]
) -> ModelPublic:
    """The model ``NAME[@VERSION|@ALIAS]`` (default ``@latest``, the highest version); a
    metric's value is shown when it is declared 'prior', or to admin keys."""
    _, row = _model(session, dataset, model)
    return labelled(session, row, to_public(row, show_all=who.can("admin")))


@router.get(
    "/{name}/aliases",
    operation_id="models_aliases",
    dependencies=[require("read")],
    response_model=AliasesPublic,
    responses=NOT_FOUND,
)
def list_aliases(dataset: str, name: str, session: SessionDep) -> AliasesPublic:
    """The aliases of every version of model ``name``, and their history (newest first)."""
    ds = _named(session, dataset, name)
    rows = aliases.aliases_of(session=session, dataset_id=ds.id, name=name)
    events = aliases.history(session=session, dataset_id=ds.id, name=name)
    return AliasesPublic(
        dataset_id=ds.id,
        name=name,
        aliases=[_alias_public(session, ds, r) for r in rows],
        history=[_event_public(e) for e in events],
    )


@router.put(
    "/{name}/aliases/{alias}",
    operation_id="models_set_alias",
    response_model=AliasMoved,
    responses={**NOT_FOUND, 422: {"model": Problem}},
)
def set_alias(
    dataset: str,
    name: str,
    alias: str,
    body: AliasSet,
    ctx: ContextDep,
    who: Annotated[Principal, require("publish")],
) -> AliasMoved:
    """Point ``alias`` at ``version`` of model ``name``: created, or moved atomically,
    the move kept in the history. Every deployment that follows the alias is re-targeted
    by a job recorded with the move (its outcome: ``GET /v1/jobs/{job_id}``); one the
    policy or the dataset's cap refuses stays on its current release, with the failure
    in its history. Setting an alias where it already points changes nothing."""
    aliases.check_alias(alias)
    with session_scope(ctx.session_factory) as session:
        ds = names.dataset_by_ref(session=session, ref=dataset)
        with repository.dataset_lock(session, aliases.name_lock_key(ds.id, name)):
            ref = names.ModelRef(None, name, str(body.version))
            model = names.model_in(session=session, dataset=ds, ref=ref)
            current = next(
                (
                    r
                    for r in aliases.aliases_of(session=session, dataset_id=ds.id, name=name)
                    if r.alias == alias
                ),
                None,
            )
            queued: list[tuple[str, str]] = []
            previous = session.get(Model, current.model_id) if current is not None else None
            if current is None or current.model_id != model.id:
                row, _ = aliases.set_alias(
                    session=session, model=model, alias=alias, key_name=who.name
                )
                moved = f"from version {previous.version}" if previous is not None else "new"
                queued = follow.queue_retargets(
                    session=session,
                    dataset_id=ds.id,
                    name=name,
                    alias=alias,
                    reason=f"alias {alias!r} of {name!r} moved to version {model.version} "
                    f"({moved})",
                )
            else:
                row = current
            public = AliasMoved(
                alias=_alias_public(session, ds, row),
                previous_version=previous.version if previous is not None else None,
                retargets=[
                    RetargetQueued(deployment=dep, job_id=outbox.job_id(item))
                    for dep, item in queued
                ],
            )
    for _, item in queued:
        dispatch(ctx, item)
    return public


@router.delete(
    "/{name}/aliases/{alias}",
    operation_id="models_delete_alias",
    response_model=AliasEventPublic,
    responses={**NOT_FOUND, 409: {"model": Problem, "description": "a deployment follows it"}},
)
def delete_alias(
    dataset: str,
    name: str,
    alias: str,
    ctx: ContextDep,
    who: Annotated[Principal, require("publish")],
) -> AliasEventPublic:
    """Remove an alias (kept in the history). One a deployment follows is refused (409):
    move it instead."""
    with session_scope(ctx.session_factory) as session:
        ds = _named(session, dataset, name)
        with repository.dataset_lock(session, aliases.name_lock_key(ds.id, name)):
            follow.refuse_delete_if_followed(
                session=session, dataset_id=ds.id, name=name, alias=alias
            )
            event = aliases.delete_alias(
                session=session, dataset_id=ds.id, name=name, alias=alias, key_name=who.name
            )
            return _event_public(event)


@router.patch(
    "/{model}/tags",
    operation_id="models_set_tags",
    dependencies=[require("publish")],
    response_model=TagsPublic,
    responses={**NOT_FOUND, 422: {"model": Problem}},
)
def set_tags(dataset: str, model: str, body: TagsUpdate, session: SessionDep) -> TagsPublic:
    """Set and remove tags of one version, at once (a label: a tag with an empty value).
    ``NAME@champion`` tags the version the alias names now."""
    _, row = _model(session, dataset, model)
    tags = aliases.set_tags(session=session, model=row, tags=body.set, remove=body.remove)
    session.commit()
    return TagsPublic(model_id=row.id, tags=tags)
