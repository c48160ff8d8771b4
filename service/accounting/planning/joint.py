"""Theorem 6.1 for plans: the joint release of a set of models under the request's accountant."""

from __future__ import annotations

from service.accounting.lc import accountant as lc
from service.accounting.planning.types import PlanRequestSpec
from service.accounting.profiles.profile import PrivacyProfile


def joint(spec: PlanRequestSpec, profiles: list[PrivacyProfile]) -> tuple[float, str]:
    """(epsilon, accountant used) of releasing all ``profiles`` together (best: the smaller)."""
    if spec.accountant != "best":
        return lc.joint_epsilon(profiles, spec.delta, spec.accountant), spec.accountant
    r = lc.joint_epsilon(profiles, spec.delta, "rdp")
    p = lc.joint_epsilon(profiles, spec.delta, "pld")
    return (p, "pld") if p <= r else (r, "rdp")
