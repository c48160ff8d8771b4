"""Bundles end to end: sharded Hugging Face models and PEFT LoRA adapters registered,
released by LC and RS, downloaded as a tar and loaded by transformers and peft.

The models are tiny Llamas built here (nothing is downloaded)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors import safe_open
from safetensors.torch import load_file

from service.config import Settings
from tests.bundle_helpers import tiny_llama, tiny_lora, upload_bundle
from tests.conftest import Backend, authorize, blob_files
from tests.helpers import sgd

SIGMAS = (1.0, 1.2)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bundles")
    llamas = [tiny_llama(root / f"llama{i}", seed=i) for i in range(2)]
    loras = [
        tiny_lora(root / "lora0", llamas[0], seed=10, r=2, alpha=4),
        # rsLoRA: scaling lora_alpha / sqrt(r), folded in as well
        tiny_lora(root / "lora1", llamas[0], seed=11, r=4, alpha=2, rslora=True),
    ]
    return {"llama0": llamas[0], "llama1": llamas[1], "lora0": loras[0], "lora1": loras[1]}


def meta(ds: str, name: str, sigma: float) -> dict:
    return {"dataset_id": ds, "name": name, "mechanism": sgd(sigma)}


def register(client: TestClient, folders: dict[str, Path], names: list[str]) -> dict:
    ds = client.post("/v1/datasets", json={"name": "chat"}).json()["id"]
    ids = []
    for name, sigma in zip(names, SIGMAS, strict=True):
        resp = upload_bundle(client, folders[name], meta(ds, name, sigma))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    return {"dataset": ds, "ids": ids}


def release(client: TestClient, reg: dict, method: str, **extra: object) -> dict:
    body = {
        "dataset_id": reg["dataset"],
        "model_ids": reg["ids"],
        "epsilon": 3.0,
        "delta": 1e-5,
        "method": method,
        **extra,
    }
    resp = client.post("/v1/retarget", json=body)
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def extract(client: TestClient, url: str, into: Path) -> Path:
    resp = client.get(url)
    assert resp.status_code == 200, resp.text[:300]
    assert resp.headers["content-type"] == "application/x-tar"
    assert int(resp.headers["content-length"]) == len(resp.content)
    with tarfile.open(fileobj=io.BytesIO(resp.content)) as tar:
        tar.extractall(into, filter="data")
    return into


def weights_of(release: dict, ids: list[str]) -> list[float]:
    by_id = {w["model_id"]: w["weight"] for w in release["weights"]}
    return [by_id.get(m, 0.0) for m in ids]


def state(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(path))
    return out


def test_a_sharded_bundle_is_registered_with_its_files_and_one_signature(
    client: TestClient, folders: dict[str, Path]
) -> None:
    reg = register(client, folders, ["llama0"] * 1 + ["llama1"])
    model = client.get(f"/v1/models/{reg['ids'][0]}").json()
    assert model["kind"] == "hf_bundle"
    paths = {f["path"]: f for f in model["files"]}
    local = {p.name for p in folders["llama0"].iterdir()}
    assert set(paths) == local
    assert len([p for p in paths if p.endswith(".safetensors")]) >= 3
    assert model["size_bytes"] == sum(p.stat().st_size for p in folders["llama0"].iterdir())
    assert set(model["signature"]) == set(state(folders["llama0"]))
    # the raw-weights endpoint serves single files only
    resp = client.get(f"/v1/models/{reg['ids'][0]}/weights")
    assert resp.status_code == 422 and "bundle" in resp.json()["detail"]


def reshape_q_proj(folder: Path) -> None:
    """A shard whose tensor was reshaped against config.json (the same bytes, the index
    still right): safetensors loads it, transformers refuses it."""
    from safetensors.torch import save_file

    name = "model.layers.0.self_attn.q_proj.weight"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = folder / index["weight_map"][name]
    tensors = load_file(shard)
    tensors[name] = tensors[name].reshape(8, -1).contiguous()
    save_file(tensors, shard, metadata={"format": "pt"})


def keep_one_shard(folder: Path) -> None:
    """One shard of a sharded checkpoint registered as a whole model."""
    (folder / "model.safetensors.index.json").unlink()
    for shard in sorted(folder.glob("model-*-of-*.safetensors"))[1:]:
        shard.unlink()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (reshape_q_proj, "config.json makes it [16, 16]"),
        (keep_one_shard, "partial checkpoint"),
        (lambda f: (f / "pytorch_model.bin").write_bytes(b"\x80\x02"), "pickle"),
        (lambda f: (f / "model.safetensors.index.json").unlink(), "index"),
        (lambda f: (f / "notes.exe").write_bytes(b"MZ"), "not a file a bundle holds"),
        (
            lambda f: (f / "model.safetensors.index.json").write_text(
                json.dumps({"weight_map": {"x": "model-00001-of-00003.safetensors"}})
            ),
            "names shards",
        ),
    ],
)
def test_bundles_that_are_not_safe_or_consistent_are_refused(
    client: TestClient, folders: dict[str, Path], tmp_path: Path, change, expected: str
) -> None:
    import shutil

    folder = shutil.copytree(folders["llama0"], tmp_path / "copy")
    change(folder)
    ds = client.post("/v1/datasets", json={"name": "bad"}).json()["id"]
    resp = upload_bundle(client, folder, meta(ds, "bad", 1.0))
    assert resp.status_code == 422, resp.text
    assert expected in resp.json()["detail"]
    assert client.get("/v1/models", params={"dataset_id": ds}).json()["count"] == 0


def test_a_path_outside_the_bundle_is_refused(client: TestClient, folders: dict[str, Path]) -> None:
    ds = client.post("/v1/datasets", json={"name": "bad"}).json()["id"]
    files = [("files", ("../config.json", b"{}", "application/json"))]
    files += [("files", ("model.safetensors", (folders["llama0"] / "config.json").read_bytes()))]
    resp = client.post("/v1/models", files=files, data={"metadata": json.dumps(meta(ds, "x", 1))})
    assert resp.status_code == 422, resp.text
    assert "relative path" in resp.json()["detail"]


def test_lc_of_sharded_llamas_loads_in_transformers_and_equals_the_weighted_sum(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    reg = register(client, folders, ["llama0", "llama1"])
    rel = release(client, reg, "lc")
    assert rel["kind"] == "hf_bundle"
    lam = weights_of(rel, reg["ids"])
    assert sum(1 for w in lam if w > 0) == 2, rel["weights"]
    out = extract(client, rel["archive_url"], tmp_path / "out")
    listing = client.get(rel["files_url"]).json()
    assert {f["path"] for f in listing["files"]} == {
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
    }
    # sidecars are copied byte for byte; the model card is the release's own
    for sidecar in ("config.json", "generation_config.json", "tokenizer_config.json"):
        assert (out / sidecar).read_bytes() == (folders["llama0"] / sidecar).read_bytes()
    card = (out / "README.md").read_text()
    assert rel["release_id"] in card and "model 0" not in card
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] == rel["epsilon"] and privacy["method"] == "lc"
    # every shard carries the provenance and the inputs' metadata
    for shard in out.glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as fh:
            md = fh.metadata()
        assert float(md["retarget.epsilon"]) == rel["epsilon"] and md["format"] == "pt"
        assert md["retarget.release_id"] == rel["release_id"]
    loaded = AutoModelForCausalLM.from_pretrained(out).state_dict()
    inputs = [state(folders["llama0"]), state(folders["llama1"])]
    for name, merged in state(out).items():
        expected = lam[0] * inputs[0][name].double() + lam[1] * inputs[1][name].double()
        torch.testing.assert_close(merged.double(), expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(loaded[name].double(), expected, rtol=1e-6, atol=1e-6)
    # one file, with ETag and Range
    shard = sorted(out.glob("*.safetensors"))[0].name
    resp = client.get(f"{rel['files_url']}/{shard}", headers={"Range": "bytes=0-7"})
    assert resp.status_code == 206 and resp.content == (out / shard).read_bytes()[:8]
    url = f"{rel['files_url']}/{shard}"
    etag = client.get(url).headers["etag"]
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert client.get(f"{rel['files_url']}/nothing.json").status_code == 404
    assert client.get(rel["download_url"]).status_code == 422


def test_max_shard_size_reshards_and_rewrites_the_index(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    reg = register(client, folders, ["llama0", "llama1"])
    rel = release(client, reg, "lc", max_shard_size=4096, dtype="bfloat16")
    out = extract(client, rel["archive_url"], tmp_path / "out")
    shards = sorted(out.glob("*.safetensors"))
    assert len(shards) >= 3
    assert all(p.stat().st_size <= 4096 + 4096 for p in shards)  # data + header
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {p.name for p in shards}
    merged = state(out)
    assert all(t.dtype == torch.bfloat16 for t in merged.values())
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).state_dict()
    lam = weights_of(rel, reg["ids"])
    inputs = [state(folders["llama0"]), state(folders["llama1"])]
    for name, tensor in merged.items():
        expected = (lam[0] * inputs[0][name] + lam[1] * inputs[1][name]).to(torch.bfloat16)
        torch.testing.assert_close(tensor, expected, rtol=1e-2, atol=1e-2)
        assert torch.equal(loaded[name], tensor)


def test_rs_serves_the_drawn_bundle(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    reg = register(client, folders, ["llama0", "llama1"])
    rel = release(client, reg, "rs")
    out = extract(client, rel["archive_url"], tmp_path / "out")
    drawn = [
        name
        for name in ("llama0", "llama1")
        if all(
            (out / p.name).read_bytes() == p.read_bytes()
            for p in folders[name].glob("*.safetensors")
        )
    ]
    assert len(drawn) == 1
    assert (out / "README.md").read_text() != (folders[drawn[0]] / "README.md").read_text()
    assert json.loads((out / "privacy.json").read_text())["method"] == "rs"


def test_sidecars_that_differ_are_named(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    other = shutil.copytree(folders["llama1"], tmp_path / "other")
    (other / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    ds = client.post("/v1/datasets", json={"name": "mixed"}).json()["id"]
    ids = [
        upload_bundle(client, folder, meta(ds, f"m{i}", s)).json()["id"]
        for i, (folder, s) in enumerate(zip((folders["llama0"], other), SIGMAS, strict=True))
    ]
    body = {"dataset_id": ds, "model_ids": ids, "epsilon": 3.0, "delta": 1e-5, "method": "lc"}
    resp = client.post("/v1/retarget", json=body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["files"] == ["tokenizer_config.json"]
    assert client.get(f"/v1/datasets/{ds}/ledger").json()["releases"] == []


def test_lc_of_lora_adapters_is_exact_and_loads_in_peft(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    reg = register(client, folders, ["lora0", "lora1"])
    model = client.get(f"/v1/models/{reg['ids'][0]}").json()
    assert model["kind"] == "peft_lora"
    rel = release(client, reg, "lc")
    assert rel["kind"] == "peft_lora"
    lam = weights_of(rel, reg["ids"])
    assert sum(1 for w in lam if w > 0) == 2, rel["weights"]
    out = extract(client, rel["archive_url"], tmp_path / "out")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 6 and config["lora_alpha"] == 6
    with safe_open(str(out / "adapter_model.safetensors"), framework="pt") as fh:
        assert float(fh.metadata()["retarget.epsilon"]) == rel["epsilon"]

    def merged(adapter: Path) -> dict[str, torch.Tensor]:
        base = AutoModelForCausalLM.from_pretrained(folders["llama0"])
        return PeftModel.from_pretrained(base, adapter).merge_and_unload().state_dict()

    base = AutoModelForCausalLM.from_pretrained(folders["llama0"]).state_dict()
    singles = [merged(folders["lora0"]), merged(folders["lora1"])]
    released = merged(out)
    touched = 0
    for name, w0 in base.items():
        # the effective delta-W of the release is the weighted sum of the adapters' deltas
        w0d = w0.double()
        delta = sum(w * (s[name].double() - w0d) for w, s in zip(lam, singles, strict=True))
        got = released[name].double() - w0d
        torch.testing.assert_close(got, delta, rtol=1e-5, atol=1e-6)
        touched += int(delta.abs().max() > 0)
    assert touched == 4  # q_proj and v_proj of both layers


def test_lora_adapters_of_other_base_models_are_refused(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    other = shutil.copytree(folders["lora1"], tmp_path / "other")
    config = json.loads((other / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "another-base"
    (other / "adapter_config.json").write_text(json.dumps(config))
    ds = client.post("/v1/datasets", json={"name": "loras"}).json()["id"]
    ids = [
        upload_bundle(client, folder, meta(ds, f"m{i}", s)).json()["id"]
        for i, (folder, s) in enumerate(zip((folders["lora0"], other), SIGMAS, strict=True))
    ]
    body = {"dataset_id": ds, "model_ids": ids, "epsilon": 3.0, "delta": 1e-5, "method": "lc"}
    resp = client.post("/v1/retarget", json=body)
    assert resp.status_code == 422, resp.text
    assert "base_model_name_or_path" in resp.json()["detail"]


def test_a_bundle_over_the_size_limit_is_413_and_stores_nothing(
    tmp_path: Path, backend: Backend, folders: dict[str, Path]
) -> None:
    from service.api.app import create_app

    total = sum(p.stat().st_size for p in folders["llama0"].iterdir())
    small = Settings(
        data_dir=tmp_path / "small",
        database_url=backend.url,
        max_upload_bytes=total - 100,  # every file fits, the bundle does not
        auto_migrate=False,
    )
    with TestClient(create_app(small, session_factory=backend.session_factory)) as c:
        authorize(c, backend.session_factory)
        ds = c.post("/v1/datasets", json={"name": "big"}).json()["id"]
        resp = upload_bundle(c, folders["llama0"], meta(ds, "big", 1.0))
        assert resp.status_code == 413, resp.text
        assert c.get("/v1/models", params={"dataset_id": ds}).json()["count"] == 0
    assert blob_files(small) == []


def test_a_deployment_serves_its_bundle(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    reg = register(client, folders, ["llama0", "llama1"])
    body = {"name": "chat", "dataset_id": reg["dataset"], "epsilon": 3.0, "delta": 1e-5}
    resp = client.post("/v1/deployments", json={**body, "method": "lc"})
    assert resp.status_code == 201, resp.text
    assert resp.json()["archive_url"] == "/v1/deployments/chat/archive"
    listing = client.get("/v1/deployments/chat/files").json()
    assert listing["kind"] == "hf_bundle"
    out = extract(client, "/v1/deployments/chat/archive", tmp_path / "out")
    assert {f["path"] for f in listing["files"]} == {p.name for p in out.iterdir()}
    AutoModelForCausalLM.from_pretrained(out)  # loads
    etag = client.get("/v1/deployments/chat/archive").headers["etag"]
    resp = client.get("/v1/deployments/chat/archive", headers={"If-None-Match": etag})
    assert resp.status_code == 304
    config = client.get("/v1/deployments/chat/files/config.json")
    assert config.content == (folders["llama0"] / "config.json").read_bytes()
    assert client.get("/v1/deployments/chat/model").status_code == 422


def test_the_dashboard_serves_no_bundle_as_one_file_and_charges_nothing(
    client: TestClient, folders: dict[str, Path]
) -> None:
    from service.dashboard.auth import COOKIE

    reg = register(client, folders, ["llama0", "llama1"])
    rel = release(client, reg, "lc")
    signer = client.app.state.session_signer  # type: ignore[attr-defined]
    admin = client.post("/v1/keys", json={"name": "boss", "scopes": ["admin"]}).json()
    cookie = signer.issue(admin["id"], 0)
    client.cookies.set(COOKIE, cookie, path="/admin")
    for method, url in (
        ("POST", f"/admin/models/{reg['ids'][0]}/weights"),
        ("GET", f"/admin/releases/{rel['release_id']}/weights"),
    ):
        form = {"csrf": signer.session_csrf(cookie)} if method == "POST" else None
        resp = client.request(method, url, data=form)
        assert resp.status_code == 422 and "bundle" in resp.text, (url, resp.text[:200])
    ledger = client.get(f"/v1/datasets/{reg['dataset']}/ledger").json()
    assert ledger["exposures"] == []


def test_files_in_folders_keep_their_paths(
    client: TestClient, folders: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    folder = shutil.copytree(folders["llama0"], tmp_path / "copy")
    (folder / "tokenizer").mkdir()
    (folder / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    ds = client.post("/v1/datasets", json={"name": "nested"}).json()["id"]
    resp = upload_bundle(client, folder, meta(ds, "nested", 1.0))
    assert resp.status_code == 201, resp.text
    paths = [f["path"] for f in resp.json()["files"]]
    assert "tokenizer/vocab.txt" in paths


def test_bytes_a_bundle_holds_count_as_referenced(
    client: TestClient, backend: Backend, folders: dict[str, Path]
) -> None:
    """A failed registration removes its blob only when no row names those bytes: a
    bundle's file (model or release) names them too, on SQLite and Postgres alike."""
    from service.registry.repository import _blob_referenced

    reg = register(client, folders, ["llama0", "llama1"])
    files = client.get(f"/v1/models/{reg['ids'][0]}").json()["files"]
    shard = next(f["sha256"] for f in files if f["path"].endswith(".safetensors"))
    released = release(client, reg, "lc")
    released_files = client.get(released["files_url"]).json()["files"]
    assert released_files  # an LC of bundles is a bundle
    with backend.session_factory() as session:
        assert _blob_referenced(session, shard)
        for f in released_files:
            assert _blob_referenced(session, f["sha256"])
        assert not _blob_referenced(session, "0" * 64)


def test_one_shard_sent_as_the_weights_part_is_refused(
    client: TestClient, folders: dict[str, Path]
) -> None:
    ds = client.post("/v1/datasets", json={"name": "bad"}).json()["id"]
    shard = sorted(folders["llama0"].glob("model-*-of-*.safetensors"))[0]
    resp = client.post(
        "/v1/models",
        files={"weights": (shard.name, shard.read_bytes(), "application/octet-stream")},
        data={"metadata": json.dumps(meta(ds, "one-shard", 1.0))},
    )
    assert resp.status_code == 422, resp.text
    assert "partial checkpoint" in resp.json()["detail"] and shard.name in resp.text
    assert client.get("/v1/models", params={"dataset_id": ds}).json()["count"] == 0


def test_lc_of_models_whose_tensors_differ_names_both_and_the_first_tensor(
    client: TestClient,
) -> None:
    from tests.helpers import checkpoint_bytes, upload

    ds = client.post("/v1/datasets", json={"name": "mixed"}).json()["id"]
    shapes = [
        {"linear.weight": (10, 64), "linear.bias": (10,)},
        {"linear.weight": (10, 32), "linear.bias": (10,)},
    ]
    ids = []
    for i, shape in enumerate(shapes):
        resp = upload(client, checkpoint_bytes(i, shape), json.dumps(meta(ds, f"net{i}", 1.0)))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    body = {"dataset_id": ds, "model_ids": ids, "epsilon": 3.0, "delta": 1e-5, "method": "lc"}
    resp = client.post("/v1/retarget", json=body)
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    assert "net0" in detail and "net1" in detail, detail
    assert "'linear.weight'" in detail and "[10, 64] F32" in detail and "[10, 32] F32" in detail
