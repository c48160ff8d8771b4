"""Registering a bundle folder: one multipart request (``files`` parts) against the
resumable path the CLI and the client take (hash, ``POST /v1/uploads/missing``, one
``PUT /v1/uploads/{sha256}`` per file, a registration naming them), and that path
run again after an interruption that left every file uploaded (hashing and the
registration only).

Starts ``retarget serve`` on loopback (embedded defaults: SQLite, the local blob
folder) in a temporary folder; each way registers the same folder ``--runs`` times
under new names (the bytes dedupe in the store, as they do for a re-upload).

    python -m benchmarks.bench_bundle_upload                    # 3 shards of 64 MiB, 3 runs
    python -m benchmarks.bench_bundle_upload --shards 8 --shard-mb 512 --runs 5

Prints the median seconds and MiB/s of each way with the spread (min-max), and the
ratio of each to the multipart baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
from safetensors.numpy import save_file

from retarget.client import RetargetClient
from retarget.client.transfer import sha256_of
from tests.helpers import free_port, service_env, sgd, wait_healthy


def make_folder(folder: Path, shards: int, shard_mb: int) -> int:
    """``shards`` safetensors files of ``shard_mb`` MiB, their index and a config."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = shard_mb * 1024 * 1024 // (4 * 1024)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensor = rng.standard_normal((rows, 1024), dtype=np.float32)
        save_file({f"layer{i}.weight": tensor}, str(folder / name))
        weight_map[f"layer{i}.weight"] = name
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text('{"model_type": "toy"}')
    return sum(p.stat().st_size for p in folder.iterdir())


def multipart(base: str, key: str, folder: Path, meta: dict) -> None:
    handles = [p.open("rb") for p in sorted(folder.iterdir())]
    try:
        files = [("files", (Path(h.name).name, h, "application/octet-stream")) for h in handles]
        resp = httpx.post(
            f"{base}/v1/models",
            headers={"Authorization": f"Bearer {key}"},
            data={"metadata": json.dumps(meta)},
            files=files,
            timeout=600,
        )
        assert resp.status_code == 201, resp.text
    finally:
        for h in handles:
            h.close()


def put_all(base: str, key: str, folder: Path) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
        for path in sorted(folder.iterdir()):
            http.put(f"/v1/uploads/{sha256_of(path)}", content=path.read_bytes(), timeout=600)


def timed(runs: int, before: Callable[[int], None], run: Callable[[int], None]) -> list[float]:
    out = []
    for i in range(runs):
        before(i)
        start = time.perf_counter()
        run(i)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--shard-mb", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        size = make_folder(root / "bundle", args.shards, args.shard_mb)
        port = free_port()
        env = service_env(RETARGET_DATA_DIR=str(root / "data"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "retarget.cli", "serve", "--port", str(port)],
            env=env,
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            assert wait_healthy(base, 120, alive=lambda: proc.poll() is None)
            key = (root / "data" / "admin-key").read_text().strip()
            with RetargetClient(base, key) as rt:
                ds = rt.datasets.create("bench").id

                def meta(name: str) -> dict:
                    return {"dataset_id": ds, "name": name, "mechanism": sgd(1.0)}

                def client_register(name: str) -> None:
                    rt.models.register(
                        root / "bundle", dataset_id=ds, name=name, mechanism=sgd(1.0)
                    )

                results = {
                    "multipart": timed(
                        args.runs,
                        lambda i: None,
                        lambda i: multipart(base, key, root / "bundle", meta(f"mp{i}")),
                    ),
                    "resumable": timed(
                        args.runs, lambda i: None, lambda i: client_register(f"re{i}")
                    ),
                    "resumed, all sent": timed(
                        args.runs,
                        lambda i: put_all(base, key, root / "bundle"),
                        lambda i: client_register(f"rd{i}"),
                    ),
                }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    mib = size / 2**20
    baseline = statistics.median(results["multipart"])
    print(f"bundle: {args.shards} shards, {mib:.0f} MiB in all; {args.runs} runs each")
    for name, times in results.items():
        med = statistics.median(times)
        print(
            f"{name:>18}: median {med:.2f} s ({mib / med:.0f} MiB/s), "
            f"spread {min(times):.2f}-{max(times):.2f} s, {med / baseline:.2f}x multipart"
        )


if __name__ == "__main__":
    main()
