"""LC merge throughput and memory (issue: release and serve merged models).

    .venv/bin/python benchmarks/bench_merge.py [--gib 1.0] [--inputs 4] [--dir /tmp/retarget-bench]

Generates N safetensors inputs of about --gib GiB each (float32, 64 tensors),
warms the page cache, then in the same run times
  * the baseline: a plain memory copy of the same input bytes (numpy copyto from
    the memory-mapped files into one reused buffer per tensor),
  * our streaming LC merge (service.merging.linear) writing to a file,
and samples the process's anonymous resident memory (RssAnon, every 5 ms)
during the merge. Prints throughput (input bytes / second), the merge/copy ratio
(goal >= 0.7), and peak anonymous memory in units of one tensor (goal: output +
2 tensors; the inputs are memory-mapped, so their pages are page cache, not
process memory). With --mergekit PATH it also times mergekit's linear merge of the
same inputs with the ``mergekit-pytorch`` command at PATH (a separate virtual
environment, e.g. ``python3 -m venv /tmp/mk && /tmp/mk/bin/pip install torch==2.13.0
mergekit``).
"""

from __future__ import annotations

import argparse
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from service.merging.base import MergeInput, merge_device
from service.merging.linear import LinearMerge

TENSORS = 64


def status_bytes(pid: int | str, field: str) -> int:
    """A size field of /proc/PID/status (``RssAnon``, ``VmHWM``), bytes; 0 once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def rss_anon_bytes() -> int:
    return status_bytes("self", "RssAnon")


class PeakSampler:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_anon_bytes())
            time.sleep(0.005)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def generate(folder: Path, inputs: int, gib: float) -> tuple[list[Path], int]:
    folder.mkdir(parents=True, exist_ok=True)
    elems = int(gib * 1024**3 / 4 / TENSORS)
    paths = []
    rng = np.random.default_rng(0)
    for i in range(inputs):
        path = folder / f"input-{i}.safetensors"
        paths.append(path)
        if path.exists() and path.stat().st_size > elems * 4 * TENSORS:
            continue
        block = rng.standard_normal(elems, dtype=np.float32)
        save_file({f"layer{t:02d}.weight": block + t + i for t in range(TENSORS)}, str(path))
        print(f"generated {path} ({path.stat().st_size / 1024**3:.2f} GiB)", flush=True)
    return paths, elems * 4


def warm(paths: list[Path]) -> None:
    for p in paths:
        with p.open("rb") as fh:
            while fh.read(64 * 1024 * 1024):
                pass


def plain_copy(paths: list[Path]) -> float:
    start = time.perf_counter()
    buffers: dict[str, np.ndarray] = {}
    for p in paths:
        with safe_open(str(p), framework="np") as fh:
            for name in fh.keys():  # noqa: SIM118
                src = fh.get_slice(name)[:]
                dst = buffers.setdefault(name, np.empty_like(src))
                np.copyto(dst, src)
    return time.perf_counter() - start


def our_merge(paths: list[Path], out: Path) -> tuple[float, int]:
    weights = [1.0 / len(paths)] * len(paths)
    inputs = [MergeInput(p, w) for p, w in zip(paths, weights, strict=True)]
    with PeakSampler() as sampler:
        base = rss_anon_bytes()
        start = time.perf_counter()
        with out.open("wb") as fh:
            for chunk in LinearMerge().chunks(inputs):
                fh.write(chunk)
        seconds = time.perf_counter() - start
    return seconds, max(0, sampler.peak - base)


def mergekit(executable: str, paths: list[Path], folder: Path) -> float | None:
    """Time ``mergekit-pytorch`` (its raw-file merge) on the same inputs, float32 output."""
    models = "\n".join(
        f"  - model: {p}\n    parameters:\n      weight: {1.0 / len(paths)}" for p in paths
    )
    cfg = folder / "mergekit.yml"
    cfg.write_text(f"merge_method: linear\ndtype: float32\nmodels:\n{models}\n")
    start = time.perf_counter()
    res = subprocess.run(
        [executable, str(cfg), str(folder / "mk-out")], capture_output=True, text=True
    )
    if res.returncode != 0:
        print("mergekit failed:", res.stderr.strip().splitlines()[-3:])
        return None
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/retarget-bench"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--mergekit", default=None, help="the mergekit-pytorch command of a separate venv"
    )
    args = parser.parse_args()
    paths, tensor_bytes = generate(args.dir, args.inputs, args.gib)
    total = sum(p.stat().st_size for p in paths)
    warm(paths)
    t_copy = min(plain_copy(paths) for _ in range(args.repeat))
    runs = [our_merge(paths, args.dir / "merged.safetensors") for _ in range(args.repeat)]
    t_merge = min(r[0] for r in runs)
    peak = max(r[1] for r in runs)
    print(
        f"device: {merge_device()}; {args.inputs} inputs x {total / args.inputs / 1024**3:.2f} "
        f"GiB ({TENSORS} float32 tensors of {tensor_bytes / 1024**2:.0f} MiB)"
    )
    print(f"plain memory copy of the input bytes: {t_copy:.2f} s, {total / t_copy / 1e9:.2f} GB/s")
    print(
        f"LC merge (streaming, to file): {t_merge:.2f} s, {total / t_merge / 1e9:.2f} GB/s; "
        f"ratio to the copy {t_copy / t_merge:.2f} (goal >= 0.7)"
    )
    print(
        f"peak anonymous memory during the merge: {peak / 1024**2:.0f} MiB = "
        f"{peak / tensor_bytes:.1f} tensors (goal: output + 2 tensors; the output streams to "
        f"disk, so 2-3 tensors)"
    )
    if args.mergekit:
        t_mk = mergekit(args.mergekit, paths, args.dir)
        if t_mk is not None:
            print(
                f"mergekit linear merge (separate venv, same inputs): {t_mk:.2f} s; "
                f"ours is {t_mk / t_merge:.2f}x faster (goal >= 1.5x)"
            )


if __name__ == "__main__":
    main()
