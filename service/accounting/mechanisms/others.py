"""The other mechanism records: Gaussian queries, balanced iteration subsampling,
a trainer's RDP curve, a bare (epsilon, delta) guarantee and no guarantee."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from service.accounting.mechanisms.records import (
    NonNegativeFloat,
    Optimizer,
    PositiveFloat,
    Record,
    Steps,
)


class Gaussian(Record):
    """``count`` adaptive compositions of a Gaussian mechanism.

    Noise std = ``noise_multiplier`` * ``sensitivity``; give one of
    ``noise_std`` or ``noise_multiplier``.
    """

    type: Literal["gaussian"]
    sensitivity: PositiveFloat
    noise_std: PositiveFloat | None = None
    noise_multiplier: PositiveFloat | None = None
    count: Steps = 1
    #: Whether later queries may depend on earlier answers (the default, and the safe
    #: reading). ``False``: the ``count`` queries were fixed in advance (the mean
    #: estimation of section 4.1), which linear combination accounts exactly.
    adaptive: bool = True
    #: The model is the running sum of its noisy answers (each answer enters its
    #: weights additively, as a gradient step does): linear combination then uses the
    #: DP-SGD rule with q = 1. Meaningful only with ``adaptive``.
    additive: bool = False

    @model_validator(mode="after")
    def _one_noise(self) -> Gaussian:
        if (self.noise_std is None) == (self.noise_multiplier is None):
            raise ValueError("give exactly one of noise_std or noise_multiplier")
        if self.additive and not self.adaptive:
            raise ValueError("additive applies to adaptive queries only (adaptive: true)")
        return self

    @property
    def sigma(self) -> float:
        """Noise std over sensitivity."""
        if self.noise_multiplier is not None:
            return self.noise_multiplier
        assert self.noise_std is not None
        return self.noise_std / self.sensitivity

    @property
    def std(self) -> float:
        if self.noise_std is not None:
            return self.noise_std
        assert self.noise_multiplier is not None
        return self.noise_multiplier * self.sensitivity

    def canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "sensitivity": self.sensitivity,
            "noise_std": self.std,
            "count": self.count,
        }
        # Defaults are left out so records written before these fields hash as before.
        if not self.adaptive:
            out["adaptive"] = False
        if self.additive:
            out["additive"] = True
        return out


class BalancedIterationSubsampling(Record):
    """Each example takes part in exactly ``participations`` of ``iterations`` steps.

    Source: "Leveraging Randomness in Model and Data Partitioning for Privacy Amplification"
    (Dong, Chen, Ozgur). ``epochs`` independent
    repetitions of the scheme are composed.
    """

    type: Literal["balanced_iteration_subsampling"]
    iterations: Steps
    participations: Steps
    noise_multiplier: PositiveFloat
    clipping_norm: PositiveFloat
    epochs: Steps = 1
    learning_rate: PositiveFloat | None = None
    optimizer: Optimizer = "sgd"

    @model_validator(mode="after")
    def _k_le_t(self) -> BalancedIterationSubsampling:
        if self.participations > self.iterations:
            raise ValueError(
                f"participations ({self.participations}) must be <= iterations ({self.iterations})"
            )
        return self

    def canonical(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class RDPCurve(Record):
    """Renyi DP guarantees (order, epsilon) given by the trainer; mechanism unknown."""

    type: Literal["rdp_curve"]
    orders: list[Annotated[float, Field(gt=1)]] = Field(min_length=1, max_length=10_000)
    epsilons: list[NonNegativeFloat] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _pairs(self) -> RDPCurve:
        if len(self.orders) != len(self.epsilons):
            raise ValueError(
                f"orders and epsilons must have equal lengths, got {len(self.orders)} "
                f"and {len(self.epsilons)}"
            )
        seen: dict[float, float] = {}
        for a, e in zip(self.orders, self.epsilons, strict=True):
            if a in seen and seen[a] != e:
                raise ValueError(f"order {a} is given twice with different epsilons")
            seen[a] = e
        return self

    def points(self) -> list[tuple[float, float]]:
        return sorted(set(zip(self.orders, self.epsilons, strict=True)))

    def canonical(self) -> dict[str, Any]:
        pts = self.points()
        return {
            "type": self.type,
            "orders": [a for a, _ in pts],
            "epsilons": [e for _, e in pts],
        }


class EpsilonDelta(Record):
    """Only an (epsilon, delta)-DP guarantee is known."""

    type: Literal["epsilon_delta"]
    epsilon: NonNegativeFloat
    delta: Annotated[float, Field(ge=0, lt=1)]

    def canonical(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class NonPrivate(Record):
    """No privacy guarantee: delta(epsilon) = 1 for every epsilon."""

    type: Literal["non_private"]

    def canonical(self) -> dict[str, Any]:
        return {"type": self.type}
