"""A pessimistic PLD of the merged LC step from linear bounds on its privacy loss.

The step compares P = sum_k p_k N(a_k, 1) with Q = N(0, 1), a_k >= 0 (``mixture.py``).
Its privacy loss L(x) = log M(x), M = P/Q = sum_k p_k exp(a_k x - a_k^2 / 2), is a
log-sum-exp of linear functions of x: convex and increasing. ``mixture_pld`` inverts L
at every point of the loss grid (Newton over every component); here L is evaluated
only on a coarse grid in x, and convexity brackets it in between:

  * above, by the chord of each coarse cell (a convex function lies below its chords);
  * below, by the secants of the neighbouring cells extended into it: for x >= x_i,
    L(x) >= L(x_i) + s_(i-1) (x - x_i) with s_(i-1) the slope on [x_(i-1), x_i], which
    is at most L'(x_i); for x <= x_(i+1), L(x) >= L(x_(i+1)) - s_(i+1) (x_(i+1) - x)
    with s_(i+1) >= L'(x_(i+1)). L is increasing, so L(x_0) is a lower bound too.

The PMFs are the distributions of the loss rounded UP onto the grid k h, which is
pessimistic under any composition: delta(eps) of a composition is
E[(1 - e^(eps - L_1 - ... - L_n))_+] under the product measure, increasing in every
realised loss, so rounding each loss up (a coupling) bounds it from above; masses
rounded up bound it too, every term being >= 0.

  remove (L under P): each x is assigned the level ceil(u(x) / h) of the chord u >= L,
      and a piece of x on which u <= k h gets P-mass at most e^(k h) Q(piece), since
      dP/dQ = e^L <= e^(k h) there. Past x_hi, where P(X > x_hi) < TAIL, the mass goes
      to the infinite loss; below x_0 the loss is at most u(x_0).
  add (-L under Q): each x is assigned ceil(-l(x) / h) with l <= L the secant bound,
      with its exact Q-mass. Below x_0, -L <= -log p_0 (M >= p_0, the mass at shift 0),
      or the infinite loss when there is none; past x_hi, -L <= -l(x_hi).

Components at the top shifts whose total mass is below PRUNE may be dropped: the pair
(P restricted, plus an atom Q never produces) dominates P in both directions (remove:
the atom adds its mass to every delta; add: P only lost mass). The atom is the
infinite loss of the remove PMF, and the add direction uses the unnormalised rest.

Tightness: the chord and the secants are within L'' dx^2 / 4 of L, with
L'' <= a_max^2 / 4 (a variance on [0, a_max]); dx is chosen so that this is h / 8.
The loss is then overstated by at most about 1.2 h per step, and the remove masses
by a factor e^(1.2 h).
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pldlib
from numpy.typing import NDArray
from scipy import special

from service.accounting.lc.mixture import Mixture, log_m
from service.accounting.lc.mixture_pld import _log_tail_p
from service.accounting.pld.pair import PldPair

#: Mass left beyond the x range in P's upper tail (to the infinite loss) and Q's lower
#: tail (to the infinite loss, when no component has shift 0).
TAIL = 1e-18
#: Top components of at most this total mass may be replaced by an atom at infinity.
PRUNE = 1e-16
#: Coarse cells: at most this many (more is tighter, never needed for soundness).
MAX_CELLS = 1 << 16
#: Absolute margin on computed values of L (log-sum-exp rounding is below 1e-12 for
#: |a x| up to 1e3; every later float operation is far smaller).
MARGIN = 1e-9
#: Added to the infinite loss of both PMFs: covers the rounding of the normal CDF
#: differences that give the masses.
MASS_MARGIN = 1e-14


def step_pld(mix: Mixture, discretization: float) -> PldPair:
    """A pessimistic PLD (both directions) of the mixture step on the grid
    k * ``discretization``; see the module docstring for the proof."""
    h = float(discretization)
    if mix.trivial:
        return PldPair.from_pld(pldlib.identity(h))
    probs, shifts, atom = _prune(mix)
    p0 = float(probs[shifts == 0].sum())
    log_p0 = math.log(p0) if p0 > 0 else None  # no mass at shift 0: -L unbounded below
    z = float(-special.ndtri(TAIL))
    x_lo = -z - 1.0
    x_hi = _upper_x(probs, shifts, z)
    a_max = float(shifts.max())
    dx = math.sqrt(h / 2.0) / max(a_max, 1e-6)  # L'' dx^2 / 4 <= h / 8
    cells = int(min(MAX_CELLS, max(16, math.ceil((x_hi - x_lo) / dx))))
    x = np.linspace(x_lo, x_hi, cells + 1)
    values = log_m(Mixture(probs, shifts), x)
    upper = values + MARGIN
    lower = values - MARGIN
    tail_p = _log_tail(probs, shifts, x_hi)
    remove = _remove_pmf(x, upper, h, tail_p, atom)
    add = _add_pmf(x, lower, h, log_p0)
    return PldPair.from_pmfs(remove, add)


def _prune(mix: Mixture) -> tuple[NDArray, NDArray, float]:
    order = np.argsort(mix.shifts, kind="stable")
    probs, shifts = mix.probs[order], mix.shifts[order]
    from_top = np.cumsum(probs[::-1])[::-1]
    keep = from_top > PRUNE
    keep[0] = True
    atom = float(probs[~keep].sum())
    return probs[keep], shifts[keep], atom


def _log_tail(probs: NDArray, shifts: NDArray, x: float) -> float:
    """log P(X > x), X ~ sum_k p_k N(a_k, 1), with probs as given (unnormalised)."""
    return float(_log_tail_p(Mixture(probs, shifts), np.array([x]), upper=True)[0])


def _upper_x(probs: NDArray, shifts: NDArray, z: float) -> float:
    """An x >= z with P(X > x) <= TAIL, by bisection (P's tail falls with x)."""
    lo, hi = z, float(shifts.max()) + z + 1.0
    target = math.log(TAIL)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _log_tail(probs, shifts, mid) <= target:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-3:
            break
    return hi


def _levels_up(values: NDArray, h: float) -> NDArray:
    """ceil(values / h), never below: a level k with k h >= value."""
    k = np.ceil(values / h)
    k[k * h < values] += 1
    return k.astype(np.int64)


def _log_q_mass(left: NDArray, right: NDArray) -> NDArray:
    """log Q((left, right)) for left <= right, from the nearer tail of N(0, 1)."""
    out = np.full(left.shape, -np.inf)
    low = right <= 0
    hi_side = ~low
    a = special.log_ndtr(right[low])
    b = special.log_ndtr(left[low])
    with np.errstate(divide="ignore", invalid="ignore"):
        out[low] = a + np.log1p(-np.exp(np.minimum(b - a, 0.0)))
        a = special.log_ndtr(-left[hi_side])
        b = special.log_ndtr(-right[hi_side])
        out[hi_side] = a + np.log1p(-np.exp(np.minimum(b - a, 0.0)))
    return out


def _intervals(px: NDArray, start: NDArray, end: NDArray, h: float) -> tuple[NDArray, NDArray]:
    """Pieces p (from px[p] to px[p+1], linear from start[p] to end[p]) cut wherever the
    line crosses a multiple of h: (interval edges, the largest value of each interval's
    line at its two ends). Each interval lies within one piece, so its line is linear
    there and the larger end value is its maximum."""
    lo = np.minimum(start, end)
    hi = np.maximum(start, end)
    first = np.floor(lo / h).astype(np.int64) + 1
    last = np.ceil(hi / h).astype(np.int64) - 1
    counts = np.maximum(last - first + 1, 0)
    piece = np.repeat(np.arange(counts.shape[0]), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    level = np.repeat(first, counts) + offsets
    rise = end[piece] - start[piece]
    safe = np.where(rise != 0, rise, 1.0)
    frac = np.clip(np.where(rise != 0, (level * h - start[piece]) / safe, 0.0), 0.0, 1.0)
    width = np.diff(px)
    tags = np.concatenate([np.arange(start.shape[0]), piece])
    edges = np.concatenate([px[:-1], px[piece] + frac * width[piece]])
    order = np.lexsort((edges, tags))
    tags, edges = tags[order], edges[order]
    right = np.concatenate([edges[1:], px[-1:]])
    safe_w = np.where(width[tags] > 0, width[tags], 1.0)
    slope = (end[tags] - start[tags]) / safe_w
    at_left = start[tags] + slope * (edges - px[tags])
    at_right = start[tags] + slope * (right - px[tags])
    return np.concatenate([edges, px[-1:]]), np.maximum(at_left, at_right)


def _remove_pmf(
    x: NDArray, upper: NDArray, h: float, log_tail_p: float, atom: float
) -> pld_pmf.DensePLDPmf:
    # in each cell the chord of the upper values bounds L from above
    edges, top = _intervals(x, upper[:-1], upper[1:], h)
    levels = _levels_up(top, h)
    log_mass = levels * h + _log_q_mass(edges[:-1], edges[1:])
    # below x_0: L <= L(x_0), P(X < x_0) <= e^(L(x_0)) Q(X < x_0)
    k0 = int(_levels_up(np.array([upper[0]]), h)[0])
    levels = np.concatenate([[k0], levels])
    log_mass = np.concatenate([[k0 * h + float(special.log_ndtr(x[0]))], log_mass])
    infinity = math.exp(log_tail_p) * (1 + 1e-9) + atom + MASS_MARGIN
    return _dense(levels, log_mass, h, infinity)


def _add_pmf(x: NDArray, lower: NDArray, h: float, log_p0: float | None) -> pld_pmf.DensePLDPmf:
    px, start, end = _secant_lower(x, lower)
    edges, top = _intervals(px, -start, -end, h)  # -l >= -L, the add direction's loss
    levels = _levels_up(top, h)
    log_mass = _log_q_mass(edges[:-1], edges[1:])
    infinity = MASS_MARGIN
    q_low = float(special.log_ndtr(x[0]))
    if log_p0 is None:
        infinity += math.exp(q_low) * (1 + 1e-9)
    else:
        k = int(_levels_up(np.array([-log_p0 + MARGIN]), h)[0])
        levels = np.concatenate([[k], levels])
        log_mass = np.concatenate([[q_low], log_mass])
    k_hi = int(_levels_up(np.array([-lower[-1]]), h)[0])
    levels = np.concatenate([levels, [k_hi]])
    log_mass = np.concatenate([log_mass, [float(special.log_ndtr(-x[-1]))]])
    return _dense(levels, log_mass, h, infinity)


def _secant_lower(x: NDArray, lower: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """Pieces of a piecewise-linear lower bound of the convex increasing L from lower
    values at the coarse points: (breakpoints, value at each piece's start, at its end).

    In cell i, the max of the line through (x_i, L_i) with the previous cell's secant
    slope (floored at 0: L is increasing) and the line through (x_(i+1), L_(i+1)) with
    the next cell's secant slope; each secant is taken from the lower values with
    2 MARGIN added at one end, so that its slope errs on the safe side. The two lines
    cross once; the pieces are each line on its side of the crossing."""
    dx = x[1] - x[0]
    n = x.shape[0] - 1
    secant_lo = np.maximum((lower[1:] - (lower[:-1] + 2 * MARGIN)) / dx, 0.0)  # <= true
    secant_hi = np.maximum(((lower[1:] + 2 * MARGIN) - lower[:-1]) / dx, 0.0)  # >= true
    left_slope = np.concatenate([[0.0], secant_lo[:-1]])  # <= L'(x_i)
    right_slope = np.concatenate([secant_hi[1:], [np.inf]])  # >= L'(x_(i+1))
    a0, a1 = lower[:-1], lower[1:]
    has_right = np.isfinite(right_slope)
    rs = np.where(has_right, right_slope, 0.0)
    # left(t) = a0 + ls t, right(t) = a1 - rs (dx - t); left - right falls with t
    # when rs >= ls, so the left line holds up to the crossing and the right after
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = rs - left_slope
        cross = np.where(denom > 0, (a0 - a1 + rs * dx) / np.where(denom > 0, denom, 1.0), dx)
    cross = np.where(has_right, np.clip(cross, 0.0, dx), dx)
    left_at_cross = a0 + left_slope * cross
    right_at_cross = a1 - rs * (dx - cross)
    px = np.empty(2 * n + 1)
    px[0:-1:2] = x[:-1]
    px[1::2] = x[:-1] + cross
    px[-1] = x[-1]
    start = np.empty(2 * n)
    end = np.empty(2 * n)
    start[0::2], end[0::2] = a0, left_at_cross
    start[1::2] = np.where(has_right, right_at_cross, left_at_cross)
    end[1::2] = np.where(has_right, a1, left_at_cross)
    return px, start, end


def _dense(levels: NDArray, log_mass: NDArray, h: float, infinity: float) -> pld_pmf.DensePLDPmf:
    finite = np.isfinite(log_mass)
    levels, log_mass = levels[finite], log_mass[finite]
    lower = int(levels.min())
    mass = np.exp(log_mass) * (1 + 1e-12)
    probs = np.bincount(levels - lower, weights=mass)
    return pld_pmf.DensePLDPmf(h, lower, probs, min(1.0, infinity), True)
