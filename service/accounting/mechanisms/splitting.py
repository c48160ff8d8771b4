"""Model splitting and dropout as a training mechanism (``type: "model_splitting"``).

Source: "Leveraging Randomness in Model and Data Partitioning for Privacy Amplification"
(Dong, Chen, Ozgur, arXiv 2503.03043), Theorems 3.4-3.6 and Corollary 3.7. At each of
``steps`` iterations the split part of the model is cut into ``parts`` disjoint parts,
and each sampled example's gradient reaches ``parts_per_example`` of them, chosen
uniformly and independently of the other examples; the gradient of every part reached is
clipped to ``clipping_norm``. An optional shared part (never split) is clipped to
``shared_clipping_norm`` and reaches every sampled example. Examples are Poisson sampled
at ``sampling_rate`` (1: every example at every step), one draw for both parts. The sum
gets Gaussian noise of std ``noise_multiplier * clipping_norm`` on every coordinate.

``scheme: "dropout"`` is Corollary 3.7: dropout layers that drop each unit with
probability ``dropout_rate`` = 0.5 make the weights around them a split part with two
parts, one reached (any other rate is refused: the corollary needs p = 0.5).

Pure pydantic: nothing here does I/O or accounting.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from service.accounting.mechanisms.records import (
    Optimizer,
    PositiveFloat,
    Record,
    SamplingRate,
    Steps,
)

#: Most parts of a split (the accounting's cost does not grow with it; a bound keeps the
#: forward moments' series short).
MAX_PARTS = 100_000
#: Noise multipliers accepted: the certified reverse quadrature is built for this range.
MIN_NOISE, MAX_NOISE = 0.1, 1000.0
#: Largest shared clipping norm, relative to the split part's.
MAX_SHARED_RATIO = 1000.0
#: Most grid points of the shared part's law in the reverse quadrature, and about how many
#: points its Laplace grid has (both fixed: the profile's cost does not grow with the run).
SHARED_BINS = 4000
LAPLACE_POINTS = 2000


class ModelSplitting(Record):
    """Training where each example's gradient reaches k of d disjoint parts of the model
    (the module docstring)."""

    type: Literal["model_splitting"]
    scheme: Literal["disjoint", "dropout"] = "disjoint"
    parts: Annotated[int, Field(ge=1, le=MAX_PARTS)]
    parts_per_example: Annotated[int, Field(ge=1, le=MAX_PARTS)] = 1
    dropout_rate: Annotated[float, Field(gt=0, lt=1)] | None = None
    noise_multiplier: Annotated[float, Field(ge=MIN_NOISE, le=MAX_NOISE)]
    clipping_norm: Annotated[float, Field(gt=0, le=1e6)]
    shared_clipping_norm: Annotated[float, Field(ge=0, le=1e9)] = 0.0
    sampling_rate: SamplingRate = 1.0
    steps: Steps
    learning_rate: PositiveFloat | None = None
    optimizer: Optimizer = "sgd"

    @model_validator(mode="after")
    def _covered(self) -> ModelSplitting:
        if self.parts_per_example > self.parts:
            raise ValueError(
                f"parts_per_example ({self.parts_per_example}) must be <= parts ({self.parts})"
            )
        if self.shared_clipping_norm > MAX_SHARED_RATIO * self.clipping_norm:
            raise ValueError(
                f"shared_clipping_norm ({self.shared_clipping_norm}) must be at most "
                f"{MAX_SHARED_RATIO:g} times clipping_norm ({self.clipping_norm})"
            )
        if self.scheme == "dropout":
            if self.dropout_rate != 0.5:
                raise ValueError(
                    f"dropout_rate must be 0.5 for scheme 'dropout', got {self.dropout_rate}: "
                    "the amplification (Corollary 3.7) holds for p = 0.5 only; register "
                    "other rates as dp_sgd"
                )
            if self.parts != 2 or self.parts_per_example != 1:
                raise ValueError(
                    "scheme 'dropout' is two parts, one reached: parts must be 2 and "
                    f"parts_per_example 1, got {self.parts} and {self.parts_per_example}"
                )
        elif self.dropout_rate is not None:
            raise ValueError("dropout_rate applies to scheme 'dropout' only")
        return self

    @property
    def shared(self) -> float:
        """The shared part's clipping norm in units of the split part's."""
        return self.shared_clipping_norm / self.clipping_norm

    def canonical(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
