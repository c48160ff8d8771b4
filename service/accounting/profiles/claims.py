"""Checking a trainer's claimed (epsilon, delta) against our recomputed bound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.accounting.profiles.profile import PrivacyProfile

#: Relative slack for the PLD grid: a claim within this of our bound is consistent.
CLAIM_TOLERANCE = 1e-3

ClaimStatus = Literal["understated", "consistent", "conservative", "unverifiable"]


@dataclass(frozen=True)
class ClaimCheck:
    status: ClaimStatus
    recomputed_epsilon: float | None


def check_claim(profile: PrivacyProfile, epsilon: float, delta: float) -> ClaimCheck:
    """Compare a claim with the tightest bound we can prove at the claimed delta.

    ``understated``: the claim is below our upper bound by more than the grid slack
    (published accountants do understate: a CLT accountant by several times).
    ``conservative``: the claim is more than 5% above our bound.
    ``unverifiable``: delta = 0 (no RDP/PLD conversion reaches delta = 0) or our
    bound is infinite at that delta.
    """
    if delta <= 0:
        return ClaimCheck("unverifiable", None)
    ours = profile.epsilon(delta, "best")
    if ours == float("inf"):
        return ClaimCheck("unverifiable", None)
    if epsilon < ours * (1 - CLAIM_TOLERANCE):
        return ClaimCheck("understated", ours)
    if epsilon > ours * 1.05:
        return ClaimCheck("conservative", ours)
    return ClaimCheck("consistent", ours)
