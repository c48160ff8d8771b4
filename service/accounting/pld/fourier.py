"""Pessimistic PLD of many distinct Poisson-subsampled Gaussian steps, composed in one pass.

dp_accounting builds one PLD per distinct (q, sigma) and composes them pairwise: minutes
for a few hundred distinct steps. Here every distinct step's PMF is built from the
closed form of its privacy loss, many at once (``step_pmfs``: connect the dots, a pair
that dominates the step), and the composition is a product in the Fourier domain on the
final grid only: one FFT of the final size per distinct step, a step repeated c times
being the c-th power of its transform. The work grows with the distinct steps, never
with the steps.

Composition: each PMF is folded onto a circle of M points (index k mod M), transformed,
raised to its count and multiplied; the inverse transform is the circular convolution,
i.e. the composed PMF folded mod M. The window [a, a + M) is chosen from a Chernoff
estimate (moment generating functions of coarse PMFs): soundness does not rest on it.
Mass of the true composition below the window lands, folded, at a larger loss
(pessimistic); mass above it lands at a smaller one. That mass is at most
tau = min_t E[e^{t S}] e^{-t (a + M) h} (Chernoff, with the exact moment generating
function of the discretised steps, accumulated alongside the transforms), and tau is
moved from the lowest losses to the infinite loss. Moving mass w from above the window
down to some loss j >= a h while moving tau >= w from a h up to infinity never lowers
delta(eps) = sum_l p_l (1 - e^{eps - l})_+: for eps >= a h the second move adds tau >= w,
and below, the sum changes by at least (tau - w) e^{eps - a h} >= 0. The total mass
stays 1, so the result is still a pair.

Floating point: the transforms round as dp_accounting's FFT convolutions do (about
1e-16 of the total mass per point); negative values are raised to 0 (raising a delta).
These are dp_accounting's numerical assumptions.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pldlib
from numpy.typing import NDArray
from scipy import fft

from service.accounting.pld.gaussian import gaussian_epsilon
from service.accounting.pld.pair import PldPair, _trim
from service.accounting.pld.step_pmfs import base_level, loss_moments, ranges, step_pmfs

#: Mass left at each end of one step, in total over all steps (moved up or to infinity).
TAIL_MASS = 1e-16
#: Mass of the composition allowed above the window (moved to infinity).
WINDOW_TAIL = 1e-16
#: Relative error of epsilon allowed for the coarser step grids (step_pmfs.base_level), at
#: the delta where epsilon is smallest (refine.TARGET_DELTAS[0]).
ACCURACY = 1e-4
_ACCURACY_DELTA = 1e-3
#: Grid of the coarse PMFs used only to estimate the window.
_COARSE = 0.02
#: Chernoff parameters tried for the window.
_ORDERS = np.geomspace(1.0 / 64, 512.0, 28)
#: Grid points held at once (rows of a batch times points per row).
_BATCH_POINTS = 1 << 22


def _window(
    q: NDArray, s: NDArray, c: NDArray, h: float, add: bool, tail: float
) -> tuple[int, int, float, int]:
    """Where to compose, from Chernoff bounds on coarse PMFs (estimates only: soundness
    does not rest on them): (first index, points) of a window outside which the
    composition holds about WINDOW_TAIL of mass at each end, never wider than its
    support; the Chernoff parameter bounding its top best (the tilt of the composed tail
    there, the largest any delta above WINDOW_TAIL calls for); and the base level of the
    step grids (``step_pmfs.base_level`` at the epsilon estimated at _ACCURACY_DELTA)."""
    coarse = max(h, _COARSE)
    pmfs = step_pmfs(q, s, coarse, add, tail, levels=0)
    t = np.concatenate([_ORDERS, -_ORDERS])
    total = c @ pmfs.log_mgf(coarse, t)
    size = _ORDERS.shape[0]
    log_tail = math.log(WINDOW_TAIL)
    bounds = (total[:size] - log_tail) / _ORDERS
    best = int(np.argmin(bounds))
    upper = float(bounds[best]) + coarse
    lower = float(np.max((log_tail - total[size:]) / _ORDERS)) - coarse
    lo, hi = ranges(q, s, h, add, tail)
    first = max(math.floor(lower / h), int(c @ lo))
    last = min(math.ceil(upper / h), int(c @ hi))
    # epsilon and tilt at _ACCURACY_DELTA: the smaller of the Chernoff epsilon (the tail
    # probability's, above the hockey stick's) and the Gaussian one of the same variance
    at_delta = (total[:size] - math.log(_ACCURACY_DELTA)) / _ORDERS
    i = int(np.argmin(at_delta))
    epsilon, tilt = float(at_delta[i]), float(_ORDERS[i])
    variance = float(c @ loss_moments(q, s, add)[1])
    if variance > 0:
        gauss = gaussian_epsilon(math.sqrt(variance), _ACCURACY_DELTA)
        epsilon = min(epsilon, gauss)
        tilt = max(tilt, (gauss - variance / 2) / variance)
    base = base_level(float(c.sum()), tilt, epsilon, h, ACCURACY)
    return first, max(1, last - first + 1), float(_ORDERS[best]), base


def _batches(points: NDArray, width: int) -> list[slice]:
    """Consecutive rows whose points and folded rows fit in _BATCH_POINTS together."""
    out, start, held = [], 0, 0
    for i, size in enumerate(points.tolist()):
        cost = size + width
        if i > start and held + cost > _BATCH_POINTS:
            out.append(slice(start, i))
            start, held = i, 0
        held += cost
    out.append(slice(start, points.shape[0]))
    return out


def _product(spectrum: NDArray, count: NDArray) -> NDArray:
    """prod_i spectrum_i^count_i over the rows, powers by repeated squaring (exact for
    count 1, the usual case for distinct steps)."""
    out = np.prod(spectrum[count == 1], axis=0)
    for row in np.flatnonzero(count > 1):
        base, left = spectrum[row].copy(), int(count[row])
        while left:
            if left & 1:
                out *= base
            left >>= 1
            if left:
                base *= base
    return out


def _compose(q: NDArray, s: NDArray, c: NDArray, h: float, add: bool) -> pld_pmf.DensePLDPmf:
    """The composed PMF of one direction (see the module docstring)."""
    tail = TAIL_MASS / float(c.sum())
    first, points, tilt, base = _window(q, s, c, h, add, tail)
    size = fft.next_fast_len(points, real=True)
    t = np.array([tilt])
    lo, hi = ranges(q, s, h, add, tail)
    # points per row, a rough estimate for batching: the base spacing plus a fine core
    estimate = np.minimum(hi - lo + 1, (hi - lo) // (1 << base) + 2000)
    product = np.ones(size // 2 + 1, dtype=np.complex128)
    log_keep = 0.0  # log of the finite mass of the composition
    log_mgf = np.zeros(t.shape[0])
    for part in _batches(estimate, size):
        pmfs = step_pmfs(q[part], s[part], h, add, tail, base, tilt)
        count = c[part]
        index = pmfs.rows * size + pmfs.k % size
        folded = np.bincount(index, weights=pmfs.mass, minlength=count.shape[0] * size)
        spectrum = fft.rfft(folded.reshape(-1, size), axis=1)
        product *= _product(spectrum, count)
        log_keep += float(count @ np.log1p(-pmfs.infinity))
        log_mgf += count @ pmfs.log_mgf(h, t)
    total = fft.irfft(product, n=size)
    probs = np.maximum(np.roll(total, -(first % size)), 0.0)
    # mass of the composition above the window (it was folded below): to infinity
    spill = 0.0
    if first + size <= int(c @ hi):
        spill = float(np.exp(np.min(log_mgf - t * (first + size) * h)))
    infinity = -math.expm1(log_keep) + spill
    taken = np.minimum(probs, np.maximum(spill - (np.cumsum(probs) - probs), 0.0))
    return pld_pmf.DensePLDPmf(h, first, probs - taken, min(1.0, infinity), True)


def composed_pld(groups: list[tuple[float, float, int]], discretization: float) -> PldPair:
    """Pessimistic PLD of the composition of ``count`` steps of each (q, sigma, count).

    Steps with q >= 1 (Gaussian, no sampling) compose exactly into one Gaussian with
    1 / sigma^2 = sum count / sigma_i^2 (mu-GDP adds mu^2); steps with q = 0 or count 0
    are the identity.
    """
    q = np.array([g[0] for g in groups], dtype=np.float64)
    s = np.array([g[1] for g in groups], dtype=np.float64)
    c = np.array([g[2] for g in groups], dtype=np.int64)
    keep = (q > 0) & (c > 0)
    q, s, c = q[keep], s[keep], c[keep]
    full = q >= 1.0
    if np.any(full):
        merged = float(np.sum(c[full] / s[full] ** 2)) ** -0.5
        q = np.concatenate([q[~full], [1.0]])
        s = np.concatenate([s[~full], [merged]])
        c = np.concatenate([c[~full], [1]])
    if q.shape[0] == 0:
        return PldPair.from_pld(pldlib.identity(discretization))
    remove = _compose(q, s, c, discretization, add=False)
    add = _compose(q, s, c, discretization, add=True)
    return PldPair(remove=_trim(remove), add=_trim(add))
