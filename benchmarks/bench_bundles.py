"""LC of sharded bundles: throughput against a memory copy, and peak memory.

    .venv/bin/python benchmarks/bench_bundles.py [--gib 1.0] [--inputs 4] [--shards 4]
        [--dtype bf16] [--dir /tmp/retarget-bench-bundles]

Generates N bundles of about --gib GiB each (--shards safetensors shards and an
index, 16 tensors per shard), warms the page cache, then times a plain memory
copy of the input bytes  and the bundle LC
(``service.merging.bundles.combine``) writing every output shard to disk, with
the process's peak anonymous memory sampled during the merge.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from benchmarks.bench_merge import PeakSampler, rss_anon_bytes, warm
from service.merging.base import merge_device
from service.merging.bundles import BundleInput, combine

PER_SHARD = 16
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def generate(root: Path, inputs: int, shards: int, gib: float, dtype: str) -> list[dict[str, Path]]:
    item = torch.empty((), dtype=TORCH[dtype]).element_size()
    elems = int(gib * 1024**3 / item / shards / PER_SHARD)
    bundles = []
    for i in range(inputs):
        folder = root / f"bundle-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        weight_map = {}
        for s in range(shards):
            name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            path = folder / name
            names = [f"layer{s:03d}.{t:02d}.weight" for t in range(PER_SHARD)]
            weight_map.update(dict.fromkeys(names, name))
            if not path.exists():
                gen = torch.Generator().manual_seed(i * 1000 + s)
                block = torch.randn(elems, generator=gen).to(TORCH[dtype])
                save_file({n: block.clone() for n in names}, str(path), metadata={"format": "pt"})
        index = folder / "model.safetensors.index.json"
        index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        (folder / "config.json").write_text("{}")
        bundles.append({p.name: p for p in folder.iterdir()})
    return bundles


def plain_copy(paths: list[Path]) -> float:
    """Copy every input tensor from the memory-mapped files into a reused buffer."""
    start = time.perf_counter()
    buffers: dict[str, torch.Tensor] = {}
    for p in paths:
        with safe_open(str(p), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118
                src = fh.get_tensor(name)
                buffers.setdefault(name, torch.empty_like(src)).copy_(src)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--dtype", choices=sorted(TORCH), default="bf16")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/retarget-bench-bundles"))
    args = parser.parse_args()
    bundles = generate(args.dir, args.inputs, args.shards, args.gib, args.dtype)
    shards = [p for b in bundles for n, p in b.items() if n.endswith(".safetensors")]
    total = sum(p.stat().st_size for p in shards)
    warm(shards)
    t_copy = plain_copy(shards)
    inputs = [BundleInput(1.0 / len(bundles), "hf_bundle", b, {n: n for n in b}) for b in bundles]
    out = args.dir / "out"
    out.mkdir(exist_ok=True)
    with PeakSampler() as sampler:
        base = rss_anon_bytes()
        start = time.perf_counter()
        for f in combine(inputs, out_dtype=None, max_shard_size=None, metadata={}):
            with (out / f.path).open("wb") as fh:
                if f.chunks is not None:
                    for chunk in f.chunks():
                        fh.write(chunk)
                elif f.data is not None:
                    fh.write(f.data)
        t_merge = time.perf_counter() - start
    peak = max(0, sampler.peak - base)
    tensor = total / len(bundles) / args.shards / PER_SHARD
    print(
        f"device: {merge_device()}; {args.inputs} bundles x {total / args.inputs / 1024**3:.2f} "
        f"GiB in {args.shards} shards ({args.dtype}, tensors of {tensor / 1024**2:.1f} MiB)"
    )
    print(f"plain memory copy of the input bytes: {t_copy:.2f} s, {total / t_copy / 1e9:.2f} GB/s")
    print(
        f"bundle LC (streaming, to files): {t_merge:.2f} s, {total / t_merge / 1e9:.2f} GB/s; "
        f"ratio to the copy {t_copy / t_merge:.2f}"
    )
    print(f"peak anonymous memory: {peak / 1024**2:.0f} MiB = {peak / tensor:.1f} input tensors")


if __name__ == "__main__":
    main()
