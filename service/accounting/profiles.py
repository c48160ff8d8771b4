"""Per-model privacy profiles: an RDP curve and a PLD (or a profile derived from RDP).

``compute_profile(mechanism)`` dispatches on the mechanism type through
``BUILDERS``. Every number a profile gives is an upper bound on the true
privacy loss of the mechanism (never optimistic); ``heuristic`` marks the one
exception the user opted into (shuffled batches accounted as Poisson).
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service import __version__
from service.accounting import bis
from service.accounting.conversions import (
    ORDERS,
    check_delta,
    check_epsilon,
    delta_from_rdp,
    delta_from_rdp_grid,
    eps_from_rdp,
)
from service.accounting.cost import (
    EXP_LIMIT,
    CostLimits,
    ProfileCost,
    exceeds,
    gaussian_pld_points,
)
from service.accounting.curves import EPS_GRID, DeltaCurves
from service.accounting.mechanisms import (
    DPSGD,
    BalancedIterationSubsampling,
    EpsilonDelta,
    Gaussian,
    Mechanism,
    NonPrivate,
    RDPCurve,
    mechanism_hash,
)
from service.accounting.pld import (
    DEFAULT_DISCRETIZATION,
    PldPair,
    epsilon_delta_pld,
    subsampled_gaussian_pld,
)
from service.accounting.rdp import subsampled_gaussian_rdp

#: Bumped whenever what a profile holds or how it is computed changes, so a
#: cached profile from an older format is never mistaken for a current one.
PROFILE_FORMAT = 1

#: Relative margin added to computed RDP values: the float64 log-sum-exp is
#: exact to ~1e-12 relative; the margin keeps rounding from ever understating.
RDP_SAFETY = 1e-9

#: More distinct (q, sigma) pairs than this are grouped pessimistically for the PLD.
MAX_PLD_GROUPS = 16

Accountant = Literal["rdp", "pld", "best"]
ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld", "best")


def library_versions() -> dict[str, str]:
    return {
        "retarget": __version__,
        "dp_accounting": metadata.version("dp-accounting"),
        "numpy": np.__version__,
        "format": str(PROFILE_FORMAT),
    }


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


@dataclass(frozen=True)
class RdpProfile:
    orders: NDArray[np.float64]
    epsilons: NDArray[np.float64]

    def at(self, orders: ArrayLike) -> NDArray[np.float64]:
        query = np.asarray(orders, dtype=np.float64)
        if query.shape == self.orders.shape and np.array_equal(query, self.orders):
            return self.epsilons.copy()
        return rdp_upper_bound(self.orders, self.epsilons, query)

    def epsilon(self, delta: float) -> float:
        return eps_from_rdp(self.orders, self.epsilons, delta)

    def delta(self, epsilon: float) -> float:
        return delta_from_rdp(self.orders, self.epsilons, epsilon)


@dataclass(frozen=True)
class PrivacyProfile:
    """What one mechanism costs: RDP, PLD, and how they were obtained."""

    mechanism_type: str
    mechanism_hash: str
    rdp: RdpProfile | None
    pld: PldPair | None
    non_private: bool = False
    heuristic: bool = False
    methods: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=library_versions)

    # -- queries ---------------------------------------------------------------

    def epsilon(self, delta: float, accountant: Accountant = "best") -> float:
        """Smallest epsilon this profile proves at ``delta`` (inf if none)."""
        check_delta(delta)
        _check_accountant(accountant)
        if self.non_private:
            return math.inf
        rdp_eps = self.rdp.epsilon(delta) if self.rdp is not None else math.inf
        if accountant == "rdp":
            return rdp_eps
        pld_eps = self.pld.epsilon(delta) if self.pld is not None else rdp_eps
        return pld_eps if accountant == "pld" else min(pld_eps, rdp_eps)

    def delta(self, epsilon: float, accountant: Accountant = "best") -> float:
        """Smallest delta this profile proves at ``epsilon``."""
        check_epsilon(epsilon)
        _check_accountant(accountant)
        if self.non_private:
            return 1.0
        rdp_delta = self.rdp.delta(epsilon) if self.rdp is not None else 1.0
        if accountant == "rdp":
            return rdp_delta
        pld_delta = self.pld.delta(epsilon) if self.pld is not None else rdp_delta
        return pld_delta if accountant == "pld" else min(pld_delta, rdp_delta)

    def delta_directions(self, epsilon: float) -> tuple[float, float]:
        """(H(P||Q), H(Q||P)) at e^epsilon, each an upper bound; equal when RDP-derived."""
        check_epsilon(epsilon)
        if self.non_private:
            return 1.0, 1.0
        if self.pld is not None:
            return self.pld.delta_remove(epsilon), self.pld.delta_add(epsilon)
        d = self.rdp.delta(epsilon) if self.rdp is not None else 1.0
        return d, d

    @cached_property
    def curves(self) -> DeltaCurves:
        """Both hockey-stick curves tabulated on EPS_GRID (upper bounds)."""
        if self.non_private:
            ones = np.ones_like(EPS_GRID)
            return DeltaCurves(ones, ones)
        if self.pld is not None:
            # The vectorised sum may round differently from a scalar query: a 1e-12
            # relative margin keeps the table above every direct evaluation.
            remove = self.pld.remove.get_delta_for_epsilon(EPS_GRID) * (1 + 1e-12)
            add = self.pld.add.get_delta_for_epsilon(EPS_GRID) * (1 + 1e-12)
            return DeltaCurves(
                np.minimum(1.0, np.asarray(remove, float)), np.minimum(1.0, np.asarray(add, float))
            )
        if self.rdp is None:
            ones = np.ones_like(EPS_GRID)
            return DeltaCurves(ones, ones)
        both = delta_from_rdp_grid(self.rdp.orders, self.rdp.epsilons, EPS_GRID)
        return DeltaCurves(both, both)

    def rdp_at(self, orders: ArrayLike) -> NDArray[np.float64]:
        if self.rdp is None or self.non_private:
            return np.full(np.atleast_1d(np.asarray(orders)).shape, np.inf)
        return self.rdp.at(orders)

    # -- serialisation -----------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "mechanism_type": self.mechanism_type,
            "mechanism_hash": self.mechanism_hash,
            "rdp": None
            if self.rdp is None
            else {
                "orders": self.rdp.orders.tolist(),
                "epsilons": [_json_float(e) for e in self.rdp.epsilons],
            },
            "pld": None if self.pld is None else self.pld.to_json(),
            "curves": {
                "remove": _pack(self.curves.remove),
                "add": _pack(self.curves.add),
            },
            "non_private": self.non_private,
            "heuristic": self.heuristic,
            "methods": self.methods,
            "notes": list(self.notes),
            "parameters": self.parameters,
            "versions": self.versions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PrivacyProfile:
        rdp = data.get("rdp")
        profile = cls(
            mechanism_type=data["mechanism_type"],
            mechanism_hash=data["mechanism_hash"],
            rdp=None
            if rdp is None
            else RdpProfile(
                orders=np.asarray(rdp["orders"], dtype=np.float64),
                epsilons=np.asarray(
                    [math.inf if e is None else e for e in rdp["epsilons"]], dtype=np.float64
                ),
            ),
            pld=None if data.get("pld") is None else PldPair.from_json(data["pld"]),
            non_private=bool(data.get("non_private", False)),
            heuristic=bool(data.get("heuristic", False)),
            methods=dict(data.get("methods", {})),
            notes=tuple(data.get("notes", ())),
            parameters=dict(data.get("parameters", {})),
            versions=dict(data.get("versions", {})),
        )
        curves = data.get("curves")
        if curves is not None:
            # cached_property stores in __dict__, which a frozen dataclass allows.
            profile.__dict__["curves"] = DeltaCurves(
                _unpack(curves["remove"]), _unpack(curves["add"])
            )
        return profile


def _pack(values: NDArray) -> str:
    return base64.b64encode(zlib.compress(np.asarray(values, "<f8").tobytes(), 6)).decode()


def _unpack(text: str) -> NDArray[np.float64]:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), "<f8").astype(np.float64)


def _json_float(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


def _safe(values: NDArray) -> NDArray[np.float64]:
    return np.asarray(values, dtype=np.float64) * (1.0 + RDP_SAFETY)


# -- builders, one per mechanism type ---------------------------------------------


def _gaussian(mech: Gaussian, discretization: float, limits: CostLimits) -> dict[str, Any]:
    sigma = mech.sigma
    rdp = RdpProfile(ORDERS, _safe(mech.count * ORDERS / (2.0 * sigma**2)))
    groups = [(1.0, sigma, mech.count)]
    cost = ProfileCost(
        rdp_evaluations=ORDERS.shape[0],
        pld_points=gaussian_pld_points(groups, ORDERS, rdp.epsilons, discretization),
        compositions=mech.count,
    )
    pld, notes = _pld_within(cost, limits, lambda: subsampled_gaussian_pld(groups, discretization))
    return {
        "rdp": rdp,
        "pld": pld,
        "notes": notes,
        "methods": {
            "rdp": "Gaussian mechanism, alpha * count / (2 sigma^2) (Mironov 2017, Prop. 7)",
            "pld": "dp_accounting Gaussian PLD of sigma / sqrt(count), pessimistic",
        },
    }


def _dp_sgd_groups(mech: DPSGD) -> tuple[NDArray, NDArray, NDArray]:
    """Distinct (q, effective sigma) pairs of the run and how many steps use each."""
    segs = mech.segments()
    q = np.array([s.sampling_rate for s in segs])
    sigma = np.array([s.effective_noise_multiplier for s in segs])
    steps = np.array([s.steps for s in segs], dtype=np.int64)
    pairs, inverse = np.unique(np.stack([q, sigma], axis=1), axis=0, return_inverse=True)
    counts = np.bincount(inverse.ravel(), weights=steps).astype(np.int64)
    return pairs[:, 0], pairs[:, 1], counts


def _pessimistic_groups(
    q: NDArray, sigma: NDArray, counts: NDArray
) -> tuple[list[tuple[float, float, int]], bool]:
    """At most about MAX_PLD_GROUPS (q, sigma) groups for the PLD, never optimistic.

    Past that many distinct pairs, log q and log sigma are each cut into equal bins
    between their extremes; every step takes its bin's largest q and smallest
    sigma, so each grouped step is less private than the real one.
    """
    if q.shape[0] <= MAX_PLD_GROUPS:
        return [
            (float(a), float(b), int(c)) for a, b, c in zip(q, sigma, counts, strict=True)
        ], False
    q_bins = 1 if np.ptp(q) == 0 else max(2, int(math.sqrt(MAX_PLD_GROUPS)))
    sigma_bins = max(2, MAX_PLD_GROUPS // q_bins)

    def edges(values: NDArray, up: bool, bins: int) -> NDArray:
        logs = np.log(values)
        lo, hi = float(logs.min()), float(logs.max())
        if hi - lo < 1e-12:
            return values
        width = (hi - lo) / bins
        idx = np.minimum(np.floor((logs - lo) / width), bins - 1)
        edge = lo + (idx + 1 if up else idx) * width
        # Guard the float round trip: never below q, never above sigma.
        out = np.exp(edge)
        return np.maximum(out, values) if up else np.minimum(out, values)

    q_up = np.minimum(1.0, edges(q, up=True, bins=q_bins))
    sigma_down = edges(sigma, up=False, bins=sigma_bins)
    grouped: dict[tuple[float, float], int] = {}
    for a, b, c in zip(q_up, sigma_down, counts, strict=True):
        key = (float(a), float(b))
        grouped[key] = grouped.get(key, 0) + int(c)
    return [(a, b, c) for (a, b), c in grouped.items()], True


def _dp_sgd(mech: DPSGD, discretization: float, limits: CostLimits) -> dict[str, Any]:
    q, sigma, counts = _dp_sgd_groups(mech)
    per_pair = subsampled_gaussian_rdp(q, sigma, ORDERS)
    rdp = _safe(np.sum(per_pair * counts[:, None], axis=0))
    groups, grouped = _pessimistic_groups(q, sigma, counts)
    cost = ProfileCost(
        rdp_evaluations=ORDERS.shape[0] * q.shape[0],
        pld_points=gaussian_pld_points(groups, ORDERS, rdp, discretization),
        compositions=int(counts.sum()),
    )
    pld, notes = _pld_within(cost, limits, lambda: subsampled_gaussian_pld(groups, discretization))
    if grouped:
        notes.append(
            f"{q.shape[0]} distinct steps were grouped into {len(groups)} for the PLD "
            "(sigma rounded down, q rounded up within each group): an upper bound"
        )
    if mech.heuristic:
        notes.append(
            "sampling 'shuffle' accounted as Poisson sampling at the same rate: a heuristic, "
            "not a proven bound"
        )
    return {
        "rdp": RdpProfile(ORDERS, rdp),
        "pld": pld,
        "heuristic": mech.heuristic,
        "notes": notes,
        "methods": {
            "rdp": "Poisson-subsampled Gaussian (Mironov, Talwar, Zhang 2019), summed over steps",
            "pld": "dp_accounting subsampled-Gaussian PLD, equal steps self-composed, pessimistic",
        },
        "parameters": {"steps": int(counts.sum()), "distinct_steps": int(q.shape[0])},
    }


def _bis(
    mech: BalancedIterationSubsampling, discretization: float, limits: CostLimits
) -> dict[str, Any]:
    integer = np.array([float(a).is_integer() and a >= 2 for a in ORDERS])
    ints = ORDERS[integer]
    d, k, sigma = mech.iterations, mech.participations, mech.noise_multiplier
    forward = bis.forward_rdp(d, k, sigma, ints)
    exact = bis.forward_rdp_exact(d, k, sigma, ints)
    forward = np.where(np.isnan(exact), forward, np.minimum(exact, forward))
    per_epoch = np.maximum(forward, bis.reverse_rdp(d, k, sigma, ints))
    rdp_known = _safe(mech.epochs * per_epoch)
    return {
        "rdp": RdpProfile(ORDERS, rdp_upper_bound(ints, rdp_known, ORDERS)),
        "pld": None,
        "notes": [
            "no PLD is known for balanced iteration subsampling: the PLD accountant uses the "
            "privacy profile derived from RDP (Balle et al. 2020)"
        ],
        "methods": {
            "rdp": f"forward: {bis.FORWARD_METHOD}; reverse: {bis.REVERSE_METHOD}; "
            "fractional orders by the convexity chord; epochs composed",
            "pld": "derived from RDP",
        },
    }


def _rdp_curve(mech: RDPCurve, discretization: float, limits: CostLimits) -> dict[str, Any]:
    pts = mech.points()
    return {
        "rdp": RdpProfile(
            np.array([a for a, _ in pts], dtype=np.float64),
            np.array([e for _, e in pts], dtype=np.float64),
        ),
        "pld": None,
        "notes": [
            "RDP given by the trainer; other orders bounded by the convexity chord",
            "no PLD is known: the PLD accountant uses the privacy profile derived from RDP",
        ],
        "methods": {"rdp": "given", "pld": "derived from RDP"},
    }


def _epsilon_delta(mech: EpsilonDelta, discretization: float, limits: CostLimits) -> dict[str, Any]:
    eps0, delta0 = mech.epsilon, mech.delta
    rdp = None
    if delta0 == 0:
        # Source: Mironov 2017, Prop. 5: randomized response dominates every eps0-DP
        # mechanism; its RDP is log(p^a (1-p)^(1-a) + (1-p)^a p^(1-a)) / (a - 1).
        log_p = eps0 - np.logaddexp(0.0, eps0)
        log_1mp = -np.logaddexp(0.0, eps0)
        a = ORDERS
        val = np.logaddexp(a * log_p + (1 - a) * log_1mp, a * log_1mp + (1 - a) * log_p)
        rdp = RdpProfile(ORDERS, _safe(np.minimum(val / (a - 1), eps0)))
    notes = [] if rdp is not None else ["delta > 0: no finite RDP; only the PLD applies"]
    pld = None
    if eps0 <= EXP_LIMIT:
        pld = epsilon_delta_pld(eps0, delta0, discretization)
    else:
        notes.append(f"epsilon {eps0} is past e^{EXP_LIMIT:g}: no PLD; the RDP curve applies")
    return {
        "rdp": rdp,
        "pld": pld,
        "notes": notes,
        "methods": {
            "rdp": "randomized response (pure DP)" if rdp is not None else "none",
            "pld": "tight privacy profile of a generic (epsilon, delta)-DP mechanism",
        },
    }


def _non_private(mech: NonPrivate, discretization: float, limits: CostLimits) -> dict[str, Any]:
    return {
        "rdp": None,
        "pld": None,
        "non_private": True,
        "notes": ["no privacy guarantee: delta(epsilon) = 1"],
        "methods": {"rdp": "none", "pld": "none"},
    }


def _pld_within(
    cost: ProfileCost, limits: CostLimits, build: Callable[[], PldPair]
) -> tuple[PldPair | None, list[str]]:
    """The PLD when its estimated cost is within ``limits``; else none and a note.

    Leaving the PLD out is sound: every query then uses the RDP curve (and the
    privacy profile derived from it), an upper bound, only a looser one.
    """
    over = exceeds(ProfileCost(0, cost.pld_points, cost.compositions), limits)
    if over:
        return None, [f"no PLD: {over[0]}; the RDP curve is used instead (sound, looser)"]
    return build(), []


BUILDERS: dict[str, Callable[[Any, float, CostLimits], dict[str, Any]]] = {
    "gaussian": _gaussian,
    "dp_sgd": _dp_sgd,
    "balanced_iteration_subsampling": _bis,
    "rdp_curve": _rdp_curve,
    "epsilon_delta": _epsilon_delta,
    "non_private": _non_private,
}


def compute_profile(
    mechanism: Mechanism,
    *,
    discretization: float = DEFAULT_DISCRETIZATION,
    limits: CostLimits | None = None,
) -> PrivacyProfile:
    """The privacy profile of ``mechanism`` (every bound an upper bound).

    A PLD whose estimated cost (``service.accounting.cost``) is over ``limits``
    is left out, with a note: queries then use the RDP curve.
    """
    if not 0 < discretization <= 0.1:
        raise ValueError(f"discretization must be in (0, 0.1], got {discretization}")
    built = BUILDERS[mechanism.type](mechanism, discretization, limits or CostLimits())
    parameters = {"discretization": discretization, **built.pop("parameters", {})}
    return PrivacyProfile(
        mechanism_type=mechanism.type,
        mechanism_hash=mechanism_hash(mechanism),
        rdp=built.pop("rdp"),
        pld=built.pop("pld"),
        non_private=built.pop("non_private", False),
        heuristic=built.pop("heuristic", False),
        methods=built.pop("methods"),
        notes=tuple(built.pop("notes", ())),
        parameters=parameters,
    )
