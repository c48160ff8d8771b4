"""Groups of DP-SGD step configurations for the PLD, chosen by what they cost in RDP.

A schedule may have thousands of distinct (q, sigma) step configurations; the PLD's
work grows with the groups it composes, so nearly equal configurations may be merged.
A group is accounted as its *dominating* configuration (largest q, smallest sigma):
every member is a post-processing of it (Poisson subsampling at rate q is subsampling
at rate q' >= q followed by keeping each draw with probability q / q'; more noise is
less noise plus independent noise), so the merged composition is an upper bound, never
optimistic.

What merging loses is measured in RDP, which composes every distinct configuration
exactly: configurations are sorted by their per-step RDP and cut into consecutive
groups. A group's rise is count * RDP(dominating) - sum of its members' RDP, at each of
a few orders that span the useful range (CHECK_ORDERS). ``group_steps`` closes a group
as soon as its rise would pass ``budget`` times its own RDP (the total then rises by at
most ``budget`` relative at each order). ``groups_within`` must fit a number of groups:
it also lets a group rise by up to ``share`` times the schedule's total RDP, and searches
the smallest share that fits. Equal absolute rises are the right shape: a group of width
w where configurations have density rho and cost slope c rises by about c rho w^2 / 2, and
minimising the sum of rises over a fixed number of groups gives equal rises (Lagrange:
c rho w^2 / 2 = lambda), so groups are narrow where steps cost much or crowd together.

The work is one vectorised RDP evaluation of every configuration, plus one for each
candidate group whose dominating configuration is not one of its members: it grows
with the distinct configurations, never with the steps.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.accounting.rdp.gaussian import subsampled_gaussian_rdp

#: Relative RDP rise allowed per group (and so in total).
DEFAULT_BUDGET = 5e-4
#: Integer orders at which the rise is checked: from large-epsilon to tiny-epsilon optima.
CHECK_ORDERS = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 256.0])
#: Most searches of the share of the total a group may rise by.
_SEARCHES = 12
#: Group lengths tabulated for every start at once (longer groups are grown one by one).
_SHORT = 32

Group = tuple[float, float, int]

# every term k = 2..alpha of every check order, side by side (see _check_rdp)
_ALPHA = np.concatenate([np.full(int(a) - 1, a) for a in CHECK_ORDERS])
_K = np.concatenate([np.arange(2.0, a + 1) for a in CHECK_ORDERS])
_LOG_BINOM = (
    special.gammaln(_ALPHA + 1) - special.gammaln(_K + 1) - special.gammaln(_ALPHA - _K + 1)
)
_SEGMENTS = np.concatenate([[0], np.cumsum(CHECK_ORDERS[:-1] - 1)]).astype(np.int64)


def _check_rdp(q: NDArray, sigma: NDArray) -> NDArray:
    """RDP at every order of CHECK_ORDERS of each (q, sigma), in one pass: (pairs, orders).

    Source: Mironov, Talwar, Zhang 2019, Section 3.3, integer orders:
    A_alpha - 1 = sum_{k>=2} C(alpha, k) q^k (1-q)^(alpha-k) expm1((k^2 - k) / (2 sigma^2)),
    all terms positive (log-sum-exp exact to rounding), rdp = log1p(A_alpha - 1) / (alpha - 1),
    as ``rdp.subsampled_gaussian_rdp`` computes it order by order; here all orders of a
    few pairs go in one array, which is what the grouping search asks for thousands of
    times. Used to choose groups, never as a bound.
    """
    with np.errstate(divide="ignore"):
        log_q, log_1mq = np.log(q)[:, None], np.log1p(-q)[:, None]
    x = (_K * _K - _K)[None, :] / (2.0 * sigma[:, None] ** 2)
    log_expm1 = np.where(x > 30.0, x + np.log1p(-np.exp(-np.minimum(x, 700.0))), 0.0)
    small = x <= 30.0
    log_expm1[small] = np.log(np.expm1(x[small]))
    with np.errstate(invalid="ignore"):
        terms = _LOG_BINOM + _K * log_q + np.where(_ALPHA > _K, (_ALPHA - _K) * log_1mq, 0.0)
    terms = terms + log_expm1
    top = np.maximum.reduceat(terms, _SEGMENTS, axis=1)
    sizes = np.diff(np.concatenate([_SEGMENTS, [_K.shape[0]]]))
    total = np.add.reduceat(np.exp(terms - np.repeat(top, sizes, axis=1)), _SEGMENTS, axis=1)
    return np.logaddexp(0.0, np.log(total) + top) / (CHECK_ORDERS - 1.0)


class _Sorted:
    """Configurations in the order groups are cut, with prefix sums of their RDP."""

    def __init__(self, q: NDArray, sigma: NDArray, counts: NDArray) -> None:
        q = np.asarray(q, dtype=np.float64)
        sigma = np.asarray(sigma, dtype=np.float64)
        counts = np.asarray(counts, dtype=np.int64)
        per_step = subsampled_gaussian_rdp(q, sigma, CHECK_ORDERS)
        order = np.lexsort((-sigma, q, per_step[:, 3]))
        self.q, self.sigma, self.counts = q[order], sigma[order], counts[order]
        self.rdp = per_step[order]
        self.n = q.shape[0]
        self.steps = np.concatenate([[0], np.cumsum(self.counts)])
        zero = np.zeros((1, CHECK_ORDERS.shape[0]))
        self.weighted = np.concatenate([zero, np.cumsum(self.rdp * self.counts[:, None], axis=0)])
        self.total = self.weighted[-1]
        self._table: tuple[NDArray, NDArray, NDArray] | None = None

    def _rises(self, starts: NDArray, length: int) -> tuple[NDArray, NDArray, NDArray]:
        """For every start s and every j < length: the rise and the exact RDP of the group
        [s, s + j], shape (starts, length, orders), and whether s + j is a configuration."""
        idx = starts[:, None] + np.arange(length)[None, :]
        valid = idx < self.n
        idx = np.minimum(idx, self.n - 1)
        q, s = self.q[idx], self.sigma[idx]
        q_top, s_low = np.maximum.accumulate(q, axis=1), np.minimum.accumulate(s, axis=1)
        # the newest member dominates all before it: its own RDP
        newest = (q >= q_top) & (s <= s_low)
        # the extremes did not move: the previous group's dominating configuration
        same = np.zeros(q.shape, dtype=bool)
        same[:, 1:] = (q_top[:, 1:] == q_top[:, :-1]) & (s_low[:, 1:] == s_low[:, :-1])
        dominating = np.zeros((*q.shape, CHECK_ORDERS.shape[0]))
        dominating[newest] = self.rdp[idx[newest]]
        fresh = ~newest & ~same & valid
        if np.any(fresh):
            dominating[fresh] = _check_rdp(q_top[fresh], s_low[fresh])
        source = np.maximum.accumulate(np.where(same, 0, np.arange(length)[None, :]), axis=1)
        dominating = np.take_along_axis(dominating, source[:, :, None], axis=1)
        members = self.steps[idx + 1] - self.steps[starts][:, None]
        exact = self.weighted[idx + 1] - self.weighted[starts][:, None, :]
        return dominating * members[:, :, None] - exact, exact, valid

    def _longest(
        self, rise: NDArray, exact: NDArray, valid: NDArray, budget: float, cap: NDArray
    ) -> NDArray:
        """Per start, how many configurations its group may take (= length: maybe more)."""
        ok = np.all(rise <= np.maximum(budget * exact, cap), axis=2) & valid
        ok[:, 0] = True  # one configuration is its own dominating one
        bad = ~ok
        return np.where(bad.any(axis=1), bad.argmax(axis=1), ok.shape[1])

    def cut(self, budget: float, share: float) -> list[tuple[int, int]]:
        """Consecutive groups [start, end), each as long as its rise stays within
        max(budget * its own RDP, share * the total RDP) at every check order."""
        cap = share * self.total
        if self._table is None:
            self._table = self._rises(np.arange(self.n), min(self.n, _SHORT))
        taken = self._longest(*self._table, budget, cap)
        out = []
        start = 0
        while start < self.n:
            size = int(taken[start])
            length = _SHORT
            while size == length and start + size < self.n:  # a long group: look further
                length *= 2
                size = int(self._longest(*self._rises(np.array([start]), length), budget, cap)[0])
            end = min(self.n, start + size)
            out.append((start, end))
            start = end
        return out

    def groups(self, cuts: list[tuple[int, int]]) -> list[Group]:
        return [
            (
                float(self.q[a:b].max()),
                float(self.sigma[a:b].min()),
                int(self.steps[b] - self.steps[a]),
            )
            for a, b in cuts
        ]


def group_steps(
    q: NDArray, sigma: NDArray, counts: NDArray, budget: float = DEFAULT_BUDGET
) -> list[Group]:
    """(q, sigma, count) groups whose dominating configurations cost at most ``budget``
    more RDP than their members, relative, at every order of CHECK_ORDERS."""
    ordered = _Sorted(q, sigma, counts)
    return ordered.groups(ordered.cut(budget, 0.0))


def groups_within(
    q: NDArray, sigma: NDArray, counts: NDArray, max_groups: int, budget: float = 0.0
) -> list[Group]:
    """At most ``max_groups`` (q, sigma, count) groups, each dominating its members.

    Each group rises by at most ``budget`` times its own RDP, or by at most a share of
    the total RDP, at every check order; the share is searched (a group's rise grows
    about as its width squared, so the number of groups about as share^-1/2) to be
    about the smallest that fits.
    """
    if max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}")
    ordered = _Sorted(q, sigma, counts)
    cuts = ordered.cut(budget, 0.0)
    if len(cuts) <= max_groups:
        return ordered.groups(cuts)
    low, high, best = 0.0, math.inf, None
    share = 1.0 / max_groups**2
    for _ in range(_SEARCHES):
        trial = ordered.cut(budget, share)
        if len(trial) <= max_groups:
            high, best = share, trial
            if len(trial) >= 0.97 * max_groups:
                break
        else:
            low = share
        if high == math.inf:
            share *= max(1.5, (len(trial) / max_groups) ** 2)
        else:
            share = math.sqrt(high * low) if low > 0 else high / 4.0
    if best is None:  # not found in _SEARCHES tries: one group, sound and loose
        best = [(0, ordered.n)]
    return ordered.groups(best)
