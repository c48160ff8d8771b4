"""Privacy loss distributions: dp_accounting's pessimistic PMFs, kept per direction.

Random selection (Theorem 5.2 of "Differentially Private Model Merging" (arXiv:2604.20985)) needs
the
hockey-stick curves of each model in each direction separately, so a profile
keeps the two PMFs (``remove``: H(P||Q), ``add``: H(Q||P)) rather than their max.
All PMFs are dp_accounting's pessimistic estimates: every delta they give is
an upper bound on the true one.
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pldlib
from numpy.typing import NDArray

from service.accounting.conversions import DEFAULT_DISCRETIZATION, check_delta, check_epsilon
from service.accounting.pld.gaussian import gaussian_step_pld

#: Total mass cut from each end of a stored PMF. The high tail goes to the
#: infinite loss and the low tail onto the first kept loss: both only raise
#: every delta, by at most this much.
_TAIL_MASS = 1e-15


def _dense(pmf: pld_pmf.PLDPmf) -> pld_pmf.DensePLDPmf:
    if isinstance(pmf, pld_pmf.DensePLDPmf):
        return pmf
    return pmf.to_dense_pmf()


def _trim(pmf: pld_pmf.DensePLDPmf) -> pld_pmf.DensePLDPmf:
    """Drop negligible tails without ever lowering a delta.

    delta(eps) = sum_l p_l (1 - e^(eps - l))_+ grows with every loss l and every
    mass p_l, so moving low-tail mass up to a larger loss, moving high-tail mass
    to the infinite loss, and rounding masses up (float32, rounded toward +inf,
    to store them compactly) all keep the PMF pessimistic.
    """
    # FFT compositions leave masses of about -1e-18 where the truth is ~0: raised to 0
    probs = np.maximum(np.asarray(pmf._probs, dtype=np.float64), 0.0)
    if probs.size == 0:
        return pmf
    low = np.cumsum(probs)
    high = np.cumsum(probs[::-1])[::-1]
    lo = int(np.searchsorted(low, _TAIL_MASS, side="right"))
    hi = int(probs.size - 1 - np.searchsorted(high[::-1], _TAIL_MASS, side="right"))
    if lo > hi:
        lo, hi = 0, probs.size - 1
    trimmed = probs[lo : hi + 1].copy()
    trimmed[0] += probs[:lo].sum()
    infinity = pmf._infinity_mass + float(probs[hi + 1 :].sum())
    return pld_pmf.DensePLDPmf(
        pmf._discretization,
        pmf._lower_loss + lo,
        _round_up_f32(trimmed),
        infinity,
        pmf._pessimistic_estimate,
    )


def _round_up_f32(values: np.ndarray) -> np.ndarray:
    """Values stored as float32 and never below the float64 originals."""
    single = values.astype(np.float32)
    below = single.astype(np.float64) < values
    single[below] = np.nextafter(single[below], np.float32(np.inf))
    return single.astype(np.float64)


class PmfDelta:
    """delta(eps) of a dense PMF in O(log n) per query, never below the direct sum.

    delta(eps) = sum_{l_k > eps} p_k (1 - e^(eps - l_k)) + m_inf = S1(k*) - e^eps S2(k*) + m_inf
    with suffix sums S1 = sum p_k and S2 = sum p_k e^(-l_k) from the first loss above eps.

    S2 is kept scaled, p_k e^(r - l_k), for references r = top, top - ``_SPAN``, ...
    down to the first within ``_SPAN`` of the bottom loss. A query uses the lowest r >= eps
    (the top one past the top loss, where the suffix is empty): every loss of its suffix is
    above eps, hence above r - ``_SPAN`` (or, for the lowest r, at least the bottom loss),
    so no term of it overflows. A single reference overflowed for a PMF spanning more
    than ~709 nats (and inf * e^(eps - top) = inf * 0 gave nan). Terms that underflow
    only lower S2, which raises delta.

    Rounding: each suffix sum of n terms carries a relative error below n ulps, and each
    term of S2 one of about |r| + |l_k| + 2 ulps (the rounded exponent); the margin
    2 (n + |r| + max |l| + 2) ulp (S1 + e^eps S2) covers both, so the result is an upper
    bound on the exact sum.
    """

    _SPAN = 600.0

    def __init__(self, pmf: pld_pmf.DensePLDPmf) -> None:
        # FFT compositions leave masses of about -1e-18 where the truth is ~0: raised
        # to 0 (every delta can only grow), so the suffix sums below stay >= 0
        probs = np.maximum(np.asarray(pmf._probs, dtype=np.float64), 0.0)
        self.losses = (pmf._lower_loss + np.arange(probs.shape[0])) * pmf._discretization
        self.s1 = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
        top = float(self.losses[-1]) if probs.size else 0.0
        bottom = float(self.losses[0]) if probs.size else 0.0
        count = max(1, math.ceil((top - bottom) / self._SPAN))
        # references in increasing order: top - SPAN (count - 1), ..., top - SPAN, top
        self.refs = top - self._SPAN * np.arange(count - 1, -1, -1, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = probs[None, :] * np.exp(
                np.minimum(self.refs[:, None] - self.losses[None, :], 700.0)
            )
        scaled = np.where(np.isfinite(scaled), scaled, 0.0)
        self.s2 = np.concatenate(
            [np.cumsum(scaled[:, ::-1], axis=1)[:, ::-1], np.zeros((count, 1))], axis=1
        )
        self.infinity = float(pmf._infinity_mass)
        magnitude = max(abs(top), abs(bottom))
        self.slack = (
            2.0 * (max(1, probs.shape[0]) + 2.0 * magnitude + 2.0) * np.finfo(np.float64).eps
        )

    def many(self, epsilons: NDArray) -> NDArray:
        """``self(eps)`` for every eps in ``epsilons``, vectorised, same margins."""
        eps = np.asarray(epsilons, dtype=np.float64)
        k = np.searchsorted(self.losses, eps, side="right")
        m = np.minimum(np.searchsorted(self.refs, eps, side="left"), self.refs.shape[0] - 1)
        a = self.s1[k]
        s2 = self.s2[m, k]
        with np.errstate(over="ignore", under="ignore"):
            b = np.where(s2 > 0, s2 * np.exp(np.minimum(eps - self.refs[m], 0.0)), 0.0)
        value = np.maximum(0.0, a - b) + self.slack * (a + b)
        return np.asarray(np.minimum(1.0, value + self.infinity))

    def epsilon(self, delta: float) -> float:
        """Smallest eps >= 0 with ``self(eps) <= delta``, by bisection (each query
        O(log n), where dp_accounting walks the PMF in Python): inf when the infinite
        loss alone has more than ``delta``; the returned eps was itself checked."""
        if self.infinity > delta:
            return math.inf
        if self(0.0) <= delta:
            return 0.0
        lo, hi = 0.0, max(1.0, float(self.losses[-1]) if self.losses.size else 1.0)
        while self(hi) > delta:  # past the largest loss only the infinite loss is left
            lo, hi = hi, 2.0 * hi
        while hi - lo > 1e-12 * max(1.0, hi):
            mid = 0.5 * (lo + hi)
            if self(mid) <= delta:
                hi = mid
            else:
                lo = mid
        return hi

    def __call__(self, epsilon: float) -> float:
        return float(self.many(np.array([float(epsilon)]))[0])


@dataclass(frozen=True)
class PldPair:
    """The two directions of a privacy loss distribution."""

    remove: pld_pmf.DensePLDPmf
    add: pld_pmf.DensePLDPmf

    @classmethod
    def from_pld(cls, pld: pldlib.PrivacyLossDistribution) -> PldPair:
        return cls(remove=_trim(_dense(pld._pmf_remove)), add=_trim(_dense(pld._pmf_add)))

    @classmethod
    def from_pmfs(cls, remove: pld_pmf.DensePLDPmf, add: pld_pmf.DensePLDPmf) -> PldPair:
        """A pair from pessimistic PMFs, their negligible tails trimmed (never lowering
        a delta)."""
        return cls(remove=_trim(remove), add=_trim(add))

    def to_pld(self) -> pldlib.PrivacyLossDistribution:
        return pldlib.PrivacyLossDistribution(self.remove, self.add)

    @property
    def discretization(self) -> float:
        return float(self.remove._discretization)

    def delta(self, epsilon: float) -> float:
        """max over the two directions of the hockey-stick divergence at e^epsilon."""
        check_epsilon(epsilon)
        return max(self.delta_remove(epsilon), self.delta_add(epsilon))

    def delta_remove(self, epsilon: float) -> float:
        return self._remove_delta(epsilon)

    def deltas(self, epsilons: NDArray) -> tuple[NDArray, NDArray]:
        """(remove, add) hockey-stick upper bounds at every eps in ``epsilons``."""
        return self._remove_delta.many(epsilons), self._add_delta.many(epsilons)

    def delta_add(self, epsilon: float) -> float:
        return self._add_delta(epsilon)

    @cached_property
    def _remove_delta(self) -> PmfDelta:
        return PmfDelta(self.remove)

    @cached_property
    def _add_delta(self) -> PmfDelta:
        return PmfDelta(self.add)

    def epsilon(self, delta: float) -> float:
        """Smallest epsilon (to 1e-12 relative, the feasible side) whose delta in both
        directions, as ``PmfDelta`` bounds it, is at most ``delta``."""
        check_delta(delta)
        return max(self._remove_delta.epsilon(delta), self._add_delta.epsilon(delta))

    def compose(self, other: PldPair) -> PldPair:
        """The composition; PLDs on different grids (each profile refines its own) are
        first brought to the coarser one, every loss rounded up (pessimistic)."""
        width = max(self.discretization, other.discretization)
        a, b = self.regrid(width), other.regrid(width)
        return PldPair.from_pld(a.to_pld().compose(b.to_pld()))

    def regrid(self, width: float) -> PldPair:
        """This PLD on a grid of ``width`` >= its own, each loss rounded up onto it."""
        if width == self.discretization:
            return self
        return PldPair(remove=_regrid(self.remove, width), add=_regrid(self.add, width))

    def to_json(self) -> dict[str, Any]:
        return {"remove": _pmf_json(self.remove), "add": _pmf_json(self.add)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PldPair:
        return cls(remove=_pmf_from_json(data["remove"]), add=_pmf_from_json(data["add"]))


def dense_self_compose(
    pld: pldlib.PrivacyLossDistribution, count: int
) -> pldlib.PrivacyLossDistribution:
    """``pld`` composed ``count`` times, through its dense PMFs (one FFT power each).

    dp_accounting's sparse PMFs compose one copy at a time while their size to the power
    ``count`` is small, which for a one-point PMF is a billion Python compositions (and
    for a two-point one an integer of a billion bits just to decide): dense PMFs take the
    FFT path whatever the count. The result is the same composition.
    """
    if count == 1:
        return pld
    dense = pldlib.PrivacyLossDistribution(
        pld._pmf_remove.to_dense_pmf(), pld._pmf_add.to_dense_pmf()
    )
    return dense.self_compose(count)


def _regrid(pmf: pld_pmf.DensePLDPmf, width: float) -> pld_pmf.DensePLDPmf:
    """Every loss rounded up to a multiple of ``width``: each delta can only grow, since
    delta(eps) = sum_l p_l (1 - e^(eps - l))_+ grows with every loss l."""
    probs = np.asarray(pmf._probs, dtype=np.float64)
    losses = (pmf._lower_loss + np.arange(probs.shape[0])) * pmf._discretization
    index = np.ceil(losses / width).astype(np.int64)
    # the division rounds: never let a loss land below itself
    index[index * width < losses] += 1
    lower = int(index[0]) if index.size else 0
    out = np.bincount(index - lower, weights=probs) if index.size else np.zeros(1)
    return pld_pmf.DensePLDPmf(width, lower, out, pmf._infinity_mass, pmf._pessimistic_estimate)


def _pmf_json(pmf: pld_pmf.DensePLDPmf) -> dict[str, Any]:
    probs = np.asarray(pmf._probs, dtype="<f4")
    # Byte-shuffled (all first bytes, then all second bytes, ...) compresses 2-3x better.
    shuffled = probs.view(np.uint8).reshape(-1, 4).T.copy()
    return {
        "discretization": pmf._discretization,
        "lower_loss": int(pmf._lower_loss),
        "infinity_mass": float(pmf._infinity_mass),
        "pessimistic": bool(pmf._pessimistic_estimate),
        "probs_f32_shuffled": base64.b64encode(zlib.compress(shuffled.tobytes(), 6)).decode(),
    }


def _pmf_from_json(data: dict[str, Any]) -> pld_pmf.DensePLDPmf:
    raw = np.frombuffer(zlib.decompress(base64.b64decode(data["probs_f32_shuffled"])), np.uint8)
    probs = np.maximum(raw.reshape(4, -1).T.copy().view("<f4").ravel().astype(np.float64), 0.0)
    return pld_pmf.DensePLDPmf(
        float(data["discretization"]),
        int(data["lower_loss"]),
        probs.copy(),
        float(data["infinity_mass"]),
        bool(data["pessimistic"]),
    )


def subsampled_gaussian_pld(
    groups: Iterable[tuple[float, float, int]], discretization: float = DEFAULT_DISCRETIZATION
) -> PldPair:
    """PLD of a composition of Poisson-subsampled Gaussian steps.

    ``groups`` lists (sampling rate q, noise multiplier sigma, count). Composition
    is commutative, so equal steps anywhere in a schedule form one group and are
    composed by FFT self-composition; groups are then composed together.
    Source: dp_accounting's ``from_gaussian_mechanism`` (Koskela et al. 2020;
    Doroshenko et al. 2022, connect-the-dots), pessimistic estimate: an upper bound,
    built on arrays by ``gaussian_step_pld`` (the same PMF).
    """
    total: pldlib.PrivacyLossDistribution | None = None
    for q, sigma, count in groups:
        if count < 1 or q == 0:
            continue
        if q >= 1.0:
            # A composition of `count` Gaussians is one Gaussian with sigma / sqrt(count).
            step = gaussian_step_pld(sigma / math.sqrt(count), 1.0, discretization)
        else:
            step = gaussian_step_pld(sigma, q, discretization)
            step = dense_self_compose(step, count)
        total = step if total is None else total.compose(step)
    if total is None:
        total = pldlib.identity(discretization)
    return PldPair.from_pld(total)


def epsilon_delta_pld(
    epsilon: float, delta: float, discretization: float = DEFAULT_DISCRETIZATION
) -> PldPair:
    """The tight PLD of a generic (epsilon, delta)-DP mechanism.

    Source: Kairouz, Oh, Viswanath 2015 / Zhu, Dong, Wang 2022: every
    (eps0, delta0)-DP mechanism is dominated by the pair whose privacy profile is
    delta(eps) = delta0 + (1 - delta0) (e^eps0 - e^eps)_+ / (1 + e^eps0).
    Built by dp_accounting's ``from_privacy_parameters`` (pessimistic rounding).
    """
    from dp_accounting.pld import common

    pld = pldlib.from_privacy_parameters(
        common.DifferentialPrivacyParameters(epsilon, delta),
        value_discretization_interval=discretization,
    )
    return PldPair.from_pld(pld)
