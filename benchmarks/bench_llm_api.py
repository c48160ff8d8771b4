"""LLM-sized bundles through the API: upload, LC release, archive download, end to end.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_llm_api [--gib 4] [--inputs 4]
        [--shards 8] [--dir /tmp/retarget-bench-llm] [--keep] [--quick]

Generates --inputs Llama-shaped bf16 bundles of about --gib GiB each in --shards shards
(``bench_bundles.generate``), starts ``retarget serve`` on its embedded defaults (SQLite,
local blob folder, merges in the service's own process), and with the Python client:
registers each bundle folder (resumable uploads), releases an LC of the four at a target
that every one of them meets, waits for the merge, and downloads the release's archive
(to a file with the Python client, then three times with curl to /dev/null).
Prints the wall time of each phase with its throughput, the peak anonymous memory of the
service process and of this client in each phase (sampled; the memory maps of the
inputs show as resident file pages, which VmHWM, also printed, counts), and the disk
used by the service's data folder and the downloaded archive.

``--quick``: small bundles (a few MiB) and a check that the archive's shards hold the
numpy merge of the inputs with the release's weights (exits 1 when they do not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.bench_blobs import serve
from benchmarks.bench_bundles import check, generate
from benchmarks.bench_merge import status_bytes
from retarget.client import RetargetClient
from tests.helpers import sgd

GIB = 1024**3


def fetch_archive(base: str, key: str, release_id: str, target: Path) -> int:
    """GET the release's /archive (an uncompressed tar streamed by the service) to a file."""
    headers = {"Authorization": f"Bearer {key}"}
    with (
        httpx.Client(base_url=base, headers=headers, timeout=3600) as http,
        http.stream("GET", f"/v1/releases/{release_id}/archive") as resp,
        target.open("wb") as out,
    ):
        resp.raise_for_status()
        for block in resp.iter_raw(8 << 20):
            out.write(block)
    return target.stat().st_size


class AnonPeaks:
    """The peak anonymous memory (RssAnon: not the page cache a memory map shows as
    resident) of the service and of this client, per phase, sampled every 20 ms."""

    def __init__(self, service_pid: int) -> None:
        self.pids = {"service": service_pid, "client": os.getpid()}
        self.phase = "start"
        self.peaks: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            row = self.peaks.setdefault(self.phase, dict.fromkeys(self.pids, 0))
            for who, pid in self.pids.items():
                row[who] = max(row[who], status_bytes(pid, "RssAnon"))
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def phase(name: str, seconds: float, nbytes: int) -> None:
    print(
        f"{name:34s} {seconds:8.1f} s  {nbytes / GIB:7.2f} GiB  {nbytes / seconds / 1e9:6.2f} GB/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/retarget-bench-llm"))
    parser.add_argument("--keep", action="store_true", help="keep the generated bundles")
    parser.add_argument("--quick", action="store_true", help="small, and checked")
    args = parser.parse_args()
    gib, scale = (0.02, 8) if args.quick else (args.gib, 1)
    root = args.dir
    data = root / "service"
    shutil.rmtree(data, ignore_errors=True)
    start = time.perf_counter()
    bundles = generate(root / "inputs", args.inputs, args.shards, gib, scale)
    folders = [next(iter(b.values())).parent for b in bundles]
    size = sum(p.stat().st_size for b in bundles for p in b.values())
    print(f"{args.inputs} bundles x {size / args.inputs / GIB:.2f} GiB, {args.shards} shards each")
    phase("generate (not the service)", time.perf_counter() - start, size)

    with serve(data) as (base, key, proc), RetargetClient(base, key, timeout=3600) as client:
        pid = proc.pid
        ds = client.datasets.create("llm-bench")
        peaks = AnonPeaks(pid)
        peaks.phase = "register"
        start = time.perf_counter()
        for k, folder in enumerate(folders):
            client.models.register(
                folder,
                dataset_id=ds.id,
                name=f"m{k}",
                mechanism=sgd(2.0),
                run_id=f"run-{k}",
                step=400,
            )
        phase("register (upload, hash, store)", time.perf_counter() - start, size)

        peaks.phase = "release"
        start = time.perf_counter()
        release = client.releases.create(ds.id, 100.0, 1e-5, method="lc")
        waited = time.perf_counter() - start
        out_bytes = release.size_bytes
        used = len(release.weights)
        phase(f"LC release of {used} (merge, store)", waited, size)

        archive = root / "release.tar"
        peaks.phase = "archive"
        start = time.perf_counter()
        fetched = fetch_archive(base, key, release.release_id, archive)
        phase("archive download (streamed tar)", time.perf_counter() - start, fetched)
        if shutil.which("curl"):  # the service's side alone: no Python client, no disk
            url = f"{base}/v1/releases/{release.release_id}/archive"
            cmd = ["curl", "-sf", "-H", f"Authorization: Bearer {key}", "-o", "/dev/null", url]
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                subprocess.run(cmd, check=True)
                runs.append(time.perf_counter() - start)
            phase("archive, curl to /dev/null (median)", statistics.median(runs), fetched)

        peaks.stop()
        for name in ("register", "release", "archive"):
            row = peaks.peaks.get(name, {"service": 0, "client": 0})
            print(
                f"peak anonymous memory, {name:8s}    service {row['service'] / 2**20:6.0f} MiB"
                f"  client {row['client'] / 2**20:6.0f} MiB"
            )
        hwm = status_bytes(pid, "VmHWM")
        print(f"service peak RSS (VmHWM, mapped files included) {hwm / 2**20:.0f} MiB")
        print(
            f"disk: service data {disk_bytes(data) / GIB:.2f} GiB (inputs {size / GIB:.2f}, "
            f"release {out_bytes / GIB:.2f}), archive {archive.stat().st_size / GIB:.2f} GiB"
        )
        failed = used != args.inputs
        if args.quick:
            merged = root / "merged"
            shutil.rmtree(merged, ignore_errors=True)
            with tarfile.open(archive) as tar:
                tar.extractall(merged, filter="data")
            by_name = {w.model_name: w.weight for w in release.weights}
            weights = [by_name[f"m{k}"] for k in range(args.inputs)]
            out = next(merged.rglob("*.safetensors")).parent
            steps = check(bundles, weights, out)
            print(f"archive against the numpy merge: {steps} bf16 steps apart at most")
            failed = failed or steps > 1
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"inputs_gib": size / GIB, "models_merged": used}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    os.environ.setdefault("RETARGET_LOG_LEVEL", "warning")
    main()
