"""The service with its blobs in a bucket (RETARGET_BLOB_URL=s3://..., a real SeaweedFS
server): registration, LC and RS releases, deployments, ranged and redirected downloads.
SQLite only: the database is not what these tests are about."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from service.registry.db import make_engine, make_sessionmaker
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, pickle_bytes, sgd, upload
from tests.s3server import S3Bucket


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_like_files(root: Path) -> list[Path]:
    """Files under ``root`` named like a blob or a staged upload."""
    return [p for p in root.rglob("*") if p.is_file() and (len(p.name) == 64 or "stage" in p.name)]


@pytest.fixture
def source_bucket(s3_bucket: S3Bucket) -> str:
    """Another bucket of the server, where training jobs leave their checkpoints."""
    return s3_bucket.server.new_bucket()


@pytest.fixture
def s3_settings(
    s3_bucket: S3Bucket, source_bucket: str, tmp_path: Path, sqlite_template: Path
) -> Settings:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "refs").mkdir()
    shutil.copy(sqlite_template, data / "retarget.db")
    return Settings(
        reference_buckets=f"other-bucket, {source_bucket}",
        reference_root=tmp_path / "refs",
        data_dir=data,
        auto_migrate=False,
        plan_request_budget_s=600,
        blob_url=s3_bucket.url,
        blob_cache_dir=tmp_path / "cache",  # the merge host's own disk, not the data dir
    )


@pytest.fixture
def s3_client(s3_settings: Settings) -> Iterator[TestClient]:
    engine = make_engine(s3_settings.resolved_database_url)
    factory = make_sessionmaker(engine)
    with TestClient(create_app(s3_settings, session_factory=factory)) as client:
        authorize(client, factory)
        yield client
    engine.dispose()


def seed(client: TestClient) -> tuple[str, list[bytes]]:
    ds = client.post("/v1/datasets", json={"name": "digits"}).json()["id"]
    files = [checkpoint_bytes(i) for i in range(3)]
    for i, (data, sigma) in enumerate(zip(files, (0.8, 1.5, 3.0), strict=True)):
        meta = {"dataset_id": ds, "name": f"m{i}", "mechanism": sgd(sigma)}
        resp = upload(client, data, json.dumps(meta))
        assert resp.status_code == 201, resp.text
        assert resp.json()["sha256"] == sha(data)
    return ds, files


def test_registry_releases_and_deployments_keep_their_blobs_in_the_bucket(
    s3_client: TestClient, s3_bucket: S3Bucket, s3_settings: Settings
) -> None:
    ds, files = seed(s3_client)
    body = {"dataset_id": ds, "epsilon": 1.0, "delta": 1e-5, "accountant": "rdp"}
    lc = s3_client.post("/v1/retarget", json={**body, "method": "lc"})
    rs = s3_client.post(
        "/v1/retarget", json={**body, "epsilon": 3.0, "method": "rs", "objective": "noise"}
    )
    assert lc.status_code == 201 and rs.status_code == 201, (lc.text, rs.text)
    lc_sha, rs_sha = lc.json()["sha256"], rs.json()["sha256"]
    assert rs_sha in {sha(f) for f in files}  # RS releases one of the inputs as it is
    dep = s3_client.post("/v1/deployments", json={**body, "name": "prod", "method": "lc"})
    assert dep.status_code == 201, dep.text

    downloaded = s3_client.get(lc.json()["download_url"])
    assert downloaded.status_code == 200 and sha(downloaded.content) == lc_sha
    assert downloaded.headers["etag"] == f'"{lc_sha}"'
    served = s3_client.get("/v1/deployments/prod/model")
    assert served.status_code == 200 and sha(served.content) == lc_sha
    assert sha(s3_client.get(rs.json()["download_url"]).content) == rs_sha

    # the objects are in the bucket, named by their hash; the data dir holds no blob
    expected = {sha(f) for f in files} | {lc_sha}
    assert {k.rsplit("/", 1)[-1] for k in s3_bucket.object_keys()} == expected
    assert all(k.startswith("blobs/") for k in s3_bucket.object_keys())
    assert blob_like_files(s3_settings.data_dir) == []
    assert not s3_settings.resolved_blob_dir.exists()
    # the merge read cached copies on its own disk; nothing is left staged there
    cache = s3_settings.resolved_blob_cache_dir
    assert {p.name for p in blob_like_files(cache)} <= {sha(f) for f in files}
    assert list((cache / ".tmp").iterdir()) == []
    ready = s3_client.get("/readyz").json()["checks"]
    assert ready["blobs"] == "ok" and ready["disk"] == "ok"


def test_downloads_stream_ranges_and_redirect_to_presigned_urls(s3_client: TestClient) -> None:
    ds, files = seed(s3_client)
    body = {"dataset_id": ds, "epsilon": 1.0, "delta": 1e-5, "method": "lc", "accountant": "rdp"}
    release = s3_client.post("/v1/retarget", json=body).json()
    url, rsha = release["download_url"], release["sha256"]
    whole = s3_client.get(url).content

    part = s3_client.get(url, headers={"Range": "bytes=8-15"})
    assert part.status_code == 206 and part.content == whole[8:16]
    assert part.headers["content-range"] == f"bytes 8-15/{len(whole)}"
    tail = s3_client.get(url, headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == whole[-10:]
    past = s3_client.get(url, headers={"Range": f"bytes={len(whole)}-"})
    assert past.status_code == 416
    stale = s3_client.get(url, headers={"Range": "bytes=8-15", "If-Range": '"other"'})
    assert stale.status_code == 200 and stale.content == whole
    assert s3_client.get(url, headers={"If-None-Match": f'"{rsha}"'}).status_code == 304
    assert s3_client.get(url).headers["vary"] == "Prefer"

    dep = s3_client.post("/v1/deployments", json={**body, "name": "prod"})
    assert dep.status_code == 201, dep.text
    model_id = s3_client.get("/v1/models", params={"dataset_id": ds}).json()["data"][0]["id"]
    model_url = f"/v1/models/{model_id}/weights"
    for path, query, headers in [
        (url, {"redirect": "true"}, {}),
        ("/v1/deployments/prod/model", {}, {"Prefer": "redirect"}),
        (model_url, {"redirect": "1"}, {}),
    ]:
        moved = s3_client.get(path, params=query, headers=headers, follow_redirects=False)
        assert moved.status_code == 307, (path, moved.text)
        location = moved.headers["location"]
        assert location.startswith("http://127.0.0.1:") and "X-Amz-Expires=900" in location
        # serving infrastructure pulls straight from object storage, without an API key
        pulled = httpx2.get(location)
        assert pulled.status_code == 200
        assert f'"{sha(pulled.content)}"' == moved.headers["etag"]
    assert sha(httpx2.get(location).content) in {sha(f) for f in files}
    # a POST that streams its release never redirects (the client would re-POST)
    streamed = s3_client.post(
        "/v1/retarget",
        params={"redirect": "true"},
        json=body,
        headers={"Accept": "application/octet-stream", "Prefer": "redirect"},
        follow_redirects=False,
    )
    assert streamed.status_code == 200 and sha(streamed.content) == rsha


class Spy:
    """Records the names of the client methods called."""

    def __init__(self, client: Any) -> None:
        self.client, self.calls = client, []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.client, name)


def by_reference(client: TestClient, ds: str, uri: str, name: str = "ref") -> Any:
    meta = {"dataset_id": ds, "name": name, "mechanism": sgd(1.0), "weights_uri": uri}
    return client.post("/v1/models", files={"metadata": (None, json.dumps(meta))})


def test_register_by_reference_copies_the_object_into_the_store(
    s3_client: TestClient, s3_bucket: S3Bucket, source_bucket: str, s3_settings: Settings
) -> None:
    ds = s3_client.post("/v1/datasets", json={"name": "digits"}).json()["id"]
    data, local = checkpoint_bytes(7), checkpoint_bytes(8)
    source = s3_bucket.server.client()
    source.put_object(Bucket=source_bucket, Key="runs/a/final model.safetensors", Body=data)
    uri = f"s3://{source_bucket}/runs/a/final%20model.safetensors"
    store = s3_client.app.state.ctx.blobs  # type: ignore[attr-defined]
    store.client = Spy(store.client)
    resp = by_reference(s3_client, ds, uri)
    assert resp.status_code == 201, resp.text
    model = resp.json()
    assert model["sha256"] == sha(data) and model["size_bytes"] == len(data)
    assert model["signature"]["linear.weight"]["shape"] == [10, 64]
    assert s3_bucket.object_keys() == [f"blobs/{sha(data)[:2]}/{sha(data)[2:4]}/{sha(data)}"]
    assert s3_bucket.server.keys(source_bucket) == ["runs/a/final model.safetensors"]
    assert "copy" in store.client.calls and "put_object" not in store.client.calls
    assert sha(s3_client.get(f"/v1/models/{model['id']}/weights").content) == sha(data)

    assert s3_settings.reference_root is not None
    (s3_settings.reference_root / "m.safetensors").write_bytes(local)
    path = s3_settings.reference_root / "m.safetensors"
    resp = by_reference(s3_client, ds, path.as_uri(), name="file")
    assert resp.status_code == 201, resp.text
    assert resp.json()["sha256"] == sha(local)
    assert len(s3_bucket.object_keys()) == 2
    assert blob_like_files(s3_settings.data_dir) == []


def test_bad_references_are_refused_and_store_nothing(
    s3_client: TestClient,
    s3_bucket: S3Bucket,
    source_bucket: str,
    s3_settings: Settings,
    tmp_path: Path,
) -> None:
    ds = s3_client.post("/v1/datasets", json={"name": "digits"}).json()["id"]
    source = s3_bucket.server.client()
    elsewhere = s3_bucket.server.new_bucket()
    source.put_object(Bucket=elsewhere, Key="m.safetensors", Body=checkpoint_bytes(1))
    source.put_object(Bucket=source_bucket, Key="model.pt", Body=pickle_bytes())
    root = s3_settings.reference_root
    assert root is not None
    (tmp_path / "outside.safetensors").write_bytes(checkpoint_bytes(2))
    (root / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
    (root / "broken.safetensors").write_bytes(checkpoint_bytes(3)[:-10])
    cases = {
        f"s3://{elsewhere}/m.safetensors": "not one the service may read",
        f"s3://{source_bucket}/missing.safetensors": "no such object",
        f"s3://{source_bucket}/model.pt": "pickle",
        f"s3://{source_bucket}/": "names no object",
        (tmp_path / "outside.safetensors").as_uri(): "outside the allowed folder",
        (root / "link.safetensors").as_uri(): "outside the allowed folder",
        f"{root.as_uri()}/../outside.safetensors": "outside the allowed folder",
        (root / "nothing.safetensors").as_uri(): "no such file",
        (root / "broken.safetensors").as_uri(): "safetensors",
        "file://otherhost/etc/passwd": "local path",
        "https://example.com/m.safetensors": "weights_uri",
    }
    for uri, reason in cases.items():
        resp = by_reference(s3_client, ds, uri)
        assert resp.status_code == 422, (uri, resp.text)
        assert reason in resp.json()["detail"], (uri, resp.json()["detail"])
    both = s3_client.post(
        "/v1/models",
        files={"weights": ("m.safetensors", checkpoint_bytes(4))},
        data={
            "metadata": json.dumps(
                {
                    "dataset_id": ds,
                    "name": "x",
                    "mechanism": sgd(1.0),
                    "weights_uri": f"s3://{source_bucket}/model.pt",
                }
            )
        },
    )
    assert both.status_code == 422 and "not both" in both.json()["detail"]
    assert s3_client.get("/v1/models").json()["count"] == 0
    assert s3_bucket.object_keys() == []
    cache = s3_settings.resolved_blob_cache_dir
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_file_references_are_off_without_a_root(client: TestClient, tmp_path: Path) -> None:
    ds = client.post("/v1/datasets", json={"name": "digits"}).json()["id"]
    (tmp_path / "m.safetensors").write_bytes(checkpoint_bytes(1))
    resp = by_reference(client, ds, (tmp_path / "m.safetensors").as_uri())
    assert resp.status_code == 422 and "RETARGET_REFERENCE_ROOT" in resp.json()["detail"]
    resp = by_reference(client, ds, "s3://any-bucket/m.safetensors")
    assert resp.status_code == 422 and "RETARGET_REFERENCE_BUCKETS" in resp.json()["detail"]


def test_readyz_and_uploads_without_the_bucket(s3_settings: Settings) -> None:
    settings = s3_settings.model_copy(update={"blob_url": "s3://no-such-bucket-here/blobs"})
    engine = make_engine(settings.resolved_database_url)
    factory = make_sessionmaker(engine)
    with TestClient(create_app(settings, session_factory=factory)) as client:
        authorize(client, factory)
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["blobs"] == "unreachable"
        ds = client.post("/v1/datasets", json={"name": "digits"}).json()["id"]
        meta = {"dataset_id": ds, "name": "m", "mechanism": sgd(1.0)}
        resp = upload(client, checkpoint_bytes(0), json.dumps(meta))
        assert resp.status_code == 503, resp.text
        assert resp.json()["type"].endswith("storage-unavailable")
        assert client.get("/v1/models").json()["count"] == 0
    engine.dispose()
