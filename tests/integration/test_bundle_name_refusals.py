"""Bundle names that collide ignoring case or that Windows reserves, sent to the API:
422 naming the file, and nothing stored (no blob, no row)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from service.registry.models import Model
from tests.conftest import Backend, blob_files
from tests.helpers import checkpoint_bytes, sgd


@pytest.mark.parametrize(
    ("names", "culprit"),
    [
        (["model.safetensors", "config.json", "CONFIG.json"], "CONFIG.json"),
        (["CON.safetensors", "config.json"], "CON.safetensors"),
        (["model.safetensors", "nul.json"], "nul.json"),
        (["model.safetensors", "lpt1.txt"], "lpt1.txt"),
        (["model.safetensors", "config.json."], "config.json."),
    ],
)
def test_a_bundle_with_names_a_filesystem_cannot_hold_is_refused_and_nothing_stored(
    client: TestClient, settings: Settings, backend: Backend, names: list[str], culprit: str
) -> None:
    ds = client.post("/v1/datasets", json={"name": "d"}).json()["id"]
    files = [
        (
            "files",
            (name, checkpoint_bytes(0) if name.endswith(".safetensors") else b"{}", "x/y"),
        )
        for name in names
    ]
    meta = {"dataset_id": ds, "name": "b", "mechanism": sgd(1.0)}
    resp = client.post("/v1/models", files=files, data={"metadata": json.dumps(meta)})
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert repr(culprit) in resp.json()["detail"]
    assert blob_files(settings) == []
    with backend.session_factory() as session:
        assert session.query(Model).count() == 0
