"""What every request shares (the app's context) and who is calling (the principal).

The lowest module of the API: the key gate and the route dependencies both build on it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.jobs.queue import Jobs
from service.plans.jobs import PlanJobs
from service.profiles.epsilons import EpsilonCache
from service.profiles.source import ProfileSource
from service.registry.blobs import BlobStore

KEY_CACHE_TTL_S = 5.0
KEY_CACHE_SIZE = 4096


@dataclass(frozen=True)
class Principal:
    """Who is calling: the API key's id, name and scopes (or the open embedded mode)."""

    key_id: str | None
    name: str
    scopes: tuple[str, ...]

    def can(self, scope: str) -> bool:
        """Whether this key may do what ``scope`` allows (``admin`` may do everything)."""
        return scope in self.scopes or "admin" in self.scopes


class KeyCache:
    def __init__(self) -> None:
        self.items: dict[str, tuple[float, Principal | None]] = {}
        self.lock = threading.Lock()

    def get(self, digest: str) -> tuple[bool, Principal | None]:
        with self.lock:
            hit = self.items.get(digest)
        if hit is None or hit[0] < time.monotonic():
            return False, None
        return True, hit[1]

    def put(self, digest: str, principal: Principal | None) -> None:
        with self.lock:
            if len(self.items) >= KEY_CACHE_SIZE:
                self.items.clear()
            self.items[digest] = (time.monotonic() + KEY_CACHE_TTL_S, principal)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


@dataclass
class AppContext:
    """What the routes share: settings, the database, the blob store, the job queue and
    the privacy profiles."""

    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    blobs: BlobStore
    jobs: Jobs
    profiles: ProfileSource
    key_cache: KeyCache = field(default_factory=KeyCache)
    plan_jobs: PlanJobs = field(default_factory=PlanJobs)
    epsilons: EpsilonCache = field(default_factory=EpsilonCache)
