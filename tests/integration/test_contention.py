"""Contention: 20 concurrent releases on one dataset answer 200/201, 409 (the cap) or
429 with Retry-After (busy lock or pool), never 5xx, and the ledger holds exactly the
releases that were answered 201, on SQLite and on Postgres with real commits."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, sgd, upload

CONCURRENT = 20


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> Iterator[str]:
    if request.param == "sqlite":
        path = tmp_path / "contention.db"
        shutil.copy(sqlite_template, path)
        yield f"sqlite:///{path}"
    else:
        yield request.getfixturevalue("committed_db")


#: 60 s: requests queue behind the dataset lock and the pool; 0.2 s: most answer 429
@pytest.mark.parametrize("lock_timeout_s", [60.0, 0.2])
def test_concurrent_releases_never_answer_5xx(
    database_url: str, tmp_path: Path, lock_timeout_s: float
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        auto_migrate=False,
        plan_request_budget_s=600,
        release_lock_timeout_s=lock_timeout_s,
        db_pool_size=4,
        db_max_overflow=2,
        db_pool_timeout_s=lock_timeout_s,
    )
    app = create_app(settings)
    with TestClient(app) as client:
        authorize(client, app.state.ctx.session_factory)
        cap = {"name": "contended", "epsilon_cap": 6.0, "delta_cap": 1e-5}
        dataset = client.post("/v1/datasets", json=cap).json()["id"]
        for i, sigma in enumerate((1.0, 1.5, 2.5)):
            meta = {
                "dataset_id": dataset,
                "name": f"m{i}",
                "mechanism": sgd(sigma, steps=100, q=0.2),
            }
            resp = upload(client, checkpoint_bytes(i), json.dumps(meta))
            assert resp.status_code == 201, resp.text

        def release(i: int):  # type: ignore[no-untyped-def]
            body = {
                "dataset_id": dataset,
                "epsilon": 0.5 + 0.25 * i,
                "delta": 1e-5,
                "method": "rs",
            }
            return client.post("/v1/retarget", json=body)

        with ThreadPoolExecutor(CONCURRENT) as pool:
            answers = list(pool.map(release, range(CONCURRENT)))
        statuses = [r.status_code for r in answers]
        assert all(s in (200, 201, 409, 422, 429) for s in statuses), statuses
        for r in answers:
            if r.status_code >= 400:
                assert r.headers["content-type"].startswith("application/problem+json")
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1
        made = sorted(r.json()["release_id"] for r in answers if r.status_code == 201)
        if lock_timeout_s > 10:  # everyone queues: the cap alone refuses
            assert made and 409 in statuses and 429 not in statuses
        ledger = client.get(f"/v1/datasets/{dataset}/ledger").json()
        assert (
            sorted(r["release_id"] for r in ledger["releases"]) == made
        )  # nothing lost or doubled
        assert ledger["cumulative"]["epsilon"] <= 6.0
