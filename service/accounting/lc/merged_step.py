"""The merged last step of a linear combination as a 1-D Gaussian mixture, in polynomial time.

Source: Theorem 6.2 / Lemma 6.3 of "Differentially Private Model Merging" (arXiv:2604.20985) for
one merged step
(each run includes the differing example independently, with its own q_i), reduced
to one dimension by Choquette-Choo et al., arXiv 2310.15526, Corollary 4.7 (a mixture
of Gaussians with vector shifts is dominated by the scalar mixture whose shifts are
the vectors' norms added along one axis).

With unit noise the step compares P = sum_J p_J N(A_J, 1) with Q = N(0, 1), where J
runs over the sets of runs whose batch held the example and A_J = sum_(i in J) a_i.
A is a sum of independent two-point variables (0 with 1 - q_i, a_i with q_i), so its
distribution is a convolution: never an enumeration of 2^N patterns.

Rounding is always up, and rounding any A_J up is pessimistic in both directions:
all shifts are >= 0, so P/Q is increasing in x, the optimal test of H_g(P||Q) is an
upper half-line (of H_g(Q||P) a lower one), and P(x > t) = sum_J p_J Phi(A_J - t)
grows while Q(x < t) - g P(x < t) grows with every A_J. Domination of every
hockey-stick divergence in both directions makes the smaller pair a post-processing
of the larger (Blackwell), so Renyi divergences are dominated too.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from service.accounting.lc.mixture import Mixture, lc_mixture

#: Up to this many runs the 2^N patterns are enumerated exactly (no rounding).
EXACT_UP_TO = 10
#: Grid points of the convolution: shifts rounded up to a_min / FINE_PER_SHIFT, so
#: every A_J (a sum of |J| rounded terms) rises by at most 1 / FINE_PER_SHIFT relative.
FINE_PER_SHIFT = 4_000
MAX_FINE_POINTS = 1 << 20
#: Components kept after the convolution: shifts rounded up onto a geometric grid of
#: ratio 1 + COARSE_RATIO (a further relative rise of at most COARSE_RATIO), the ratio
#: doubled until at most MAX_COMPONENTS remain (the step's accounting costs time in
#: proportion to them; each doubling raises the step's epsilon by about the ratio).
COARSE_RATIO = 5e-4
MAX_COMPONENTS = 2048


def merged_step_mixture(q: ArrayLike, a: ArrayLike) -> Mixture:
    """The mixture of one merged step: runs with inclusion probability q_i and shift a_i
    (in units of the merged noise std). Exact up to ``EXACT_UP_TO`` active runs; beyond,
    a grid convolution whose shifts are all rounded up (relative rise below 7.5e-4 while
    at most ``MAX_COMPONENTS`` remain, more past that)."""
    qa = np.asarray(q, dtype=np.float64)
    aa = np.asarray(a, dtype=np.float64)
    if qa.shape != aa.shape:
        raise ValueError(f"q and a must have equal shapes, got {qa.shape} and {aa.shape}")
    if np.any((qa < 0) | (qa > 1)) or np.any(aa < 0) or not np.all(np.isfinite(aa)):
        raise ValueError("q must be in [0, 1] and a finite and >= 0")
    active = (qa > 0) & (aa > 0)
    qa, aa = qa[active], aa[active]
    if qa.shape[0] <= EXACT_UP_TO:
        return lc_mixture(qa, aa)
    certain = qa >= 1.0
    base = float(aa[certain].sum())  # runs that always include the example
    qa, aa = qa[~certain], aa[~certain]
    if qa.shape[0] == 0:
        return Mixture(np.array([1.0]), np.array([base]))
    h = max(float(aa.min()) / FINE_PER_SHIFT, float(aa.sum()) / MAX_FINE_POINTS)
    units = np.ceil(aa / h * (1 + 1e-12)).astype(np.int64)  # rounded up, never down
    size = int(units.sum()) + 1
    probs = np.zeros(size)
    probs[0] = 1.0
    top = 0
    for qi, ui in zip(qa, units, strict=True):
        shifted = probs[: top + 1] * qi
        probs[: top + 1] *= 1.0 - qi
        probs[ui : ui + top + 1] += shifted
        top += int(ui)
    support = np.nonzero(probs)[0]
    shifts = support * h + base
    weights = probs[support]
    ratio = COARSE_RATIO
    mix = _coarsen(weights, shifts, ratio)
    while mix.shifts.shape[0] > MAX_COMPONENTS:
        ratio *= 2
        mix = _coarsen(weights, shifts, ratio)
    return mix


def _coarsen(weights: np.ndarray, shifts: np.ndarray, ratio: float) -> Mixture:
    """Round every positive shift up to the geometric grid s_0 (1 + r)^k and merge equal
    ones; a zero shift stays zero. The weights are normalised, as ``lc_mixture`` does:
    the convolution's rounding moves each by about 1e-15 relative, inside the margins
    every bound carries (placing that mass on the largest shift instead, far out in the
    tail, would inflate high orders of the RDP by many orders of magnitude)."""
    zero = shifts <= 0
    out_p: list[float] = []
    out_s: list[float] = []
    if np.any(zero):
        out_p.append(float(weights[zero].sum()))
        out_s.append(0.0)
    pos_w, pos_s = weights[~zero], shifts[~zero]
    if pos_s.shape[0]:
        s0 = float(pos_s.min())
        log_ratio = math.log1p(ratio)
        k = np.ceil(np.log(pos_s / s0) / log_ratio - 1e-12).astype(np.int64)
        k = np.maximum(k, 0)
        grid = s0 * np.exp(k * log_ratio)
        # exp/log rounding must not pull a shift below its original value
        k[grid < pos_s] += 1
        sums = np.bincount(k - k.min(), weights=pos_w)
        levels = s0 * np.exp((np.arange(sums.shape[0]) + k.min()) * log_ratio)
        keep = sums > 0
        out_p.extend(sums[keep].tolist())
        out_s.extend(levels[keep].tolist())
    probs = np.array(out_p)
    return Mixture(probs / probs.sum(), np.array(out_s))
