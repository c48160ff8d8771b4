"""The profile job: what a worker runs for one mechanism (``service.tasks`` names it)."""

from __future__ import annotations

import logging
import time
from typing import Any

from service.accounting.mechanisms import mechanism_hash, parse_mechanism
from service.accounting.profiles.profile import compute_profile
from service.config import Settings
from service.jobs.metrics import RedisCounters
from service.jobs.queue import redis_client
from service.profiles.cache import cost_limits, profile_key
from service.profiles.claims import apply_claim_checks
from service.profiles.store import RedisProfileStore
from service.registry.db import make_engine, make_sessionmaker, session_scope

log = logging.getLogger(__name__)


def profile_task(mechanism: dict[str, Any], discretization: float) -> dict[str, Any]:
    """Compute a mechanism's profile, cache it in Redis, then check pending claims."""
    settings = Settings()
    assert settings.redis_url, "the worker needs RETARGET_REDIS_URL"
    client = redis_client(settings.redis_url)
    counters = RedisCounters(client)
    mech = parse_mechanism(mechanism)
    key = profile_key(mechanism_hash(mech), discretization)
    counters.incr("jobs_started")
    start = time.perf_counter()
    profile = compute_profile(mech, discretization=discretization, limits=cost_limits(settings))
    _ = profile.curves  # cached with the profile, so plans need no PMF sweeps
    seconds = time.perf_counter() - start
    RedisProfileStore(client).put(key, profile)
    counters.incr("profile_computations")
    counters.incr("profile_compute_seconds", seconds)
    claims = 0
    engine = make_engine(settings.resolved_database_url)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            claims = apply_claim_checks(
                session=session, mech_hash=profile.mechanism_hash, profile=profile
            )
    finally:
        engine.dispose()
    client.delete(lock_key(key))
    log.info("profile %s computed in %.2fs (%d claims checked)", key, seconds, claims)
    return {"mechanism_hash": profile.mechanism_hash, "seconds": seconds, "claims_checked": claims}


def lock_key(key: str) -> str:
    return f"{key}:lock"
