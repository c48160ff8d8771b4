"""Fault drills: break the service's parts under load and check that nothing is lost.

    python -m benchmarks.fault_drills            # all drills, about two minutes
    python -m benchmarks.fault_drills redis      # one of: redis, api-kill, postgres

The stack is real: `retarget serve` and an accounting worker on a fresh Postgres
database, with their own Redis server (port 6391, started and killed here, so
the machine's Redis is left alone). Drills:

- ``redis``: Redis SIGKILLed during a load of plans and registrations, restarted
  5 s later.
- ``api-kill``: the API process SIGKILLed in the middle of a linear-combination
  merge (the merge runs in the API), then started again; the same release is
  asked for again.
- ``postgres``: Postgres restarted (``pg_ctlcluster restart``) during the load.

(A full disk while a blob is written is tests/integration/test_disk_full.py.)

After each drill the invariants are checked: every model and release has its
blob, every blob is named by its own sha256 and is referenced (no partial or
orphan blob, no leftover temporary file), no row without its artifact, the
ledger lists exactly the release rows, and the service answers again by itself
(the time until it did is printed). Load answers during the fault are counted by
status: 503 problems are expected, a 500 is a failure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import torch
from safetensors.torch import save

from benchmarks.load import fresh_database
from tests.helpers import checkpoint_bytes, free_port, migrate_and_admin_key, service_env, sgd

REDIS_PORT = 6391
REDIS_URL = f"redis://127.0.0.1:{REDIS_PORT}/0"


class Stack:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = service_env(
            RETARGET_DATA_DIR=str(folder),
            RETARGET_DATABASE_URL=fresh_database("retarget_drill"),
            RETARGET_REDIS_URL=REDIS_URL,
            RETARGET_WORKER_MONITORING_INTERVAL_S="5",
            RETARGET_WORKER_HEARTBEAT_SLACK_S="5",
        )
        self.redis: subprocess.Popen[bytes] | None = None
        self.api: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.start_redis()
        self.key = migrate_and_admin_key(self.env)
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "retarget.cli", "worker"], env=self.env, **_quiet()
        )
        self.start_api()

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            [
                *("redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no"),
            ],
            **_quiet(),
        )
        time.sleep(0.5)

    def start_api(self) -> float:
        started = time.monotonic()
        self.api = subprocess.Popen(
            [
                *(sys.executable, "-m", "retarget.cli", "serve"),
                *("--port", str(self.port), "--log-level", "warning"),
            ],
            env=self.env,
            **_quiet(),
        )
        self.wait_ready("/healthz")
        return time.monotonic() - started

    def client(self, timeout: float = 30) -> httpx2.Client:
        return httpx2.Client(
            base_url=self.base, timeout=timeout, headers={"Authorization": f"Bearer {self.key}"}
        )

    def wait_ready(self, path: str = "/readyz", limit: float = 120) -> float:
        started = time.monotonic()
        while time.monotonic() - started < limit:
            try:
                if httpx2.get(self.base + path, timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx2.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{path} not ready after {limit} s")

    def stop(self) -> None:
        for p in (self.api, self.worker, self.redis):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=30)


def _quiet() -> dict[str, Any]:
    return {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def populate(stack: Stack, big_mb: int) -> dict[str, Any]:
    with stack.client(300) as http:
        ds = http.post(
            "/v1/datasets", json={"name": "drill", "metric": "accuracy", "epsilon_cap": 1000}
        ).json()["id"]
        ids = []
        for i, sigma in enumerate((0.8, 1.2, 2.0)):
            gen = torch.Generator().manual_seed(i)
            blob = save({"w": torch.randn(big_mb * 1024 * 1024 // 4, generator=gen)})
            meta = {
                "dataset_id": ds,
                "name": f"big{i}",
                "mechanism": sgd(sigma),
                "metrics": {"accuracy": 0.9 - 0.1 * i},
                "lineage": {"run_id": f"run{i}", "step": 400},
            }
            resp = http.post(
                "/v1/models",
                files={"weights": ("m.safetensors", blob)},
                data={"metadata": json.dumps(meta)},
            )
            resp.raise_for_status()
            ids.append(resp.json()["id"])
        plan = {"dataset_id": ds, "epsilon": 2.0, "delta": 1e-5, "method": "rs"}
        for _ in range(600):
            if http.post("/v1/plans", json=plan).status_code == 200:
                break
            time.sleep(0.5)
        return {"dataset": ds, "models": ids}


class Load:
    """Plans, epsilons and small registrations in a loop, counting answers by status."""

    def __init__(self, stack: Stack, made: dict[str, Any]) -> None:
        self.stack = stack
        self.made = made
        self.statuses: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.registered = 0

    def run(self) -> None:
        i = 0
        with self.stack.client(10) as http:
            while not self.stop.is_set():
                i += 1
                try:
                    if i % 3 == 0:
                        meta = {
                            "dataset_id": self.made["dataset"],
                            "name": f"small-{uuid.uuid4().hex[:12]}",
                            "mechanism": sgd(1.0 + (i % 7) / 10),
                        }
                        r = http.post(
                            "/v1/models",
                            files={"weights": ("m.safetensors", checkpoint_bytes(seed=i))},
                            data={"metadata": json.dumps(meta)},
                        )
                        self.registered += r.status_code == 201
                    elif i % 3 == 1:
                        r = http.post(
                            "/v1/plans",
                            json={
                                "dataset_id": self.made["dataset"],
                                "epsilon": 1.5 + (i % 5) / 10,
                                "delta": 1e-5,
                                "method": "rs",
                                "model_ids": self.made["models"],
                            },
                        )
                    else:
                        r = http.get(f"/v1/models/{self.made['models'][0]}/epsilon")
                    self.statuses[str(r.status_code)] += 1
                except httpx2.TransportError:
                    self.statuses["connection error"] += 1
                    time.sleep(0.1)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def invariants(stack: Stack, made: dict[str, Any]) -> dict[str, Any]:
    """What must hold after any fault (see the module docstring)."""
    url = stack.env["RETARGET_DATABASE_URL"].replace("+psycopg", "")
    with psycopg.connect(url) as conn:
        models = conn.execute("SELECT id, sha256, size_bytes FROM models").fetchall()
        releases = conn.execute("SELECT id, sha256, size_bytes FROM releases").fetchall()
        splits = conn.execute(
            "SELECT validation_sha256 FROM datasets WHERE validation_sha256 IS NOT NULL"
        ).fetchall()
    blob_root = stack.folder / "blobs"
    files = {p.name: p for p in blob_root.rglob("*") if p.is_file() and ".tmp" not in p.parts}
    temporaries = [p.name for p in (blob_root / ".tmp").glob("*")]
    referenced = {r[1] for r in models} | {r[1] for r in releases} | {r[0] for r in splits}
    missing = [r[0] for r in [*models, *releases] if r[1] not in files]
    wrong_size = [
        r[0] for r in [*models, *releases] if r[1] in files and files[r[1]].stat().st_size != r[2]
    ]
    corrupt = [name for name, p in files.items() if _sha256(p) != name]
    orphans = sorted(set(files) - referenced)
    with stack.client() as http:
        ledger = http.get(f"/v1/datasets/{made['dataset']}/ledger").json()
    ledger_ids = sorted(r["release_id"] for r in ledger["releases"])
    result = {
        "models": len(models),
        "releases": len(releases),
        "rows without their blob": missing,
        "blobs of the wrong size": wrong_size,
        "blobs not matching their sha256": corrupt,
        "orphan blobs": orphans,
        "temporary files left": temporaries,
        "ledger equals the release rows": ledger_ids == sorted(r[0] for r in releases),
    }
    result["ok"] = not (missing or wrong_size or corrupt or orphans or temporaries) and bool(
        result["ledger equals the release rows"]
    )
    return result


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(8 * 1024 * 1024):
            h.update(block)
    return h.hexdigest()


def drill_redis(stack: Stack, made: dict[str, Any]) -> dict[str, Any]:
    with Load(stack, made) as load:
        time.sleep(3)
        assert stack.redis is not None
        stack.redis.send_signal(signal.SIGKILL)
        stack.redis.wait()
        killed = time.monotonic()
        time.sleep(5)
        during = dict(load.statuses)
        stack.start_redis()
        recovered = stack.wait_ready("/readyz") + (time.monotonic() - killed - 5)
        time.sleep(3)
    return {
        "answers": dict(load.statuses),
        "answers until restart": during,
        "seconds from kill to ready": round(recovered, 1),
    }


def drill_api_kill(stack: Stack, made: dict[str, Any]) -> dict[str, Any]:
    body = {
        "dataset_id": made["dataset"],
        "epsilon": 2.5,
        "delta": 1e-5,
        "method": "lc",
        "accountant": "rdp",
        "model_ids": made["models"],
    }
    outcome: dict[str, Any] = {}
    with stack.client(300) as http:  # profiles cached, so the release goes straight to merging
        for model_id in made["models"]:
            for _ in range(600):
                if http.get(f"/v1/models/{model_id}/epsilon").status_code == 200:
                    break
                time.sleep(0.5)

    def ask() -> None:
        try:
            with stack.client(300) as http:
                outcome["first"] = http.post("/v1/retarget", json=body).status_code
        except httpx2.TransportError as exc:
            outcome["first"] = f"connection lost ({type(exc).__name__})"

    asker = threading.Thread(target=ask)
    asker.start()
    assert stack.api is not None
    tmp = stack.folder / "blobs" / ".tmp"
    deadline = time.monotonic() + 60
    while not any(tmp.glob("stage-*")) and time.monotonic() < deadline:
        time.sleep(0.01)  # wait until the merge is writing its output
    time.sleep(0.2)
    staged = [p.name for p in tmp.glob("stage-*")]
    stack.api.send_signal(signal.SIGKILL)
    stack.api.wait()
    asker.join()
    outcome["staged when killed"] = staged
    outcome["seconds to serve again"] = round(stack.start_api(), 1)
    outcome["after restart"] = invariants(stack, made)
    with stack.client(300) as http:
        again = http.post("/v1/retarget", json=body)
        outcome["asked again"] = again.status_code
        outcome["release epsilon"] = again.json().get("epsilon")
    return outcome


def drill_postgres(stack: Stack, made: dict[str, Any]) -> dict[str, Any]:
    cluster = os.listdir("/etc/postgresql")[0]
    with Load(stack, made) as load:
        time.sleep(3)
        started = time.monotonic()
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", cluster, "main", "restart"],
            check=True,
            capture_output=True,
        )
        restart_s = time.monotonic() - started
        time.sleep(0.5)
        with stack.client() as http:
            t = time.monotonic()
            while http.get("/v1/models", params={"dataset_id": made["dataset"]}).status_code != 200:
                time.sleep(0.2)
            answered = time.monotonic() - t
        time.sleep(3)
    return {
        "answers": dict(load.statuses),
        "postgres restart took s": round(restart_s, 1),
        "seconds until the API answered again": round(answered, 1),
    }


DRILLS: dict[str, Callable[[Stack, dict[str, Any]], dict[str, Any]]] = {
    "redis": drill_redis,
    "api-kill": drill_api_kill,
    "postgres": drill_postgres,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drills", nargs="*", help=f"some of {sorted(DRILLS)} (default: all)")
    parser.add_argument("--big-mb", type=int, default=256, help="size of each merged model")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/fault_drills.json"))
    args = parser.parse_args()
    report: dict[str, Any] = {}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp))
        try:
            made = populate(stack, args.big_mb)
            for name in args.drills or list(DRILLS):
                print(f"== drill {name}", flush=True)
                result = DRILLS[name](stack, made)
                result["invariants"] = invariants(stack, made)
                failed |= not result["invariants"]["ok"]
                failed |= any(k.startswith("5") and k != "503" for k in result.get("answers", {}))
                report[name] = result
                print(json.dumps(result, indent=2), flush=True)
        finally:
            stack.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'FAILED' if failed else 'all invariants hold'}; wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
