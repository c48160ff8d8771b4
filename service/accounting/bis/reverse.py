"""The reverse divergence of balanced iteration subsampling with k = 1, certified.

The pair: P = (1/d) sum_t N(e_t, s^2 I_d) against Q = N(0, s^2 I_d) (sensitivity 1,
noise multiplier s). Under Q, P/Q = S = (1/d) sum_t Z_t with Z_t = exp(x_t / s^2 -
1 / (2 s^2)) i.i.d. lognormal of mean 1, so for every real order alpha > 1, with m =
alpha - 1,

    exp(m D_alpha(Q||P)) = E_Q[(Q/P)^m] = E[S^-m]
                         = (1/Gamma(m)) int_0^inf t^(m-1) E[exp(-t S)] dt      (x^-m = Laplace)
                         = (1/Gamma(m)) int_0^inf t^(m-1) e^(-t) exp(L(t)) dt,

    L(t) = d r(t/d),  r(u) = log E[exp(u (1 - Z))] = log(1 + E[h(u (1 - Z))]),

h(y) = e^y - 1 - y >= 0 (E[1 - Z] = 0, so the "1 +" is exact and r keeps its relative
precision where it is tiny). r is the cumulant generating function of 1 - Z: convex,
increasing on u >= 0, r(0) = 0, r' < 1 (Z > 0).

Every numerical step rounds up, so the result is an upper bound, not an estimate:

- r(u) (``_r_upper``): a sum over cells of a grid in g (Z = exp(g/s - 1/(2 s^2)),
  g ~ N(0, 1)) of an upper bound on the cell's integral of f(g) = h(u (1 - Z(g)))
  against the normal density, each the smallest of those that apply:
  max(f(a), f(b)) times the cell's mass (f decreases, then increases: the largest
  value on a cell is at an end); the chord where f is convex; the tangent at the
  midpoint where f is concave; the tangent of log f, integrated against the density
  bounded by e^(-v^2/2) <= 1, where log f is concave. f'' has the sign of
  1 - e^y (1 - w) with w = u Z, y = u - w: negative exactly below the root w0 of
  w - log(1 - w) = u, positive above it (the root is bracketed by bisection, widened by
  a relative 1e-12, and cells that meet the bracket use the other bounds only); log f
  is concave wherever Z < 1 ((log h)'' < 0 and h'(y) y'' < 0 there).
  Beyond the grid: f <= h(u) on the left (f increases towards -inf), f <= u Z on the
  right, whose normal integral is u Phi(-(c - 1/s)).
- L(t) on a geometric grid in t: L convex, so on each cell it is below the chord
  through the (upper) node values, and exp(chord) integrates against t^(m-1) e^-t in
  closed form (regularized incomplete gamma functions); where L is small, the chord
  of expm1(L) (convex too) is used instead, so that E[S^-m] - 1 keeps its relative
  precision (the cell's integral of t^(m-1) e^(-t) (e^L - 1)). Cells whose incomplete
  gamma values underflow use P(m, x) <= x^m / Gamma(m + 1) and
  Gamma(m, x) <= x^(m-1) e^-x / (1 - (m-1)/x).
- Beyond the grid's end T: the tail is E[S^-m Q(m, T S)] (Q: upper regularized
  incomplete gamma), and S >= G, the geometric mean of the Z_t (AM-GM), with
  x -> x^-m Q(m, T x) decreasing, so tail <= E[G^-m 1{G < c}] + Q(m, T c) E[G^-m]
  for every c > 0; log G ~ N(-1/(2 s^2), 1/(s^2 d)), both terms are closed forms.
- Rounding: every cell's value is raised by 1e-9 of the magnitudes it is computed
  from (scipy's incomplete gamma functions are accurate to about 1e-12 relative,
  and differences over one cell lose at most three more digits).

Orders whose tail cannot be made small before u = t/d reaches 600 (where e^u nears
the float range) get inf: the caller falls back to another bound.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

#: Width of the grid cells in g (normal scale) and growth factor of the grid in t.
_CELL = 0.005
_RHO = 1.007
_T_MIN = 1e-2
_U_MAX = 600.0
#: Relative rounding cover of every computed cell value.
_ROUND = 1e-9
#: log of the tail bound's target, relative to E[G^-m]: z-score and log Q(m, Tc).
_TAIL_Z = -14.0
_TAIL_LOGQ = -60.0

METHOD = (
    "exact D_alpha(Q||P) for one participation, any real order: E[S^-m] by its Laplace "
    "representation, every quadrature step rounded up (certified upper bound)"
)


def reverse_rdp_single(d: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """Upper bound on D_alpha(Q || P) for one participation in d steps (k = 1), at
    every real order alpha > 1 given; inf where not computed (see the module docstring
    for the formula, the numerical choices and why they only round up).

    d = 1 is the Gaussian mechanism: alpha / (2 s^2) exactly.
    """
    a = np.asarray(orders, dtype=np.float64)
    s = float(noise_multiplier)
    if d < 1 or s <= 0:
        raise ValueError(f"need d >= 1 and a positive noise multiplier, got {d}, {s}")
    if d == 1:
        return np.asarray(a / (2.0 * s * s))
    out = np.full(a.shape, np.inf)
    ms = a - 1.0
    log_cap = math.log(_U_MAX * d)
    log_t = np.array([min(_log_tail_end(m, d, s), log_cap) if m > 0 else np.inf for m in ms])
    # an order is worth computing if its tail bound at the grid's end leaves room below
    # the AM-GM bound exp(m A) (A = (1 + m/d) / (2 s^2)); others keep inf
    worth = np.array(
        [
            m > 0
            and _log_tail(m, math.exp(lt), d, s) < _log_expm1(m * (1 + m / d) / (2 * s * s)) - 3.0
            for m, lt in zip(ms, log_t, strict=True)
        ]
    )
    if not np.any(worth):
        return out
    t_end = math.exp(float(np.max(log_t[worth])))
    n = max(1, math.ceil(math.log(t_end / _T_MIN) / math.log(_RHO)))
    t = np.concatenate([[0.0], _T_MIN * _RHO ** np.arange(n + 1)])
    lvals = np.concatenate([[0.0], d * _r_upper(t[1:] / d, s)])
    for i in np.flatnonzero(worth):
        j = min(int(np.searchsorted(t, math.exp(log_t[i]))), t.shape[0] - 1)
        out[i] = _log_moment_upper(float(ms[i]), t[: j + 1], lvals[: j + 1], d, s) / ms[i]
    return out


def _log_expm1(x: float) -> float:
    return x + math.log(-math.expm1(-x)) if x > 1.0 else math.log(math.expm1(x))


# -- the inner integral r(u) ---------------------------------------------------


def _h(y: NDArray, em: NDArray) -> NDArray:
    """h(y) = e^y - 1 - y from em = expm1(y): the series below |y| = 1e-3, where the
    difference would lose digits (truncation error < y^7/5040 < 1e-19 y^2 there)."""
    near = np.clip(y, -1e-3, 1e-3)
    series = near * near * (0.5 + near * (1 / 6 + near * (1 / 24 + near * (1 / 120 + near / 720))))
    return np.where(np.abs(y) < 1e-3, series, em - y)


def _mass(a: NDArray, b: NDArray) -> NDArray:
    """Phi(b) - Phi(a) for a <= b, from the side where it does not cancel."""
    return np.where(a >= 0, special.ndtr(-a) - special.ndtr(-b), special.ndtr(b) - special.ndtr(a))


def _g_peak(u: float, s: float) -> float:
    """Where u (1 - Z(g)) - g^2 / 2 peaks (g = -(u/s) Z(g)): the left edge of the mass."""
    lo, hi = -60.0, 0.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if mid + (u / s) * math.exp(mid / s - 1.0 / (2 * s * s)) > 0:
            hi = mid
        else:
            lo = mid
    return lo


def _g_grid(s: float, u_max: float) -> NDArray:
    lo, hi = min(-7.0, _g_peak(u_max, s) - 8.0), 1.0 / s + 7.0
    core = np.linspace(lo, hi, math.ceil((hi - lo) / _CELL) + 1)
    left, right, step = [lo], [hi], _CELL
    while left[-1] > lo - 30.0:
        step *= 2.0
        left.append(left[-1] - step)
        right.append(right[-1] + step)
    return np.concatenate([left[::-1][:-1], core, right[1:]])


def _w0_bracket(u: NDArray) -> tuple[NDArray, NDArray]:
    """Lower and upper bounds on the root w0 in (0, 1) of w - log(1 - w) = u (u > 0)."""
    lo, hi = np.zeros_like(u), np.ones_like(u)
    with np.errstate(divide="ignore"):
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            below = mid - np.log1p(-mid) < u
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return lo * (1.0 - 1e-12), np.minimum(hi * (1.0 + 1e-12), 1.0)


def _r_upper(u: NDArray, s: float) -> NDArray:
    """Upper bound on r(u) = log(1 + E[h(u (1 - Z))]) at each u in (0, 600]."""
    g = _g_grid(s, float(np.max(u)))
    a, b = g[:-1], g[1:]
    c, width = 0.5 * (a + b), b - a
    mass = _mass(a, b)
    dens = np.exp(-0.5 * g * g) / math.sqrt(2 * math.pi)
    moment = (dens[:-1] - dens[1:]) - c * mass  # int (g - c) dPhi over the cell
    shift = -1.0 / (2 * s * s)
    zm1 = np.expm1(g / s + shift)
    # cells with Z < 1 throughout (a prefix): log f concave, f concave below g_lo
    n = int(np.searchsorted(b, 1.0 / (2 * s), side="right"))
    cl, wl, ml, mol = c[:n], width[:n], mass[:n], moment[:n]
    zm1_c, z_c = np.expm1(cl / s + shift), np.exp(cl / s + shift)
    dens_c = np.exp(-0.5 * cl * cl) / math.sqrt(2 * math.pi)
    w_lo, w_hi = _w0_bracket(u)
    with np.errstate(divide="ignore"):
        g_lo = s * np.log(w_lo / u) + 1.0 / (2 * s)  # f concave below, convex above [g_lo, g_hi]
        g_hi = s * np.log(w_hi / u) + 1.0 / (2 * s)
    out = np.empty(u.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(0, u.shape[0], 32):
            uu = u[i : i + 32, None]
            y = -uu * zm1
            f = _h(y, np.expm1(y))
            fa, fb = f[:, :-1], f[:, 1:]
            bound = np.maximum(fa, fb) * mass
            chord = 0.5 * (fa + fb) * mass + (fb - fa) * moment / width
            bound = np.where(a > g_hi[i : i + 32, None] + 1e-9, np.minimum(bound, chord), bound)
            yc = -uu * zm1_c
            emc = np.expm1(yc)
            fc = _h(yc, emc)
            dfc = -emc * uu * z_c / s
            x = 0.5 * (dfc / fc - cl) * wl
            log_tan = fc * dens_c * wl * np.where(np.abs(x) < 1e-8, 1.0, np.sinh(x) / x)
            head = bound[:, :n]
            head = np.where((fc > 0) & (log_tan < head), log_tan, head)
            tangent = fc * ml + dfc * mol
            concave = b[:n] < g_lo[i : i + 32, None] - 1e-9
            head = np.where(concave & (tangent < head), tangent, head)
            total = np.sum(head, axis=1) + np.sum(bound[:, n:], axis=1)
            u1 = uu[:, 0]
            left = np.exp(np.log(_h(u1, np.expm1(u1))) + special.log_ndtr(g[0]))
            right = u1 * special.ndtr(-(g[-1] - 1.0 / s))
            out[i : i + 32] = np.log1p((total + left + right) * (1.0 + _ROUND))
    return out


# -- the outer integral over t ---------------------------------------------------


def _gamma_cells(m: float, lo: NDArray, hi: NDArray) -> tuple[NDArray, NDArray]:
    """(value, exact) per cell of P(m, hi) - P(m, lo); where it underflows, an upper bound
    (exact False)."""
    pa, pb = special.gammainc(m, lo), special.gammainc(m, hi)
    qa, qb = special.gammaincc(m, lo), special.gammaincc(m, hi)
    val = np.where(hi <= m, pb - pa, np.where(lo >= m, qa - qb, (1.0 - pa) - qb))
    tiny_low = (hi <= m) & (pb < 1e-280)
    tiny_high = (lo >= m) & (qa < 1e-280)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        bound_low = np.exp(m * np.log(hi) - special.gammaln(m + 1.0))
        bound_high = np.exp(
            (m - 1.0) * np.log(lo) - lo - np.log1p(-max(m - 1.0, 0.0) / lo) - special.gammaln(m)
        )
    val = np.where(tiny_low, bound_low, np.where(tiny_high, bound_high, val))
    return np.maximum(val, 0.0), ~(tiny_low | tiny_high)


def _log_moment_upper(
    m: float, t: NDArray, lvals: NDArray, d: int, s: float, log_tail: float | None = None
) -> float:
    """Upper bound on log E[S^-m] from upper values of L on the grid t (t[0] = 0).

    Any convex L with L(0) = 0 and slope below 1 will do, with ``log_tail`` an upper
    bound on log of the part of the integral beyond t[-1] (default: the AM-GM tail of
    one participation in d steps, ``_log_tail``)."""
    ta, tb, la, lb = t[:-1], t[1:], lvals[:-1], lvals[1:]
    slope = (lb - la) / (tb - ta)
    icpt = la - slope * ta
    rate = 1.0 - slope
    # the exponential chord: (1/Gamma(m)) int t^(m-1) e^(icpt - rate t) over the cell
    ok = rate > 1e-3
    safe_rate = np.where(ok, rate, 1.0)
    pw, _ = _gamma_cells(m, safe_rate * ta, safe_rate * tb)
    with np.errstate(divide="ignore", over="ignore"):
        log_exp = np.where(ok, icpt - m * np.log(safe_rate) + np.log(pw), np.inf)
    # rate near 0 (u near 600 only): the integrand's largest value on the cell times its width
    with np.errstate(divide="ignore"):
        crude = (
            np.log(tb - ta)
            + np.maximum((m - 1) * np.log(np.maximum(ta, 1e-300)), (m - 1) * np.log(tb))
            + np.maximum(la - ta, lb - tb)
            - special.gammaln(m)
        )
    log_cell = np.where(ok, log_exp, crude)
    tail = _log_tail(m, float(t[-1]), d, s) if log_tail is None else log_tail
    log_total = float(special.logsumexp(np.append(log_cell, tail))) + math.log1p(_ROUND)
    if log_total > 0.5:  # E[S^-m] - 1 is not small: nothing cancels
        return log_total
    # E[S^-m] - 1 cell by cell: sum of int t^(m-1) e^-t (e^L - 1) minus Q(m, T)
    p0, exact0 = _gamma_cells(m, ta, tb)
    p1, exact1 = _gamma_cells(m + 1.0, ta, tb)
    small = lb < 1e-2  # the chord of expm1(L) there, the exponential chord elsewhere
    ga, gb = np.expm1(np.where(small, la, 0.0)), np.expm1(np.where(small, lb, 0.0))
    w_a = (tb * p0 - m * p1) / (tb - ta)  # int (tb - t) t^(m-1) e^-t / Gamma(m) / width
    w_b = (m * p1 - ta * p0) / (tb - ta)
    linear = ga * np.maximum(w_a, 0.0) + gb * np.maximum(w_b, 0.0)
    linear = linear + _ROUND * (ga + gb) * (tb * p0 + m * p1 + ta * p0) / (tb - ta)
    linear = np.where(exact0 & exact1, linear, gb * p0)
    with np.errstate(over="ignore"):
        expo = np.exp(log_exp) - np.where(exact0, p0, 0.0) + _ROUND * (np.exp(log_exp) + p0)
    cell = np.where(small, linear, expo)
    excess = float(np.sum(cell)) - special.gammaincc(m, t[-1]) * (1 - _ROUND) + math.exp(tail)
    return min(log_total, math.log1p(excess))


def _log_tail(m: float, t_end: float, d: int, s: float) -> float:
    """log of min over c of E[G^-m] (Phi(z_c) + Q(m, t_end c)) (module docstring)."""
    mu, var = -1.0 / (2 * s * s), 1.0 / (s * s * d)
    sd = math.sqrt(var)
    log_eg = -m * mu + m * m * var / 2.0
    log_c = np.linspace(mu - m * var - 40.0 * sd, mu + 5.0 * sd, 512)
    z = (log_c - (mu - m * var)) / sd
    x = t_end * np.exp(log_c)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_q = np.where(
            x > m + 1.0,
            (m - 1) * np.log(x) - x - np.log1p(-max(m - 1.0, 0.0) / x) - special.gammaln(m),
            0.0,
        )
    return float(log_eg + np.min(np.logaddexp(special.log_ndtr(z), np.minimum(log_q, 0.0))))


def _log_tail_end(m: float, d: int, s: float) -> float:
    """log T at which the tail bound is below exp(_TAIL_LOGQ) E[G^-m] or so."""
    mu, var = -1.0 / (2 * s * s), 1.0 / (s * s * d)
    log_c = mu - m * var + _TAIL_Z * math.sqrt(var)
    x = m + 1.0
    while (m - 1) * math.log(x) - x - math.log1p(-max(m - 1.0, 0.0) / x) - math.lgamma(
        m
    ) > _TAIL_LOGQ:
        x *= 1.1
    return math.log(x) - log_c
