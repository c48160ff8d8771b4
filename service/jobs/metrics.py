"""Counters shared by the API and the workers, and their Prometheus exposition."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

COUNTERS = {
    "jobs_queued": "Accounting jobs enqueued",
    "jobs_started": "Accounting jobs started by a worker",
    "jobs_failed": "Accounting job attempts that failed",
    "profile_cache_hits": "Profile lookups answered from the cache",
    "profile_cache_misses": "Profile lookups that found nothing cached",
    "profile_computations": "Profiles computed",
    "profile_compute_seconds": "Seconds spent computing profiles",
}

REDIS_HASH = "retarget:metrics"


class Counters(Protocol):
    def incr(self, name: str, amount: float = 1.0) -> None: ...

    def values(self) -> dict[str, float]: ...


class LocalCounters:
    def __init__(self) -> None:
        self._values: dict[str, float] = dict.fromkeys(COUNTERS, 0.0)
        self._lock = threading.Lock()

    def incr(self, name: str, amount: float = 1.0) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0.0) + amount

    def values(self) -> dict[str, float]:
        with self._lock:
            return dict(self._values)


class RedisCounters:
    """Counters in one Redis hash, so every process adds to the same numbers.

    Like everything in Redis they may be flushed; Prometheus handles counter resets.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def incr(self, name: str, amount: float = 1.0) -> None:
        with contextlib.suppress(redis.RedisError):  # metrics never fail a request
            self.client.hincrbyfloat(REDIS_HASH, name, amount)

    def values(self) -> dict[str, float]:
        out = dict.fromkeys(COUNTERS, 0.0)
        try:
            raw = self.client.hgetall(REDIS_HASH)
        except redis.RedisError:
            return out
        for k, v in raw.items():
            out[k.decode() if isinstance(k, bytes) else str(k)] = float(v)
        return out


class JobsCollector(Collector):
    """Prometheus view of the counters and of the queue's current sizes."""

    def __init__(self, counters: Counters, gauges: object) -> None:
        self.counters = counters
        self.gauges = gauges

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        values = self.counters.values()
        for name, help_text in COUNTERS.items():
            metric = CounterMetricFamily(f"retarget_{name}", help_text)
            metric.add_metric([], values.get(name, 0.0))
            yield metric
        sizes = self.gauges() if callable(self.gauges) else {}
        for state, size in sizes.items():
            gauge = GaugeMetricFamily(f"retarget_jobs_{state}", f"Jobs {state} now")
            gauge.add_metric([], size)
            yield gauge
