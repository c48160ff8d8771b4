"""The Python client (sync and async), the Opacus recorder's registration, a client
generated from openapi/openapi.json, and the docs pages, against a running service."""

from __future__ import annotations

import asyncio
import importlib
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from retarget.client import AsyncRetargetClient, RetargetClient
from retarget.client.errors import InfeasibleTarget, NotFound, RequestValidationError
from retarget.client.transfer import part_of, sha256_of

ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(path: Path, seed: int, rows: int = 8) -> Path:
    rng = np.random.default_rng(seed)
    save_file({"w": rng.standard_normal((rows, 1024)).astype(np.float32)}, str(path))
    return path


def _sgd(sigma: float) -> dict:
    return {
        "type": "dp_sgd",
        "sampling_rate": 0.01,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "steps": 200,
        "learning_rate": 0.1,
    }


def test_sync_client_round_trip_resumes_and_types_errors(
    live_service: tuple[str, str], tmp_path: Path
) -> None:
    base, key = live_service
    with RetargetClient(base, key) as rt:
        ds = rt.datasets.create("py-client")
        seen: list[tuple[int, int | None]] = []
        a = rt.models.register(
            _checkpoint(tmp_path / "a.safetensors", 0, rows=512),
            dataset_id=ds.id,
            name="a",
            mechanism=_sgd(1.0),
            progress=lambda done, total: seen.append((done, total)),
        )
        assert seen and seen[-1][0] == seen[-1][1] == (tmp_path / "a.safetensors").stat().st_size
        b = rt.models.register(
            _checkpoint(tmp_path / "b.safetensors", 1, rows=512),
            dataset_id=ds.id,
            name="b",
            mechanism=_sgd(3.0),
            extra={"claimed": {"epsilon": 50.0, "delta": 1e-5}},  # passed through as it is
        )
        assert b.model_dump()["claimed"] == {"epsilon": 50.0, "delta": 1e-5}
        eps = rt.models.epsilon(a.id, delta=1e-5).epsilon
        with pytest.raises(InfeasibleTarget) as info:
            rt.plans.create(ds.id, 0.001, 1e-5)
        assert info.value.min_epsilon is not None and info.value.status == 422
        with pytest.raises(NotFound):
            rt.models.get("no-such-model")
        with pytest.raises(RequestValidationError) as bad:
            rt.plans.create(ds.id, -1.0, 1e-5)
        assert bad.value.errors and bad.value.errors[0]["field"] == "epsilon"
        release = rt.releases.create(ds.id, eps, 1e-5, method="rs")
        assert (
            release.created and rt.releases.create(ds.id, eps, 1e-5, method="rs").created is False
        )
        target = tmp_path / "out" / "merged.safetensors"
        first = rt.releases.download(release.release_id, target)
        assert first.sha256 == release.sha256 == sha256_of(target)
        # an interrupted download: half the bytes left as .part, with the ETag
        whole = target.read_bytes()
        target.unlink()
        part_of(target).write_bytes(whole[: len(whole) // 2])
        target.with_name(target.name + ".part.etag").write_text(f'"{release.sha256}"')
        resumed = rt.releases.download(release.release_id, target)
        assert resumed.resumed_from == len(whole) // 2
        assert target.read_bytes() == whole and not part_of(target).exists()
        ledger = rt.datasets.ledger(ds.id)
        assert release.release_id in [r["release_id"] for r in ledger.releases]
        assert rt.models.list(dataset_id=ds.id).count == 2


def test_async_client(live_service: tuple[str, str], tmp_path: Path) -> None:
    base, key = live_service

    async def run() -> None:
        async with AsyncRetargetClient(base, key) as rt:
            ds = await rt.datasets.create("py-async")
            m = await rt.models.register(
                _checkpoint(tmp_path / "m.safetensors", 2),
                dataset_id=ds.id,
                name="m",
                mechanism=_sgd(1.5),
            )
            eps = (await rt.models.epsilon(m.id)).epsilon
            dep = await rt.deployments.create("async-dep", ds.id, eps, 1e-5)
            got = await rt.deployments.pull(dep.name, tmp_path / "pulled.safetensors")
            assert got.sha256 == m.sha256  # one model: the release is that model
            page = await rt.deployments.list()
            assert "async-dep" in [d.name for d in page.data]
            with pytest.raises(NotFound):
                await rt.deployments.get("nope")

    asyncio.run(run())


def test_an_opacus_run_registered_through_the_recorder(
    live_service: tuple[str, str],
) -> None:
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    from retarget.opacus import OpacusRecorder, register_checkpoint

    torch.manual_seed(0)
    x = torch.randn(512, 10)
    y = (x[:, 0] + x[:, 1] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(10, 2))
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
            data_loader=DataLoader(TensorDataset(x, y), batch_size=64),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
        )
    recorder = OpacusRecorder.attach(optimizer, loader)
    for _ in range(4):
        for xb, yb in loader:
            optimizer.zero_grad()
            if len(xb):
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    base, key = live_service
    delta = 1e-5
    with RetargetClient(base, key) as rt:
        ds = rt.datasets.create("opacus-run")
        registered = register_checkpoint(rt, model, recorder, dataset_id=ds.id, name="opacus")
        assert registered.lineage == {"run_id": recorder.run_id, "step": len(recorder.steps)}
        ours = rt.models.epsilon(registered.id, delta=delta).epsilon
    optimistic = (
        pldlib.from_gaussian_mechanism(
            1.0, sampling_prob=loader.sample_rate, pessimistic_estimate=False
        )
        .self_compose(len(recorder.steps))
        .get_epsilon_for_delta(delta)
    )
    assert optimistic <= ours <= engine.accountant.get_epsilon(delta)


def test_a_generated_client_works_against_the_service(
    live_service: tuple[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "post_hooks: []\nproject_name_override: generated\npackage_name_override: generated\n"
    )
    generator = shutil.which("openapi-python-client") or str(
        Path(sys.executable).parent / "openapi-python-client"
    )
    subprocess.run(
        [
            generator,
            "generate",
            "--path",
            str(ROOT / "openapi" / "openapi.json"),
            "--output-path",
            str(tmp_path / "generated"),
            "--meta",
            "none",
            "--config",
            str(config),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        gen = importlib.import_module("generated")
        from generated.api.datasets import datasets_create, datasets_list
        from generated.api.models import models_register
        from generated.api.plans import plans_create
        from generated.models import DatasetCreate, ModelCreate, ModelsRegisterBody, PlanRequest
        from generated.types import File

        base, key = live_service
        client = gen.AuthenticatedClient(base_url=base, token=key)
        ds = datasets_create.sync(client=client, body=DatasetCreate(name="generated"))
        assert ds.name == "generated"
        path = _checkpoint(tmp_path / "g.safetensors", 5)
        meta = ModelCreate.from_dict({"dataset_id": ds.id, "name": "g", "mechanism": _sgd(1.0)})
        with path.open("rb") as f:
            body = ModelsRegisterBody(
                metadata=meta, weights=File(payload=f, file_name="g.safetensors")
            )
            model = models_register.sync(client=client, body=body)
        assert model.sha256 == sha256_of(path)
        assert model.mechanism.to_dict()["type"] == "dp_sgd"
        plan = plans_create.sync(
            client=client,
            body=PlanRequest.from_dict({"dataset_id": ds.id, "epsilon": 50.0, "delta": 1e-5}),
        )
        assert [w.model_id for w in plan.weights] == [model.id]
        listing = datasets_list.sync(client=client)
        assert "generated" in [d.name for d in listing.data]
        problem = plans_create.sync(
            client=client,
            body=PlanRequest.from_dict({"dataset_id": ds.id, "epsilon": 0.001, "delta": 1e-5}),
        )
        assert problem.type_ == "urn:retarget:problem:infeasible-target"
        assert problem.min_epsilon is not None
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "generated" or m.startswith("generated.")]:
            del sys.modules[name]


def test_the_docs_pages_are_served_from_packaged_files(live_service: tuple[str, str]) -> None:
    """With ``RETARGET_DOCS=true`` (the live service sets it), no CDN is needed."""
    base, _ = live_service
    docs = httpx.get(f"{base}/docs")
    assert docs.status_code == 200 and "/docs-assets/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower()
    redoc = httpx.get(f"{base}/redoc")
    assert redoc.status_code == 200 and "/docs-assets/redoc.standalone.js" in redoc.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        got = httpx.get(f"{base}/docs-assets/{asset}")
        assert got.status_code == 200 and len(got.content) > 10_000
