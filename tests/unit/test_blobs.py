from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.errors import InvalidInput, PayloadTooLarge
from service.registry.blobs import LocalBlobStore


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_blob_is_named_by_sha256_and_stored_once(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = b"weights" * 1000
    first = store.stage([data[:10], data[10:]])
    assert first.sha256 == hashlib.sha256(data).hexdigest() and first.size == len(data)
    assert store.promote(first) is True
    second = store.stage([data])
    assert store.promote(second) is False
    assert files(tmp_path) == [store.local_path(first.sha256)]
    with store.open(first.sha256) as fh:
        assert fh.read() == data
    assert list(store.shas()) == [first.sha256]


def test_a_failing_stream_leaves_no_file(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)

    def broken() -> Iterator[bytes]:
        yield b"a" * 100
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        store.stage(broken())
    assert files(tmp_path) == []


def test_stream_over_the_limit_is_cut_off(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    with pytest.raises(PayloadTooLarge):
        store.stage([b"a" * 600, b"b" * 600], max_bytes=1000)
    assert files(tmp_path) == []


def test_discard_removes_the_staged_file(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    staged = store.stage([b"abc"])
    store.discard(staged)
    assert files(tmp_path) == [] and not store.exists(staged.sha256)


def test_names_that_are_not_digests_are_refused(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    with pytest.raises(InvalidInput):
        store.local_path("../../etc/passwd")


def test_temporary_files_of_dead_processes_are_swept_at_start(tmp_path) -> None:
    import os
    import subprocess

    from service.registry.blobs import LocalBlobStore

    store = LocalBlobStore(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = store.tmp / f"stage-{dead.pid}-abc"
    left.write_bytes(b"half a merge")
    mine = store.tmp / f"stage-{os.getpid()}-def"
    mine.write_bytes(b"being written")
    LocalBlobStore(tmp_path)  # a restart
    assert not left.exists()
    assert mine.exists()
