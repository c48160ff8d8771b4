"""Blob throughput: a checkpoint uploaded to and downloaded from the API with the local
folder store and with an S3 store (a local SeaweedFS), against a direct transfer of the
same file to the same server with boto3's managed transfer (what `aws s3 cp` does).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_blobs.py [--mb 256] [--runs 3]

Each run registers a new file (different bytes, so no upload is deduplicated) and
downloads it whole; the API downloads stream to nothing, as do the direct ones. Prints
the median MB/s of the runs and their spread (min-max), and the ratio to direct.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
from safetensors.numpy import save_file

from tests.helpers import free_port, service_env, sgd, wait_healthy
from tests.s3server import start_s3_server, stop_s3_server


def checkpoint(path: Path, mb: int, seed: int) -> Path:
    values = np.random.default_rng(seed).standard_normal(mb * 1024 * 1024 // 4, np.float32)
    save_file({"w": values}, str(path))
    return path


@contextmanager
def started(
    cmd: list[str], data: Path, port: int, what: str, **env: str
) -> Iterator[tuple[str, subprocess.Popen]]:
    """A server process on ``port`` over the data folder ``data``, once it answers
    /healthz: its base URL and the process; stopped on exit."""
    proc = subprocess.Popen(
        cmd,
        env=service_env(RETARGET_DATA_DIR=str(data), **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base, 180, alive=lambda: proc.poll() is None):
            raise RuntimeError(f"{what} did not start")
        yield base, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@contextmanager
def serve(data: Path, **env: str) -> Iterator[tuple[str, str, subprocess.Popen]]:
    """``retarget serve`` on its embedded defaults over ``data``: URL, admin key, process."""
    port = free_port()
    cmd = [sys.executable, "-m", "retarget.cli", "serve", "--port", str(port)]
    with started(cmd, data, port, "retarget serve", **env) as (base, proc):
        yield base, (data / "admin-key").read_text().strip(), proc


@contextmanager
def service(folder: Path, **env: str) -> Iterator[tuple[str, dict[str, str]]]:
    with serve(folder / "data", **env) as (base, key, _):
        yield base, {"Authorization": f"Bearer {key}"}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def api_runs(
    base: str, auth: dict[str, str], files: list[Path], redirect: bool = False
) -> dict[str, list[float]]:
    """``redirect``: downloads ask for a redirect and follow it, as the SDK and CLI do."""
    out: dict[str, list[float]] = {"upload": [], "download": []}
    with httpx2.Client(base_url=base, headers=auth, timeout=900) as http:
        name = "bench-redirect" if redirect else "bench"
        ds = http.post("/v1/datasets", json={"name": name}).json()["id"]
        mech = sgd(1.0)
        warm = {"dataset_id": ds, "name": "warm", "mechanism": mech}
        tiny = checkpoint(files[0].parent / "tiny.safetensors", 1, 99)
        with tiny.open("rb") as fh:  # computes the mechanism's profile once
            http.post("/v1/models", files={"weights": fh}, data={"metadata": json.dumps(warm)})
        for i, path in enumerate(files):
            meta = {"dataset_id": ds, "name": f"m{i}", "mechanism": mech}
            answer: dict[str, Any] = {}

            def up(path: Path = path, meta: dict = meta, answer: dict = answer) -> None:
                with path.open("rb") as fh:
                    resp = http.post(
                        "/v1/models",
                        files={"weights": ("m.safetensors", fh)},
                        data={"metadata": json.dumps(meta)},
                    )
                assert resp.status_code == 201, resp.text
                answer.update(resp.json())

            out["upload"].append(timed(up))

            def down(answer: dict = answer) -> None:
                url = f"/v1/models/{answer['id']}/weights"
                prefer = {"Prefer": "redirect"} if redirect else {}
                with http.stream("GET", url, headers=prefer, follow_redirects=redirect) as resp:
                    assert resp.status_code == 200, resp.read()
                    for _ in resp.iter_bytes(4 * 1024 * 1024):
                        pass

            out["download"].append(timed(down))
    return out


def direct_runs(s3: Any, bucket: str, files: list[Path]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"upload": [], "download": []}
    for i, path in enumerate(files):
        key = f"direct/{i}"
        out["upload"].append(timed(lambda p=path, k=key: s3.upload_file(str(p), bucket, k)))

        def down(k: str = key) -> None:
            body = s3.get_object(Bucket=bucket, Key=k)["Body"]
            for _ in body.iter_chunks(4 * 1024 * 1024):
                pass

        out["download"].append(timed(down))
    return out


def summary(mb: int, seconds: list[float]) -> dict[str, float]:
    rates = [mb / s for s in seconds]
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "weed").mkdir()
        files = [checkpoint(root / f"c{i}.safetensors", args.mb, i) for i in range(args.runs)]
        server = start_s3_server(root / "weed")
        try:
            os.environ.update(server.env)
            s3 = server.client()
            bucket = server.new_bucket()
            s3.put_object(Bucket=bucket, Key="warm", Body=b"x" * 1024 * 1024)  # volumes ready
            results = {"direct boto3": direct_runs(s3, bucket, files)}
            with service(root / "local") as (base, auth):
                results["API, local folder"] = api_runs(base, auth, files)
            with service(root / "s3", RETARGET_BLOB_URL=f"s3://{bucket}/blobs", **server.env) as (
                base,
                auth,
            ):
                results["API, S3 store"] = api_runs(base, auth, files)
                results["API, S3 store, redirected (SDK, CLI)"] = api_runs(
                    base, auth, files, redirect=True
                )
        finally:
            stop_s3_server(server)
    direct = {k: summary(args.mb, v)["median"] for k, v in results["direct boto3"].items()}
    print(f"{args.mb} MB checkpoint, {args.runs} runs; MB/s median (min-max), x direct")
    print("| path | upload | download |")
    print("| --- | --- | --- |")
    for name, runs in results.items():
        cells = []
        for op in ("upload", "download"):
            s = summary(args.mb, runs[op])
            cells.append(
                f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f}), "
                f"{s['median'] / direct[op]:.2f}x"
            )
        print(f"| {name} | {cells[0]} | {cells[1]} |")
    print(json.dumps({"mb": args.mb, "seconds": results}))


if __name__ == "__main__":
    main()
