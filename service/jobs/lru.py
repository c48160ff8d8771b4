"""A bounded, thread-safe least-recently-used map: the in-process caches share it.

Bounded by a number of entries, and optionally by bytes: with ``weigh`` (an entry's
size in bytes) and ``max_bytes``, the least recently used entries are dropped until
the held bytes fit. An entry larger than ``max_bytes`` on its own is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(
        self,
        max_entries: int,
        *,
        max_bytes: int | None = None,
        weigh: Callable[[V], int] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if (max_bytes is None) != (weigh is None):
            raise ValueError("max_bytes and weigh go together")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._weigh = weigh
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """The bytes the held entries weigh (0 when not bounded by bytes)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: K, value: V) -> None:
        size = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if self.max_bytes is not None and size > self.max_bytes:
                return  # larger than the whole cache: not kept
            self._items[key] = (value, size)
            self._bytes += size
            while len(self._items) > self.max_entries or (
                self.max_bytes is not None and self._bytes > self.max_bytes
            ):
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped
