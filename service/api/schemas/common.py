"""Field types and the base of every request body."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

#: Printable names: no control characters and no path separators.
Name = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f/\\]+$"
    ),
]
#: A model's name: a Name without '@', which starts a version or an alias
#: (``DATASET/NAME@VERSION``, ``NAME@champion``).
ModelName = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f/\\@]+$"
    ),
]
DATASET_REF = "the dataset's id or its name"
MODEL_REF = (
    "a model's id, NAME[@VERSION|@ALIAS] in the request's dataset (default @latest), or "
    "DATASET/NAME[@VERSION|@ALIAS]"
)
#: A model named by its id or by name (``MODEL_REF``).
ModelRef = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=r"^[^\x00]+$")]
#: Free text stored in the database: no NUL characters (Postgres text cannot hold them).
Text = Annotated[str, StringConstraints(pattern=r"^[^\x00]*$")]
#: The largest value a BIGINT column holds (2^63 - 1) and an INTEGER one (2^31 - 1).
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1
Epsilon = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A target delta: at least 1e-300, a normal float64 (below it logs and ratios of delta
#: lose all precision; no useful guarantee needs a smaller one).
Delta = Annotated[float, Field(ge=1e-300, lt=1, allow_inf_nan=False)]


class In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Problem(BaseModel):
    """RFC 9457 problem details. ``type`` is ``urn:retarget:problem:<slug>``; problems
    may carry more members than these (RFC 9457, section 3.2)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(examples=["urn:retarget:problem:infeasible-target"])
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="validation errors: [{field, message}]"
    )
    min_epsilon: float | None = Field(
        default=None,
        description="infeasible-target: the smallest epsilon reachable at the requested "
        "delta, rounded up (asking for it succeeds); null when none is finite",
    )
    job_ids: list[str] | None = Field(
        default=None, description="profiles-pending / profile-failed: the jobs concerned"
    )
    suggestions: list[str] | None = Field(
        default=None,
        description="not-found of a name: close names that exist (most alike first)",
    )
