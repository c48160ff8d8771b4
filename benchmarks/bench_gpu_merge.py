"""The bundle LC on a GPU against the device's own limits, in one run.

    .venv/bin/python -m benchmarks.bench_gpu_merge [--gib 1.0] [--inputs 4] [--runs 3]
        [--dir /tmp/retarget-bench-gpu] [--quick]

Measures, on the same device: device-to-device memcpy bandwidth, host-to-device
bandwidth from pinned memory (the bound of a merge whose inputs live on the host:
every input byte crosses it once), and the service's bundle LC with
``device=cuda`` (pinned double-buffered host copies, ``service.merging.device``) on
Llama-shaped bf16 bundles (``benchmarks.bench_bundles``), its output consumed
without writing. Prints medians with min-max and the LC's ratio to each bandwidth.
``--quick``: small bundles, one run, and a check that the GPU's shards are within one
bf16 step of the numpy merge (exit 1 otherwise). Without a CUDA device it says so
and exits 0: nothing is measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.bench_bundles import check as shards_against_numpy
from benchmarks.bench_bundles import generate, warm
from service.merging.bundles import BundleInput, combine


def bandwidth(src: torch.Tensor, dst: torch.Tensor, repeat: int = 5) -> float:
    """Bytes per second of ``dst.copy_(src)``, the median of ``repeat`` timed copies."""
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        rates.append(src.numel() * src.element_size() / (time.perf_counter() - start))
    return statistics.median(rates)


def gpu_merge(bundles: list[dict[str, Path]], weights: list[float]) -> float:
    """Seconds of the LC on the GPU, every output chunk consumed (not written)."""
    inputs = [
        BundleInput(w, "hf_bundle", b, {n: n for n in b})
        for w, b in zip(weights, bundles, strict=True)
    ]
    start = time.perf_counter()
    for f in combine(
        inputs, out_dtype=None, max_shard_size=None, metadata={}, device=torch.device("cuda")
    ):
        for _ in f.chunks() if f.chunks is not None else ():
            pass
    return time.perf_counter() - start


def check(bundles: list[dict[str, Path]], weights: list[float], root: Path) -> float:
    """Largest difference in bf16 steps between the GPU's shards and the numpy merge."""
    inputs = [
        BundleInput(w, "hf_bundle", b, {n: n for n in b})
        for w, b in zip(weights, bundles, strict=True)
    ]
    (root / "gpu").mkdir(parents=True, exist_ok=True)
    for f in combine(
        inputs, out_dtype=None, max_shard_size=None, metadata={}, device=torch.device("cuda")
    ):
        with (root / "gpu" / f.path).open("wb") as fh:
            for chunk in f.chunks() if f.chunks is not None else [f.data or b""]:
                fh.write(chunk)
    return shards_against_numpy(bundles, weights, root / "gpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/retarget-bench-gpu"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device on this host (torch.cuda.is_available() is False): unmeasured")
        return
    scale = 16 if args.quick else 1
    if args.quick:
        args.gib, args.runs = 0.004, 1
    size = 256 * 1024**2
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    dev_a = torch.empty(size, dtype=torch.uint8, device="cuda")
    dev_b = torch.empty(size, dtype=torch.uint8, device="cuda")
    d2d = bandwidth(dev_a, dev_b)
    h2d = bandwidth(host, dev_a)
    del host, dev_a, dev_b
    bundles = generate(args.dir, args.inputs, args.shards, args.gib, scale)
    weights = [1.0 / len(bundles)] * len(bundles)
    shards = [p for b in bundles for n, p in b.items() if n.endswith(".safetensors")]
    total = sum(p.stat().st_size for p in shards)
    rates = []
    for _ in range(args.runs):
        warm(shards)
        rates.append(total / gpu_merge(bundles, weights))
    med = statistics.median(rates)
    print(f"device: {torch.cuda.get_device_name()}; {len(bundles)} bundles, {total / 1e9:.2f} GB")
    print(f"device memcpy: {d2d / 1e9:.1f} GB/s; host-to-device (pinned): {h2d / 1e9:.1f} GB/s")
    print(
        f"GPU bundle LC: {med / 1e9:.2f} ({min(rates) / 1e9:.2f}-{max(rates) / 1e9:.2f}) GB/s "
        f"of input; ratio to H2D {med / h2d:.2f}, to device memcpy {med / d2d:.3f}"
    )
    if args.quick:
        worst = check(bundles, weights, args.dir)
        print(f"largest difference from the numpy merge: {worst:.0f} bf16 steps")
        if worst > 1:
            sys.exit(1)


if __name__ == "__main__":
    main()
