"""The Hugging Face Hub-compatible endpoint (/hf) route by route: what each answers,
the headers Hub clients read, pinned revisions across a policy change, and the
errors they tell apart. The real clients (huggingface_hub, transformers) are in
tests/e2e/test_hf_clients.py."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from service.registry.db import make_engine, make_sessionmaker
from service.releases.revisions import commit_of, release_of
from tests.conftest import Backend, authorize
from tests.integration.test_deployments import deploy, seed
from tests.s3server import S3Bucket


@pytest.fixture
def hub(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    with TestClient(create_app(settings, session_factory=backend.session_factory)) as c:
        authorize(c, backend.session_factory)
        yield c


@pytest.fixture
def s3_client(s3_bucket: S3Bucket, tmp_path: Path, sqlite_template: Path) -> Iterator[TestClient]:
    """The service with its blobs in a bucket of the test S3 server (SQLite)."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(sqlite_template, data / "retarget.db")
    settings = Settings(
        data_dir=data,
        auto_migrate=False,
        plan_request_budget_s=600,
        blob_url=s3_bucket.url,
        blob_cache_dir=tmp_path / "cache",
    )
    engine = make_engine(settings.resolved_database_url)
    factory = make_sessionmaker(engine)
    with TestClient(create_app(settings, session_factory=factory)) as client:
        authorize(client, factory)
        yield client
    engine.dispose()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_deployment_reads_as_a_hub_repository(hub: TestClient) -> None:
    dep = deploy(hub, seed(hub))
    release = hub.get(f"/v1/releases/{dep['current_release_id']}").json()
    commit = commit_of(release["release_id"])
    info = hub.get("/hf/api/models/prod")
    assert info.status_code == 200, info.text
    body = info.json()
    assert body["id"] == "prod" and body["sha"] == commit
    assert [s["rfilename"] for s in body["siblings"]] == ["model.safetensors"]
    assert body["siblings"][0]["lfs"]["sha256"] == release["sha256"]
    assert hub.get("/hf/api/models/prod/revision/main").json() == body
    assert hub.get("/hf/api/models/deployments/prod").json()["sha"] == commit
    head = hub.head("/hf/prod/resolve/main/model.safetensors")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["x-repo-commit"] == commit
    assert head.headers["x-linked-etag"] == head.headers["etag"] == f'"{release["sha256"]}"'
    assert int(head.headers["x-linked-size"]) == int(head.headers["content-length"])
    assert int(head.headers["content-length"]) == release["size_bytes"]
    got = hub.get("/hf/prod/resolve/main/model.safetensors")
    assert got.status_code == 200 and sha(got.content) == release["sha256"]
    assert got.headers["x-repo-commit"] == commit
    part = hub.get("/hf/prod/resolve/main/model.safetensors", headers={"Range": "bytes=8-15"})
    assert part.status_code == 206 and part.content == got.content[8:16]
    tree = hub.get("/hf/api/models/prod/tree/main", params={"recursive": "True"}).json()
    assert [(e["type"], e["path"], e["size"]) for e in tree] == [
        ("file", "model.safetensors", release["size_bytes"])
    ]
    assert tree[0]["lfs"]["oid"] == release["sha256"]


def test_a_pinned_revision_keeps_its_release_when_main_moves(hub: TestClient) -> None:
    first = deploy(hub, seed(hub))
    old_id = first["current_release_id"]
    old = hub.get("/hf/prod/resolve/main/model.safetensors").content
    moved = hub.put("/v1/deployments/prod/policy", json={"epsilon": 3.0, "delta": 1e-5})
    assert moved.status_code == 200, moved.text
    new_id = moved.json()["current_release_id"]
    assert new_id != old_id
    assert hub.get("/hf/api/models/prod").json()["sha"] == commit_of(new_id)
    assert hub.head("/hf/prod/resolve/main/model.safetensors").headers["x-repo-commit"] == (
        commit_of(new_id)
    )
    for pin in (old_id, commit_of(old_id)):
        info = hub.get(f"/hf/api/models/prod/revision/{pin}").json()
        assert info["sha"] == commit_of(old_id)
        assert hub.get(f"/hf/prod/resolve/{pin}/model.safetensors").content == old
    # the release itself, as a repository of its own
    assert hub.get(f"/hf/releases/{old_id}/resolve/main/model.safetensors").content == old
    assert release_of(commit_of(old_id)) == old_id


def test_hub_errors_carry_the_codes_hub_clients_tell_apart(hub: TestClient) -> None:
    dep = deploy(hub, seed(hub))
    commit = commit_of(dep["current_release_id"])
    cases = {
        "/hf/api/models/nope": "RepoNotFound",
        "/hf/nope/resolve/main/config.json": "RepoNotFound",
        f"/hf/api/models/releases/{'0' * 8}-0000-4000-8000-{'0' * 12}": "RepoNotFound",
        "/hf/api/models/prod/revision/v2": "RevisionNotFound",
        f"/hf/prod/resolve/{'f' * 40}/model.safetensors": "RevisionNotFound",
        "/hf/prod/resolve/main/config.json": "EntryNotFound",
        "/hf/api/models/prod/tree/main/additional_chat_templates": "EntryNotFound",
    }
    for path, code in cases.items():
        resp = hub.get(path)
        assert resp.status_code == 404, path
        assert resp.headers["x-error-code"] == code, path
        assert resp.headers["content-type"] == "application/problem+json"
    missing = hub.head("/hf/prod/resolve/main/config.json")
    assert missing.status_code == 404 and missing.headers["x-repo-commit"] == commit


def test_a_deployment_serves_only_releases_it_has_served(hub: TestClient) -> None:
    ds = seed(hub)
    deploy(hub, ds)
    other = hub.post(
        "/v1/retarget", json={"dataset_id": ds, "epsilon": 2.5, "delta": 1e-5, "method": "rs"}
    ).json()["release_id"]
    resp = hub.get(f"/hf/api/models/prod/revision/{other}")
    assert resp.status_code == 404 and resp.headers["x-error-code"] == "RevisionNotFound"
    assert hub.get(f"/hf/api/models/releases/{other}").status_code == 200


def test_the_hub_endpoint_needs_a_key_with_read(hub: TestClient, backend: Backend) -> None:
    deploy(hub, seed(hub))
    del hub.headers["Authorization"]
    assert hub.get("/hf/api/models/prod").status_code == 401
    assert hub.head("/hf/prod/resolve/main/model.safetensors").status_code == 401
    authorize(hub, backend.session_factory, "publish")
    assert hub.get("/hf/prod/resolve/main/model.safetensors").status_code == 403


def test_with_a_bucket_files_redirect_to_the_object_with_their_metadata(
    s3_client: TestClient,
) -> None:
    ds = seed(s3_client)
    dep = deploy(s3_client, ds)
    release = s3_client.get(f"/v1/releases/{dep['current_release_id']}").json()
    path = "/hf/prod/resolve/main/model.safetensors"
    for method in ("HEAD", "GET"):
        moved = s3_client.request(method, path, follow_redirects=False)
        assert moved.status_code == 302, moved.text
        # what a Hub client reads from the redirect itself (it leaves the key behind)
        assert moved.headers["x-repo-commit"] == commit_of(release["release_id"])
        assert moved.headers["x-linked-etag"] == f'"{release["sha256"]}"'
        assert int(moved.headers["x-linked-size"]) == release["size_bytes"]
        pulled = httpx2.get(moved.headers["location"])  # no API key: a presigned URL
        assert pulled.status_code == 200 and sha(pulled.content) == release["sha256"]


def test_with_a_bucket_a_bundle_uploaded_by_sha256_registers(
    s3_client: TestClient, tmp_path: Path
) -> None:
    from tests.integration.test_uploads import bundle, dataset, put, register

    files = bundle(tmp_path / "b")
    for data in files.values():
        assert put(s3_client, data).status_code == 201
    resp = register(s3_client, dataset(s3_client), "in-bucket", files)
    assert resp.status_code == 201, resp.text
    assert {f["sha256"] for f in resp.json()["files"]} == {sha(d) for d in files.values()}
