"""Fault drill: the embedded service is SIGKILLed in the middle of a release's merge and
started again on the same data folder. The release must not stay pending with its
budget reserved: the new process merges it, and the same request is answered with
the finished release instead of 202 forever."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import torch
from safetensors.torch import load, save

from tests.helpers import free_port, service_env, sgd, wait_healthy

#: each model ~64 MiB, so the merge (read, sum, write, fsync, hash) outlasts the kill
SHAPE = (4096, 4096)


@contextmanager
def serve(data: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`retarget serve` in its own process group (its plan processes die with it)."""
    env = service_env(RETARGET_DATA_DIR=str(data), RETARGET_RELEASE_ASYNC_BYTES="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "retarget.cli", "serve", "--port", str(port)],
        env=env,
        cwd=data.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert wait_healthy(f"http://127.0.0.1:{port}", 120, alive=lambda: proc.poll() is None)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def pending_rows(data: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(data / "retarget.db") as db:
        return db.execute("SELECT id, status FROM releases").fetchall()


def test_a_merge_killed_with_its_process_is_finished_by_the_next_start(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()
    base = f"http://127.0.0.1:{port}"
    with serve(data, port) as proc:
        key = (data / "admin-key").read_text().strip()
        http = httpx2.Client(base_url=base, timeout=300, headers={"Authorization": f"Bearer {key}"})
        ds = http.post("/v1/datasets", json={"name": "drill", "epsilon_cap": 100}).json()["id"]
        ids = []
        for i in range(2):
            gen = torch.Generator().manual_seed(i)
            weights = save({"w": torch.randn(SHAPE, generator=gen)})
            meta = {"dataset_id": ds, "name": f"m{i}", "mechanism": sgd(1.0)}
            resp = http.post(
                "/v1/models",
                files={"weights": ("m.safetensors", weights)},
                data={"metadata": json.dumps(meta)},
            )
            assert resp.status_code == 201, resp.text
            ids.append(resp.json()["id"])
        body = {"dataset_id": ds, "model_ids": ids, "epsilon": 3.0, "delta": 1e-5, "method": "lc"}
        resp = http.post("/v1/retarget", json=body)
        assert resp.status_code == 202, resp.text
        os.killpg(proc.pid, signal.SIGKILL)  # mid-merge: the 202 came before the merge ran
        proc.wait(timeout=30)
        release_id = resp.json()["release"]["release_id"]
    # the drill happened: the merge died with the process, the budget is still reserved
    assert pending_rows(data) == [(release_id, "pending")]

    with serve(data, port):
        deadline = time.monotonic() + 300
        while http.get(f"/v1/releases/{release_id}").json()["status"] == "pending":
            assert time.monotonic() < deadline, "the release is still pending"
            time.sleep(0.5)
        release = http.get(f"/v1/releases/{release_id}").json()
        assert release["status"] == "done" and release["size_bytes"] > 0
        again = http.post("/v1/retarget", json=body)
        assert again.status_code == 200 and again.json()["release_id"] == release_id
        merged = load(http.get(release["download_url"]).content)["w"]
        expected = sum(
            weight * torch.randn(SHAPE, generator=torch.Generator().manual_seed(i))
            for i, weight in enumerate(
                next(w["weight"] for w in release["weights"] if w["model_id"] == m) for m in ids
            )
        )
        assert torch.allclose(merged, expected, atol=1e-5)
        ledger = http.get(f"/v1/datasets/{ds}/ledger").json()
        assert [r["status"] for r in ledger["releases"]] == ["done"]
    http.close()
