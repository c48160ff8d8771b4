"""Bounded work at scale, through the HTTP API of one in-process service (SQLite).

    .venv/bin/python benchmarks/bench_scale.py [--sizes 8 16 32 64] [--models 1000]
        [--releases 40] [--repeat 5] [--skip plans costly pages]

Plans: registers max(sizes) DP-SGD models with distinct noise on one dataset and
times ``auto``, ``lc`` and ``rs`` plans over the first N of them: the first (cold:
profiles of the N models' prefixes computed) and ``--repeat`` more with a target
changed by 1e-9 each time (no plan cache hit; profiles cached). Costly: registers
a mechanism with noise 0.05 and 10^7 steps, probing ``/healthz`` meanwhile. Pages:
``--models`` models (8 distinct mechanisms) and ``--releases`` releases on another
dataset, then the dashboard's dataset page (first page, and all models on one page),
its releases page and the ledger API, cold and ``--repeat`` warm. Last, peak RSS.
Figures are medians with (min-max).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from service.dashboard.auth import COOKIE
from service.registry.keys import create_key
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


def timed(call: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = call()
    return out, time.perf_counter() - start


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def plans(client: TestClient, args: argparse.Namespace) -> None:
    dataset = client.post("/v1/datasets", json={"name": "scale"}).json()["id"]
    n_max = max(args.sizes)
    ids, reg = [], []
    for i in range(n_max):
        model_id, seconds = register(client, dataset, f"m{i}", sgd(0.8 + 0.02 * i, steps=300))
        ids.append(model_id)
        reg.append(seconds)
    print(f"registered {n_max} distinct DP-SGD models: {spread(reg)} s each")
    print("| N | method | status | cold s | warm s | chosen |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in args.sizes:
        for method in ("auto", "lc", "rs"):
            body = {
                "dataset_id": dataset,
                "epsilon": 4.0,
                "delta": 1e-5,
                "method": method,
                "model_ids": ids[:n],
            }
            resp, cold = timed(lambda b=body: client.post("/v1/plans", json=b))
            warm = []
            for k in range(args.repeat):
                other = {**body, "epsilon": 4.0 + 1e-9 * (k + 1)}
                _, seconds = timed(lambda b=other: client.post("/v1/plans", json=b))
                warm.append(seconds)
            chosen = resp.json() if resp.status_code == 200 else {}  # type: ignore[attr-defined]
            what = f"{chosen.get('method', '')} {len(chosen.get('weights', {}))} model(s)"
            status = resp.status_code  # type: ignore[attr-defined]
            print(f"| {n} | {method} | {status} | {cold:.2f} | {spread(warm)} | {what} |")


def costly(client: TestClient) -> None:
    dataset = client.post("/v1/datasets", json={"name": "costly"}).json()["id"]
    other, _ = register(client, dataset, "ordinary", sgd(1.0, steps=100))
    probes: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            _, seconds = timed(lambda: client.get("/healthz"))
            probes.append(seconds)

    prober = threading.Thread(target=probe)
    prober.start()
    meta = json.dumps({"dataset_id": dataset, "name": "c", "mechanism": sgd(0.05, steps=10**7)})
    resp, seconds = timed(lambda: upload(client, WEIGHTS, meta))
    done.set()
    prober.join()
    eps = client.get(f"/v1/models/{other}/epsilon", params={"delta": 1e-5}).status_code
    plan = client.post("/v1/plans", json={"dataset_id": dataset, "epsilon": 5.0, "delta": 1e-5})
    print(
        f"noise 0.05, 10^7 steps: {resp.status_code} in {seconds:.2f} s; /healthz max "  # type: ignore[attr-defined]
        f"{max(probes, default=0):.3f} s over {len(probes)} probes; the other model's "
        f"epsilon {eps}, a plan on the dataset {plan.status_code}"
    )


def pages(client: TestClient, args: argparse.Namespace) -> None:
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
    print("| page | status | cold s | warm s |")
    print("| --- | --- | --- | --- |")
    for path in (
        f"/admin/datasets/{big}",
        f"/admin/datasets/{big}?limit=500",
        f"/admin/datasets/{big}/releases",
        f"/v1/datasets/{big}/ledger",
        f"/v1/models?dataset_id={big}",
    ):
        resp, cold = timed(lambda p=path: client.get(p))
        warm = [timed(lambda p=path: client.get(p))[1] for _ in range(args.repeat)]
        status = resp.status_code  # type: ignore[attr-defined]
        print(f"| GET {path.replace(big, '{id}')} | {status} | {cold:.3f} | {spread(warm)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--releases", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip", nargs="*", default=[], choices=["plans", "costly", "pages"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), auth=False, plan_request_budget_s=600)
        upgrade(url=settings.resolved_database_url)
        app = create_app(settings)
        with TestClient(app) as client:
            with app.state.ctx.session_factory() as session:
                row, _ = create_key(session=session, name="bench", scopes=["admin"])
                session.commit()
                key_id = row.id
            cookie = app.state.session_signer.issue(key_id, 0)
            client.cookies.set(COOKIE, cookie, path="/admin")
            if "plans" not in args.skip:
                plans(client, args)
            if "costly" not in args.skip:
                costly(client)
            if "pages" not in args.skip:
                pages(client, args)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
