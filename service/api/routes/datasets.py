from __future__ import annotations

import tempfile

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from service.api.deps import ContextDep, Limit, Offset, SessionDep, require
from service.api.schemas import DatasetCreate, DatasetPublic, DatasetsPublic, Problem
from service.formats.streams import iter_file
from service.merging.validation import read_split
from service.registry import repository
from service.registry.db import session_scope

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


@router.post(
    "",
    operation_id="datasets_create",
    dependencies=[require("publish")],
    status_code=201,
    response_model=DatasetPublic,
    responses={409: {"model": Problem}, 422: {"model": Problem}},
)
def create_dataset(body: DatasetCreate, session: SessionDep) -> DatasetPublic:
    dataset = repository.create_dataset(session=session, **body.model_dump())
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
    return DatasetPublic.model_validate(
        repository.get_dataset(session=session, dataset_id=dataset_id)
    )


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
                    dataset_id=dataset_id,
                    chunks=iter_file(body),
                    check=lambda path: read_split(path).examples,
                    max_bytes=ctx.settings.max_upload_bytes,
                )
                return DatasetPublic.model_validate(dataset)

        return await run_in_threadpool(store)
