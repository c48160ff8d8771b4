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
    method: Literal["rs", "lc", "auto", "checkpoint_average", "ensemble"] = Field(
        default="auto",
        description="'checkpoint_average': the parameter average of one run's last checkpoints; "
        "'ensemble': those checkpoints shipped side by side with a manifest saying how to "
        "combine their outputs (docs/ensembles.md); both certified as the latest checkpoint",
    )
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
    metric_source: Literal["models", "prior", "private"] = Field(
        default="models",
        description="objective 'metric', and it must match how each model declared the "
        "metric: 'models' (computed from these models: the selection is bounded by the "
        "joint release of every model read, and exposes them), 'prior' (fixed without "
        "these models' outputs on private data, e.g. a public proxy run: Theorems 5.1/5.2) "
        "or 'private' (computed on private data with a declared sensitivity: the service "
        "selects by report-noisy-max, charged at selection_epsilon plus the joint release "
        "of the eligible models)",
    )
    selection_epsilon: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="metric_source 'private': the selection's own epsilon (default 0.1 x "
        "the target)",
    )
    objective: Literal["metric", "signal", "noise", "validation"] | None = Field(
        default=None,
        description="left out: the dataset's metric when every candidate declares it "
        "'prior'; else, for keys with scope 'publish', 'validation' when the dataset has a "
        "public validation split (charged); else 'signal' (the noise-to-signal ratio of "
        "each model's training, read from the mechanisms). 'metric' when a metric is named "
        "with method rs. 'noise': the merged noise variance (favours less training). "
        "'validation' (lc, auto): weights chosen by accuracy on the public validation "
        "split, guaranteed by the joint release of the models scored",
    )
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = Field(
        default=None,
        description="checkpoint_average, ensemble: the run whose checkpoints to combine",
    )
    last_k: int = Field(
        default=3, ge=1, le=1000, description="checkpoint_average, ensemble: how many"
    )
    ema_decay: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="checkpoint_average, ensemble: EMA weights decay^(k-j)",
    )
    combine: Literal["mean_probabilities", "majority_vote"] = Field(
        default="mean_probabilities",
        description="ensemble: how the members' outputs combine: the (weighted) mean of their "
        "softmax probabilities (OPA) or the (weighted) majority of their argmax labels (OMV, "
        "ties to the lowest class index)",
    )


class PlanWeight(BaseModel):
    model_id: str
    model_name: str | None = None
    weight: float


class UncertaintyMember(BaseModel):
    model_id: str
    step: int | None
    value: float
    weight: float


class UncertaintyPublic(BaseModel):
    """The spread of a metric over one run's checkpoints ("Recycling Scraps",
    Shejwalkar et al., Section 5): a lower bound on the released model's uncertainty."""

    metric: str
    source: Literal["prior", "models", "validation_split"] = Field(
        description="'prior' when every value was declared so, 'models' when some were "
        "declared computed from the models, 'validation_split' when the service scored "
        "each checkpoint on the dataset's public validation split (metric "
        "'validation_accuracy': charged as a read of the checkpoints)"
    )
    k: int = Field(description="how many checkpoints")
    members: list[UncertaintyMember] = Field(description="each checkpoint's value, oldest first")
    estimate: float = Field(description="sum_i p_i f_i, the centre of the interval")
    sample_variance: float = Field(description="1/(k-1) sum_i (f_i - mean f)^2")
    sum_p_squared: float = Field(description="sum_i p_i^2 (uniform weights: 1/k)")
    variance: float = Field(description="the estimator: sum_i p_i^2 times the sample variance")
    std_error: float
    width_95: float = Field(description="2 x 1.96 x std_error, the normal 95% interval's width")
    interval_95: list[float]
    lower_bound: bool = Field(
        description="always true: consecutive checkpoints are correlated, which shrinks "
        "their spread, so the estimate is a lower bound on the true variance"
    )


class PlanPublic(BaseModel):
    method: Literal["rs", "lc", "checkpoint_average", "ensemble"]
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
    selection_epsilon: float | None = Field(
        default=None,
        description="a private selection (metric_source 'private'): the selection's own "
        "epsilon (pure DP), included in epsilon and charged to the ledger besides the "
        "models it read",
    )
    combine: Literal["mean_probabilities", "majority_vote"] | None = Field(
        default=None, description="ensemble: how the members' outputs combine"
    )
    uncertainty: UncertaintyPublic | None = Field(
        default=None,
        description="checkpoint_average, ensemble: the spread of the metric (the request's, "
        "else the dataset's) over the checkpoints, when each declares it; values declared "
        "'models' are shown in plans to admin keys only, and in the release",
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
    model_name: str | None = Field(
        default=None,
        max_length=200,
        description="ignored: a plan's weights may be sent as they are",
    )
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
