"""Profile builders, one per mechanism type, behind the ``BUILDERS`` table.

Each builder returns the parts of a ``PrivacyProfile`` (RDP, PLD, notes,
methods); every number in them is an upper bound on the mechanism's privacy
loss, except where ``heuristic`` says the user opted into an approximation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.accounting.bis import composed as bis_composed
from service.accounting.bis import pld as bis_pld
from service.accounting.bis import rdp as bis
from service.accounting.conversions import ORDERS
from service.accounting.cost import (
    EXP_LIMIT,
    CostLimits,
    ProfileCost,
    exceeds,
    gaussian_pld_points,
    tail_epsilon,
)
from service.accounting.mechanisms import (
    DPSGD,
    BalancedIterationSubsampling,
    DPEvent,
    EpsilonDelta,
    Gaussian,
    NonPrivate,
    RDPCurve,
)
from service.accounting.pld.pair import PldPair, epsilon_delta_pld, subsampled_gaussian_pld
from service.accounting.pld.refine import refined_pld
from service.accounting.pld.schedule import (
    EXACT_PLD_GROUPS as EXACT_PLD_GROUPS,
)
from service.accounting.pld.schedule import (
    MAX_PLD_GROUPS as MAX_PLD_GROUPS,
)
from service.accounting.pld.schedule import (
    SchedulePld,
    pessimistic_groups,
    schedule_pld,
)
from service.accounting.profiles.dp_event import dp_event_parts
from service.accounting.profiles.splitting import model_splitting_parts
from service.accounting.rdp.profile import (
    RdpProfile,
    from_source,
    safe,
)


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


def _refined_groups(
    groups: list[tuple[float, float, int]], rdp: RdpProfile, disc: list[float], limits: CostLimits
) -> PldPair:
    """The groups' PLD on a grid refined from its epsilon (``refine``); the width used
    is left in ``disc``."""
    pld, disc[0] = refined_pld(
        lambda width: subsampled_gaussian_pld(groups, width),
        disc[0],
        lambda width: gaussian_pld_points(groups, rdp.orders, rdp.epsilons, width),
        limits.max_pld_points,
    )
    return pld


def _gaussian(mech: Gaussian, discretization: float, limits: CostLimits) -> dict[str, Any]:
    disc = [discretization]
    sigma = mech.sigma
    rdp = from_source({"kind": "subsampled_gaussian", "pairs": [[1.0, sigma, mech.count]]})
    groups = [(1.0, sigma, mech.count)]
    cost = ProfileCost(
        rdp_evaluations=ORDERS.shape[0],
        pld_points=gaussian_pld_points(groups, rdp.orders, rdp.epsilons, discretization),
        compositions=mech.count,
    )
    pld, notes = _pld_within(cost, limits, lambda: _refined_groups(groups, rdp, disc, limits))
    return {
        "rdp": rdp,
        "pld": pld,
        "notes": notes,
        "methods": {
            "rdp": "Gaussian mechanism, alpha * count / (2 sigma^2) (Mironov 2017, Prop. 7)",
            "pld": "dp_accounting Gaussian PLD of sigma / sqrt(count), pessimistic",
        },
        "parameters": {"discretization": disc[0]},
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


#: The groups a dp_sgd PLD composes (kept here under their old names).
_pessimistic_groups = pessimistic_groups


def _dp_sgd(mech: DPSGD, discretization: float, limits: CostLimits) -> dict[str, Any]:
    q, sigma, counts = _dp_sgd_groups(mech)
    pairs = [[float(a), float(b), int(c)] for a, b, c in zip(q, sigma, counts, strict=True)]
    rdp = from_source({"kind": "subsampled_gaussian", "pairs": pairs})
    exact = [(float(a), float(b), int(c)) for a, b, c in pairs]
    cost = ProfileCost(
        rdp_evaluations=ORDERS.shape[0] * q.shape[0],
        pld_points=gaussian_pld_points(exact, rdp.orders, rdp.epsilons, discretization),
        compositions=int(counts.sum()),
    )
    built: list[SchedulePld] = []

    def build() -> PldPair:
        built.append(schedule_pld(q, sigma, counts, rdp, discretization, limits))
        return built[0].pld

    pld, notes = _pld_within(cost, limits, build)
    method = built[0].method if built else "none (over the limits)"
    if built and built[0].grouped:
        notes.append(
            f"{q.shape[0]} distinct steps were grouped into {len(built[0].groups)} for the PLD "
            "(each group as its largest q and smallest sigma): an upper bound"
        )
    if mech.heuristic:
        notes.append(
            "sampling 'shuffle' accounted as Poisson sampling at the same rate: a heuristic, "
            "not a proven bound"
        )
    return {
        "rdp": rdp,
        "pld": pld,
        "heuristic": mech.heuristic,
        "notes": notes,
        "methods": {
            "rdp": "Poisson-subsampled Gaussian (Mironov, Talwar, Zhang 2019), summed over steps, "
            "best real order",
            "pld": method,
        },
        "parameters": {
            "steps": int(counts.sum()),
            "distinct_steps": int(q.shape[0]),
            "discretization": built[0].discretization if built else discretization,
        },
    }


def _bis(
    mech: BalancedIterationSubsampling, discretization: float, limits: CostLimits
) -> dict[str, Any]:
    # every integer order up to 64 (the best order of a BIS profile often falls between
    # ORDERS' integers, where the chord would cost up to half a percent), then ORDERS'
    ints = np.union1d(np.arange(2.0, 65.0), ORDERS[(ORDERS > 64) & (np.floor(ORDERS) == ORDERS)])
    d, k, sigma = mech.iterations, mech.participations, mech.noise_multiplier
    # The random-allocation formula (bis.reverse_rdp_allocation) falls below the
    # exact D_alpha(Q||P) of this pair (numerical integration), so it is not used.
    per_epoch, certified = bis.per_epoch_rdp(d, k, sigma, ints)
    rdp_known = safe(mech.epochs * per_epoch)
    rdp = RdpProfile(ints, rdp_known)
    try:
        pld, width, why = bis_composed.profile_pld(
            d,
            k,
            sigma,
            mech.epochs,
            tail_epsilon(ints, rdp_known),
            discretization,
            limits.max_pld_points,
        )
    except (ArithmeticError, ValueError) as exc:
        # a degenerate law (e.g. the whole mass past the grid): no PLD, the RDP curve stands
        pld, width, why = None, discretization, f"the PLD could not be built ({exc})"
    notes = [bis.certified_note(certified, ints)]
    if pld is None:
        notes.insert(
            0,
            f"no PLD: {why}; the PLD accountant uses the privacy profile derived from RDP "
            "(Balle et al. 2020): sound, looser",
        )
    else:
        figures = ", ".join(
            f"delta {delta:g}: PLD {pld.epsilon(delta):.6g}, RDP {rdp.epsilon(delta):.6g}"
            for delta in (1e-5, 1e-6)
        )
        notes.insert(
            0,
            "epsilon is the smaller of the certified PLD's and the RDP curve's at each delta "
            f"(here {figures})",
        )
    return {
        "rdp": rdp,
        "pld": pld,
        "notes": notes,
        "methods": {
            "rdp": f"forward: {bis.FORWARD_METHOD}; reverse: {bis.REVERSE_METHOD}; "
            "each integer order takes the larger direction; fractional orders by the "
            "convexity chord; epochs composed",
            "pld": bis_pld.METHOD if pld is not None else "derived from RDP",
        },
        "parameters": {"certified_by": certified, "discretization": width},
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
        rdp = from_source({"kind": "randomized_response", "epsilon": eps0})
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


def _dp_event(mech: DPEvent, discretization: float, limits: CostLimits) -> dict[str, Any]:
    """A recognisably DP-SGD tree is its equivalent dp_sgd record (the same epsilon to the
    last digit); any other tree goes through dp_accounting's accountants."""
    equivalent = mech.as_dp_sgd()
    if equivalent is None:
        return dp_event_parts(mech, discretization, limits)
    built = _dp_sgd(equivalent, discretization, limits)
    built["notes"].append(
        "a composition of Poisson-subsampled Gaussian steps: accounted as the equivalent "
        "dp_sgd record"
    )
    return built


BUILDERS: dict[str, Callable[[Any, float, CostLimits], dict[str, Any]]] = {
    "gaussian": _gaussian,
    "dp_sgd": _dp_sgd,
    "balanced_iteration_subsampling": _bis,
    "rdp_curve": _rdp_curve,
    "epsilon_delta": _epsilon_delta,
    "non_private": _non_private,
    "dp_event": _dp_event,
    "model_splitting": lambda mech, disc, limits: model_splitting_parts(mech, disc, limits, _bis),
}
