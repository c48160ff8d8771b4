"""The whole path with real DP-SGD models: train (Opacus) -> register -> plan -> release ->
evaluate, through the HTTP API of a service on its embedded defaults (tiny settings)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from service.demo.data import load_digits_splits
from service.demo.run import main
from service.demo.train import accuracy, build


def test_demo_trains_registers_releases_and_reports(tmp_path: Path) -> None:
    lines: list[str] = []
    assert main(tmp_path, quick=True, progress=lines.append) == 0
    assert any("registered [1/" in line for line in lines)  # progress is shown
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
