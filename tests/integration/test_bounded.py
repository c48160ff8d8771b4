"""Bounded work over HTTP: every input the scale issue listed answers 4xx with a reason."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save

from service.api.app import create_app
from service.config import Settings
from service.registry import repository
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, sgd, upload

PROBLEM = "application/problem+json"


@pytest.fixture
def dataset(client: TestClient) -> str:
    return client.post("/v1/datasets", json={"name": "bounded"}).json()["id"]


def meta(dataset: str, **extra: object) -> str:
    body = {"dataset_id": dataset, "name": "m", "mechanism": sgd(1.0), **extra}
    return json.dumps(body)


def count(client: TestClient, dataset: str) -> int:
    return client.get("/v1/models", params={"dataset_id": dataset}).json()["count"]


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("version 2^63", {"version": 2**63}),
        ("step 2^63", {"lineage": {"run_id": "r", "step": 2**63}}),
        ("NUL in run id", {"lineage": {"run_id": "a\x00b", "step": 1}}),
        ("NUL in metric name", {"metrics": {"acc\x00": 0.5}}),
        ("NUL in description", {"description": "a\x00b"}),
        ("steps 2^63", {"mechanism": sgd(1.0, steps=2**63)}),
    ],
)
def test_out_of_range_metadata_is_refused(
    client: TestClient, dataset: str, name: str, extra: dict
) -> None:
    resp = upload(client, checkpoint_bytes(), meta(dataset, **extra))
    assert resp.status_code == 422, (name, resp.status_code, resp.text[:300])
    assert resp.headers["content-type"] == PROBLEM
    assert resp.json()["detail"]
    assert count(client, dataset) == 0


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float8_e4m3fn,
        torch.uint8,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.int8,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.complex64,
    ],
)
def test_upload_refuses_tensors_linear_combination_cannot_read(
    client: TestClient, dataset: str, dtype: torch.dtype
) -> None:
    weights = save({"ok": torch.zeros(2), "w": torch.zeros(4, dtype=torch.float32).to(dtype)})
    resp = upload(client, weights, meta(dataset))
    assert resp.status_code == 422, (dtype, resp.text[:300])
    assert resp.headers["content-type"] == PROBLEM
    assert "dtype" in resp.json()["detail"]
    assert "'w'" in resp.json()["detail"] and "'ok'" not in resp.json()["detail"]
    assert resp.json()["tensors"] == ["w"]
    assert count(client, dataset) == 0


def test_extreme_models_leave_queries_and_plans_working(client: TestClient, dataset: str) -> None:
    huge = {"type": "epsilon_delta", "epsilon": 800.0, "delta": 0.0}
    costly = sgd(0.05, steps=10**7)
    ids = []
    for i, mech in enumerate([huge, costly, sgd(1.0)]):
        resp = upload(client, checkpoint_bytes(), meta(dataset, name=f"m{i}", mechanism=mech))
        assert resp.status_code == 201, resp.text[:300]
        ids.append(resp.json()["id"])
    for model_id in ids:
        for delta in (1e-5, 1e-300):
            resp = client.get(f"/v1/models/{model_id}/epsilon", params={"delta": delta})
            assert resp.status_code == 200, resp.text[:300]
    notes = client.get(f"/v1/models/{ids[1]}/epsilon", params={"delta": 1e-5}).json()["notes"]
    assert any("no PLD" in n for n in notes)
    for epsilon in (2.0, 800.0):
        for method in ("rs", "auto"):
            body = {"dataset_id": dataset, "epsilon": epsilon, "delta": 1e-5, "method": method}
            resp = client.post("/v1/plans", json=body)
            assert resp.status_code == 200, resp.text[:300]
            assert ids[2] in [w["model_id"] for w in resp.json()["weights"]]


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 5e-324), (800.0, 5e-324)])
def test_subnormal_target_delta_is_refused(
    client: TestClient, dataset: str, epsilon: float, delta: float
) -> None:
    upload(client, checkpoint_bytes(), meta(dataset))
    body = {"dataset_id": dataset, "epsilon": epsilon, "delta": delta}
    for path in ("/v1/plans", "/v1/retarget"):
        resp = client.post(path, json=body)
        assert resp.status_code == 422, resp.text[:300]
        assert "delta" in resp.json()["detail"]


def test_epsilon_delta_model_past_exp_range_is_refused_with_reason(
    client: TestClient, dataset: str
) -> None:
    mech = {"type": "epsilon_delta", "epsilon": 710.0, "delta": 1e-5}
    resp = upload(client, checkpoint_bytes(), meta(dataset, mechanism=mech))
    assert resp.status_code == 422
    assert resp.json()["type"] == "urn:retarget:problem:profile-too-costly"
    assert "non_private" in resp.json()["detail"]
    assert count(client, dataset) == 0


def _slow_client(settings: Settings, backend, monkeypatch, gate: threading.Event, **extra):
    """A client whose plans wait on ``gate`` before computing, with ``extra`` settings."""
    from service.api.routes import plans as plan_routes

    real = plan_routes.plan_for

    def slow_plan_for(**kwargs):
        assert gate.wait(30), "the test never opened the gate"
        return real(**kwargs)

    monkeypatch.setattr(plan_routes, "plan_for", slow_plan_for)
    app = create_app(settings.model_copy(update=extra), session_factory=backend.session_factory)
    return app


def test_slow_plan_becomes_a_shared_job_whose_result_is_served(
    settings: Settings, backend, monkeypatch
) -> None:
    gate = threading.Event()
    app = _slow_client(settings, backend, monkeypatch, gate, plan_request_budget_s=0.05)
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        dataset = client.post("/v1/datasets", json={"name": "jobs"}).json()["id"]
        assert upload(client, checkpoint_bytes(), meta(dataset)).status_code == 201
        body = {"dataset_id": dataset, "epsilon": 8.0, "delta": 1e-5, "method": "rs"}
        first = client.post("/v1/plans", json=body)
        second = client.post("/v1/plans", json=body)
        assert first.status_code == second.status_code == 202, first.text
        location = first.headers["location"]
        assert location == second.headers["location"]  # one job for identical requests
        assert first.headers["retry-after"]
        job = client.get(location).json()
        assert job["kind"] == "plan" and job["status"] in ("queued", "started")
        gate.set()
        assert app.state.ctx.plan_jobs.wait(location.rsplit("/", 1)[1], 30)
        done = client.get(location).json()
        assert done["status"] == "finished"
        assert done["result"]["method"] == "rs" and done["result"]["epsilon"] <= 8.0
        again = client.post("/v1/plans", json=body)
        assert again.status_code == 200
        assert again.json()["weights"] == done["result"]["weights"]


def test_failed_plan_job_keeps_its_reason(settings: Settings, backend, monkeypatch) -> None:
    gate = threading.Event()
    app = _slow_client(settings, backend, monkeypatch, gate, plan_request_budget_s=0.05)
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        dataset = client.post("/v1/datasets", json={"name": "jobs"}).json()["id"]
        assert upload(client, checkpoint_bytes(), meta(dataset)).status_code == 201
        body = {"dataset_id": dataset, "epsilon": 0.01, "delta": 1e-5, "method": "rs"}
        resp = client.post("/v1/plans", json=body)
        assert resp.status_code == 202
        job_id = resp.headers["location"].rsplit("/", 1)[1]
        gate.set()
        assert app.state.ctx.plan_jobs.wait(job_id, 30)
        job = client.get(resp.headers["location"]).json()
        assert job["status"] == "failed" and "cannot meet" in job["error"]
        assert client.post("/v1/plans", json=body).status_code == 422  # not cached


def test_release_waiting_past_the_lock_timeout_answers_429(settings: Settings, backend) -> None:
    app = create_app(
        settings.model_copy(update={"release_lock_timeout_s": 0.1}),
        session_factory=backend.session_factory,
    )
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        dataset = client.post("/v1/datasets", json={"name": "busy"}).json()["id"]
        assert upload(client, checkpoint_bytes(), meta(dataset)).status_code == 201
        body = {"dataset_id": dataset, "epsilon": 8.0, "delta": 1e-5, "method": "rs"}
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with backend.session_factory() as session, repository.dataset_lock(session, dataset):
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert held.wait(10)
            resp = client.post("/v1/retarget", json=body)
        finally:
            release.set()
            holder.join()
        assert resp.status_code == 429, resp.text
        assert resp.headers["retry-after"]
        assert resp.json()["type"] == "urn:retarget:problem:busy"
        assert client.get(f"/v1/datasets/{dataset}/ledger").json()["releases"] == []
        assert client.post("/v1/retarget", json=body).status_code in (200, 201)
