"""Where profiles are cached: in this process, or in Redis shared by every replica.

Everything cached can be recomputed: flushing Redis loses nothing.
"""

from __future__ import annotations

import json
import zlib

import redis

from service.accounting.profiles.profile import PrivacyProfile
from service.errors import StorageError
from service.profiles.cache import DEFAULT_CACHE_BYTES, MemoryProfileStore

#: Cached profiles expire after a month unused (recomputed on the next request).
PROFILE_TTL_S = 30 * 24 * 3600


class RedisProfileStore:
    """Profiles as zlib-compressed JSON under their profile key; a small local LRU in front."""

    def __init__(
        self, client: redis.Redis, ttl_s: int = PROFILE_TTL_S, local_bytes: int | None = None
    ) -> None:
        self.client = client
        self.ttl_s = ttl_s
        #: profiles read or computed here, bounded by bytes (Redis holds them all)
        self.local = MemoryProfileStore(DEFAULT_CACHE_BYTES if local_bytes is None else local_bytes)

    def get(self, key: str) -> PrivacyProfile | None:
        local = self.local.get(key)
        try:
            # a profile held here is served while Redis still has it (EXISTS, not the
            # megabytes of GET): a FLUSHDB still means "recompute", as everywhere else
            if local is not None:
                return local if self.client.exists(key) else None
            raw = self.client.get(key)
        except redis.RedisError as exc:
            raise StorageError(f"the profile cache (Redis) is unreachable: {exc}") from exc
        if raw is None:
            return None
        profile = PrivacyProfile.from_json(json.loads(zlib.decompress(raw)))  # type: ignore[arg-type]
        self.local.put(key, profile)
        return profile

    def put(self, key: str, profile: PrivacyProfile) -> None:
        raw = zlib.compress(json.dumps(profile.to_json()).encode(), 6)
        try:
            self.client.set(key, raw, ex=self.ttl_s)
        except redis.RedisError as exc:
            raise StorageError(f"the profile cache (Redis) is unreachable: {exc}") from exc
        self.local.put(key, profile)
