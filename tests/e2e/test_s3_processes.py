"""Two API hosts that share only Postgres, Redis and a bucket: `retarget serve` twice,
each with its own data dir, and an accounting worker, all on a real S3 server (SeaweedFS).
A model uploaded through one is released and downloaded through the other; identical
releases asked of both at once give one artifact and one ledger entry."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from benchmarks.load import fresh_database
from service.config import Settings
from service.registry.db import make_engine, make_sessionmaker, session_scope
from service.registry.keys import create_key
from service.registry.migrate import upgrade
from tests.helpers import (
    checkpoint_bytes,
    free_port,
    service_env,
    sgd,
    wait_healthy,
)
from tests.s3server import S3Bucket

REDIS_URL = "redis://127.0.0.1:6379/12"


def blob_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and len(p.name) == 64]


@pytest.fixture
def two_hosts(
    tmp_path: Path, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[list[str], dict[str, str], list[Path]]]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    shared = service_env(
        RETARGET_DATABASE_URL=fresh_database("retarget_s3_processes"),
        RETARGET_REDIS_URL=REDIS_URL,
        RETARGET_QUEUE_NAME=f"retarget-s3-{uuid.uuid4().hex[:8]}",
        RETARGET_PLAN_REQUEST_BUDGET_S="600",
        **s3_bucket.env,
    )
    # migrated and keyed in this process: two fewer interpreters to start
    upgrade(url=shared["RETARGET_DATABASE_URL"])
    engine = make_engine(shared["RETARGET_DATABASE_URL"])
    with session_scope(make_sessionmaker(engine)) as session:
        key = create_key(session=session, name="tests", scopes=["admin"])[1]
    engine.dispose()
    shared["RETARGET_AUTO_MIGRATE"] = "false"
    cli = [sys.executable, "-m", "retarget.cli"]
    data_dirs = [tmp_path / "host-a", tmp_path / "host-b"]
    ports = [free_port(), free_port()]
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [*cli, "serve", "--port", str(port), "--log-level", "warning"],
            env={**shared, "RETARGET_DATA_DIR": str(folder)},
            **quiet,
        )
        for port, folder in zip(ports, data_dirs, strict=True)
    ]
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for base, proc in zip(bases, procs, strict=True):
            assert wait_healthy(base, 120, alive=lambda p=proc: p.poll() is None), base
        # the profile jobs run on a worker in this process (one interpreter fewer to start)
        for name, value in shared.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("RETARGET_DATA_DIR", str(tmp_path / "worker"))
        yield bases, {"Authorization": f"Bearer {key}"}, data_dirs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        redis.Redis.from_url(REDIS_URL).flushdb()


def work_the_queue() -> None:
    """An accounting worker's turn: every queued job (the models' profiles), then exit."""
    settings = Settings()
    conn = redis.Redis.from_url(REDIS_URL)
    queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
    SimpleWorker([queue], connection=conn, serializer=JSONSerializer).work(burst=True)


def release(base: str, auth: dict[str, str], body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{base}/v1/retarget", json=body, headers=auth, timeout=300)


def test_hosts_sharing_a_bucket_serve_each_others_models(
    two_hosts: tuple[list[str], dict[str, str], list[Path]], s3_bucket: S3Bucket
) -> None:
    (a, b), auth, data_dirs = two_hosts
    files = [checkpoint_bytes(seed=i) for i in range(3)]
    with httpx2.Client(base_url=a, headers=auth, timeout=120) as http:
        ds = http.post("/v1/datasets", json={"name": "shared"}).json()["id"]
        for i, (data, sigma) in enumerate(zip(files, (0.8, 1.5, 3.0), strict=True)):
            meta = {"dataset_id": ds, "name": f"m{i}", "mechanism": sgd(sigma)}
            resp = http.post(
                "/v1/models",
                files={"weights": ("m.safetensors", data)},
                data={"metadata": json.dumps(meta)},
            )
            assert resp.status_code == 201, resp.text

    body = {"dataset_id": ds, "epsilon": 1.0, "delta": 1e-5, "method": "lc", "accountant": "rdp"}
    assert release(b, auth, body).status_code == 202  # the profiles are queued
    work_the_queue()
    first = release(b, auth, body)  # merged on host b from objects host a uploaded
    assert first.status_code == 201, first.text
    got = httpx2.get(f"{b}{first.json()['download_url']}", headers=auth, timeout=120)
    assert hashlib.sha256(got.content).hexdigest() == first.json()["sha256"]
    moved = httpx2.get(f"{a}{first.json()['download_url']}?redirect=true", headers=auth, timeout=60)
    assert moved.status_code == 307
    assert httpx2.get(moved.headers["location"]).content == got.content

    # the same new request to both hosts at once: one release, one artifact, one entry
    same = {**body, "epsilon": 1.5}
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: release((a, b)[i % 2], auth, same), range(6)))
    assert sorted(r.status_code for r in answers) == [200] * 5 + [201], [r.text for r in answers]
    assert len({r.json()["release_id"] for r in answers}) == 1
    for base in (a, b):
        ledger = httpx2.get(f"{base}/v1/datasets/{ds}/ledger", headers=auth, timeout=60).json()
        assert len(ledger["releases"]) == 2
    names = [k.rsplit("/", 1)[-1] for k in s3_bucket.object_keys()]
    assert sorted(names) == sorted(
        {hashlib.sha256(f).hexdigest() for f in files}
        | {first.json()["sha256"], answers[0].json()["sha256"]}
    )
    # every blob is in the bucket: the hosts keep only cached copies of merge inputs
    for folder in data_dirs:
        assert all(p.is_relative_to(folder / "blob-cache") for p in blob_files(folder))
        assert not (folder / "blobs").exists()
