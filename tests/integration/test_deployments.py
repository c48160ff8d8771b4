"""Deployments, policy changes, signed webhooks and callbacks."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from service.deployments.signing import sign, verify
from service.registry.migrate import upgrade
from service.releases.revisions import commit_of
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, sgd, upload

SECRET = "webhook-secret-for-tests"


def seed(client: TestClient) -> str:
    ds = client.post("/v1/datasets", json={"name": "digits"}).json()["id"]
    for i, s in enumerate((0.8, 1.5, 3.0)):
        meta = {
            "dataset_id": ds,
            "name": f"m{i}",
            "mechanism": sgd(s),
            "lineage": {"run_id": f"r{i}", "step": 400},
        }
        assert upload(client, checkpoint_bytes(i), json.dumps(meta)).status_code == 201
    return str(ds)


@pytest.fixture
def app_client(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    configured = settings.model_copy(update={"webhook_secrets": {"ops": SECRET}})
    with TestClient(create_app(configured, session_factory=backend.session_factory)) as c:
        authorize(c, backend.session_factory)
        yield c


def deploy(client: TestClient, ds: str, **extra) -> dict:
    body = {
        "name": "prod",
        "dataset_id": ds,
        "epsilon": 1.0,
        "delta": 1e-5,
        "method": "lc",
        "accountant": "rdp",
        **extra,
    }
    resp = client.post("/v1/deployments", json=body)
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def model_sha(client: TestClient, name: str) -> tuple[int, str, bytes]:
    resp = client.get(f"/v1/deployments/{name}/model")
    return resp.status_code, resp.headers.get("etag", ""), resp.content


def test_deployment_serves_its_release_and_polls_cheaply(app_client: TestClient) -> None:
    ds = seed(app_client)
    dep = deploy(app_client, ds)
    release = app_client.get(f"/v1/releases/{dep['current_release_id']}").json()
    status, etag, body = model_sha(app_client, "prod")
    assert status == 200 and hashlib.sha256(body).hexdigest() == release["sha256"]
    again = app_client.get("/v1/deployments/prod/model", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert [e["kind"] for e in dep["history"]] == ["created"]
    assert (
        app_client.post(
            "/v1/deployments",
            json={"name": "prod", "dataset_id": ds, "epsilon": 1.0, "delta": 1e-5},
        ).status_code
        == 409
    )


def test_policy_change_releases_and_keeps_history(app_client: TestClient) -> None:
    ds = seed(app_client)
    first = deploy(app_client, ds)
    _, etag_before, _ = model_sha(app_client, "prod")
    changed = app_client.put(
        "/v1/deployments/prod/policy",
        json={"epsilon": 3.0, "delta": 1e-5, "reason": "looser policy"},
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["epsilon"] == 3.0 and body["current_release_id"] != first["current_release_id"]
    assert [e["kind"] for e in body["history"]] == ["policy_changed", "created"]
    _, etag_after, _ = model_sha(app_client, "prod")
    assert etag_after != etag_before
    assert (
        app_client.get(
            "/v1/deployments/prod/model", headers={"If-None-Match": etag_before}
        ).status_code
        == 200
    )


def test_an_infeasible_policy_keeps_the_previous_model(app_client: TestClient) -> None:
    ds = seed(app_client)
    first = deploy(app_client, ds)
    _, etag, _ = model_sha(app_client, "prod")
    refused = app_client.put("/v1/deployments/prod/policy", json={"epsilon": 0.01, "delta": 1e-5})
    assert refused.status_code == 422
    assert refused.json()["type"] == "urn:retarget:problem:infeasible-target"
    dep = app_client.get("/v1/deployments/prod").json()
    assert dep["current_release_id"] == first["current_release_id"] and dep["epsilon"] == 1.0
    assert dep["history"][0]["kind"] == "policy_failed"
    assert "smallest epsilon" in dep["history"][0]["reason"] and dep["last_error"]
    assert model_sha(app_client, "prod")[1] == etag


def _webhook(
    client: TestClient,
    body: dict,
    delivery: str,
    *,
    secret: str = SECRET,
    source: str = "ops",
    timestamp: int | None = None,
):
    raw = json.dumps(body).encode()
    headers = {
        "X-Retarget-Signature": sign(secret, delivery, raw, timestamp),
        "X-Retarget-Delivery": delivery,
        "X-Retarget-Source": source,
        "Content-Type": "application/json",
    }
    return client.post("/v1/webhooks/policy-change", content=raw, headers=headers)


def test_a_signed_webhook_changes_the_policy_once(app_client: TestClient) -> None:
    ds = seed(app_client)
    first = deploy(app_client, ds)
    anonymous = app_client.headers.pop("Authorization")  # webhooks carry signatures, not keys
    change = {"deployment": "prod", "epsilon": 2.5, "delta": 1e-5, "reason": "policy v2"}
    resp = _webhook(app_client, change, "delivery-1")
    assert resp.status_code == 202, resp.text
    assert resp.json()["job"]["status"] == "finished"
    app_client.headers["Authorization"] = anonymous
    dep = app_client.get("/v1/deployments/prod").json()
    assert dep["epsilon"] == 2.5 and dep["current_release_id"] != first["current_release_id"]
    assert dep["history"][0]["source"] == "webhook:ops"
    replay = _webhook(app_client, change, "delivery-1")
    assert replay.status_code == 202 and replay.json() == resp.json()
    assert replay.headers["x-retarget-replay"] == "true"
    assert len(app_client.get("/v1/deployments/prod").json()["history"]) == 2


@pytest.mark.parametrize(
    "tamper",
    ["wrong-secret", "stale", "unknown-source", "body-swapped"],
)
def test_bad_webhooks_are_refused_and_change_nothing(app_client: TestClient, tamper: str) -> None:
    ds = seed(app_client)
    first = deploy(app_client, ds)
    change = {"deployment": "prod", "epsilon": 2.5, "delta": 1e-5}
    if tamper == "wrong-secret":
        resp = _webhook(app_client, change, "d1", secret="guess")
    elif tamper == "stale":
        resp = _webhook(app_client, change, "d1", timestamp=int(time.time()) - 600)
    elif tamper == "unknown-source":
        resp = _webhook(app_client, change, "d1", source="intruder")
    else:
        raw = json.dumps(change).encode()
        forged = json.dumps({**change, "epsilon": 9.0}).encode()
        resp = app_client.post(
            "/v1/webhooks/policy-change",
            content=forged,
            headers={
                "X-Retarget-Signature": sign(SECRET, "d1", raw),
                "X-Retarget-Delivery": "d1",
                "X-Retarget-Source": "ops",
                "Content-Type": "application/json",
            },
        )
    assert resp.status_code == 401
    assert resp.headers["content-type"].startswith("application/problem+json")
    dep = app_client.get("/v1/deployments/prod").json()
    assert dep["current_release_id"] == first["current_release_id"] and len(dep["history"]) == 1


class Receiver(BaseHTTPRequestHandler):
    """A callback endpoint on loopback: fails the first `failures` calls."""

    failures = 1
    received: ClassVar[list[tuple[bytes, dict]]] = []

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.received.append((raw, dict(self.headers)))
        code = 500 if len(Receiver.received) <= Receiver.failures else 204
        self.send_response(code)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sqlite_client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url=url)
    settings = Settings(
        data_dir=tmp_path,
        database_url=url,
        auto_migrate=False,
        callback_secret="callback-secret",
        callback_retry_delays_s=[0.05, 0.05],
        callback_allow="127.0.0.0/8",
    )
    app = create_app(settings)
    with TestClient(app) as c:
        authorize(c, app.state.ctx.session_factory)
        yield c


def _wait_for(client: TestClient, kind: str, field: str | None = None) -> dict:
    """The deployment once its history has a `kind` event (and `field` is set, when named:
    the event and the field are written in one transaction, but a slow CI reads between
    requests)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        dep = client.get("/v1/deployments/prod").json()
        if any(e["kind"] == kind for e in dep["history"]) and (field is None or dep[field]):
            return dict(dep)
        time.sleep(0.05)
    pytest.fail(f"no {kind} event")


def test_callback_is_signed_and_retried_until_it_lands(sqlite_client: TestClient) -> None:
    Receiver.received, Receiver.failures = [], 1
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ds = seed(sqlite_client)
        deploy(sqlite_client, ds, callback_url=f"http://127.0.0.1:{server.server_port}/hook")
        dep = _wait_for(sqlite_client, "callback_ok")
    finally:
        server.shutdown()
    assert len(Receiver.received) == 2
    raw, headers = Receiver.received[-1]
    delivery = headers["X-Retarget-Delivery"]
    assert verify("callback-secret", delivery, raw, headers["X-Retarget-Signature"], 300) == ""
    sent = json.loads(raw)
    assert sent["release_id"] == sent["revision"] == dep["current_release_id"]
    assert sent["commit"] == commit_of(dep["current_release_id"])  # what /hf pins it by


def test_a_callback_that_never_lands_is_visible(sqlite_client: TestClient) -> None:
    ds = seed(sqlite_client)
    deploy(sqlite_client, ds, callback_url="http://127.0.0.1:9/unreachable")
    dep = _wait_for(sqlite_client, "callback_failed", "last_error")
    assert "callback failed after 3 attempts" in dep["last_error"]


def test_a_callback_needs_a_signing_secret(app_client: TestClient) -> None:
    ds = seed(app_client)
    resp = app_client.post(
        "/v1/deployments",
        json={
            "name": "x",
            "dataset_id": ds,
            "epsilon": 1.0,
            "delta": 1e-5,
            "callback_url": "http://127.0.0.1:9/",
        },
    )
    assert resp.status_code == 422 and "RETARGET_CALLBACK_SECRET" in resp.json()["detail"]
    assert app_client.get("/v1/deployments").json()["data"] == []


def test_unknown_deployments_are_404(app_client: TestClient) -> None:
    resp = app_client.put("/v1/deployments/nope/policy", json={"epsilon": 1.0, "delta": 1e-5})
    assert resp.status_code == 404
    assert app_client.get("/v1/deployments/nope/model").status_code == 404
