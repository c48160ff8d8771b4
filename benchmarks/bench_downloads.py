"""Local downloads against the disk: curl of a model's weights through the API against
``cat`` of the same bytes, warm and cold page cache.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_downloads [--mb 512] [--runs 3]
        [--granian] [--quick]

Starts ``retarget serve`` (uvicorn, embedded defaults, local folder store) on loopback,
registers one checkpoint of --mb MiB, then per run times ``curl -o /dev/null`` of
``/v1/models/{id}/weights`` and ``cat FILE > /dev/null`` of the stored blob, with the
page cache warm (each file read once before) and cold (the file's pages dropped with
``posix_fadvise(DONTNEED)`` just before). ``--granian``: the same app under Granian
(where installed), whose ASGI ``pathsend`` lets Starlette's FileResponse hand the file
to the server. Prints medians with min-max and the ratio to ``cat``. Every run checks
the bytes: curl's sha256 is the blob's; ``--quick`` (8 MiB, one run) also checks a
Range request (206, the right bytes) and If-None-Match (304), and exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from benchmarks.bench_blobs import checkpoint, service, started
from tests.helpers import free_port, sgd


def drop(path: Path) -> None:
    """Evict a file's pages from the page cache (clean pages; no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(cmd: list[str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True).stdout
    return time.perf_counter() - start, out


def curl(url: str, auth: dict[str, str], *extra: str) -> list[str]:
    return ["curl", "-sf", "-H", f"Authorization: {auth['Authorization']}", *extra, url]


def register(base: str, auth: dict[str, str], path: Path) -> dict[str, str]:
    with httpx2.Client(base_url=base, headers=auth, timeout=600) as http:
        ds = http.post("/v1/datasets", json={"name": "bench"}).json()["id"]
        meta = {"dataset_id": ds, "name": "m", "mechanism": sgd(1.0)}
        with path.open("rb") as fh:
            resp = http.post(
                "/v1/models", files={"weights": fh}, data={"metadata": json.dumps(meta)}
            )
        resp.raise_for_status()
        return dict(resp.json())


@contextmanager
def granian(data: Path) -> Iterator[str]:
    """The same app and data folder under Granian (one worker)."""
    port = free_port()
    exe = Path(sys.executable).parent / "granian"
    cmd = [str(exe), "--interface", "asgi", "--factory", "--port", str(port)]
    cmd += ["--log-level", "warning", "service.api.app:create_app"]
    with started(cmd, data, port, "granian") as (base, _):
        yield base


def measure(url: str, auth: dict[str, str], blob: Path, sha: str, runs: int) -> dict[str, list]:
    out: dict[str, list[float]] = {
        k: [] for k in ("curl warm", "cat warm", "curl cold", "cat cold")
    }
    timed(["cat", str(blob)])
    timed(curl(url, auth, "-o", "/dev/null"))
    for _ in range(runs):
        body = timed(curl(url, auth))[1]  # checked once per run, not timed below
        if hashlib.sha256(body).hexdigest() != sha:
            raise SystemExit("the download does not hash to the blob's sha256")
        del body
        for cold in (False, True):
            tag = "cold" if cold else "warm"
            if cold:
                drop(blob)
            out[f"curl {tag}"].append(timed(curl(url, auth, "-o", "/dev/null"))[0])
            if cold:
                drop(blob)
            out[f"cat {tag}"].append(timed(["sh", "-c", f"cat '{blob}' > /dev/null"])[0])
    return out


def checks(url: str, auth: dict[str, str], blob: Path, sha: str) -> None:
    data = blob.read_bytes()
    _, part = timed(curl(url, auth, "-r", "100-4195"))
    if part != data[100:4196]:
        raise SystemExit("a Range request did not answer the bytes asked for")
    status = subprocess.run(
        curl(url, auth, "-o", "/dev/null", "-w", "%{http_code}", "-H", f'If-None-Match: "{sha}"'),
        capture_output=True,
        text=True,
    ).stdout
    if status != "304":
        raise SystemExit(f"If-None-Match with the blob's ETag answered {status}, not 304")


def report(name: str, mb: int, res: dict[str, list[float]]) -> None:
    for tag in ("warm", "cold"):
        rates = {k: [mb * 1.048576 / 1000 / s for s in res[f"{k} {tag}"]] for k in ("curl", "cat")}
        ratio = [c / a for c, a in zip(res[f"cat {tag}"], res[f"curl {tag}"], strict=True)]
        print(
            f"| {name}, {tag} | {statistics.median(rates['curl']):.2f} "
            f"({min(rates['curl']):.2f}-{max(rates['curl']):.2f}) | "
            f"{statistics.median(rates['cat']):.2f} ({min(rates['cat']):.2f}-"
            f"{max(rates['cat']):.2f}) | {statistics.median(ratio):.2f} "
            f"({min(ratio):.2f}-{max(ratio):.2f}) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--granian", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.mb, args.runs = 8, 1
    if shutil.which("curl") is None:
        raise SystemExit("curl is not installed")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = checkpoint(root / "c.safetensors", args.mb, 0)
        with service(root) as (base, auth):
            model = register(base, auth, path)
            sha = model["sha256"]
            blob = next(p for p in (root / "data").rglob(sha + "*") if p.is_file())
            url = f"{base}/v1/models/{model['id']}/weights"
            if args.quick:
                checks(url, auth, blob, sha)
            results["uvicorn (retarget serve)"] = measure(url, auth, blob, sha, args.runs)
        if args.granian and not (Path(sys.executable).parent / "granian").exists():
            print("granian is not installed in this environment (pip install granian): skipped")
        elif args.granian:
            with granian(root / "data") as base:
                url = f"{base}/v1/models/{model['id']}/weights"
                if args.quick:
                    checks(url, auth, blob, sha)
                results["granian"] = measure(url, auth, blob, sha, args.runs)
    print(f"{args.mb} MiB checkpoint, {args.runs} runs; GB/s median (min-max)")
    print("| server, cache | curl through the API | cat of the file | curl / cat |")
    print("| --- | --- | --- | --- |")
    for name, res in results.items():
        report(name, args.mb, res)
    print(json.dumps({"mb": args.mb, "seconds": results}))


if __name__ == "__main__":
    main()
