from __future__ import annotations

import tempfile
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from service.api.deps import ContextDep, Limit, Offset, SessionDep, require
from service.api.schemas import DatasetCreate, DatasetPublic, DatasetsPublic, Problem
from service.errors import Conflict
from service.formats.streams import iter_file
from service.merging.validation import read_split
from service.registry import names, repository
from service.registry.db import session_scope
from service.registry.idempotency import same_dataset

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


@router.post(
    "",
    operation_id="datasets_create",
    dependencies=[require("publish")],
    status_code=201,
    response_model=DatasetPublic,
    responses={
        200: {"model": DatasetPublic, "description": "exist_ok: the dataset, already there"},
        409: {"model": Problem},
        422: {"model": Problem},
    },
)
def create_dataset(
    body: DatasetCreate,
    session: SessionDep,
    exist_ok: Annotated[
        bool,
        Query(
            description="answer 200 with the dataset when one of this name exists with the "
            "same settings (409 when they differ), so a script can run twice"
        ),
    ] = False,
) -> DatasetPublic | JSONResponse:
    """Create a dataset; names are unique (409), and ``exist_ok`` makes it idempotent."""
    settings = body.model_dump()
    try:
        dataset = repository.create_dataset(session=session, **settings)
    except Conflict:
        found = repository.dataset_named(session=session, name=body.name) if exist_ok else None
        if found is None:
            raise
        public = DatasetPublic.model_validate(same_dataset(found, settings))
        return JSONResponse(public.model_dump(mode="json"), status_code=200)
    session.commit()
    return DatasetPublic.model_validate(dataset)


@router.get(
    "", dependencies=[require("read")], response_model=DatasetsPublic, operation_id="datasets_list"
)
def list_datasets(session: SessionDep, offset: Offset = 0, limit: Limit = 50) -> DatasetsPublic:
    rows, total = repository.list_datasets(session=session, offset=offset, limit=limit)
    return DatasetsPublic(
        data=[DatasetPublic.model_validate(r) for r in rows],
        count=total,
        offset=offset,
        limit=limit,
    )


@router.get(
    "/{dataset_id}",
    operation_id="datasets_get",
    dependencies=[require("read")],
    response_model=DatasetPublic,
    responses={404: {"model": Problem}},
)
def get_dataset(dataset_id: str, session: SessionDep) -> DatasetPublic:
    """The dataset with this id or name (404 suggesting close names)."""
    return DatasetPublic.model_validate(names.dataset_by_ref(session=session, ref=dataset_id))


_SPLIT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/octet-stream": {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "A safetensors file with tensors 'inputs' [n, ...] (float) "
                    "and 'labels' [n] (integer class indices).",
                }
            }
        },
    }
}


@router.put(
    "/{dataset_id}/validation",
    operation_id="datasets_set_validation",
    dependencies=[require("publish")],
    response_model=DatasetPublic,
    openapi_extra=_SPLIT_BODY,
    responses={404: {"model": Problem}, 413: {"model": Problem}, 422: {"model": Problem}},
)
async def put_validation(dataset_id: str, request: Request, ctx: ContextDep) -> DatasetPublic:
    """Register (or replace) the dataset's **public** validation split.

    Plans with ``objective: "validation"`` score candidate weights by their
    accuracy on it. It must be data that needs no protection: it is read by the
    service, never counted against any privacy budget.
    """
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as body:
        async for chunk in request.stream():
            body.write(chunk)
        body.seek(0)

        def store() -> DatasetPublic:
            with session_scope(ctx.session_factory) as session:
                dataset = repository.set_validation(
                    session=session,
                    blobs=ctx.blobs,
                    dataset_id=names.dataset_id(session=session, ref=dataset_id),
                    chunks=iter_file(body),
                    check=lambda path: read_split(path).examples,
                    max_bytes=ctx.settings.max_upload_bytes,
                )
                return DatasetPublic.model_validate(dataset)

        return await run_in_threadpool(store)
