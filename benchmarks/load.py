"""Load on a running service on loopback with real Postgres, Redis and an accounting worker.

Starts an accounting worker and `retarget serve` (``--workers`` processes) on a
fresh Postgres database and Redis database, registers a dataset with four
models (one checkpoint of ``--weights-mb``), waits for their profiles, then runs
wrk against:

- ``GET /healthz``: the framework's floor, the baseline the others are compared to;
- ``POST /v1/plans``: the same RS plan again and again (profiles cached);
- ``GET /v1/models?dataset_id=``: the model listing;
- ``GET /v1/models/{id}/weights``: a checkpoint download (MB/s).

    python -m benchmarks.load      # 15 s per endpoint after 2 s of warm-up, 1 API process
    python -m benchmarks.load --workers 2 --out benchmarks/out/load-2.json

Prints requests/s, p50 and p99 for each, and writes them to benchmarks/out/load.json.
Needs wrk (Debian's package).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import redis
import torch
from safetensors.torch import save

from tests.helpers import (
    checkpoint_bytes,
    free_port,
    migrate_and_admin_key,
    service_env,
    sgd,
    wait_healthy,
)

PG_ADMIN = os.environ.get("RETARGET_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = "redis://127.0.0.1:6379/13"


def fresh_database(name: str) -> str:
    with psycopg.connect(PG_ADMIN.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    return f"{base}/{name}"


@contextmanager
def stack(folder: Path, workers: int) -> Iterator[tuple[str, dict[str, str]]]:
    """An accounting worker and the API, on Postgres and Redis; yields (base URL, env)."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    env = service_env(
        RETARGET_DATA_DIR=str(folder),
        RETARGET_DATABASE_URL=fresh_database("retarget_load"),
        RETARGET_REDIS_URL=REDIS_URL,
    )
    key = migrate_and_admin_key(env)
    port = free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen([sys.executable, "-m", "retarget.cli", "worker"], env=env, **quiet),
        subprocess.Popen(
            [
                *(sys.executable, "-m", "retarget.cli", "serve"),
                *("--port", str(port), "--workers", str(workers), "--log-level", "warning"),
            ],
            env=env,
            **quiet,
        ),
    ]
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base):
            raise RuntimeError("retarget serve did not start")
        yield base, {"key": key}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def populate(base: str, key: str, weights_mb: int) -> dict[str, Any]:
    with httpx2.Client(base_url=base, timeout=300) as http:
        http.headers["Authorization"] = f"Bearer {key}"
        ds = http.post("/v1/datasets", json={"name": "load", "metric": "accuracy"}).json()["id"]
        ids = []
        for i, sigma in enumerate((0.8, 1.2, 2.0, 3.0)):
            blob = (
                save({"w": torch.randn(weights_mb * 1024 * 1024 // 4)})
                if i == 0
                else checkpoint_bytes(seed=i)
            )
            meta = {
                "dataset_id": ds,
                "name": f"m{i}",
                "mechanism": sgd(sigma),
                "metrics": {"accuracy": 0.9 - 0.05 * i},
            }
            resp = http.post(
                "/v1/models",
                files={"weights": ("m.safetensors", blob)},
                data={"metadata": json.dumps(meta)},
            )
            resp.raise_for_status()
            ids.append(resp.json()["id"])
        plan = {"dataset_id": ds, "epsilon": 1.0, "delta": 1e-5, "method": "rs"}
        for _ in range(600):  # the worker computes the profiles
            if http.post("/v1/plans", json=plan).status_code == 200:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("profiles were not computed")
        return {"dataset": ds, "models": ids, "plan": plan}


WRK_SCRIPT = """
wrk.method = "{method}"
wrk.headers["Authorization"] = "Bearer {key}"
wrk.headers["Content-Type"] = "application/json"
wrk.body = {body}
"""


def wrk(url: str, key: str, method: str, body: str | None, duration: int, conns: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT.format(method=method, key=key, body=json.dumps(body) if body else "nil"))
        script = f.name
    out = subprocess.run(
        ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", "-s", script, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(script)

    def ms(label: str) -> float:
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert m, out
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    transfer = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
    scale = {"B": 1e-6, "KB": 1e-3, "MB": 1.0, "GB": 1e3}
    mbps = float(transfer.group(1)) * scale[transfer.group(2)] if transfer else 0.0
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {
        "requests_per_s": rps,
        "p50_ms": ms("50"),
        "p99_ms": ms("99"),
        "mb_per_s": round(mbps * 1.048576, 1),  # wrk's MB are MiB
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(0) if errors else "",
        "latency": re.findall(r"^\s+(\d+)%\s+([\d.]+\w+)\s*$", out, re.M),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1, help="API processes")
    parser.add_argument("--weights-mb", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/load.json"))
    args = parser.parse_args()
    if not shutil.which("wrk"):
        print("needs wrk: apt-get install wrk")
        return 2
    results: dict[str, Any] = {"workers": args.workers, "connections": args.connections}
    with tempfile.TemporaryDirectory() as tmp, stack(Path(tmp), args.workers) as (base, env):
        key = env["key"]
        made = populate(base, key, args.weights_mb)
        runs = {
            "healthz (baseline)": ("GET", "/healthz", None, args.connections),
            "cached plan": ("POST", "/v1/plans", json.dumps(made["plan"]), args.connections),
            "model listing": (
                "GET",
                f"/v1/models?dataset_id={made['dataset']}",
                None,
                args.connections,
            ),
            f"download {args.weights_mb} MiB": (
                "GET",
                f"/v1/models/{made['models'][0]}/weights",
                None,
                4,
            ),
        }
        for name, (method, path, body, conns) in runs.items():
            wrk(base + path, key, method, body, 2, conns)  # warm: first plans, caches, pools
            r = wrk(base + path, key, method, body, args.duration, conns)
            results[name] = r
            print(
                f"{name:24s} {r['requests_per_s']:9.1f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                f"p99 {r['p99_ms']:7.2f} ms  {r['mb_per_s']:8.1f} MB/s  non-2xx {r['non_2xx']}",
                flush=True,
            )
    base_rps = results["healthz (baseline)"]["requests_per_s"]
    for name in runs:
        results[name]["ratio_to_baseline"] = round(results[name]["requests_per_s"] / base_rps, 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
