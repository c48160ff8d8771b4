"""The law of one participation's likelihood ratio on a grid, for ``bis.pld``.

Each lognormal w (log w ~ N(-1 / (2 s^2), 1 / s^2), mean 1) is split onto the grid
points i h: given w in [a, a + h], mass at a with probability (a + h - w) / h and at
a + h otherwise, so the split value Y has E[Y | w] = w (``bis.pld``, step 1). The d-fold
sum of the split values is one FFT raised to the d-th power (step 2).

Rounding. The step's masses are computed without cancellation (``_split``) and each is
raised by a bound on its own rounding: a pointwise larger step gives a pointwise
larger d-fold convolution (all terms nonnegative), so larger curves. The FFT's
rounding is covered by a model, not a proof (as in dp_accounting's own compositions):
negative outputs are raised to 0, and the masses carry an l2 error of at most
8 ulps (log2 L (d ||step||_2 + ||masses||_2) + d ||masses||_2): each transform errs by
about log2 L ulps of its input's l2 norm (Higham 2002, Theorem 24.2, radix 2), the
forward transform's error is amplified at most d times by the d-th power (|z| <= 1, so
|d z^(d-1)| <= d), and the power errs by about d ulps relative.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import fft, special

#: The FFT's precision: x87 extended where numpy has it (rounding 2048 times smaller than
#: float64's, about 3 times slower; the rounding margin grows with d), else float64 (a
#: software quad would be far slower); the margin uses the precision's own epsilon.
_EXTENDED = np.longdouble if np.finfo(np.longdouble).nmant == 63 else np.float64
#: Ulps per step of the rounding model (module docstring).
FFT_ULPS = 8.0


def sum_law(d: int, sigma: float, h: float, size: int) -> tuple[NDArray, NDArray, float]:
    """(A_Y at the grid points i h / d, their masses, an l2 bound on the masses' rounding)
    for the sum of d split lognormals on L = ``size`` points (sums of L h or more wrap
    around, below L h: exact in real arithmetic)."""
    step = split_step(sigma, h, size, size)
    ((masses, error),) = power_law(step, d)
    return h * np.arange(size, dtype=np.float64) / d, masses, error


def split_step(sigma: float, h: float, size: int, bins: int) -> NDArray:
    """The split law of one lognormal restricted to w < ``bins`` h on ``size`` points
    (a sub-probability; with bins = size the last bin's top, W, is dropped: its mass only
    counts when w > W - h, and then S_Y >= W: the overflow bound covers it)."""
    edges = h * np.arange(bins + 1, dtype=np.float64)
    lo, hi = _split(edges, sigma, h)
    step = np.zeros(size)
    step[:bins] += lo  # bin i: mass at edge i ...
    top = min(bins, size - 1)
    step[1 : top + 1] += hi[:top]  # ... and at edge i + 1
    return step


def power_law(step: NDArray, *powers: int) -> list[tuple[NDArray, float]]:
    """For each d of ``powers``: (the d-fold convolution of ``step`` by one FFT of its
    length, wrapped around, with negative values raised to 0; an l2 bound on its
    rounding)."""
    size = step.shape[0]
    kind = _EXTENDED
    spectrum = fft.rfft(step.astype(kind))
    ulp = FFT_ULPS * float(np.finfo(kind).eps)
    step_norm = float(np.sqrt(np.sum(step**2)))
    out = []
    for d in powers:
        total = fft.irfft(spectrum**d, n=size).astype(np.float64)
        masses = np.maximum(total, 0.0)
        # rounding model (module docstring), in l2
        norm = float(np.sqrt(np.sum(masses**2)) + np.sqrt(np.sum((total - masses) ** 2)))
        error = ulp * (math.log2(size) * (d * step_norm + norm) + d * norm)
        # the conversion to float64 rounds each mass by half an ulp of itself
        error += float(np.finfo(np.float64).eps) * float(np.sqrt(np.sum(masses**2)))
        out.append((masses, error))
    return out


def _split(edges: NDArray, sigma: float, h: float) -> tuple[NDArray, NDArray]:
    """The split masses of each bin [a, b], E[(b - w); bin] / h at a and E[(w - a); bin] / h
    at b, each raised by a bound on its rounding: a pointwise larger step only raises
    every mass of its d-fold convolution (all terms are nonnegative), so every curve.

    In z = s log w + 1 / (2 s) (standard normal), bins of z-width up to 0.1 are integrated
    by 8-point Gauss-Legendre (error far below an ulp at that width), b - w and w - a as
    -b expm1((x - z_b) / s) and a expm1((x - z_a) / s) with x - z_b and x - z_a from the
    node's offset and the width s log1p(h / a): no cancellation. The first, wider bins
    use differences of the normal CDF, their rounding bounded by the magnitudes
    subtracted.
    """
    u = float(np.finfo(np.float64).eps)
    with np.errstate(divide="ignore"):
        z = sigma * np.log(edges) + 1.0 / (2.0 * sigma)
    n = edges.shape[0] - 1
    narrow = np.diff(z) <= 0.1  # z-widths shrink as w grows
    first = int(np.argmax(narrow)) if narrow.any() else n
    lo, hi = np.empty(n), np.empty(n)
    # wide bins, near w = 0: differences
    zw, zt = z[: first + 1], z[: first + 1] - 1.0 / sigma  # w's and the tilted quantile
    cdf, mean = _diff_cdf(zw), _diff_cdf(zt)
    a, b = edges[:first], edges[1 : first + 1]
    mag = special.ndtr(-np.abs(zw)) + special.ndtr(-np.abs(zt))  # what is subtracted
    err = FFT_ULPS * u * (b * (mag[:-1] + mag[1:]) + mag[:-1] + mag[1:]) / h
    lo[:first] = np.maximum((b * cdf - mean) / h, 0.0) + err
    hi[:first] = np.maximum((mean - a * cdf) / h, 0.0) + err
    nodes, weights = np.polynomial.legendre.leggauss(8)
    for start in range(first, n, 1 << 16):
        stop = min(n, start + (1 << 16))
        a, b = edges[start:stop, None], edges[start + 1 : stop + 1, None]
        # the z-width s log(b / a) from log1p, not as a difference of z's
        half = 0.5 * sigma * np.log1p(h / a)
        x = z[start:stop, None] + half * (1.0 + nodes)
        dens = half * weights * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        # log w - log b = (x - z_b) / s and log w - log a = (x - z_a) / s, exactly
        below_b = -np.expm1(half * (nodes - 1.0) / sigma)
        above_a = np.expm1(half * (nodes + 1.0) / sigma)
        lo[start:stop] = np.sum(dens * below_b, axis=1) * b[:, 0] / h
        hi[start:stop] = np.sum(dens * above_a, axis=1) * a[:, 0] / h
    # sums of positive terms, each within a few ulps plus x^2 / 2 for exp(-x^2 / 2); the
    # edges i h are rounded, by up to an ulp of b: a relative 2 b / h ulps of the mass
    top = np.maximum(np.abs(z[first:-1]), np.abs(z[first + 1 :]))
    rel = 1.0 + u * (FFT_ULPS + top * top + 2.0 * edges[first + 1 :] / h)
    lo[first:] *= rel
    hi[first:] *= rel
    return lo, hi


def _diff_cdf(z: NDArray) -> NDArray:
    """Phi(z[i+1]) - Phi(z[i]), from the upper tail where z > 0."""
    low = special.ndtr(np.minimum(z, 0.0))
    high = special.ndtr(-np.maximum(z, 0.0))
    # Phi(z) = low where z <= 0, 1 - high where z > 0
    up = z > 0
    out = np.empty(z.shape[0] - 1)
    both_low = ~up[1:]
    out[both_low] = low[1:][both_low] - low[:-1][both_low]
    both_high = up[:-1]
    out[both_high] = high[:-1][both_high] - high[1:][both_high]
    cross = up[1:] & ~up[:-1]
    out[cross] = (0.5 - low[:-1][cross]) + (0.5 - high[1:][cross])
    return np.maximum(out, 0.0)
