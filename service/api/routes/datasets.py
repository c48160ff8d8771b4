from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import SessionDep, require
from service.api.schemas import DatasetCreate, DatasetPublic, DatasetsPublic, Problem
from service.registry import repository

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

Offset = Annotated[int, Query(ge=0, le=10**9)]
Limit = Annotated[int, Query(ge=1, le=500)]


@router.post(
    "",
    dependencies=[require("publish")],
    status_code=201,
    response_model=DatasetPublic,
    responses={409: {"model": Problem}, 422: {"model": Problem}},
)
def create_dataset(body: DatasetCreate, session: SessionDep) -> DatasetPublic:
    dataset = repository.create_dataset(session=session, **body.model_dump())
    session.commit()
    return DatasetPublic.model_validate(dataset)


@router.get("", dependencies=[require("read")], response_model=DatasetsPublic)
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
    dependencies=[require("read")],
    response_model=DatasetPublic,
    responses={404: {"model": Problem}},
)
def get_dataset(dataset_id: str, session: SessionDep) -> DatasetPublic:
    return DatasetPublic.model_validate(
        repository.get_dataset(session=session, dataset_id=dataset_id)
    )
