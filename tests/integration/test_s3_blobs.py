"""S3BlobStore against a real S3 server (SeaweedFS, started once per test session)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from botocore.exceptions import ClientError

from service.config import Settings
from service.errors import InvalidInput, StorageError
from service.registry import s3_blobs, s3_io
from service.registry.s3_blobs import S3BlobStore
from service.registry.s3_io import CopySource
from service.registry.stores import make_blob_store
from tests.s3server import S3Bucket


def store_in(bucket: S3Bucket, tmp_path: Path, **kw: Any) -> S3BlobStore:
    settings = Settings(data_dir=tmp_path / "data", blob_url=bucket.url)
    store = make_blob_store(settings)
    assert isinstance(store, S3BlobStore)
    for name, value in kw.items():
        setattr(store, name, value)
    return store


def staged_files(store: S3BlobStore) -> list[Path]:
    return [p for p in store.cache.root.rglob("*") if p.is_file()]


def test_blobs_are_content_addressed_objects_stored_once(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    store = store_in(s3_bucket, tmp_path)
    data = b"weights" * 1000
    sha = hashlib.sha256(data).hexdigest()
    first = store.stage([data[:10], data[10:]])
    assert (first.sha256, first.size) == (sha, len(data))
    assert store.promote(first) is True
    assert store.promote(store.stage([data])) is False
    assert s3_bucket.object_keys() == [f"blobs/{sha[:2]}/{sha[2:4]}/{sha}"]
    assert staged_files(store) == []  # nothing stays on local disk
    assert store.exists(sha) and store.size(sha) == len(data)
    assert list(store.shas()) == [sha]
    assert store.open(sha).read() == data
    store.delete(sha)
    assert not store.exists(sha) and s3_bucket.object_keys() == []


def test_multipart_uploads_racing_with_the_same_bytes_store_one_object(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_io, "PART_BYTES", 5 * 1024 * 1024)
    store = store_in(s3_bucket, tmp_path)
    data = os.urandom(11 * 1024 * 1024)  # three parts
    sha = hashlib.sha256(data).hexdigest()
    staged = [store.stage([data]) for _ in range(3)]
    results: list[bool] = []
    barrier = threading.Barrier(3)

    def promote(i: int) -> None:
        barrier.wait()
        results.append(store.promote(staged[i]))

    threads = [threading.Thread(target=promote, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # AWS lets one completion through; SeaweedFS may let several finish (the same bytes):
    # either way one object, and at least one promotion says it stored it
    assert len(results) == 3 and True in results
    assert s3_bucket.object_keys() == [store.key(sha)]
    assert b"".join(store.stream(sha)) == data
    listed = s3_bucket.server.client().list_multipart_uploads(Bucket=s3_bucket.name)
    assert listed.get("Uploads", []) == []  # the losers' parts were aborted


def test_ranged_reads_and_presigned_urls(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    store = store_in(s3_bucket, tmp_path)
    data = bytes(range(256)) * 64
    sha = hashlib.sha256(data).hexdigest()
    store.promote(store.stage([data]))
    assert b"".join(store.stream(sha, 100, 199)) == data[100:200]
    assert b"".join(store.stream(sha, 16000)) == data[16000:]
    url = store.presign(sha, "model v1.safetensors")
    answer = httpx2.get(url)
    assert answer.status_code == 200 and answer.content == data
    assert "model%20v1.safetensors" in answer.headers["content-disposition"]
    tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    assert httpx2.get(tampered).status_code == 403


def test_local_copies_are_checked_and_cached(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    store = store_in(s3_bucket, tmp_path)
    data = b"a checkpoint" * 100
    sha = hashlib.sha256(data).hexdigest()
    store.promote(store.stage([data]))
    path = store.local_path(sha)
    assert path.read_bytes() == data and path.is_relative_to(store.cache.root)
    # bytes under a key that is not their hash are refused, and not cached
    other = hashlib.sha256(b"other").hexdigest()
    s3_bucket.server.client().put_object(Bucket=s3_bucket.name, Key=store.key(other), Body=data)
    with pytest.raises(StorageError, match="does not match"):
        store.local_path(other)
    assert not store.cache.local_path(other).exists()
    with pytest.raises(StorageError, match="missing"):
        store.local_path("0" * 64)


def test_the_cache_drops_old_copies_past_its_limit(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    store = store_in(s3_bucket, tmp_path, cache_max_bytes=2500)
    shas = []
    for i in range(3):
        data = bytes([i]) * 1000
        store.promote(store.stage([data]))
        shas.append(hashlib.sha256(data).hexdigest())
    old = time.time() - 2 * s3_blobs.CACHE_GRACE_S
    for i, sha in enumerate(shas[:2]):
        os.utime(store.local_path(sha), (old + i, old + i))
    store.local_path(shas[2])  # over the limit: the oldest copies go, the new one stays
    assert [store.cache.exists(s) for s in shas] == [False, True, True]
    store.cache_max_bytes = 1500
    store.trim_cache()  # the old copy goes; the one just used stays, even past the limit
    assert [store.cache.exists(s) for s in shas] == [False, False, True]
    store.cache_max_bytes = 0
    assert store.trim_cache() == []


class RefusesConditions:
    """A client whose server does not implement If-None-Match (as some S3 servers)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def put_object(self, **kw: Any) -> Any:
        if "IfNoneMatch" in kw:
            self.refused += 1
            raise ClientError(
                {"Error": {"Code": "NotImplemented"}, "ResponseMetadata": {"HTTPStatusCode": 501}},
                "PutObject",
            )
        return self.client.put_object(**kw)


def test_a_server_without_conditional_writes_gets_head_then_put(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    store = store_in(s3_bucket, tmp_path)
    store.client = RefusesConditions(store.client)
    data = b"no conditions" * 10
    assert store.promote(store.stage([data])) is True
    assert store.promote(store.stage([data])) is False
    assert store.client.refused == 1 and not store.conditional_writes
    assert len(s3_bucket.object_keys()) == 1


def test_ready_needs_the_bucket(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    store = store_in(s3_bucket, tmp_path)
    assert store.ready() and store.free_bytes()
    store.bucket = "no-such-bucket-here"
    assert not store.ready()
    with pytest.raises(StorageError):
        store.promote(store.stage([b"x"]))
    assert staged_files(store) == []


def test_missing_credentials_are_storage_errors(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = store_in(s3_bucket, tmp_path)
    assert not store.ready()
    for call in (
        lambda: store.presign("0" * 64, "m.safetensors"),
        lambda: store.exists("0" * 64),
        lambda: store.promote(store.stage([b"x"])),
        lambda: b"".join(store.stream("0" * 64)),
    ):
        with pytest.raises(StorageError):
            call()


class Chunks(list):  # what registry.references gives: chunks and where they came from
    copy_source: CopySource | None = None


def test_a_copy_is_of_the_checked_version_or_nothing(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    store = store_in(s3_bucket, tmp_path)
    source = s3_bucket.server.new_bucket()
    client = s3_bucket.server.client()
    client.put_object(Bucket=source, Key="m", Body=b"checked bytes")
    etag = client.head_object(Bucket=source, Key="m")["ETag"]
    client.put_object(Bucket=source, Key="m", Body=b"other bytes!!")  # changed since read
    chunks = Chunks([b"checked bytes"])
    chunks.copy_source = CopySource(source, "m", etag)
    with pytest.raises(InvalidInput, match="changed while it was read"):
        store.promote(store.stage(chunks))
    assert s3_bucket.object_keys() == [] and staged_files(store) == []
    chunks = Chunks([b"other bytes!!"])
    chunks.copy_source = CopySource(source, "m", client.head_object(Bucket=source, Key="m")["ETag"])
    assert store.promote(store.stage(chunks)) is True
    assert store.open(hashlib.sha256(b"other bytes!!").hexdigest()).read() == b"other bytes!!"
