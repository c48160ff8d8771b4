"""The PLD of a DP-SGD run: one or many distinct (q, sigma) step configurations.

One configuration: dp_accounting's subsampled-Gaussian PLD, self-composed
(``pld.subsampled_gaussian_pld``). Several: every distinct configuration's PMF from the
closed form, composed in one pass in the Fourier domain (``pld.fourier``), each
configuration once whatever its count. Up to EXACT_PLD_GROUPS configurations are composed
as they are. Past that, near-duplicates (an RDP rise of at most MERGE_BUDGET, relative)
are merged into their dominating configuration, and when the work limit
(``cost.MAX_PLD_WORK``: one transform of the composed grid per configuration) allows
fewer groups than remain, they are grouped to fit (``grouping.groups_within``: equal
rises, narrow groups where steps cost most). Every merge is an upper bound (a dominating
configuration, see ``grouping``); the grid is refined from the epsilon (``refine``).
"""

from __future__ import annotations

from dataclasses import dataclass

from numpy.typing import NDArray

from service.accounting.cost import CostLimits, gaussian_pld_points, pld_groups_allowed
from service.accounting.pld import grouping
from service.accounting.pld.fourier import composed_pld
from service.accounting.pld.pair import PldPair, subsampled_gaussian_pld
from service.accounting.pld.refine import refined_pld
from service.accounting.rdp.profile import RdpProfile

#: Up to this many distinct (q, sigma) pairs, the PLD composes each exactly.
EXACT_PLD_GROUPS = 64
#: Most groups ``pessimistic_groups`` leaves when its caller sets no limit.
MAX_PLD_GROUPS = 64
#: Relative RDP rise under which configurations are merged whatever the limits.
MERGE_BUDGET = 1e-5

Group = tuple[float, float, int]


def pessimistic_groups(
    q: NDArray, sigma: NDArray, counts: NDArray, max_groups: int = MAX_PLD_GROUPS
) -> tuple[list[Group], bool]:
    """(q, sigma, count) groups for the PLD, and whether any configurations were merged.

    Up to EXACT_PLD_GROUPS distinct pairs are kept as they are. Past that,
    near-duplicates are merged (MERGE_BUDGET), and then groups are widened until at most
    ``max_groups`` remain (``grouping.groups_within``). Each group is its dominating
    configuration, so the composition is an upper bound (the RDP curve, which composes
    every distinct step exactly, is there beside it).
    """
    exact = [(float(a), float(b), int(c)) for a, b, c in zip(q, sigma, counts, strict=True)]
    if q.shape[0] <= EXACT_PLD_GROUPS:
        return exact, False
    grouped = grouping.groups_within(q, sigma, counts, max_groups, MERGE_BUDGET)
    return grouped, len(grouped) < q.shape[0]


@dataclass(frozen=True)
class SchedulePld:
    """The PLD, its grid width, and the groups its last build composed."""

    pld: PldPair
    discretization: float
    groups: list[Group]
    grouped: bool
    method: str


def schedule_pld(
    q: NDArray,
    sigma: NDArray,
    counts: NDArray,
    rdp: RdpProfile,
    discretization: float,
    limits: CostLimits,
) -> SchedulePld:
    """The pessimistic PLD of a run with distinct configurations (q_i, sigma_i) used
    counts_i times each, on a grid refined from its epsilon (module docstring)."""
    exact = [(float(a), float(b), int(c)) for a, b, c in zip(q, sigma, counts, strict=True)]
    last: dict[str, tuple[list[Group], bool]] = {}

    def points_at(width: float) -> float:
        return gaussian_pld_points(exact, rdp.orders, rdp.epsilons, width)

    def build(width: float) -> PldPair:
        if len(exact) == 1:
            last["groups"] = (exact, False)
            return subsampled_gaussian_pld(exact, width)
        allowed = pld_groups_allowed(points_at(width), EXACT_PLD_GROUPS)
        last["groups"] = pessimistic_groups(q, sigma, counts, allowed)
        return composed_pld(last["groups"][0], width)

    pld, width = refined_pld(build, discretization, points_at, limits.max_pld_points)
    groups, grouped = last["groups"]
    method = (
        "dp_accounting subsampled-Gaussian PLD, equal steps self-composed, pessimistic"
        if len(exact) == 1
        else "connect-the-dots PMF of each distinct step from its closed form, all composed "
        "in the Fourier domain (equal steps as powers), pessimistic"
    )
    return SchedulePld(pld, width, groups, grouped, method)
