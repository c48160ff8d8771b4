"""What the service answers, as typed records.

Each record names the fields a caller relies on (``openapi/openapi.json``) and keeps
any other the service sends (``extra="allow"``): a newer service never breaks an
older client. ``record.model_dump()`` gives the JSON back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Dataset(Record):
    id: str
    name: str
    description: str | None = None
    metric: str | None = None
    epsilon_cap: float | None = None
    delta_cap: float | None = None
    created_at: str | None = None


class Model(Record):
    id: str
    dataset_id: str
    name: str
    version: int = 1
    ref: str | None = Field(default=None, description="DATASET/NAME@VERSION")
    aliases: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    mechanism: dict[str, Any]
    mechanism_hash: str = ""
    lineage: dict[str, Any] | None = None
    sha256: str
    size_bytes: int
    metrics: dict[str, float] = Field(default_factory=dict)
    download_url: str = ""
    created_at: str | None = None
    retired_at: str | None = None
    retired_reason: str | None = None
    kind: str = "safetensors"
    files: list[dict[str, Any]] | None = None


class Alias(Record):
    alias: str
    model_id: str
    version: int
    ref: str = ""
    updated_at: str | None = None


class AliasEvent(Record):
    """One set, move or delete of an alias (``version`` None: deleted)."""

    alias: str
    version: int | None = None
    previous_version: int | None = None
    model_id: str | None = None
    previous_model_id: str | None = None
    key_name: str | None = None
    created_at: str | None = None


class Aliases(Record):
    dataset_id: str
    name: str
    aliases: list[Alias] = Field(default_factory=list)
    history: list[AliasEvent] = Field(default_factory=list)


class AliasMoved(Record):
    """An alias set or moved, and the jobs re-targeting the deployments that follow it."""

    alias: Alias
    previous_version: int | None = None
    retargets: list[dict[str, str]] = Field(default_factory=list)


class Epsilon(Record):
    epsilon: float
    delta: float
    accountant: str
    used: str = ""
    heuristic: bool = False
    notes: list[str] = Field(default_factory=list)


class PlanWeight(Record):
    model_id: str
    model_name: str | None = None
    weight: float


class Plan(Record):
    method: str
    accountant: str
    weights: list[PlanWeight]
    epsilon: float
    delta: float
    bound: str = ""
    objective: str = ""
    expected_utility: float | None = None
    exposed_model_ids: list[str] = Field(default_factory=list)
    heuristic: bool = False
    notes: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    selection_epsilon: float | None = None


class Guarantee(Record):
    method: str
    delta: float
    epsilon: float | None
    accountant: str
    by_accountant: dict[str, float | None] = Field(default_factory=dict)
    bound: str = ""
    notes: list[str] = Field(default_factory=list)


class Release(Record):
    release_id: str
    dataset_id: str
    method: str
    accountant: str
    epsilon: float
    delta: float
    weights: list[PlanWeight]
    sha256: str
    size_bytes: int
    download_url: str
    deployment: str | None = None
    kind: str = "safetensors"
    status: str = "done"
    created_at: str | None = None
    created: bool = Field(
        default=True, description="false when the same request was already served (200)"
    )


class Deployment(Record):
    name: str
    dataset_id: str
    epsilon: float
    delta: float
    method: str
    accountant: str
    current_release_id: str | None = None
    follows: str | None = None
    model_url: str = ""
    last_error: str | None = None
    history: list[dict[str, Any]] = Field(default_factory=list)


class Key(Record):
    id: str
    name: str
    prefix: str
    scopes: list[str]
    created_at: str | None = None
    revoked_at: str | None = None


class KeyCreated(Key):
    key: str


class Job(Record):
    id: str
    kind: str = ""
    status: str
    error: str | None = None
    result: dict[str, Any] | None = None


class Ledger(Record):
    dataset_id: str
    releases: list[dict[str, Any]] = Field(default_factory=list)
    exposed_model_ids: list[str] = Field(default_factory=list)
    cumulative: dict[str, Any] = Field(default_factory=dict)
    epsilon_cap: float | None = None
    delta_cap: float | None = None


class Download(Record):
    """A file written by a download or a pull."""

    path: Path
    sha256: str
    size_bytes: int
    changed: bool = Field(default=True, description="false when the file was already current")
    resumed_from: int = Field(default=0, description="bytes kept from an earlier attempt")


class FolderDownload(Record):
    """A release's (or a model's) files pulled into a folder."""

    path: Path
    release_id: str | None = None
    kind: str = ""
    files: list[Download] = Field(default_factory=list)
    removed: list[str] = Field(
        default_factory=list, description="files an earlier pull wrote that this one removed"
    )
    changed: bool = Field(default=True, description="false when every file was already current")


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a list endpoint: ``data`` and ``count`` (all there are)."""

    model_config = ConfigDict(frozen=True)

    data: list[T]
    count: int
    offset: int
    limit: int
