"""Plans (dry runs) and what fixed weights prove."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from service.api.schemas.common import DATASET_REF, MODEL_REF, Delta, Epsilon, In, ModelRef, Text


class PlanRequest(In):
    dataset_id: Text = Field(min_length=1, max_length=200, description=DATASET_REF)
    epsilon: Epsilon
    delta: Delta
    method: Literal["rs", "lc", "auto", "checkpoint_average"] = "auto"
    accountant: Literal["rdp", "pld", "best"] = "best"
    model_ids: list[ModelRef] | None = Field(
        default=None, min_length=1, max_length=64, description=f"the candidates: {MODEL_REF}"
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


class GuaranteeWeight(In):
    model_id: ModelRef = Field(description=MODEL_REF)
    weight: float = Field(ge=0, le=1, allow_inf_nan=False)


class GuaranteeRequest(In):
    """Weights the caller already has: what do they prove at ``delta``?"""

    dataset_id: Text = Field(min_length=1, max_length=200, description=DATASET_REF)
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
