"""What a mechanism's privacy profile costs to compute, estimated before computing it.

The RDP curve costs one closed-form or quadrature evaluation per (order,
distinct step configuration): ``len(ORDERS) * distinct_steps``. The PLD is a
probability vector on a grid of spacing ``discretization`` whose support is
the range of the privacy loss, truncated at a tail mass of about 1e-15; its
self-composition multiplies FFTs of that size. So the PLD's cost is set by
how wide the composed privacy loss is.

Width estimate (an estimate, not a privacy claim: it only decides whether a
PLD is built). One Gaussian step with noise multiplier sigma has privacy loss
L(x) = (2 x - 1) / (2 sigma^2) with x within z sigma of its mean (z = 9 for
dp_accounting's truncation), a width of at most 2 z / sigma + 1 / sigma^2; Poisson
subsampling only narrows it. A composition of T steps is at most T times as
wide, and its loss exceeds e with probability at most
exp((alpha - 1)(D_alpha - e)) for every order alpha (Chernoff), so outside the
truncated tails it lies within +-E where E is the RDP epsilon at delta 1e-15
(Mironov 2017, Prop. 3, with delta as the tail mass). Width <= min(T w_1, 2 E),
grid points = width / discretization.

Pure arithmetic: nothing here computes a profile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from service.accounting.conversions import DEFAULT_DISCRETIZATION, ORDERS
from service.accounting.mechanisms import DPSGD, DPEvent, EpsilonDelta, Mechanism, RDPCurve
from service.accounting.mechanisms.dp_accounting_events import supported, unsupported_reason
from service.accounting.mechanisms.dp_event import GaussianNode, LaplaceNode
from service.accounting.mechanisms.splitting import (
    LAPLACE_POINTS,
    SHARED_BINS,
    ModelSplitting,
)

#: Tail mass below which dp_accounting truncates a PLD (and the Chernoff level used).
TAIL_MASS = 1e-15
#: Standard normal quantile past which dp_accounting truncates a Gaussian step (measured: 8.3
#: falls short for an unsubsampled Gaussian, 9.0 covers it).
TAIL_Z = 9.0
#: Largest epsilon whose e^epsilon a PLD may build in float64 (e^709.8 overflows).
EXP_LIMIT = 700.0
#: Bytes held per grid point while composing (complex FFT buffers and copies).
BYTES_PER_POINT = 64

#: Most separate compositions a DpEvent's PLD may take (each a convolution of grids up to
#: the point limit): as many as the groups a dp_sgd PLD composes.
MAX_PLD_COMPOSITIONS = 64

#: Most grid points a dp_sgd PLD transforms in all (``pld.fourier``: one FFT of the composed
#: grid per distinct step or group, and about as many points of step PMFs): past it the
#: distinct steps are grouped (``grouping.groups_within``) so that the work stays bounded.
MAX_PLD_WORK = 2.2e8

#: Defaults of the limits (settings ``RETARGET_PROFILE_MAX_PLD_POINTS`` and
#: ``RETARGET_PROFILE_MAX_RDP_EVALUATIONS``).
DEFAULT_MAX_PLD_POINTS = 8_000_000
DEFAULT_MAX_RDP_EVALUATIONS = 20_000_000


@dataclass(frozen=True)
class ProfileCost:
    """The estimated size of a profile's computation."""

    rdp_evaluations: int
    pld_points: float  # grid points of the composed PLD (inf: not computable)
    compositions: int  # steps composed

    @property
    def pld_bytes(self) -> float:
        return self.pld_points * BYTES_PER_POINT


@dataclass(frozen=True)
class CostLimits:
    max_pld_points: float = DEFAULT_MAX_PLD_POINTS
    max_rdp_evaluations: int = DEFAULT_MAX_RDP_EVALUATIONS

    def __post_init__(self) -> None:
        if not self.max_pld_points > 0 or self.max_rdp_evaluations < 1:
            raise ValueError(
                f"limits must be positive, got {self.max_pld_points}, {self.max_rdp_evaluations}"
            )


def gaussian_step_width(sigma: float) -> float:
    """Width of one Gaussian step's privacy loss within TAIL_Z standard deviations."""
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    return 2.0 * TAIL_Z / sigma + 1.0 / sigma**2


def tail_epsilon(orders: ArrayLike, rdp: ArrayLike) -> float:
    """E with P[L > E] <= TAIL_MASS: min_alpha D_alpha + log(1 / TAIL_MASS) / (alpha - 1)."""
    a = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        values = r + math.log(1.0 / TAIL_MASS) / (a - 1.0)
    values = values[np.isfinite(values)]
    return float(values.min()) if values.size else math.inf


def gaussian_pld_points(
    groups: Iterable[tuple[float, float, int]],
    orders: ArrayLike,
    rdp: ArrayLike,
    discretization: float,
) -> float:
    """Estimated grid points of the composed PLD of (q, sigma, count) groups.

    ``rdp`` is the composition's RDP curve at ``orders`` (an upper bound, so the
    Chernoff width it gives is an upper estimate too).
    """
    if not discretization > 0:
        raise ValueError(f"discretization must be positive, got {discretization}")
    widths: list[tuple[float, int]] = []
    for q, sigma, count in groups:
        if count < 1 or q <= 0:
            continue
        if q >= 1.0:  # composed in closed form: one Gaussian with sigma / sqrt(count)
            widths.append((gaussian_step_width(sigma / math.sqrt(count)), 1))
        else:
            widths.append((gaussian_step_width(sigma), count))
    return _points(widths, orders, rdp, discretization)


def _points(
    widths: list[tuple[float, int]], orders: ArrayLike, rdp: ArrayLike, discretization: float
) -> float:
    """Grid points of a composition of steps of loss widths ``w`` (each ``c`` times):
    at most the sum of the widths, and within the Chernoff tails of the RDP curve."""
    if not widths:
        return 1.0
    linear = sum(w * c for w, c in widths)
    single = max(w for w, _ in widths)
    width = max(single, min(linear, 2.0 * tail_epsilon(orders, rdp)))
    return width / discretization


def dp_event_pld_points(
    mechanism: DPEvent, orders: ArrayLike, rdp: ArrayLike, discretization: float
) -> float:
    """Estimated grid points of a DpEvent tree's composed PLD.

    A Gaussian leaf's loss width is that of ``gaussian_pld_points`` (unsampled ones
    composed in closed form, as dp_accounting does); a Laplace leaf with noise
    multiplier b has privacy loss within +-1 / b per step. Pass an infinite ``rdp``
    when no RDP curve is known: the sum of the widths bounds the width then.
    """
    if not discretization > 0:
        raise ValueError(f"discretization must be positive, got {discretization}")
    widths: list[tuple[float, int]] = []
    for leaf in mechanism.leaves():
        if isinstance(leaf.node, GaussianNode):
            sigma = leaf.node.noise_multiplier
            if leaf.sampling == "none":
                widths.append((gaussian_step_width(sigma / math.sqrt(leaf.count)), 1))
            else:
                widths.append((gaussian_step_width(sigma), leaf.count))
        elif isinstance(leaf.node, LaplaceNode):
            widths.append((2.0 / leaf.node.noise_multiplier, leaf.count))
    return _points(widths, orders, rdp, discretization)


def pld_groups_allowed(points: float, floor: int) -> int:
    """How many distinct steps or groups a PLD on ``points`` grid points may compose
    within MAX_PLD_WORK (never fewer than ``floor``)."""
    return max(floor, int(MAX_PLD_WORK // max(points, 1.0)))


def exceeds(cost: ProfileCost, limits: CostLimits) -> list[str]:
    """Which limits ``cost`` breaks, each as a sentence (empty: within limits)."""
    out = []
    if cost.rdp_evaluations > limits.max_rdp_evaluations:
        out.append(
            f"the RDP curve needs {cost.rdp_evaluations} evaluations, over the limit of "
            f"{limits.max_rdp_evaluations}"
        )
    if cost.pld_points > limits.max_pld_points:
        out.append(
            f"the PLD needs about {cost.pld_points:.3g} grid points "
            f"({cost.pld_bytes / 2**30:.3g} GiB) over {cost.compositions} compositions, "
            f"over the limit of {limits.max_pld_points:.3g} points"
        )
    return out


def refusal(mechanism: Mechanism, limits: CostLimits) -> str | None:
    """Why no sound profile of ``mechanism`` can be computed within ``limits`` (None: one can).

    A PLD over the limits is no reason (the profile falls back to RDP); a
    mechanism with neither a computable PLD nor an RDP curve within the limits is.
    """
    if isinstance(mechanism, EpsilonDelta) and mechanism.delta > 0:
        if mechanism.epsilon > EXP_LIMIT:
            return (
                f"epsilon {mechanism.epsilon} with delta > 0 is past e^{EXP_LIMIT:g}: no PLD "
                "can be built and no RDP curve exists; it guarantees nothing usable, "
                "register the model as non_private"
            )
        return None
    if isinstance(mechanism, DPEvent):
        return _dp_event_refusal(mechanism, limits)
    if isinstance(mechanism, ModelSplitting):
        over = exceeds(model_splitting_cost(mechanism), limits)
        return over[0] if over else None
    distinct = 1
    if isinstance(mechanism, DPSGD):
        segments = mechanism.segments()
        distinct = len({(s.sampling_rate, s.effective_noise_multiplier) for s in segments})
    elif isinstance(mechanism, RDPCurve):
        distinct = 0
    over = exceeds(ProfileCost(ORDERS.shape[0] * distinct, 0.0, 0), limits)
    return over[0] if over else None


def model_splitting_cost(mechanism: ModelSplitting) -> ProfileCost:
    """The RDP curve of model splitting: a binomial sum of up to 256 terms per order (about
    100 integer orders), and where the reverse direction is computed by quadrature
    (Poisson sampling, one part per example), one log-sum-exp over the shared part's grid
    per point of the Laplace grid. Neither grows with the number of steps or parts."""
    evaluations = 100 * 256
    if mechanism.sampling_rate < 1 and mechanism.parts_per_example == 1 and mechanism.parts > 1:
        bins = SHARED_BINS + 1 if mechanism.shared_clipping_norm > 0 else 1
        evaluations += LAPLACE_POINTS * bins
    return ProfileCost(evaluations, 0.0, mechanism.steps)


def _dp_event_refusal(mechanism: DPEvent, limits: CostLimits) -> str | None:
    """A DpEvent tree is refused when neither accountant composes it, and when only the
    PLD does and its grid is over the limits (there is no RDP curve to fall back on)."""
    if mechanism.non_private or mechanism.as_dp_sgd() is not None:
        return None
    can = supported(mechanism)
    if not can["rdp"] and not can["pld"]:
        return unsupported_reason(mechanism)
    leaves = sum(1 for _ in mechanism.leaves())
    if can["rdp"]:
        over = exceeds(ProfileCost(ORDERS.shape[0] * leaves, 0.0, 0), limits)
        return over[0] if over else None
    if leaves > MAX_PLD_COMPOSITIONS:
        return (
            f"the tree's PLD would compose {leaves} events, over the limit of "
            f"{MAX_PLD_COMPOSITIONS}, and no RDP curve exists for this tree"
        )
    points = dp_event_pld_points(
        mechanism, ORDERS, np.full(ORDERS.shape, np.inf), DEFAULT_DISCRETIZATION
    )
    over = exceeds(ProfileCost(0, points, leaves), limits)
    return f"{over[0]}, and no RDP curve exists for this tree" if over else None
