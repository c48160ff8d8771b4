"""Verified checkpoint lineage: attacks on ``lineage.run_id`` / ``lineage.step``
(Postgres and SQLite). A checkpoint of a run must give its step, have a per-step
mechanism and agree step for step with the run's other checkpoints; otherwise 422,
nothing stored. Only verified lineage earns the one-trajectory accounting."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text, update

from service.accounting.mechanisms import parse_mechanism
from service.accounting.mechanisms.lineage import lineage_steps
from service.api.routes.plans import RECENT as RECENT_PLANS
from service.config import Settings
from service.errors import Conflict, InvalidInput
from service.ledger.charges import representatives
from service.registry import repository
from service.registry.blobs import LocalBlobStore
from service.registry.db import make_engine, make_sessionmaker
from service.registry.models import Model
from tests.conftest import Backend, blob_files
from tests.helpers import checkpoint_bytes, sgd, upload


def register(client: TestClient, ds: str, name: str, mech: dict, lineage: dict | None, seed=0):
    meta: dict = {"dataset_id": ds, "name": name, "mechanism": mech}
    if lineage is not None:
        meta["lineage"] = lineage
    return upload(client, checkpoint_bytes(seed), json.dumps(meta))


def model_count(backend: Backend) -> int:
    with backend.session_factory() as s:
        return int(s.scalar(select(func.count()).select_from(Model)) or 0)


@pytest.fixture
def ds(client: TestClient) -> str:
    return str(client.post("/v1/datasets", json={"name": "runs"}).json()["id"])


def assert_refused(resp, backend: Backend, settings: Settings, models_before: int) -> str:
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert model_count(backend) == models_before
    stored = {m for m in blob_files(settings) if not m.startswith("tmp")}
    with backend.session_factory() as s:
        referenced = set(s.scalars(select(Model.sha256)))
    assert all(any(sha in path for sha in referenced) for path in stored), stored
    return str(resp.json()["detail"])


def test_a_checkpoint_of_a_run_without_a_step_is_refused_and_nothing_stored(
    client: TestClient, ds: str, backend: Backend, settings: Settings
) -> None:
    resp = register(client, ds, "a", sgd(1.0, steps=100), {"run_id": "r"})
    detail = assert_refused(resp, backend, settings, 0)
    assert "lineage.step" in detail
    assert blob_files(settings) == []


def test_the_step_must_be_the_mechanisms_number_of_steps(
    client: TestClient, ds: str, backend: Backend, settings: Settings
) -> None:
    resp = register(client, ds, "a", sgd(1.0, steps=100), {"run_id": "r", "step": 50})
    assert "number of steps (100)" in assert_refused(resp, backend, settings, 0)
    ok = register(client, ds, "a", sgd(1.0, steps=100), {"run_id": "r", "step": 100})
    assert ok.status_code == 201 and ok.json()["lineage_verified"] is True


@pytest.mark.parametrize(
    "mech",
    [
        {"type": "epsilon_delta", "epsilon": 0.01, "delta": 1e-6},
        {"type": "rdp_curve", "orders": [2.0, 8.0], "epsilons": [0.001, 0.004]},
        {"type": "non_private"},
    ],
)
def test_mechanisms_without_steps_cannot_be_checkpoints_of_a_run(
    client: TestClient, ds: str, backend: Backend, settings: Settings, mech: dict
) -> None:
    resp = register(client, ds, "x", mech, {"run_id": "r", "step": 1})
    assert mech["type"] in assert_refused(resp, backend, settings, 0)
    alone = register(client, ds, "x", mech, None)  # as an independent model it is fine
    assert alone.status_code == 201 and alone.json()["lineage_verified"] is False


def test_a_later_checkpoint_whose_noise_differs_at_an_early_step_is_refused_naming_it(
    client: TestClient, ds: str, backend: Backend, settings: Settings
) -> None:
    first = register(client, ds, "ck100", sgd(1.0, steps=100), {"run_id": "r", "step": 100})
    assert first.status_code == 201
    noise = [1.0] * 200
    noise[2] = 0.5  # step 3 was less noisy than the registered checkpoint says
    later = {
        "type": "dp_sgd",
        "per_step": {
            "sampling_rate": 0.01,
            "noise_multiplier": noise,
            "clipping_norm": 1.0,
            "learning_rate": 0.1,
        },
    }
    resp = register(client, ds, "ck200", later, {"run_id": "r", "step": 200}, seed=1)
    detail = assert_refused(resp, backend, settings, 1)
    assert first.json()["id"] in detail and "step 3: noise_multiplier" in detail
    assert resp.json()["model_id"] == first.json()["id"] and resp.json()["step"] == 100
    # the same run spelled per step, noise 1.0 throughout: accepted, verified
    noise[2] = 1.0
    ok = register(client, ds, "ck200", later, {"run_id": "r", "step": 200}, seed=1)
    assert ok.status_code == 201, ok.text
    assert ok.json()["lineage_verified"] is True


def test_an_earlier_step_claim_with_a_different_schedule_is_refused(
    client: TestClient, ds: str, backend: Backend, settings: Settings
) -> None:
    late = register(client, ds, "ck300", sgd(1.0, steps=300), {"run_id": "r", "step": 300})
    assert late.status_code == 201
    for name, mech, field in [
        ("q", sgd(1.0, steps=100, q=0.02), "sampling_rate"),
        ("lr", sgd(1.0, steps=100, lr=0.2), "learning_rate"),
        ("clip", {**sgd(1.0, steps=100), "clipping_norm": 2.0}, "clipping_norm"),
        ("opt", sgd(1.0, steps=100, optimizer="adam"), "optimizer"),
        (
            "type",
            {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 1.0, "count": 100},
            "mechanism type",
        ),
        ("longer", sgd(1.0, steps=400, q=0.02), "step 1: sampling_rate"),
    ]:
        step = 400 if name == "longer" else 100
        resp = register(client, ds, name, mech, {"run_id": "r", "step": step}, seed=2)
        detail = assert_refused(resp, backend, settings, 1)
        assert late.json()["id"] in detail and field in detail, (name, detail)
    # a true prefix (one-segment schedule spelling) is accepted
    segment = {"steps": 100, "sampling_rate": 0.01, "noise_multiplier": 1.0}
    prefix = {
        "type": "dp_sgd",
        "schedule": [{**segment, "clipping_norm": 1.0, "learning_rate": 0.1}],
    }
    ok = register(client, ds, "ck100", prefix, {"run_id": "r", "step": 100}, seed=3)
    assert ok.status_code == 201, ok.text


def test_two_independent_runs_cannot_share_a_run_id_to_buy_the_one_trajectory_bound(
    client: TestClient, ds: str, backend: Backend, settings: Settings
) -> None:
    """The cheap run is registered first; a much less private independent run claiming to
    be its continuation is refused, so checkpoint averaging cannot hide it."""
    cheap = register(client, ds, "cheap", sgd(20.0, steps=100), {"run_id": "r", "step": 100})
    assert cheap.status_code == 201
    costly = register(client, ds, "costly", sgd(0.6, steps=200), {"run_id": "r", "step": 200}, 1)
    assert "step 1: noise_multiplier" in assert_refused(costly, backend, settings, 1)
    # registered honestly as another run, averaging across the two runs is refused
    other = register(client, ds, "costly", sgd(0.6, steps=200), {"run_id": "s", "step": 200}, 1)
    assert other.status_code == 201
    body = {"dataset_id": ds, "epsilon": 50.0, "delta": 1e-5, "method": "checkpoint_average"}
    resp = client.post("/v1/plans", json={**body, "last_k": 2})
    assert resp.status_code == 422 and "run_id" in resp.json()["detail"]
    one = client.post("/v1/plans", json={**body, "run_id": "r", "last_k": 2}).json()
    assert _ids(one) == {cheap.json()["id"]}


def _ids(plan: dict) -> set[str]:
    weights = plan["weights"]
    if isinstance(weights, dict):
        return set(weights)
    return {w["model_id"] for w in weights}


def test_unverified_checkpoints_are_independent_models(
    client: TestClient, ds: str, backend: Backend
) -> None:
    """Rows from before the check (lineage_verified false) are never averaged as one run."""
    ids = []
    for t in (100, 200):
        resp = register(client, ds, f"ck{t}", sgd(1.0, steps=t), {"run_id": "r", "step": t}, t)
        assert resp.status_code == 201
        ids.append(resp.json()["id"])
    body = {
        "dataset_id": ds,
        "epsilon": 50.0,
        "delta": 1e-5,
        "method": "checkpoint_average",
        "last_k": 2,
    }
    verified = client.post("/v1/plans", json=body)
    assert verified.status_code == 200, verified.text
    assert _ids(verified.json()) == set(ids)
    with backend.session_factory() as s:
        s.execute(update(Model).where(Model.id == ids[0]).values(lineage_verified=False))
        s.commit()
    RECENT_PLANS.clear()  # rows changed behind the API (as the migration does)
    client.app.state.ctx.plan_jobs.clear()
    partly = client.post("/v1/plans", json=body).json()
    assert _ids(partly) == {ids[1]}
    assert any("lineage not verified" in n and ids[0] in n for n in partly["notes"])
    with backend.session_factory() as s:
        s.execute(update(Model).values(lineage_verified=False))
        s.commit()
    RECENT_PLANS.clear()
    client.app.state.ctx.plan_jobs.clear()
    none = client.post("/v1/plans", json=body)
    assert none.status_code == 422 and "verified lineage" in none.json()["detail"]
    # a new checkpoint of the run is checked against verified rows only, and verified
    resp = register(client, ds, "ck300", sgd(1.0, steps=300), {"run_id": "r", "step": 300}, 3)
    assert resp.status_code == 201 and resp.json()["lineage_verified"] is True


def _row(mid: str, run: str | None, step: int | None, verified: bool) -> Model:
    return Model(id=mid, lineage_run_id=run, lineage_step=step, lineage_verified=verified)


def test_the_ledger_collapses_only_verified_checkpoints_of_a_run() -> None:
    """A crafted unverified 'later step' with a cheap mechanism must not stand in for the
    run: unverified rows are charged as independent models."""
    rows = [
        _row("a", "r", 100, True),
        _row("b", "r", 200, True),
        _row("c", "r", 10_000, False),  # unverified claim to be the run's latest
        _row("d", None, None, False),
    ]
    assert [m.id for m in representatives(rows)] == ["b", "c", "d"]


# ---- concurrency: two incompatible checkpoints against an empty run ------------------


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> Iterator[str]:
    if request.param == "sqlite":
        path = tmp_path / "race.db"
        shutil.copy(sqlite_template, path)
        yield f"sqlite:///{path}"
    else:
        yield request.getfixturevalue("committed_db")


def test_concurrent_registrations_of_one_run_cannot_both_pass(db_url: str, tmp_path: Path) -> None:
    engine = make_engine(db_url)
    factory = make_sessionmaker(engine)
    blobs = LocalBlobStore(tmp_path / "blobs")
    with factory() as s:
        ds = repository.create_dataset(session=s, name="race").id
        s.commit()
    data = [checkpoint_bytes(i) for i in range(2)]
    sigmas = (1.0, 2.0)  # same step, different noise: at most one can be the run
    barrier = threading.Barrier(2)
    out: list = [None, None]

    def slow(chunk: bytes) -> Iterator[bytes]:
        time.sleep(0.2)  # widen the window between the check and the commit
        yield chunk

    def run(i: int) -> None:
        mech = parse_mechanism(sgd(sigmas[i], steps=100))
        spec = repository.ModelSpec(
            dataset_id=ds, name=f"m{i}", version=1, mechanism=mech, run_id="r", step=100
        )
        barrier.wait()
        with factory() as s:
            try:
                out[i] = repository.register_model(
                    session=s, blobs=blobs, spec=spec, chunks=slow(data[i])
                ).id
            except (InvalidInput, Conflict) as exc:  # a second checkpoint at step 100
                s.rollback()
                out[i] = exc

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [o for o in out if isinstance(o, InvalidInput | Conflict)]
        assert len(errors) == 1, out
        with factory() as s:
            rows = list(s.scalars(select(Model).where(Model.dataset_id == ds)))
        assert len(rows) == 1 and rows[0].lineage_verified
    finally:
        engine.dispose()


def test_lineage_steps_of_each_per_step_mechanism() -> None:
    assert lineage_steps(parse_mechanism(sgd(1.0, steps=7))) == 7
    gauss = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 2.0, "count": 3}
    assert lineage_steps(parse_mechanism(gauss)) == 3
    bis = {
        "type": "balanced_iteration_subsampling",
        "iterations": 10,
        "participations": 2,
        "noise_multiplier": 1.0,
        "clipping_norm": 1.0,
        "epochs": 3,
    }
    assert lineage_steps(parse_mechanism(bis)) == 30
    assert lineage_steps(parse_mechanism({"type": "non_private"})) is None


def test_postgres_registrations_of_a_run_wait_for_the_runs_advisory_lock(
    committed_db: str, tmp_path: Path
) -> None:
    """Across processes the per-run advisory lock is what serialises: while another
    connection holds it, a registration of that run waits; other runs do not."""
    engine = make_engine(committed_db)
    factory = make_sessionmaker(engine)
    blobs = LocalBlobStore(tmp_path / "blobs")
    with factory() as s:
        ds = repository.create_dataset(session=s, name="locked").id
        s.commit()
    name = f"lineage\x00{ds}\x00r"
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    done: dict[str, threading.Event] = {r: threading.Event() for r in ("r", "other")}

    def run(run_id: str) -> None:
        spec = repository.ModelSpec(
            dataset_id=ds,
            name=f"m-{run_id}",
            version=1,
            mechanism=parse_mechanism(sgd(1.0, steps=10)),
            run_id=run_id,
            step=10,
        )
        with factory() as s:
            repository.register_model(
                session=s, blobs=blobs, spec=spec, chunks=iter([checkpoint_bytes(len(run_id))])
            )
        done[run_id].set()

    holder = engine.connect()
    try:
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        threads = [threading.Thread(target=run, args=(r,)) for r in ("r", "other")]
        for t in threads:
            t.start()
        assert done["other"].wait(30)  # another run is not held up
        assert not done["r"].wait(1.0)  # this run waits for the lock
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        assert done["r"].wait(30)
        for t in threads:
            t.join()
    finally:
        holder.close()
        engine.dispose()


def test_one_checkpoint_per_run_and_step(
    client: TestClient, ds: str, backend: Backend, settings: Settings
) -> None:
    """Two files at the same step of one run cannot both be its iterate: a second one
    would be charged as the same trajectory (the ledger keeps one per run, checkpoint
    averaging averages both for one run's price) while it may be an independent run."""
    first = register(client, ds, "a", sgd(1.0, steps=100), {"run_id": "r", "step": 100})
    assert first.status_code == 201
    again = register(client, ds, "b", sgd(1.0, steps=100), {"run_id": "r", "step": 100}, 1)
    assert again.status_code == 409, again.text
    assert again.headers["content-type"].startswith("application/problem+json")
    detail = again.json()["detail"]
    assert "step 100" in detail and first.json()["id"] in detail
    assert model_count(backend) == 1
    # another run, or the same run at another step, is fine
    other = register(client, ds, "b", sgd(1.0, steps=100), {"run_id": "s", "step": 100}, 1)
    later = register(client, ds, "c", sgd(1.0, steps=200), {"run_id": "r", "step": 200}, 2)
    assert other.status_code == 201 and later.status_code == 201


def test_the_database_refuses_two_verified_checkpoints_at_one_step(backend: Backend) -> None:
    """The rule holds in the schema too (a partial unique index over verified rows)."""
    from sqlalchemy.exc import IntegrityError

    with backend.session_factory() as s:
        ds = repository.create_dataset(session=s, name="dup").id
        s.flush()

        def row(name: str, verified: bool) -> Model:
            return Model(
                dataset_id=ds,
                name=name,
                version=1,
                mechanism={},
                mechanism_type="dp_sgd",
                mechanism_hash="0" * 64,
                lineage_run_id="r",
                lineage_step=100,
                lineage_verified=verified,
                signature={},
                signature_hash="0" * 64,
                sha256=hashlib.sha256(name.encode()).hexdigest(),
                size_bytes=1,
            )

        s.add_all([row("a", True), row("old", False)])  # an unverified row stands alone
        s.flush()
        s.add(row("b", True))
        with pytest.raises(IntegrityError):
            s.flush()
        s.rollback()
