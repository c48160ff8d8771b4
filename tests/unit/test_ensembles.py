"""Ensembles of one run's checkpoints: the plan, the manifest, the reference loader's
OPA and OMV against hand computations (ties included), and the uncertainty estimator
against a direct computation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from retarget.ensemble import load_ensemble, read_manifest
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.planning.checkpoints import average_weights
from service.accounting.profiles.profile import compute_profile
from service.errors import InfeasibleTarget, InvalidInput
from service.plans.uncertainty import Z95, checkpoint_uncertainty, checkpoint_variance
from service.registry.models import Model
from service.releases.ensembles import manifest
from tests.helpers import sgd

DELTA = 1e-5


def checkpoint(mid: str, step: int, run: str = "r", verified: bool = True) -> Candidate:
    m = parse_mechanism(sgd(1.0, steps=step))
    return Candidate(mid, m, compute_profile(m), {}, run, step, "sig", lineage_verified=verified)


@pytest.fixture(scope="module")
def run() -> list[Candidate]:
    return [checkpoint(f"c{s}", s) for s in (100, 200, 300, 400)]


def test_an_ensemble_plan_is_the_latest_members_certificate(run: list[Candidate]) -> None:
    spec = PlanRequestSpec(epsilon=50.0, delta=DELTA, method="ensemble", combine="majority_vote")
    plan = make_plan(run, spec)
    assert plan.method == "ensemble" and plan.combine == "majority_vote"
    assert plan.weights == pytest.approx({"c200": 1 / 3, "c300": 1 / 3, "c400": 1 / 3})
    latest = min(run[-1].profile.epsilon(DELTA, a) for a in ("rdp", "pld"))
    assert plan.epsilon == latest
    # no cheaper than the latest member alone: the earlier ones are in its prefix
    assert plan.epsilon >= min(run[1].profile.epsilon(DELTA, a) for a in ("rdp", "pld"))
    assert "post-processing of one run" in plan.bound
    assert any("latest member" in n for n in plan.notes)
    with pytest.raises(InfeasibleTarget):
        make_plan(run, PlanRequestSpec(epsilon=latest * 0.9, delta=DELTA, method="ensemble"))


def test_an_ensemble_takes_one_run_and_leaves_unverified_checkpoints_out(
    run: list[Candidate],
) -> None:
    other = [checkpoint("o100", 100, run="s"), checkpoint("o200", 200, run="s")]
    spec = PlanRequestSpec(epsilon=50.0, delta=DELTA, method="ensemble", last_k=2)
    with pytest.raises(InvalidInput, match="run_id"):
        make_plan([*run, *other], spec)
    plan = make_plan([*run, *other], PlanRequestSpec(**{**spec.__dict__, "run_id": "s"}))
    assert set(plan.weights) == {"o100", "o200"}
    crafted = checkpoint("c900", 900, verified=False)  # unverified: not this run's
    plan = make_plan([*run, crafted], spec)
    assert set(plan.weights) == {"c300", "c400"}
    assert any("lineage not verified" in n and "c900" in n for n in plan.notes)
    ema = make_plan(run, PlanRequestSpec(**{**spec.__dict__, "ema_decay": 0.5}))
    assert list(ema.weights.values()) == pytest.approx(average_weights(2, 0.5))


def test_the_estimator_is_the_rescaled_sample_variance() -> None:
    rng = np.random.default_rng(3)
    values = list(rng.normal(0.7, 0.05, size=6))
    for weights in (average_weights(6), average_weights(6, 0.8), [0, 0, 0, 0, 0, 1.0]):
        direct = float(np.sum(np.square(weights))) * float(np.var(values, ddof=1))
        assert checkpoint_variance(values, weights) == pytest.approx(direct, rel=1e-12)
    # uniform: the variance of the mean of k i.i.d. draws, sample variance / k
    assert checkpoint_variance(values, average_weights(6)) == pytest.approx(
        np.var(values, ddof=1) / 6, rel=1e-12
    )
    for bad in (([0.5], [1.0]), ([0.5, 0.6], [0.7, 0.7]), ([0.5, float("nan")], [0.5, 0.5])):
        with pytest.raises(ValueError):
            checkpoint_variance(*bad)


def _row(mid: str, step: int, value: float | None, source: str = "prior") -> Model:
    metrics = {} if value is None else {"acc": value}
    declared = {} if value is None else {"acc": {"source": source}}
    return Model(
        id=mid,
        lineage_run_id="r",
        lineage_step=step,
        metrics=metrics,
        metric_declarations=declared,
    )


def test_the_uncertainty_record_and_when_there_is_none() -> None:
    rows = [_row("a", 100, 0.60), _row("b", 200, 0.64), _row("c", 300, 0.59, "models")]
    weights = dict(zip(("a", "b", "c"), average_weights(3, 0.9), strict=True))
    record, notes = checkpoint_uncertainty(rows, weights, "acc")
    assert record is not None and record["source"] == "models" and record["k"] == 3
    values, p = [0.60, 0.64, 0.59], list(weights.values())
    variance = float(np.sum(np.square(p))) * float(np.var(values, ddof=1))
    centre = float(np.dot(p, values))
    assert record["variance"] == pytest.approx(variance, rel=1e-12)
    assert record["estimate"] == pytest.approx(centre, rel=1e-12)
    assert record["width_95"] == pytest.approx(2 * 1.959964 * variance**0.5, rel=1e-6)
    assert record["interval_95"] == pytest.approx(
        [centre - Z95 * variance**0.5, centre + Z95 * variance**0.5]
    )
    assert [m["model_id"] for m in record["members"]] == ["a", "b", "c"]
    assert record["lower_bound"] is True and "lower bound" in notes[0]
    for rows2, why in (
        ([*rows[:2], _row("c", 300, 0.59, "private")], "private"),
        ([*rows[:2], _row("c", 300, None)], "not declared by c"),
    ):
        record, notes = checkpoint_uncertainty(rows2, weights, "acc")
        assert record is None and why in notes[0]
    record, notes = checkpoint_uncertainty(rows[:1], {"a": 1.0}, "acc")
    assert record is None and "at least 2" in notes[0]
    assert checkpoint_uncertainty(rows, weights, None) == (None, [])


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(3, 3))


def write_ensemble(
    folder: Path, heads: list[np.ndarray], weights: list[float], combine: str
) -> None:
    """An ensemble folder as the service writes it: members of a linear classifier whose
    weight matrix is ``head`` and bias zero."""
    models, files = {}, {}
    for i, head in enumerate(heads):
        mid = f"m{i}"
        (folder / f"members/{i}").mkdir(parents=True)
        state = {"0.weight": torch.tensor(head, dtype=torch.float32), "0.bias": torch.zeros(3)}
        save_file(state, str(folder / f"members/{i}/model.safetensors"))
        models[mid] = Model(
            id=mid, name=mid, lineage_run_id="r", lineage_step=100 * (i + 1), kind="safetensors"
        )
        files[mid] = ["model.safetensors"]
    record = manifest(models, {f"m{i}": w for i, w in enumerate(weights)}, combine, files)
    (folder / "ensemble.json").write_text(json.dumps(record))


def voting(votes: list[int]) -> np.ndarray:
    """A head whose argmax on input e_j is votes[j]."""
    head = np.zeros((3, 3))
    for j, v in enumerate(votes):
        head[v, j] = 1.0
    return head


def test_majority_vote_breaks_ties_by_the_lowest_class_index(tmp_path: Path) -> None:
    # x = e_j gives the logits W[:, j]: each member votes for the row of its 1 in column j
    heads = [voting([2, 1, 0]), voting([1, 2, 0])]
    write_ensemble(tmp_path / "two", heads, [0.5, 0.5], "majority_vote")
    ens = load_ensemble(tmp_path / "two", mlp)
    x = torch.eye(3)
    # member 0 votes [2, 1, 0], member 1 votes [1, 2, 0]: ties to 1, 1, then 0
    assert ens(x).tolist() == [1, 1, 0]
    assert ens.votes(x).tolist() == [[0, 1, 1], [0, 1, 1], [2, 0, 0]]
    write_ensemble(tmp_path / "weighted", heads, [0.3, 0.7], "majority_vote")
    assert load_ensemble(tmp_path / "weighted", mlp)(x).tolist() == [1, 2, 0]


def test_mean_probabilities_is_the_weighted_mean_of_softmaxes(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    heads = [rng.normal(size=(3, 3)) for _ in range(3)]
    weights = [0.2, 0.3, 0.5]
    write_ensemble(tmp_path / "opa", heads, weights, "mean_probabilities")
    ens = load_ensemble(tmp_path / "opa", mlp)
    x = rng.normal(size=(40, 3))
    by_hand = np.zeros((40, 3))
    for w, head in zip(weights, heads, strict=True):
        z = x @ head.astype(np.float32).T
        e = np.exp(z - z.max(axis=1, keepdims=True))
        by_hand += w * e / e.sum(axis=1, keepdims=True)
    got = ens.probabilities(torch.tensor(x, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(got, by_hand, rtol=1e-5, atol=1e-6)
    assert ens(torch.tensor(x, dtype=torch.float32)).tolist() == by_hand.argmax(axis=1).tolist()


def test_the_loader_refuses_a_manifest_it_cannot_trust(tmp_path: Path) -> None:
    write_ensemble(tmp_path, [np.eye(3)], [1.0], "mean_probabilities")
    good = json.loads((tmp_path / "ensemble.json").read_text())
    assert read_manifest(tmp_path)["members"][0]["step"] == 100
    for change, why in (
        ({"combine": "median"}, "combine"),
        ({"version": 2}, "version"),
        ({"members": []}, "no members"),
        ({"members": [{**good["members"][0], "weight": 0.5}]}, "sum to 1"),
        ({"members": [{**good["members"][0], "files": ["../x.safetensors"]}]}, "outside"),
    ):
        (tmp_path / "ensemble.json").write_text(json.dumps({**good, **change}))
        with pytest.raises(ValueError, match=why):
            read_manifest(tmp_path)
    with pytest.raises(ValueError, match="missing"):
        read_manifest(tmp_path / "nowhere")
