"""The law of one participation's likelihood ratio for heavy lognormal tails, for ``bis.pld``.

Where the grid of ``bis.pld`` would need more than MAX_POINTS points (small noise
multipliers: the moments of A grow so fast that the Markov range W is huge), the
lognormal is cut at C: w_j is a body draw if w_j <= C, a tail draw otherwise, p = P(w > C),
q = E[w; w > C]. With m the number of tail draws and f convex, 0 <= f(A) (remove:
f(A) = (A - g)_+ <= A; add: f = (1 - g A)_+ <= 1), by exchangeability

    E f(A) = E[f; m = 0] + d E[f; w_1 > C, w_2..w_d <= C] + E[f; m >= 2].

1. m = 0: the body draws split onto the grid i h, i <= C / h (``bis.grid.split_step``,
   a sub-probability: only w <= C is split), raised to the d-th power by one FFT of
   length L = W / h. Jensen given w (as in ``bis.pld`` step 1) and the wrap-around (as
   in step 2) only raise the curves; what is lost is {S_Y >= W}, S_Y the sum of the
   split values. Chernoff on the sub-law, M(t) = sum_i step_i e^(t y_i), M' its
   derivative: E[S_Y; S_Y >= W, m = 0] <= E[S_Y e^(t (S_Y - W))] = d M' M^(d-1) e^(-t W),
   for every t > 0, so remove gains M' M^(d-1) e^(-t W); add loses nothing (read only
   where g >= d / W, there g A >= 1).
2. m = 1: w_2..w_d split and summed as in 1 (power d - 1, same FFT), w_1 given w_1 > C
   split onto a geometric grid C = tau_0 < ... < tau_K = T (mean-preserving, so Jensen
   again; the masses are closed forms in the normal CDF, raised by their rounding). For
   each tail point the curve is the body's (d - 1)-fold law shifted by tau_k: prefix and
   suffix sums. Lost: {S >= W} (Chernoff: E[S + w_1; S >= W, w_1 > C] <=
   (d - 1) M' M^(d-2) e^(-t W) p + M^(d-1) e^(-t W) q; add: nothing, g A >= 1 there)
   and {w_1 > T} (remove: E[S + w_1; w_1 > T] <= (d - 1) P(w > T) + E[w; w > T]; add:
   f <= 1, d P(w > T)).
   This term is convex in g: it is evaluated at up to NODES losses and joined by
   chords in g, which lie above it.
3. m >= 2: remove E[A; m >= 2] = E[w_1; m >= 2] <= q (d - 1) p + (d - 1 choose 2) p^2
   (union bounds); add P(m >= 2) <= (d choose 2) p^2. C is the smallest with the
   remove term below TAIL.

Rounding as in ``bis.pld``: sums carry 2 n ulps of their magnitudes and the FFT's l2
error bound enters by Cauchy-Schwarz; the tail split masses carry FFT_ULPS ulps of the
CDF values subtracted (as the first bins of ``bis.grid._split``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray
from scipy import fft, special

from service.accounting.bis.grid import FFT_ULPS, power_law, split_step

#: Tail level of each lost piece (as ``bis.pld.TAIL``).
TAIL = 1e-14
#: Ratio of the geometric grid of the tail draw.
RATIO = 1.01
#: Most losses at which the tail draw's term is evaluated (chords between).
NODES = 1500
#: Points of the step grouped for the Chernoff bounds.
BLOCK = 64
_U = float(np.finfo(np.float64).eps)


def _z(sigma: float, w: NDArray | float) -> NDArray:
    """The standard normal quantile of w: z = s log w + 1 / (2 s)."""
    return np.asarray(sigma * np.log(w) + 1.0 / (2.0 * sigma))


def tail_terms(sigma: float, w: NDArray | float) -> tuple[NDArray, NDArray]:
    """(P(w > c), E[w; w > c]) rounded up."""
    z = _z(sigma, w)
    up = 1.0 + FFT_ULPS * _U
    return special.ndtr(-z) * up, special.ndtr(1.0 / sigma - z) * up


def cut(d: int, sigma: float) -> float:
    """Smallest C (on a grid of ratio 1.01) with the m >= 2 remove bound below TAIL."""
    c = np.exp(np.arange(0.0, 40.0, 0.01))
    p, q = tail_terms(sigma, c)
    two = q * (d - 1) * p + 0.5 * (d - 1) * (d - 2) * p * p
    ok = np.nonzero(two <= TAIL)[0]
    return float(c[ok[0]]) if ok.size else math.inf


def _reach(sigma: float, level: float) -> float:
    """T with E[w; w > T] <= level."""
    return math.exp((1.0 / sigma - float(special.ndtri(level)) - 1.0 / (2.0 * sigma)) / sigma)


def chernoff(step: NDArray, h: float) -> tuple[NDArray, NDArray, NDArray]:
    """(t, log M(t), log M'(t)) on a grid of t, upper bounds for the sub-law ``step`` on
    i h: each block of BLOCK points is moved to its top (e^(t y) and y e^(t y) grow)."""
    n = step.shape[0]
    blocks = -(-n // BLOCK)
    mass = np.zeros(blocks * BLOCK)
    mass[:n] = step
    mass = mass.reshape(blocks, BLOCK).sum(axis=1) * (1.0 + BLOCK * _U)
    y = h * (np.arange(blocks) * BLOCK + BLOCK - 1.0)
    keep = mass > 0
    y, logm = y[keep], np.log(mass[keep])
    top = float(y[-1])
    ts = np.geomspace(1e-3, 60.0, 120)[:, None] / top
    lm = special.logsumexp(logm + ts * y, axis=1)
    lm1 = special.logsumexp(logm + np.log(y) + ts * y, axis=1)
    # exp and sums within a few ulps of each term: raise by a relative margin
    slack = math.log1p(FFT_ULPS * _U * (4.0 + 60.0 + blocks))
    return ts[:, 0], lm + slack, lm1 + slack


def width(d: int, t: NDArray, lm: NDArray, lm1: NDArray) -> float:
    """Smallest W with the m = 0 Chernoff term M' M^(d-1) e^(-t W) below TAIL."""
    return float(np.min((lm1 + (d - 1) * lm - math.log(TAIL)) / t))


def _geometric_split(sigma: float, lo: float, hi: float) -> tuple[NDArray, NDArray]:
    """(points, masses) of w restricted to (lo, hi] split mean-preservingly onto a
    geometric grid from lo to hi; each mass raised by its rounding."""
    k = max(1, math.ceil(math.log(hi / lo) / math.log(RATIO)))
    edges = lo * np.exp(np.linspace(0.0, math.log(hi / lo), k + 1))
    edges[-1] = hi
    z = _z(sigma, edges)
    sp = special.ndtr(-z)  # P(w > e)
    sm = special.ndtr(1.0 / sigma - z)  # E[w; w > e]
    prob, mean = sp[:-1] - sp[1:], sm[:-1] - sm[1:]
    a, b = edges[:-1], edges[1:]
    err = FFT_ULPS * _U * ((b + 1.0) * (sp[:-1] + sp[1:]) + sm[:-1] + sm[1:]) / (b - a)
    at_a = np.maximum((b * prob - mean) / (b - a), 0.0) + err
    at_b = np.maximum((mean - a * prob) / (b - a), 0.0) + err
    masses = np.zeros(k + 1)
    masses[:-1] += at_a
    masses[1:] += at_b
    return edges, masses


@dataclass(frozen=True)
class ShiftedLaw:
    """The body's (d - 1)-fold sub-law (sum scale) mixed with the tail draw's split."""

    values: NDArray  # S at each grid point, i h
    masses: NDArray
    fft_error: float
    top: float  # W
    points: NDArray  # tau_k
    weights: NDArray  # their masses

    @cached_property
    def _sums(self) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        """Suffix sums (mass, mass * value) from each point, prefix sums below it."""
        m, mv, zero = self.masses, self.masses * self.values, np.zeros(1)
        suffix = (np.concatenate([np.cumsum(x[::-1])[::-1], zero]) for x in (m, mv))
        prefix = (np.concatenate([zero, np.cumsum(x)]) for x in (m, mv))
        return (*suffix, *prefix)

    def _above(self, c: NDArray) -> NDArray:
        """sum_k t_k sum_i b_i (s_i + tau_k - c)_+ at each c, rounded up."""
        s0, s1, _, _ = self._sums
        out = np.zeros(c.shape[0])
        n = self.values.shape[0]
        for start in range(0, c.shape[0], 64):
            x = c[start : start + 64, None] - self.points[None, :]
            i = np.searchsorted(self.values, x, side="right")
            a, b = s1[i], x * s0[i]
            val = np.maximum(a - b, 0.0)
            slack = 2.0 * n * _U * (a + np.abs(b)) + self.fft_error * math.sqrt(n) * (
                self.top + np.maximum(-x, 0.0)
            )
            out[start : start + 64] = (val + slack) @ self.weights
        return out * (1.0 + 4.0 * _U * self.points.shape[0])

    def _below(self, c: NDArray) -> NDArray:
        """sum_k t_k sum_i b_i (c - s_i - tau_k)_+ at each c, rounded up."""
        _, _, p0, p1 = self._sums
        out = np.zeros(c.shape[0])
        n = self.values.shape[0]
        for start in range(0, c.shape[0], 64):
            x = c[start : start + 64, None] - self.points[None, :]
            i = np.searchsorted(self.values, x, side="left")
            a, b = x * p0[i], p1[i]
            val = np.where(x > 0, np.maximum(a - b, 0.0), 0.0)
            slack = 2.0 * n * _U * (np.abs(a) + b) + self.fft_error * np.sqrt(i) * np.maximum(
                x, 0.0
            )
            out[start : start + 64] = (val + np.where(x > 0, slack, 0.0)) @ self.weights
        return out * (1.0 + 4.0 * _U * self.points.shape[0])

    def remove(self, d: int, eps: NDArray) -> NDArray:
        """d E[(A - g)_+; w_1 on the tail grid, the rest body], chords in g."""
        return _chords(lambda g: self._above(d * g), eps)

    def add(self, d: int, eps: NDArray) -> NDArray:
        """d E[(1 - g A)_+; the same], chords in g."""
        return _chords(lambda g: g * self._below(d / g), eps)


def _chords(fn: Callable[[NDArray], NDArray], eps: NDArray) -> NDArray:
    """A function convex in g = e^eps, from upper bounds at up to NODES of the points
    joined by chords (which lie above a convex function), rounded up."""
    eps = np.asarray(eps, dtype=np.float64)
    order = np.argsort(eps)
    g = np.exp(eps[order])
    idx = np.unique(np.linspace(0, g.shape[0] - 1, min(NODES, g.shape[0])).round().astype(int))
    vals = fn(g[idx])
    out = np.empty(g.shape[0])
    out[order] = np.interp(g, g[idx], vals) * (1.0 + 8.0 * _U) + 8.0 * _U * float(vals.max())
    return out


@dataclass(frozen=True)
class HeavyLaw:
    """The pieces of steps 1-3 for one participation in d steps."""

    body: tuple[NDArray, NDArray, float]  # (A at i h / d, m = 0 masses, l2 rounding)
    shifted: ShiftedLaw
    remove_extra: float  # lost pieces of the remove curve (steps 1-3)
    add_extra: float  # of the add curve
    top: float  # W / d
    reach: float  # (W + T) / d: past it the remove curve is below TAIL-level terms


def heavy_law(d: int, sigma: float, h: float, size: int, c: float) -> HeavyLaw:
    """Steps 1-3 on the grid of width h and ``size`` points, body cut at C = ``c``."""
    bins = min(size - 1, math.floor(c / h))
    c = bins * h  # the cut on the grid: smaller, so P(m >= 2) only grows: recompute
    step = split_step(sigma, h, size, bins)
    ts, lm, lm1 = chernoff(step, h)
    w = size * h
    (body, err_d), (rest, err_r) = power_law(step, d, d - 1)
    p, q = (float(x) for x in tail_terms(sigma, c))
    t_max = max(_reach(sigma, TAIL / 4.0), 2.0 * c, float(d))
    p_t, q_t = (float(x) for x in tail_terms(sigma, t_max))
    points, weights = _geometric_split(sigma, c, t_max)
    lost0 = math.exp(float(np.min(lm1 + (d - 1) * lm - ts * w)))
    lost1 = float(
        np.min(
            np.exp(np.minimum(np.log(d - 1.0) + lm1 + (d - 2) * lm - ts * w, 700.0)) * p
            + np.exp(np.minimum((d - 1) * lm - ts * w, 700.0)) * q
        )
    )
    two_remove = q * (d - 1) * p + 0.5 * (d - 1) * (d - 2) * p * p
    two_add = 0.5 * d * (d - 1) * p * p
    remove_extra = (lost0 + lost1 + (d - 1) * p_t + q_t + two_remove) * (1.0 + 16 * _U)
    add_extra = (d * p_t + two_add) * (1.0 + 16 * _U)
    shifted = ShiftedLaw(h * np.arange(size, dtype=np.float64), rest, err_r, w, points, weights)
    values = h * np.arange(size, dtype=np.float64) / d
    return HeavyLaw((values, body, err_d), shifted, remove_extra, add_extra, w / d, (w + t_max) / d)


def plan(d: int, sigma: float, h0: float, max_points: int) -> tuple[float, int, float] | None:
    """(h, L, C) for the heavy construction within ``max_points``, or None."""
    c = cut(d, sigma)
    if not math.isfinite(c):
        return None
    h = max(h0, 2.0 * c / max_points)
    for _ in range(4):
        bins = math.floor(c / h)
        step = split_step(sigma, h, bins + 1, bins)
        if not np.any(step > 0):  # the body's grid holds no mass: no construction here
            return None
        w = max(width(d, *chernoff(step, h)), c + 2.0 * h)
        points = w / h + 2.0
        if points <= max_points:
            return h, int(fft.next_fast_len(math.ceil(points), real=True)), c
        h *= points / max_points * 1.01
    return None
