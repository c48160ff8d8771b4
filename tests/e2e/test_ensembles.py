"""An ``ensemble`` release of one run's checkpoints against a running service: planned
and released with the Python client and the CLI, pulled with both, loaded with the
SDK's reference loader; its OPA and OMV predictions equal those computed here by hand
from the original weights, its certificate is the latest checkpoint's, and the
uncertainty it reports equals the estimator computed here directly."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from retarget.client import AsyncRetargetClient, RetargetClient
from retarget.client.errors import Unsupported
from retarget.ensemble import load_ensemble
from tests.e2e.test_bundle_transfers import cli
from tests.e2e.test_hf_clients import hub_env, listing
from tests.helpers import sgd

DELTA = 1e-5
STEPS = (100, 200, 300, 400)
ACC = {100: 0.52, 200: 0.61, 300: 0.58, 400: 0.66}


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))


def checkpoint(step: int, folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    torch.manual_seed(step)
    state = {k: v.contiguous() for k, v in mlp().state_dict().items()}
    path = folder / f"step{step}.safetensors"
    save_file(state, str(path))
    return path, {k: v.double().numpy() for k, v in state.items()}


def logits_by_hand(state: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    hidden = np.maximum(x @ state["0.weight"].T + state["0.bias"], 0.0)
    return np.asarray(hidden @ state["2.weight"].T + state["2.bias"])


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def opa_by_hand(states: list[dict[str, np.ndarray]], x: np.ndarray) -> np.ndarray:
    mean = sum(softmax(logits_by_hand(s, x)) for s in states) / len(states)
    return np.asarray(mean)


def omv_by_hand(states: list[dict[str, np.ndarray]], x: np.ndarray) -> list[int]:
    labels = [logits_by_hand(s, x).argmax(axis=1) for s in states]
    out = []
    for row in zip(*labels, strict=True):
        counts = Counter(int(v) for v in row)
        top = max(counts.values())
        out.append(min(c for c, n in counts.items() if n == top))  # ties: lowest index
    return out


def oracle_epsilon(steps: int) -> float:
    """dp_accounting's PLD accountant for the checkpoint's mechanism (sgd(1.0, steps))."""
    import dp_accounting

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), steps
    )
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    return float(accountant.compose(event).get_epsilon(DELTA))


def variance_by_hand(values: list[float]) -> float:
    """The paper's estimator with uniform weights: (1/k) x the unbiased sample variance."""
    return float(np.var(values, ddof=1)) * sum((1 / len(values)) ** 2 for _ in values)


@pytest.fixture(scope="module")
def run(
    live_service: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, object]:
    base, key = live_service
    folder = tmp_path_factory.mktemp("run")
    states = {}
    with RetargetClient(base, key) as rt:
        ds = rt.datasets.create("ensembles", metric="acc")
        ids = {}
        for step in STEPS:
            path, states[step] = checkpoint(step, folder)
            model = rt.models.register(
                path,
                dataset_id=ds.id,
                name=f"mlp-{step}",
                mechanism=sgd(1.0, steps=step),
                run_id="run-a",
                step=step,
                metrics={"acc": ACC[step]},
                extra={"metric_declarations": {"acc": {"source": "prior"}}},
            )
            ids[step] = model.id
        latest = rt.models.epsilon(ids[400], delta=DELTA).epsilon
    return {"base": base, "key": key, "ds": ds.id, "ids": ids, "states": states, "latest": latest}


def test_an_ensemble_plan_is_certified_as_its_latest_checkpoint_with_the_uncertainty(
    run: dict,
) -> None:
    ids, last3 = run["ids"], STEPS[1:]
    with RetargetClient(run["base"], run["key"]) as rt:
        plan = rt.plans.create(run["ds"], 50.0, DELTA, method="ensemble", run_id="run-a")
    assert plan.method == "ensemble" and plan.combine == "mean_probabilities"
    assert {w.model_id for w in plan.weights} == {ids[s] for s in last3}
    assert all(w.weight == pytest.approx(1 / 3) for w in plan.weights)
    assert run["latest"] is not None and plan.epsilon == run["latest"]
    # and that is the latest checkpoint's DP-SGD guarantee, by an independent accountant
    assert plan.epsilon == pytest.approx(oracle_epsilon(STEPS[-1]), rel=0.01)
    u = plan.uncertainty
    assert u is not None and u["metric"] == "acc" and u["k"] == 3 and u["source"] == "prior"
    values = [ACC[s] for s in last3]
    assert u["variance"] == pytest.approx(variance_by_hand(values), rel=1e-12)
    assert u["estimate"] == pytest.approx(np.mean(values), rel=1e-12)
    assert u["width_95"] == pytest.approx(2 * 1.959964 * variance_by_hand(values) ** 0.5, 1e-6)
    assert [m["model_id"] for m in u["members"]] == [ids[s] for s in last3]
    assert any("lower bound" in n for n in plan.notes)
    assert any("latest member" in n or "latest" in n for n in plan.notes)


def test_an_ensemble_round_trips_through_the_cli_and_the_client(run: dict, tmp_path: Path) -> None:
    base, key, ids = run["base"], run["key"], run["ids"]
    made = cli(
        [
            *("release", "--dataset", run["ds"], "--epsilon", "50", "--delta", str(DELTA)),
            *("--method", "ensemble", "--run-id", "run-a"),
        ],
        base,
        key,
        tmp_path,
    )
    assert made["kind"] == "ensemble" and made["epsilon"] == run["latest"]
    release_id = made["release_id"]
    by_cli = tmp_path / "cli"
    cli(["releases", "download", release_id, "-o", str(by_cli)], base, key, tmp_path)
    by_client = tmp_path / "client"
    with RetargetClient(base, key) as rt:
        rt.releases.download_folder(release_id, by_client)
        again = rt.releases.create(
            run["ds"], 50.0, DELTA, method="ensemble", run_id="run-a", last_k=3
        )
        ledger = rt.datasets.ledger(run["ds"])
        # charged like any release: as the run's latest member, however many releases
        alone = rt.models.epsilon(ids[400], delta=ledger.cumulative["delta"]).epsilon
    assert again.release_id == release_id and again.created is False
    assert release_id in {r["release_id"] for r in ledger.releases}
    assert set(ledger.exposed_model_ids) >= {ids[s] for s in STEPS[1:]}
    assert alone is not None and ledger.cumulative["epsilon"] == pytest.approx(alone, rel=1e-6)
    files = sorted(p.relative_to(by_cli).as_posix() for p in by_cli.rglob("*") if p.is_file())
    assert "ensemble.json" in files and "privacy.json" in files
    assert [f for f in files if f.startswith("members/")] == [
        f"members/{i}/model.safetensors" for i in range(3)
    ]
    for f in files:
        if not f.startswith("."):
            assert (by_cli / f).read_bytes() == (by_client / f).read_bytes(), f
    manifest = json.loads((by_cli / "ensemble.json").read_text())
    assert [m["step"] for m in manifest["members"]] == list(STEPS[1:])
    assert [m["model_id"] for m in manifest["members"]] == [ids[s] for s in STEPS[1:]]
    privacy = json.loads((by_cli / "privacy.json").read_text())
    assert privacy["method"] == "ensemble" and privacy["epsilon"] == run["latest"]
    values = [ACC[s] for s in STEPS[1:]]
    assert privacy["uncertainty"]["variance"] == pytest.approx(variance_by_hand(values), 1e-12)

    states = [run["states"][s] for s in STEPS[1:]]
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(7))
    ensemble = load_ensemble(by_client, mlp)
    probs = ensemble.probabilities(x).numpy()
    expected = opa_by_hand(states, x.double().numpy())
    np.testing.assert_allclose(probs, expected, rtol=1e-5, atol=1e-6)
    assert ensemble(x).tolist() == expected.argmax(axis=1).tolist()


def test_a_majority_vote_ensemble_predicts_the_hand_computed_vote(
    run: dict, tmp_path: Path
) -> None:
    with RetargetClient(run["base"], run["key"]) as rt:
        made = rt.releases.create(
            run["ds"], 50.0, DELTA, method="ensemble", run_id="run-a", combine="majority_vote"
        )
        rt.releases.download_folder(made.release_id, tmp_path / "omv")
    assert made.kind == "ensemble" and made.epsilon == run["latest"]
    ensemble = load_ensemble(tmp_path / "omv", mlp)
    assert ensemble.combine == "majority_vote"
    states = [run["states"][s] for s in STEPS[1:]]
    x = torch.randn(512, 8, generator=torch.Generator().manual_seed(8))
    by_hand = omv_by_hand(states, x.double().numpy())
    assert ensemble(x).tolist() == by_hand
    # the inputs are varied enough that members disagree, and some three-way splits
    # exercise the tie rule
    labels = [logits_by_hand(s, x.double().numpy()).argmax(axis=1) for s in states]
    assert any(len({int(a), int(b), int(c)}) > 1 for a, b, c in zip(*labels, strict=True))


PULL = r"""
import hashlib, json, os, sys
from pathlib import Path
from huggingface_hub import snapshot_download

repo, out = sys.argv[1], sys.argv[2]
folder = Path(snapshot_download(repo_id=repo, token=os.environ["KEY"]))
files = {
    p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
    for p in folder.rglob("*") if p.is_file()
}
Path(out).write_text(json.dumps({"folder": str(folder), "files": files}))
"""


def test_the_hub_client_pulls_an_ensemble_with_its_member_folders(
    run: dict, tmp_path: Path
) -> None:
    """huggingface_hub's snapshot_download of ``releases/<id>`` from the /hf endpoint gets
    every file of the ensemble, members/<i>/ included, and the SDK's loader reads it."""
    base, key = run["base"], run["key"]
    with RetargetClient(base, key) as rt:
        made = rt.releases.create(run["ds"], 50.0, DELTA, method="ensemble", run_id="run-a")
        # a bundle is a folder: the single-file download says which call gets it
        with pytest.raises(Unsupported, match=r"releases\.download_folder"):
            rt.releases.download(made.release_id, tmp_path / "one.safetensors")
    assert not (tmp_path / "one.safetensors").exists()

    async def one_file() -> None:
        async with AsyncRetargetClient(base, key) as rt:
            await rt.releases.download(made.release_id, tmp_path / "one.safetensors")

    with pytest.raises(Unsupported, match=r"releases\.download_folder"):
        asyncio.run(one_file())
    out = tmp_path / "pulled.json"
    done = subprocess.run(
        [sys.executable, "-c", PULL, f"releases/{made.release_id}", str(out)],
        env=hub_env(base, key, tmp_path / "hf-home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pulled = json.loads(out.read_text())
    assert pulled["files"] == listing(base, key, made.release_id)
    assert [f for f in sorted(pulled["files"]) if f.startswith("members/")] == [
        f"members/{i}/model.safetensors" for i in range(3)
    ]
    states = [run["states"][s] for s in STEPS[1:]]
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(9))
    probs = load_ensemble(Path(pulled["folder"]), mlp).probabilities(x).numpy()
    np.testing.assert_allclose(probs, opa_by_hand(states, x.double().numpy()), rtol=1e-5, atol=1e-6)
