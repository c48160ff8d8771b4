"""Weights named by a file:// reference: control characters in the reference (a NUL
that the OS refuses, a newline) are a 422 problem+json, and nothing is stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from service.registry.models import Model
from tests.conftest import Backend, blob_files
from tests.helpers import checkpoint_bytes, sgd


@pytest.fixture
def settings(tmp_path: Path, backend: Backend) -> Settings:
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "m.safetensors").write_bytes(checkpoint_bytes(0))
    return Settings(
        data_dir=tmp_path / "data",
        database_url=backend.url,
        auto_migrate=False,
        plan_request_budget_s=600,
        reference_root=tmp_path / "refs",
    )


def register(client: TestClient, dataset: str, uri: str) -> object:
    meta = {"dataset_id": dataset, "name": "ref", "mechanism": sgd(1.0), "weights_uri": uri}
    return client.post("/v1/models", files={"metadata": (None, json.dumps(meta))})


@pytest.mark.parametrize(
    "tail",
    [
        "m.safetensors\x00.txt",
        "m%00.safetensors",
        "m\n.safetensors",
        "m%0a.safetensors",
        "m\x7f.safetensors",
        "m%C2%85.safetensors",
    ],
)
def test_a_control_character_in_a_file_reference_is_refused(
    client: TestClient, settings: Settings, backend: Backend, tail: str
) -> None:
    dataset = client.post("/v1/datasets", json={"name": "d"}).json()["id"]
    root = settings.reference_root
    assert root is not None
    resp = register(client, dataset, f"file://{root}/{tail}")
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert "control character" in resp.json()["detail"]
    assert blob_files(settings) == []
    with backend.session_factory() as session:
        assert session.query(Model).count() == 0


def test_a_clean_file_reference_registers(client: TestClient, settings: Settings) -> None:
    dataset = client.post("/v1/datasets", json={"name": "d"}).json()["id"]
    resp = register(client, dataset, f"file://{settings.reference_root}/m.safetensors")
    assert resp.status_code == 201, resp.text
