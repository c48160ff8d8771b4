"""Async release merges on the merge queue (Redis): a merge host runs only merges
(``retarget worker --queue merges``); a worker of the main queue leaves them queued."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import torch
from fastapi.testclient import TestClient
from rq import SimpleWorker
from rq.serializers import JSONSerializer
from safetensors.torch import load

from service.api.app import create_app
from service.config import Settings
from service.jobs.worker import build_worker, worker_queues
from service.releases import artifacts as release_artifacts
from service.releases.merge_jobs import run_merge
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, sgd, upload
from tests.integration.test_worker import REDIS_URL


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, committed_db: str, tmp_path: Path) -> Settings:
    for key, value in {
        "RETARGET_REDIS_URL": REDIS_URL,
        "RETARGET_DATABASE_URL": committed_db,
        "RETARGET_DATA_DIR": str(tmp_path / "data"),
        "RETARGET_AUTO_MIGRATE": "false",
        "RETARGET_PLAN_REQUEST_BUDGET_S": "600",
        "RETARGET_RELEASE_ASYNC_BYTES": "0",  # every merge is a job
    }.items():
        monkeypatch.setenv(key, value)
    return Settings()


@pytest.fixture
def client(env: Settings) -> Iterator[TestClient]:
    rclient = redis.Redis.from_url(REDIS_URL)
    rclient.flushdb()
    app = create_app(env)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        yield c
    rclient.flushdb()


def safe_metadata(data: bytes) -> dict[str, str]:
    size = int.from_bytes(data[:8], "little")
    return dict(json.loads(data[8 : 8 + size])["__metadata__"])


def work(settings: Settings, queues: list[str] | None) -> None:
    """A burst of a worker listening on ``queues`` as `retarget worker --queue ...` would
    (its queues from ``build_worker``), run in this process."""
    worker = build_worker(settings, queues=queues)
    conn = redis.Redis.from_url(REDIS_URL)
    SimpleWorker(worker.queues, connection=conn, serializer=JSONSerializer).work(burst=True)


def pending_release(c: TestClient, env: Settings) -> tuple[dict, dict[str, bytes]]:
    """A 202 release of two models (their profiles computed first by a main-queue worker),
    and the two uploaded files by model id."""
    ds = c.post("/v1/datasets", json={"name": "big"}).json()["id"]
    files, ids = [checkpoint_bytes(seed) for seed in (0, 1)], []
    for i, data in enumerate(files):
        meta = {"dataset_id": ds, "name": f"m{i}", "mechanism": sgd(1.0)}
        resp = upload(c, data, json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    body = {"dataset_id": ds, "model_ids": ids, "epsilon": 3.0, "delta": 1e-5, "method": "lc"}
    resp = c.post("/v1/retarget", json=body)
    if resp.status_code == 202 and "jobs" in resp.json():  # the profiles are being computed
        work(env, [env.queue_name])
        resp = c.post("/v1/retarget", json=body)
    assert resp.status_code == 202, resp.text
    assert resp.json()["release"]["status"] == "pending"
    return resp.json(), dict(zip(ids, files, strict=True))


def test_a_worker_on_the_merge_queue_alone_merges_the_release(
    client: TestClient, env: Settings
) -> None:
    pending, files = pending_release(client, env)
    release_id, job_id = pending["release"]["release_id"], pending["job_id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    assert worker_queues(env, ["merges"]) == ["merges"]

    work(env, ["merges"])
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "finished"
    release = client.get(f"/v1/releases/{release_id}").json()
    assert release["status"] == "done" and release["size_bytes"] > 0
    data = client.get(release["download_url"]).content
    assert safe_metadata(data)["retarget.release_id"] == release_id
    merged = load(data)
    weights = {w["model_id"]: w["weight"] for w in release["weights"]}
    assert set(weights) == set(files) and all(w > 0 for w in weights.values())
    inputs = {m: load(f) for m, f in files.items()}
    assert set(merged) == set(inputs[next(iter(inputs))])
    for name, tensor in merged.items():
        expected = torch.zeros_like(tensor, dtype=torch.float32)
        for m, w in weights.items():
            expected += w * inputs[m][name].to(torch.float32)
        assert torch.allclose(tensor.to(torch.float32), expected, atol=1e-6), name


def test_a_worker_on_the_main_queue_alone_leaves_the_release_pending(
    client: TestClient, env: Settings
) -> None:
    pending, _ = pending_release(client, env)
    release_id, job_id = pending["release"]["release_id"], pending["job_id"]
    work(env, [env.queue_name])
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    assert client.get(f"/v1/releases/{release_id}").json()["status"] == "pending"
    assert client.get(f"/v1/releases/{release_id}/weights").status_code == 409
    # the default worker listens on both queues: it merges
    assert worker_queues(env) == [env.queue_name, env.merge_queue]
    work(env, None)
    assert client.get(f"/v1/releases/{release_id}").json()["status"] == "done"


def test_a_merge_that_fails_on_the_merge_worker_gives_the_budget_back(
    client: TestClient, env: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = client.app.state.ctx.jobs  # type: ignore[attr-defined]
    monkeypatch.setattr(jobs, "settings", jobs.settings.model_copy(update={"job_retries": 0}))
    pending, _ = pending_release(client, env)
    release_id, job_id = pending["release"]["release_id"], pending["job_id"]
    ds = client.get(f"/v1/releases/{release_id}").json()["dataset_id"]
    assert client.get(f"/v1/datasets/{ds}/ledger").json()["exposed_model_ids"]

    def broken(*args: object, **kwargs: object) -> tuple[str, int]:
        raise OSError("the merge host's disk is full")

    monkeypatch.setattr(release_artifacts, "merge", broken)
    work(env, ["merges"])
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed" and "disk is full" in job["error"]
    assert client.get(f"/v1/releases/{release_id}").status_code == 404
    ledger = client.get(f"/v1/datasets/{ds}/ledger").json()
    assert ledger["releases"] == [] and ledger["exposed_model_ids"] == []
    # a retry of it (a worker lost after the delete) fails too, and says why
    with pytest.raises(RuntimeError, match="is gone"):
        run_merge(client.app.state.ctx.session_factory, client.app.state.ctx.blobs, release_id)  # type: ignore[attr-defined]
