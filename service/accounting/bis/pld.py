"""A certified privacy loss distribution of balanced iteration subsampling (BIS).

One participation in d steps (k = 1), sensitivity 1, noise multiplier s: the pair is
P = (1/d) sum_j N(e_j, s^2 I_d) against Q = N(0, s^2 I_d). Its likelihood ratio is
A = P/Q(x) = (1/d) sum_j w_j, w_j = exp(x_j / s^2 - 1 / (2 s^2)), i.i.d. lognormal
under Q with mean 1, so both hockey-stick curves are expectations over the Q-law of A:

    remove: H_g(P||Q) = E_Q[(A - g)_+],    add: H_g(Q||P) = E_Q[(1 - g A)_+].

Both integrands are convex in A. No published bound is used; the proof:

1. Convex order. Cut [0, W] into bins [a, a + h]. Given w_j in a bin, let Y_j be a with
   probability (a + h - w_j) / h and a + h otherwise (independently across j); on
   w_j > W let Y_j = w_j. Then E[Y_j | w] = w_j, so A_Y = (1/d) sum_j Y_j has
   E[A_Y | w] = A and, by Jensen, E f(A) <= E f(A_Y) for every convex f: both curves
   of A_Y are upper bounds. The split masses of a bin are E[(a + h - w); bin] / h at a
   and E[(w - a); bin] / h at a + h, integrals of the lognormal (``bis.grid``).
2. Truncation. The grid is 0, h, ..., (L - 1) h with W = L h. The law of Y_j on it
   (Y_j < W) raised to the d-th power by one FFT of length L is the law of the sum S_Y
   on {every Y_j < W}, with the sums of W or more wrapped onto smaller ones. As
   Y_j >= 0, {S_Y < W} lies inside that event, so the result is the law of S_Y on
   {S_Y < W} plus nonnegative wrapped mass (which only raises each curve, f >= 0).
   What is lost is E[f(A_Y); A_Y >= G], G = W / d:
   remove: at most E[A_Y; A_Y >= G] <= E[A_Y^a] / G^(a-1) <= (||A||_a + h)^a / G^(a-1)
   (Markov; |A_Y - A| <= h and Minkowski), where ||A||_a^a = E_Q[A^a] =
   exp((a - 1) D_a(P||Q)) is known exactly (``bis.forward``), minimised over integer
   orders, and added to every remove value; add: 0 wherever g >= 1 / G (then
   g A_Y >= 1), the only place the add curve is read. The two directions may use
   different grids (the add curve needs a fine h near 0, not a wide range).
3. PMFs. The curves are evaluated at every loss k * discretization in their range and
   turned into dp_accounting PMFs by connect-the-dots (``pld.gaussian.connect_dots``):
   the true curves are convex in g, so chords between upper bounds lie above them, and
   a negative mass (where the bounds are not convex) raised to 0 only raises delta.
4. k > 1 and epochs. A uniform k-subset is a mixture over permutations of one
   participation in each of k blocks of d // k or d // k + 1 steps (``bis.blocks``);
   hockey-stick divergences are jointly convex, so each curve of BIS is at most the
   largest over the permutations, and for every permutation the pair is a product
   over the blocks, i.e. the composition of one-participation pairs; epochs compose.
   A block of one step is the Gaussian mechanism (dp_accounting's PLD). Composing
   PMFs keeps their curves above the true ones: the composed delta at eps is
   sum_l q_l delta_p(eps - l), linear in p's curve with nonnegative weights (and the
   same with p and q swapped), which holds for any nonnegative masses, also where the
   rounding margins leave a total slightly above 1.

5. Heavy tails. Where the grid of steps 1-2 needs more than MAX_POINTS points (noise
   multipliers below about 0.6-0.8: the moments of A, hence W, grow fast), the lognormal
   is cut at C into a body on the grid and one tail draw on a geometric grid, with two
   or more tail draws bounded by their exact moments (``bis.heavy``, with its proof);
   only where that too is over MAX_POINTS does the profile use the RDP curve.

Numerics: suffix sums of the curves carry a margin of 2 n ulps of their magnitudes;
the split masses are rounded up and the FFT's rounding is bounded in l2 (``bis.grid``),
added to each curve value as ||err||_2 ||f||_2 (Cauchy-Schwarz). The tests hold the curves above
exact quadrature (d = 2, 3) and Monte Carlo bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pldlib
from numpy.typing import NDArray
from scipy import fft, special

from service.accounting.bis.forward import forward_rdp_single
from service.accounting.bis.grid import power_law, split_step, sum_law
from service.accounting.bis.heavy import ShiftedLaw, heavy_law
from service.accounting.bis.heavy import plan as heavy_plan
from service.accounting.bis.rdp import forward_rdp
from service.accounting.pld.gaussian import connect_dots, gaussian_step_pld

#: Default and largest bin width of the lognormal (on the scale of its mean, 1).
BIN_WIDTH = 0.01
MAX_BIN_WIDTH = 1.0
#: Most points of the FFT of one block (past it: no PLD, the RDP curve is used).
MAX_POINTS = 1 << 21
#: Tail level: the remove overflow bound and the range of losses kept.
TAIL = 1e-14
#: Orders for the Markov tail bound of step 2.
_ORDERS = np.arange(2.0, 257.0)

METHOD = (
    "certified PLD of one participation in d steps: the Q-law of the likelihood ratio "
    "(a mean of d lognormals) by a convex-order grid convolution, tail bounded by exact "
    "moments, connect-the-dots; k > 1 as k blocks of one participation; epochs composed"
)


@dataclass(frozen=True)
class SingleCurves:
    """The split sum's law on the grid and what the curves need."""

    values: NDArray  # A_Y at each grid point, i * h / d
    masses: NDArray  # its (sub-)probability from the FFT, negative values raised to 0
    fft_error: float  # l2 bound on the rounding of the masses
    overflow: float  # bound on E[A_Y; A_Y >= top]
    top: float  # G = L h / d
    reach: float = 0.0  # the remove losses are kept up to log(reach) at least

    @cached_property
    def _sums(self) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        m, mv = self.masses, self.masses * self.values
        zero = np.zeros(1)
        suffix = (np.concatenate([np.cumsum(x[::-1])[::-1], zero]) for x in (m, mv))
        prefix = (np.concatenate([zero, np.cumsum(x)]) for x in (m, mv))
        return (*suffix, *prefix)

    def _slack(self, a: NDArray, b: NDArray, norm_f: NDArray) -> NDArray:
        """Rounding of the sums (2 n ulps of their magnitudes) and of the FFT
        (Cauchy-Schwarz: |sum err_i f_i| <= ||err||_2 ||f||_2)."""
        n = self.masses.shape[0]
        return 2.0 * n * np.finfo(np.float64).eps * (a + b) + self.fft_error * norm_f

    def remove(self, eps: NDArray) -> NDArray:
        """E_Q[(A_Y - e^eps)_+] + overflow at each eps, rounded up."""
        g = np.exp(np.asarray(eps, dtype=np.float64))
        s0, s1, _, _ = self._sums
        i = np.searchsorted(self.values, g, side="right")
        a, b = s1[i], g * s0[i]
        # f = (v - g)_+ on the n - i points above g, each at most top - g
        norm_f = np.sqrt(self.masses.shape[0] - i) * np.maximum(self.top - g, 0.0)
        return np.maximum(a - b, 0.0) + self._slack(a, b, norm_f) + self.overflow

    def add(self, eps: NDArray) -> NDArray:
        """E_Q[(1 - e^eps A_Y)_+] at each eps >= -log(top), rounded up."""
        g = np.exp(np.asarray(eps, dtype=np.float64))
        if np.any(g * self.top < 1.0):
            raise ValueError("the add curve is only bounded for e^eps >= 1 / top")
        _, _, p0, p1 = self._sums
        i = np.searchsorted(self.values, 1.0 / g, side="left")
        a, b = p0[i], g * p1[i]
        # f = (1 - g v)_+ <= 1 on the i points below 1 / g
        return np.minimum(1.0, np.maximum(a - b, 0.0) + self._slack(a, b, np.sqrt(i)))


def _log_overflow(h: float, log_top: float, log_norms: NDArray) -> float:
    """log of (||A||_a + h)^a / G^(a-1), minimised over the orders (step 2)."""
    a = _ORDERS
    return float(np.min(a * np.logaddexp(log_norms, math.log(h)) - (a - 1.0) * log_top))


def _log_norms(d: int, sigma: float) -> NDArray:
    """log ||A||_a = (a - 1) D_a(P||Q) / a at the orders: the exact D_a (rounded up),
    or Theorem 3.1 eq. (3) where that is lower or the exact one is not computed."""
    rdp = np.fmin(forward_rdp_single(d, sigma, _ORDERS), forward_rdp(d, 1, sigma, _ORDERS))
    return np.asarray((_ORDERS - 1.0) * rdp / _ORDERS)


def _log_top(h: float, log_norms: NDArray) -> float:
    """Smallest log G whose overflow bound is TAIL."""
    a = _ORDERS
    return float(np.min((a * np.logaddexp(log_norms, math.log(h)) - math.log(TAIL)) / (a - 1)))


def plan_grid(d: int, sigma: float) -> tuple[tuple[float, int, float], tuple[float, int]] | None:
    """Grids of one block: remove (h, L, log overflow), add (h, L); None when the remove
    grid needs more than MAX_POINTS.

    Remove: h = BIN_WIDTH, coarser (up to MAX_BIN_WIDTH) to fit MAX_POINTS; G the
    smallest with an overflow bound of TAIL. Add (only A_Y < 1 / g matters, for g >= 1 / G):
    h finer where P(w < h)^d is above 1e-13 (the first bin sends that mass to A_Y = 0, an
    infinite add loss), G as large as fits, at most the remove one.
    """
    log_norms = _log_norms(d, sigma)
    h = BIN_WIDTH
    for _ in range(4):
        points = d * math.exp(_log_top(h, log_norms)) / h + 2.0
        if points <= MAX_POINTS:
            break
        if h >= MAX_BIN_WIDTH:
            return None
        h = min(MAX_BIN_WIDTH, h * points / MAX_POINTS * 1.01)
    else:
        return None
    size = int(fft.next_fast_len(math.ceil(points), real=True))
    remove = (h, size, _log_overflow(h, math.log(size * h / d), log_norms))
    # the quantile of w at level 1e-13^(1/d): z = s log w + 1 / (2 s)
    z = float(special.ndtri(math.exp(math.log(1e-13) / d)))
    h_add = min(h, 0.1 * math.exp((z - 1.0 / (2.0 * sigma)) / sigma))
    top = min(size * h / d, 2.0)
    if d * top / h_add > MAX_POINTS:
        h_add = d * top / MAX_POINTS
    top = min(size * h / d, MAX_POINTS * h_add / d)
    if h_add == h and top == size * h / d:
        return remove, (h, size)
    return remove, (h_add, int(fft.next_fast_len(math.ceil(d * top / h_add), real=True)))


@dataclass(frozen=True)
class HeavyCurves:
    """Both curves of ``bis.heavy``: the m = 0 law plus the one-tail-draw term."""

    body: SingleCurves
    shifted: ShiftedLaw
    d: int
    add_extra: float

    values = property(lambda self: self.body.values)
    masses = property(lambda self: self.body.masses)
    fft_error = property(lambda self: self.body.fft_error)
    top = property(lambda self: self.body.top)
    reach = property(lambda self: self.body.reach)

    def remove(self, eps: NDArray) -> NDArray:
        return np.asarray(self.body.remove(eps) + self.shifted.remove(self.d, eps))

    def add(self, eps: NDArray) -> NDArray:
        total = self.body.add(eps) + self.shifted.add(self.d, eps) + self.add_extra
        return np.minimum(1.0, total)


Curves = SingleCurves | HeavyCurves


def single_curves(d: int, sigma: float) -> tuple[Curves, Curves] | None:
    """The law of A_Y (steps 1-2) for one participation in d steps on the remove and the
    add grids; past MAX_POINTS step 5; None if that too is too large."""
    if d < 2:
        raise ValueError(f"d must be at least 2, got {d}")
    if not sigma > 0:
        raise ValueError(f"noise multiplier must be positive, got {sigma}")
    plan = plan_grid(d, sigma)
    if plan is None:
        return _heavy_curves(d, sigma)
    (h, size, log_over), add = plan
    remove = SingleCurves(*sum_law(d, sigma, h, size), math.exp(log_over), size * h / d)
    if add == (h, size):
        return remove, remove
    # no overflow term: the add curve is only read where g A_Y >= 1 past the grid
    h, size = add
    return remove, SingleCurves(*sum_law(d, sigma, h, size), math.inf, size * h / d)


def _heavy_curves(d: int, sigma: float) -> tuple[Curves, Curves] | None:
    grid = heavy_plan(d, sigma, BIN_WIDTH, MAX_POINTS)
    if grid is None:
        return None
    law = heavy_law(d, sigma, *grid)
    body = SingleCurves(*law.body, law.remove_extra, law.top, law.reach)
    curves = HeavyCurves(body, law.shifted, d, law.add_extra)
    return curves, _short_add(d, sigma, grid[0]) or curves


def _short_add(d: int, sigma: float, h: float) -> SingleCurves | None:
    """The add curve for A up to G = 2 with no wrap-around, on a grid finer than h (None
    if none fits): f = (1 - g A)_+ is 0 where A >= 1 / g, so for g >= 1 / G only draws
    below C = d G matter; the split of w < C raised to the d-th power on d C / h + 1
    points holds every sum exactly, and the draws dropped (some w_j > C) have g A > 1.
    For small d: the heavy grid's first bin sends P(w < h)^d to an infinite add loss."""
    z = float(special.ndtri(math.exp(math.log(1e-13) / d)))
    fine = max(0.1 * math.exp((z - 1.0 / (2.0 * sigma)) / sigma), 2.02 * d * d / MAX_POINTS)
    h_add = min(h, BIN_WIDTH, fine)
    bins = math.ceil(d * 2.0 / h_add)
    size = int(fft.next_fast_len(d * bins + 1, real=True))
    if size > MAX_POINTS or h_add >= h:
        return None
    ((masses, error),) = power_law(split_step(sigma, h_add, size, bins), d)
    values = h_add * np.arange(size, dtype=np.float64) / d
    return SingleCurves(values, masses, error, math.inf, bins * h_add / d)


def _loss_range(
    remove: Curves, add: Curves, disc: float
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Grid indices of the losses kept, remove and add: where the law of A_Y leaves less
    than TAIL of the mass (of P for remove, of Q for add) beyond them. Any range is
    sound: below it the chord from (0, 1), above it the last value at the infinite loss,
    both lie above the convex curve (which is nonincreasing)."""

    def ends(curves: Curves, weight: bool) -> tuple[float, float]:
        v = curves.values
        # masses within the FFT's rounding are noise: they do not set the range
        m = np.where(curves.masses > curves.fft_error, curves.masses, 0.0)
        m = m * v if weight else m
        last = v.shape[0] - 1
        lo = max(1, int(np.searchsorted(np.cumsum(m), TAIL, side="right")))
        hi = last - int(np.searchsorted(np.cumsum(m[::-1]), TAIL, side="right"))
        low, high = float(v[min(lo, last)]), float(min(curves.top, v[min(hi + 1, last)]))
        # where no mass stands above the rounding noise, the grid's first positive value
        # (any range is sound; this one keeps the logarithms finite)
        floor = float(v[min(1, last)])
        return max(low, floor), max(high, floor)

    low, high = ends(remove, True)
    r_lo = math.floor(math.log(low) / disc)
    r_hi = max(r_lo + 1, math.ceil(math.log(max(high, remove.reach)) / disc))
    low, high = ends(add, False)
    a_lo = max(math.ceil(-math.log(high) / disc), math.ceil(-math.log(add.top) / disc))
    a_hi = max(a_lo + 1, math.ceil(-math.log(low) / disc))
    return (r_lo, r_hi), (a_lo, a_hi)


def single_pld(
    d: int,
    sigma: float,
    discretization: float,
    cache: dict[int, tuple[Curves, Curves] | None] | None = None,
) -> pldlib.PrivacyLossDistribution | None:
    """The pessimistic PLD of one participation in d steps (None when over MAX_POINTS);
    ``cache`` keeps the law of A_Y by d across grid widths."""
    if d == 1:
        return gaussian_step_pld(sigma, 1.0, discretization)
    cache = {} if cache is None else cache
    if d not in cache:
        cache[d] = single_curves(d, sigma)
    curves = cache[d]
    if curves is None:
        return None
    rem, add_curves = curves
    (r_lo, r_hi), (a_lo, a_hi) = _loss_range(rem, add_curves, discretization)
    k_r = np.arange(r_lo, r_hi + 1)
    k_a = np.arange(a_lo, a_hi + 1)
    remove = np.minimum(1.0, rem.remove(k_r * discretization))
    add = add_curves.add(k_a * discretization)
    return pldlib.PrivacyLossDistribution(
        connect_dots(r_lo, k_r * discretization, remove, discretization),
        connect_dots(a_lo, k_a * discretization, add, discretization),
    )
