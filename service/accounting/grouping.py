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

from service.accounting.rdp import subsampled_gaussian_rdp

#: Relative RDP rise allowed per group (and so in total).
DEFAULT_BUDGET = 5e-4
#: Integer orders at which the rise is checked: from large-epsilon to tiny-epsilon optima.
CHECK_ORDERS = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 256.0])
#: Most searches of the share of the total a group may rise by.
_SEARCHES = 12

Group = tuple[float, float, int]


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

    def _dominating(self, start: int, stop: int) -> NDArray:
        """RDP of the dominating configuration of every group [start, j], j < stop."""
        q, s = self.q[start:stop], self.sigma[start:stop]
        q_top, s_low = np.maximum.accumulate(q), np.minimum.accumulate(s)
        # the newest member dominates all before it: its own RDP
        newest = (q >= q_top) & (s <= s_low)
        # the extremes did not move: the previous group's dominating configuration
        same = np.zeros(q.shape[0], dtype=bool)
        same[1:] = (q_top[1:] == q_top[:-1]) & (s_low[1:] == s_low[:-1])
        out = np.empty((q.shape[0], CHECK_ORDERS.shape[0]))
        out[newest] = self.rdp[start:stop][newest]
        fresh = ~newest & ~same
        if np.any(fresh):
            out[fresh] = subsampled_gaussian_rdp(q_top[fresh], s_low[fresh], CHECK_ORDERS)
        source = np.where(same, 0, np.arange(q.shape[0]))
        source = np.maximum.accumulate(source)
        return out[source]

    def cut(self, budget: float, share: float) -> list[tuple[int, int]]:
        """Consecutive groups [start, end), each as long as its rise stays within
        max(budget * its own RDP, share * the total RDP) at every check order."""
        cap = share * self.total
        out = []
        start, span = 0, 4
        while start < self.n:
            end = self.n  # the group is [start, end) unless a longer one fails
            while True:
                stop = min(self.n, start + span)
                dominating = self._dominating(start, stop)
                members = self.steps[start + 1 : stop + 1] - self.steps[start]
                exact = self.weighted[start + 1 : stop + 1] - self.weighted[start]
                rise = dominating * members[:, None] - exact
                ok = np.all(rise <= np.maximum(budget * exact, cap), axis=1)
                bad = np.flatnonzero(~ok)
                if bad.size:
                    end = start + max(1, int(bad[0]))
                    break
                if stop == self.n:
                    break
                span *= 2
            out.append((start, end))
            span = max(4, 2 * (end - start))
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
