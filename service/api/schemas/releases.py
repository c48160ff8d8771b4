"""Releases and the ledger."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from service.api.schemas.plans import PlanPublic, PlanRequest, PlanWeight
from service.api.schemas.registry import BundleFile


class RetargetRequest(PlanRequest):
    deployment: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    max_shard_size: int | None = Field(
        default=None,
        ge=1024,
        le=2**50,
        description="bundles: the largest output shard in bytes (default: the inputs' sharding)",
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        default=None,
        description="the released file's float tensors in this dtype (accumulation is "
        "float32 either way; an RS release is the drawn model cast); default: the inputs'",
    )


class ReleasePublic(BaseModel):
    release_id: str
    dataset_id: str
    method: str
    accountant: str
    epsilon: float = Field(description="the release's guarantee at delta, rounded up")
    delta: float
    bound: str
    weights: list[PlanWeight]
    exposed_model_ids: list[str]
    sha256: str
    size_bytes: int
    download_url: str
    kind: str = "safetensors"
    status: str = Field(
        default="done", description="pending while an async merge runs (its budget is counted)"
    )
    files_url: str
    archive_url: str
    deployment: str | None
    created_at: datetime
    plan: PlanPublic


class ReleasesPublic(BaseModel):
    data: list[ReleasePublic]
    count: int
    offset: int
    limit: int


class CumulativePublic(BaseModel):
    epsilon: float
    delta: float
    accountant: str = Field(description="pld | rdp (joint release) | release | none")
    heuristic: bool = Field(
        default=False,
        description="true when an exposed model's bound rests on an approximation "
        "(shuffled batches accounted as Poisson sampling)",
    )


class ExposurePublic(BaseModel):
    """Private models shown outside a release, charged like the models a release exposes."""

    id: str
    kind: Literal["download", "scored_plan", "private_selection"] = Field(
        description="download: raw weights of a registered model (scope models:download); "
        "scored_plan: a dry-run plan computed from the models themselves; "
        "private_selection: a selection by metrics on private data (its models, plus "
        "detail.selection_epsilon)"
    )
    model_ids: list[str]
    key_name: str = Field(description="the API key that asked")
    count: int = Field(
        description="how many times this key was shown these models (an identical plan "
        "answered again from the plan cache is not counted again)"
    )
    detail: dict[str, Any]
    first_at: datetime
    last_at: datetime


class LedgerPublic(BaseModel):
    dataset_id: str
    releases: list[ReleasePublic]
    exposures: list[ExposurePublic] = Field(
        description="raw downloads and scored dry-run plans, charged through their models"
    )
    exposed_model_ids: list[str]
    cumulative: CumulativePublic
    epsilon_cap: float | None
    delta_cap: float | None


class ReleaseFilesPublic(BaseModel):
    """A release's (or a deployment's current release's) files, as a serving stack
    lays them out in a folder."""

    release_id: str
    kind: str
    files: list[BundleFile]
