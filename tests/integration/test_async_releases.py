"""Releases above RETARGET_RELEASE_ASYNC_BYTES: 202 and a job, the budget reserved
at once (a pending ledger entry that counts against the cap), given back when the
merge fails."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from safetensors.torch import load

from service.api.app import create_app
from service.config import Settings
from service.releases import artifacts as release_artifacts
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, sgd, upload


@pytest.fixture
def async_client(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    settings = settings.model_copy(update={"release_async_bytes": 0})
    app = create_app(settings, session_factory=backend.session_factory)
    with TestClient(app) as c:
        authorize(c, backend.session_factory)
        yield c


def add(client: TestClient, ds: str, name: str, seed: int) -> str:
    meta = {"dataset_id": ds, "name": name, "mechanism": sgd(1.0)}
    resp = upload(client, checkpoint_bytes(seed), json.dumps(meta))
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def wait(client: TestClient, job_id: str) -> None:
    assert client.app.state.ctx.plan_jobs.wait(job_id, 300)  # type: ignore[attr-defined]


def test_a_large_release_answers_202_and_is_served_when_merged(async_client: TestClient) -> None:
    c = async_client
    ds = c.post("/v1/datasets", json={"name": "big"}).json()["id"]
    ids = [add(c, ds, f"m{i}", i) for i in range(2)]
    body = {"dataset_id": ds, "model_ids": ids, "epsilon": 3.0, "delta": 1e-5, "method": "lc"}
    resp = c.post("/v1/retarget", json=body)
    assert resp.status_code == 202, resp.text
    pending = resp.json()
    release_id = pending["release"]["release_id"]
    assert pending["release"]["status"] == "pending"
    assert resp.headers["location"] == f"/v1/releases/{release_id}"
    wait(c, pending["job_id"])
    release = c.get(f"/v1/releases/{release_id}").json()
    assert release["status"] == "done" and release["size_bytes"] > 0
    merged = load(c.get(release["download_url"]).content)
    assert set(merged) == {"linear.weight", "linear.bias"}
    again = c.post("/v1/retarget", json=body)
    assert again.status_code == 200 and again.json()["release_id"] == release_id
    ledger = c.get(f"/v1/datasets/{ds}/ledger").json()
    assert [r["release_id"] for r in ledger["releases"]] == [release_id]


def test_a_pending_release_counts_against_the_cap_and_a_failed_merge_gives_it_back(
    async_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = async_client
    probe = c.post("/v1/datasets", json={"name": "probe"}).json()["id"]
    single = c.get(f"/v1/models/{add(c, probe, 'p', 9)}/epsilon", params={"delta": 1e-5})
    eps = single.json()["epsilon"]
    # one model's release fits under the cap, the joint release of two does not
    cap = {"name": "capped", "epsilon_cap": eps * 1.1, "delta_cap": 1e-5}
    ds = c.post("/v1/datasets", json=cap).json()["id"]
    m0, m1 = add(c, ds, "m0", 0), add(c, ds, "m1", 1)

    gate = threading.Event()
    real_merge = release_artifacts.merge

    def failing_merge(*args: object, **kwargs: object) -> tuple[str, int]:
        gate.wait(300)
        raise OSError("the merge host went away")

    monkeypatch.setattr(release_artifacts, "merge", failing_merge)
    first = {"dataset_id": ds, "model_ids": [m0], "epsilon": eps * 1.1, "delta": 1e-5}
    resp = c.post("/v1/retarget", json={**first, "method": "lc"})
    assert resp.status_code == 202, resp.text
    release_id, job_id = resp.json()["release"]["release_id"], resp.json()["job_id"]
    # pending: counted by the ledger, not served, the same request does not merge again
    ledger = c.get(f"/v1/datasets/{ds}/ledger").json()
    assert [r["status"] for r in ledger["releases"]] == ["pending"]
    assert ledger["exposed_model_ids"] == [m0] and ledger["cumulative"]["epsilon"] > 0
    assert c.get(f"/v1/releases/{release_id}/weights").status_code == 409
    assert c.get(f"/v1/releases/{release_id}/archive").status_code == 409
    assert c.post("/v1/retarget", json={**first, "method": "lc"}).status_code == 202
    second = {**first, "model_ids": [m1], "method": "lc"}
    refused = c.post("/v1/retarget", json=second)
    assert refused.status_code == 409, refused.text  # the pending budget counts
    # the merge fails: the release is gone and its budget given back
    gate.set()
    wait(c, job_id)
    assert c.get(f"/v1/releases/{release_id}").status_code == 404
    ledger = c.get(f"/v1/datasets/{ds}/ledger").json()
    assert ledger["releases"] == [] and ledger["exposed_model_ids"] == []
    monkeypatch.setattr(release_artifacts, "merge", real_merge)
    resp = c.post("/v1/retarget", json=second)
    assert resp.status_code == 202, resp.text
    wait(c, resp.json()["job_id"])
    assert c.get(f"/v1/datasets/{ds}/ledger").json()["exposed_model_ids"] == [m1]
