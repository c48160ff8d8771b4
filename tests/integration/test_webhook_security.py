"""Attacks on policy-change webhooks and deployment callbacks (issue #18).

Webhooks: a replay under a fresh delivery id, a delayed older policy, a queue that
fails while a delivery is being recorded, work run twice. Callbacks: internal targets
in every notation, DNS that answers an internal address at delivery, redirects, a
receiver that never answers, secrets in the URL. Traffic goes to loopback only, and
names resolve through a stub (no lookup leaves the machine).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.api.app import create_app
from service.config import Settings
from service.deployments import callbacks, outbox
from service.deployments.policies import change_policy
from service.deployments.runner import run_outbox
from service.deployments.signing import sign
from service.errors import StorageError
from service.registry.migrate import upgrade
from service.registry.models import OutboxItem, WebhookDelivery
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, upload

SECRET = "webhook-secret-for-tests"


def seed(client: TestClient, name: str = "prod", **extra: Any) -> dict:
    """A dataset of two Gaussian-mechanism models and an RS deployment (cheap to plan)."""
    ds = client.post("/v1/datasets", json={"name": f"ds-{name}"}).json()["id"]
    for i, std in enumerate((1.0, 3.0)):
        meta = {
            "dataset_id": ds,
            "name": f"g{i}",
            "mechanism": {"type": "gaussian", "sensitivity": 1.0, "noise_std": std, "count": 1},
        }
        assert upload(client, checkpoint_bytes(i), json.dumps(meta)).status_code == 201
    body = {"name": name, "dataset_id": ds, "epsilon": 2.0, "delta": 1e-5, "method": "rs"}
    resp = client.post("/v1/deployments", json={**body, "accountant": "rdp", **extra})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def webhook(
    client: TestClient,
    change: dict,
    delivery: str,
    *,
    timestamp: int | None = None,
    signed_delivery: str | None = None,
):
    raw = json.dumps(change).encode()
    headers = {
        "X-Retarget-Signature": sign(SECRET, signed_delivery or delivery, raw, timestamp),
        "X-Retarget-Delivery": delivery,
        "X-Retarget-Source": "ops",
        "Content-Type": "application/json",
    }
    return client.post("/v1/webhooks/policy-change", content=raw, headers=headers)


def history(client: TestClient, name: str = "prod") -> list[str]:
    return [e["kind"] for e in client.get(f"/v1/deployments/{name}").json()["history"]]


@pytest.fixture
def hooks(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"webhook_secrets": {"ops": SECRET}})
    with TestClient(create_app(configured, session_factory=backend.session_factory)) as c:
        authorize(c, backend.session_factory)
        yield c


def test_a_signed_webhook_replayed_under_a_fresh_delivery_id_is_refused(
    hooks: TestClient,
) -> None:
    seed(hooks)
    first = webhook(hooks, {"deployment": "prod", "epsilon": 4.0, "delta": 1e-5}, "d-1")
    assert first.status_code == 202 and first.json()["job"]["status"] == "finished"
    hooks.put("/v1/deployments/prod/policy", json={"epsilon": 2.0, "delta": 1e-5})
    # the attacker keeps body and signature and sends them under an id never seen
    replayed = webhook(
        hooks,
        {"deployment": "prod", "epsilon": 4.0, "delta": 1e-5},
        "d-fresh",
        signed_delivery="d-1",
    )
    assert replayed.status_code == 401
    assert "does not match" in replayed.json()["detail"]
    assert hooks.get("/v1/deployments/prod").json()["epsilon"] == 2.0


def test_an_older_policy_cannot_roll_the_deployment_back(hooks: TestClient) -> None:
    seed(hooks)
    now = int(time.time())
    older = {"deployment": "prod", "epsilon": 3.0, "delta": 1e-5, "reason": "old"}
    newer = {"deployment": "prod", "epsilon": 4.0, "delta": 1e-5, "reason": "new"}
    assert webhook(hooks, newer, "new-1", timestamp=now).status_code == 202
    # a change signed a minute earlier (inside the replay window, never delivered)
    late = webhook(hooks, older, "old-1", timestamp=now - 60)
    assert late.status_code == 409 and late.json()["current_version"] >= now
    dep = hooks.get("/v1/deployments/prod").json()
    assert dep["epsilon"] == 4.0 and dep["policy_version"] >= now
    with hooks.app.state.ctx.session_factory() as session:  # nothing stored for it
        assert session.get(WebhookDelivery, "ops:old-1") is None
    # explicit versions order changes the same way
    assert webhook(hooks, {**older, "version": now + 100}, "v-100").status_code == 202
    refused = webhook(hooks, {**newer, "version": now + 50}, "v-50")
    assert refused.status_code == 409
    assert hooks.get("/v1/deployments/prod").json()["epsilon"] == 3.0


def test_an_older_change_recorded_while_the_queue_was_down_is_refused_when_run(
    hooks: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(hooks)
    ctx = hooks.app.state.ctx
    now = int(time.time())
    submit = ctx.jobs.submit
    monkeypatch.setattr(ctx.jobs, "submit", _failing)
    held = webhook(hooks, {"deployment": "prod", "epsilon": 3.0, "delta": 1e-5}, "a", timestamp=now)
    assert held.status_code == 202 and held.json()["job"]["status"] == "queued"
    monkeypatch.setattr(ctx.jobs, "submit", submit)
    newer = {"deployment": "prod", "epsilon": 4.0, "delta": 1e-5, "version": now + 10}
    assert webhook(hooks, newer, "b").status_code == 202
    _make_due(ctx)
    outbox.drain(session_factory=ctx.session_factory, jobs=ctx.jobs, lease_s=60)
    job = hooks.get(f"/v1/jobs/{held.json()['job']['id']}").json()
    assert job["status"] == "finished" and job["result"]["status"] == "refused"
    assert "older" in job["result"]["reason"]
    assert hooks.get("/v1/deployments/prod").json()["epsilon"] == 4.0


def _failing(*args: Any, **kwargs: Any) -> Any:
    raise StorageError("the job queue (Redis) is unreachable: connection refused")


def _make_due(ctx: Any) -> None:
    """Let a drain see every pending item now (as if the retry delay had passed)."""
    from datetime import UTC, datetime, timedelta

    with ctx.session_factory() as session:
        for item in session.scalars(select(OutboxItem).where(OutboxItem.status == "pending")):
            item.next_attempt_at = datetime.now(UTC) - timedelta(seconds=1)
        session.commit()


def test_a_delivery_whose_enqueue_failed_is_applied_exactly_once_on_retry(
    hooks: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(hooks)
    ctx = hooks.app.state.ctx
    submit = ctx.jobs.submit
    monkeypatch.setattr(ctx.jobs, "submit", _failing)  # the queue is down
    change = {"deployment": "prod", "epsilon": 4.0, "delta": 1e-5}
    first = webhook(hooks, change, "outage-1")
    assert first.status_code == 202 and first.json()["job"]["status"] == "queued"
    assert hooks.get("/v1/deployments/prod").json()["epsilon"] == 2.0
    monkeypatch.setattr(ctx.jobs, "submit", submit)  # back up
    _make_due(ctx)
    retried = webhook(hooks, change, "outage-1")  # the sender retries the same delivery
    assert retried.status_code == 202 and retried.headers["x-retarget-replay"] == "true"
    assert retried.json()["job"]["status"] == "finished"
    again = webhook(hooks, change, "outage-1")
    assert again.json() == retried.json()
    _make_due(ctx)
    assert outbox.drain(session_factory=ctx.session_factory, jobs=ctx.jobs, lease_s=60) == 0
    assert hooks.get("/v1/deployments/prod").json()["epsilon"] == 4.0
    assert history(hooks).count("policy_changed") == 1


def test_the_same_work_run_twice_or_late_changes_the_policy_once(
    hooks: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(hooks)
    ctx = hooks.app.state.ctx
    submit = ctx.jobs.submit
    monkeypatch.setattr(ctx.jobs, "submit", _failing)
    accepted = webhook(hooks, {"deployment": "prod", "epsilon": 4.0, "delta": 1e-5}, "twice")
    monkeypatch.setattr(ctx.jobs, "submit", submit)
    item_id = accepted.json()["job"]["id"].removeprefix(outbox.JOB_PREFIX)
    # a worker claims attempt 0 and stalls; its lease lapses; attempt 1 runs and applies
    stalled = outbox.claim(ctx.session_factory, item_id, 0, lease_s=0)
    assert stalled is not None
    assert run_outbox(ctx, item_id, 0)["status"] == "skipped"  # a duplicate of attempt 0
    assert run_outbox(ctx, item_id, 1)["status"] == "changed"
    assert run_outbox(ctx, item_id, 1)["status"] == "skipped"
    # the stalled attempt wakes up and finishes its work: nothing more happens
    with pytest.raises(outbox.Superseded):
        change_policy(
            session_factory=ctx.session_factory,
            profiles=ctx.profiles,
            blobs=ctx.blobs,
            name="prod",
            epsilon=4.0,
            delta=1e-5,
            reason=None,
            source="webhook:ops",
            version=int(time.time()),
            refuse_older=True,
            notify=False,
            item=(item_id, 1),
        )
    assert history(hooks).count("policy_changed") == 1


# ---- callbacks ----------------------------------------------------------------------


class Receiver(BaseHTTPRequestHandler):
    """A loopback callback endpoint: answers ``code`` (with ``location``) and records."""

    code = 204
    location = ""
    received: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(dict(self.headers))
        self.send_response(type(self).code)
        if type(self).location:
            self.send_header("Location", type(self).location)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def receiver(code: int = 204, location: str = "") -> tuple[HTTPServer, type[Receiver]]:
    handler = type("R", (Receiver,), {"code": code, "location": location, "received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


def wait_for_event(client: TestClient, kind: str, name: str = "prod") -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        dep = client.get(f"/v1/deployments/{name}").json()
        if any(e["kind"] == kind for e in dep["history"]):
            return dict(dep)
        time.sleep(0.05)
    pytest.fail(f"no {kind} event")


@pytest.fixture
def calls(tmp_path: Path) -> Iterator[TestClient]:
    """Callbacks run on background threads beside the requests: a database file, not
    the one shared test connection."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url=url)
    configured = Settings(
        data_dir=tmp_path,
        database_url=url,
        auto_migrate=False,
        callback_secret="callback-secret",
        callback_retry_delays_s=[0.05],
        callback_read_timeout_s=0.5,
    )
    app = create_app(configured)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        yield c


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://2130706433:9/hook",
        "http://0x7f000001:9/hook",
        "http://127.1.2.3:9/hook",
        "http://[::1]:9/hook",
        "http://169.254.169.254/latest/meta-data/?token=SECRET-TOKEN",
    ],
)
def test_callbacks_to_internal_addresses_are_refused_at_creation(
    calls: TestClient, url: str
) -> None:
    ds = calls.post("/v1/datasets", json={"name": "d"}).json()["id"]
    body = {"name": "x", "dataset_id": ds, "epsilon": 2.0, "delta": 1e-5, "callback_url": url}
    resp = calls.post("/v1/deployments", json=body)
    assert resp.status_code == 422, resp.text
    assert "SECRET-TOKEN" not in resp.text
    assert calls.get("/v1/deployments").json()["data"] == []


def test_a_name_resolving_to_loopback_at_delivery_is_not_called(
    calls: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, handler = receiver()
    port = server.server_port
    monkeypatch.setattr(callbacks, "system_resolver", lambda host, p: ["127.0.0.1"])
    try:
        seed(calls, callback_url=f"http://rebind.example.invalid:{port}/hook")
        dep = wait_for_event(calls, "callback_failed")
    finally:
        server.shutdown()
    assert handler.received == []
    failed = next(e for e in dep["history"] if e["kind"] == "callback_failed")
    assert failed["reason"] == "2 attempt(s): failed (no response)"  # no network detail


def test_an_allowed_target_is_called_at_the_address_checked(
    calls: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, handler = receiver()
    port = server.server_port
    lookups: list[str] = []

    def resolve(host: str, p: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(callbacks, "system_resolver", resolve)
    calls.app.state.ctx.settings.callback_allow = "127.0.0.0/8"
    try:
        seed(calls, callback_url=f"http://pinned.example.invalid:{port}/hook?token=abc")
        dep = wait_for_event(calls, "callback_ok")
    finally:
        server.shutdown()
    assert lookups == ["pinned.example.invalid"]
    assert handler.received[0]["Host"] == f"pinned.example.invalid:{port}"
    ok = next(e for e in dep["history"] if e["kind"] == "callback_ok")
    assert ok["reason"] == "1 attempt(s): delivered (HTTP 204)"


def test_redirects_are_never_followed(calls: TestClient) -> None:
    inner, inner_handler = receiver()
    outer, outer_handler = receiver(307, f"http://127.0.0.1:{inner.server_port}/internal")
    calls.app.state.ctx.settings.callback_allow = "127.0.0.0/8"
    try:
        seed(calls, callback_url=f"http://127.0.0.1:{outer.server_port}/hook")
        dep = wait_for_event(calls, "callback_failed")
    finally:
        inner.shutdown()
        outer.shutdown()
    assert len(outer_handler.received) == 2 and inner_handler.received == []
    assert "failed (HTTP 307)" in dep["last_error"]


def test_a_receiver_that_never_answers_holds_no_thread(calls: TestClient) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections, never answers
    ctx = calls.app.state.ctx
    ctx.settings.callback_allow = "127.0.0.0/8"
    ctx.settings.callback_retry_delays_s = [600.0]
    try:
        seed(calls, callback_url=f"http://127.0.0.1:{silent.getsockname()[1]}/hook")
        deadline = time.monotonic() + 30
        # the second attempt waits in the queue's schedule, not in a sleeping thread
        while ctx.jobs.pool.pending() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        silent.close()
    assert ctx.jobs.pool.pending() == 1
    with ctx.session_factory() as session:
        item = session.scalar(select(OutboxItem).where(OutboxItem.kind == "notify"))
    assert item is not None and item.attempts == 1 and item.status == "pending"
    assert item.result == {"status": "retrying", "outcome": "failed (no response)"}
    job = calls.get(f"/v1/jobs/{outbox.job_id(item.id)}").json()
    assert job["status"] == "scheduled"


def test_callback_secrets_are_never_shown(
    calls: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the name resolves to a private address at delivery: refused, nothing is sent
    monkeypatch.setattr(callbacks, "system_resolver", lambda host, p: ["10.9.9.9"])
    url = "https://svc:PASSWORD@hooks.example.invalid/services/PATH-TOKEN?token=QUERY-TOKEN"
    created = seed(calls, callback_url=url)
    wait_for_event(calls, "callback_failed")
    shown = [
        json.dumps(created),
        calls.get("/v1/deployments").text,
        calls.get("/v1/deployments/prod").text,
        calls.put("/v1/deployments/prod/policy", json={"epsilon": 3.0, "delta": 1e-5}).text,
    ]
    assert created["callback_url"] == "https://hooks.example.invalid/…"
    for text in shown:
        for secret in ("PASSWORD", "PATH-TOKEN", "QUERY-TOKEN", "svc"):
            assert secret not in text


def test_work_left_by_a_crashed_embedded_process_runs_at_its_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url=url)
    settings = Settings(
        data_dir=tmp_path, database_url=url, auto_migrate=False, webhook_secrets={"ops": SECRET}
    )
    app = create_app(settings)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        seed(c)
        ctx = app.state.ctx
        monkeypatch.setattr(ctx.jobs, "submit", _failing)
        accepted = webhook(c, {"deployment": "prod", "epsilon": 4.0, "delta": 1e-5}, "crash")
        item_id = accepted.json()["job"]["id"].removeprefix(outbox.JOB_PREFIX)
        # an attempt claims the item, and the process dies before it finishes
        assert outbox.claim(ctx.session_factory, item_id, 0, lease_s=3600) is not None
    restarted = create_app(settings)
    with TestClient(restarted) as again:
        authorize(again, restarted.state.ctx.session_factory)
        assert again.get("/v1/deployments/prod").json()["epsilon"] == 4.0
        assert history(again).count("policy_changed") == 1
