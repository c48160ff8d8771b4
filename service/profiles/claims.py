"""Claim checks, applied once a mechanism's profile exists."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.profiles.claims import check_claim
from service.accounting.profiles.profile import PrivacyProfile
from service.registry.models import Model


def apply_claim_checks(*, session: Session, mech_hash: str, profile: PrivacyProfile) -> int:
    """Recompute every unchecked claim of models with this mechanism; returns how many."""
    rows = session.scalars(
        select(Model).where(
            Model.mechanism_hash == mech_hash,
            Model.claimed_epsilon.is_not(None),
            Model.claimed_delta.is_not(None),
            Model.claim_check.is_(None),
        )
    )
    count = 0
    for model in rows:
        assert model.claimed_epsilon is not None and model.claimed_delta is not None
        result = check_claim(profile, model.claimed_epsilon, model.claimed_delta)
        model.claim_check = result.status
        model.recomputed_epsilon = result.recomputed_epsilon
        count += 1
    return count
