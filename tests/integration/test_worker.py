"""The accounting worker on the real Redis queue, against the real Postgres.

Workers run in process (RQ's SimpleWorker, burst mode) except where the test is
about worker processes themselves (SIGKILL), which start real `retarget worker`s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from rq import Queue, SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from service.accounting.conversions import round_up
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile
from service.api.app import create_app
from service.config import Settings
from service.jobs.metrics import RedisCounters
from service.jobs.queue import RQJobs, redis_client
from service.profiles.source import RQProfiles
from service.tasks import TASKS
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, upload

REDIS_URL = os.environ.get("RETARGET_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

SGD = {
    "type": "dp_sgd",
    "sampling_rate": 0.004,
    "noise_multiplier": 1.0,
    "clipping_norm": 1.0,
    "steps": 705,
    "learning_rate": 0.1,
}


@pytest.fixture
def rclient() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, committed_db: str, tmp_path: Path) -> Settings:
    for key, value in {
        "RETARGET_REDIS_URL": REDIS_URL,
        "RETARGET_DATABASE_URL": committed_db,
        "RETARGET_DATA_DIR": str(tmp_path / "data"),
        "RETARGET_AUTO_MIGRATE": "false",
        # plans answer in the request however slow the machine (the 202 path has its tests)
        "RETARGET_PLAN_REQUEST_BUDGET_S": "600",
    }.items():
        monkeypatch.setenv(key, value)
    return Settings()


@pytest.fixture
def client(env: Settings, rclient: redis.Redis) -> Iterator[TestClient]:
    app = create_app(env)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        yield c


def run_worker(settings: Settings) -> None:
    conn = redis.Redis.from_url(REDIS_URL)
    queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
    SimpleWorker([queue], connection=conn, serializer=JSONSerializer).work(burst=True)


def register(client: TestClient, mechanism: dict, name: str = "m", **extra) -> dict:
    ds = client.get("/v1/datasets").json()["data"]
    ds_id = ds[0]["id"] if ds else client.post("/v1/datasets", json={"name": "d"}).json()["id"]
    meta = {"dataset_id": ds_id, "name": name, "mechanism": mechanism, **extra}
    resp = upload(client, checkpoint_bytes(), json.dumps(meta))
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def test_worker_computes_cache_answers_and_a_flush_recomputes(
    client: TestClient, env: Settings, rclient: redis.Redis
) -> None:
    model = register(client, SGD, claimed={"epsilon": 0.3, "delta": 1e-5})
    assert model["claim_check"] is None  # the worker checks it
    url = f"/v1/models/{model['id']}/epsilon"
    pending = client.get(url)
    assert pending.status_code == 202 and pending.headers["retry-after"]
    job_url = pending.headers["location"]
    assert client.get(job_url).json()["status"] == "queued"

    run_worker(env)
    assert client.get(job_url).json()["status"] == "finished"
    first = client.get(url)
    assert first.status_code == 200
    direct = compute_profile(parse_mechanism(SGD)).epsilon(1e-5)
    assert first.json()["epsilon"] == round_up(direct)
    assert client.get(f"/v1/models/{model['id']}").json()["claim_check"] == "understated"

    rclient.flushdb()
    assert client.get(url).status_code == 202
    run_worker(env)
    again = client.get(url)
    assert again.status_code == 200 and again.json() == first.json()
    metrics = client.get("/metrics").text
    assert "retarget_profile_computations_total 1.0" in metrics
    assert "retarget_profile_cache_hits_total" in metrics


def test_twenty_concurrent_requests_start_exactly_one_computation(
    client: TestClient, env: Settings, rclient: redis.Redis
) -> None:
    model = register(client, {**SGD, "steps": 300})
    rclient.flushdb()  # the registration's job is gone: the next requests race for it
    url = f"/v1/models/{model['id']}/epsilon"
    barrier = threading.Barrier(20)
    answers: list[tuple[int, str | None]] = []

    def ask() -> None:
        barrier.wait()
        resp = client.get(url)
        answers.append((resp.status_code, resp.headers.get("location")))

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [code for code, _ in answers] == [202] * 20
    assert len({loc for _, loc in answers}) == 1
    assert Queue(env.queue_name, connection=rclient).count == 1
    run_worker(env)
    assert RedisCounters(rclient).values()["profile_computations"] == 1
    assert client.get(url).status_code == 200


def test_a_job_that_keeps_failing_ends_failed_with_its_error(
    env: Settings, rclient: redis.Redis
) -> None:
    settings = env.model_copy(update={"job_retries": 0})
    jobs = RQJobs(redis_client(REDIS_URL), settings, tasks=TASKS)
    profiles = RQProfiles(jobs, discretization=0.5)  # out of range
    mech = parse_mechanism(SGD)
    profile, job = profiles.profile(mech)
    assert profile is None and job is not None
    run_worker(settings)
    info = jobs.get(job.id)
    assert info.status == "failed" and "discretization" in (info.error or "")
    _, again = profiles.profile(mech)  # not re-enqueued while the failure stands
    assert again is not None and again.id == job.id and again.status == "failed"
    assert Queue(settings.queue_name, connection=rclient).count == 0
    assert RedisCounters(rclient).values()["jobs_failed"] == 1


def _worker_process(env: Settings, name: str) -> subprocess.Popen:
    environ = {
        **os.environ,
        "RETARGET_WORKER_MONITORING_INTERVAL_S": "1",
        "RETARGET_WORKER_HEARTBEAT_SLACK_S": "2",
        "RETARGET_WORKER_MAINTENANCE_INTERVAL_S": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "retarget.cli", "worker", "--name", name],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_job_whose_worker_is_killed_completes_on_another_worker(
    env: Settings, rclient: redis.Redis
) -> None:
    slow = {
        "type": "dp_sgd",
        "per_step": {
            "sampling_rate": 0.01,
            "noise_multiplier": [1.0 + i / 2_000 for i in range(2_000)],
            "clipping_norm": 1.0,
        },
    }
    jobs = RQJobs(redis_client(REDIS_URL), env, tasks=TASKS)
    profiles = RQProfiles(jobs)
    _, job = profiles.profile(parse_mechanism(slow))
    assert job is not None
    first = _worker_process(env, "worker-a")
    second = None
    try:
        _wait(lambda: jobs.get(job.id).status == "started", 60, "the first worker to start")
        kill_tree(first.pid)  # the worker and its work horse, as a crashed host would
        first.wait(timeout=10)
        second = _worker_process(env, "worker-b")
        _wait(lambda: jobs.get(job.id).status == "finished", 120, "the second worker")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait(timeout=10)
    done = Job.fetch(job.id, connection=rclient, serializer=JSONSerializer)
    assert done.worker_name == "worker-b"
    assert RedisCounters(rclient).values()["profile_computations"] == 1
    assert profiles.profile(parse_mechanism(slow))[0] is not None


@pytest.mark.parametrize(("retries", "waits"), [(1, [0]), (2, [0, 10]), (3, [0, 10, 60])])
def test_a_lost_or_failed_job_is_retried_first_at_once(
    env: Settings, rclient: redis.Redis, retries: int, waits: list[int]
) -> None:
    """Whatever its number of retries (a profile job has one), the first comes at once;
    RQ reads a longer interval list from its end, which made a lost profile wait 60 s."""
    jobs = RQJobs(redis_client(REDIS_URL), env, tasks=TASKS)
    info = jobs.submit("outbox", {}, background=True, job_id=f"retry-{retries}", retries=retries)
    job = Job.fetch(info.id, connection=rclient, serializer=JSONSerializer)
    seen = []
    while job.retries_left:
        seen.append(job.get_retry_interval())
        job.retries_left -= 1
    assert seen == waits


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (RQ's work horse runs in its own session)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, tree = [pid], []
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    for p in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_redis_down_keeps_the_api_up_and_reads_working(committed_db: str, tmp_path: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        _wait(lambda: _pings(url), 10, "the test Redis")
        settings = Settings(
            redis_url=url, database_url=committed_db, data_dir=tmp_path / "d", auto_migrate=False
        )
        app = create_app(settings)
        with TestClient(app) as c:
            authorize(c, app.state.ctx.session_factory)
            model = register(c, SGD)
            waiting = c.get("/readyz")
            assert waiting.status_code == 503
            assert "no worker" in waiting.json()["checks"]["workers"]
            conn = redis.Redis.from_url(url)
            queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
            SimpleWorker([queue], connection=conn).register_birth()
            ready = c.get("/readyz")
            assert ready.status_code == 200
            # no worker on the merge queue: ready, with a notice that large merges wait
            assert "no worker" in ready.json()["notices"]["merge_workers"]
            merges = Queue(settings.merge_queue, connection=conn, serializer=JSONSerializer)
            SimpleWorker([merges], connection=conn).register_birth()
            assert c.get("/readyz").json()["notices"] == {}
            server.terminate()
            server.wait(timeout=10)
            ready = c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["cache"] != "ok"
            assert c.get("/healthz").status_code == 200
            assert c.get("/v1/models").json()["count"] == 1
            assert c.get(f"/v1/models/{model['id']}").status_code == 200
            eps = c.get(f"/v1/models/{model['id']}/epsilon")
            assert eps.status_code == 503
            assert eps.json()["type"] == "urn:retarget:problem:storage-unavailable"
            # registering still works; the profile is queued on first use later
            assert register(c, {**SGD, "steps": 10}, name="later")["id"]
    finally:
        if server.poll() is None:
            server.kill()


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.RedisError:
        return False


def test_plans_wait_for_profiles_then_answer(
    client: TestClient, env: Settings, rclient: redis.Redis
) -> None:
    first = register(client, SGD, name="a")
    register(client, {**SGD, "noise_multiplier": 2.0}, name="b")
    body = {
        "dataset_id": first["dataset_id"],
        "epsilon": 2.0,
        "delta": 1e-5,
        "method": "rs",
        "objective": "noise",
    }
    pending = client.post("/v1/plans", json=body)
    assert pending.status_code == 202 and pending.headers["retry-after"]
    assert len(pending.json()["jobs"]) == 2
    run_worker(env)
    done = client.post("/v1/plans", json=body)
    assert done.status_code == 200 and done.json()["epsilon"] <= 2.0, done.text


def test_a_signed_webhook_is_applied_by_the_worker(
    client: TestClient, env: Settings, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.deployments.signing import sign

    secret = "worker-webhook-secret"
    monkeypatch.setenv("RETARGET_WEBHOOK_SECRETS", json.dumps({"default": secret}))
    app = create_app(Settings())
    with TestClient(app) as c:
        c.headers.update(client.headers)
        ds = c.post("/v1/datasets", json={"name": "w"}).json()["id"]
        for i, s in enumerate((0.8, 2.0)):
            meta = {"dataset_id": ds, "name": f"w{i}", "mechanism": {**SGD, "noise_multiplier": s}}
            assert upload(c, checkpoint_bytes(i), json.dumps(meta)).status_code == 201
        run_worker(env)  # the profiles
        dep = c.post(
            "/v1/deployments",
            json={
                "name": "edge",
                "dataset_id": ds,
                "epsilon": 1.0,
                "delta": 1e-5,
                "method": "lc",
                "accountant": "rdp",
            },
        )
        assert dep.status_code == 201, dep.text
        raw = json.dumps({"deployment": "edge", "epsilon": 2.0, "delta": 1e-5}).encode()
        accepted = c.post(
            "/v1/webhooks/policy-change",
            content=raw,
            headers={
                "X-Retarget-Signature": sign(secret, "w-1", raw),
                "X-Retarget-Delivery": "w-1",
                "Content-Type": "application/json",
            },
        )
        assert accepted.status_code == 202 and accepted.json()["job"]["status"] == "queued"
        assert c.get("/v1/deployments/edge").json()["epsilon"] == 1.0
        run_worker(env)
        job = c.get(f"/v1/jobs/{accepted.json()['job']['id']}").json()
        assert job["status"] == "finished" and job["result"]["status"] == "changed"
        after = c.get("/v1/deployments/edge").json()
        assert after["epsilon"] == 2.0
        assert after["current_release_id"] != dep.json()["current_release_id"]
