"""Aliases and tags of models."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from service.api.schemas.common import In

TagKey = Annotated[str, StringConstraints(min_length=1, max_length=100)]
TagValue = Annotated[str, StringConstraints(max_length=1000, pattern=r"^[^\x00]*$")]


class AliasSet(In):
    version: int = Field(ge=1, le=2**31 - 1, description="the version the alias names now")


class AliasPublic(BaseModel):
    alias: str
    model_id: str
    version: int
    ref: str = Field(description="DATASET/NAME@ALIAS")
    updated_at: datetime


class AliasEventPublic(BaseModel):
    alias: str
    version: int | None = Field(description="the version after the event; null: deleted")
    previous_version: int | None = Field(description="before the event; null: new alias")
    model_id: str | None
    previous_model_id: str | None
    key_name: str | None = Field(description="the API key that made the change")
    created_at: datetime


class AliasesPublic(BaseModel):
    dataset_id: str
    name: str
    aliases: list[AliasPublic]
    history: list[AliasEventPublic] = Field(description="newest first (the last 100)")


class RetargetQueued(BaseModel):
    deployment: str
    job_id: str = Field(description="GET /v1/jobs/{job_id}: the re-target's outcome")


class AliasMoved(BaseModel):
    alias: AliasPublic
    previous_version: int | None
    retargets: list[RetargetQueued] = Field(
        description="the deployments following this alias, each re-targeted by a job"
    )


class TagsUpdate(In):
    set: dict[TagKey, TagValue] = Field(
        default_factory=dict, max_length=50, description="tags to add or change"
    )
    remove: list[TagKey] = Field(default_factory=list, max_length=50)


class TagsPublic(BaseModel):
    model_id: str
    tags: dict[str, str]
