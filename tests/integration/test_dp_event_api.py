"""dp_event mechanisms through the API: registered, accounted, refused with 422."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from tests.helpers import checkpoint_bytes, upload

TREE = {
    "kind": "SelfComposedDpEvent",
    "count": 500,
    "event": {
        "kind": "PoissonSampledDpEvent",
        "sampling_probability": 0.01,
        "event": {"kind": "GaussianDpEvent", "noise_multiplier": 1.1},
    },
}
SGD = {
    "type": "dp_sgd",
    "sampling_rate": 0.01,
    "noise_multiplier": 1.1,
    "clipping_norm": 1.0,
    "steps": 500,
    "learning_rate": 0.1,
}


def _register(client: TestClient, dataset_id: str, name: str, mechanism: dict) -> object:
    meta = {"dataset_id": dataset_id, "name": name, "mechanism": mechanism}
    return upload(client, checkpoint_bytes(), json.dumps(meta))


def test_a_dp_event_model_gets_the_epsilon_of_its_dp_sgd_twin(client: TestClient) -> None:
    ds = client.post("/v1/datasets", json={"name": "events"}).json()["id"]
    event = _register(client, ds, "event", {"type": "dp_event", "event": TREE})
    twin = _register(client, ds, "twin", SGD)
    assert event.status_code == 201, event.text
    assert event.json()["mechanism"] == {"type": "dp_event", "event": TREE}
    eps = [
        client.get(f"/v1/models/{r.json()['id']}/epsilon?delta=1e-5").json()["epsilon"]
        for r in (event, twin)
    ]
    assert abs(eps[0] - eps[1]) <= 1e-3 * eps[1]


def test_a_kind_off_the_allow_list_is_a_422_and_nothing_is_stored(client: TestClient) -> None:
    ds = client.post("/v1/datasets", json={"name": "events"}).json()["id"]
    bad = {**TREE, "event": {"kind": "ZCDpEvent", "rho": 0.1}}
    resp = _register(client, ds, "bad", {"type": "dp_event", "event": bad})
    assert resp.status_code == 422
    assert resp.json()["errors"][0]["field"] == "metadata.mechanism.event.event"
    rr = {"kind": "RandomizedResponseDpEvent", "noise_parameter": 0.5, "num_buckets": 2}
    resp = _register(client, ds, "rr", {"type": "dp_event", "event": rr})
    assert resp.status_code == 422 and "replace-one" in resp.json()["detail"]
    assert client.get(f"/v1/models?dataset_id={ds}").json()["count"] == 0
