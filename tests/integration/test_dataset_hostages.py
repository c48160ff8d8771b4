"""No registration can hold a dataset hostage (issue #30, part A): each test performs an
attack of the second security review against a real app (SQLite and Postgres).

- a per-step record longer than the schema's schedule, once accepted, broke every plan
  of its dataset: now refused at registration, and a bad stored row is left out;
- a profile that never ends ran in the request: now it runs in a profile process within
  its budget, fails there, and plans leave the model out and say so;
- empty compositions in a dp_event reached dp_accounting and divided by zero;
- a model can be retired (and restored), and a deployment protects what it serves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.api.app import create_app
from service.config import Settings
from service.registry.models import Model
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, sgd, upload


def _dataset(client: TestClient, name: str = "shared") -> str:
    resp = client.post("/v1/datasets", json={"name": name})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def _register(client: TestClient, ds: str, name: str, mechanism: dict, seed: int = 0):  # type: ignore[no-untyped-def]
    meta = {"dataset_id": ds, "name": name, "mechanism": mechanism}
    return upload(client, checkpoint_bytes(seed=seed), json.dumps(meta))


def _plan(client: TestClient, ds: str, epsilon: float = 8.0, **extra: object):  # type: ignore[no-untyped-def]
    body = {"dataset_id": ds, "epsilon": epsilon, "delta": 1e-5, **extra}
    return client.post("/v1/plans", json=body)


def test_per_step_arrays_past_the_schedule_limit_are_refused_and_store_nothing(
    client: TestClient,
) -> None:
    ds = _dataset(client)
    sigmas = [1.0 + i / 1_000_000 for i in range(100_001)]  # every step its own segment
    mech = {
        "type": "dp_sgd",
        "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
    }
    resp = _register(client, ds, "long", mech)
    assert resp.status_code == 422, resp.text[:300]
    assert "100000" in resp.text or "100,000" in resp.text
    assert client.get(f"/v1/models?dataset_id={ds}").json()["count"] == 0


def test_a_stored_record_that_no_longer_parses_is_left_out_of_its_datasets_plans(
    client: TestClient, backend: Backend
) -> None:
    ds = _dataset(client)
    good = _register(client, ds, "good", sgd(2.0, steps=100), seed=1).json()["id"]
    bad = _register(client, ds, "bad", sgd(3.0, steps=100), seed=2).json()["id"]
    # a row written under older, looser rules: a schedule over today's limit
    segment = {"steps": 1, "sampling_rate": 0.01, "noise_multiplier": 1.0, "clipping_norm": 1.0}
    broken = {
        "type": "dp_sgd",
        "sampling": "poisson",
        "optimizer": "sgd",
        "schedule": [segment] * 100_001,
    }
    with backend.session_factory() as session:
        session.execute(update(Model).where(Model.id == bad).values(mechanism=broken))
        session.commit()
    resp = _plan(client, ds)
    assert resp.status_code == 200, resp.text[:300]
    plan = resp.json()
    assert {w["model_id"] for w in plan["weights"]} <= {good}
    assert any(bad in note and "left out" in note for note in plan["notes"]), plan["notes"]
    # the model itself answers a problem, not a 500
    eps = client.get(f"/v1/models/{bad}/epsilon")
    assert eps.status_code == 422, eps.text[:300]
    # naming it is refused with the reason
    named = _plan(client, ds, model_ids=[bad])
    assert named.status_code == 422, named.text[:300]


def test_empty_compositions_in_a_dp_event_register_and_prove_nothing_released(
    client: TestClient,
) -> None:
    ds = _dataset(client)
    empty = {"kind": "ComposedDpEvent", "events": []}
    events = [
        {"kind": "PoissonSampledDpEvent", "sampling_probability": 0.0, "event": empty},
        {"kind": "PoissonSampledDpEvent", "sampling_probability": 0.5, "event": empty},
        {"kind": "SelfComposedDpEvent", "count": 3, "event": empty},
    ]
    for i, event in enumerate(events):
        resp = _register(client, ds, f"e{i}", {"type": "dp_event", "event": event}, seed=i)
        assert resp.status_code == 201, resp.text[:300]
        eps = client.get(f"/v1/models/{resp.json()['id']}/epsilon")
        assert eps.status_code == 200, eps.text[:300]
        assert eps.json()["epsilon"] == 0.0


@pytest.fixture
def budgeted(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    """An app whose profiles have an 8 s budget and whose requests wait 0.2 s for one."""
    tight = settings.model_copy(
        update={"profile_budget_s": 8.0, "profile_request_wait_s": 0.2, "plan_job_workers": 1}
    )
    app = create_app(tight, session_factory=backend.session_factory)
    with TestClient(app) as c:
        authorize(c, backend.session_factory)
        yield c


def _wait_for_job(client: TestClient, job_id: str, statuses: set[str]) -> dict:
    """Poll a job until its status is one of ``statuses`` (bounded by the budget)."""
    for _ in range(600):
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return dict(job)
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {job['status']}")


def test_a_profile_past_its_budget_fails_in_its_process_and_plans_go_on(
    budgeted: TestClient,
) -> None:
    client = budgeted
    ds = _dataset(client)
    good = _register(client, ds, "good", sgd(2.0, steps=50), seed=1)
    assert good.status_code == 201
    # 20,000 distinct steps: about 35 s of work on a 2-core machine, past the 8 s budget
    sigmas = [1.0 + i / 10_000 for i in range(20_000)]
    slow = {
        "type": "dp_sgd",
        "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
    }
    resp = _register(client, ds, "slow", slow, seed=2)
    assert resp.status_code == 201, resp.text[:300]
    slow_id = resp.json()["id"]
    pending = client.get(f"/v1/models/{slow_id}/epsilon")
    assert pending.status_code == 202, pending.text[:300]
    job = _wait_for_job(client, pending.json()["jobs"][0]["id"], {"failed", "finished"})
    assert job["status"] == "failed" and "budget" in job["error"], job
    # the model answers a problem; the dataset's plans leave it out and say so
    assert client.get(f"/v1/models/{slow_id}/epsilon").status_code == 422
    plan = _plan(client, ds)
    if plan.status_code == 202:  # the good model's profile is still being computed
        _wait_for_job(client, plan.json()["jobs"][0]["id"], {"finished"})
        plan = _plan(client, ds)
    assert plan.status_code == 200, plan.text[:300]
    assert [w["model_id"] for w in plan.json()["weights"]] == [good.json()["id"]]
    assert any(slow_id in n and "left out" in n for n in plan.json()["notes"])


def test_retired_models_leave_plans_and_deployments_protect_what_they_serve(
    client: TestClient,
) -> None:
    ds = _dataset(client)
    a = _register(client, ds, "a", sgd(2.0, steps=100), seed=1).json()["id"]
    b = _register(client, ds, "b", sgd(4.0, steps=100), seed=2).json()["id"]
    body = {"name": "prod", "dataset_id": ds, "epsilon": 50.0, "delta": 1e-5, "method": "rs"}
    dep = client.post("/v1/deployments", json=body)
    assert dep.status_code == 201, dep.text[:300]
    served = client.get(f"/v1/releases/{dep.json()['current_release_id']}").json()
    held = set(served["exposed_model_ids"])
    target = next(iter(held))
    refused = client.post(f"/v1/models/{target}/retire", json={"reason": "leaked"})
    assert refused.status_code == 409 and "prod" in refused.text
    forced = client.post(f"/v1/models/{target}/retire", json={"reason": "leaked", "force": True})
    assert forced.status_code == 200 and forced.json()["retired_reason"] == "leaked"
    other = ({a, b} - {target}).pop()
    plan = _plan(client, ds, epsilon=50.0)
    assert plan.status_code == 200
    assert {w["model_id"] for w in plan.json()["weights"]} == {other}
    assert _plan(client, ds, epsilon=50.0, model_ids=[target]).status_code == 422
    # the deployment still serves its release; the ledger keeps what was released
    assert client.get("/v1/deployments/prod").json()["current_release_id"] == served["release_id"]
    restored = client.post(f"/v1/models/{target}/restore")
    assert restored.status_code == 200 and restored.json()["retired_at"] is None
    assert _plan(client, ds, epsilon=50.0, model_ids=[target]).status_code == 200


def test_retiring_needs_admin_and_a_reason(client: TestClient, backend: Backend) -> None:
    ds = _dataset(client)
    model = _register(client, ds, "a", sgd(2.0, steps=100)).json()["id"]
    assert client.post(f"/v1/models/{model}/retire", json={"reason": " "}).status_code == 422
    authorize(client, backend.session_factory, "publish", "read")
    assert client.post(f"/v1/models/{model}/retire", json={"reason": "x"}).status_code == 403


def test_the_dashboard_shows_a_retired_model_and_why(client: TestClient) -> None:
    from service.dashboard.auth import COOKIE

    ds = _dataset(client)
    model = _register(client, ds, "old", sgd(2.0, steps=100)).json()["id"]
    client.post(f"/v1/models/{model}/retire", json={"reason": "trained on a leaked shard"})
    key = client.post("/v1/keys", json={"name": "viewer", "scopes": ["read"]}).json()
    signer = client.app.state.session_signer  # type: ignore[attr-defined]
    client.cookies.set(COOKIE, signer.issue(key["id"], 0), path="/admin")
    page = client.get(f"/admin/models/{model}")
    assert page.status_code == 200
    assert "retired" in page.text and "trained on a leaked shard" in page.text
    assert "retired" in client.get(f"/admin/datasets/{ds}").text
