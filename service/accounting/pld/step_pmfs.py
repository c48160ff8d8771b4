"""Pessimistic PMFs of many Poisson-subsampled Gaussian steps at once, from the closed form.

Source: the pair of a Poisson-subsampled Gaussian step (Mironov, Talwar, Zhang 2019),
as dp_accounting states it: remove P = (1 - q) N(0, s^2) + q N(1, s^2) against
Q = N(0, s^2); add P' = N(0, s^2) against Q' = P. With g(x) = (2x - 1) / (2 s^2) the
remove loss is L(x) = log(1 - q + q e^g(x)), increasing in x; the add loss is -L(x) with
x drawn from N(0, s^2), decreasing in x. Both invert in closed form:
x(l) = s^2 log1p(expm1(l) / q) + 1/2 (no x when e^l <= 1 - q). q = 1 is the Gaussian
mechanism (L linear in x).

Discretisation: connect the dots (Doroshenko et al. 2022), done cell by cell. Each cell
(l_a, l_b] between two chosen grid losses (multiples of the composition's grid h) holds
P-mass p and Q-mass m, Gaussian CDF differences at the cell's ends in x. It is split
    upper = (p - e^{l_a} m) / (1 - e^{-(l_b - l_a)}),   lower = p - upper,
which is, for every atom l of the cell, the split into l_a and l_b that keeps its P-mass
and its Q-mass (E_P[e^{-L}] over the atom). For gamma = e^eps an atom contributes
(1 - gamma e^{-l})_+ to the hockey-stick curve H_gamma = E_P[(1 - gamma e^{-L})_+], a
convex function of gamma; the split replaces it by its chord between e^{l_a} and e^{l_b}
(equal at both ends and outside, above in between). So the PMF's curve equals the true
one at every chosen grid loss and lies above it everywhere: the PMF is a pair that
dominates the step (for pairs of probability measures, H_gamma for all gamma >= 0 orders
them as Blackwell does), and composing dominating pairs dominates the composition.
Mass below the first point is moved onto it and mass above the last goes to the
infinite loss (both only raise every delta; the total stays 1 and E_P[e^{-L}] <= 1, so
the PMF is still a pair). Any subset of the grid is sound this way; the spacing only
decides accuracy (``spacing_levels``).

Floating point: each cell's split conserves the cell's mass (lower = p - upper), so the
rounding of the split only moves mass by at most one cell; splits raised to 0 raise a
delta. Cells are CDF differences of the smaller tails (no cancellation far out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import special

#: Grid levels a step's far tails may widen by (2^j times the step's base spacing).
TAIL_LEVELS = 5
#: Tilted tail mass of a step past which its grid widens (x2 per factor 4 less mass).
FINE_TAIL = 0.05


def _x_of_loss(loss: NDArray, q: NDArray, s: NDArray) -> NDArray:
    """x with L(x) = loss for the remove loss; -inf where no x reaches it (loss <= log(1-q))."""
    arg = np.expm1(loss) / q
    with np.errstate(divide="ignore", invalid="ignore"):
        x = s * s * np.log1p(arg) + 0.5
    return np.where(arg > -1.0, x, -np.inf)


def loss_of_x(q: NDArray, s: NDArray, x: NDArray, add: bool) -> NDArray:
    """The direction's loss at x (increasing in x for remove, decreasing for add)."""
    with np.errstate(divide="ignore"):
        loss = np.logaddexp(np.log1p(-q), np.log(q) + (2 * x - 1) / (2 * s**2))
    return -loss if add else loss


class _Points:
    """Standardised positions and Gaussian tails at grid losses of many steps."""

    def __init__(self, q: NDArray, s: NDArray, rows: NDArray, k: NDArray, h: float, add: bool):
        self.q, self.loss, self.add = q[rows], k * h, add
        sr = s[rows]
        x = _x_of_loss(-self.loss if add else self.loss, self.q, sr)
        self.z0, self.z1 = x / sr, (x - 1.0) / sr
        # the smaller tail of the standard normal at each point: a few ulps relative
        self.t0, self.t1 = special.ndtr(-np.abs(self.z0)), special.ndtr(-np.abs(self.z1))

    def above(self, i: NDArray) -> NDArray:
        """P(loss > l_i) under the direction's first distribution."""
        z0, t0 = self.z0[i], self.t0[i]
        if self.add:  # x below x(l), x ~ N(0, s^2)
            return np.where(z0 < 0, t0, 1.0 - t0)
        z1, t1, q = self.z1[i], self.t1[i], self.q[i]
        return (1 - q) * np.where(z0 > 0, t0, 1 - t0) + q * np.where(z1 > 0, t1, 1 - t1)

    def below(self, i: NDArray) -> NDArray:
        """P(loss <= l_i) under the direction's first distribution."""
        z0, t0 = self.z0[i], self.t0[i]
        if self.add:
            return np.where(z0 > 0, t0, 1.0 - t0)
        z1, t1, q = self.z1[i], self.t1[i], self.q[i]
        return (1 - q) * np.where(z0 < 0, t0, 1 - t0) + q * np.where(z1 < 0, t1, 1 - t1)


def _between(t: NDArray, z: NDArray, add: bool) -> NDArray:
    """P(Z between z_i and z_{i+1}) for a standard normal Z, for every i, from the
    smaller tails ``t``: a difference of two small tails when both ends are on one side.
    (For add, z decreases along a row.)"""
    z_lo, z_hi, t_lo, t_hi = z[:-1], z[1:], t[:-1], t[1:]
    if add:
        z_lo, z_hi, t_lo, t_hi = z_hi, z_lo, t_hi, t_lo
    out = np.where(z_lo >= 0, t_lo - t_hi, np.where(z_hi <= 0, t_hi - t_lo, 1.0 - t_lo - t_hi))
    return np.maximum(out, 0.0)


def ranges(q: NDArray, s: NDArray, h: float, add: bool, tail: float) -> tuple[NDArray, NDArray]:
    """First and last grid index per step, so that at most ``tail`` of the step's mass lies
    beyond either end (x within z standard deviations of both means, Phi(-z) = tail)."""
    z = -special.ndtri(tail)
    l_lo = loss_of_x(q, s, -z * s, add)
    l_hi = loss_of_x(q, s, 1.0 + z * s, add)
    if add:
        # the add loss never exceeds -log(1 - q): end the grid there when q < 1
        with np.errstate(divide="ignore"):
            l_lo, l_hi = l_hi, np.where(q < 1.0, -np.log1p(-q), l_lo)
    return np.floor(l_lo / h).astype(np.int64), np.ceil(l_hi / h).astype(np.int64)


def spacing_levels(
    q: NDArray, s: NDArray, h: float, add: bool, tilt: float, levels: int
) -> tuple[NDArray, NDArray]:
    """Grid indices past which a step's grid widens by 2^j, j = 1..levels:
    (below, above), each of shape (steps, levels).

    Accuracy model (``base_level``): splitting the atoms of a cell of width D moves a
    composed epsilon by about D^2 (t + 1) / 8 times their share of the step's loss
    distribution tilted by e^{t L}, t the tilt of the composed tail at that epsilon (what
    an atom at l adds to delta grows about as e^{t l}). So a step's far tails, where the
    tilted step holds less than FINE_TAIL 4^-j of its mass, may be 2^j times coarser: each
    level adds at most FINE_TAIL of the base spacing's error (4^j D^2 FINE_TAIL 4^-j), all
    TAIL_LEVELS together a quarter of it. Tilted by e^{t L}, the sampled component
    N(1, s^2) of the remove pair is about N(1 + t, s^2) in x (its loss is linear in x up to
    a log term that only lowers it), and the add pair's N(0, s^2) at most N(-t, s^2) (its
    loss is at most linear in -x); lower tails are not raised by a tilt t >= 0.
    """
    z = -special.ndtri(FINE_TAIL * 4.0 ** -np.arange(1.0, levels + 1))
    sz = s[:, None] * z[None, :]
    qq, ss = q[:, None], s[:, None]
    if add:  # x ~ N(0, s^2); low x gives the highest losses
        above = loss_of_x(qq, ss, -tilt - sz, add=True)
        below = loss_of_x(qq, ss, sz, add=True)
    else:
        above = loss_of_x(qq, ss, 1.0 + tilt + sz, add=False)
        below = loss_of_x(qq, ss, -sz, add=False)
    return np.floor(below / h).astype(np.int64), np.ceil(above / h).astype(np.int64)


@dataclass(frozen=True)
class StepPmfs:
    """Flattened PMFs of many steps: row, grid index and mass of every point (rows
    contiguous, indices increasing within a row), each row's start and infinite mass."""

    rows: NDArray
    k: NDArray
    mass: NDArray
    starts: NDArray
    infinity: NDArray

    def log_mgf(self, h: float, t: NDArray) -> NDArray:
        """log E[e^{t L}] of each row's finite part, for every t: shape (rows, t). Each
        row is scaled by its largest loss (t > 0) or its smallest (t < 0): no overflow."""
        sizes = np.diff(np.concatenate([self.starts, [self.k.shape[0]]]))
        ends = self.starts + sizes - 1
        out = np.empty((self.starts.shape[0], t.shape[0]))
        for j, tj in enumerate(t):
            pivot = self.k[ends] if tj > 0 else self.k[self.starts]
            offset = self.k - np.repeat(pivot, sizes)
            scaled = np.add.reduceat(self.mass * np.exp(tj * h * offset), self.starts)
            with np.errstate(divide="ignore"):
                out[:, j] = np.log(scaled) + tj * h * pivot
        return out


def _grid(
    q: NDArray, s: NDArray, h: float, add: bool, tail: float, base: int, tilt: float, levels: int
) -> tuple[NDArray, NDArray, NDArray]:
    """Grid points of every step: (row, index, row starts). Spacing 2^base h in the body of
    the step and up to 2^(base + levels) h in its far tails (``spacing_levels``)."""
    lo, hi = ranges(q, s, h, add, tail)
    block = 1 << (base + levels)
    blocks = (hi - lo) // block + 1  # blocks of `block` indices from lo, covering hi
    rows = np.repeat(np.arange(q.shape[0]), blocks)
    k0 = (
        lo[rows]
        + (np.arange(rows.shape[0]) - np.repeat(np.cumsum(blocks) - blocks, blocks)) * block
    )
    below, above = spacing_levels(q, s, h, add, tilt, levels)
    # thresholds are nested: a block past the j-th is past every shallower one
    deep = (k0[:, None] >= above[rows]) | (k0[:, None] + block <= below[rows])
    step = 1 << (base + deep.sum(axis=1))
    per = block // step  # points in each block
    rows_f = np.repeat(rows, per)
    within = np.arange(rows_f.shape[0]) - np.repeat(np.cumsum(per) - per, per)
    k = np.repeat(k0, per) + within * np.repeat(step, per)
    keep = k < hi[rows_f]
    rows_f, k = rows_f[keep], k[keep]
    # every row ends on its last index
    ends = np.cumsum(np.bincount(rows_f, minlength=q.shape[0]))
    rows_f = np.insert(rows_f, ends, np.arange(q.shape[0]))
    k = np.insert(k, ends, hi)
    starts = np.concatenate([[0], ends[:-1] + np.arange(1, q.shape[0])])
    return rows_f, k, starts


def step_pmfs(
    q: NDArray,
    s: NDArray,
    h: float,
    add: bool,
    tail: float,
    base: int = 0,
    tilt: float = 0.0,
    levels: int | None = None,
) -> StepPmfs:
    """Connect-the-dots PMFs of steps (q_i, s_i) on grid h, one direction (module docstring).

    ``tail``: mass left beyond each end of a step; ``base``: the body's spacing is 2^base h;
    ``tilt``: the largest tilt of the composed tail the accuracy is kept for; ``levels``:
    how many times the far tails may double their spacing (default TAIL_LEVELS).
    """
    levels = TAIL_LEVELS if levels is None else levels
    rows, k, starts = _grid(q, s, h, add, tail, base, tilt, levels)
    pts = _Points(q, s, rows, k, h, add)
    n = k.shape[0]
    # cells (l_i, l_{i+1}] between neighbours; those across two rows are dropped
    inside = np.ones(n - 1, dtype=bool)
    inside[starts[1:] - 1] = False
    g0 = _between(pts.t0, pts.z0, add)
    g1 = _between(pts.t1, pts.z1, add)
    qb = pts.q[1:]
    mix = (1.0 - qb) * g0 + qb * g1
    p, m = (g0, mix) if add else (mix, g0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        width = pts.loss[1:] - pts.loss[:-1]
        upper = (p - np.exp(pts.loss[:-1]) * m) / -np.expm1(-width)
    upper = np.where(inside, np.maximum(upper, 0.0), 0.0)
    lower = np.where(inside, np.maximum(p - upper, 0.0), 0.0)
    mass = np.zeros(n)
    mass[1:] += upper
    mass[:-1] += lower
    ends = np.concatenate([starts[1:], [n]]) - 1
    mass[starts] += pts.below(starts)
    return StepPmfs(rows, k, mass, starts, pts.above(ends))


def loss_moments(q: NDArray, s: NDArray, add: bool) -> tuple[NDArray, NDArray]:
    """Mean and variance of each step's loss under the direction's first distribution, by
    Gauss-Hermite quadrature (64 nodes per Gaussian component): estimates, for tuning."""
    z, w = np.polynomial.hermite_e.hermegauss(64)
    w = w / w.sum()
    qq, ss = q[:, None], s[:, None]
    l0 = loss_of_x(qq, ss, ss * z, add)
    mean, second = l0 @ w, (l0 * l0) @ w
    if not add:  # x ~ (1 - q) N(0, s^2) + q N(1, s^2)
        l1 = loss_of_x(qq, ss, 1.0 + ss * z, add)
        mean = (1.0 - q) * mean + q * (l1 @ w)
        second = (1.0 - q) * second + q * ((l1 * l1) @ w)
    return mean, np.maximum(second - mean**2, 0.0)


def base_level(steps: float, tilt: float, epsilon: float, h: float, accuracy: float) -> int:
    """Largest base spacing D = 2^j h of the step grids that moves epsilon by at most
    ``accuracy`` relative, at the delta whose composed tail has tilt ``tilt`` and
    epsilon about ``epsilon``.

    Error model: a split over a cell of width D raises delta by about D^2 f_S(eps) / 8
    per unit of mass split (the chord error of delta_rest(eps - l) as a function of
    e^{-l}: its second derivative is the density of the rest of the composition), so a
    composition of T steps raises delta by about T D^2 f_S(eps) / 8 and epsilon by that
    over -d delta / d eps = E[e^{eps - S}; S > eps] ~ f_S(eps) / (t + 1): about
    T D^2 (t + 1) / 8.
    """
    if steps <= 0 or not epsilon > 0:
        return 0
    widest = math.sqrt(8.0 * accuracy * epsilon / (steps * (tilt + 1.0)))
    return max(0, math.floor(math.log2(widest / h))) if widest > h else 0
