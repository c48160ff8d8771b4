"""Deployments, policies and policy-change webhooks."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, model_validator

from service.api.schemas.common import DATASET_REF, Delta, Epsilon, In, Name, Text
from service.api.schemas.plans import JobPublic


class DeploymentCreate(In):
    name: Name
    dataset_id: Text | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description=f"{DATASET_REF}; may be left out when follows names it",
    )
    epsilon: Epsilon
    delta: Delta
    method: Literal["rs", "lc", "auto"] = "auto"
    accountant: Literal["rdp", "pld", "best"] = "best"
    callback_url: (
        Annotated[str, StringConstraints(max_length=2000, pattern=r"^https?://[^\s]+$")] | None
    ) = None
    follows: Annotated[str, StringConstraints(min_length=3, max_length=500)] | None = Field(
        default=None,
        description="[DATASET/]NAME@ALIAS: serve the version this alias names, alone (a "
        "release of that one model, charged as one), and re-target when the alias moves",
    )

    @model_validator(mode="after")
    def _dataset_given(self) -> DeploymentCreate:
        if self.dataset_id is None and (self.follows is None or "/" not in self.follows):
            raise ValueError("dataset_id is required (unless follows is DATASET/NAME@ALIAS)")
        return self


class PolicyUpdate(In):
    epsilon: Epsilon
    delta: Delta
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = None


class PolicyChangeWebhook(In):
    deployment: Name
    epsilon: Epsilon
    delta: Delta
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = None
    version: int | None = Field(
        default=None,
        ge=0,
        le=2**62,
        description="Orders the policies of a deployment: one older than the current policy "
        "is refused (409). Default: the signature's timestamp (unix seconds).",
    )


class DeploymentEventPublic(BaseModel):
    kind: str
    epsilon: float | None
    delta: float | None
    release_id: str | None
    reason: str | None
    source: str | None
    created_at: datetime


class DeploymentPublic(BaseModel):
    name: str
    dataset_id: str
    epsilon: float
    delta: float
    method: str
    accountant: str
    callback_url: str | None = Field(
        description="scheme://host[:port]/… only: user info, path and query are never shown"
    )
    policy_version: int = Field(description="orders policy changes (older ones are refused)")
    follows: str | None = Field(
        default=None, description="DATASET/NAME@ALIAS this deployment follows, if any"
    )
    current_release_id: str | None
    model_url: str
    archive_url: str = Field(description="the current release's files as a tar (any kind)")
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    history: list[DeploymentEventPublic]


class DeploymentsPublic(BaseModel):
    data: list[DeploymentPublic]
    count: int
    offset: int
    limit: int


class WebhookAccepted(BaseModel):
    delivery: str
    deployment: str
    job: JobPublic
