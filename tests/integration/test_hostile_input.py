"""Hostile input over HTTP: each is refused with a clear 4xx problem and nothing is stored."""

from __future__ import annotations

import json
import struct

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from tests.conftest import blob_files
from tests.helpers import checkpoint_bytes, sgd, upload

PROBLEM = "application/problem+json"


def header_bomb() -> bytes:
    """A safetensors header length that claims about a terabyte."""
    return struct.pack("<Q", 1 << 40) + b"{}"


def shape_bomb() -> bytes:
    """A valid-looking header whose one tensor claims terabytes the file does not hold."""
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 1 << 42]}}
    ).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * 64


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture
def dataset(client: TestClient) -> str:
    return client.post("/v1/datasets", json={"name": "hostile"}).json()["id"]


def state(client: TestClient, settings: Settings, dataset: str) -> tuple:
    models = client.get("/v1/models", params={"dataset_id": dataset}).json()["count"]
    datasets = client.get("/v1/datasets").json()["count"]
    return models, datasets, blob_files(settings)


def meta(dataset: str, **extra: object) -> dict:
    return {"dataset_id": dataset, "name": "m", "mechanism": sgd(1.0), **extra}


@pytest.mark.parametrize(
    ("name", "weights", "metadata", "status"),
    [
        ("header bomb", header_bomb(), None, 422),
        ("shape bomb", shape_bomb(), None, 422),
        ("path-like name", None, {"name": "../../etc/passwd"}, 422),
        ("control characters", None, {"name": "a\x00b"}, 422),
        ("NaN metric", None, "NAN_METRIC", 422),
        ("Infinity claim", None, "INF_CLAIM", 422),
        ("deep nesting", None, "DEEP", 422),
        ("huge metadata", None, "HUGE", 413),
        ("negative sampling rate", None, {"mechanism": sgd(1.0, q=-0.1)}, 422),
    ],
)
def test_hostile_upload_is_refused_and_nothing_stored(
    client: TestClient, settings: Settings, dataset: str, name, weights, metadata, status
) -> None:
    before = state(client, settings, dataset)
    if metadata == "NAN_METRIC":
        text = json.dumps(meta(dataset))[:-1] + ', "metrics": {"accuracy": NaN}}'
    elif metadata == "INF_CLAIM":
        text = json.dumps(meta(dataset))[:-1] + ', "claimed": {"epsilon": Infinity, "delta": 1e-5}}'
    elif metadata == "DEEP":
        text = json.dumps(meta(dataset))[:-1] + f', "metrics": {nested(100_000)}}}'
    elif metadata == "HUGE":
        text = json.dumps(meta(dataset, description="x" * (settings.max_metadata_bytes + 10)))
    else:
        text = json.dumps(meta(dataset, **(metadata or {})))
    resp = upload(client, weights or checkpoint_bytes(), text)
    assert resp.status_code == status, (name, resp.text[:300])
    assert resp.headers["content-type"] == PROBLEM
    assert resp.json()["detail"]
    assert state(client, settings, dataset) == before


def test_unicode_names_are_kept_exactly(client: TestClient, dataset: str) -> None:
    name = "modèle-δ-模型-🙂"
    resp = upload(client, checkpoint_bytes(), json.dumps(meta(dataset, name=name)))
    assert resp.status_code == 201, resp.text
    assert client.get(f"/v1/models/{resp.json()['id']}").json()["name"] == name
    cd = client.get(resp.json()["download_url"]).headers["content-disposition"]
    assert "/" not in cd and "\n" not in cd


@pytest.mark.parametrize(
    "body",
    [
        '{"epsilon": NaN, "delta": 1e-5}',
        '{"epsilon": Infinity, "delta": 1e-5}',
        '{"epsilon": -1, "delta": 1e-5}',
        '{"epsilon": 0, "delta": 1e-5}',
        '{"epsilon": 1, "delta": 1}',
        '{"epsilon": 1, "delta": 1.5}',
        '{"epsilon": 1, "delta": 0}',
        '{"epsilon": 1, "delta": 1e-5, "x": ' + nested(100_000) + "}",
        '{"epsilon": 1e309, "delta": 1e-5}',
    ],
)
def test_bad_targets_are_refused_and_release_nothing(
    client: TestClient, dataset: str, body: str
) -> None:
    prefix = '{"dataset_id": "' + dataset + '", '
    full = prefix + body[1:]
    for path in ("/v1/plans", "/v1/retarget"):
        resp = client.post(path, content=full, headers={"content-type": "application/json"})
        assert 400 <= resp.status_code < 500, (path, body[:60], resp.text[:200])
        assert resp.headers["content-type"] == PROBLEM
    assert client.get(f"/v1/datasets/{dataset}/ledger").json()["releases"] == []


def test_a_body_that_is_not_json_says_so_and_where(client: TestClient) -> None:
    resp = client.post(
        "/v1/datasets", content=b'{"name": "x",', headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422
    err = resp.json()["errors"][0]
    assert err["field"] == "body"
    assert err["message"].startswith("the body is not valid JSON (at character 13)")
    assert client.get("/v1/datasets").json()["count"] == 0
