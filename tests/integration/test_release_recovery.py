"""Start-up recovery: a release left ``pending`` by a process that died before its merge
finished is merged when the service starts again, or, past the recovery limit,
abandoned with its reserved budget freed. Never pending forever. (The drill with a
real process killed mid-merge is tests/e2e/test_merge_recovery.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.api.app import create_app
from service.api.routes import releases as release_routes
from service.api.routes.release_jobs import pending_release
from service.config import Settings
from service.registry.models import Release
from service.releases.recovery import MAX_RECOVERIES, recover_pending
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, sgd, upload


@contextmanager
def service(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    """One start of the service on the same database and blobs (its lifespan runs)."""
    settings = settings.model_copy(update={"release_async_bytes": 0})
    with TestClient(create_app(settings, session_factory=backend.session_factory)) as c:
        # the merges taken up at start, finished before this test's requests share
        # their database connection (one connection per test on Postgres)
        recovered = getattr(c.app.state, "recovered", None)
        for job_id in recovered.jobs.values() if recovered is not None else ():
            assert c.app.state.ctx.plan_jobs.wait(job_id, 300)  # type: ignore[attr-defined]
        authorize(c, backend.session_factory)
        yield c


def seed(c: TestClient) -> dict:
    ds = c.post("/v1/datasets", json={"name": "big", "epsilon_cap": 100}).json()["id"]
    ids = []
    for i in range(2):
        meta = {"dataset_id": ds, "name": f"m{i}", "mechanism": sgd(1.0)}
        resp = upload(c, checkpoint_bytes(i), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    return {"dataset_id": ds, "model_ids": ids, "epsilon": 3.0, "delta": 1e-5, "method": "lc"}


def left_pending(c: TestClient, body: dict, monkeypatch: pytest.MonkeyPatch) -> str:
    """A release whose process "dies" after the budget is reserved, before its merge."""

    def dies(ctx: object, public: object, deferred: object) -> JSONResponse:
        return pending_release(public)  # type: ignore[arg-type]

    monkeypatch.setattr(release_routes, "submit", dies)
    resp = c.post("/v1/retarget", json=body)
    assert resp.status_code == 202, resp.text
    assert resp.json().get("job_id") is None
    monkeypatch.undo()
    # as reported: the same request answers 202 with no job, and nothing merges it
    again = c.post("/v1/retarget", json=body)
    assert again.status_code == 202 and again.json().get("job_id") is None
    return str(resp.json()["release"]["release_id"])


def status_of(c: TestClient, release_id: str) -> int | str:
    resp = c.get(f"/v1/releases/{release_id}")
    return 404 if resp.status_code == 404 else str(resp.json()["status"])


def test_a_release_left_pending_is_merged_when_the_service_starts_again(
    settings: Settings, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    with service(settings, backend) as c:
        body = seed(c)
        release_id = left_pending(c, body, monkeypatch)
        ledger = c.get(f"/v1/datasets/{body['dataset_id']}/ledger").json()
        assert [r["status"] for r in ledger["releases"]] == ["pending"]
    with service(settings, backend) as c:  # the restart
        assert c.app.state.recovered.resubmitted == [release_id]  # type: ignore[attr-defined]
        assert status_of(c, release_id) == "done"
        resp = c.post("/v1/retarget", json=body)
        assert resp.status_code == 200 and resp.json()["release_id"] == release_id
        assert c.get(f"/v1/releases/{release_id}/weights").status_code == 200
        ledger = c.get(f"/v1/datasets/{body['dataset_id']}/ledger").json()
        assert [r["status"] for r in ledger["releases"]] == ["done"]
    with backend.session_factory() as session:
        assert session.get(Release, release_id).merge_recoveries == 1  # type: ignore[union-attr]


def test_a_merge_that_keeps_dying_is_abandoned_and_its_budget_freed(
    settings: Settings, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    with service(settings, backend) as c:
        body = seed(c)
        release_id = left_pending(c, body, monkeypatch)
    with backend.session_factory() as session:
        session.execute(
            update(Release).where(Release.id == release_id).values(merge_recoveries=MAX_RECOVERIES)
        )
        session.commit()
    with service(settings, backend) as c:
        assert c.get(f"/v1/releases/{release_id}").status_code == 404
        ledger = c.get(f"/v1/datasets/{body['dataset_id']}/ledger").json()
        assert ledger["releases"] == [] and ledger["exposed_model_ids"] == []
        assert ledger["cumulative"]["epsilon"] == 0
        # the same request no longer hangs: a new release, merged this time
        assert c.app.state.recovered.abandoned == [release_id]  # type: ignore[attr-defined]
        resp = c.post("/v1/retarget", json=body)
        assert resp.status_code == 202 and resp.json()["job_id"] is not None
        assert c.app.state.ctx.plan_jobs.wait(resp.json()["job_id"], 300)  # type: ignore[attr-defined]
        assert status_of(c, resp.json()["release"]["release_id"]) == "done"


def test_a_merge_still_running_elsewhere_is_left_alone_and_each_is_taken_once(
    settings: Settings, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    with service(settings, backend) as c:
        body = seed(c)
        release_id = left_pending(c, body, monkeypatch)
    factory = backend.session_factory
    seen: list[str] = []

    def resubmit(release_id: str) -> str:
        seen.append(release_id)
        return "job-1"

    busy = recover_pending(factory, running=lambda _: True, resubmit=resubmit)
    assert busy.running == [release_id] and seen == []
    first = recover_pending(factory, running=lambda _: False, resubmit=resubmit)
    assert first.resubmitted == [release_id] and first.jobs == {release_id: "job-1"}
    # the take-up is counted on the row
    with backend.session_factory() as session:
        row = session.get(Release, release_id)
        assert row is not None and row.merge_recoveries == 1 and row.status == "pending"

    def broken(_: str) -> str:
        raise OSError("the queue is down")

    with backend.session_factory() as session:  # a start whose queue cannot take it
        session.execute(update(Release).values(merge_recoveries=0))
        session.commit()
    failed = recover_pending(factory, running=lambda _: False, resubmit=broken)
    assert failed.abandoned == [release_id]
    with backend.session_factory() as session:
        assert session.get(Release, release_id) is None
