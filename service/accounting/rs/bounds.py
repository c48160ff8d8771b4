"""Random selection (RS): release model i with probability pi_i.

Source: Section 5 of "Differentially Private Model Merging" (arXiv:2604.20985) (Theorems 5.1 and
5.2,
Algorithms 1 and 2). For a fixed order (RDP) or a fixed epsilon (PLD) the
privacy constraint is linear in pi, and so is the expected utility, so the
best mixture is a linear program whose optimum mixes at most 2 (RDP: one
constraint) or 3 (PLD: two constraints) models. Every returned pi is checked
against the target with the full bound before it is returned.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import linprog

from service.accounting.conversions import ORDERS, check_delta
from service.accounting.rdp.orders import best_epsilon, epsilon_any_order, minimize_over_orders

#: delta upper bounds of every candidate at one epsilon: (remove, add), each (N,).
DeltaAt = Callable[[float], tuple[NDArray, NDArray]]

# ---- bounds ---------------------------------------------------------------------


def conversion_offsets(orders: NDArray, delta: float) -> NDArray:
    """Per-order offset c_alpha with eps = rdp_alpha + c_alpha (Balle et al. 2020, Thm 21;
    never more than the classic log(1/delta) / (alpha - 1))."""
    improved = np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    classic = math.log(1 / delta) / (orders - 1)
    return np.asarray(np.minimum(improved, classic))


def rs_rdp(pi: ArrayLike, rdp: NDArray, orders: NDArray) -> NDArray:
    """Theorem 5.1: eps_alpha(pi) <= log(sum_i pi_i exp((alpha-1) eps_alpha,i)) / (alpha-1).

    ``rdp`` has one row per model, one column per order; log-sum-exp in log space;
    models with pi_i = 0 drop out (their infinite RDP does not count).
    """
    p = np.asarray(pi, dtype=np.float64)
    use = p > 0
    with np.errstate(divide="ignore"):
        terms = np.log(p[use])[:, None] + (orders[None, :] - 1) * rdp[use]
    top = np.max(terms, axis=0)
    finite = np.isfinite(top)
    out = np.full(orders.shape, np.inf)
    out[finite] = (top[finite] + np.log(np.sum(np.exp(terms[:, finite] - top[finite]), axis=0))) / (
        orders[finite] - 1
    )
    return out


def rs_rdp_epsilon(pi: ArrayLike, rdp: NDArray, orders: NDArray, delta: float) -> float:
    """Algorithm 1: min over orders of the RS RDP bound converted at delta."""
    check_delta(delta)
    eps = rs_rdp(pi, rdp, orders) + conversion_offsets(orders, delta)
    return max(0.0, float(np.min(eps)))


def rs_rdp_epsilon_any_order(
    pi: ArrayLike, rdp_at: Callable[[NDArray], NDArray], delta: float
) -> float:
    """Algorithm 1 with the order optimised over every real order > 1.

    ``rdp_at(orders)`` gives one row per model; any order yields a valid bound, so
    the search (``orders.minimize_over_orders``) only tightens ``rs_rdp_epsilon``.
    """
    check_delta(delta)
    value, _ = minimize_over_orders(
        lambda a: rs_rdp(pi, rdp_at(a), a) + conversion_offsets(a, delta)
    )
    return max(0.0, value)


def rs_pld_delta(pi: ArrayLike, remove: NDArray, add: NDArray) -> float:
    """Theorem 5.2: delta(eps) <= max(sum_i pi_i H(P_i||Q_i), sum_i pi_i H(Q_i||P_i)),
    each direction summed separately before the max. A direction whose sum is not a
    number (a curve tabulated as nan) counts as 1: Python's max keeps its first argument
    when the second is nan, which would drop that direction."""
    p = np.asarray(pi, dtype=np.float64)
    both = np.array([p @ remove, p @ add], dtype=np.float64)
    return 1.0 if bool(np.any(np.isnan(both))) else float(both.max())


# ---- planning ---------------------------------------------------------------------


@dataclass(frozen=True)
class RSPlan:
    pi: NDArray[np.float64]
    utility: float
    order: float | None = None  # the order whose linear constraint was tight (RDP)


def plan_rs_rdp(
    utility: NDArray, rdp: NDArray, orders: NDArray, epsilon: float, delta: float
) -> RSPlan | None:
    """The pi maximising sum_i pi_i u_i subject to Algorithm 1's bound <= epsilon.

    For each order the constraint is sum_i pi_i r_i <= 1 with
    r_i = exp((alpha-1)(eps_alpha,i + c_alpha - epsilon)); the optimum of a linear
    objective over the simplex cut by one half-space is a feasible vertex or a point
    on the cut between a feasible and an infeasible vertex, so every order and every
    pair is enumerated exactly (vectorised). None when nothing is feasible.
    """
    offsets = conversion_offsets(orders, delta)
    with np.errstate(over="ignore", invalid="ignore"):
        log_r = (orders[None, :] - 1) * (rdp + offsets[None, :] - epsilon)
        r = np.exp(np.minimum(log_r, 700.0))
    r = np.where(np.isnan(r), np.inf, r)
    n = utility.shape[0]
    best_u = -np.inf
    best: tuple[int, int | None, float, float] | None = None
    feasible = r <= 1.0  # (models, orders)
    for col in np.flatnonzero(feasible.any(axis=0)):
        f_idx = np.flatnonzero(feasible[:, col])
        k = f_idx[int(np.argmax(utility[f_idx]))]
        if utility[k] > best_u:
            best_u, best = float(utility[k]), (int(k), None, 0.0, float(orders[col]))
        # pairs: a feasible i and an infeasible j of higher utility, weight on the cut
        j_idx = np.flatnonzero(~feasible[:, col] & np.isfinite(r[:, col]))
        j_idx = j_idx[utility[j_idx] > best_u]
        if j_idx.size == 0:
            continue
        ri, rj = r[f_idx, col][:, None], r[j_idx, col][None, :]
        wj = (1.0 - ri) / (rj - ri)
        gain = utility[f_idx][:, None] + wj * (utility[j_idx][None, :] - utility[f_idx][:, None])
        a, b = np.unravel_index(int(np.argmax(gain)), gain.shape)
        if gain[a, b] > best_u and 0 < wj[a, b] < 1:
            best_u = float(gain[a, b])
            best = (int(f_idx[a]), int(j_idx[b]), float(wj[a, b]), float(orders[col]))
    if best is None:
        return None
    i, j, w, order = best
    pi = np.zeros(n)
    pi[i] = 1.0
    if j is not None:
        pi[i], pi[j] = 1.0 - w, w
    repaired = _repair(pi, lambda p: rs_rdp_epsilon(p, rdp, orders, delta) <= epsilon, i)
    if repaired is None:
        return None
    return RSPlan(pi=repaired, utility=float(repaired @ utility), order=order)


def plan_rs_pld(utility: NDArray, remove: NDArray, add: NDArray, delta: float) -> RSPlan | None:
    """The pi maximising sum_i pi_i u_i subject to Theorem 5.2's bound <= delta at the
    target epsilon (``remove``/``add``: each model's delta there). One linear program
    (HiGHS), constraints scaled by delta so its tolerances are relative."""
    n = utility.shape[0]
    safe = int(np.argmin(np.maximum(remove, add)))
    if max(remove[safe], add[safe]) > delta:
        return None
    res = linprog(
        c=-utility,
        A_ub=np.vstack([remove, add]) / delta,
        b_ub=np.ones(2),
        A_eq=np.ones((1, n)),
        b_eq=np.ones(1),
        bounds=[(0, None)] * n,
        method="highs",
    )
    pi = np.zeros(n)
    if res.status == 0:
        pi = np.clip(res.x, 0.0, None)
        pi /= pi.sum()
    else:
        pi[safe] = 1.0
    repaired = _repair(pi, lambda p: rs_pld_delta(p, remove, add) <= delta, safe)
    if repaired is None:
        return None
    return RSPlan(pi=repaired, utility=float(repaired @ utility))


def _repair(pi: NDArray, ok: Callable[[NDArray], bool], safe: int) -> NDArray | None:
    """Move weight toward the model at ``safe`` until ``ok(pi)`` holds.

    Only rounding (or an LP solver's feasibility tolerance) can make an optimum
    miss the target by a hair; the safe vertex itself is feasible.
    """
    if ok(pi):
        return pi
    vertex = np.zeros_like(pi)
    vertex[safe] = 1.0
    for t in (1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0):
        cand = (1 - t) * pi + t * vertex
        if ok(cand):
            return cand
    return None


def min_epsilon_rs_rdp(rdp: NDArray, orders: NDArray, delta: float) -> float:
    """Smallest epsilon any pi reaches under Algorithm 1: a log-sum-exp is at least
    its smallest term, so the best single model at its best order attains it."""
    offsets = conversion_offsets(orders, delta)
    return max(0.0, float(np.min(rdp + offsets[None, :])))


def planning_orders(rdp_ats: list[Callable[[NDArray], NDArray]], delta: float) -> NDArray:
    """ORDERS plus each model's best real order at ``delta``: on this grid the
    planner reaches every single-model epsilon that ``best_epsilon`` finds."""
    best = [best_epsilon(f, delta)[1] for f in rdp_ats]
    return np.union1d(ORDERS, np.asarray(best, dtype=np.float64))


def min_epsilon_rs_rdp_any_order(
    rdp_ats: list[Callable[[NDArray], NDArray]], delta: float
) -> float:
    """``min_epsilon_rs_rdp`` over every real order: the best single model's best order."""
    check_delta(delta)
    return min(epsilon_any_order(f, delta) for f in rdp_ats)


def rs_pld_epsilon(pi: NDArray, at: DeltaAt, delta: float) -> float:
    """Smallest epsilon (to 1e-9 relative) with Theorem 5.2's bound <= delta."""

    def ok(eps: float) -> bool:
        remove, add = at(eps)
        return rs_pld_delta(pi, remove, add) <= delta

    return bisect_epsilon(ok)


def min_epsilon_rs_pld(at: DeltaAt, delta: float) -> float:
    """Smallest epsilon at which some pi meets delta under Theorem 5.2.

    Mixing can beat every single model (one strong in each direction), so each
    bisection step asks the linear program min_pi max(pi.remove, pi.add) <= delta.
    """

    def ok(eps: float) -> bool:
        remove, add = at(eps)
        if float(np.min(np.maximum(remove, add))) <= delta:
            return True
        n = remove.shape[0]
        # variables: pi (n) and t; minimise t s.t. pi.remove <= t, pi.add <= t
        res = linprog(
            c=np.r_[np.zeros(n), 1.0],
            A_ub=np.vstack([np.r_[remove / delta, -1.0], np.r_[add / delta, -1.0]]),
            b_ub=np.zeros(2),
            A_eq=np.r_[np.ones(n), 0.0][None, :],
            b_eq=np.ones(1),
            bounds=[(0, None)] * (n + 1),
            method="highs",
        )
        if res.status != 0:
            return False
        pi = np.clip(res.x[:n], 0, None)
        pi /= pi.sum()
        return rs_pld_delta(pi, remove, add) <= delta

    return bisect_epsilon(ok)


def bisect_epsilon(ok: Callable[[float], bool], hi: float = 64.0) -> float:
    """Smallest epsilon in [0, hi] with ok(epsilon), to 1e-9 relative; inf if none.

    ``ok`` must be monotone (false below some epsilon, true above), as every
    delta(epsilon) <= target test is. The returned value satisfies ``ok``.
    """
    if ok(0.0):
        return 0.0
    if not ok(hi):
        return math.inf
    lo = 0.0
    while hi - lo > 1e-9 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
