"""Plans computed in plan processes: a plan past its wall-clock budget or its memory
limit fails with the reason, its process is gone and replaced, and the service goes on;
shutting the app down ends the processes. Real processes, real plans, no mocks."""

from __future__ import annotations

import json
import os
import time

import pytest
from fastapi.testclient import TestClient

from service.accounting.mechanisms import parse_mechanism
from service.api.app import create_app
from service.config import Settings
from service.plans.planner import lc_released
from service.plans.pool import PlanPool
from tests.conftest import authorize
from tests.helpers import checkpoint_bytes, sgd, upload

PROBLEM = "application/problem+json"
LIMIT_TYPE = "urn:retarget:problem:compute-limit-exceeded"

#: an LC plan over 96 runs of two mechanisms: seconds of accounting in its plan process
#: (2.5 s on the 2-core test machine; it grows with the runs: the joint release composes
#: one PLD per run), from two distinct profiles computed before the plan
LC_MECHANISMS = [sgd(2.0, steps=20), sgd(3.0, steps=20)]
LC_RUNS = 96
#: a job budget the LC plan above runs far past
TIGHT_BUDGET_S = 0.25

#: one Gaussian query at noise multiplier 0.5: its PLD has ~400k points, and an RS plan
#: over it tabulates both hockey-stick curves from them (far more than 16 MiB)
BIG_GAUSSIAN = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 0.5}


def gone(pid: int, wait_s: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (polled for at most ``wait_s``)."""
    end = time.monotonic() + wait_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def eventually(check, wait_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``check()`` holds within ``wait_s`` (a replacement starts in the background)."""
    end = time.monotonic() + wait_s
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def app_with(settings: Settings, backend, **extra: object):  # type: ignore[no-untyped-def]
    return create_app(settings.model_copy(update=extra), session_factory=backend.session_factory)


def dataset_of(client: TestClient, mechanisms: list[dict], name: str = "d") -> str:
    """A dataset with one model per mechanism (independent runs), profiles computed."""
    dataset = client.post("/v1/datasets", json={"name": name}).json()["id"]
    for i, mechanism in enumerate(mechanisms):
        meta = {"dataset_id": dataset, "name": f"m{i}", "mechanism": mechanism}
        resp = upload(client, checkpoint_bytes(seed=i), json.dumps(meta))
        assert resp.status_code == 201, resp.text[:300]
    profiles = client.app.state.ctx.profiles  # type: ignore[attr-defined]
    for mechanism in {json.dumps(m, sort_keys=True) for m in mechanisms}:
        parsed = parse_mechanism(json.loads(mechanism))
        profiles.profile(parsed)  # computed here, so the plan's budget goes to the plan
        released = lc_released(parsed)
        if released is not None:
            profiles.profile(released)
    return dataset


def pool_of(client: TestClient) -> PlanPool:
    pool: PlanPool = client.app.state.ctx.plan_jobs.pool  # type: ignore[attr-defined]
    pool.start()  # every process running before the plan's clock starts
    return pool


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_plan_job_past_its_budget_is_killed_and_the_next_plan_succeeds(
    settings: Settings, backend
) -> None:
    app = app_with(settings, backend, plan_request_budget_s=0.05, plan_job_budget_s=TIGHT_BUDGET_S)
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        dataset = dataset_of(client, LC_MECHANISMS * (LC_RUNS // 2))
        pool = pool_of(client)
        before = set(pool.pids())
        assert len(before) == pool.size
        body = {"dataset_id": dataset, "epsilon": 8.0, "delta": 1e-5, "method": "lc"}
        resp = client.post("/v1/plans", json=body)
        assert resp.status_code == 202, resp.text[:300]
        job_id = resp.headers["location"].rsplit("/", 1)[1]
        assert app.state.ctx.plan_jobs.wait(job_id, 120)
        job = client.get(resp.headers["location"]).json()
        assert job["status"] == "failed"
        assert "wall-clock budget of 0.25 s" in job["error"] and "stopped" in job["error"]
        assert job["result"]["problem"] == "ComputeLimitExceeded"
        assert job["result"]["limit"] == "wall_clock"
        killed = before - set(pool.pids())
        assert len(killed) == 1  # the one computing the plan, not the others
        assert gone(killed.pop())
        assert all(not gone(pid, 0) for pid in before & set(pool.pids()))
        # replaced, and the next plan (RS over the same models, given room) is answered
        app.state.ctx.plan_jobs.budget_s = 60.0
        rs = client.post("/v1/plans", json={**body, "method": "rs"})
        assert rs.status_code == 202, rs.text[:300]  # past the 0.05 s a request waits
        assert app.state.ctx.plan_jobs.wait(rs.headers["location"].rsplit("/", 1)[1], 120)
        done = client.get(rs.headers["location"]).json()
        assert done["status"] == "finished", done
        assert done["result"]["method"] == "rs" and done["result"]["epsilon"] <= 8.0
        assert eventually(lambda: len(pool.pids()) == pool.size)
        # the failure was not cached: the same request computes (and fails) again
        again = client.post("/v1/plans", json=body)
        assert again.status_code in (202, 422)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_plan_in_the_request_past_its_budget_answers_the_limit_problem(
    settings: Settings, backend
) -> None:
    # the request waits for its plan
    app = app_with(settings, backend, plan_job_budget_s=TIGHT_BUDGET_S)
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        dataset = dataset_of(client, LC_MECHANISMS * (LC_RUNS // 2))
        pool = pool_of(client)
        body = {"dataset_id": dataset, "epsilon": 8.0, "delta": 1e-5, "method": "lc"}
        resp = client.post("/v1/plans", json=body)
        assert resp.status_code == 422, resp.text[:300]
        assert resp.headers["content-type"] == PROBLEM
        problem = resp.json()
        assert problem["type"] == LIMIT_TYPE
        assert problem["limit"] == "wall_clock" and problem["budget_s"] == TIGHT_BUDGET_S
        assert "RETARGET_PLAN_JOB_BUDGET_S" in problem["detail"]
        # a release recomputes the plan under the dataset's lock: bounded alike
        resp = client.post("/v1/retarget", json=body)
        assert resp.status_code == 422 and resp.json()["type"] == LIMIT_TYPE
        assert client.get(f"/v1/datasets/{dataset}/ledger").json()["releases"] == []
        assert client.get("/healthz").status_code == 200
        assert eventually(lambda: len(pool.pids()) == pool.size)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_plan_past_its_memory_limit_fails_clearly_and_the_service_goes_on(
    settings: Settings, backend
) -> None:
    app = app_with(settings, backend, plan_job_memory_bytes=16 * 2**20)
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        # the profile is computed in the profile processes (from the model's registration
        # on), under the same memory limit
        pool = client.app.state.ctx.profiles.pool  # type: ignore[attr-defined]
        pool.start()
        before = set(pool.pids())
        big = dataset_of(client, [BIG_GAUSSIAN], name="big")
        small = dataset_of(client, [sgd(3.0, steps=20)], name="small")
        body = {"dataset_id": big, "epsilon": 12.0, "delta": 1e-5, "method": "rs"}
        resp = client.post("/v1/plans", json=body)
        assert resp.status_code == 422, resp.text[:300]
        assert resp.headers["content-type"] == PROBLEM
        problem = resp.json()
        assert problem["type"] == LIMIT_TYPE
        assert problem["limit"] == "memory" and problem["memory_bytes"] == 16 * 2**20
        assert "RETARGET_PLAN_JOB_MEMORY_BYTES" in problem["detail"]
        ended = before - set(pool.pids())
        assert len(ended) == 1 and gone(ended.pop())
        assert client.get("/healthz").status_code == 200
        ok = client.post("/v1/plans", json={**body, "dataset_id": small})
        assert ok.status_code == 200, ok.text[:300]
        assert ok.json()["epsilon"] <= 12.0
        guarantee = client.post(
            "/v1/plans/guarantee",
            json={
                "dataset_id": small,
                "delta": 1e-5,
                "method": "rs",
                "weights": ok.json()["weights"],
            },
        )
        assert guarantee.status_code == 200, guarantee.text[:300]
        assert guarantee.json()["epsilon"] <= 12.0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_shutdown_ends_the_plan_processes_and_fails_the_plan_in_flight(
    settings: Settings, backend
) -> None:
    app = app_with(settings, backend, plan_request_budget_s=0.05)
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        dataset = dataset_of(client, LC_MECHANISMS * (LC_RUNS // 2))
        pids = pool_of(client).pids()
        assert pids and not any(gone(pid, 0) for pid in pids)
        body = {"dataset_id": dataset, "epsilon": 8.0, "delta": 1e-5, "method": "lc"}
        resp = client.post("/v1/plans", json=body)
        assert resp.status_code == 202, resp.text[:300]
        job_id = resp.headers["location"].rsplit("/", 1)[1]
    # the lifespan's end (what SIGTERM leads to) ended every plan process
    assert all(gone(pid) for pid in pids)
    assert app.state.ctx.plan_jobs.wait(job_id, 30)  # the plan in flight fails, promptly
    job = app.state.ctx.plan_jobs.get(job_id)
    assert job.status == "failed" and "stopping" in (job.error or "")
    assert app.state.ctx.plan_jobs.pool.pids() == []
