"""Background work in the API process (the embedded mode, no Redis): a bounded pool.

A fixed number of threads run the work; work due later waits in a heap watched by
one timer thread, never in a sleeping pool thread. So 300 callbacks being retried
hold ``workers`` + 1 threads, not 300.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)


class DelayedPool:
    def __init__(self, workers: int, name: str = "retarget-bg") -> None:
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._timer: threading.Thread | None = None
        self._name = name

    def submit(self, fn: Callable[[], None], delay_s: float = 0.0) -> None:
        if delay_s <= 0:
            self.executor.submit(self._guarded, fn)
            return
        with self._wake:
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._order), fn))
            if self._timer is None:
                self._timer = threading.Thread(
                    target=self._run_timer, name=f"{self._name}-timer", daemon=True
                )
                self._timer.start()
            self._wake.notify()

    def pending(self) -> int:
        """Work waiting for its time (not yet handed to the pool)."""
        with self._wake:
            return len(self._heap)

    def _run_timer(self) -> None:
        while True:
            with self._wake:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._wake.wait(timeout)
                _, _, fn = heapq.heappop(self._heap)
            self.executor.submit(self._guarded, fn)

    @staticmethod
    def _guarded(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # the work records its own failures; never kill the pool
            log.exception("background work failed")
