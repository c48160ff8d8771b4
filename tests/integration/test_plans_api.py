"""POST /v1/plans against the registry (Postgres and SQLite)."""

from __future__ import annotations

import json
import uuid

import pytest
from fastapi.testclient import TestClient

from tests.helpers import checkpoint_bytes, sgd, upload

PROBLEM = "application/problem+json"


@pytest.fixture
def registry(client: TestClient) -> dict:
    ds = client.post("/v1/datasets", json={"name": "digits", "metric": "accuracy"}).json()["id"]
    ids = {}
    for name, sigma, acc, run in [
        ("s08", 0.8, 0.92, "r1"),
        ("s15", 1.5, 0.88, "r2"),
        ("s30", 3.0, 0.75, "r3"),
    ]:
        meta = {
            "dataset_id": ds,
            "name": name,
            "mechanism": sgd(sigma),
            # accuracy from a public proxy run ('prior'); val_accuracy read from the
            # model itself (declared nothing: 'models')
            "metrics": {"accuracy": acc, "val_accuracy": acc},
            "metric_declarations": {"accuracy": {"source": "prior"}},
            "lineage": {"run_id": run, "step": 400},
        }
        resp = upload(client, checkpoint_bytes(), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids[name] = resp.json()["id"]
    return {"dataset": ds, "models": ids}


def plan(client: TestClient, **body):
    return client.post("/v1/plans", json=body)


def test_the_default_rs_plan_uses_a_prior_metric_and_reads_no_model(
    client: TestClient, registry: dict
) -> None:
    """Every candidate declares the dataset's metric 'prior': the default plan selects by
    it under Theorems 5.1/5.2, exposes nothing, and says why in its notes."""
    resp = plan(client, dataset_id=registry["dataset"], epsilon=2.0, delta=1e-5, method="rs")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["method"] == "rs" and body["objective"] == "metric"
    assert body["epsilon"] <= 2.0 and "Theorem 5" in body["bound"]
    assert body["exposed_model_ids"] == sorted(w["model_id"] for w in body["weights"])
    assert any("declares metric 'accuracy' 'prior'" in n for n in body["notes"])


def test_the_default_plan_without_prior_metrics_scores_the_training_signal(
    client: TestClient,
) -> None:
    """No metric declared 'prior': the default objective is the noise-to-signal ratio of
    each model's training, which prefers the longer run at the same noise (the old
    default, the merged noise variance, preferred the shorter one)."""
    ds = client.post("/v1/datasets", json={"name": "signal", "metric": "val_accuracy"}).json()
    ids = {}
    for name, steps in (("short", 100), ("long", 400)):
        meta = {
            "dataset_id": ds["id"],
            "name": name,
            "mechanism": sgd(3.0, steps=steps),
            "metrics": {"val_accuracy": 0.9},
        }
        resp = upload(client, checkpoint_bytes(), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids[name] = resp.json()["id"]
    resp = plan(client, dataset_id=ds["id"], epsilon=20.0, delta=1e-5)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["objective"] == "signal"
    assert [w["model_id"] for w in body["weights"]] == [ids["long"]]
    assert body["weights"][0]["model_name"] == "long"
    assert "noise-to-signal" in body["notes"][0]
    assert any("releases one model, long" in n for n in body["notes"])
    old = plan(client, dataset_id=ds["id"], epsilon=20.0, delta=1e-5, objective="noise")
    assert old.json()["weights"][0]["model_id"] == ids["short"]  # the most weight


def test_rs_plan_on_prior_metrics_uses_the_dataset_metric_and_meets_the_target(
    client: TestClient, registry: dict
) -> None:
    resp = plan(
        client,
        dataset_id=registry["dataset"],
        epsilon=2.0,
        delta=1e-5,
        method="rs",
        objective="metric",
        metric_goal="max",
        metric_source="prior",
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["method"] == "rs" and body["objective"] == "metric"
    assert body["epsilon"] <= 2.0 and body["delta"] == 1e-5
    assert sum(w["weight"] for w in body["weights"]) == pytest.approx(1.0)
    assert 0.75 <= body["expected_utility"] <= 0.92
    assert "Theorem 5" in body["bound"]
    assert any("prior" in n for n in body["notes"])


def test_metric_plans_need_a_goal_and_cost_the_joint_release_of_the_models_read(
    client: TestClient, registry: dict
) -> None:
    ds = registry["dataset"]
    base = {
        "dataset_id": ds,
        "delta": 1e-5,
        "method": "rs",
        "objective": "metric",
        "metric": "val_accuracy",
    }
    no_goal = plan(client, epsilon=2.0, **base)
    assert no_goal.status_code == 422 and "metric_goal" in no_goal.json()["detail"]
    scored = plan(client, epsilon=2.0, metric_goal="max", **base)
    assert scored.status_code == 422, scored.text
    joint = scored.json()["min_epsilon"]
    ok = plan(client, epsilon=joint, metric_goal="max", **base)
    assert ok.status_code == 200, ok.text
    assert sorted(ok.json()["exposed_model_ids"]) == sorted(registry["models"].values())
    assert "joint release" in ok.json()["bound"]


def _guarantee(client: TestClient, mechanism: dict, weights: list[float]) -> float:
    ds = client.post("/v1/datasets", json={"name": f"counterexample-{uuid.uuid4()}"}).json()["id"]
    ids = []
    for i in range(len(weights)):
        meta = {"dataset_id": ds, "name": f"run{i}", "mechanism": mechanism}
        resp = upload(client, checkpoint_bytes(), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    resp = client.post(
        "/v1/plans/guarantee",
        json={
            "dataset_id": ds,
            "delta": 1e-5,
            "method": "lc",
            "weights": [{"model_id": m, "weight": w} for m, w in zip(ids, weights, strict=True)],
        },
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["paper_epsilon"] is None or body["paper_epsilon"] < 3.862 or len(weights) < 2
    assert any("independent" in n for n in body["notes"])
    return body["epsilon"]


def test_guarantee_of_the_hidden_state_counterexample_is_sound(client: TestClient) -> None:
    """2 runs, q = 1, noise 2, clip 1, T = 2, weights 0.9/0.1: exact epsilon 3.862."""
    dp_sgd = {**sgd(2.0, steps=2, q=1.0), "learning_rate": 0.1}
    assert 3.862 <= _guarantee(client, dp_sgd, [0.9, 0.1]) <= 3.98
    twice = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 2.0, "count": 2}
    assert _guarantee(client, twice, [0.9, 0.1]) >= 3.862
    once = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 2.0}
    assert 2.227 <= _guarantee(client, once, [0.9, 0.1]) <= 2.227 * 1.01


def test_lc_and_auto_plans(client: TestClient, registry: dict) -> None:
    lc = plan(
        client,
        dataset_id=registry["dataset"],
        epsilon=1.5,
        delta=1e-5,
        method="lc",
        accountant="rdp",
    ).json()
    assert lc["method"] == "lc" and lc["epsilon"] <= 1.5 and lc["objective"] == "signal"
    noise = {"dataset_id": registry["dataset"], "epsilon": 1.5, "delta": 1e-5, "accountant": "rdp"}
    lc_noise = plan(client, method="lc", objective="noise", **noise).json()
    auto = plan(client, objective="noise", **noise).json()
    assert auto["objective_value"] <= lc_noise["objective_value"] * (1 + 1e-9)
    # the default objective does not average trained networks unless asked (method 'lc')
    auto = plan(client, objective="signal", **noise).json()
    assert auto["method"] == "rs"
    assert any("linear combination not weighed" in n for n in auto["notes"])


def test_unreachable_target_is_422_with_min_epsilon(client: TestClient, registry: dict) -> None:
    resp = plan(
        client,
        dataset_id=registry["dataset"],
        epsilon=0.01,
        delta=1e-5,
        method="rs",
        accountant="rdp",
    )
    assert resp.status_code == 422
    assert resp.headers["content-type"].startswith(PROBLEM)
    body = resp.json()
    assert body["type"] == "urn:retarget:problem:infeasible-target"
    assert body["min_epsilon"] > 0.01
    again = plan(
        client,
        dataset_id=registry["dataset"],
        epsilon=body["min_epsilon"],
        delta=1e-5,
        method="rs",
        accountant="rdp",
    )
    assert again.status_code == 200 and again.json()["epsilon"] <= body["min_epsilon"]


def test_lc_on_checkpoints_of_one_run_is_refused_with_the_reason(
    client: TestClient, registry: dict
) -> None:
    ds = registry["dataset"]
    meta = {
        "dataset_id": ds,
        "name": "s08-early",
        "mechanism": sgd(0.8, steps=200),
        "lineage": {"run_id": "r1", "step": 200},
    }
    early = upload(client, checkpoint_bytes(), json.dumps(meta)).json()["id"]
    ids = [registry["models"]["s08"], early]
    resp = plan(client, dataset_id=ds, epsilon=5.0, delta=1e-5, method="lc", model_ids=ids)
    assert resp.status_code == 422
    assert resp.json()["type"] == "urn:retarget:problem:unsupported"
    assert "one run" in resp.json()["detail"]
    rs = plan(
        client,
        dataset_id=ds,
        epsilon=5.0,
        delta=1e-5,
        method="rs",
        model_ids=ids,
        objective="noise",
    )
    assert rs.status_code == 200


def test_models_of_another_dataset_and_unknown_ids(client: TestClient, registry: dict) -> None:
    other = client.post("/v1/datasets", json={"name": "other"}).json()["id"]
    foreign = plan(
        client, dataset_id=other, epsilon=2.0, delta=1e-5, model_ids=[registry["models"]["s08"]]
    )
    assert foreign.status_code == 422 and "another dataset" in foreign.json()["detail"]
    missing = plan(
        client, dataset_id=registry["dataset"], epsilon=2.0, delta=1e-5, model_ids=["nope"]
    )
    assert missing.status_code == 404
    assert plan(client, dataset_id="nope", epsilon=2.0, delta=1e-5).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"epsilon": 0, "delta": 1e-5},
        {"epsilon": 1.0, "delta": 1.0},
        {"epsilon": 1.0, "delta": 0},
        {"epsilon": 1.0, "delta": 1e-5, "method": "magic"},
        {"epsilon": 1.0, "delta": 1e-5, "accountant": "moments"},
        {"epsilon": 1.0},
    ],
)
def test_bad_plan_requests_are_validation_problems(
    client: TestClient, registry: dict, body: dict
) -> None:
    resp = plan(client, dataset_id=registry["dataset"], **body)
    assert resp.status_code == 422 and resp.headers["content-type"].startswith(PROBLEM)
