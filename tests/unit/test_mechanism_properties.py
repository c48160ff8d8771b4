"""Every mechanism the schema accepts survives its canonical form (issue #30): fuzzed
records of every type, dp_event trees included.

- a record is accepted or refused with a validation error, never another exception;
- an accepted record's canonical form parses again, to the same canonical form and hash
  (a stored row always parses: the schema's limits and the canonical form agree);
- its cost estimate answers (a refusal or None) without raising;
- where it is cheap, its profile is computed (or refused with a ValueError), and the
  round-tripped record's profile has the same epsilon.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from service.accounting.cost import CostLimits, refusal
from service.accounting.mechanisms import (
    DPSGD,
    BalancedIterationSubsampling,
    DPEvent,
    ModelSplitting,
    canonical_mechanism,
    mechanism_hash,
    parse_mechanism,
)
from service.accounting.profiles.profile import compute_profile
from tests.mechanism_strategies import mechanisms

#: small enough to compute a profile in well under a second
LIMITS = CostLimits(max_pld_points=200_000, max_rdp_evaluations=200_000)


def _cheap(mechanism: object) -> bool:
    if isinstance(mechanism, DPSGD):
        return len(mechanism.segments()) <= 3 and mechanism.total_steps <= 2_000
    if isinstance(mechanism, BalancedIterationSubsampling):
        return mechanism.iterations <= 200 and mechanism.epochs <= 10
    if isinstance(mechanism, DPEvent):
        return sum(1 for _ in mechanism.leaves()) <= 4
    if isinstance(mechanism, ModelSplitting):
        # the certified quadratures take seconds; one part or every part is closed form
        return mechanism.parts_per_example == mechanism.parts or (
            mechanism.parts == 1 and mechanism.sampling_rate < 1
        )
    return True


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mechanisms())
def test_accepted_records_survive_their_canonical_form(data: object) -> None:
    try:
        mechanism = parse_mechanism(data)
    except ValidationError:
        return
    canonical = canonical_mechanism(mechanism)
    again = parse_mechanism(canonical)
    assert canonical_mechanism(again) == canonical
    assert mechanism_hash(again) == mechanism_hash(mechanism)
    reason = refusal(mechanism, CostLimits())
    assert reason is None or isinstance(reason, str)
    if not _cheap(mechanism):
        return
    try:
        profile = compute_profile(mechanism, limits=LIMITS)
    except ValueError:
        return  # refused within the limits: a 422 at registration
    eps = profile.epsilon(1e-5, "best")
    assert not math.isnan(eps) and eps >= 0
    assert compute_profile(again, limits=LIMITS).epsilon(1e-5, "best") == eps
