"""Private selection over HTTP (Postgres and SQLite): metrics computed on private data,
declared with their sensitivity, selected by the service with report-noisy-max; the
selection's epsilon is in the plan, the ledger and the release, drawn once."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.conftest import Backend
from tests.helpers import checkpoint_bytes, sgd, upload
from tests.integration.test_exposures import headers, joint, ledger

SIGMAS = (1.0, 2.0, 4.0)


@pytest.fixture
def registry(client: TestClient) -> dict:
    ds = client.post("/v1/datasets", json={"name": "private-metrics"}).json()["id"]
    ids = []
    for i, sigma in enumerate(SIGMAS):
        meta = {
            "dataset_id": ds,
            "name": f"m{i}",
            "mechanism": sgd(sigma),
            # accuracy on 500 private validation examples
            "metrics": {"private_acc": 0.93 - 0.02 * i},
            "metric_declarations": {"private_acc": {"source": "private", "sensitivity": 0.002}},
            "lineage": {"run_id": f"r{i}", "step": 400},
        }
        resp = upload(client, checkpoint_bytes(), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    return {"dataset": ds, "ids": ids}


def body(ds: str, **extra: object) -> dict:
    return {
        "dataset_id": ds,
        "epsilon": 20.0,
        "delta": 1e-5,
        "method": "rs",
        "objective": "metric",
        "metric": "private_acc",
        "metric_goal": "max",
        "metric_source": "private",
        **extra,
    }


def test_a_private_selection_is_drawn_once_and_charged_with_its_epsilon(
    client: TestClient, backend: Backend, registry: dict
) -> None:
    ds = registry["dataset"]
    reader = headers(backend, "read")
    resp = client.post("/v1/plans", json=body(ds), headers=reader)
    assert resp.status_code == 403  # it reads the models and private data: publish only
    publisher = headers(backend, "read", "publish")
    resp = client.post("/v1/plans", json=body(ds, selection_epsilon=0.5), headers=publisher)
    assert resp.status_code == 200, resp.text
    plan = resp.json()
    assert plan["selection_epsilon"] == 0.5
    [chosen] = plan["weights"]
    assert chosen["weight"] == 1.0 and chosen["model_id"] in registry["ids"]
    assert sorted(plan["exposed_model_ids"]) == sorted(registry["ids"])  # all three fit
    expected = joint(list(SIGMAS)) + 0.5
    assert expected * (1 - 1e-6) <= plan["epsilon"] <= 20.0
    assert any("report-noisy-max" in n for n in plan["notes"])
    book = ledger(client, ds)
    [exposure] = book["exposures"]
    assert exposure["kind"] == "private_selection"
    assert exposure["detail"]["selection_epsilon"] == 0.5
    assert book["cumulative"]["epsilon"] >= expected * (1 - 1e-6)
    # asked again, by another key: the same draw, no new charge
    second = headers(backend, "read", "publish")
    again = client.post("/v1/plans", json=body(ds, selection_epsilon=0.5), headers=second)
    assert again.status_code == 200, again.text
    assert again.json()["weights"] == plan["weights"]
    book2 = ledger(client, ds)
    assert [e["count"] for e in book2["exposures"]] == [2]
    assert book2["cumulative"]["epsilon"] == book["cumulative"]["epsilon"]
    # a release of the same selection: the same model, the selection's epsilon recorded
    release = client.post("/v1/retarget", json=body(ds, selection_epsilon=0.5))
    assert release.status_code in (200, 201), release.text
    rel = release.json()
    assert rel["epsilon"] == plan["epsilon"]
    assert rel["plan"]["selection_epsilon"] == 0.5
    assert [w["model_id"] for w in rel["weights"]] == [chosen["model_id"]]
    # another selection epsilon is another selection: drawn and charged again
    other = client.post("/v1/plans", json=body(ds, selection_epsilon=0.25), headers=publisher)
    assert other.status_code == 200
    book3 = ledger(client, ds)
    assert len([e for e in book3["exposures"] if e["kind"] == "private_selection"]) == 2
    assert book3["cumulative"]["epsilon"] >= (joint(list(SIGMAS)) + 0.75) * (1 - 1e-6)


def test_a_private_selection_of_metrics_without_a_sensitivity_is_422(
    client: TestClient, registry: dict
) -> None:
    meta = {
        "dataset_id": registry["dataset"],
        "name": "bad",
        "mechanism": sgd(3.0),
        "metrics": {"private_acc": 0.9},
        "metric_declarations": {"private_acc": {"source": "private"}},
    }
    resp = upload(client, checkpoint_bytes(), json.dumps(meta))
    assert resp.status_code == 422 and "sensitivity" in resp.json()["detail"]
    # a metric read from the models cannot be selected 'privately' either
    meta = {**meta, "name": "undeclared", "metric_declarations": {}}
    assert upload(client, checkpoint_bytes(), json.dumps(meta)).status_code == 201
    resp = client.post("/v1/plans", json=body(registry["dataset"]))
    assert resp.status_code == 422 and "declared 'models'" in resp.json()["detail"]
