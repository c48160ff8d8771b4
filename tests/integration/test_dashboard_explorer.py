"""The dashboard's plan explorer computes through the plan jobs and plan processes: a
plan past the request's budget answers 202 with the job's link, then 200 from the
cache; a plan past its wall-clock budget answers the compute-limit problem, never 500;
the other pages answer at once meanwhile. Real processes, real plans, no mocks."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from tests.conftest import authorize
from tests.helpers import sgd
from tests.integration.test_browser_security import login
from tests.integration.test_plan_processes import LIMIT_TYPE, PROBLEM, app_with, dataset_of, pool_of

#: two small DP-SGD runs: the explorer's plans take a fraction of a second, the
#: frontier about a second (2-core test machine)
SMALL = [sgd(2.0, steps=20), sgd(3.0, steps=20)]

#: 24 runs of distinct noise: the explorer's plans and the frontier take well over the
#: 0.1 s job budget the limit tests set (each plan alone composes 24 distinct PLDs)
MANY = [sgd(1.0 + 0.1 * i, steps=200, q=0.02) for i in range(24)]
#: a job budget no workload on MANY meets
TIGHT_BUDGET_S = 0.1


def job_id(resp) -> str:  # type: ignore[no-untyped-def]
    return str(resp.headers["location"].rsplit("/", 1)[1])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_slow_explorer_plans_answer_202_then_200_and_repeats_hit_the_cache(
    settings: Settings, backend
) -> None:
    # no request waits for a plan: every one not cached becomes a job
    app = app_with(settings, backend, plan_request_budget_s=0.0)
    with TestClient(app) as client:
        key = authorize(client, backend.session_factory)
        dataset = dataset_of(client, SMALL)
        pool = pool_of(client)
        assert login(client, key).status_code == 303
        plans = f"/admin/datasets/{dataset}/plans.json?epsilon=0.15"
        frontier = f"/admin/datasets/{dataset}/frontier.svg"

        first = client.get(plans)
        assert first.status_code == 202, first.text[:300]
        assert first.headers["location"].startswith("/v1/jobs/plan-")
        assert float(first.headers["retry-after"]) > 0
        assert first.json()["jobs"][0]["kind"] == "plan"
        second = client.get(plans)
        assert second.status_code == 202
        assert job_id(second) == job_id(first)  # identical requests share one job
        assert app.state.ctx.plan_jobs.wait(job_id(first), 60)
        job = client.get(first.headers["location"]).json()  # the link works (API key)
        assert job["status"] == "finished", job
        assert job["result"]["rs_rdp"]["epsilon"] <= 0.15

        done = client.get(plans)
        assert done.status_code == 200, done.text[:300]
        body = done.json()
        assert body["epsilon"] == 0.15 and sorted(body["names"].values()) == ["m0", "m1"]
        for name in ("rs_rdp", "rs_pld", "lc_rdp", "lc_pld"):
            plan = body["plans"][name]
            assert 0 < plan["epsilon"] <= 0.15, (name, plan)
            assert abs(sum(plan["weights"].values()) - 1) < 1e-9
        assert body["plans"] == job["result"]

        pending = client.get(frontier)
        assert pending.status_code == 202, pending.text[:300]
        assert pending.headers["location"].startswith("/v1/jobs/plan-")
        assert app.state.ctx.plan_jobs.wait(job_id(pending), 120)
        svg = client.get(frontier)
        assert svg.status_code == 200, svg.text[:300]
        assert svg.headers["content-type"].startswith("image/svg+xml")
        assert "<svg" in svg.text and "input models" in svg.text

        # served from the cache by canonical key: with the finished jobs forgotten and
        # no plan process left to compute, the same requests still answer at once
        app.state.ctx.plan_jobs.clear()
        pool.close()
        again = client.get(plans)
        assert again.status_code == 200 and again.json() == body
        assert client.get(frontier).text == svg.text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_other_pages_answer_at_once_while_the_explorer_computes(
    settings: Settings, backend
) -> None:
    app = app_with(settings, backend, plan_request_budget_s=0.0)
    with TestClient(app) as client:
        key = authorize(client, backend.session_factory)
        dataset = dataset_of(client, MANY)
        pool_of(client)
        assert login(client, key).status_code == 303
        model = client.get(f"/v1/models?dataset_id={dataset}").json()["data"][0]["id"]
        pages = (
            "/admin",
            f"/admin/datasets/{dataset}",
            f"/admin/datasets/{dataset}/explorer",
            f"/admin/models/{model}",
            "/healthz",
        )
        for path in pages:  # first views compute each distinct mechanism's epsilon once
            assert client.get(path).status_code == 200
        started = client.get(f"/admin/datasets/{dataset}/plans.json?epsilon=8.0")
        assert started.status_code == 202, started.text[:300]
        drawing = client.get(f"/admin/datasets/{dataset}/frontier.svg")
        assert drawing.status_code == 202, drawing.text[:300]
        # both compute in plan processes (seconds); the pages and the API answer meanwhile:
        # each page has answered while the plan is still computing, so none waited for it
        for path in pages:
            resp = client.get(path)
            assert resp.status_code == 200, (path, resp.text[:300])
            assert not app.state.ctx.plan_jobs.wait(job_id(started), 0), path


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_explorer_past_its_budget_answers_the_limit_problem(settings: Settings, backend) -> None:
    app = app_with(settings, backend, plan_request_budget_s=0.0, plan_job_budget_s=TIGHT_BUDGET_S)
    with TestClient(app) as client:
        key = authorize(client, backend.session_factory)
        dataset = dataset_of(client, MANY)
        pool_of(client)
        assert login(client, key).status_code == 303
        plans = f"/admin/datasets/{dataset}/plans.json?epsilon=8.0"
        frontier = f"/admin/datasets/{dataset}/frontier.svg"
        for url in (plans, frontier):
            pending = client.get(url)
            assert pending.status_code == 202, pending.text[:300]
            assert app.state.ctx.plan_jobs.wait(job_id(pending), 60)
            failed = client.get(url)
            assert failed.status_code == 422, failed.text[:300]
            assert failed.headers["content-type"] == PROBLEM
            problem = failed.json()
            assert problem["type"] == LIMIT_TYPE
            assert problem["limit"] == "wall_clock" and problem["budget_s"] == TIGHT_BUDGET_S
            assert "RETARGET_PLAN_JOB_BUDGET_S" in problem["detail"]
            # a failure is not cached: asked again, it is computed again
            assert client.get(url).status_code == 202
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_explorer_in_the_request_past_its_budget_answers_the_limit_problem(
    settings: Settings, backend
) -> None:
    # the request waits for its plan (the default test settings): the limit answers it
    app = app_with(settings, backend, plan_job_budget_s=1.0)
    with TestClient(app) as client:
        key = authorize(client, backend.session_factory)
        dataset = dataset_of(client, MANY)
        pool_of(client)
        small = dataset_of(client, SMALL, name="small")
        assert login(client, key).status_code == 303
        resp = client.get(f"/admin/datasets/{dataset}/frontier.svg")
        assert resp.status_code == 422, resp.text[:300]
        assert resp.headers["content-type"] == PROBLEM
        assert resp.json()["type"] == LIMIT_TYPE
        # plans within their budget answer in the request, as ever
        resp = client.get(f"/admin/datasets/{small}/plans.json?epsilon=0.15")
        assert resp.status_code == 200, resp.text[:300]
        assert resp.json()["plans"]["lc_rdp"]["epsilon"] <= 0.15
