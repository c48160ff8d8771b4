"""The real Hub clients against the service's /hf endpoint: huggingface_hub's
``snapshot_download`` and transformers' ``from_pretrained`` with ``HF_ENDPOINT``
load a deployment; after a policy change the same call gets the new release, and a
pinned revision (the release id) still gets the old one.

Each client runs in its own process (the Hub's endpoint is read from the
environment when the library is imported) with HF_ENDPOINT on loopback,
HF_HUB_OFFLINE=0, telemetry off and an empty cache: nothing reaches huggingface.co.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from retarget.client import RetargetClient
from service.releases.revisions import commit_of
from tests.bundle_helpers import tiny_llama
from tests.helpers import service_env, sgd

LOAD = r"""
import hashlib, json, os, sys
from pathlib import Path
from huggingface_hub import snapshot_download
from transformers import AutoModelForCausalLM

repo, revision, out = sys.argv[1], sys.argv[2], sys.argv[3]
folder = Path(snapshot_download(repo_id=repo, revision=revision, token=os.environ["KEY"]))
files = {
    p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
    for p in folder.rglob("*") if p.is_file()
}
model = AutoModelForCausalLM.from_pretrained(repo, revision=revision, token=os.environ["KEY"])
state = {k: v.float().sum().item() for k, v in model.state_dict().items()}
Path(out).write_text(json.dumps({"folder": str(folder), "files": files, "state": state}))
"""


def hub_env(base: str, key: str, home: Path) -> dict[str, str]:
    return service_env(
        HF_ENDPOINT=f"{base}/hf",
        HF_HUB_OFFLINE="0",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HOME=str(home),
        HF_HUB_ETAG_TIMEOUT="30",
        KEY=key,
        NO_PROXY="127.0.0.1,localhost",
    )


def load(base: str, key: str, home: Path, repo: str, revision: str) -> dict:
    out = home / f"load-{revision}.json"
    done = subprocess.run(
        [sys.executable, "-c", LOAD, repo, revision, str(out)],
        env=hub_env(base, key, home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text()))


def listing(base: str, key: str, release_id: str) -> dict[str, str]:
    """What the service says the release holds (path -> sha256)."""
    headers = {"Authorization": f"Bearer {key}"}
    resp = httpx.get(f"{base}/v1/releases/{release_id}/files", headers=headers)
    return {f["path"]: f["sha256"] for f in resp.json()["files"]}


def state_of(folder: Path) -> dict[str, float]:
    from safetensors.torch import load_file

    out: dict[str, float] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update({k: v.float().sum().item() for k, v in load_file(path).items()})
    return out


@pytest.fixture(scope="module")
def llamas(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("hub-llamas")
    return [tiny_llama(root / f"llama{i}", seed=i) for i in range(2)]


def test_hub_clients_load_a_deployment_and_keep_a_pinned_revision(
    live_service: tuple[str, str], llamas: list[Path], tmp_path: Path
) -> None:
    base, key = live_service
    with RetargetClient(base, key) as rt:
        ds = rt.datasets.create("hub")
        models = [
            rt.models.register(folder, dataset_id=ds.id, name=f"l{i}", mechanism=sgd(s))
            for i, (folder, s) in enumerate(zip(llamas, (1.0, 1.2), strict=True))
        ]
        eps = rt.models.epsilon(models[0].id).epsilon
        dep = rt.deployments.create("hub-chat", ds.id, eps, 1e-5, method="rs")
        first = dep.current_release_id or ""
        home = tmp_path / "hf-home"
        loaded = load(base, key, home, "hub-chat", "main")
        assert Path(loaded["folder"]).name == commit_of(first)  # cached under the commit
        assert loaded["files"] == listing(base, key, first)
        served = tmp_path / "served"
        rt.releases.download_folder(first, served)
        assert loaded["state"] == pytest.approx(state_of(served), abs=0)

        moved = rt.deployments.set_policy("hub-chat", eps * 3, 1e-5)
        second = moved.current_release_id or ""
        assert second and second != first
        again = load(base, key, home, "hub-chat", "main")  # the same call, the same cache
        assert Path(again["folder"]).name == commit_of(second)
        assert again["files"] == listing(base, key, second)
        assert again["files"]["privacy.json"] != loaded["files"]["privacy.json"]
        pinned = load(base, key, home, "hub-chat", first)
        assert Path(pinned["folder"]).name == commit_of(first)
        assert pinned["files"] == loaded["files"] and pinned["state"] == loaded["state"]
        by_id = load(base, key, tmp_path / "other-home", f"releases/{second}", "main")
        assert by_id["files"] == again["files"]
        assert hashlib.sha256(b"").hexdigest() not in by_id["files"].values()
