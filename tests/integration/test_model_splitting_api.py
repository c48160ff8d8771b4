"""Model splitting and dropout end to end: registered through the API, planned by RS and
LC, and refused (problem+json, nothing stored) where the bound does not apply."""

from __future__ import annotations

import json
import math

import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
from fastapi.testclient import TestClient

from tests.helpers import checkpoint_bytes, upload

PROBLEM = "application/problem+json"


def _split(parts: int, sigma: float, **extra) -> dict:
    return {
        "type": "model_splitting",
        "parts": parts,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "shared_clipping_norm": 1.0,
        "sampling_rate": 0.1,
        "steps": 200,
        "learning_rate": 0.1,
        **extra,
    }


@pytest.fixture
def split_models(client: TestClient) -> dict:
    ds = client.post("/v1/datasets", json={"name": "split", "metric": "accuracy"}).json()["id"]
    ids = {}
    for name, mech, acc in [
        ("three", _split(3, 2.7), 0.81),
        # dropout at p = 0.5 over the whole network: nothing shared
        (
            "dropout",
            _split(2, 2.5, scheme="dropout", dropout_rate=0.5, shared_clipping_norm=0.0),
            0.84,
        ),
    ]:
        meta = {
            "dataset_id": ds,
            "name": name,
            "mechanism": mech,
            "metrics": {"accuracy": acc},
            "metric_declarations": {"accuracy": {"source": "prior"}},
        }
        resp = upload(client, checkpoint_bytes(), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids[name] = resp.json()["id"]
    return {"dataset": ds, "models": ids}


def test_split_models_get_rs_and_lc_plans(client: TestClient, split_models: dict) -> None:
    for method in ("rs", "lc"):
        resp = client.post(
            "/v1/plans",
            json={
                "dataset_id": split_models["dataset"],
                "epsilon": 8.0,
                "delta": 1e-5,
                "method": method,
            },
        )
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["method"] == method
        assert 0 < body["epsilon"] <= 8.0
        used = {w["model_id"] for w in body["weights"]}
        assert used and used <= set(split_models["models"].values())
    model = split_models["models"]["three"]
    resp = client.get(f"/v1/models/{model}/epsilon", params={"delta": 1e-5})
    assert resp.status_code == 200, resp.text
    eps = resp.json()["epsilon"]
    # amplified: below the same run without the split (one Gaussian of sensitivity sqrt(2))
    unsplit = rdp_acc.RdpAccountant()
    unsplit.compose(
        dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(2.7 / math.sqrt(2))), 200
    )
    assert 0 < eps < unsplit.get_epsilon(1e-5)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"scheme": "dropout", "parts": 2, "dropout_rate": 0.3}, "dropout_rate"),
        ({"parts": 2, "parts_per_example": 3}, "parts_per_example"),
        ({"noise_multiplier": 0.01}, "noise_multiplier"),
    ],
)
def test_what_the_bound_does_not_cover_is_refused(
    client: TestClient, change: dict, field: str
) -> None:
    ds = client.post("/v1/datasets", json={"name": "refused", "metric": "accuracy"}).json()["id"]
    meta = {"dataset_id": ds, "name": "bad", "mechanism": _split(3, 2.0) | change}
    resp = upload(client, checkpoint_bytes(), json.dumps(meta))
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    assert field in resp.text
    listed = client.get("/v1/models", params={"dataset_id": ds})
    assert listed.status_code == 200 and "bad" not in listed.text
