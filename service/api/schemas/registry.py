"""Datasets and models."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from service.accounting.mechanisms import Mechanism
from service.api.schemas.common import (
    DATASET_REF,
    MAX_BIGINT,
    MAX_INT,
    Delta,
    Epsilon,
    In,
    ModelName,
    Name,
    Text,
)
from service.api.schemas.uploads import BundleFileRef
from service.ledger.charges import DEFAULT_LEDGER_DELTA
from service.merging.architecture import Architecture
from service.registry.names import looks_like_id


class DatasetCreate(In):
    name: Name = Field(description="unique; not shaped like an id (datasets are named by either)")
    description: Text | None = Field(default=None, max_length=10_000)
    metric: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None,
        description="The utility metric plans use by default, when every candidate declares "
        "it 'prior' (metric_goal says its direction; 'max' when left out).",
    )
    metric_goal: Literal["max", "min"] | None = None
    epsilon_cap: Epsilon | None = None
    delta_cap: Delta | None = None

    @field_validator("name")
    @classmethod
    def _not_an_id(cls, name: str) -> str:
        if looks_like_id(name):
            raise ValueError("a dataset name cannot have the shape of an id (a UUID)")
        return name


class DatasetPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    description: str | None
    metric: str | None
    metric_goal: str | None = None
    epsilon_cap: float | None
    delta_cap: float | None = Field(
        description="the delta the ledger is held to; 1e-05 when an epsilon cap is set without one"
    )
    validation_examples: int | None = Field(
        default=None, description="examples in the public validation split, if one is registered"
    )
    validation_sha256: str | None = None
    created_at: datetime

    @model_validator(mode="after")
    def _effective_delta_cap(self) -> DatasetPublic:
        if self.epsilon_cap is not None and self.delta_cap is None:
            self.delta_cap = DEFAULT_LEDGER_DELTA
        return self


class DatasetsPublic(BaseModel):
    data: list[DatasetPublic]
    count: int
    offset: int
    limit: int


class BundleFile(BaseModel):
    """One file of a bundle: its path in the bundle, its size and its sha256."""

    path: str
    size: int
    sha256: str


class Lineage(In):
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]
    step: int | None = Field(default=None, ge=0, le=MAX_BIGINT)


class Claimed(In):
    epsilon: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]


class MetricDeclaration(In):
    """How one metric was computed, which decides who may see it and what reading it costs."""

    source: Literal["prior", "models", "private"] = Field(
        description="'prior': fixed without these models' outputs on private data (a public "
        "proxy run, a hyper-parameter table): shown to every key, usable by random selection "
        "at no cost. 'models': computed from this model on public data (e.g. the public "
        "validation split): a function of the private model, so shown only to admin keys "
        "and a plan read from it is charged as the joint release of the models read. "
        "'private': computed on private data (e.g. accuracy on n private validation "
        "examples): needs 'sensitivity' and a value in [0, 1]; shown only to admin keys, "
        "usable only through private selection (metric_source 'private')"
    )
    sensitivity: float | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="'private' only: how much one person's data can change the value "
        "(accuracy on n examples: 1/n)",
    )


class ModelCreate(In):
    """The ``metadata`` part of a model upload."""

    dataset_id: Text = Field(min_length=1, max_length=200, description=DATASET_REF)
    name: ModelName
    version: int = Field(default=1, ge=1, le=MAX_INT)
    mechanism: Mechanism
    lineage: Lineage | None = None
    metrics: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[^\x00]+$")],
        float,
    ] = Field(default_factory=dict, max_length=100)
    metric_declarations: dict[str, MetricDeclaration] = Field(
        default_factory=dict,
        max_length=100,
        description="per metric, how it was computed (a metric not declared counts as "
        "'models'): decides who sees its value and what a plan reading it costs",
    )
    claimed: Claimed | None = None
    architecture: Architecture | None = Field(
        default=None,
        description="the network, in the declared vocabulary; needed for objective 'validation'",
    )
    weights_uri: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^(s3|file)://",
        description="the checkpoint by reference instead of a 'weights' part: s3://bucket/key "
        "(a bucket of RETARGET_REFERENCE_BUCKETS) or file:///path (under "
        "RETARGET_REFERENCE_ROOT); copied into the service's store and checked as an upload",
    )
    files: list[BundleFileRef] | None = Field(
        default=None,
        max_length=1024,
        description="a bundle by its uploads instead of file parts: each file's path and the "
        "sha256 this key uploaded it under (PUT /v1/uploads/{sha256}); a sha256 not uploaded "
        "by this key is refused (422 with 'missing')",
    )

    @model_validator(mode="after")
    def _declared_metrics(self) -> ModelCreate:
        for name, decl in self.metric_declarations.items():
            if name not in self.metrics:
                raise ValueError(f"metric_declarations names {name!r}, which metrics lacks")
            if decl.source == "private":
                if decl.sensitivity is None:
                    raise ValueError(
                        f"metric {name!r} is declared 'private': give its sensitivity (how "
                        "much one person's data can change it; accuracy on n examples: 1/n)"
                    )
                if not 0.0 <= self.metrics[name] <= 1.0:
                    raise ValueError(
                        f"metric {name!r} is declared 'private': its value must be in "
                        f"[0, 1], got {self.metrics[name]}"
                    )
            elif decl.sensitivity is not None:
                raise ValueError(f"metric {name!r}: a sensitivity is for 'private' metrics only")
        return self


class ModelPublic(BaseModel):
    id: str
    dataset_id: str
    name: str
    version: int
    mechanism: dict[str, Any]
    mechanism_hash: str
    lineage: Lineage | None
    lineage_verified: bool = Field(
        default=False,
        description="the checkpoint's mechanism was checked step for step against its run's "
        "other checkpoints at registration; only verified checkpoints count as one run",
    )
    signature: dict[str, Any]
    signature_hash: str
    sha256: str
    size_bytes: int
    metrics: dict[str, float] = Field(
        description="the metrics this key may see: those declared 'prior' for every key, all "
        "of them for admin keys (the others are listed in hidden_metrics)"
    )
    metric_declarations: dict[str, MetricDeclaration] = Field(default_factory=dict)
    hidden_metrics: list[str] = Field(
        default_factory=list,
        description="metrics computed from the model or on private data, whose values this "
        "key may not see (a plan reading them needs scope 'publish' and is charged)",
    )
    duplicate_of: str | None = Field(
        default=None,
        description="registered before copies were refused: the model with the same bytes "
        "this one copies (plans leave it out)",
    )
    architecture: dict[str, Any] | None = None
    claimed: Claimed | None
    claim_check: str | None = Field(
        description="understated | consistent | conservative | unverifiable: the claim "
        "against our bound at the claimed delta"
    )
    recomputed_epsilon: float | None = Field(
        description="our epsilon at the claimed delta (best accountant), rounded up"
    )
    created_at: datetime
    download_url: str
    kind: str = Field(
        default="safetensors",
        description="safetensors (one file), hf_bundle (a model folder: shards, index, "
        "sidecars) or peft_lora (a PEFT LoRA adapter)",
    )
    files: list[BundleFile] | None = Field(
        default=None, description="a bundle's files; None for a single safetensors file"
    )
    retired_at: datetime | None = Field(
        default=None,
        description="when an admin retired the model: it is left out of every plan of its "
        "dataset (its releases stay in the ledger)",
    )
    retired_reason: str | None = None
    ref: str | None = Field(
        default=None, description="DATASET/NAME@VERSION: the model by name, for people"
    )
    aliases: list[str] = Field(
        default_factory=list, description="the aliases naming this version (NAME@ALIAS)"
    )
    tags: dict[str, str] = Field(
        default_factory=dict, description="free key/value tags (a label has an empty value)"
    )


class ModelRetire(BaseModel):
    """Retiring a model: why, and whether to retire one a deployment serves."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000)
    force: bool = Field(
        default=False,
        description="retire it even though a deployment serves it (the deployment keeps its "
        "current release until its next policy change)",
    )


class ModelsPublic(BaseModel):
    data: list[ModelPublic]
    count: int
    offset: int
    limit: int


class EpsilonPublic(BaseModel):
    epsilon: float = Field(description="the smallest epsilon we can prove at delta, rounded up")
    delta: float
    accountant: str = Field(description="the accountant asked for: rdp | pld | best")
    used: str = Field(description="the accountant that gave this epsilon")
    heuristic: bool = Field(description="true when the bound rests on an approximation")
    notes: list[str]
