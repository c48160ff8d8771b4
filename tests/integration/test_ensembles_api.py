"""Ensembles and checkpoint uncertainty through the API (Postgres and SQLite): the bundle
an ensemble release lists, its manifest and privacy.json; an uncertainty from metrics
not declared 'prior' shown to admin keys and in the release only; what does not apply
to an ensemble refused with nothing stored; a parameter average's uncertainty in its
file's metadata; the dashboard's releases page."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors import safe_open
from safetensors.torch import load, save
from sqlalchemy import func, select

from service.registry.models import Release
from tests.conftest import Backend, authorize
from tests.helpers import checkpoint_bytes, sgd, upload
from tests.integration.test_browser_security import login
from tests.integration.test_validation_api import LOGREG, put_split, split

ACC = {100: 0.70, 200: 0.74, 300: 0.71}
BODY = {"epsilon": 50.0, "delta": 1e-5, "run_id": "r", "metric": "acc"}


@pytest.fixture
def ds(client: TestClient) -> str:
    ds = str(client.post("/v1/datasets", json={"name": "runs"}).json()["id"])
    for step, acc in ACC.items():
        meta = {
            "dataset_id": ds,
            "name": f"ck{step}",
            "mechanism": sgd(1.0, steps=step),
            "lineage": {"run_id": "r", "step": step},
            "metrics": {"acc": acc},  # undeclared: 'models' (computed from the model)
        }
        resp = upload(client, checkpoint_bytes(step), json.dumps(meta))
        assert resp.status_code == 201, resp.text
    return ds


def expected_variance() -> float:
    return float(np.var(list(ACC.values()), ddof=1)) / 3


def release_count(backend: Backend) -> int:
    with backend.session_factory() as s:
        return int(s.scalar(select(func.count()).select_from(Release)) or 0)


def test_an_ensemble_release_lists_its_members_manifest_and_uncertainty(
    client: TestClient, ds: str, backend: Backend
) -> None:
    body = {**BODY, "dataset_id": ds, "method": "ensemble", "combine": "majority_vote"}
    plan = client.post("/v1/plans", json=body).json()
    assert plan["method"] == "ensemble" and plan["combine"] == "majority_vote"
    assert plan["uncertainty"]["source"] == "models"  # an admin key sees it
    assert plan["uncertainty"]["variance"] == pytest.approx(expected_variance(), rel=1e-12)
    for wrong in ({"dtype": "float16"}, {"max_shard_size": 4096}):
        refused = client.post("/v1/retarget", json={**body, **wrong})
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "do not apply" in refused.json()["detail"]
    assert release_count(backend) == 0
    made = client.post("/v1/retarget", json=body)
    assert made.status_code == 201, made.text
    release = made.json()
    assert release["kind"] == "ensemble" and release["epsilon"] == plan["epsilon"]
    listing = client.get(release["files_url"]).json()
    paths = [f["path"] for f in listing["files"]]
    assert paths == [
        "README.md",
        "ensemble.json",
        "members/0/model.safetensors",
        "members/1/model.safetensors",
        "members/2/model.safetensors",
        "privacy.json",
    ]
    # the members are the registered checkpoints, byte for byte, oldest first
    for i, step in enumerate(ACC):
        got = client.get(f"{release['files_url']}/members/{i}/model.safetensors")
        assert got.content == checkpoint_bytes(step)
    manifest = client.get(f"{release['files_url']}/ensemble.json").json()
    assert manifest["combine"] == "majority_vote" and manifest["tie_break"] == "lowest class index"
    assert [m["step"] for m in manifest["members"]] == list(ACC)
    privacy = client.get(f"{release['files_url']}/privacy.json").json()
    assert privacy["method"] == "ensemble" and privacy["combine"] == "majority_vote"
    assert privacy["uncertainty"]["variance"] == pytest.approx(expected_variance(), rel=1e-12)
    card = client.get(f"{release['files_url']}/README.md").text
    assert "majority_vote" in card and "ensemble.json" in card
    # the same request, another combine rule: another release
    other = client.post("/v1/retarget", json={**body, "combine": "mean_probabilities"}).json()
    assert other["release_id"] != release["release_id"]
    again = client.post("/v1/retarget", json=body).json()
    assert again["release_id"] == release["release_id"]


def test_a_read_key_sees_a_models_derived_uncertainty_only_in_the_release(
    client: TestClient, ds: str, backend: Backend
) -> None:
    body = {**BODY, "dataset_id": ds, "method": "ensemble"}
    assert client.post("/v1/plans", json=body).json()["uncertainty"] is not None
    client.post("/v1/retarget", json=body)
    authorize(client, backend.session_factory, "read")
    plan = client.post("/v1/plans", json=body).json()
    assert plan["uncertainty"] is None
    assert not any(n.startswith("uncertainty of ") for n in plan["notes"])
    assert any("shown to admin keys" in n for n in plan["notes"])


def test_a_parameter_average_carries_its_uncertainty_in_its_metadata(
    client: TestClient, ds: str, tmp_path
) -> None:
    body = {**BODY, "dataset_id": ds, "method": "checkpoint_average", "ema_decay": 0.5}
    made = client.post("/v1/retarget", json=body)
    assert made.status_code == 201, made.text
    u = made.json()["plan"]["uncertainty"]
    p = np.array([0.25, 0.5, 1.0]) / 1.75  # EMA decay 0.5, oldest first
    direct = float(np.sum(p**2)) * float(np.var(list(ACC.values()), ddof=1))
    assert u["variance"] == pytest.approx(direct, rel=1e-12)
    assert u["estimate"] == pytest.approx(float(np.dot(p, list(ACC.values()))), rel=1e-12)
    path = tmp_path / "avg.safetensors"
    path.write_bytes(client.get(made.json()["download_url"]).content)
    with safe_open(str(path), "np") as f:
        stored = json.loads(f.metadata()["retarget.uncertainty"])
    assert stored["variance"] == pytest.approx(direct, rel=1e-12)


def test_the_dashboard_shows_an_ensembles_rule_and_uncertainty(client: TestClient, ds: str) -> None:
    client.post("/v1/retarget", json={**BODY, "dataset_id": ds, "method": "ensemble"})
    key = client.headers["Authorization"].removeprefix("Bearer ")
    assert login(client, key).status_code == 303
    page = client.get(f"/admin/datasets/{ds}/releases")
    assert page.status_code == 200
    assert "outputs combined by mean_probabilities" in page.text
    half = 1.959963984540054 * expected_variance() ** 0.5
    assert f"acc: {np.mean(list(ACC.values())):.4g} &plusmn; {half:.4g}" in page.text


def test_an_uncertainty_scored_on_the_validation_split_is_charged_as_the_run(
    client: TestClient, backend: Backend
) -> None:
    """metric 'validation_accuracy': each checkpoint's accuracy on the public split, as
    computed here by hand; the dry run reads the checkpoints, so it needs scope
    'publish' and is recorded in the ledger, at the run's latest checkpoint's epsilon."""
    ds = client.post("/v1/datasets", json={"name": "scored"}).json()["id"]
    assert put_split(client, ds, split()).status_code == 200
    states, ids = {}, {}
    for step in (100, 200, 300):
        gen = torch.Generator().manual_seed(step)
        states[step] = {"fc.weight": torch.randn(3, 8, generator=gen), "fc.bias": torch.zeros(3)}
        meta = {
            "dataset_id": ds,
            "name": f"ck{step}",
            "mechanism": sgd(1.0, steps=step),
            "architecture": LOGREG,
            "lineage": {"run_id": "r", "step": step},
        }
        resp = upload(client, save(states[step]), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids[step] = resp.json()["id"]
    body = {**BODY, "dataset_id": ds, "method": "ensemble", "metric": "validation_accuracy"}
    admin = client.headers["Authorization"]
    authorize(client, backend.session_factory, "read")
    assert client.post("/v1/plans", json=body).status_code == 403
    client.headers["Authorization"] = admin
    plan = client.post("/v1/plans", json=body).json()
    u = plan["uncertainty"]
    assert u["source"] == "validation_split" and u["metric"] == "validation_accuracy"
    data = load(split())
    accuracy = [
        float(
            ((data["inputs"] @ states[s]["fc.weight"].T).argmax(1) == data["labels"])
            .double()
            .mean()
        )
        for s in (100, 200, 300)
    ]
    assert [m["value"] for m in u["members"]] == pytest.approx(accuracy, abs=1e-9)
    assert u["variance"] == pytest.approx(float(np.var(accuracy, ddof=1)) / 3, rel=1e-9)
    assert sorted(plan["exposed_model_ids"]) == sorted(ids.values())
    latest = client.get(f"/v1/models/{ids[300]}/epsilon", params={"delta": 1e-5}).json()
    assert latest["epsilon"] == plan["epsilon"]
    ledger = client.get(f"/v1/datasets/{ds}/ledger").json()
    (scored,) = [e for e in ledger["exposures"] if e["kind"] == "scored_plan"]
    assert sorted(scored["model_ids"]) == sorted(ids.values())
    delta = ledger["cumulative"]["delta"]
    alone = client.get(f"/v1/models/{ids[300]}/epsilon", params={"delta": delta}).json()
    assert ledger["cumulative"]["epsilon"] == pytest.approx(alone["epsilon"], rel=1e-6)
