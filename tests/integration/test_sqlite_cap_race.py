"""The dataset cap under SQLite: the check and the record are one atomic step.

On Postgres the dataset's advisory lock lasts until the transaction ends. Under
SQLite a process lock released before the commit let a second release check the
cap against a ledger that did not yet hold the first: both passed. The test holds
the first release's transaction open (recorded, not committed) while a second,
different release of the same dataset runs; when the first commits, the second must
see it and be refused.
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import PlanRequestSpec
from service.accounting.profiles.profile import compute_profile
from service.api.app import create_app
from service.config import Settings
from service.errors import BudgetExceeded
from service.registry.db import session_scope
from service.releases import retarget as release_service
from tests.conftest import authorize
from tests.helpers import sgd
from tests.integration.test_releases import add_model


@pytest.fixture
def app_client(tmp_path: Path, sqlite_template: Path) -> Iterator[TestClient]:
    shutil.copy(sqlite_template, tmp_path / "race.db")
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path / 'race.db'}",
        auto_migrate=False,
        plan_request_budget_s=600,
    )
    app = create_app(settings)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        yield c


def _spec(epsilon: float) -> PlanRequestSpec:
    return PlanRequestSpec(epsilon=epsilon, delta=1e-5, method="rs", objective="noise")


def test_two_sqlite_releases_racing_for_the_last_budget_cannot_both_pass(
    app_client: TestClient,
) -> None:
    mech = sgd(1.0, steps=200)
    eps = compute_profile(parse_mechanism(mech)).epsilon(1e-5)  # one model
    cap = eps * 1.05  # one release fits, the two models together do not
    body = {"name": "race", "epsilon_cap": cap}
    ds = app_client.post("/v1/datasets", json=body).json()["id"]
    ids = [add_model(app_client, ds, f"m{i}", mech, seed=i) for i in range(2)]
    ctx = app_client.app.state.ctx

    def release(session, model_id: str):  # type: ignore[no-untyped-def]
        return release_service.retarget(
            session=session,
            profiles=ctx.profiles,
            blobs=ctx.blobs,
            dataset_id=ds,
            model_ids=[model_id],
            spec=_spec(cap),
        )

    first = ctx.session_factory()
    outcome: list[object] = []
    try:
        release(first, ids[0])  # recorded, lock released, transaction still open

        def second() -> None:
            try:
                with session_scope(ctx.session_factory) as s:
                    outcome.append(release(s, ids[1])[0].id)
            except Exception as exc:  # any outcome is recorded and checked
                outcome.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(1.0)  # let the second release reach its cap check first
        first.commit()
        thread.join()
    finally:
        first.close()
    assert len(outcome) == 1 and isinstance(outcome[0], BudgetExceeded), outcome
    ledger = app_client.get(f"/v1/datasets/{ds}/ledger").json()
    assert len(ledger["releases"]) == 1
    assert ledger["cumulative"]["epsilon"] <= cap and math.isfinite(cap)
