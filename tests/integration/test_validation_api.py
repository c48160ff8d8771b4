"""Public validation splits, declared architectures, objective 'validation' and
POST /v1/plans/guarantee over HTTP (Postgres and SQLite)."""

from __future__ import annotations

import json

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save

from service.config import Settings
from tests.conftest import blob_files
from tests.helpers import sgd, upload

LOGREG = {
    "input_shape": [8],
    "layers": [{"op": "linear", "weight": "fc.weight", "bias": "fc.bias"}],
}


def weights(seed: int) -> bytes:
    gen = torch.Generator().manual_seed(seed)
    return save({"fc.weight": torch.randn(3, 8, generator=gen), "fc.bias": torch.zeros(3)})


def split(n: int = 40) -> bytes:
    gen = torch.Generator().manual_seed(9)
    return save({"inputs": torch.randn(n, 8, generator=gen), "labels": torch.arange(n) % 3})


@pytest.fixture
def registry(client: TestClient) -> dict:
    ds = client.post("/v1/datasets", json={"name": "tiny"}).json()["id"]
    ids = {}
    for i, sigma in enumerate((0.9, 1.6, 3.0)):
        meta = {
            "dataset_id": ds,
            "name": f"m{i}",
            "mechanism": sgd(sigma),
            "architecture": LOGREG,
            "lineage": {"run_id": f"r{i}", "step": 400},
        }
        resp = upload(client, weights(i), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids[f"m{i}"] = resp.json()["id"]
    return {"dataset": ds, "models": ids}


def put_split(client: TestClient, ds: str, body: bytes):
    return client.put(
        f"/v1/datasets/{ds}/validation",
        content=body,
        headers={"content-type": "application/octet-stream"},
    )


def test_validation_split_is_stored_and_shown(client: TestClient, registry: dict) -> None:
    resp = put_split(client, registry["dataset"], split())
    assert resp.status_code == 200, resp.text
    assert resp.json()["validation_examples"] == 40
    assert client.get(f"/v1/datasets/{registry['dataset']}").json()["validation_sha256"]


@pytest.mark.parametrize(
    "body",
    [
        b"not safetensors",
        save({"inputs": torch.randn(4, 8)}),
        save({"inputs": torch.randn(4, 8), "labels": torch.zeros(5, dtype=torch.int64)}),
        save({"inputs": torch.randn(4, 8), "labels": torch.zeros(4)}),  # float labels
        save({"inputs": torch.full((4, 8), float("nan")), "labels": torch.zeros(4).long()}),
    ],
)
def test_bad_validation_split_is_refused_and_nothing_stored(
    client: TestClient, settings: Settings, registry: dict, body: bytes
) -> None:
    before = blob_files(settings)
    resp = put_split(client, registry["dataset"], body)
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    assert blob_files(settings) == before
    assert client.get(f"/v1/datasets/{registry['dataset']}").json()["validation_sha256"] is None


def test_architecture_that_does_not_fit_the_weights_is_refused(
    client: TestClient, settings: Settings, registry: dict
) -> None:
    before = blob_files(settings)
    wrong = {**LOGREG, "input_shape": [9]}
    meta = {"dataset_id": registry["dataset"], "name": "bad", "mechanism": sgd(1.0)}
    resp = upload(client, weights(5), json.dumps({**meta, "architecture": wrong}))
    assert resp.status_code == 422
    assert "expected [out, 9]" in resp.json()["detail"]
    assert blob_files(settings) == before
    listed = client.get(f"/v1/models?dataset_id={registry['dataset']}").json()["data"]
    assert all(m["name"] != "bad" for m in listed)


def test_validation_plan_scores_merged_weights_and_exposes_what_it_scored(
    client: TestClient, registry: dict
) -> None:
    ds, ids = registry["dataset"], registry["models"]
    body = {"dataset_id": ds, "epsilon": 4.0, "delta": 1e-5, "method": "lc"}
    missing = client.post("/v1/plans", json={**body, "objective": "validation"})
    assert missing.status_code == 422 and "validation split" in missing.json()["detail"]
    assert put_split(client, ds, split()).status_code == 200
    resp = client.post("/v1/plans", json={**body, "objective": "validation"})
    assert resp.status_code == 200, resp.text
    plan = resp.json()
    assert plan["objective"] == "validation"
    assert 0 <= plan["objective_value"] <= 1
    assert plan["epsilon"] <= 4.0
    assert "Theorem 6.1" in plan["bound"]
    assert {w["model_id"] for w in plan["weights"]} <= set(plan["exposed_model_ids"])
    # the accuracy reported is the merged model's own, recomputed here from the weights
    merged = {
        "fc.weight": torch.zeros(3, 8),
        "fc.bias": torch.zeros(3),
    }
    from safetensors.torch import load

    for w in plan["weights"]:
        seed = next(k for k, v in ids.items() if v == w["model_id"])
        tensors = load(weights(int(seed[1:])))
        for k in merged:
            merged[k] += w["weight"] * tensors[k]
    data = load(split())
    logits = data["inputs"] @ merged["fc.weight"].T + merged["fc.bias"]
    acc = float((logits.argmax(1) == data["labels"]).float().mean())
    assert plan["objective_value"] == pytest.approx(acc, abs=1e-6)
    release = client.post("/v1/retarget", json={**body, "objective": "validation"})
    assert release.status_code == 201, release.text
    assert set(release.json()["exposed_model_ids"]) == set(plan["exposed_model_ids"])


def test_guarantee_of_one_model_is_that_models_epsilon(client: TestClient, registry: dict) -> None:
    ds, ids = registry["dataset"], registry["models"]
    own = {
        acc: client.get(f"/v1/models/{ids['m1']}/epsilon?delta=1e-5&accountant={acc}").json()[
            "epsilon"
        ]
        for acc in ("rdp", "pld")
    }
    for method in ("rs", "lc"):
        resp = client.post(
            "/v1/plans/guarantee",
            json={
                "dataset_id": ds,
                "delta": 1e-5,
                "method": method,
                "weights": [{"model_id": ids["m1"], "weight": 1.0}],
            },
        )
        assert resp.status_code == 200, resp.text
        got = resp.json()["by_accountant"]
        for acc in ("rdp", "pld"):
            # same model, different routes (RS/LC bounds vs the profile): never below it
            assert own[acc] * (1 - 1e-6) <= got[acc] <= own[acc] * 1.02, (method, acc, got)


def test_guarantee_refuses_weights_that_do_not_sum_to_one(
    client: TestClient, registry: dict
) -> None:
    ids = registry["models"]
    resp = client.post(
        "/v1/plans/guarantee",
        json={
            "dataset_id": registry["dataset"],
            "delta": 1e-5,
            "method": "lc",
            "weights": [
                {"model_id": ids["m0"], "weight": 0.5},
                {"model_id": ids["m1"], "weight": 0.2},
            ],
        },
    )
    assert resp.status_code == 422
    assert "sum to 1" in resp.json()["detail"]
