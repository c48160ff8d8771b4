"""The outbox on the real Redis queue: a webhook delivered while Redis is down is
applied once, whether the sender retries it or a worker's drain finds it; callback
retries wait in RQ's schedule, not in a sleeping worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer
from sqlalchemy import update

from service.api.app import create_app
from service.config import Settings
from service.deployments.signing import sign
from service.errors import StorageError
from service.jobs.queue import RQJobs, redis_client
from service.registry.models import OutboxItem
from service.tasks import TASKS, build_worker
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, free_port, upload

SECRET = "outbox-webhook-secret"


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, Callable[[bool], None]]]:
    """A Redis of this test's own that keeps its data across a restart (AOF), and a way
    to take it down and bring it back."""
    port = free_port()
    folder = tmp_path / "redis"
    folder.mkdir()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "yes", "--dir", str(folder)]
    state: dict[str, subprocess.Popen] = {}

    def up() -> None:
        state["proc"] = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=port).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        pytest.fail("the test Redis did not start")

    def down() -> None:
        state["proc"].terminate()
        state["proc"].wait(timeout=10)

    up()
    try:
        yield f"redis://127.0.0.1:{port}/0", lambda on: up() if on else down()
    finally:
        if state["proc"].poll() is None:
            state["proc"].kill()


def work(url: str, settings: Settings) -> None:
    conn = redis.Redis.from_url(url)
    queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
    SimpleWorker([queue], connection=conn, serializer=JSONSerializer).work(burst=True)


def deliver(client: TestClient, change: dict, delivery: str):
    raw = json.dumps(change).encode()
    return client.post(
        "/v1/webhooks/policy-change",
        content=raw,
        headers={
            "X-Retarget-Signature": sign(SECRET, delivery, raw),
            "X-Retarget-Delivery": delivery,
            "Content-Type": "application/json",
        },
    )


def test_webhooks_during_a_redis_outage_are_applied_once_when_it_is_back(
    own_redis, committed_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, power = own_redis
    for key, value in {
        "RETARGET_REDIS_URL": url,
        "RETARGET_DATABASE_URL": committed_db,
        "RETARGET_DATA_DIR": str(tmp_path / "data"),
        "RETARGET_AUTO_MIGRATE": "false",
        "RETARGET_WEBHOOK_SECRETS": json.dumps({"default": SECRET}),
    }.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    app = create_app(settings)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        ds = c.post("/v1/datasets", json={"name": "outage"}).json()["id"]
        for i, std in enumerate((1.0, 3.0)):
            mech = {"type": "gaussian", "sensitivity": 1.0, "noise_std": std, "count": 1}
            meta = {"dataset_id": ds, "name": f"g{i}", "mechanism": mech}
            assert upload(c, checkpoint_bytes(i), json.dumps(meta)).status_code == 201
        work(url, settings)  # the profiles
        body = {"name": "edge", "dataset_id": ds, "epsilon": 2.0, "delta": 1e-5}
        assert c.post("/v1/deployments", json={**body, "method": "rs"}).status_code == 201

        power(False)
        now = int(time.time())
        retried = {"deployment": "edge", "epsilon": 3.0, "delta": 1e-5, "version": now}
        drained = {"deployment": "edge", "epsilon": 4.0, "delta": 1e-5, "version": now + 1}
        for change, delivery in ((retried, "outage-a"), (drained, "outage-b")):
            accepted = deliver(c, change, delivery)
            assert accepted.status_code == 202, accepted.text
            assert accepted.json()["job"]["status"] == "queued"  # recorded, not yet queued
        assert c.get("/v1/deployments/edge").json()["epsilon"] == 2.0

        power(True)
        # the sender retries "a"; nobody retries "b": a worker's drain finds it
        with app.state.ctx.session_factory() as session:  # past the retry delay
            session.execute(update(OutboxItem).values(next_attempt_at=OutboxItem.created_at))
            session.commit()
        again = deliver(c, retried, "outage-a")
        assert again.status_code == 202 and again.headers["x-retarget-replay"] == "true"
        work(url, settings)
        assert c.get("/v1/deployments/edge").json()["epsilon"] == 3.0
        build_worker(settings).drain_outbox(force=True)
        work(url, settings)
        assert c.get("/v1/deployments/edge").json()["epsilon"] == 4.0
        # more retries, drains and workers change nothing
        for delivery, change in (("outage-a", retried), ("outage-b", drained)):
            assert deliver(c, change, delivery).json()["job"]["status"] == "finished"
        build_worker(settings).drain_outbox(force=True)
        work(url, settings)
        kinds = [e["kind"] for e in c.get("/v1/deployments/edge").json()["history"]]
        assert kinds == ["policy_changed", "policy_changed", "created"]


def test_a_delayed_attempt_waits_in_rqs_schedule(own_redis) -> None:
    url, _ = own_redis
    settings = Settings(redis_url=url, database_url="sqlite://")
    jobs = RQJobs(redis_client(url), settings, tasks=TASKS)
    job = jobs.submit("outbox", {"item_id": "x", "attempt": 1}, job_id="outbox-x-1", delay_s=60)
    assert job.status == "scheduled"
    queue = Queue(settings.queue_name, connection=jobs.client, serializer=JSONSerializer)
    assert queue.count == 0  # no worker holds it meanwhile
    assert "outbox-x-1" in ScheduledJobRegistry(queue=queue).get_job_ids()


def test_an_idle_worker_drains_work_left_in_the_outbox(
    own_redis, committed_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = own_redis
    for key, value in {
        "RETARGET_REDIS_URL": url,
        "RETARGET_DATABASE_URL": committed_db,
        "RETARGET_DATA_DIR": str(tmp_path / "data"),
        "RETARGET_AUTO_MIGRATE": "false",
        "RETARGET_WEBHOOK_SECRETS": json.dumps({"default": SECRET}),
        "RETARGET_OUTBOX_INTERVAL_S": "1",
    }.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    app = create_app(settings)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        ds = c.post("/v1/datasets", json={"name": "idle"}).json()["id"]
        for i, std in enumerate((1.0, 3.0)):
            mech = {"type": "gaussian", "sensitivity": 1.0, "noise_std": std, "count": 1}
            meta = {"dataset_id": ds, "name": f"g{i}", "mechanism": mech}
            assert upload(c, checkpoint_bytes(i), json.dumps(meta)).status_code == 201
        work(url, settings)
        body = {"name": "idle", "dataset_id": ds, "epsilon": 2.0, "delta": 1e-5, "method": "rs"}
        assert c.post("/v1/deployments", json=body).status_code == 201
        jobs = app.state.ctx.jobs

        def unreachable(*args, **kwargs):
            raise StorageError("the job queue (Redis) is unreachable")

        monkeypatch.setattr(jobs, "submit", unreachable)  # this replica cannot reach Redis
        change = {"deployment": "idle", "epsilon": 4.0, "delta": 1e-5}
        assert deliver(c, change, "idle-1").json()["job"]["status"] == "queued"
        worker = subprocess.Popen(
            [sys.executable, "-m", "retarget.cli", "worker", "--name", "drainer"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 90
            while c.get("/v1/deployments/idle").json()["epsilon"] != 4.0:
                assert time.monotonic() < deadline, "the worker never drained the outbox"
                time.sleep(0.2)
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
        kinds = [e["kind"] for e in c.get("/v1/deployments/idle").json()["history"]]
        assert kinds == ["policy_changed", "created"]
