"""Bundles through the CLI and the Python client against a running service: a 3-shard
Llama and a PEFT LoRA adapter (tiny, built here) registered from their folders,
served by deployments, pulled into folders and loaded by transformers and peft;
an interrupted upload resumed; a charged model download asked for first."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from retarget.client import AsyncRetargetClient, RetargetClient
from retarget.client.folders import RECORD
from tests.bundle_helpers import tiny_llama, tiny_lora
from tests.helpers import service_env, sgd

CLI = [sys.executable, "-m", "retarget.cli"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bundles")
    llama = tiny_llama(root / "llama", seed=0)
    lora = tiny_lora(root / "lora", llama, seed=10, r=2, alpha=4)
    return {"llama": llama, "lora": lora}


def cli(args: list[str], base: str, key: str, cwd: Path) -> dict:
    env = service_env(RETARGET_URL=base, RETARGET_API_KEY=key)
    out = subprocess.run(
        [*CLI, *args, "--json"], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(path))
    return out


def same_weights(model: torch.nn.Module, folder: Path) -> None:
    saved = tensors(folder)
    state = model.state_dict()
    for name, value in saved.items():
        assert torch.equal(state[name], value), name


def test_the_cli_round_trips_a_sharded_llama_and_a_lora_adapter(
    live_service: tuple[str, str], folders: dict[str, Path], tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, key = live_service
    shards = [p for p in folders["llama"].iterdir() if p.suffix == ".safetensors"]
    assert len(shards) >= 3
    (tmp_path / "mech.json").write_text(json.dumps(sgd(1.0)))
    for kind in ("llama", "lora"):
        ds = cli(["datasets", "create", f"cli-{kind}"], base, key, tmp_path)
        model = cli(
            [
                *("models", "register", str(folders[kind]), "--dataset", ds["id"]),
                *("--name", kind, "--mechanism", "@mech.json"),
            ],
            base,
            key,
            tmp_path,
        )
        local = {p.name: sha(p) for p in folders[kind].iterdir()}
        assert {f["path"]: f["sha256"] for f in model["files"]} == local
        assert model["kind"] == ("peft_lora" if kind == "lora" else "hf_bundle")
        eps = cli(["models", "epsilon", model["id"]], base, key, tmp_path)["epsilon"]
        dep = cli(
            [
                *("deployments", "create", f"cli-{kind}", "--dataset", ds["id"]),
                *("--epsilon", str(eps), "--delta", "1e-5"),
            ],
            base,
            key,
            tmp_path,
        )
        out = tmp_path / f"pulled-{kind}"
        pulled = cli(["deployments", "pull", dep["name"], "-o", str(out)], base, key, tmp_path)
        assert pulled["release_id"] == dep["current_release_id"] and pulled["changed"]
        again = cli(["deployments", "pull", dep["name"], "-o", str(out)], base, key, tmp_path)
        assert again["changed"] is False  # every file current: nothing sent again
        if kind == "llama":
            same_weights(AutoModelForCausalLM.from_pretrained(out), folders["llama"])
        else:
            base_model = AutoModelForCausalLM.from_pretrained(folders["llama"])
            adapter = PeftModel.from_pretrained(base_model, out)
            lora = {n: t for n, t in adapter.state_dict().items() if "lora_" in n}
            saved = tensors(folders["lora"])
            assert len(lora) == len(saved) > 0
            for name, value in lora.items():
                key_name = name.replace(".default", "")
                assert torch.equal(saved[key_name], value), name
        listing = cli(["releases", "list", "--dataset", ds["id"]], base, key, tmp_path)
        assert [r["release_id"] for r in listing["data"]] == [dep["current_release_id"]]
        copy = tmp_path / f"release-{kind}"
        got = cli(
            ["releases", "download", dep["current_release_id"], "-o", str(copy)],
            base,
            key,
            tmp_path,
        )
        assert {Path(f["path"]).name for f in got["files"]} == {
            p.name for p in out.iterdir() if p.name != RECORD
        }


def test_an_interrupted_folder_upload_sends_only_what_is_missing(
    live_service: tuple[str, str], folders: dict[str, Path]
) -> None:
    base, key = live_service
    files = sorted(p for p in folders["llama"].iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    sent_before = files[: len(files) // 2]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
        for path in sent_before:  # an earlier run sent these, then stopped
            resp = http.put(f"/v1/uploads/{sha(path)}", content=path.read_bytes())
            assert resp.status_code == 201, resp.text
    seen: list[tuple[int, int | None]] = []
    with RetargetClient(base, key) as rt:
        ds = rt.datasets.create("resumed")
        model = rt.models.register(
            folders["llama"],
            dataset_id=ds.id,
            name="resumed",
            mechanism=sgd(1.0),
            progress=lambda done, of: seen.append((done, of)),
        )
    assert model.kind == "hf_bundle" and model.size_bytes == total
    already = sum(p.stat().st_size for p in sent_before)
    assert seen[0] == (already, total)  # counted as done, never sent again
    assert seen[-1] == (total, total)


def test_the_async_client_registers_and_pulls_a_folder(
    live_service: tuple[str, str], folders: dict[str, Path], tmp_path: Path
) -> None:
    base, key = live_service

    async def run() -> None:
        async with AsyncRetargetClient(base, key) as rt:
            ds = await rt.datasets.create("async-bundles")
            model = await rt.models.register(
                folders["lora"], dataset_id=ds.id, name="lora", mechanism=sgd(1.0)
            )
            eps = (await rt.models.epsilon(model.id)).epsilon
            dep = await rt.deployments.create("async-lora", ds.id, eps, 1e-5)
            out = tmp_path / "async"
            pulled = await rt.deployments.pull_folder(dep.name, out)
            assert pulled.release_id == dep.current_release_id
            release = await rt.releases.get(dep.current_release_id or "")
            assert release.kind == "peft_lora"
            for f in pulled.files:
                assert sha(f.path) == f.sha256
            assert (out / "adapter_config.json").is_file()
            page = await rt.releases.list(dataset_id=ds.id)
            assert page.count == 1

    asyncio.run(run())


def test_a_model_download_says_it_is_charged_and_asks_first(
    live_service: tuple[str, str], folders: dict[str, Path], tmp_path: Path
) -> None:
    base, key = live_service
    with RetargetClient(base, key) as rt:
        ds = rt.datasets.create("charged")
        model = rt.models.register(
            folders["lora"], dataset_id=ds.id, name="lora", mechanism=sgd(1.0)
        )
        env = service_env(RETARGET_URL=base, RETARGET_API_KEY=key)
        refused = subprocess.run(
            [*CLI, "models", "download", model.id, "-o", str(tmp_path / "m")],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert refused.returncode == 2 and "--yes" in refused.stderr
        assert "ledger" in refused.stderr
        assert rt.datasets.ledger(ds.id).model_dump()["exposures"] == []  # nothing charged
        got = cli(
            ["models", "download", model.id, "-o", str(tmp_path / "m"), "--yes"],
            base,
            key,
            tmp_path,
        )
        assert {Path(f["path"]).name: f["sha256"] for f in got["files"]} == {
            p.name: sha(p) for p in folders["lora"].iterdir()
        }
        ledger = rt.datasets.ledger(ds.id).model_dump()
        assert [e["model_ids"] for e in ledger["exposures"]] == [[model.id]]
        assert model.id in ledger["exposed_model_ids"]
