"""Request and response schemas. Names say their role: ``XCreate``, ``XPublic``, ``XsPublic``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from service.accounting.mechanisms import Mechanism
from service.jobs.releases import DEFAULT_LEDGER_DELTA
from service.merging.architecture import Architecture

#: Printable names: no control characters and no path separators.
Name = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f/\\]+$"
    ),
]
#: Free text stored in the database: no NUL characters (Postgres text cannot hold them).
Text = Annotated[str, StringConstraints(pattern=r"^[^\x00]*$")]
#: The largest value a BIGINT column holds (2^63 - 1) and an INTEGER one (2^31 - 1).
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1
Epsilon = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A target delta: at least 1e-300, a normal float64 (below it logs and ratios of delta
#: lose all precision; no useful guarantee needs a smaller one).
Delta = Annotated[float, Field(ge=1e-300, lt=1, allow_inf_nan=False)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DatasetCreate(_In):
    name: Name
    description: Text | None = Field(default=None, max_length=10_000)
    metric: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, description="The utility metric plans maximise by default."
    )
    epsilon_cap: Epsilon | None = None
    delta_cap: Delta | None = None


class DatasetPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    description: str | None
    metric: str | None
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


class Lineage(_In):
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]
    step: int | None = Field(default=None, ge=0, le=MAX_BIGINT)


class Claimed(_In):
    epsilon: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]


class ModelCreate(_In):
    """The ``metadata`` part of a model upload."""

    dataset_id: Text = Field(min_length=1, max_length=36)
    name: Name
    version: int = Field(default=1, ge=1, le=MAX_INT)
    mechanism: Mechanism
    lineage: Lineage | None = None
    metrics: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[^\x00]+$")],
        float,
    ] = Field(default_factory=dict, max_length=100)
    claimed: Claimed | None = None
    architecture: Architecture | None = Field(
        default=None,
        description="the network, in the declared vocabulary; needed for objective 'validation'",
    )


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
    metrics: dict[str, float]
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


class ModelsPublic(BaseModel):
    data: list[ModelPublic]
    count: int
    offset: int
    limit: int


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


class EpsilonPublic(BaseModel):
    epsilon: float = Field(description="the smallest epsilon we can prove at delta, rounded up")
    delta: float
    accountant: str = Field(description="the accountant asked for: rdp | pld | best")
    used: str = Field(description="the accountant that gave this epsilon")
    heuristic: bool = Field(description="true when the bound rests on an approximation")
    notes: list[str]


class PlanRequest(_In):
    dataset_id: Text = Field(min_length=1, max_length=36)
    epsilon: Epsilon
    delta: Delta
    method: Literal["rs", "lc", "auto", "checkpoint_average"] = "auto"
    accountant: Literal["rdp", "pld", "best"] = "best"
    model_ids: list[Annotated[str, StringConstraints(min_length=1, max_length=36)]] | None = Field(
        default=None, min_length=1, max_length=64
    )
    metric: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    metric_goal: Literal["max", "min"] | None = Field(
        default=None,
        description="required with objective 'metric': whether larger or smaller is better "
        "(never guessed from the name)",
    )
    metric_source: Literal["models", "prior"] = Field(
        default="models",
        description="objective 'metric': 'models' (the metrics were computed from these "
        "models: the selection is bounded by the joint release of every model read, and "
        "exposes them) or 'prior' (fixed without these models' outputs on private data, "
        "e.g. a public proxy run: Theorems 5.1/5.2 apply under that stated assumption)",
    )
    objective: Literal["metric", "noise", "validation"] | None = Field(
        default=None,
        description="default 'noise' (reads the mechanisms only; 'metric' when a metric is "
        "named with method rs). 'validation' (lc, auto): weights chosen by accuracy on the "
        "dataset's public validation split, guaranteed by the joint release of the models "
        "scored",
    )
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = Field(
        default=None, description="checkpoint_average: the run whose checkpoints to average"
    )
    last_k: int = Field(default=3, ge=1, le=1000, description="checkpoint_average: how many")
    ema_decay: float | None = Field(
        default=None, gt=0, le=1, description="checkpoint_average: EMA weights decay^(k-j)"
    )


class PlanWeight(BaseModel):
    model_id: str
    weight: float


class PlanPublic(BaseModel):
    method: Literal["rs", "lc", "checkpoint_average"]
    accountant: Literal["rdp", "pld"]
    weights: list[PlanWeight]
    epsilon: float = Field(description="achieved epsilon at delta, rounded up, <= the target")
    delta: float
    objective: str
    objective_value: float | None = Field(
        description="expected metric (objective 'metric'), merged noise variance ('noise') "
        "or validation accuracy ('validation')"
    )
    expected_utility: float | None
    bound: str = Field(description="the theorem that proves the guarantee")
    exposed_model_ids: list[str] = Field(
        default_factory=list,
        description="the models a release of this plan counts as exposed in the ledger",
    )
    heuristic: bool
    notes: list[str]
    paper_epsilon: float | None = Field(
        default=None,
        description="LC only, a labelled comparison: the paper's per-step composition for "
        "these weights. It holds only if gradients do not depend on hidden state, which "
        "DP-SGD does not guarantee; it is never the plan's epsilon",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what would stop a release of this plan now (the dataset's cap)",
    )


class JobPublic(BaseModel):
    id: str
    kind: str
    status: str = Field(description="queued | scheduled | started | finished | failed")
    error: str | None = None
    result: dict[str, Any] | None = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


class PendingPublic(BaseModel):
    status: Literal["pending"]
    detail: str
    jobs: list[JobPublic]


class RetargetRequest(PlanRequest):
    deployment: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
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
    deployment: str | None
    created_at: datetime
    plan: PlanPublic


class CumulativePublic(BaseModel):
    epsilon: float
    delta: float
    accountant: str = Field(description="pld | rdp (joint release) | release | none")


class LedgerPublic(BaseModel):
    dataset_id: str
    releases: list[ReleasePublic]
    exposed_model_ids: list[str]
    cumulative: CumulativePublic
    epsilon_cap: float | None
    delta_cap: float | None


class KeyCreate(_In):
    name: Name
    scopes: list[Literal["admin", "publish", "release", "read"]] = Field(min_length=1)


class KeyPublic(BaseModel):
    id: str
    name: str
    prefix: str = Field(description="the key's first characters, to tell keys apart")
    scopes: list[str]
    created_at: datetime
    revoked_at: datetime | None


class KeyCreated(KeyPublic):
    key: str = Field(description="the API key; shown this once, stored only hashed")


class DeploymentCreate(_In):
    name: Name
    dataset_id: Text = Field(min_length=1, max_length=36)
    epsilon: Epsilon
    delta: Delta
    method: Literal["rs", "lc", "auto"] = "auto"
    accountant: Literal["rdp", "pld", "best"] = "best"
    callback_url: (
        Annotated[str, StringConstraints(max_length=2000, pattern=r"^https?://[^\s]+$")] | None
    ) = None


class PolicyUpdate(_In):
    epsilon: Epsilon
    delta: Delta
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = None


class PolicyChangeWebhook(_In):
    deployment: Name
    epsilon: Epsilon
    delta: Delta
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = None


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
    callback_url: str | None
    current_release_id: str | None
    model_url: str
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    history: list[DeploymentEventPublic]


class WebhookAccepted(BaseModel):
    delivery: str
    deployment: str
    job: JobPublic


class GuaranteeWeight(_In):
    model_id: str = Field(min_length=1, max_length=36)
    weight: float = Field(ge=0, le=1, allow_inf_nan=False)


class GuaranteeRequest(_In):
    """Weights the caller already has: what do they prove at ``delta``?"""

    dataset_id: Text = Field(min_length=1, max_length=36)
    delta: Delta
    method: Literal["rs", "lc"]
    accountant: Literal["rdp", "pld", "best"] = "best"
    weights: list[GuaranteeWeight] = Field(min_length=1, max_length=64)


class GuaranteePublic(BaseModel):
    method: str
    delta: float
    epsilon: float | None = Field(
        description="the smallest epsilon proved at delta, rounded up; null when none is finite"
    )
    accountant: str = Field(description="the accountant that gave epsilon")
    by_accountant: dict[str, float | None]
    bound: str
    heuristic: bool = False
    notes: list[str] = Field(default_factory=list, description="what the bound assumes")
    paper_epsilon: float | None = Field(
        default=None,
        description="LC only, a labelled comparison: the paper's per-step composition, "
        "which holds only if gradients do not depend on hidden state; never a guarantee",
    )
