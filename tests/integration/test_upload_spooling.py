"""Multipart uploads spool to the blob store's staging folder, never the system temp
folder (twice the disk, or RAM on a tmpfs, and a disk the service does not watch)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from tests.helpers import checkpoint_bytes, model_metadata, sgd

#: above Starlette's in-memory spool (1 MiB), so the part rolls over to a file
BIG = {"linear.weight": (700, 700)}


@pytest.fixture
def rollovers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Where each spooled file rolled over to disk: its folder and its device."""
    seen: list[tuple[str, int]] = []
    real = tempfile.TemporaryFile

    def recording(*args: Any, **kwargs: Any) -> Any:
        handle = real(*args, **kwargs)
        folder = kwargs.get("dir") or tempfile.gettempdir()
        seen.append((os.path.realpath(folder), os.fstat(handle.fileno()).st_dev))
        return handle

    monkeypatch.setattr(tempfile, "TemporaryFile", recording)
    return seen


def staging(settings: Settings) -> tuple[str, int]:
    folder = settings.resolved_blob_dir / ".tmp"
    return os.path.realpath(folder), os.stat(folder).st_dev


def test_an_upload_above_the_spool_threshold_lands_in_the_staging_folder(
    client: TestClient, settings: Settings, rollovers: list[tuple[str, int]]
) -> None:
    ds = client.post("/v1/datasets", json={"name": "d"}).json()["id"]
    weights = checkpoint_bytes(0, BIG)
    assert len(weights) > 1024 * 1024
    resp = client.post(
        "/v1/models",
        files={"weights": ("model.safetensors", weights, "application/octet-stream")},
        data={"metadata": model_metadata(ds)},
    )
    assert resp.status_code == 201, resp.text
    assert rollovers, "the part never left memory: the test proves nothing"
    assert set(rollovers) == {staging(settings)}
    assert os.path.realpath(tempfile.gettempdir()) not in {folder for folder, _ in rollovers}
    # and nothing of the upload is left behind in the staging folder
    assert [p.name for p in (settings.resolved_blob_dir / ".tmp").iterdir()] == []


def test_bundle_parts_spool_to_the_staging_folder(
    client: TestClient, settings: Settings, rollovers: list[tuple[str, int]], tmp_path: Path
) -> None:
    import json

    ds = client.post("/v1/datasets", json={"name": "d"}).json()["id"]
    files = [
        ("files", ("model.safetensors", checkpoint_bytes(1, BIG), "application/octet-stream")),
        ("files", ("config.json", b"{}", "application/json")),
    ]
    meta = {"dataset_id": ds, "name": "b", "mechanism": sgd(1.0)}
    resp = client.post("/v1/models", files=files, data={"metadata": json.dumps(meta)})
    assert resp.status_code == 201, resp.text
    assert rollovers and set(rollovers) == {staging(settings)}
