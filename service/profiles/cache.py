"""Privacy profiles by mechanism, computed once and cached.

The cache key is the canonical mechanism hash plus the profile format and the
dp_accounting version, so equal mechanisms share one entry and a profile made
by older code is never served as a current one. ``MemoryProfileStore`` is the
embedded default; every cached profile can be recomputed, so losing the cache
loses nothing.
"""

from __future__ import annotations

import functools
import threading
from importlib import metadata
from typing import Any, Protocol

import numpy as np

from service.accounting.cost import CostLimits
from service.accounting.mechanisms import Mechanism, mechanism_hash
from service.accounting.pld.curves import EPS_GRID
from service.accounting.pld.pair import DEFAULT_DISCRETIZATION
from service.accounting.profiles.profile import PROFILE_FORMAT, PrivacyProfile, compute_profile
from service.jobs.lru import Lru


def cost_limits(settings: Any) -> CostLimits:
    """The profile cost limits a ``Settings`` names."""
    return CostLimits(
        max_pld_points=settings.profile_max_pld_points,
        max_rdp_evaluations=settings.profile_max_rdp_evaluations,
    )


@functools.cache
def _dp_accounting_version() -> str:
    return metadata.version("dp-accounting")


def profile_key(mech_hash: str, discretization: float = DEFAULT_DISCRETIZATION) -> str:
    dp_version = _dp_accounting_version()
    return f"retarget:profile:f{PROFILE_FORMAT}:dpacc{dp_version}:{discretization:g}:{mech_hash}"


class ProfileStore(Protocol):
    def get(self, key: str) -> PrivacyProfile | None: ...

    def put(self, key: str, profile: PrivacyProfile) -> None: ...


#: What a profile cache holds by default, in bytes (``RETARGET_PROFILE_CACHE_BYTES``):
#: an LC plan over 64 DP-SGD models of 300 steps needs 128 profiles (each model's and
#: its first T-1 steps') of 6-10 MB each, and a cache smaller than one plan's working
#: set recomputes profiles on every plan.
DEFAULT_CACHE_BYTES = 2 * 1024**3


def profile_nbytes(profile: PrivacyProfile) -> int:
    """About what a cached profile takes in memory: its RDP table, its PLD's two PMFs with
    the lookup tables a query builds from each (losses and two tail sums: 4 arrays per
    PMF), the tabulated hockey-stick curves, and a fixed overhead for the rest."""
    size = 4096 + 2 * EPS_GRID.nbytes
    if profile.rdp is not None:
        size += profile.rdp.orders.nbytes + profile.rdp.epsilons.nbytes
    if profile.pld is not None:
        for pmf in (profile.pld.remove, profile.pld.add):
            size += 4 * np.asarray(pmf._probs).nbytes
    return int(size)


class MemoryProfileStore(Lru[str, PrivacyProfile]):
    """Profiles inside this process, least recently used dropped past ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        super().__init__(1_000_000, max_bytes=max_bytes, weigh=profile_nbytes)


class Profiles:
    """Get a mechanism's profile from the store, computing it on a miss."""

    def __init__(
        self,
        store: ProfileStore,
        discretization: float = DEFAULT_DISCRETIZATION,
        limits: CostLimits | None = None,
    ) -> None:
        self.store = store
        self.discretization = discretization
        self.limits = limits or CostLimits()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def key(self, mechanism: Mechanism) -> str:
        return profile_key(mechanism_hash(mechanism), self.discretization)

    def cached(self, mechanism: Mechanism) -> PrivacyProfile | None:
        return self.store.get(self.key(mechanism))

    def get(self, mechanism: Mechanism) -> PrivacyProfile:
        key = self.key(mechanism)
        profile = self.store.get(key)
        if profile is not None:
            return profile
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one computation per key in this process
            profile = self.store.get(key)
            if profile is None:
                profile = compute_profile(
                    mechanism, discretization=self.discretization, limits=self.limits
                )
                self.store.put(key, profile)
        return profile
