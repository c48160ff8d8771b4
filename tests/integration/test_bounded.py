"""Bounded work over HTTP: every input the scale issue listed answers 4xx with a reason."""

from __future__ import annotations

import json

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save

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
    "dtype", [torch.float8_e4m3fn, torch.uint16, torch.uint32, torch.uint64, torch.complex64]
)
def test_upload_refuses_tensors_linear_combination_cannot_read(
    client: TestClient, dataset: str, dtype: torch.dtype
) -> None:
    weights = save({"w": torch.zeros(4, dtype=torch.float32).to(dtype)})
    resp = upload(client, weights, meta(dataset))
    assert resp.status_code == 422, (dtype, resp.text[:300])
    assert resp.headers["content-type"] == PROBLEM
    assert "dtype" in resp.json()["detail"]
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
