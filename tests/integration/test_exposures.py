"""Private models seen outside a release: raw downloads and plans scored by the models.

Each test performs the attack of the security review (issue 18) and checks it is
refused or charged to the ledger (Postgres and SQLite)."""

from __future__ import annotations

import json
import re
import threading

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save
from sqlalchemy import func, select

from service.accounting.lc import accountant as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile
from service.api.app import create_app
from service.api.routes import plans as plan_routes
from service.config import Settings
from service.dashboard.auth import COOKIE
from service.registry.keys import create_key
from service.registry.models import Exposure
from tests.conftest import Backend, authorize
from tests.helpers import sgd, upload

LOGREG = {
    "input_shape": [8],
    "layers": [{"op": "linear", "weight": "fc.weight", "bias": "fc.bias"}],
}
SIGMAS = (0.9, 1.6, 3.0)


def weights(seed: int) -> bytes:
    gen = torch.Generator().manual_seed(seed)
    return save({"fc.weight": torch.randn(3, 8, generator=gen), "fc.bias": torch.zeros(3)})


def headers(backend: Backend, *scopes: str) -> dict[str, str]:
    with backend.session_factory() as session:
        _, key = create_key(session=session, name="+".join(scopes), scopes=list(scopes))
        session.commit()
    return {"Authorization": f"Bearer {key}"}


def joint(sigmas: list[float], delta: float = 1e-5) -> float:
    """The joint release of independent runs (Theorem 6.1), computed here from scratch."""
    profiles = [compute_profile(parse_mechanism(sgd(s))) for s in sigmas]
    return min(lc.joint_epsilon(profiles, delta, acc) for acc in ("rdp", "pld"))


def make_registry(client: TestClient, name: str = "private", **dataset: object) -> dict:
    ds = client.post("/v1/datasets", json={"name": name, **dataset}).json()["id"]
    ids = []
    for i, sigma in enumerate(SIGMAS):
        meta = {
            "dataset_id": ds,
            "name": f"m{i}",
            "mechanism": sgd(sigma),
            "architecture": LOGREG,
            # accuracy read from the model (declared nothing: 'models'); proxy_accuracy
            # from a public proxy run, fixed without these models ('prior')
            "metrics": {"accuracy": 0.9 - 0.1 * i, "proxy_accuracy": 0.8},
            "metric_declarations": {"proxy_accuracy": {"source": "prior"}},
            "lineage": {"run_id": f"r{i}", "step": 400},
        }
        resp = upload(client, weights(i), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    return {"dataset": ds, "ids": ids}


@pytest.fixture
def registry(client: TestClient) -> dict:
    return make_registry(client)


def exposures(backend: Backend) -> list[Exposure]:
    with backend.session_factory() as session:
        return list(session.scalars(select(Exposure).order_by(Exposure.first_at)))


def ledger(client: TestClient, ds: str) -> dict:
    resp = client.get(f"/v1/datasets/{ds}/ledger")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


# ---- raw model weights ---------------------------------------------------------------


def test_a_read_key_gets_403_on_raw_model_weights(
    client: TestClient, backend: Backend, registry: dict
) -> None:
    url = f"/v1/models/{registry['ids'][0]}/weights"
    for scopes in (("read",), ("read", "release"), ("publish",)):
        resp = client.get(url, headers=headers(backend, *scopes))
        assert resp.status_code == 403, (scopes, resp.status_code)
        assert resp.json()["type"] == "urn:retarget:problem:forbidden"
    assert exposures(backend) == []
    assert ledger(client, registry["dataset"])["cumulative"]["epsilon"] == 0
    # releases stay readable with read
    release = client.post(
        "/v1/retarget",
        json={"dataset_id": registry["dataset"], "epsilon": 8.0, "delta": 1e-5, "method": "rs"},
    ).json()
    assert client.get(release["download_url"], headers=headers(backend, "read")).status_code == 200


def test_a_raw_download_is_charged_as_that_model_alone(
    client: TestClient, backend: Backend, registry: dict
) -> None:
    ds, (first, second, _) = registry["dataset"], registry["ids"]
    downloader = headers(backend, "models:download")
    resp = client.get(f"/v1/models/{first}/weights", headers=downloader)
    assert resp.status_code == 200 and resp.content == weights(0)
    book = ledger(client, ds)
    assert book["exposed_model_ids"] == [first]
    assert [(e["kind"], e["model_ids"], e["count"]) for e in book["exposures"]] == [
        ("download", [first], 1)
    ]
    assert book["exposures"][0]["key_name"] == "models:download"
    # exactly what releasing that model alone costs, at the ledger's delta
    assert book["cumulative"]["epsilon"] == pytest.approx(joint([SIGMAS[0]]), rel=1e-4, abs=1e-4)
    # a revalidation (304) shows nothing new; a second download counts, costs nothing more
    etag = resp.headers["etag"]
    again = client.get(f"/v1/models/{first}/weights", headers={**downloader, "If-None-Match": etag})
    assert again.status_code == 304
    assert ledger(client, ds)["exposures"][0]["count"] == 1
    assert client.get(f"/v1/models/{first}/weights", headers=downloader).status_code == 200
    assert ledger(client, ds)["exposures"][0]["count"] == 2
    assert ledger(client, ds)["cumulative"] == book["cumulative"]
    # another model: the bound becomes their joint release
    assert client.get(f"/v1/models/{second}/weights").status_code == 200  # admin has the scope
    both = ledger(client, ds)
    assert both["exposed_model_ids"] == sorted([first, second])
    assert both["cumulative"]["epsilon"] == pytest.approx(joint(list(SIGMAS[:2])), rel=1e-4)


def test_a_download_that_would_break_the_cap_is_refused(
    client: TestClient, backend: Backend
) -> None:
    cap = joint([SIGMAS[2]]) * 1.01  # the most private model fits, nothing else does
    reg = make_registry(client, "capped", epsilon_cap=cap)
    ds, (strong, _, private) = reg["dataset"], reg["ids"]
    resp = client.get(f"/v1/models/{strong}/weights")
    assert resp.status_code == 409, resp.text
    assert resp.json()["type"] == "urn:retarget:problem:budget-exceeded"
    assert exposures(backend) == []
    assert client.get(f"/v1/models/{private}/weights").status_code == 200
    assert ledger(client, ds)["cumulative"]["epsilon"] <= cap
    # the download counts against releases too: the same model released by RS fits,
    # any other support no longer does
    body = {"dataset_id": ds, "delta": 1e-5, "method": "rs", "objective": "noise"}
    over = client.post("/v1/retarget", json={**body, "epsilon": 3.0})
    assert over.status_code == 409
    fits = client.post("/v1/retarget", json={**body, "model_ids": [private], "epsilon": cap})
    assert fits.status_code == 201, fits.text


def test_the_dashboard_link_and_download_need_the_download_scope(
    client: TestClient, backend: Backend, registry: dict
) -> None:
    model = registry["ids"][0]
    signer = client.app.state.session_signer  # type: ignore[attr-defined]
    reader = client.post("/v1/keys", json={"name": "viewer", "scopes": ["read"]}).json()
    admin = client.post("/v1/keys", json={"name": "boss", "scopes": ["admin"]}).json()
    cookie = signer.issue(reader["id"], 0)
    client.cookies.set(COOKIE, cookie, path="/admin")
    page = client.get(f"/admin/models/{model}")
    assert page.status_code == 200
    assert f"/admin/models/{model}/weights" not in page.text
    assert "models:download" in page.text
    token = signer.session_csrf(cookie)
    refused = client.post(f"/admin/models/{model}/weights", data={"csrf": token})
    assert refused.status_code == 403
    assert exposures(backend) == []
    cookie = signer.issue(admin["id"], 0)
    client.cookies.set(COOKIE, cookie, path="/admin")
    page = client.get(f"/admin/models/{model}")
    assert f'action="/admin/models/{model}/weights"' in page.text
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None and token.group(1) == signer.session_csrf(cookie)
    download = client.post(
        f"/admin/models/{model}/weights",
        data={"csrf": token.group(1)},
        headers={"Origin": str(client.base_url), "Sec-Fetch-Site": "same-origin"},
    )
    assert download.status_code == 200 and download.content == weights(0)
    [row] = exposures(backend)
    assert row.kind == "download" and row.model_ids == [model] and row.key_name == "boss"
    ledger_page = client.get(f"/admin/datasets/{registry['dataset']}/releases")
    assert "raw download" in ledger_page.text and "key boss" in ledger_page.text


def test_a_charged_download_is_never_a_get_nor_a_post_from_elsewhere(
    client: TestClient, backend: Backend, registry: dict
) -> None:
    """A page on another port of the same host (same site, so SameSite=Strict cookies
    ride along) cannot make a logged-in browser spend budget: not by a GET (an image,
    a link), not by a form post without the session's token, not with it from
    another origin."""
    model = registry["ids"][0]
    signer = client.app.state.session_signer  # type: ignore[attr-defined]
    admin = client.post("/v1/keys", json={"name": "boss", "scopes": ["admin"]}).json()
    cookie = signer.issue(admin["id"], 0)
    client.cookies.set(COOKIE, cookie, path="/admin")
    url = f"/admin/models/{model}/weights"
    assert client.get(url).status_code == 405
    host = client.base_url.host
    token = signer.session_csrf(cookie)
    other = signer.session_csrf(signer.issue(admin["id"], 0, now=1.0))  # another session's
    attempts = [
        ({}, {}),
        ({"csrf": "s." + "0" * 64}, {}),
        ({"csrf": other}, {}),
        ({"csrf": token}, {"Origin": f"http://{host}:8081", "Sec-Fetch-Site": "same-site"}),
        ({"csrf": token}, {"Sec-Fetch-Site": "same-site"}),
        ({"csrf": token}, {"Sec-Fetch-Site": "cross-site"}),
        ({"csrf": token}, {"Origin": f"http://{host}:8081"}),
        ({"csrf": token}, {"Origin": "null"}),
    ]
    for data, headers in attempts:
        resp = client.post(url, data=data, headers=headers)
        assert resp.status_code == 403, (data, headers, resp.status_code)
    assert exposures(backend) == []
    ok = client.post(url, data={"csrf": token}, headers={"Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 200
    assert len(exposures(backend)) == 1


# ---- plans scored by the models ---------------------------------------------------------


def one_example_split() -> bytes:
    gen = torch.Generator().manual_seed(3)
    return save({"inputs": torch.randn(1, 8, generator=gen), "labels": torch.tensor([2])})


def put_split(client: TestClient, ds: str, body: bytes) -> None:
    resp = client.put(
        f"/v1/datasets/{ds}/validation",
        content=body,
        headers={"content-type": "application/octet-stream"},
    )
    assert resp.status_code == 200, resp.text


SCORED = [
    {"method": "lc", "objective": "validation"},
    {"method": "auto", "objective": "validation"},
    {"method": "rs", "objective": "metric", "metric": "accuracy", "metric_goal": "max"},
    {"method": "rs", "metric": "accuracy", "metric_goal": "max"},  # objective 'metric' implied
    {"method": "auto", "objective": "metric", "metric": "accuracy", "metric_goal": "max"},
]


@pytest.mark.parametrize("scored", SCORED)
def test_a_read_key_gets_403_on_plans_scored_by_the_models(
    client: TestClient, backend: Backend, registry: dict, scored: dict
) -> None:
    """With a one-example split, validation plans answer with that example's label (the
    accuracy of each model mix is 0 or 1): a read key may not ask them."""
    put_split(client, registry["dataset"], one_example_split())
    body = {"dataset_id": registry["dataset"], "epsilon": 20.0, "delta": 1e-5, **scored}
    for scopes in (("read",), ("read", "release", "models:download")):
        resp = client.post("/v1/plans", json=body, headers=headers(backend, *scopes))
        assert resp.status_code == 403, (scopes, resp.text)
        assert "publish" in resp.json()["detail"]
    assert exposures(backend) == []
    # the same question from the mechanisms, or from metrics fixed in advance, stays open
    reader = headers(backend, "read")
    noise = {k: v for k, v in body.items() if k not in ("metric", "metric_goal")}
    noise["objective"] = "noise"
    assert client.post("/v1/plans", json=noise, headers=reader).status_code == 200
    if "metric" in scored:
        prior = {**body, "metric": "proxy_accuracy", "metric_source": "prior"}
        assert client.post("/v1/plans", json=prior, headers=reader).status_code == 200
        # a metric read from the models cannot be passed off as 'prior' to skip the charge
        claimed = {**body, "metric_source": "prior"}
        resp = client.post("/v1/plans", json=claimed, headers=reader)
        assert resp.status_code == 422 and "declared 'models'" in resp.json()["detail"]
    assert exposures(backend) == []


@pytest.mark.parametrize("scored", [SCORED[0], SCORED[2]])
def test_a_scored_plan_is_recorded_as_an_exposure_of_every_model_it_read(
    client: TestClient, backend: Backend, registry: dict, scored: dict
) -> None:
    ds = registry["dataset"]
    put_split(client, ds, one_example_split())
    publisher = headers(backend, "read", "publish")
    body = {"dataset_id": ds, "epsilon": 20.0, "delta": 1e-5, **scored}
    resp = client.post("/v1/plans", json=body, headers=publisher)
    assert resp.status_code == 200, resp.text
    plan = resp.json()
    read = set(plan["exposed_model_ids"])
    assert {w["model_id"] for w in plan["weights"]} <= read
    assert len(read) == 3  # the target admits the joint release of all three: all are read
    book = ledger(client, ds)
    [exposure] = book["exposures"]
    assert exposure["kind"] == "scored_plan" and set(exposure["model_ids"]) == read
    assert exposure["detail"]["objective"] == plan["objective"]
    assert book["exposed_model_ids"] == sorted(read)
    assert book["cumulative"]["epsilon"] == pytest.approx(joint(list(SIGMAS)), rel=1e-4)
    assert book["cumulative"]["epsilon"] <= 20.0
    # asked again: the same answer; asked otherwise: counted; neither costs more
    assert client.post("/v1/plans", json=body, headers=publisher).json() == plan
    other = client.post("/v1/plans", json={**body, "epsilon": 19.0}, headers=publisher)
    assert set(other.json()["exposed_model_ids"]) == read
    again = ledger(client, ds)
    assert [e["count"] for e in again["exposures"]] == [2]
    assert again["cumulative"] == book["cumulative"]


def test_a_scored_plan_that_would_break_the_cap_is_refused(
    client: TestClient, backend: Backend
) -> None:
    reg = make_registry(client, "capped-plans", epsilon_cap=joint([SIGMAS[2]]) * 1.01)
    ds = reg["dataset"]
    put_split(client, ds, one_example_split())
    body = {"dataset_id": ds, "epsilon": 20.0, "delta": 1e-5, "method": "lc"}
    resp = client.post("/v1/plans", json={**body, "objective": "validation"})
    assert resp.status_code == 409, resp.text
    assert resp.json()["type"] == "urn:retarget:problem:budget-exceeded"
    assert "objective_value" not in resp.json()
    assert exposures(backend) == []
    # a plan from the mechanisms says so in a warning instead, and costs nothing
    dry = client.post("/v1/plans", json={**body, "objective": "noise"})
    assert dry.status_code == 200 and "over its cap" in dry.json()["warnings"][0]
    assert exposures(backend) == []


def test_the_job_of_a_scored_plan_needs_publish_to_read(
    settings: Settings, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    real = plan_routes.plan_for

    def slow_plan_for(**kwargs):  # type: ignore[no-untyped-def]
        assert gate.wait(30), "the test never opened the gate"
        return real(**kwargs)

    monkeypatch.setattr(plan_routes, "plan_for", slow_plan_for)
    app = create_app(
        settings.model_copy(update={"plan_request_budget_s": 0.05}),
        session_factory=backend.session_factory,
    )
    with TestClient(app) as client:
        authorize(client, backend.session_factory)
        reg = make_registry(client)
        put_split(client, reg["dataset"], one_example_split())
        body = {
            "dataset_id": reg["dataset"],
            "epsilon": 20.0,
            "delta": 1e-5,
            "method": "lc",
            "objective": "validation",
        }
        pending = client.post("/v1/plans", json=body, headers=headers(backend, "read", "publish"))
        assert pending.status_code == 202, pending.text
        location = pending.headers["location"]
        gate.set()
        assert app.state.ctx.plan_jobs.wait(location.rsplit("/", 1)[1], 30)
        assert client.get(location, headers=headers(backend, "read")).status_code == 403
        done = client.get(location, headers=headers(backend, "read", "publish")).json()
        assert done["status"] == "finished" and done["result"]["objective"] == "validation"
        with backend.session_factory() as session:
            assert session.scalar(select(func.count()).select_from(Exposure)) == 1
