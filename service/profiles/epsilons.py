"""Per-mechanism epsilons, computed once per (mechanism, delta, accountant) and cached.

A profile's epsilon at a delta costs tens of milliseconds (a PLD's tail sums, an RDP
conversion over every order), and listings show the same few mechanisms over and over:
a dataset of 1,000 models trained with 8 configurations needs 8 of them, not 1,000.
The key is the profile's cache key (canonical mechanism hash, profile format,
dp_accounting version, discretisation), so an epsilon is never served for a profile
computed differently. In this process an LRU holds them; with Redis they are also kept
there, in one hash per profile, shared by every replica and surviving restarts.
Everything here can be recomputed: a flushed Redis only costs time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import redis

from service.accounting.pld.pair import DEFAULT_DISCRETIZATION
from service.accounting.profiles.profile import Accountant, PrivacyProfile
from service.jobs.lru import Lru
from service.profiles.cache import profile_key
from service.profiles.store import PROFILE_TTL_S

#: Entries kept in the process (a key and a float each).
LOCAL_ENTRIES = 65_536


def _keys(profile: PrivacyProfile, delta: float, accountant: str) -> tuple[str, str]:
    disc = float(profile.parameters.get("discretization", DEFAULT_DISCRETIZATION))
    name = "retarget:epsilon:" + profile_key(profile.mechanism_hash, disc)
    return name, f"{accountant}:{delta!r}"


class EpsilonCache:
    """Epsilons of profiles at a delta, computed once per distinct key."""

    def __init__(self, client: redis.Redis | None = None, ttl_s: int = PROFILE_TTL_S) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.local: Lru[tuple[str, str], float] = Lru(LOCAL_ENTRIES)
        #: computations done here (not served from a cache): for tests and metrics
        self.computed = 0

    def epsilon(
        self, profile: PrivacyProfile, delta: float, accountant: Accountant = "best"
    ) -> float:
        return self.many([profile], delta, accountant)[0]

    def many(
        self, profiles: Sequence[PrivacyProfile], delta: float, accountant: Accountant = "best"
    ) -> list[float]:
        """The epsilon of each profile at ``delta``: each distinct key looked up once
        (one Redis round trip for all the misses), computed once on a miss."""
        keys = [_keys(p, delta, accountant) for p in profiles]
        found: dict[tuple[str, str], float] = {}
        missing: dict[tuple[str, str], PrivacyProfile] = {}
        for key, profile in zip(keys, profiles, strict=True):
            if key in found or key in missing:
                continue
            value = self.local.get(key)
            if value is None:
                missing[key] = profile
            else:
                found[key] = value
        if missing:
            found.update(self._shared(list(missing)))
            for key, profile in missing.items():
                if key not in found:
                    found[key] = profile.epsilon(delta, accountant)
                    self.computed += 1
                    self._store(key, found[key])
                self.local.put(key, found[key])
        return [found[k] for k in keys]

    def _shared(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        if self.client is None:
            return {}
        try:
            pipe = self.client.pipeline(transaction=False)
            for name, fld in keys:
                pipe.hget(name, fld)
            raw = pipe.execute()
        except redis.RedisError:
            return {}  # a cache: compute instead
        return {k: float(v) for k, v in zip(keys, raw, strict=True) if v is not None}

    def _store(self, key: tuple[str, str], value: float) -> None:
        if self.client is None:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(key[0], key[1], repr(value) if math.isfinite(value) else str(value))
            pipe.expire(key[0], self.ttl_s)
            pipe.execute()
        except redis.RedisError:
            pass  # a cache: the next reader computes it again
