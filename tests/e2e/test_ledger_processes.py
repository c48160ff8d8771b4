"""The ledger's cap holds across API processes: two `retarget serve` processes on one
Postgres database take many different releases at once; the cap is never exceeded."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import numpy as np
import pytest

from benchmarks.load import fresh_database
from tests.helpers import (
    checkpoint_bytes,
    free_port,
    migrate_and_admin_key,
    service_env,
    sgd,
    wait_healthy,
)

CAP = 1.0


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    env = service_env(
        RETARGET_DATA_DIR=str(tmp_path),
        RETARGET_DATABASE_URL=fresh_database("retarget_ledger_processes"),
    )
    key = migrate_and_admin_key(env)
    cli = [sys.executable, "-m", "retarget.cli"]
    ports = [free_port(), free_port()]
    procs = [
        subprocess.Popen(
            [*cli, "serve", "--port", str(p), "--log-level", "warning"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for base in bases:
            assert wait_healthy(base), f"{base} did not start"
        yield bases, key
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def test_cap_holds_across_processes(two_servers: tuple[list[str], str]) -> None:
    bases, key = two_servers
    auth = {"Authorization": f"Bearer {key}"}
    with httpx2.Client(base_url=bases[0], timeout=120, headers=auth) as http:
        ds = http.post("/v1/datasets", json={"name": "tight", "epsilon_cap": CAP}).json()["id"]
        ids: list[str] = []
        for i, sigma in enumerate((0.7, 1.0, 1.6, 3.0)):
            meta = {"dataset_id": ds, "name": f"t{i}", "mechanism": sgd(sigma)}
            resp = http.post(
                "/v1/models",
                files={"weights": ("m.safetensors", checkpoint_bytes(seed=i))},
                data={"metadata": json.dumps(meta)},
            )
            assert resp.status_code == 201, resp.text
            ids.append(resp.json()["id"])
    targets = np.linspace(0.6, 3.0, 40)

    def release(i: int) -> int:
        # each release names its own pair of models: the ledger charges the joint release
        # of every model ever exposed (a model released again costs nothing more), so the
        # exposed set must grow past the cap for the race to matter
        chosen = sorted({ids[i % 4], ids[(i // 4) % 4]})
        with httpx2.Client(base_url=bases[i % 2], timeout=300, headers=auth) as http:
            body = {
                "dataset_id": ds,
                "epsilon": float(targets[i]),
                "delta": 1e-5,
                "method": "rs",
                "objective": "noise",
                "accountant": "rdp",
                "model_ids": chosen,
            }
            return http.post("/v1/retarget", json=body).status_code

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(release, range(len(targets))))
    assert set(codes) <= {201, 409, 422, 429}, codes  # 429: the lock wait timed out
    assert 201 in codes and 409 in codes
    for base in bases:  # both processes see the same ledger, within the cap
        ledger = httpx2.get(f"{base}/v1/datasets/{ds}/ledger", headers=auth, timeout=60).json()
        assert ledger["cumulative"]["epsilon"] <= CAP
        assert len(ledger["releases"]) == codes.count(201)
