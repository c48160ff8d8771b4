"""Bundles uploaded file by file (PUT /v1/uploads/{sha256}) and registered by naming
them: resumable, bounded, and only by the key that sent the bytes."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.api.app import create_app
from service.config import Settings
from service.registry.models import Upload
from tests.conftest import Backend, authorize, blob_files
from tests.helpers import checkpoint_bytes, sgd


def bundle(folder: Path) -> dict[str, bytes]:
    """A two-shard bundle with its index and a config (sizes: a few KiB)."""
    a = checkpoint_bytes(0, {"a.weight": (8, 32)})
    b = checkpoint_bytes(1, {"b.weight": (8, 32)})
    index = {
        "metadata": {},
        "weight_map": {"a.weight": "model-1.safetensors", "b.weight": "model-2.safetensors"},
    }
    files = {
        "model-1.safetensors": a,
        "model-2.safetensors": b,
        "model.safetensors.index.json": json.dumps(index).encode(),
        "config.json": b'{"model_type": "toy"}',
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(client: TestClient, data: bytes, name: str | None = None) -> object:
    return client.put(
        f"/v1/uploads/{name or sha(data)}",
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )


def missing(client: TestClient, files: dict[str, bytes]) -> list[str]:
    resp = client.post("/v1/uploads/missing", json={"sha256": [sha(d) for d in files.values()]})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["missing"])


def register(client: TestClient, dataset: str, name: str, files: dict[str, bytes]) -> object:
    meta = {
        "dataset_id": dataset,
        "name": name,
        "mechanism": sgd(1.0),
        "files": [{"path": p, "sha256": sha(d)} for p, d in files.items()],
    }
    return client.post("/v1/models", files={"metadata": (None, json.dumps(meta))})


def dataset(client: TestClient, name: str = "up") -> str:
    return str(client.post("/v1/datasets", json={"name": name}).json()["id"])


def test_an_interrupted_upload_resends_only_what_is_missing_then_registers(
    client: TestClient, tmp_path: Path
) -> None:
    files = bundle(tmp_path / "b")
    ds = dataset(client)
    names = list(files)
    for name in names[:2]:  # the upload stops after two files
        resp = put(client, files[name])
        assert resp.status_code == 201, resp.text
        assert resp.json()["size_bytes"] == len(files[name])
    assert put(client, files[names[0]]).status_code == 200  # sent again: kept once
    assert missing(client, files) == [sha(files[n]) for n in names[2:]]
    refused = register(client, ds, "early", files)
    assert refused.status_code == 422, refused.text
    assert set(refused.json()["missing"]) == {sha(files[n]) for n in names[2:]}
    assert client.get("/v1/models", params={"dataset_id": ds}).json()["count"] == 0
    for name in names[2:]:
        assert put(client, files[name]).status_code == 201
    assert missing(client, files) == []
    resp = register(client, ds, "m", files)
    assert resp.status_code == 201, resp.text
    model = resp.json()
    assert model["kind"] == "hf_bundle"
    assert {f["path"]: f["sha256"] for f in model["files"]} == {p: sha(d) for p, d in files.items()}
    assert model["size_bytes"] == sum(len(d) for d in files.values())
    assert set(model["signature"]) == {"a.weight", "b.weight"}
    # the registration consumed the uploads: naming them again needs them sent again
    assert len(missing(client, files)) == len(files)
    for f in model["files"]:
        got = client.get(f"/v1/models/{model['id']}/files/{f['path']}")
        assert got.status_code == 200 and sha(got.content) == f["sha256"]


def test_uploaded_files_are_checked_as_file_parts_are(client: TestClient, tmp_path: Path) -> None:
    files = bundle(tmp_path / "b")
    del files["model.safetensors.index.json"]  # two shards, no index
    for data in files.values():
        assert put(client, data).status_code == 201
    resp = register(client, dataset(client), "noindex", files)
    assert resp.status_code == 422 and "index" in resp.json()["detail"]
    pickled = {"pytorch_model.bin": b"\x80\x02}q\x00."}
    assert put(client, pickled["pytorch_model.bin"]).status_code == 201
    resp = register(client, dataset(client, "p"), "pickle", pickled)
    assert resp.status_code == 422 and "pickle" in resp.json()["detail"]


def test_bytes_that_do_not_hash_to_their_name_are_refused_and_nothing_is_kept(
    client: TestClient, settings: Settings
) -> None:
    before = blob_files(settings)
    resp = put(client, b"not what the name says", name=sha(b"something else"))
    assert resp.status_code == 422 and sha(b"not what the name says") in resp.json()["detail"]
    assert put(client, b"x", name="ABC").status_code == 422  # not a sha256
    assert blob_files(settings) == before


def test_a_key_may_name_only_the_bytes_it_uploaded(
    client: TestClient, backend: Backend, tmp_path: Path
) -> None:
    files = bundle(tmp_path / "b")
    ds = dataset(client)
    for data in files.values():
        assert put(client, data).status_code == 201
    first = register(client, ds, "owned", files)
    assert first.status_code == 201, first.text
    # another key sees the sha256s (models show them) and sent none of the bytes
    authorize(client, backend.session_factory, "publish", "read")
    assert len(missing(client, files)) == len(files)  # no oracle of what the store holds
    resp = register(client, ds, "stolen", files)
    assert resp.status_code == 422 and len(resp.json()["missing"]) == len(set(files.values()))
    # a key with only 'read' cannot upload at all
    authorize(client, backend.session_factory, "read")
    assert put(client, files["config.json"]).status_code == 403
    assert client.post("/v1/uploads/missing", json={"sha256": [sha(b"x")]}).status_code == 403


def test_pending_uploads_of_a_key_are_bounded(tmp_path: Path, backend: Backend) -> None:
    small = Settings(
        data_dir=tmp_path / "small",
        database_url=backend.url,
        max_upload_bytes=3000,
        auto_migrate=False,
    )
    with TestClient(create_app(small, session_factory=backend.session_factory)) as c:
        authorize(c, backend.session_factory)
        assert put(c, b"a" * 2000).status_code == 201
        resp = put(c, b"b" * 1500)  # 3,500 pending: over the limit
        assert resp.status_code == 413, resp.text
        assert put(c, b"c" * 4000).status_code == 413  # larger than the limit by itself
        assert put(c, b"d" * 900).status_code == 201  # 2,900 pending: fits
        stored = [p for p in blob_files(small) if not p.startswith(".tmp")]
        assert len(stored) == 2


def test_expired_uploads_are_swept_with_the_blobs_only_they_hold(
    client: TestClient, backend: Backend, settings: Settings, tmp_path: Path
) -> None:
    files = bundle(tmp_path / "b")
    ds = dataset(client)
    for data in files.values():
        assert put(client, data).status_code == 201
    assert register(client, ds, "kept", files).status_code == 201
    lonely = b"uploaded and never registered"
    shared = files["config.json"]  # also a file of the model registered above
    assert put(client, lonely).status_code == 201
    assert put(client, shared).status_code == 201  # the blob was there: not created by it
    old = datetime.now(UTC) - timedelta(seconds=settings.upload_ttl_s + 60)
    with backend.session_factory() as session:
        session.execute(update(Upload).values(created_at=old))
        session.commit()
    stored = set(blob_files(settings))
    assert missing(client, {"l": lonely, "s": shared}) == [sha(lonely), sha(shared)]
    after = set(blob_files(settings))
    gone = {p.rsplit("/", 1)[-1] for p in stored - after}
    assert gone == {sha(lonely)}  # the model's file stays
    with backend.session_factory() as session:
        assert session.query(Upload).count() == 0


@pytest.mark.parametrize("extra", [{"weights_uri": "file:///x.safetensors"}])
def test_uploads_and_file_parts_are_not_mixed(client: TestClient, extra: dict) -> None:
    meta = {
        "dataset_id": dataset(client),
        "name": "mixed",
        "mechanism": sgd(1.0),
        "files": [{"path": "model.safetensors", "sha256": sha(b"x")}],
        **extra,
    }
    resp = client.post("/v1/models", files={"metadata": (None, json.dumps(meta))})
    assert resp.status_code == 422, resp.text
