"""Balanced iteration subsampling: each example takes part in exactly k of d steps.

Source: "Leveraging Randomness in Model and Data Partitioning for Privacy Amplification" (Dong,
Chen, Ozgur), Theorem 3.1 (with Theorem 3.8:
d = T iterations, k participations, sensitivity c, noise std sigma, so
c / sigma = 1 / noise_multiplier). The mechanism is P = mean over the k-subsets
mu of N(c mu, sigma^2 I_d) against Q = N(0, sigma^2 I_d).

One participation (k = 1) is computed exactly in both directions: ``bis.forward``
(D_alpha(P||Q), integer orders) and ``bis.reverse`` (D_alpha(Q||P), certified quadrature,
any real order). k > 1 adds the block reduction (``forward_rdp_blocks``) to the paper's
bounds. ``per_epoch_rdp`` takes, per order, the smallest valid bound of each direction
and the larger direction.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from service.accounting.bis.forward import forward_rdp_single
from service.accounting.bis.reverse import reverse_rdp_single

#: What the profile says about how each direction was bounded.
FORWARD_METHOD = (
    "D_alpha(P||Q): per order the smallest of the exact value (k = 1: E[S^alpha] from the "
    "d-th power of the moments' generating series, every integer order; k > 1: Theorem "
    "3.1's eq. (2) first term by Lemma 3.12 where tractable), eq. (3)'s first term, and "
    "(k > 1) the block reduction: k compositions of one participation in d // k or "
    "d // k + 1 steps, each exact"
)
REVERSE_METHOD = (
    "D_alpha(Q||P): per order the smaller of the AM-GM bound c^2 k / (2 sigma^2) "
    "(1 + (alpha - 1) k / d) and the exact one-participation divergence (Laplace transform "
    "of E[S^-m], certified quadrature), composed over the k blocks for k > 1; the paper's "
    "second term is not used (it falls below numerical integration)"
)
#: Most (overlap, order) terms eq. (3) evaluates (memory and time stay bounded for any
#: k the schema accepts, up to 10^9).
EQ3_MAX_CELLS = 4_000_000

#: Labels of the bounds, as ``certified_by`` reports them.
LABELS = {
    "forward_exact": "forward: exact (Lemma 3.12; moments' power series for k = 1)",
    "forward_eq3": "forward: Theorem 3.1 eq. (3)",
    "forward_blocks": "forward: k blocks of one participation",
    "reverse_exact": "reverse: exact (Laplace transform)",
    "reverse_blocks": "reverse: k blocks of one participation, each exact",
    "reverse_amgm": "reverse: AM-GM",
}


def forward_rdp(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """D_alpha(P || Q) <= log( sum_l C(k,l) C(d-k,k-l) / C(d,k) * exp(alpha c^2 l / (2 sigma^2)) ).

    Source: Theorem 3.1, eq. (3), first term (via Lemma 3.13 and Corollary 3.14).
    Valid for integer alpha >= 2; computed in log space (log-sum-exp of the
    hypergeometric weights), exact up to rounding. The sum has one term per possible
    overlap l of two k-subsets; past ``EQ3_MAX_CELLS`` terms times orders it is not
    computed (inf: the profile takes the other bounds, which are computed for any k).
    """
    a = np.asarray(orders, dtype=np.float64)
    lam = 1.0 / (2.0 * noise_multiplier**2)
    low = max(0, 2 * k - d)  # the overlap l of two k-subsets of d steps is at least this
    if (k - low + 1) * max(1, a.size) > EQ3_MAX_CELLS:
        return np.full(a.shape, np.inf)  # not computed here: the other bounds hold
    l_vals = np.arange(low, k + 1, dtype=np.float64)
    log_w = (
        _log_binom(k, l_vals) + _log_binom(d - k, k - l_vals) - float(_log_binom(d, np.array(k)))
    )
    terms = log_w[None, :] + a[:, None] * lam * l_vals[None, :]
    return np.asarray(special.logsumexp(terms, axis=1))


def reverse_rdp(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """A proven bound on D_alpha(Q || P):

    exp((alpha-1) D_alpha(Q||P)) = E_Q[(P/Q)^(1-alpha)], and P/Q(x) is the mean over
    mu of exp(c mu.x / sigma^2 - c^2 k / (2 sigma^2)), which by AM-GM is at least
    exp(c (k/d) sum_i x_i / sigma^2 - c^2 k / (2 sigma^2)) (the mean of mu is (k/d) 1).
    Since 1 - alpha < 0, E_Q[(P/Q)^(1-alpha)] <= exp((alpha-1) c^2 k / (2 sigma^2)
    + (alpha-1)^2 c^2 k^2 / (2 d sigma^2)), i.e.
    D_alpha(Q||P) <= c^2 k / (2 sigma^2) * (1 + (alpha - 1) k / d), for every alpha > 1.
    Looser than the paper's reverse term, which is not a valid bound.
    """
    a = np.asarray(orders, dtype=np.float64)
    lam = 1.0 / (2.0 * noise_multiplier**2)
    return np.asarray(lam * k * (1.0 + (a - 1.0) * k / d))


#: The random-allocation formula for the reverse direction. NOT a bound for this pair:
#: numerical integration puts D_alpha(Q||P) above it (d = 2, k = 1, sigma = 1, alpha = 3:
#: 0.8401 against 0.8168), so profiles do not use it.
ALLOCATION_METHOD = (
    "random allocation (Feldman and Shenfeld 2025, arXiv 2502.08202): RDP of the add "
    "direction, k of d steps, integer orders >= 2"
)


def reverse_rdp_allocation(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """The random-allocation formula for D_alpha(Q || P), k of d steps, at integer
    orders alpha >= 2; inf elsewhere. Kept for comparison only: it falls below the
    exact D_alpha(Q || P) of the pair (P = mean over k-subsets mu of N(mu, sigma^2 I),
    Q = N(0, sigma^2 I)) computed by quadrature, so it is not an upper bound for it.

    Source: Feldman and Shenfeld 2025, arXiv 2502.08202, the RDP bound of the add
    direction: with x = k (d - k) / (sigma^2 d^2),

        D_alpha <= alpha k^2 / (2 sigma^2 d) + alpha k (d - k) / (2 sigma^2 d (alpha - 1))
                   - d log(1 + alpha (e^x - 1)) / (2 (alpha - 1)).

    Computed with log1p/expm1 (the last two terms nearly cancel for large d).
    """
    a = np.asarray(orders, dtype=np.float64)
    s2 = noise_multiplier**2
    x = k * (d - k) / (s2 * d * d)
    with np.errstate(invalid="ignore", divide="ignore"):
        first = a * k * k / (2.0 * s2 * d)
        second = a * k * (d - k) / (2.0 * s2 * d * (a - 1.0))
        third = d * np.log1p(a * math.expm1(x)) / (2.0 * (a - 1.0))
        out = first + second - third
        # the last two terms nearly cancel: a margin of a few ulps of the largest
        # covers the rounding of the difference
        out = out + 8.0 * np.finfo(np.float64).eps * (first + second + np.abs(third))
    ok = (a >= 2) & (np.floor(a) == a) & np.isfinite(out)
    return np.where(ok, np.maximum(out, 0.0), np.inf)


def _log_binom(n: int | float, r: NDArray) -> NDArray:
    return np.asarray(special.gammaln(n + 1) - special.gammaln(r + 1) - special.gammaln(n - r + 1))


def forward_rdp_exact(
    d: int, k: int, noise_multiplier: float, orders: ArrayLike, max_work: int = 20_000
) -> NDArray:
    """D_alpha(P || Q) exactly at integer orders, by Lemma 3.12 (eq. (2), first term).

    Lemma 3.12 is an identity for integer alpha:
    exp((alpha-1) D) = E[exp(c^2 / (2 sigma^2) sum_{i != j} mu_i . mu_j)] over alpha
    independent uniform k-subsets mu_1..mu_alpha, and sum_{i != j} mu_i . mu_j =
    ||n||^2 - alpha k where n counts how often each of the d coordinates was picked.
    A dynamic program over the multiset of counts (the distribution is symmetric in
    the coordinates) adds one subset at a time; each transition picks j_v of the m_v
    coordinates currently at count v, with probability prod_v C(m_v, j_v) / C(d, k).
    Order alpha is read off after alpha steps, so one pass serves every order.
    Orders that are not integers >= 2, or that the pass does not reach within
    ``max_work`` transitions, get NaN (not computed).
    """
    a = np.asarray(orders, dtype=np.float64)
    out = np.full(a.shape, np.nan)
    wanted = {int(x) for x in a if float(x).is_integer() and x >= 2}
    if not wanted:
        return out
    if k == d:  # every step: the Gaussian mechanism with shift sqrt(k)
        ints = np.array([float(x).is_integer() and x >= 2 for x in a])
        return np.where(ints, a * k / (2.0 * noise_multiplier**2), np.nan)
    lam = 1.0 / (2.0 * noise_multiplier**2)
    log_total = _log_comb(d, k)
    states: dict[tuple[int, ...], float] = {(d,): 0.0}  # histogram m_v by count v -> log prob
    work = 0
    for step in range(1, max(wanted) + 1):
        nxt: dict[tuple[int, ...], list[float]] = {}
        for hist, logp in states.items():
            # never enumerated past the work left: a large k has astronomically many
            choices = _choices(hist, k, limit=max_work - work)
            if choices is None:
                return out
            work += len(choices)
            for choice in choices:
                new = [*hist, 0]
                log_ways = 0.0
                for v, j in enumerate(choice):
                    if j:
                        log_ways += _log_comb(hist[v], j)
                        new[v] -= j
                        new[v + 1] += j
                while new and new[-1] == 0:
                    new.pop()
                nxt.setdefault(tuple(new), []).append(logp + log_ways - log_total)
        states = {h: _logsumexp(v) for h, v in nxt.items()}
        if step in wanted:
            terms = [
                logp + lam * (sum(v * v * m for v, m in enumerate(hist)) - step * k)
                for hist, logp in states.items()
            ]
            out[a == step] = _logsumexp(terms) / (step - 1)
    return out


def _log_comb(n: int, r: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def _choices(hist: tuple[int, ...], k: int, limit: int) -> list[tuple[int, ...]] | None:
    """All ways to pick k coordinates: j_v from the m_v coordinates at each count v; None
    when there are more than ``limit`` of them, found without enumerating past that
    (the search also stops after ``SEARCH_FACTOR * limit`` steps that find nothing)."""
    out: list[tuple[int, ...]] = []
    last = len(hist) - 1
    budget = [SEARCH_FACTOR * max(limit, 0) + 1024]

    def rec(v: int, left: int, acc: list[int]) -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        if v == last:  # the last count takes what is left, if it can
            if left <= hist[v]:
                out.append((*acc, left))
            return len(out) <= limit
        return all(rec(v + 1, left - j, [*acc, j]) for j in range(min(hist[v], left) + 1))

    return out if rec(0, k, []) else None


#: steps the enumeration of choices may take per choice allowed, before it gives up
SEARCH_FACTOR = 64


# -- k participations as k blocks of one --------------------------------------------


def blocks(d: int, k: int) -> list[tuple[int, int]]:
    """(size, count) of the k blocks: d % k blocks of d // k + 1 steps, the rest d // k."""
    q, r = divmod(d, k)
    return [(size, count) for size, count in ((q + 1, r), (q, k - r)) if count]


def forward_rdp_blocks(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """D_alpha(P || Q) <= sum over the blocks of D_alpha of one participation in the block.

    The block reduction (both directions, every order alpha > 1). Draw a uniform
    permutation pi of the d steps, cut it into the k blocks of ``blocks(d, k)``, and pick
    one step uniformly in each block. The law of the chosen k-subset is invariant under
    every relabelling of the steps (pi is uniform), and permutations act transitively on
    k-subsets, so the subset is uniform: P = E_pi[P_pi], with P_pi the mechanism that puts
    one participation in each block of pi. Q does not depend on pi. E_Q[(P/Q)^alpha] and
    E_Q[(Q/P)^(alpha-1)] = int Q^alpha P^(1-alpha) are convex in P (x^alpha and x^(1-alpha)
    are convex for alpha > 1), so both divergences of P are at most the largest over pi
    of those of P_pi. P_pi and Q are products over the blocks (disjoint coordinates,
    independent choices), so each divergence is the sum over blocks of the divergence of
    one participation in |block| steps, whatever pi is. Feldman and Shenfeld (2025,
    arXiv 2502.08202) use the same reduction with k blocks of d // k steps; the exact
    block sizes here need no monotonicity in the number of steps.
    Checked against exact enumeration (forward) and quadrature (reverse) for d = 4, k = 2;
    d = 6, k = 2 and 3 (tests/unit/test_bis_exact.py).

    Each block: the exact forward divergence of one participation (``forward_rdp_single``).
    """
    a = np.asarray(orders, dtype=np.float64)
    total = np.zeros(a.shape)
    for size, count in blocks(d, k):
        total = total + count * _forward_single_best(size, noise_multiplier, a)
    return total


def _forward_single_best(d: int, noise_multiplier: float, orders: NDArray) -> NDArray:
    """One participation: the exact value (``forward_rdp_single``), or eq. (3) where that
    is lower (only by the exact value's rounding cover)."""
    exact = forward_rdp_single(d, noise_multiplier, orders)
    return np.fmin(exact, forward_rdp(d, 1, noise_multiplier, orders))


def reverse_rdp_blocks(d: int, k: int, noise_multiplier: float, orders: ArrayLike) -> NDArray:
    """D_alpha(Q || P) <= sum over the blocks of the exact reverse divergence of one
    participation in the block (``reverse_rdp_single``), by the block reduction
    (``forward_rdp_blocks``). inf at orders where a block's value is not computed."""
    a = np.asarray(orders, dtype=np.float64)
    total = np.zeros(a.shape)
    for size, count in blocks(d, k):
        total = total + count * reverse_rdp_single(size, noise_multiplier, a)
    return total


def per_epoch_rdp(
    d: int, k: int, noise_multiplier: float, orders: ArrayLike
) -> tuple[NDArray, dict[str, list[float]]]:
    """RDP of one epoch at integer orders alpha >= 2: max over the two directions of the
    smallest valid bound of each (see FORWARD_METHOD and REVERSE_METHOD), and which bound
    certified each order (the smallest bound of the larger direction), by label."""
    a = np.asarray(orders, dtype=np.float64)
    if k == 1:
        exact = forward_rdp_single(d, noise_multiplier, a)
    else:
        exact = forward_rdp_exact(d, k, noise_multiplier, a)
    forward = {
        "forward_eq3": forward_rdp(d, k, noise_multiplier, a),
        "forward_exact": np.where(np.isnan(exact), np.inf, exact),
    }
    if k > 1:
        forward["forward_blocks"] = forward_rdp_blocks(d, k, noise_multiplier, a)
    fwd = np.min(np.stack(list(forward.values())), axis=0)
    amgm = reverse_rdp(d, k, noise_multiplier, a)
    reverse = {"reverse_amgm": amgm}
    # the tighter reverse bound only matters where AM-GM is above the forward bound
    need = amgm > fwd
    tight = np.full(a.shape, np.inf)
    if np.any(need) and k == 1:
        tight[need] = reverse_rdp_single(d, noise_multiplier, a[need])
    elif np.any(need):
        tight[need] = reverse_rdp_blocks(d, k, noise_multiplier, a[need])
    reverse["reverse_exact" if k == 1 else "reverse_blocks"] = tight
    fwd_names, rev_names = list(forward), list(reverse)
    fwd_all = np.stack([forward[n] for n in fwd_names])
    rev_all = np.stack([reverse[n] for n in rev_names])
    fwd, rev = fwd_all.min(axis=0), rev_all.min(axis=0)
    certified: dict[str, list[float]] = {}
    for i, alpha in enumerate(a):
        if fwd[i] >= rev[i]:
            name = fwd_names[int(np.argmin(fwd_all[:, i]))]
        else:
            name = rev_names[int(np.argmin(rev_all[:, i]))]
        certified.setdefault(LABELS[name], []).append(float(alpha))
    return np.maximum(fwd, rev), certified


def certified_note(certified: dict[str, list[float]], orders: NDArray) -> str:
    """One line for users: the bound that certified each order, as runs of adjacent orders."""
    index = {float(a): i for i, a in enumerate(orders)}
    parts = []
    for label, used in certified.items():
        idx = sorted(index[a] for a in used)
        runs, start = [], idx[0]
        for j, i in enumerate(idx):
            if j + 1 == len(idx) or idx[j + 1] != i + 1:  # a run ends at i
                runs.append(f"{orders[start]:g}" + ("" if start == i else f"-{orders[i]:g}"))
                start = idx[j + 1] if j + 1 < len(idx) else start
        parts.append(f"{label} at orders {', '.join(runs)}")
    return "RDP per order certified by: " + "; ".join(parts)
