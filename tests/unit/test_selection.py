"""Random selection by common random numbers, and what a release's idempotency key covers."""

from __future__ import annotations

import numpy as np
import pytest

from service.accounting.planning import PlanRequestSpec, reads_models
from service.errors import InvalidInput
from service.merging.random_selection import select
from service.releases.retarget import legacy_request_hash, request_hash


def test_inverse_cdf_gives_each_model_exactly_its_probability() -> None:
    weights = [0.125, 0.0, 0.5, 0.375]
    # a uniform grid of u (midpoints): each index's share is its weight, exactly
    n = 8000
    grid = (np.arange(n) + 0.5) / n
    counts = np.bincount([select(weights, float(u)) for u in grid], minlength=4)
    np.testing.assert_array_equal(counts / n, weights)
    assert select(weights, 0.0) == 0
    assert select(weights, np.nextafter(1.0, 0.0)) == 3
    # unnormalised weights are probabilities up to their sum
    assert select([2.0, 6.0], 0.24) == 0 and select([2.0, 6.0], 0.26) == 1


def test_nearly_equal_plans_select_the_same_model() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        pi = rng.dirichlet(np.ones(4))
        nudged = pi + rng.uniform(-1e-9, 1e-9, 4)
        nudged = np.clip(nudged, 0, None) / np.clip(nudged, 0, None).sum()
        boundaries = np.cumsum(pi)
        for u in rng.uniform(0, 1, 50):
            if np.min(np.abs(boundaries - u)) > 1e-8:  # away from a boundary: the same
                assert select(pi.tolist(), float(u)) == select(nudged.tolist(), float(u))


@pytest.mark.parametrize("bad", [([0.5, 0.5], 1.0), ([0.5, 0.5], -0.1), ([0.0, 0.0], 0.5)])
def test_select_refuses_bad_input(bad: tuple[list[float], float]) -> None:
    with pytest.raises(InvalidInput):
        select(*bad)


def spec(**fields: object) -> PlanRequestSpec:
    return PlanRequestSpec(**{"epsilon": 2.0, "delta": 1e-5, "method": "rs", **fields})  # type: ignore[arg-type]


def test_request_hash_covers_only_what_changes_the_plan() -> None:
    key = request_hash("d", spec(), ["a", "b"])
    for same in (
        spec(objective="signal"),
        spec(metric_source="prior"),
        spec(metric_goal="max"),
        spec(last_k=9, ema_decay=0.3, run_id="r"),
    ):
        assert request_hash("d", same, ["b", "a"]) == key, same
    for other in (
        spec(epsilon=2.0 + 1e-9),
        spec(delta=1e-6),
        spec(accountant="rdp"),
        spec(method="lc"),
        spec(objective="noise"),  # no longer the default
        spec(metric="acc", metric_goal="max"),  # objective 'metric' (implied for RS)
    ):
        assert request_hash("d", other, ["a", "b"]) != key, other
    assert request_hash("d", spec(), ["a", "b"], "float16") != key
    assert request_hash("d", spec(), ["a"]) != key
    # under objective 'metric' the metric fields count; checkpoint fields for averaging
    metric = spec(objective="metric", metric="acc", metric_goal="max")
    assert request_hash("d", metric, ["a"]) != request_hash(
        "d", spec(objective="metric", metric="acc", metric_goal="min"), ["a"]
    )
    avg = spec(method="checkpoint_average", last_k=2)
    assert request_hash("d", avg, ["a"]) != request_hash(
        "d", spec(method="checkpoint_average", last_k=3), ["a"]
    )
    # releases stored under the old key are still found by it (and never collide)
    assert legacy_request_hash("d", spec(), ["a", "b"]) != key


def test_plans_that_read_the_models_are_told_apart() -> None:
    assert reads_models(spec(method="lc", objective="validation"))
    assert reads_models(spec(method="auto", objective="validation"))
    assert reads_models(spec(objective="metric", metric="acc"))
    assert reads_models(spec(metric="acc"))  # RS with a metric: objective 'metric'
    assert reads_models(spec(method="auto", objective="metric", metric="acc"))
    assert not reads_models(spec(objective="metric", metric="acc", metric_source="prior"))
    assert not reads_models(spec())
    assert not reads_models(spec(method="lc"))
    assert not reads_models(spec(method="auto", metric="acc"))  # auto: objective 'noise'
