"""DP-SGD records: constant fields, a schedule of segments, or per-step arrays."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from service.accounting.mechanisms.records import (
    Optimizer,
    PositiveFloat,
    Record,
    SamplingRate,
    Steps,
)


class ParamGroup(Record):
    """One parameter group clipped to its own norm and noised with its own multiplier."""

    name: str | None = Field(default=None, max_length=200)
    clipping_norm: PositiveFloat
    noise_multiplier: PositiveFloat


class Segment(Record):
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


class PerStep(Record):
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


#: Most segments a run may have in its canonical form (``schedule``'s limit): a
#: ``per_step`` spelling must stay within it once equal consecutive steps are merged,
#: so that every accepted record parses again from its canonical form.
MAX_SEGMENTS = 100_000

_CONSTANT_FIELDS = ("sampling_rate", "noise_multiplier", "clipping_norm", "steps", "groups")


class DPSGD(Record):
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
    schedule: list[Segment] | None = Field(default=None, min_length=1, max_length=MAX_SEGMENTS)
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
        elif self.per_step is not None and (n := len(self.segments())) > MAX_SEGMENTS:
            raise ValueError(
                f"per_step describes {n} segments of consecutive equal steps, over the "
                f"limit of {MAX_SEGMENTS} (the schedule's)"
            )
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
