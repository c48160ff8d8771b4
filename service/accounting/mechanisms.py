"""Mechanism metadata: what trained a model, as frozen, validated records.

Every registered model carries one mechanism, a discriminated union on
``type``. The persisted kinds are append-only: the meaning of a stored
``type`` never changes; a new meaning gets a new ``type``.

Each mechanism has a *canonical form* (``canonical_mechanism``): one
spelling for every way of writing the same mechanism (a constant DP-SGD run,
a one-segment schedule and a per-step array of equal values are the same
run), serialised as sorted, compact JSON and hashed with sha256
(``mechanism_hash``). Equal mechanisms therefore share one privacy profile.

Pure pydantic: nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
SamplingRate = Annotated[float, Field(gt=0, le=1)]
Steps = Annotated[int, Field(ge=1, le=10**9)]

#: Optimizers the registry knows. Linear combination accounting (Theorem 6.2 of
#: papers/dp-model-merging.txt) covers plain SGD only; the others still admit
#: random selection and the joint-release bound.
Optimizer = Literal["sgd", "sgd_momentum", "adam", "adamw", "adagrad", "rmsprop", "other"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class ParamGroup(_Record):
    """One parameter group clipped to its own norm and noised with its own multiplier."""

    name: str | None = Field(default=None, max_length=200)
    clipping_norm: PositiveFloat
    noise_multiplier: PositiveFloat


class Segment(_Record):
    """``steps`` consecutive DP-SGD steps with the same parameters.

    Either one ``clipping_norm`` and ``noise_multiplier`` for the whole
    gradient, or ``groups``: per-group clipping norms C_g with noise std
    sigma_g * C_g in each group.
    """

    steps: Steps
    sampling_rate: SamplingRate
    noise_multiplier: PositiveFloat | None = None
    clipping_norm: PositiveFloat | None = None
    groups: list[ParamGroup] | None = Field(default=None, min_length=1, max_length=4096)
    learning_rate: PositiveFloat | None = None

    @model_validator(mode="after")
    def _one_noise_spec(self) -> Segment:
        flat = self.noise_multiplier is not None or self.clipping_norm is not None
        if self.groups is not None and flat:
            raise ValueError("give either groups or noise_multiplier and clipping_norm, not both")
        if self.groups is None and (self.noise_multiplier is None or self.clipping_norm is None):
            raise ValueError(
                "noise_multiplier and clipping_norm are required (or groups for per-group clipping)"
            )
        return self

    @property
    def effective_noise_multiplier(self) -> float:
        """Noise multiplier of the whole step, after per-group clipping.

        Rescaling group g by 1 / (sigma_g C_g) gives unit noise in every group and
        sensitivity 1 / sigma_g there, so the whole step is a Gaussian mechanism with
        sensitivity sqrt(sum_g 1 / sigma_g^2) and unit noise, that is noise multiplier
        1 / sqrt(sum_g sigma_g^-2) (= sigma / sqrt(G) when all G groups share sigma).
        """
        if self.groups is None:
            assert self.noise_multiplier is not None
            return self.noise_multiplier
        return 1.0 / math.sqrt(sum(g.noise_multiplier**-2 for g in self.groups))

    @property
    def total_clipping_norm(self) -> float:
        """l2 sensitivity of one example's clipped gradient, all groups together."""
        if self.groups is None:
            assert self.clipping_norm is not None
            return self.clipping_norm
        return math.sqrt(sum(g.clipping_norm**2 for g in self.groups))

    def same_step(self, other: Segment) -> bool:
        return self.model_dump(exclude={"steps"}) == other.model_dump(exclude={"steps"})


class PerStep(_Record):
    """Per-step values (time-varying noise): lists of equal length T, or scalars."""

    sampling_rate: list[SamplingRate] | SamplingRate
    noise_multiplier: list[PositiveFloat] | PositiveFloat
    clipping_norm: list[PositiveFloat] | PositiveFloat
    learning_rate: list[PositiveFloat] | PositiveFloat | None = None

    @model_validator(mode="after")
    def _equal_lengths(self) -> PerStep:
        lengths = {
            name: len(value) for name, value in self.__dict__.items() if isinstance(value, list)
        }
        if not lengths:
            raise ValueError("per_step needs at least one list of per-step values")
        if len(set(lengths.values())) != 1:
            raise ValueError(f"per_step lists must have equal lengths, got {lengths}")
        if next(iter(lengths.values())) < 1:
            raise ValueError("per_step lists must not be empty")
        return self

    def segments(self) -> list[Segment]:
        length = next(len(v) for v in self.__dict__.values() if isinstance(v, list))

        def column(value: Any) -> list[Any]:
            return value if isinstance(value, list) else [value] * length

        rows = list(
            zip(
                column(self.sampling_rate),
                column(self.noise_multiplier),
                column(self.clipping_norm),
                column(self.learning_rate),
                strict=True,
            )
        )
        out: list[Segment] = []
        start = 0
        for i in range(1, length + 1):
            if i == length or rows[i] != rows[start]:
                q, sigma, clip, lr = rows[start]
                out.append(
                    Segment(
                        steps=i - start,
                        sampling_rate=q,
                        noise_multiplier=sigma,
                        clipping_norm=clip,
                        learning_rate=lr,
                    )
                )
                start = i
        return out


_CONSTANT_FIELDS = ("sampling_rate", "noise_multiplier", "clipping_norm", "steps", "groups")


class DPSGD(_Record):
    """DP-SGD (Abadi et al. 2016) with constant parameters or a schedule.

    Three spellings of one record: constant fields (``sampling_rate``,
    ``noise_multiplier``, ``clipping_norm``, ``steps``, ``learning_rate``),
    ``schedule`` (segments of equal steps) or ``per_step`` (arrays).
    ``sampling: "shuffle"`` (fixed-size batches of a shuffled dataset) has no
    tight accounting; it is accepted only with ``accept_poisson_approximation``
    and every profile computed for it is marked heuristic.
    """

    type: Literal["dp_sgd"]
    sampling: Literal["poisson", "shuffle"] = "poisson"
    accept_poisson_approximation: bool = False
    optimizer: Optimizer = "sgd"
    sampling_rate: SamplingRate | None = None
    noise_multiplier: PositiveFloat | None = None
    clipping_norm: PositiveFloat | None = None
    groups: list[ParamGroup] | None = Field(default=None, min_length=1, max_length=4096)
    steps: Steps | None = None
    learning_rate: PositiveFloat | None = None
    schedule: list[Segment] | None = Field(default=None, min_length=1, max_length=100_000)
    per_step: PerStep | None = None
    #: Momentum SGD (``optimizer: "sgd_momentum"``), PyTorch's convention:
    #: v_t = beta v_(t-1) + (1 - dampening) g_t; the step is lr v_t, or lr (g_t + beta v_t)
    #: with ``nesterov``. Linear combination needs these to weigh the last gradient.
    momentum: Annotated[float, Field(ge=0, lt=1)] | None = None
    dampening: Annotated[float, Field(ge=0, lt=1)] = 0.0
    nesterov: bool = False

    @model_validator(mode="after")
    def _one_spelling(self) -> DPSGD:
        constant = [f for f in _CONSTANT_FIELDS if getattr(self, f) is not None]
        spellings = sum([bool(constant), self.schedule is not None, self.per_step is not None])
        if spellings != 1:
            raise ValueError(
                "give exactly one of: constant fields (sampling_rate, noise_multiplier, "
                "clipping_norm, steps), schedule, or per_step"
            )
        if self.schedule is None and self.per_step is None:
            self.segments()  # validates the constant fields together
        elif self.learning_rate is not None:
            raise ValueError("with schedule or per_step, give learning_rate per segment or step")
        if self.sampling == "shuffle" and not self.accept_poisson_approximation:
            raise ValueError(
                "sampling 'shuffle' has no tight privacy accounting; set "
                "accept_poisson_approximation: true to account it as Poisson sampling "
                "(a heuristic, marked as such in every profile)"
            )
        if self.accept_poisson_approximation and self.sampling == "poisson":
            raise ValueError("accept_poisson_approximation applies only to sampling 'shuffle'")
        momentum_fields = self.momentum is not None or self.dampening or self.nesterov
        if momentum_fields and self.optimizer != "sgd_momentum":
            raise ValueError("momentum, dampening and nesterov apply to optimizer 'sgd_momentum'")
        if self.nesterov and self.dampening:
            raise ValueError("nesterov momentum requires dampening 0 (as in PyTorch)")
        return self

    def segments(self) -> list[Segment]:
        """The run as maximal segments of identical consecutive steps."""
        if self.schedule is not None:
            raw = list(self.schedule)
        elif self.per_step is not None:
            raw = self.per_step.segments()
        else:
            if self.sampling_rate is None or self.steps is None:
                raise ValueError("sampling_rate and steps are required")
            raw = [
                Segment(
                    steps=self.steps,
                    sampling_rate=self.sampling_rate,
                    noise_multiplier=self.noise_multiplier,
                    clipping_norm=self.clipping_norm,
                    groups=self.groups,
                    learning_rate=self.learning_rate,
                )
            ]
        merged: list[Segment] = []
        for seg in raw:
            if merged and merged[-1].same_step(seg):
                merged[-1] = merged[-1].model_copy(update={"steps": merged[-1].steps + seg.steps})
            else:
                merged.append(seg)
        return merged

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.segments())

    @property
    def heuristic(self) -> bool:
        return self.sampling == "shuffle"

    def canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "sampling": self.sampling,
            "optimizer": self.optimizer,
            "schedule": [seg.model_dump(mode="json", exclude_none=True) for seg in self.segments()],
        }
        if self.accept_poisson_approximation:
            out["accept_poisson_approximation"] = True
        if self.momentum is not None:
            out["momentum"] = self.momentum
        if self.dampening:
            out["dampening"] = self.dampening
        if self.nesterov:
            out["nesterov"] = True
        return out


class Gaussian(_Record):
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


class BalancedIterationSubsampling(_Record):
    """Each example takes part in exactly ``participations`` of ``iterations`` steps.

    Source: papers/balanced-iteration-subsampling.txt. ``epochs`` independent
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


class RDPCurve(_Record):
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


class EpsilonDelta(_Record):
    """Only an (epsilon, delta)-DP guarantee is known."""

    type: Literal["epsilon_delta"]
    epsilon: NonNegativeFloat
    delta: Annotated[float, Field(ge=0, lt=1)]

    def canonical(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class NonPrivate(_Record):
    """No privacy guarantee: delta(epsilon) = 1 for every epsilon."""

    type: Literal["non_private"]

    def canonical(self) -> dict[str, Any]:
        return {"type": self.type}


Mechanism = Annotated[
    Gaussian | DPSGD | BalancedIterationSubsampling | RDPCurve | EpsilonDelta | NonPrivate,
    Field(discriminator="type"),
]

MECHANISM_TYPES: tuple[str, ...] = (
    "gaussian",
    "dp_sgd",
    "balanced_iteration_subsampling",
    "rdp_curve",
    "epsilon_delta",
    "non_private",
)

_ADAPTER: TypeAdapter[Any] = TypeAdapter(Mechanism)


def parse_mechanism(data: Any) -> Mechanism:
    """Validate a mechanism given as a dict (parsed JSON).

    Raises pydantic's ``ValidationError``; each error names the field.
    """
    return _ADAPTER.validate_python(data)


def canonical_mechanism(mechanism: Mechanism) -> dict[str, Any]:
    """The one spelling of ``mechanism`` that is stored and hashed."""
    return mechanism.canonical()


def canonical_json(data: Any) -> str:
    """Sorted, compact JSON; NaN and infinities are refused."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def mechanism_hash(mechanism: Mechanism) -> str:
    """sha256 of the canonical JSON: equal mechanisms hash equal however written."""
    return hashlib.sha256(canonical_json(canonical_mechanism(mechanism)).encode()).hexdigest()


def error_messages(exc: ValidationError, prefix: str = "") -> list[dict[str, Any]]:
    """A pydantic error as ``[{field, message}]`` with dotted field paths.

    The union's tags (``dp_sgd`` in ``dp_sgd.steps``) are dropped from the path and
    ``prefix`` put in front: ``mechanism.steps``.
    """
    out = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        loc = [str(p) for p in err["loc"] if p not in MECHANISM_TYPES]
        field = ".".join([prefix, *loc] if prefix else loc) or prefix
        out.append({"field": field, "message": err["msg"]})
    return out


__all__ = [
    "DPSGD",
    "MECHANISM_TYPES",
    "BalancedIterationSubsampling",
    "EpsilonDelta",
    "Gaussian",
    "Mechanism",
    "NonPrivate",
    "ParamGroup",
    "PerStep",
    "RDPCurve",
    "Segment",
    "canonical_json",
    "canonical_mechanism",
    "error_messages",
    "mechanism_hash",
    "parse_mechanism",
]
