"""`retarget serve` as a user starts it: a real process on loopback, embedded defaults."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx2

from tests.helpers import checkpoint_bytes, model_metadata, pickle_bytes


def test_register_list_download_on_embedded_defaults(server: tuple[str, Path]) -> None:
    base, data_dir = server
    key = (data_dir / "admin-key").read_text().strip()
    assert key.startswith("rt_")
    assert oct((data_dir / "admin-key").stat().st_mode & 0o777) == "0o600"
    with httpx2.Client(base_url=base, timeout=30) as http:
        assert http.get("/v1/models").status_code == 401
        http.headers["Authorization"] = f"Bearer {key}"
        ds = http.post("/v1/datasets", json={"name": "digits"}).json()["id"]
        weights = checkpoint_bytes(seed=5)
        files = {"weights": ("m.safetensors", weights)}
        resp = http.post("/v1/models", files=files, data={"metadata": model_metadata(ds)})
        assert resp.status_code == 201, resp.text
        model = resp.json()
        listed = http.get("/v1/models", params={"dataset_id": ds}).json()["data"]
        assert [m["id"] for m in listed] == [model["id"]]
        body = http.get(model["download_url"]).content
        assert hashlib.sha256(body).hexdigest() == hashlib.sha256(weights).hexdigest()

        blobs_before = sorted(p for p in (data_dir / "blobs").rglob("*") if p.is_file())
        bad = http.post(
            "/v1/models",
            files={"weights": ("m.pt", pickle_bytes())},
            data={"metadata": model_metadata(ds, "pickled")},
        )
        assert bad.status_code == 422
        assert bad.headers["content-type"].startswith("application/problem+json")
        assert sorted(p for p in (data_dir / "blobs").rglob("*") if p.is_file()) == blobs_before
        assert http.get("/v1/models").json()["count"] == 1
        assert http.get("/readyz").status_code == 200
