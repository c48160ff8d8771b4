"""The whole path with real DP-SGD models: train (Opacus) -> register -> plan -> release ->
evaluate, through the HTTP API of a service on its embedded defaults (tiny settings)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from service.api.app import create_app
from service.config import Settings
from service.demo.data import load_digits_splits
from service.demo.run import main
from service.demo.train import accuracy, build


def _release_of(out: Path, release_id: str) -> dict[str, Any]:
    settings = Settings(data_dir=out / "service-data", database_url=None, redis_url=None)
    key = (out / "dashboard-key.txt").read_text().strip()
    with TestClient(create_app(settings)) as http:
        resp = http.get(f"/v1/releases/{release_id}", headers={"Authorization": f"Bearer {key}"})
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]


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
    lc = next(r for r in rows if r["method"] == "lc" and r["objective"] == "signal")
    names = {m["id"]: m["name"] for m in report["inputs"]}
    merged: dict[str, torch.Tensor] = {}
    for mid, w in lc["weights"].items():
        for k, v in load_file(str(tmp_path / "models" / f"{names[mid]}.safetensors")).items():
            merged[k] = merged.get(k, torch.zeros_like(v)) + w * v
    model = build("logreg")
    model.load_state_dict(merged)
    assert abs(accuracy(model, test) - lc["test_accuracy"]) < 0.01
    assert report["checkpoints"]["lc_refusal"]["status"] == 422
    # averaging the run's checkpoints: the latest one's epsilon, a model that works
    average = report["checkpoints"]["average"]
    assert abs(average["epsilon"] - average["latest_epsilon"]) <= 1e-5 * average["epsilon"]
    assert average["test_accuracy"] > 0.3
    # an LC release of several runs states what its bound assumes
    merged_lc = next(r for r in rows if r["method"] == "lc" and len(r["weights"]) > 1)
    release = _release_of(tmp_path, merged_lc["release_id"])
    assert any("independent randomness" in n for n in release["plan"]["notes"])
    assert any("fixed in advance" in n for n in release["plan"]["notes"])
    assert (tmp_path / "frontier-logreg.svg").read_text().startswith("<svg")
    # the default plan (no method, no objective) at every target and seed, against the
    # oracle (the best single model or RS mix meeting the target, by test accuracy)
    regret = report["regret"]
    assert len(regret) == len({(r["seed"], r["target"]) for r in rows})
    for r in regret:
        assert r["default"] is not None and r["oracle"] is not None
        assert r["oracle"] >= r["signal"] - 1e-9  # no RS plan beats the RS oracle
    assert "## The default plan against the oracle" in (tmp_path / "report.md").read_text()
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
        form = http.get("/admin/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        wrong = http.post("/admin/login", data={"key": "rt_wrong", "csrf": token.group(1)})
        assert wrong.status_code == 200 and "unknown, revoked" in wrong.text
        resp = http.post("/admin/login", data={"key": key, "csrf": token.group(1)})
        assert resp.status_code == 303 and resp.headers["location"] == "/admin"
        page = http.get("/admin")
        assert page.status_code == 200 and "digits" in page.text


def test_demo_report_has_seeds_held_out_split_headline_and_labelled_paper_curve(
    demo: tuple[Path, list[str]],
) -> None:
    tmp_path, _ = demo
    report = json.loads((tmp_path / "report.json").read_text())
    md = (tmp_path / "report.md").read_text()
    # at least 3 seeds, each releasing every method at every target
    seeds = {r["seed"] for r in report["rows"]}
    assert len(seeds) >= 3
    summary = report["summary"]
    assert summary and all(s["n"] == len(seeds) for s in summary)
    for s in summary:  # mean and spread are those of the per-seed rows
        rows = [
            r
            for r in report["rows"]
            if (r["family"], r["method"], r["accountant"], r["objective"], r["target"])
            == (s["family"], s["method"], s["accountant"], s["objective"], s["target"])
        ]
        vals = [
            r["expected_test_accuracy"] if r["method"] == "rs" else r["test_accuracy"] for r in rows
        ]
        assert abs(s["mean"] - sum(vals) / len(vals)) < 1e-12
        assert s["sd"] >= 0 and min(vals) <= s["mean"] <= max(vals)
    # accuracy on at least 1,000 held-out examples, said in the report
    assert report["split"]["test"] >= 1000
    assert sum(report["split"].values()) == 1797
    assert f"{report['split']['test']} test (held out" in md
    # the headline is one sentence, at the top, and reports the comparison it makes
    headline = report["headline"]
    assert md.splitlines()[2] == f"**{headline}**"
    assert "sound LC bound" in headline and headline.count(". ") == 0
    lc_wins = int(headline.split("clearly higher than RS's expected accuracy at ")[1].split(",")[0])
    if lc_wins == 0:
        assert not headline.startswith("LC beat RS")
    # the paper's curve appears only beside the sound one, and labelled
    label = "holds only if gradients do not depend on hidden state"
    svg = (tmp_path / "frontier-logreg.svg").read_text()
    assert "LC, PLD (sound bound)" in svg and "LC, RDP (sound bound)" in svg
    papers = [r for r in report["rows"] if r["paper_epsilon"] is not None]
    assert papers  # the quick run merges several runs at its top target
    assert all(r["method"] == "lc" and len(r["weights"]) > 1 for r in papers)
    assert f"epsilon (RDP; {label})" in svg
    assert label in md
