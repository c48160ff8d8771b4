"""A profile's RDP curve: a stored table plus, where known, its exact source.

The table (orders, epsilons) is what older profiles hold and what the dashboard
shows. A ``source`` (a small JSON record naming the mechanism family and its
parameters) lets the curve be evaluated at *any* real order > 1, so epsilon and
delta are optimised over all orders (``orders.best_epsilon``) rather than over
the table's. Without a source, orders between table entries are bounded by the
convexity chord (``rdp_upper_bound``) and orders above the last entry by inf.
Every value is an upper bound on the mechanism's Renyi divergence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.accounting.conversions import ORDERS, delta_from_rdp, eps_from_rdp
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp
from service.accounting.rdp.orders import best_delta, best_epsilon

#: Relative margin added to computed RDP values: the float64 log-sum-exp is
#: exact to ~1e-12 relative; the margin keeps rounding from ever understating.
RDP_SAFETY = 1e-9
#: Queries of a source remembered per profile (oldest forgotten first).
MEMO_SIZE = 256


def safe(values: ArrayLike) -> NDArray[np.float64]:
    return np.asarray(values, dtype=np.float64) * (1.0 + RDP_SAFETY)


def rdp_upper_bound(orders: NDArray, epsilons: NDArray, query: ArrayLike) -> NDArray:
    """RDP upper bounds at any orders from bounds known at ``orders``.

    (alpha - 1) D_alpha is convex in alpha and tends to 0 at alpha = 1, so the chord
    of (alpha - 1) eps between two known orders bounds it from above in between, and
    below the smallest known order D_alpha <= D_a0 (monotone). Above the largest
    known order nothing is known: inf.
    """
    q = np.atleast_1d(np.asarray(query, dtype=np.float64))
    xs = np.concatenate([[1.0], orders])
    with np.errstate(invalid="ignore"):
        ys = np.concatenate([[0.0], (orders - 1.0) * epsilons])
    out = np.full(q.shape, np.inf)
    for i, alpha in enumerate(q):
        j = int(np.searchsorted(xs, alpha))
        if j < xs.shape[0] and xs[j] == alpha:
            out[i] = epsilons[j - 1]
        elif 0 < j < xs.shape[0]:
            x0, x1, y0, y1 = xs[j - 1], xs[j], ys[j - 1], ys[j]
            if np.isfinite(y1):
                out[i] = (y0 + (y1 - y0) * (alpha - x0) / (x1 - x0)) / (alpha - 1.0)
    return out


# -- sources: mechanism families whose RDP is known at every order ---------------


def _subsampled_gaussian(source: dict[str, Any], orders: NDArray) -> NDArray:
    """Sum over distinct (q, sigma) steps of count * RDP (Mironov, Talwar, Zhang 2019)."""
    pairs = np.asarray(source["pairs"], dtype=np.float64).reshape(-1, 3)
    per_pair = subsampled_gaussian_rdp(pairs[:, 0], pairs[:, 1], orders)
    return np.asarray(np.sum(per_pair * pairs[:, 2:3], axis=0))


def randomized_response_rdp(eps0: float, orders: NDArray) -> NDArray:
    """Source: Mironov 2017, Prop. 5: randomized response dominates every eps0-DP
    mechanism; its RDP is log A / (a - 1), A = p^a (1-p)^(1-a) + (1-p)^a p^(1-a), <= eps0.

    With p = e^eps0 / (1 + e^eps0), A - 1 = expm1(eps0 (a-1)) expm1(eps0 a)
    e^(-eps0 (a-1)) / (1 + e^eps0): a product of positive factors, so log A =
    log1p(A - 1) keeps full relative precision when the RDP is ~ a eps0^2 / 2 (summing
    A's two terms loses it all to the leading 1, down to 0 for eps0 = 1e-9)."""
    a = np.asarray(orders, dtype=np.float64)
    beta = eps0 * (a - 1.0)
    log_am1 = _log_expm1(beta) + _log_expm1(eps0 * a) - beta - np.logaddexp(0.0, eps0)
    val = np.logaddexp(0.0, log_am1)
    return np.asarray(np.minimum(val / (a - 1), eps0))


def _log_expm1(x: NDArray) -> NDArray:
    """log(e^x - 1) for x > 0, without overflow for large x or loss for tiny x."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore"):
        return np.where(
            x > 30.0,
            x + np.log1p(-np.exp(-np.minimum(x, 1e300))),
            np.log(np.expm1(np.minimum(x, 30.0))),
        )


def _randomized_response(source: dict[str, Any], orders: NDArray) -> NDArray:
    return randomized_response_rdp(float(source["epsilon"]), orders)


SOURCES: dict[str, Callable[[dict[str, Any], NDArray], NDArray]] = {
    "subsampled_gaussian": _subsampled_gaussian,
    "randomized_response": _randomized_response,
}


@dataclass(frozen=True)
class RdpProfile:
    orders: NDArray[np.float64]
    epsilons: NDArray[np.float64]
    source: dict[str, Any] | None = None

    def at(self, orders: ArrayLike) -> NDArray[np.float64]:
        """Upper bounds on the RDP at ``orders`` (exact source where known, else chord).
        Sources are evaluated once per query (order searches and plans revisit them)."""
        query = np.atleast_1d(np.asarray(orders, dtype=np.float64))
        if self.source is not None:
            key = query.tobytes()
            found = self._memo.get(key)
            if found is None:
                found = safe(SOURCES[self.source["kind"]](self.source, query))
                if len(self._memo) >= MEMO_SIZE:
                    self._memo.pop(next(iter(self._memo)))
                self._memo[key] = found
            return found.copy()
        if query.shape == self.orders.shape and np.array_equal(query, self.orders):
            return self.epsilons.copy()
        return rdp_upper_bound(self.orders, self.epsilons, query)

    @cached_property
    def _memo(self) -> dict[bytes, NDArray[np.float64]]:
        return {}

    def epsilon(self, delta: float) -> float:
        """The best epsilon over every real order, never above the table's best."""
        table = eps_from_rdp(self.orders, self.epsilons, delta)
        found, _ = best_epsilon(self.at, delta)
        return max(0.0, min(table, found))

    def delta(self, epsilon: float) -> float:
        table = delta_from_rdp(self.orders, self.epsilons, epsilon)
        found, _ = best_delta(self.at, epsilon)
        return min(table, found)

    def to_json(self) -> dict[str, Any]:
        return {
            "orders": self.orders.tolist(),
            "epsilons": [None if not math.isfinite(e) else float(e) for e in self.epsilons],
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RdpProfile:
        return cls(
            orders=np.asarray(data["orders"], dtype=np.float64),
            epsilons=np.asarray(
                [math.inf if e is None else e for e in data["epsilons"]], dtype=np.float64
            ),
            source=data.get("source"),
        )


def from_source(source: dict[str, Any]) -> RdpProfile:
    """A profile whose table is the source at ORDERS (kept for display and old readers)."""
    table = safe(SOURCES[source["kind"]](source, ORDERS))
    return RdpProfile(ORDERS, table, source)
