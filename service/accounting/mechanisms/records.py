"""What every mechanism record shares: frozen, strict, validated fields."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
SamplingRate = Annotated[float, Field(gt=0, le=1)]
Steps = Annotated[int, Field(ge=1, le=10**9)]

#: Optimizers the registry knows. Linear combination accounting (Theorem 6.2 of
#: "Differentially Private Model Merging" (arXiv:2604.20985)) covers plain SGD only; the others
# still admit
#: random selection and the joint-release bound.
Optimizer = Literal["sgd", "sgd_momentum", "adam", "adamw", "adagrad", "rmsprop", "other"]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)
