"""The default plan on real Opacus runs, as a new user would make them (issue 31).

Three DP-SGD runs on scikit-learn's digits (shipped with scikit-learn: nothing is
downloaded), noise multipliers 0.8 / 1.2 / 2.0, sampling rate about 0.05, 3 epochs of
about 20 steps, recorded by the SDK's Opacus recorder, each checkpoint registered
once per epoch with its lineage (9 models). At every target, the default plan never
spends weight on an earlier checkpoint of a run whose final checkpoint meets the
target: the final one covers the earlier ones' privacy and trained longer.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save
from torch.utils.data import DataLoader, TensorDataset

from retarget.opacus import OpacusRecorder
from service.demo.data import load_digits_splits
from tests.helpers import upload

SIGMAS = (0.8, 1.2, 2.0)
EPOCHS = 3
TARGETS = (0.6, 0.9, 1.2, 1.409, 2.0, 3.0, 5.0)


def _run(sigma: float, seed: int) -> list[dict[str, Any]]:
    """One Opacus run: its checkpoint after each epoch, with the recorded mechanism."""
    from opacus import PrivacyEngine

    data = load_digits_splits().train
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=2.0)
    loader = DataLoader(
        TensorDataset(data.inputs, data.labels),
        batch_size=round(0.05 * len(data.labels)),
        generator=torch.Generator().manual_seed(seed),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="rdp")
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=sigma,
            max_grad_norm=1.0,
        )
    recorder = OpacusRecorder.attach(optimizer, loader, run_id=f"sigma-{sigma}")
    loss_fn = torch.nn.CrossEntropyLoss()
    out = []
    for epoch in range(EPOCHS):
        for xb, yb in loader:
            optimizer.zero_grad()
            if len(xb):
                loss_fn(model(xb), yb).backward()
            optimizer.step()
        state = {
            k.removeprefix("_module."): v.detach().clone() for k, v in model.state_dict().items()
        }
        out.append(
            {
                "name": f"sigma{sigma}-epoch{epoch}",
                "bytes": save(state),
                "mechanism": recorder.mechanism(),
                "step": len(recorder.steps),
                "run_id": f"sigma-{sigma}",
            }
        )
    return out


@pytest.fixture(scope="module")
def recorded() -> list[dict[str, Any]]:
    return [c for i, s in enumerate(SIGMAS) for c in _run(s, seed=100 + i)]


def test_the_default_plan_prefers_a_final_checkpoint_that_fits(
    client: TestClient, recorded: list[dict[str, Any]]
) -> None:
    ds = client.post("/v1/datasets", json={"name": "opacus-digits"}).json()["id"]
    by_id: dict[str, dict[str, Any]] = {}
    for c in recorded:
        meta = {
            "dataset_id": ds,
            "name": c["name"],
            "mechanism": c["mechanism"],
            "lineage": {"run_id": c["run_id"], "step": c["step"]},
        }
        resp = upload(client, c["bytes"], json.dumps(meta))
        assert resp.status_code == 201, resp.text
        assert resp.json()["lineage_verified"]
        eps = client.get(f"/v1/models/{resp.json()['id']}/epsilon", params={"delta": 1e-5})
        by_id[resp.json()["id"]] = {**c, "epsilon": eps.json()["epsilon"]}
    finals = {c["run_id"]: c["step"] for c in recorded}  # the last epoch of each run
    for target in TARGETS:
        resp = client.post("/v1/plans", json={"dataset_id": ds, "epsilon": target, "delta": 1e-5})
        if resp.status_code == 422:  # below every model: nothing to pick
            assert target < min(c["epsilon"] for c in by_id.values())
            continue
        assert resp.status_code == 200, resp.text
        plan = resp.json()
        assert plan["objective"] == "signal" and plan["epsilon"] <= target
        assert "noise-to-signal" in plan["notes"][0]
        chosen = [by_id[w["model_id"]] for w in plan["weights"] if w["weight"] > 0]
        for run_id, last in finals.items():
            final = next(c for c in by_id.values() if c["run_id"] == run_id and c["step"] == last)
            if final["epsilon"] <= target:
                early = [c["name"] for c in chosen if c["run_id"] == run_id and c["step"] < last]
                assert not early, (target, early, plan["weights"])
    # the example: at 1.409 the final sigma-2.0 checkpoint (which fits) carries the
    # plan, not the sigma-1.2 checkpoint after its first epoch
    plan = client.post("/v1/plans", json={"dataset_id": ds, "epsilon": 1.409, "delta": 1e-5})
    top = plan.json()["weights"][0]
    assert top["model_name"] == f"sigma2.0-epoch{EPOCHS - 1}" and top["weight"] > 0.5
