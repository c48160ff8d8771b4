"""The exact hockey-stick curve of a Gaussian pair, and the PMF through given points.

Source: Balle and Wang, "Improving the Gaussian Mechanism for Differential Privacy:
Analytical Calibration and Optimal Denoising" (arXiv 1805.06530), Theorem 8, for
N(mu, 1) against N(0, 1). ``connect_dots`` is the PMF whose hockey-stick curve
interpolates given points linearly in e^epsilon (Doroshenko et al., "Connect the Dots:
Tighter Discrete Approximations of Privacy Loss Distributions", arXiv 2207.04380):
an upper bound wherever the points are (the curve is convex in e^epsilon).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_mechanism
from dp_accounting.pld import privacy_loss_distribution as pldlib
from numpy.typing import NDArray
from scipy import special


def connect_dots(
    lower: int, eps: NDArray, delta: NDArray, discretization: float
) -> pld_pmf.DensePLDPmf:
    """The PMF whose hockey-stick curve interpolates (0, 1), (e^eps_j, delta_j) linearly
    in gamma and stays at delta_last beyond: mass e^eps_j (slope right - slope left) at
    eps_j, and delta_last at infinity. Negative masses from rounding are raised to 0
    (more mass only raises delta)."""
    gamma = np.exp(eps)
    points_g = np.concatenate([[0.0], gamma])
    points_d = np.concatenate([[1.0], delta])
    slopes = np.diff(points_d) / np.diff(points_g)
    slopes = np.concatenate([slopes, [0.0]])
    masses = gamma * (slopes[1:] - slopes[:-1])
    masses = np.maximum(masses, 0.0)
    return pld_pmf.DensePLDPmf(discretization, lower, masses, float(delta[-1]), True)


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Exact hockey-stick of N(mu, 1) vs N(0, 1) (Balle and Wang 2018, Theorem 8):
    Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), in log space, with a rounding margin."""
    a = float(special.log_ndtr(mu / 2 - epsilon / mu))
    b = epsilon + float(special.log_ndtr(-mu / 2 - epsilon / mu))
    if b >= a:
        return 0.0
    value = math.exp(a) * -math.expm1(b - a)
    return value + math.exp(a) * 8 * float(np.finfo(np.float64).eps) * (abs(a) + abs(b) + 16)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon (to 1e-10, rounded up) with gaussian_delta(mu, eps) <= delta."""
    if mu <= 0:
        return 0.0
    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(mu, hi) > delta:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mu, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


class _VectorGaussianLoss(privacy_loss_mechanism.GaussianPrivacyLoss):
    """dp_accounting's (subsampled) Gaussian privacy loss with the hockey-stick curve at
    many epsilons computed at once. The package inverts the privacy loss one epsilon at a
    time in Python (about 45,000 calls per step at the default grid); this is the same
    arithmetic on arrays: the inverse of the subsampled loss (log(1 + (e^eps - 1) / q),
    for add of -eps, through log(e^d - e^c) = d + log1p(-e^(c - d))), then the Gaussian's
    linear inverse. Everything else, the connect-the-dots PMF and its pessimistic
    rounding included, is the package's own."""

    def get_delta_for_epsilon(self, epsilon: Any) -> Any:
        kinds = (
            privacy_loss_mechanism.AdjacencyType.ADD,
            privacy_loss_mechanism.AdjacencyType.REMOVE,
        )
        if isinstance(epsilon, numbers.Number) or self.adjacency_type not in kinds:
            return super().get_delta_for_epsilon(epsilon)
        eps = np.asarray(epsilon, dtype=float)
        q, s2, sens = self.sampling_prob, self._standard_deviation**2, self.sensitivity
        add = self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD
        deltas = np.zeros_like(eps)
        if q == 1.0:
            inside = np.ones(eps.shape, dtype=bool)
            loss = -eps if add else eps  # the loss without subsampling
        else:
            # the package's domain: add below -log(1 - q), remove above log(1 - q)
            edge = -math.log1p(-q) if add else math.log1p(-q)
            inside = eps < edge if add else eps > edge
            if not add:
                deltas[~inside] = -np.expm1(eps[~inside])
            b = -eps[inside] if add else eps[inside]
            # at the edge itself (math.isclose, as the package) the inverse is infinite
            at_edge = np.abs(b - math.log(1 - q)) <= 1e-9 * np.maximum(
                np.abs(b), abs(math.log(1 - q))
            )
            d, c = b + math.log(1 / q), math.log(1 / q - 1)
            if np.any(~at_edge & ((b <= math.log(1 - q)) | ((b != 0) & (d <= c)))):
                return super().get_delta_for_epsilon(epsilon)  # the package refuses these
            with np.errstate(divide="ignore", invalid="ignore"):
                inner = np.where(b == 0, 0.0, d + np.log1p(-np.exp(c - d)))
            inner = np.where(at_edge, -np.inf, inner)
            loss = -inner if add else inner
        x = -0.5 * sens - loss * s2 / sens
        if add:
            x = x + sens
        deltas[inside] = self.mu_upper_cdf(x) - np.exp(eps[inside] + self.mu_lower_log_cdf(x))
        return np.clip(deltas, 0, 1)


def gaussian_step_pld(
    sigma: float, sampling_prob: float, discretization: float, sensitivity: float = 1.0
) -> pldlib.PrivacyLossDistribution:
    """dp_accounting's pessimistic connect-the-dots PLD of one Poisson-subsampled
    Gaussian step, as ``from_gaussian_mechanism`` builds it, with the
    hockey-stick curve computed on arrays (``_VectorGaussianLoss``): the same PMF to
    rounding (tests/unit/test_gaussian_step.py), several times faster."""

    def pmf(adjacency: privacy_loss_mechanism.AdjacencyType) -> pld_pmf.PLDPmf:
        loss = _VectorGaussianLoss(
            sigma, sensitivity=sensitivity, sampling_prob=sampling_prob, adjacency_type=adjacency
        )
        return pldlib._create_pld_pmf_from_monotone_privacy_loss(  # the package's own
            loss,
            pessimistic_estimate=True,
            value_discretization_interval=discretization,
            use_connect_dots=True,
        )

    remove = pmf(privacy_loss_mechanism.AdjacencyType.REMOVE)
    if sampling_prob == 1.0:
        return pldlib.PrivacyLossDistribution(remove)
    return pldlib.PrivacyLossDistribution(remove, pmf(privacy_loss_mechanism.AdjacencyType.ADD))
