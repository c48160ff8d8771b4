"""Deployments that follow an alias: a release of one model, charged as one; an alias
move re-targets them through the policy-change path, refused moves recorded."""

from __future__ import annotations

import itertools
import json
import shutil
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib
from fastapi.testclient import TestClient
from safetensors.torch import load
from sqlalchemy import select

from service.api.app import create_app
from service.config import Settings
from service.deployments import outbox
from service.errors import StorageError
from service.registry.models import OutboxItem
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, sgd, upload

DELTA = 1e-5
#: each version of "sigma": its noise multiplier (q = 0.01, 400 steps)
SIGMAS = {1: 1.0, 2: 2.0, 3: 0.8}


@pytest.fixture
def api(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    with TestClient(create_app(settings, session_factory=backend.session_factory)) as c:
        authorize(c, backend.session_factory)
        yield c


def _seed(client: TestClient, **dataset: object) -> dict[int, dict]:
    assert client.post("/v1/datasets", json={"name": "digits", **dataset}).status_code == 201
    models = {}
    for version, sigma in SIGMAS.items():
        meta = {
            "dataset_id": "digits",
            "name": "sigma",
            "version": version,
            "mechanism": sgd(sigma),
        }
        resp = upload(client, checkpoint_bytes(version), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        models[version] = resp.json()
    return models


def _alias(client: TestClient, version: int) -> dict:
    resp = client.put(
        "/v1/datasets/digits/models/sigma/aliases/champion", json={"version": version}
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def _follow(client: TestClient, **extra: object):
    body = {
        "name": "prod",
        "dataset_id": "digits",
        "follows": "sigma@champion",
        "epsilon": 1.5,
        "delta": DELTA,
        **extra,
    }
    return client.post("/v1/deployments", json=body)


def _release(client: TestClient, dep: dict) -> dict:
    return dict(client.get(f"/v1/releases/{dep['current_release_id']}").json())


def _pld_bracket(sigma: float) -> tuple[float, float]:
    """dp_accounting's optimistic and pessimistic PLD epsilons of one model (q 0.01, 400
    steps): an independent floor and ceiling for its own guarantee."""

    def eps(pessimistic: bool) -> float:
        pld = pldlib.from_gaussian_mechanism(
            standard_deviation=sigma,
            sampling_prob=0.01,
            value_discretization_interval=1e-4,
            pessimistic_estimate=pessimistic,
        ).self_compose(400)
        return float(pld.get_epsilon_for_delta(DELTA))

    return eps(False), eps(True)


def test_a_following_deployment_is_a_release_of_that_model_charged_as_one(
    api: TestClient,
) -> None:
    models = _seed(api)
    _alias(api, 1)
    resp = _follow(api)
    assert resp.status_code == 201, resp.text
    dep = resp.json()
    assert dep["follows"] == "digits/sigma@champion" and dep["method"] == "rs"
    release = _release(api, dep)
    assert release["weights"] == [
        {"model_id": models[1]["id"], "model_name": "sigma", "weight": 1.0}
    ]
    assert release["exposed_model_ids"] == [models[1]["id"]]
    floor, ceiling = _pld_bracket(SIGMAS[1])
    own = api.get(f"/v1/models/{models[1]['id']}/epsilon", params={"delta": DELTA}).json()
    # never less than the model's own guarantee, nor than an independent floor
    assert release["epsilon"] >= own["epsilon"] * (1 - 1e-9) >= floor
    assert release["epsilon"] <= ceiling * 1.001
    ledger = api.get("/v1/datasets/digits/ledger").json()
    assert ledger["exposed_model_ids"] == [models[1]["id"]]
    assert ledger["cumulative"]["epsilon"] >= floor
    served = load(api.get("/v1/deployments/prod/model").content)
    original = load(checkpoint_bytes(1))
    assert served.keys() == original.keys()
    assert all(bool((served[k] == original[k]).all()) for k in original)


def test_moving_the_alias_retargets_and_a_refused_move_is_recorded(api: TestClient) -> None:
    models = _seed(api)
    _alias(api, 1)
    first = _follow(api).json()
    moved = _alias(api, 2)
    assert [r["deployment"] for r in moved["retargets"]] == ["prod"]
    job = api.get(f"/v1/jobs/{moved['retargets'][0]['job_id']}").json()
    assert job["status"] == "finished" and job["result"]["status"] == "changed", job
    dep = api.get("/v1/deployments/prod").json()
    assert (dep["epsilon"], dep["policy_version"]) == (1.5, first["policy_version"])
    assert _release(api, dep)["weights"] == [
        {"model_id": models[2]["id"], "model_name": "sigma", "weight": 1.0}
    ]
    event = dep["history"][0]
    assert event["kind"] == "policy_changed" and event["source"] == "alias"
    assert "moved to version 2 (from version 1)" in event["reason"]
    ledger = api.get("/v1/datasets/digits/ledger").json()
    assert set(ledger["exposed_model_ids"]) == {models[1]["id"], models[2]["id"]}

    # version 3's own epsilon (about 2.2) is over the policy (1.5): never served
    refused = _alias(api, 3)
    job = api.get(f"/v1/jobs/{refused['retargets'][0]['job_id']}").json()
    assert job["result"]["status"] == "refused"
    after = api.get("/v1/deployments/prod").json()
    assert after["current_release_id"] == dep["current_release_id"]
    assert after["history"][0]["kind"] == "policy_failed" and after["last_error"]
    assert models[3]["id"] not in api.get("/v1/datasets/digits/ledger").json()["exposed_model_ids"]
    got = api.get("/v1/datasets/digits/models/sigma@champion").json()
    assert got["id"] == models[3]["id"]  # the alias itself moved
    # a looser policy serves what the alias names now
    looser = api.put("/v1/deployments/prod/policy", json={"epsilon": 3.0, "delta": DELTA})
    assert looser.status_code == 200, looser.text
    assert _release(api, looser.json())["weights"][0]["model_id"] == models[3]["id"]
    blocked = api.delete("/v1/datasets/digits/models/sigma/aliases/champion")
    assert blocked.status_code == 409 and blocked.json()["deployments"] == ["prod"]


def test_an_alias_move_over_the_cap_leaves_the_deployment_where_it_is(api: TestClient) -> None:
    # version 1 alone (about 1.204) fits the cap; with version 2 (about 0.385, charged
    # first) the joint release is about 1.265: over it
    models = _seed(api, epsilon_cap=1.235)
    _alias(api, 2)
    dep = _follow(api).json()
    job = _alias(api, 1)["retargets"][0]["job_id"]
    assert api.get(f"/v1/jobs/{job}").json()["result"]["status"] == "refused"
    after = api.get("/v1/deployments/prod").json()
    assert after["current_release_id"] == dep["current_release_id"]
    assert after["history"][0]["kind"] == "policy_failed"
    assert "cap" in after["last_error"]
    ledger = api.get("/v1/datasets/digits/ledger").json()
    assert ledger["exposed_model_ids"] == [models[2]["id"]]
    assert ledger["cumulative"]["epsilon"] <= 1.235


def test_following_is_refused_where_it_cannot_hold(api: TestClient, backend: Backend) -> None:
    _seed(api)
    _alias(api, 3)  # about 2.2 at delta 1e-5
    infeasible = _follow(api)
    assert infeasible.status_code == 422, infeasible.text
    assert infeasible.json()["type"] == "urn:retarget:problem:infeasible-target"
    assert infeasible.json()["min_epsilon"] > 1.5
    assert api.get("/v1/deployments").json()["count"] == 0
    assert api.get("/v1/datasets/digits/ledger").json()["exposed_model_ids"] == []
    for follows in ("sigma@3", "sigma", "sigma@latest"):
        assert _follow(api, follows=follows, epsilon=9.0).status_code == 422
    assert _follow(api, method="lc", epsilon=9.0).status_code == 422
    missing = _follow(api, follows="sigma@champ", epsilon=9.0)
    assert missing.status_code == 404 and missing.json()["suggestions"] == ["digits/sigma@champion"]
    api.post("/v1/datasets", json={"name": "other"})
    foreign = _follow(api, dataset_id="other", follows="digits/sigma@champion", epsilon=9.0)
    assert foreign.status_code == 422
    assert api.get("/v1/deployments").json()["count"] == 0


def test_create_deployment_with_exist_ok(api: TestClient) -> None:
    _seed(api)
    _alias(api, 1)
    body = {"name": "prod", "follows": "digits/sigma@champion", "epsilon": 1.5, "delta": DELTA}
    first = api.post("/v1/deployments", json=body)
    assert first.status_code == 201, first.text
    api.put("/v1/deployments/prod/policy", json={"epsilon": 2.0, "delta": DELTA})
    again = api.post("/v1/deployments", params={"exist_ok": "true"}, json=body)
    assert again.status_code == 200 and again.json()["epsilon"] == 2.0  # as it is now
    assert len(again.json()["history"]) == 2  # nothing new released
    assert api.post("/v1/deployments", json=body).status_code == 409
    plain = {"name": "prod", "dataset_id": "digits", "method": "rs", "epsilon": 1.5, "delta": DELTA}
    other = api.post("/v1/deployments", params={"exist_ok": "true"}, json=plain)
    assert other.status_code == 409 and "follows_name" in other.json()["detail"]
    typo = api.get("/v1/deployments/prd")
    assert typo.status_code == 404 and typo.json()["suggestions"] == ["prod"]


def _failing(*args: Any, **kwargs: Any) -> Any:
    raise StorageError("the job queue (Redis) is unreachable: connection refused")


def _make_due(ctx: Any) -> None:
    with ctx.session_factory() as session:
        for item in session.scalars(select(OutboxItem).where(OutboxItem.status == "pending")):
            item.next_attempt_at = datetime.now(UTC) - timedelta(seconds=1)
        session.commit()


def test_a_retarget_held_by_a_queue_outage_runs_later_and_never_rolls_a_policy_back(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = _seed(api)
    _alias(api, 1)
    _follow(api)
    ctx = api.app.state.ctx  # type: ignore[attr-defined]
    submit = ctx.jobs.submit
    monkeypatch.setattr(ctx.jobs, "submit", _failing)
    moved = _alias(api, 2)  # the move and its re-target are stored together
    job_id = moved["retargets"][0]["job_id"]
    assert api.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    dep = api.get("/v1/deployments/prod").json()
    assert _release(api, dep)["weights"][0]["model_id"] == models[1]["id"]
    monkeypatch.setattr(ctx.jobs, "submit", submit)
    # meanwhile an operator sets a new policy: it serves what the alias names now
    newer = api.put("/v1/deployments/prod/policy", json={"epsilon": 3.0, "delta": DELTA})
    assert _release(api, newer.json())["weights"][0]["model_id"] == models[2]["id"]
    _make_due(ctx)
    outbox.drain(session_factory=ctx.session_factory, jobs=ctx.jobs, lease_s=60)
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "finished" and job["result"]["status"] == "changed"
    after = api.get("/v1/deployments/prod").json()
    assert (after["epsilon"], after["policy_version"]) == (3.0, newer.json()["policy_version"])
    assert _release(api, after)["weights"][0]["model_id"] == models[2]["id"]


@pytest.fixture(params=["sqlite", "postgres"])
def committed_api(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> Iterator[TestClient]:
    """An app on a database with real commits: concurrent requests see each other."""
    if request.param == "sqlite":
        shutil.copy(sqlite_template, tmp_path / "moves.db")
        url = f"sqlite:///{tmp_path / 'moves.db'}"
    else:
        url = request.getfixturevalue("committed_db")
    settings = Settings(
        data_dir=tmp_path / "data", database_url=url, auto_migrate=False, plan_request_budget_s=600
    )
    app = create_app(settings)
    with TestClient(app) as client:
        authorize(client, app.state.ctx.session_factory)
        yield client


def test_concurrent_moves_keep_one_history(committed_api: TestClient) -> None:
    api = committed_api
    _seed(api)
    _alias(api, 1)
    errors: list[str] = []

    def move(version: int) -> None:
        resp = api.put(
            "/v1/datasets/digits/models/sigma/aliases/champion", json={"version": version}
        )
        if resp.status_code != 200:
            errors.append(resp.text)

    threads = [threading.Thread(target=move, args=(1 + i % 3,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    shown = api.get("/v1/datasets/digits/models/sigma/aliases").json()
    events = list(reversed(shown["history"]))  # oldest first
    assert events[0]["previous_version"] is None and len(events) >= 2
    for before, after in itertools.pairwise(events):
        assert after["previous_version"] == before["version"] != after["version"]
    assert shown["aliases"][0]["version"] == events[-1]["version"]
