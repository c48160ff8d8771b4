"""Fuzzed mechanisms through the API (issue #30): every registration answers 201 or
422, never a 5xx, whatever the record; nothing is stored for a 422; the model's
epsilon answers 200, 202 (still computing) or 422 (its profile failed), never a 5xx.
Profiles run in their process within a small budget, so no example holds the test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from service.api.app import create_app
from service.config import Settings
from service.registry.migrate import upgrade
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, upload
from tests.mechanism_strategies import mechanisms


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    data: Path = tmp_path_factory.mktemp("fuzz")
    upgrade(url=f"sqlite:///{data / 'retarget.db'}")
    config = Settings(
        data_dir=data,
        database_url=f"sqlite:///{data / 'retarget.db'}",
        profile_budget_s=5.0,
        profile_request_wait_s=0.5,
    )
    app = create_app(config)
    with TestClient(app) as client:
        authorize(client, app.state.ctx.session_factory)
        ds = client.post("/v1/datasets", json={"name": "fuzz"}).json()["id"]
        yield client, ds


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mechanisms())
def test_any_mechanism_is_201_or_422_and_its_epsilon_never_a_5xx(
    fuzz_client: tuple[TestClient, str], mechanism: object
) -> None:
    client, ds = fuzz_client
    before = client.get(f"/v1/models?dataset_id={ds}").json()["count"]
    meta = {"dataset_id": ds, "name": "fuzzed", "mechanism": mechanism, "version": before + 1}
    resp = upload(client, checkpoint_bytes(seed=before), json.dumps(meta))
    assert resp.status_code in (201, 422), resp.text[:500]
    after = client.get(f"/v1/models?dataset_id={ds}").json()["count"]
    if resp.status_code == 422:
        assert after == before
        assert resp.headers["content-type"].startswith("application/problem+json")
        return
    eps = client.get(f"/v1/models/{resp.json()['id']}/epsilon")
    assert eps.status_code in (200, 202, 422), eps.text[:500]
