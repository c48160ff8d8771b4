"""A full disk while a blob is written: a clear 503, no partial blob, no row, and the
service goes on once there is room. The blob store sits on a 2 MiB tmpfs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save

from service.api.app import create_app
from service.config import Settings
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, sgd, upload


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "blobs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)])
    assert done.returncode == 0, "this test mounts a tmpfs: run it as root"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_during_upload_stores_nothing_and_recovers(
    tmp_path: Path, backend: Backend, small_disk: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=backend.url,
        blob_dir=small_disk,
        auto_migrate=False,
    )
    app = create_app(settings, session_factory=backend.session_factory)
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        ds = client.post("/v1/datasets", json={"name": "full"}).json()["id"]
        big = save({"w": torch.zeros(1024 * 1024)})  # 4 MiB on a 2 MiB disk
        meta = {"dataset_id": ds, "name": "big", "mechanism": sgd(1.0)}
        resp = upload(client, big, json.dumps(meta))
        assert resp.status_code == 503, resp.text
        assert resp.headers["content-type"] == "application/problem+json"
        assert "blob store" in resp.json()["detail"]
        files = [p for p in small_disk.rglob("*") if p.is_file()]
        assert files == []  # no partial blob, no temporary file
        assert client.get("/v1/models", params={"dataset_id": ds}).json()["count"] == 0
        small = {**meta, "name": "small"}
        assert upload(client, checkpoint_bytes(), json.dumps(small)).status_code == 201
