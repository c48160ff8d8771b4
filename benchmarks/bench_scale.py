"""Bounded work at scale, through the HTTP API of one in-process service (SQLite).

    .venv/bin/python benchmarks/bench_scale.py [--sizes 8 16 32 64] [--models 1000]

Registers max(sizes) DP-SGD models with distinct noise on one dataset and prints
the latency of an ``auto``, ``lc`` and ``rs`` plan over the first N of them
(profiles cached; the first plan of each N is the cold one). Then registers a
mechanism with noise 0.05 and 10^7 steps and times its registration and a
``/healthz`` probed while it runs. Then ``--models`` models (8 distinct
mechanisms) on another dataset and 40 releases: the time of its dashboard
dataset page and releases listing, cold and warm. Last, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import threading
import time
from pathlib import Path

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from service.registry.migrate import upgrade
from tests.helpers import checkpoint_bytes, sgd, upload

WEIGHTS = checkpoint_bytes(0, {"w": (4, 4)})


def register(client: TestClient, dataset: str, name: str, mechanism: dict) -> tuple[str, float]:
    meta = json.dumps({"dataset_id": dataset, "name": name, "mechanism": mechanism})
    start = time.perf_counter()
    resp = upload(client, WEIGHTS, meta)
    seconds = time.perf_counter() - start
    if resp.status_code != 201:
        raise SystemExit(f"registration of {name} answered {resp.status_code}: {resp.text[:300]}")
    return resp.json()["id"], seconds


def timed_plan(client: TestClient, body: dict) -> tuple[int, float, str]:
    start = time.perf_counter()
    resp = client.post("/v1/plans", json=body)
    seconds = time.perf_counter() - start
    what = resp.json().get("method", resp.json().get("type", "")) if resp.content else ""
    return resp.status_code, seconds, str(what)


def timed_get(client: TestClient, path: str) -> tuple[int, float]:
    start = time.perf_counter()
    resp = client.get(path)
    return resp.status_code, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--releases", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), auth=False, plan_request_budget_s=600)
        upgrade(url=settings.resolved_database_url)
        with TestClient(create_app(settings)) as client:
            run(client, args)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mib:.0f} MiB")


def run(client: TestClient, args: argparse.Namespace) -> None:
    dataset = client.post("/v1/datasets", json={"name": "scale"}).json()["id"]
    n_max = max(args.sizes)
    ids, reg = [], []
    for i in range(n_max):
        model_id, seconds = register(client, dataset, f"m{i}", sgd(0.8 + 0.02 * i, steps=300))
        ids.append(model_id)
        reg.append(seconds)
    print(f"registered {n_max} distinct DP-SGD models, median {sorted(reg)[n_max // 2]:.2f} s each")
    print("N | method | status | cold s | warm s | chosen")
    for n in args.sizes:
        for method in ("auto", "lc", "rs"):
            body = {
                "dataset_id": dataset,
                "epsilon": 4.0,
                "delta": 1e-5,
                "method": method,
                "model_ids": ids[:n],
            }
            status, cold, what = timed_plan(client, body)
            _, warm, _ = timed_plan(client, {**body, "epsilon": 4.0 + 1e-9})
            print(f"{n} | {method} | {status} | {cold:.2f} | {warm:.2f} | {what}")

    costly = sgd(0.05, steps=10**7)
    probes: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            _, seconds = timed_get(client, "/healthz")
            probes.append(seconds)

    prober = threading.Thread(target=probe)
    prober.start()
    _, seconds = register(client, dataset, "costly", costly)
    done.set()
    prober.join()
    eps = client.get(f"/v1/models/{ids[0]}/epsilon", params={"delta": 1e-5}).status_code
    print(
        f"noise 0.05, 10^7 steps: registered in {seconds:.2f} s; /healthz max "
        f"{max(probes, default=0):.3f} s over {len(probes)} probes; other model's epsilon {eps}"
    )

    big = client.post("/v1/datasets", json={"name": "thousand"}).json()["id"]
    start = time.perf_counter()
    for i in range(args.models):
        register(client, big, f"b{i}", sgd(0.8 + 0.1 * (i % 8), steps=200))
    print(f"registered {args.models} models (8 mechanisms) in {time.perf_counter() - start:.1f} s")
    released = 0
    for i in range(args.releases):
        body = {"dataset_id": big, "epsilon": 50.0 + i, "delta": 1e-5, "method": "rs"}
        released += client.post("/v1/retarget", json=body).status_code in (200, 201)
    print(f"{released} of {args.releases} releases made")
    for path in (f"/admin/datasets/{big}", f"/v1/datasets/{big}/ledger"):
        status, cold = timed_get(client, path)
        _, warm = timed_get(client, path)
        print(f"GET {path.replace(big, '{id}')}: {status}, cold {cold:.2f} s, warm {warm:.2f} s")


if __name__ == "__main__":
    main()
