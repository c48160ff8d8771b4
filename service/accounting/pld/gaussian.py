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

import numpy as np
from dp_accounting.pld import pld_pmf
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
