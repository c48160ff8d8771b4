"""What a profile process runs: the profile of one mechanism, and nothing else.

Imports the accounting only, so the fork server that starts profile processes has all
a computation needs loaded before the budget's clock starts
(``service.profiles.local.PRELOAD``).
"""

from __future__ import annotations

from typing import Any

from service.accounting.cost import CostLimits
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile

#: the kind of a profile job (and of a profile process's task)
PROFILE = "profile"


def compute_in_child(name: str, payload: dict[str, Any], attachments: dict[str, Any]) -> Any:
    """The profile of ``payload["mechanism"]`` (canonical JSON) within the payload's cost
    limits, its hockey-stick curves computed so that they travel with it
    (``service.jobs.process_child`` calls it)."""
    if name != PROFILE:
        raise ValueError(f"a profile process runs {PROFILE!r} tasks, not {name!r}")
    profile = compute_profile(
        parse_mechanism(payload["mechanism"]),
        discretization=payload["discretization"],
        limits=CostLimits(**payload["limits"]),
    )
    _ = profile.curves
    return profile
