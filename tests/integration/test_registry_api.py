"""The registry over HTTP, against real Postgres and the SQLite default."""

from __future__ import annotations

import hashlib
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.config import Settings
from service.registry.models import Model
from tests.conftest import Backend, authorize, blob_files
from tests.helpers import DP_SGD, checkpoint_bytes, model_metadata, pickle_bytes, upload

PROBLEM = "application/problem+json"


def model_rows(backend: Backend) -> int:
    with backend.session_factory() as session:
        return session.scalar(select(func.count()).select_from(Model)) or 0


@pytest.fixture
def dataset_id(client: TestClient) -> str:
    resp = client.post("/v1/datasets", json={"name": "digits", "metric": "accuracy"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def assert_problem(resp, status: int, slug: str) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    body = resp.json()
    assert body["type"] == f"urn:retarget:problem:{slug}"
    assert body["status"] == status
    assert body["title"] and body["detail"]
    return body


def test_dataset_create_list_get_and_duplicate_name(client: TestClient, dataset_id: str) -> None:
    got = client.get(f"/v1/datasets/{dataset_id}").json()
    assert got["name"] == "digits" and got["metric"] == "accuracy"
    listing = client.get("/v1/datasets").json()
    assert listing["count"] == 1 and listing["data"][0]["id"] == dataset_id
    assert_problem(client.post("/v1/datasets", json={"name": "digits"}), 409, "conflict")
    assert_problem(client.get("/v1/datasets/nope"), 404, "not-found")


@pytest.mark.parametrize(
    "body",
    [
        {"name": ""},
        {"name": "a/b"},
        {"name": "x", "epsilon_cap": -1},
        {"name": "x", "delta_cap": 1.0},
        {"name": "x", "unknown": 1},
    ],
)
def test_dataset_bad_input_is_a_validation_problem(client: TestClient, body: dict) -> None:
    problem = assert_problem(client.post("/v1/datasets", json=body), 422, "validation-error")
    assert problem["errors"]
    assert client.get("/v1/datasets").json()["count"] == 0


def test_register_list_download_round_trip(
    client: TestClient, dataset_id: str, backend: Backend
) -> None:
    weights = checkpoint_bytes(seed=1)
    meta = model_metadata(
        dataset_id,
        lineage={"run_id": "run-7", "step": 700},
        metrics={"accuracy": 0.91},
        claimed={"epsilon": 1.5, "delta": 1e-5},
    )
    resp = upload(client, weights, meta)
    assert resp.status_code == 201, resp.text
    model = resp.json()
    assert model["sha256"] == hashlib.sha256(weights).hexdigest()
    assert model["size_bytes"] == len(weights)
    assert model["signature"] == {
        "linear.bias": {"dtype": "F32", "shape": [10]},
        "linear.weight": {"dtype": "F32", "shape": [10, 64]},
    }
    assert model["lineage"] == {"run_id": "run-7", "step": 700}
    assert model["claimed"] == {"epsilon": 1.5, "delta": 1e-5}
    assert model["mechanism"]["schedule"][0]["steps"] == 700

    listing = client.get("/v1/models", params={"dataset_id": dataset_id}).json()
    assert [m["id"] for m in listing["data"]] == [model["id"]]
    assert client.get(f"/v1/models/{model['id']}").json() == model

    download = client.get(model["download_url"])
    assert download.status_code == 200
    assert hashlib.sha256(download.content).hexdigest() == model["sha256"]
    assert download.headers["etag"] == f'"{model["sha256"]}"'
    cached = client.get(model["download_url"], headers={"If-None-Match": download.headers["etag"]})
    assert cached.status_code == 304 and cached.content == b""
    part = client.get(model["download_url"], headers={"Range": "bytes=0-7"})
    assert part.status_code == 206 and part.content == weights[:8]
    assert model_rows(backend) == 1


def test_same_bytes_are_stored_once(
    client: TestClient, dataset_id: str, settings: Settings
) -> None:
    """The same bytes in two datasets (two trainings that happen to agree) are one blob."""
    weights = checkpoint_bytes(seed=2)
    other = client.post("/v1/datasets", json={"name": "other"}).json()["id"]
    a = upload(client, weights, model_metadata(dataset_id, "a")).json()
    b = upload(client, weights, model_metadata(other, "b")).json()
    assert a["sha256"] == b["sha256"] and a["id"] != b["id"]
    assert len(blob_files(settings)) == 1


def test_the_same_bytes_twice_in_a_dataset_are_409_naming_the_first(
    client: TestClient, dataset_id: str, settings: Settings, backend: Backend
) -> None:
    """A copy is not a second run: weighing two copies 0.5/0.5 as independent runs would
    claim noise that does not exist. Refused whatever its name, version or lineage."""
    weights = checkpoint_bytes(seed=4)
    first = upload(client, weights, model_metadata(dataset_id, "first")).json()
    before = blob_files(settings)
    for meta in (
        model_metadata(dataset_id, "copy"),
        model_metadata(dataset_id, "first", version=2),
        model_metadata(dataset_id, "copy", lineage={"run_id": "other-run", "step": 700}),
    ):
        body = assert_problem(upload(client, weights, meta), 409, "conflict")
        assert body["model_id"] == first["id"] and "'first'" in body["detail"]
    assert blob_files(settings) == before and model_rows(backend) == 1
    # one bit changed is other bytes: the service cannot tell (docs/accounting.md)
    flipped = bytearray(weights)
    flipped[-1] ^= 1
    assert upload(client, bytes(flipped), model_metadata(dataset_id, "tweaked")).status_code == 201


def test_metric_values_not_declared_prior_are_hidden_from_read_keys(
    client: TestClient, backend: Backend, dataset_id: str
) -> None:
    """A plan revealing only the argmax of metrics read from the models needs 'publish'
    and is charged, so their values are not shown to 'read' for free; 'prior' ones are."""
    from tests.integration.test_exposures import headers

    meta = model_metadata(
        dataset_id,
        "m",
        metrics={"proxy": 0.8, "val_accuracy": 0.9, "private_accuracy": 0.85},
        metric_declarations={
            "proxy": {"source": "prior"},
            "private_accuracy": {"source": "private", "sensitivity": 0.01},
        },
    )
    created = upload(client, checkpoint_bytes(), meta).json()
    reader = headers(backend, "read")
    for resp in (
        client.get(f"/v1/models/{created['id']}", headers=reader),
        client.get("/v1/models", params={"dataset_id": dataset_id}, headers=reader),
    ):
        body = resp.json()
        model = body["data"][0] if "data" in body else body
        assert model["metrics"] == {"proxy": 0.8}
        assert model["hidden_metrics"] == ["private_accuracy", "val_accuracy"]
    admin = client.get(f"/v1/models/{created['id']}").json()
    assert admin["metrics"]["val_accuracy"] == 0.9 and admin["hidden_metrics"] == []


@pytest.mark.parametrize(
    ("metrics", "declarations", "why"),
    [
        ({"acc": 0.9}, {"acc": {"source": "private"}}, "sensitivity"),
        ({"acc": 1.5}, {"acc": {"source": "private", "sensitivity": 0.01}}, "[0, 1]"),
        ({"acc": 0.9}, {"acc": {"source": "prior", "sensitivity": 0.01}}, "'private' metrics"),
        ({"acc": 0.9}, {"loss": {"source": "prior"}}, "metrics lacks"),
    ],
)
def test_bad_metric_declarations_are_422_and_store_nothing(
    client: TestClient,
    dataset_id: str,
    backend: Backend,
    metrics: dict,
    declarations: dict,
    why: str,
) -> None:
    meta = model_metadata(dataset_id, "m", metrics=metrics, metric_declarations=declarations)
    body = assert_problem(upload(client, checkpoint_bytes(), meta), 422, "invalid-input")
    assert why in body["detail"] and model_rows(backend) == 0


@pytest.mark.parametrize(
    "payload",
    [
        pickle_bytes(),
        b"\x00" * 3,
        bytes(range(256)) * 40,
        checkpoint_bytes(seed=3)[:-9],
    ],
    ids=["torch-pickle", "too-short", "random-bytes", "truncated"],
)
def test_upload_rejects_non_safetensors_and_stores_nothing(
    client: TestClient, dataset_id: str, settings: Settings, backend: Backend, payload: bytes
) -> None:
    before = blob_files(settings)
    resp = upload(client, payload, model_metadata(dataset_id))
    assert_problem(resp, 422, "invalid-upload")
    assert blob_files(settings) == before
    assert model_rows(backend) == 0


def test_upload_to_unknown_dataset_is_404_and_stores_nothing(
    client: TestClient, settings: Settings, backend: Backend
) -> None:
    resp = upload(client, checkpoint_bytes(), model_metadata("no-such-dataset"))
    assert_problem(resp, 404, "not-found")
    assert blob_files(settings) == [] and model_rows(backend) == 0


def test_duplicate_name_and_version_is_409(
    client: TestClient, dataset_id: str, settings: Settings, backend: Backend
) -> None:
    assert upload(client, checkpoint_bytes(1), model_metadata(dataset_id)).status_code == 201
    before = blob_files(settings)
    assert_problem(upload(client, checkpoint_bytes(2), model_metadata(dataset_id)), 409, "conflict")
    assert blob_files(settings) == before and model_rows(backend) == 1
    second = upload(client, checkpoint_bytes(2), model_metadata(dataset_id, version=2))
    assert second.status_code == 201 and second.json()["version"] == 2


@pytest.mark.parametrize(
    ("mechanism", "field"),
    [
        ({**DP_SGD, "sampling_rate": 1.5}, "metadata.mechanism.sampling_rate"),
        ({**DP_SGD, "noise_multiplier": 0}, "metadata.mechanism.noise_multiplier"),
        ({**DP_SGD, "steps": 0}, "metadata.mechanism.steps"),
        ({"type": "gaussian", "sensitivity": 1.0}, "metadata.mechanism"),
        ({"type": "laplace"}, "metadata.mechanism"),
    ],
)
def test_invalid_mechanism_is_422_naming_the_field(
    client: TestClient, dataset_id: str, settings: Settings, mechanism: dict, field: str
) -> None:
    meta = json.dumps({"dataset_id": dataset_id, "name": "m", "mechanism": mechanism})
    problem = assert_problem(upload(client, checkpoint_bytes(), meta), 422, "invalid-input")
    assert field in [e["field"] for e in problem["errors"]]
    assert blob_files(settings) == []


@pytest.mark.parametrize(
    "raw",
    [
        '{"dataset_id": "x", "name": "m", "mechanism": {"type": "epsilon_delta", '
        '"epsilon": NaN, "delta": 1e-5}}',
        "not json",
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["nan", "not-json", "deep-nesting"],
)
def test_unparseable_metadata_is_422(client: TestClient, settings: Settings, raw: str) -> None:
    assert_problem(upload(client, checkpoint_bytes(), raw), 422, "invalid-input")
    assert blob_files(settings) == []


def test_upload_over_the_size_limit_is_413_and_stores_nothing(
    tmp_path, backend: Backend, dataset_id: str, client: TestClient
) -> None:
    from service.api.app import create_app

    small = Settings(
        data_dir=tmp_path / "small",
        database_url=backend.url,
        max_upload_bytes=1000,
        auto_migrate=False,
    )
    with TestClient(create_app(small, session_factory=backend.session_factory)) as c:
        authorize(c, backend.session_factory)
        resp = upload(c, checkpoint_bytes(), model_metadata(dataset_id))
        assert_problem(resp, 413, "payload-too-large")
    assert blob_files(small) == [] and model_rows(backend) == 0


def test_missing_parts_and_wrong_content_type(
    client: TestClient, dataset_id: str, settings: Settings
) -> None:
    assert_problem(client.post("/v1/models", json={"x": 1}), 422, "invalid-input")
    resp = client.post("/v1/models", files={"weights": ("m", checkpoint_bytes())})
    assert_problem(resp, 422, "invalid-input")
    resp = client.post("/v1/models", data={"metadata": model_metadata(dataset_id)})
    assert_problem(resp, 422, "invalid-input")
    assert blob_files(settings) == []


def test_model_listing_paginates_and_filters(client: TestClient, dataset_id: str) -> None:
    other = client.post("/v1/datasets", json={"name": "other"}).json()["id"]
    for i in range(5):
        upload(client, checkpoint_bytes(i), model_metadata(dataset_id, f"m{i}"))
    upload(client, checkpoint_bytes(9), model_metadata(other, "x"))
    page = client.get("/v1/models", params={"dataset_id": dataset_id, "limit": 2, "offset": 2})
    body = page.json()
    assert body["count"] == 5 and [m["name"] for m in body["data"]] == ["m2", "m3"]
    assert client.get("/v1/models").json()["count"] == 6
    assert_problem(client.get("/v1/models", params={"limit": 0}), 422, "validation-error")


def test_unknown_route_and_method_are_problems(client: TestClient) -> None:
    assert_problem(client.get("/v1/nothing"), 404, "not-found")
    assert_problem(client.delete("/v1/datasets"), 405, "method-not-allowed")


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"
