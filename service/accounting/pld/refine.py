"""The PLD's grid chosen from the epsilon it must resolve, not fixed.

A pessimistic PLD on a grid of width h overstates epsilon by about h (each loss is
rounded up to the grid): harmless at epsilon 1, a factor of several at epsilon
0.001. So the grid is refined until h is at most ``RELATIVE_ACCURACY`` of the
epsilon the PLD proves at ``TARGET_DELTA`` (the largest delta queried in practice,
hence the smallest epsilon to resolve), within the point limit that bounds memory.
Every PLD built on the way is pessimistic: each is an upper bound, and the
profile keeps the last (the finest).
"""

from __future__ import annotations

from collections.abc import Callable

from service.accounting.pld.pair import PldPair

#: Grid width as a fraction of the target epsilon (the overstatement is about one width).
RELATIVE_ACCURACY = 2e-3
#: The delta at which the epsilon to resolve is read (smaller deltas give larger epsilons).
TARGET_DELTAS = (1e-3, 1e-10)
#: Finest grid built, and most refinements: the work stays bounded.
FINEST = 1e-9
MAX_REFINEMENTS = 3


def target_width(pld: PldPair) -> float | None:
    """The grid width ``pld``'s epsilon calls for (None: nothing to resolve)."""
    for delta in TARGET_DELTAS:
        eps = pld.epsilon(delta)
        if eps > 0:
            # the pessimistic epsilon exceeds the truth by up to about one width
            resolved = max(eps - pld.discretization, eps / 20.0)
            return max(FINEST, RELATIVE_ACCURACY * resolved)
    return None


def refined_pld(
    build: Callable[[float], PldPair],
    discretization: float,
    points_at: Callable[[float], float],
    max_points: float,
) -> tuple[PldPair, float]:
    """(PLD, its grid width): built at ``discretization`` (the coarsest allowed), then
    rebuilt finer while its epsilon calls for it and the estimated points
    (``points_at(width)``) stay within ``max_points``."""
    pld = build(discretization)
    width = discretization
    for _ in range(MAX_REFINEMENTS):
        want = target_width(pld)
        if want is None or want >= width * 0.7:
            break
        # no finer than the memory bound allows
        floor = points_at(1.0) / max_points
        want = max(want, floor)
        if want >= width * 0.7:
            break
        pld, width = build(want), want
    return pld, width
