"""Groups of DP-SGD step configurations for the PLD, chosen by what they cost in RDP.

A schedule may have thousands of distinct (q, sigma) step configurations; the PLD
composes one FFT per group, so nearly equal configurations are merged. A group is
accounted as its *dominating* configuration (largest q, smallest sigma): every
member is a post-processing of it (Poisson subsampling at rate q is subsampling at
rate q' >= q followed by keeping each draw with probability q / q'; more noise is
less noise plus independent noise), so the merged composition is an upper bound,
never optimistic.

What merging loses is measured in RDP, which composes every distinct configuration
exactly: configurations are sorted by their per-step RDP and a group is closed as
soon as replacing its members by the dominating configuration would raise the
group's RDP by more than ``budget`` (relative) at any of a few orders that span the
useful range. The total RDP then rises by at most ``budget`` relative at each of
those orders, which moves the epsilon by about as much. The work is one batch of
RDP evaluations per configuration: it grows with the distinct configurations,
never with the steps.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from service.accounting.rdp import subsampled_gaussian_rdp

#: Relative RDP rise allowed per group (and so in total).
DEFAULT_BUDGET = 5e-4
#: Integer orders at which the rise is checked: from large-epsilon to tiny-epsilon optima.
CHECK_ORDERS = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 256.0])
#: Most prefixes evaluated at once while growing a group.
_BATCH = 64


def group_steps(
    q: NDArray, sigma: NDArray, counts: NDArray, budget: float = DEFAULT_BUDGET
) -> list[tuple[float, float, int]]:
    """(q, sigma, count) groups whose dominating configurations cost at most ``budget``
    more RDP than their members, relative, at every order of CHECK_ORDERS."""
    q = np.asarray(q, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    per_step = subsampled_gaussian_rdp(q, sigma, CHECK_ORDERS)
    order = np.lexsort((-sigma, q, per_step[:, 3]))
    q, sigma, counts, per_step = q[order], sigma[order], counts[order], per_step[order]
    weighted = per_step * counts[:, None]
    groups: list[tuple[float, float, int]] = []
    start, n = 0, q.shape[0]
    while start < n:
        end = start + 1  # the group is [start, end)
        batch = 2  # grows while whole batches join, so short groups cost little
        while end < n:
            stop = min(n, end + batch)
            batch = min(2 * batch, _BATCH)
            # candidate groups [start, j] for j in end..stop-1
            q_top = np.maximum.accumulate(q[start:stop])[end - start - 1 :]
            s_low = np.minimum.accumulate(sigma[start:stop])[end - start - 1 :]
            exact = np.cumsum(weighted[start:stop], axis=0)[end - start - 1 :]
            members = np.cumsum(counts[start:stop])[end - start - 1 :]
            dominating = subsampled_gaussian_rdp(q_top[1:], s_low[1:], CHECK_ORDERS)
            merged = dominating * members[1:, None]
            ok = np.all(merged <= exact[1:] * (1.0 + budget), axis=1)
            bad = np.flatnonzero(~ok)
            if bad.size:
                end += int(bad[0])
                break
            end = stop
        groups.append(
            (float(q[start:end].max()), float(sigma[start:end].min()), int(counts[start:end].sum()))
        )
        start = end
    return groups
