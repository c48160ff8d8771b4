"""The sync and async Python clients by names: datasets and models by name, versions,
aliases (a deployment following one), tags, exist_ok, and NotFound's suggestions,
against a running service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from retarget.client import AsyncRetargetClient, RetargetClient
from retarget.client.errors import Conflict, NotFound
from retarget.client.transfer import sha256_of


def _checkpoint(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    save_file({"w": rng.standard_normal((8, 32)).astype(np.float32)}, str(path))
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


def test_sync_client_by_names(live_service: tuple[str, str], tmp_path: Path) -> None:
    base, key = live_service
    with RetargetClient(base, key) as rt:
        ds = rt.datasets.create("names-sync", metric="accuracy")
        assert rt.datasets.create("names-sync", metric="accuracy", exist_ok=True).id == ds.id
        with pytest.raises(Conflict):
            rt.datasets.create("names-sync", exist_ok=True)  # another metric: not the same
        assert rt.datasets.get("names-sync").id == ds.id
        files = [_checkpoint(tmp_path / f"v{v}.safetensors", v) for v in (1, 2)]
        v1 = rt.models.register(files[0], dataset_id="names-sync", name="m", mechanism=_sgd(1.5))
        again = rt.models.register(
            files[0], dataset_id="names-sync", name="m", mechanism=_sgd(1.5), exist_ok=True
        )
        assert again.id == v1.id and again.ref == "names-sync/m@1"
        v2 = rt.models.register(
            files[1], dataset_id="names-sync", name="m", mechanism=_sgd(3.0), version=2
        )
        assert rt.models.get("names-sync/m").id == v2.id  # @latest
        assert rt.models.get("names-sync/m@1").id == v1.id
        assert [m.ref for m in rt.models.list(dataset_id="names-sync").data] == [
            "names-sync/m@1",
            "names-sync/m@2",
        ]
        moved = rt.models.set_alias("names-sync/m@1", "champion")
        assert moved.alias.version == 1 and moved.retargets == []
        assert rt.models.get("names-sync/m@champion").aliases == ["champion"]
        assert rt.models.set_tags("names-sync/m@champion", {"stage": "prod", "ok": ""}) == {
            "ok": "",
            "stage": "prod",
        }
        assert rt.models.set_tags(v1.id, remove=["ok"]) == {"stage": "prod"}  # by id too
        own = rt.models.epsilon("names-sync/m@champion", delta=1e-5)
        assert own.epsilon == rt.models.epsilon(v1.id, delta=1e-5).epsilon
        got = rt.models.download("names-sync/m@champion", tmp_path / "raw.safetensors")
        assert got.sha256 == sha256_of(files[0])

        dep = rt.deployments.create(
            "names-sync-prod", None, 50.0, 1e-5, follows="names-sync/m@champion"
        )
        assert dep.follows == "names-sync/m@champion"
        first = dep.current_release_id
        moved = rt.models.set_alias("names-sync/m@2", "champion")
        assert moved.previous_version == 1
        (retarget,) = moved.retargets
        job = rt.jobs.wait(retarget["job_id"], timeout=120)
        assert job.result is not None and job.result["status"] == "changed"
        after = rt.deployments.get("names-sync-prod")
        assert after.current_release_id != first
        assert [(e.version, e.previous_version) for e in rt.models.aliases(v1.id).history] == [
            (2, 1),
            (1, None),
        ]
        with pytest.raises(Conflict):
            rt.models.delete_alias("names-sync/m", "champion")  # followed
        again_dep = rt.deployments.create(
            "names-sync-prod", "names-sync", 50.0, 1e-5, follows="m@champion", exist_ok=True
        )
        assert again_dep.current_release_id == after.current_release_id

        with pytest.raises(NotFound) as missing:
            rt.models.get("names-sync/mm")
        assert missing.value.suggestions == ["names-sync/m"]
        with pytest.raises(NotFound) as no_dataset:
            rt.datasets.get("names-snyc")
        assert no_dataset.value.suggestions == ["names-sync"]


def test_async_client_by_names(live_service: tuple[str, str], tmp_path: Path) -> None:
    base, key = live_service
    file = _checkpoint(tmp_path / "a.safetensors", 7)

    async def go() -> None:
        async with AsyncRetargetClient(base, key) as rt:
            ds = await rt.datasets.create("names-async", exist_ok=True)
            assert (await rt.datasets.create("names-async", exist_ok=True)).id == ds.id
            model = await rt.models.register(
                file, dataset_id="names-async", name="a", mechanism=_sgd(2.0), exist_ok=True
            )
            assert (await rt.models.get("names-async/a@latest")).id == model.id
            moved = await rt.models.set_alias("names-async/a@latest", "staging")
            assert moved.alias.ref == "names-async/a@staging"
            assert await rt.models.set_tags("names-async/a@staging", {"k": "v"}) == {"k": "v"}
            shown = await rt.models.aliases("names-async/a")
            assert [a.alias for a in shown.aliases] == ["staging"]
            event = await rt.models.delete_alias("names-async/a", "staging")
            assert event.version is None and event.previous_version == 1
            with pytest.raises(NotFound):
                await rt.models.get("names-async/a@staging")

    asyncio.run(go())
