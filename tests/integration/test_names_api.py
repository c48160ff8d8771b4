"""Names everywhere over HTTP: datasets and models by name, versions, aliases with
history, tags, 404s that suggest close names, and idempotent creation (exist_ok)."""

from __future__ import annotations

import hashlib
import json

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.config import Settings
from service.registry.models import Dataset, Model, ModelAliasEvent
from tests.conftest import Backend, blob_files
from tests.helpers import checkpoint_bytes, sgd, upload

PROBLEM = "application/problem+json"


def _problem(resp, status: int, slug: str) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    body = dict(resp.json())
    assert body["type"] == f"urn:retarget:problem:{slug}"
    return body


def _register(client: TestClient, dataset: str, name: str, seed: int, **extra) -> dict:
    meta = {"dataset_id": dataset, "name": name, "mechanism": sgd(1.0 + seed), **extra}
    resp = upload(client, checkpoint_bytes(seed), json.dumps(meta))
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _rows(backend: Backend, table: type) -> int:
    with backend.session_factory() as session:
        return session.scalar(select(func.count()).select_from(table)) or 0


def test_a_dataset_is_found_by_name_as_well_as_by_id(client: TestClient) -> None:
    made = client.post("/v1/datasets", json={"name": "digits"}).json()
    by_name = client.get("/v1/datasets/digits").json()
    assert by_name == client.get(f"/v1/datasets/{made['id']}").json()
    model = _register(client, "digits", "sigma1.2", 1)  # metadata.dataset_id by name
    assert model["dataset_id"] == made["id"] and model["ref"] == "digits/sigma1.2@1"
    listed = client.get("/v1/models", params={"dataset_id": "digits"}).json()
    assert [m["id"] for m in listed["data"]] == [model["id"]]
    assert client.get("/v1/datasets/digits/ledger").json()["dataset_id"] == made["id"]


def test_an_unknown_name_is_a_404_that_suggests_close_names(client: TestClient) -> None:
    client.post("/v1/datasets", json={"name": "digits"})
    client.post("/v1/datasets", json={"name": "cifar10"})
    _register(client, "digits", "sigma1.2", 1)
    problem = _problem(client.get("/v1/datasets/digit"), 404, "not-found")
    assert problem["suggestions"] == ["digits"] and "did you mean 'digits'" in problem["detail"]
    assert _problem(client.get("/v1/datasets/DIGITS"), 404, "not-found")["suggestions"] == [
        "digits"
    ]
    nothing = _problem(client.get("/v1/datasets/zzzz"), 404, "not-found")
    assert nothing["suggestions"] == [] and "did you mean" not in nothing["detail"]
    model = _problem(client.get("/v1/datasets/digits/models/sigma1.3"), 404, "not-found")
    assert model["suggestions"] == ["digits/sigma1.2"]
    version = _problem(client.get("/v1/datasets/digits/models/sigma1.2@7"), 404, "not-found")
    assert "versions: 1" in version["detail"]
    alias = _problem(client.get("/v1/datasets/digits/models/sigma1.2@lates"), 404, "not-found")
    assert alias["suggestions"] == ["digits/sigma1.2@latest"]
    plan = client.post("/v1/plans", json={"dataset_id": "digts", "epsilon": 5, "delta": 1e-5})
    assert _problem(plan, 404, "not-found")["suggestions"] == ["digits"]
    listing = client.get("/v1/models", params={"dataset_id": "cifar"})
    assert _problem(listing, 404, "not-found")["suggestions"] == ["cifar10"]


def test_versions_latest_and_aliases_name_one_model(client: TestClient, backend: Backend) -> None:
    client.post("/v1/datasets", json={"name": "digits"})
    v1 = _register(client, "digits", "sigma1.2", 1)
    v2 = _register(client, "digits", "sigma1.2", 2, version=2)
    get = client.get
    assert get("/v1/datasets/digits/models/sigma1.2").json()["id"] == v2["id"]
    assert get("/v1/datasets/digits/models/sigma1.2@latest").json()["id"] == v2["id"]
    assert get("/v1/datasets/digits/models/sigma1.2@1").json()["id"] == v1["id"]
    assert get(f"/v1/datasets/digits/models/{v1['id']}").json()["id"] == v1["id"]
    put = client.put("/v1/datasets/digits/models/sigma1.2/aliases/champion", json={"version": 1})
    assert put.status_code == 200, put.text
    assert put.json()["alias"]["version"] == 1 and put.json()["previous_version"] is None
    assert get("/v1/datasets/digits/models/sigma1.2@champion").json()["id"] == v1["id"]
    assert get(f"/v1/models/{v1['id']}").json()["aliases"] == ["champion"]
    moved = client.put(
        "/v1/datasets/digits/models/sigma1.2/aliases/champion", json={"version": 2}
    ).json()
    assert moved["previous_version"] == 1 and moved["alias"]["version"] == 2
    assert get("/v1/datasets/digits/models/sigma1.2@champion").json()["id"] == v2["id"]
    # the same move again changes nothing and records nothing
    client.put("/v1/datasets/digits/models/sigma1.2/aliases/champion", json={"version": 2})
    shown = get("/v1/datasets/digits/models/sigma1.2/aliases").json()
    assert [(a["alias"], a["version"]) for a in shown["aliases"]] == [("champion", 2)]
    assert [(e["previous_version"], e["version"]) for e in shown["history"]] == [
        (1, 2),
        (None, 1),
    ]
    assert all(e["key_name"] == "tests" for e in shown["history"])
    gone = client.delete("/v1/datasets/digits/models/sigma1.2/aliases/champion").json()
    assert gone["version"] is None and gone["previous_version"] == 2
    _problem(get("/v1/datasets/digits/models/sigma1.2@champion"), 404, "not-found")
    assert _rows(backend, ModelAliasEvent) == 3


def test_aliases_refuse_what_would_be_ambiguous(client: TestClient) -> None:
    client.post("/v1/datasets", json={"name": "digits"})
    _register(client, "digits", "m", 1)
    base = "/v1/datasets/digits/models/m/aliases"
    for bad in ("latest", "3", "-x", "a" * 65):
        _problem(client.put(f"{base}/{bad}", json={"version": 1}), 422, "invalid-input")
    _problem(client.put(f"{base}/staging", json={"version": 9}), 404, "not-found")
    for selector in ("３", "99999999999999999999", "2147483648"):  # never a 500
        _problem(client.get(f"/v1/datasets/digits/models/m@{selector}"), 404, "not-found")
    _problem(
        client.put("/v1/datasets/digits/models/n/aliases/x", json={"version": 1}), 404, "not-found"
    )
    meta = json.dumps({"dataset_id": "digits", "name": "a@b", "mechanism": sgd(1.0)})
    _problem(upload(client, checkpoint_bytes(3), meta), 422, "invalid-input")
    uuid_name = "0b9a6f4e-3c1d-4e8a-9f2b-7d6c5e4a3b21"
    _problem(client.post("/v1/datasets", json={"name": uuid_name}), 422, "validation-error")


def test_tags_are_set_and_removed_on_one_version(client: TestClient) -> None:
    client.post("/v1/datasets", json={"name": "digits"})
    model = _register(client, "digits", "m", 1)
    url = "/v1/datasets/digits/models/m@1/tags"
    resp = client.patch(url, json={"set": {"stage": "prod", "reviewed": ""}})
    assert resp.status_code == 200, resp.text
    assert resp.json()["tags"] == {"reviewed": "", "stage": "prod"}
    after = client.patch(url, json={"set": {"stage": "canary"}, "remove": ["reviewed"]}).json()
    assert after["tags"] == {"stage": "canary"}
    assert client.get(f"/v1/models/{model['id']}").json()["tags"] == {"stage": "canary"}
    _problem(client.patch(url, json={"set": {"a=b": "x"}}), 422, "invalid-input")
    _problem(client.patch(url, json={"set": {"x": "1"}, "remove": ["x"]}), 422, "invalid-input")
    many = {f"k{i}": "v" for i in range(50)}
    _problem(client.patch(url, json={"set": many}), 422, "invalid-input")
    assert client.get(f"/v1/models/{model['id']}").json()["tags"] == {"stage": "canary"}


def test_create_dataset_with_exist_ok_is_idempotent(client: TestClient, backend: Backend) -> None:
    body = {"name": "digits", "metric": "accuracy", "epsilon_cap": 8.0}
    first = client.post("/v1/datasets", json=body)
    assert first.status_code == 201
    again = client.post("/v1/datasets", params={"exist_ok": "true"}, json=body)
    assert again.status_code == 200 and again.json() == first.json()
    _problem(client.post("/v1/datasets", json=body), 409, "conflict")
    other = client.post(
        "/v1/datasets", params={"exist_ok": "true"}, json={**body, "epsilon_cap": 9}
    )
    assert "epsilon_cap" in _problem(other, 409, "conflict")["detail"]
    looser = client.post("/v1/datasets", params={"exist_ok": "true"}, json={"name": "digits"})
    _problem(looser, 409, "conflict")
    assert _rows(backend, Dataset) == 1


def test_register_with_exist_ok_returns_the_same_model_only(
    client: TestClient, backend: Backend, settings: Settings
) -> None:
    client.post("/v1/datasets", json={"name": "digits"})
    meta = {"dataset_id": "digits", "name": "m", "mechanism": sgd(1.0), "metrics": {"acc": 0.9}}
    weights = checkpoint_bytes(1)
    first = upload(client, weights, json.dumps(meta))
    assert first.status_code == 201
    blobs = blob_files(settings)

    def again(body: dict, data: bytes = weights):
        return client.post(
            "/v1/models?exist_ok=true",
            files={"weights": ("model.safetensors", data, "application/octet-stream")},
            data={"metadata": json.dumps(body)},
        )

    same = again(meta)
    assert same.status_code == 200 and same.json()["id"] == first.json()["id"]
    assert same.json()["sha256"] == hashlib.sha256(weights).hexdigest()
    assert "sha256" in _problem(again(meta, checkpoint_bytes(2)), 409, "conflict")["detail"]
    assert (
        "metrics" in _problem(again({**meta, "metrics": {"acc": 0.8}}), 409, "conflict")["detail"]
    )
    other_mech = {**meta, "mechanism": sgd(2.0)}
    assert "mechanism" in _problem(again(other_mech), 409, "conflict")["detail"]
    _problem(upload(client, weights, json.dumps(meta)), 409, "conflict")  # without exist_ok
    # the same bytes under a free version are a copy of the first model, never a second run
    assert "same bytes" in _problem(again({**meta, "version": 2}), 409, "conflict")["detail"]
    assert set(blob_files(settings)) == set(blobs)  # nothing stored for the refused copy
    assert again({**meta, "version": 2}, checkpoint_bytes(2)).status_code == 201
    assert _rows(backend, Model) == 2


def test_plans_and_releases_take_models_by_name(client: TestClient) -> None:
    client.post("/v1/datasets", json={"name": "digits"})
    a = _register(client, "digits", "a", 1)
    b = _register(client, "digits", "b", 2)
    client.put("/v1/datasets/digits/models/b/aliases/champion", json={"version": 1})
    target = {"dataset_id": "digits", "epsilon": 50.0, "delta": 1e-5, "method": "rs"}
    by_name = client.post("/v1/plans", json={**target, "model_ids": ["a", "b@champion"]})
    by_id = client.post("/v1/plans", json={**target, "model_ids": [a["id"], b["id"]]})
    assert by_name.status_code == 200, by_name.text
    assert by_name.json()["weights"] == by_id.json()["weights"]
    full = client.post("/v1/plans", json={**target, "model_ids": ["digits/a@1"]})
    assert [w["model_id"] for w in full.json()["weights"]] == [a["id"]]
    release = client.post("/v1/retarget", json={**target, "model_ids": ["a@latest", "b"]})
    assert release.status_code == 201, release.text
    same = client.post(
        "/v1/retarget",
        json={
            **target,
            "dataset_id": release.json()["dataset_id"],
            "model_ids": [a["id"], b["id"]],
        },
    )
    assert same.status_code == 200 and same.json()["release_id"] == release.json()["release_id"]
    twice = client.post(
        "/v1/plans/guarantee",
        json={
            "dataset_id": "digits",
            "delta": 1e-5,
            "method": "rs",
            "weights": [{"model_id": "a", "weight": 0.5}, {"model_id": a["id"], "weight": 0.5}],
        },
    )
    _problem(twice, 422, "invalid-input")
    _problem(client.post("/v1/plans", json={**target, "model_ids": ["c"]}), 404, "not-found")
