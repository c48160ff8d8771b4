"""The whole path with real DP-SGD models: train (Opacus) -> register -> plan -> release ->
evaluate, through the HTTP API of a service on its embedded defaults (tiny settings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from service.api.app import create_app
from service.config import Settings
from service.demo.data import load_digits_splits
from service.demo.run import main
from service.demo.train import accuracy, build


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """One quick demo run, shared by the tests below (it trains real models)."""
    out = tmp_path_factory.mktemp("demo")
    lines: list[str] = []
    assert main(out, quick=True, progress=lines.append) == 0
    return out, lines


def test_demo_trains_registers_releases_and_reports(demo: tuple[Path, list[str]]) -> None:
    tmp_path, lines = demo
    assert any("registered [1/" in line for line in lines)  # progress is shown
    # Opacus' secure-RNG notice is shown once, not once per trained run
    assert sum("Secure RNG" in line for line in lines) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert all(report["checks"].values()), report["checks"]
    rows = report["rows"]
    assert {(r["method"], r["accountant"]) for r in rows} >= {
        ("rs", "rdp"),
        ("rs", "pld"),
        ("lc", "rdp"),
        ("lc", "pld"),
    }
    assert all(r["epsilon"] <= r["target"] for r in rows)
    # the report's input accuracies are the saved models' own
    test = load_digits_splits().test
    for m in report["inputs"][:2]:
        model = build("logreg" if m["name"].startswith("logreg") else "mlp")
        model.load_state_dict(load_file(str(tmp_path / "models" / f"{m['name']}.safetensors")))
        assert accuracy(model, test) == m["test_accuracy"]
    # an LC release's accuracy is that of the weighted sum of its inputs
    lc = next(r for r in rows if r["method"] == "lc" and r["objective"] == "noise")
    names = {m["id"]: m["name"] for m in report["inputs"]}
    merged: dict[str, torch.Tensor] = {}
    for mid, w in lc["weights"].items():
        for k, v in load_file(str(tmp_path / "models" / f"{names[mid]}.safetensors")).items():
            merged[k] = merged.get(k, torch.zeros_like(v)) + w * v
    model = build("logreg")
    model.load_state_dict(merged)
    assert abs(accuracy(model, test) - lc["test_accuracy"]) < 0.01
    assert report["checkpoints"]["lc_refusal"]["status"] == 422
    assert (tmp_path / "frontier-logreg.svg").read_text().startswith("<svg")
    assert "## Checks" in (tmp_path / "report.md").read_text()


def test_demo_key_opens_the_dashboard(demo: tuple[Path, list[str]]) -> None:
    tmp_path, lines = demo
    key = (tmp_path / "dashboard-key.txt").read_text().strip()
    assert (tmp_path / "dashboard-key.txt").stat().st_mode & 0o077 == 0
    printed = [line for line in lines if "log in with the admin key" in line]
    assert printed and printed[0].endswith(key)
    assert any("/admin/login" in line for line in lines)
    assert any(f"RETARGET_DATA_DIR={tmp_path / 'service-data'}" in line for line in lines)
    report = (tmp_path / "report.md").read_text()
    assert "## Open this run in the dashboard" in report and key not in report
    # the data the demo left behind, served again, accepts the printed key
    settings = Settings(data_dir=tmp_path / "service-data", database_url=None, redis_url=None)
    with TestClient(create_app(settings), follow_redirects=False) as http:
        assert http.post("/admin/login", data={"key": "rt_wrong"}).status_code == 200
        resp = http.post("/admin/login", data={"key": key})
        assert resp.status_code == 303 and resp.headers["location"] == "/admin"
        page = http.get("/admin")
        assert page.status_code == 200 and "digits" in page.text
