"""LC of sharded bf16 bundles: throughput against a memory copy and a numpy merge, peak memory.

    .venv/bin/python -m benchmarks.bench_bundles [--gib 1.0] [--inputs 4] [--shards 8]
        [--runs 3] [--threads 0] [--scale 1] [--dir /tmp/retarget-bench-bundles] [--quick]

Generates N Llama-shaped bundles of about --gib GiB each, at least one layer per shard
(bf16, Llama-2-7B widths divided by --scale; embeddings, --shards shards of decoder
layers with q/k/v/o and gate/up/down projections and norms, an index and a config),
warms the page cache, then in each run times, in the same process and on the same bytes:

  * a plain memory copy of every input tensor from the memory-mapped shards into a
    reused buffer (the baseline: the least work that touches every input byte),
  * a numpy merge (bf16 widened by a shift, float32 sums, rounded to nearest even),
    written to files,
  * the service's bundle LC (``service.merging.bundles.combine``, pipelined with
    --threads workers; 0: the default) writing every output shard to files,

and samples the process's anonymous resident memory during the LC. Prints medians
with min-max over --runs. ``--quick``: small bundles, one run, and a check that the
LC's shards hold the numpy merge's values (it exits 1 when they do not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from benchmarks.bench_merge import PeakSampler, rss_anon_bytes, warm
from service.merging import pipeline
from service.merging.bundles import BundleInput, combine

#: Llama-2-7B's widths; --gib sets how many layers
HIDDEN, INTERMEDIATE, VOCAB = 4096, 11008, 32000


def llama_shapes(gib: float, shards: int, scale: int = 1) -> dict[str, dict[str, list[int]]]:
    """Shard -> {tensor name: shape}: embeddings in the first shard, layers spread over
    the rest, the head in the last; ``scale`` divides every width (quick runs)."""
    h, i, v = HIDDEN // scale, INTERMEDIATE // scale, VOCAB // scale
    layer = {
        "self_attn.q_proj.weight": [h, h],
        "self_attn.k_proj.weight": [h, h],
        "self_attn.v_proj.weight": [h, h],
        "self_attn.o_proj.weight": [h, h],
        "mlp.gate_proj.weight": [i, h],
        "mlp.up_proj.weight": [i, h],
        "mlp.down_proj.weight": [h, i],
        "input_layernorm.weight": [h],
        "post_attention_layernorm.weight": [h],
    }
    per_layer = sum(int(np.prod(s)) for s in layer.values()) * 2
    layers = max(shards - 2, int((gib * 1024**3 - 2 * v * h * 2) / per_layer))
    out: dict[str, dict[str, list[int]]] = {}
    body = shards - 2 if shards > 2 else shards
    for n in range(layers):
        shard = 1 + n * body // layers if shards > 2 else n * shards // layers
        names = {f"model.layers.{n}.{k}": s for k, s in layer.items()}
        out.setdefault(f"model-{shard + 1:05d}-of-{shards:05d}.safetensors", {}).update(names)
    first = f"model-{1:05d}-of-{shards:05d}.safetensors"
    last = f"model-{shards:05d}-of-{shards:05d}.safetensors"
    out.setdefault(first, {})["model.embed_tokens.weight"] = [v, h]
    out.setdefault(last, {}).update({"model.norm.weight": [h], "lm_head.weight": [v, h]})
    return out


def generate(
    root: Path, inputs: int, shards: int, gib: float, scale: int = 1
) -> list[dict[str, Path]]:
    layout = llama_shapes(gib, shards, scale)
    bundles = []
    for k in range(inputs):
        folder = root / f"bundle-{k}"
        folder.mkdir(parents=True, exist_ok=True)
        gen = torch.Generator().manual_seed(k)
        pool = torch.randn(2**22, generator=gen).to(torch.bfloat16)
        weight_map = {}
        for s, (shard, tensors) in enumerate(sorted(layout.items())):
            weight_map.update(dict.fromkeys(tensors, shard))
            path = folder / shard
            if path.exists():
                continue
            data = {}
            for t, (name, shape) in enumerate(sorted(tensors.items())):
                n = int(np.prod(shape))
                reps = -(-n // pool.numel()) + 1
                start = (s * 7919 + t * 104729) % pool.numel()
                data[name] = pool.repeat(reps)[start : start + n].reshape(shape).clone()
            save_file(data, str(path), metadata={"format": "pt"})
        index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        bundles.append({p.name: p for p in folder.iterdir() if not p.name.startswith(".")})
    return bundles


def plain_copy(paths: list[Path]) -> float:
    """Copy every input tensor from the memory-mapped files into a reused buffer."""
    start = time.perf_counter()
    buffers: dict[tuple[int, ...], torch.Tensor] = {}
    for p in paths:
        with safe_open(str(p), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118
                src = fh.get_tensor(name)
                buffers.setdefault(tuple(src.shape), torch.empty_like(src)).copy_(src)
    return time.perf_counter() - start


def _bits(t: torch.Tensor) -> np.ndarray:
    """A bf16 tensor's bits as numpy uint16 (numpy has no bf16)."""
    return t.view(torch.int16).numpy().view(np.uint16)


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even (finite values), as bf16's bits."""
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def numpy_merge(bundles: list[dict[str, Path]], weights: list[float], out: Path) -> float:
    """The same LC in numpy, tensor by tensor, each shard written to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for shard in sorted(n for n in bundles[0] if n.endswith(".safetensors")):
        handles = [safe_open(str(b[shard]), framework="pt") for b in bundles]
        with (out / shard).open("wb") as fh:
            for name in sorted(handles[0].keys()):
                acc: np.ndarray | None = None
                for w, h in zip(weights, handles, strict=True):
                    x = _bf16_to_f32(_bits(h.get_tensor(name)))
                    if acc is None:
                        acc = x * np.float32(w)
                    else:
                        acc += x * np.float32(w)
                assert acc is not None
                fh.write(_f32_to_bf16(acc).tobytes())
    return time.perf_counter() - start


def lc_merge(bundles: list[dict[str, Path]], weights: list[float], out: Path) -> tuple[float, int]:
    inputs = [
        BundleInput(w, "hf_bundle", b, {n: n for n in b})
        for w, b in zip(weights, bundles, strict=True)
    ]
    out.mkdir(parents=True, exist_ok=True)
    with PeakSampler() as sampler:
        base = rss_anon_bytes()
        start = time.perf_counter()
        files = combine(inputs, out_dtype=None, max_shard_size=None, metadata={})
        for f in files:
            with (out / f.path).open("wb") as fh:
                if f.chunks is not None:
                    for chunk in f.chunks():
                        fh.write(chunk)
                elif f.data is not None:
                    fh.write(f.data)
        seconds = time.perf_counter() - start
    return seconds, max(0, sampler.peak - base)


def check(bundles: list[dict[str, Path]], weights: list[float], out: Path) -> float:
    """Largest difference, in bf16 steps, between the LC's shards and the numpy merge."""
    ref = out.parent / "numpy"
    numpy_merge(bundles, weights, ref)
    worst = 0.0
    for shard in sorted(n for n in bundles[0] if n.endswith(".safetensors")):
        with safe_open(str(out / shard), framework="pt") as fh:
            got = np.concatenate([_bits(fh.get_tensor(n)).ravel() for n in sorted(fh.keys())])
        want = np.frombuffer((ref / shard).read_bytes(), dtype=np.uint16)
        worst = max(worst, float(np.abs(got.astype(np.int64) - want.astype(np.int64)).max()))
    return worst


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/retarget-bench-bundles"))
    parser.add_argument("--scale", type=int, default=1, help="divides every width")
    parser.add_argument("--quick", action="store_true", help="small, one run, checked")
    args = parser.parse_args()
    scale = 16 if args.quick else args.scale
    if args.quick:
        args.gib, args.runs = 0.004, 1
    threads = pipeline.configure_merge_threads(args.threads)
    bundles = generate(args.dir, args.inputs, args.shards, args.gib, scale)
    weights = [1.0 / len(bundles)] * len(bundles)
    shards = [p for b in bundles for n, p in b.items() if n.endswith(".safetensors")]
    total = sum(p.stat().st_size for p in shards)
    copies, numpys, merges, peaks = [], [], [], []
    for _ in range(args.runs):
        warm(shards)
        copies.append(plain_copy(shards))
        numpys.append(numpy_merge(bundles, weights, args.dir / "numpy"))
        seconds, peak = lc_merge(bundles, weights, args.dir / "out")
        merges.append(seconds)
        peaks.append(peak)
    gbs = total / 1e9
    print(
        f"{args.inputs} Llama-shaped bf16 bundles x {total / args.inputs / 1024**3:.2f} GiB in "
        f"{args.shards} shards (widths / {scale}); {threads} merge threads; {args.runs} runs, "
        "median (min-max)"
    )
    print(f"plain memory copy: {spread([gbs / t for t in copies])} GB/s of input")
    print(f"numpy merge, to files: {spread([gbs / t for t in numpys])} GB/s")
    print(f"bundle LC, to files: {spread([gbs / t for t in merges])} GB/s")
    print(f"LC / copy: {spread([c / m for c, m in zip(copies, merges, strict=True)])}")
    print(f"LC / numpy: {spread([n / m for n, m in zip(numpys, merges, strict=True)])}")
    print(f"peak anonymous memory during the LC: {max(peaks) / 1024**2:.0f} MiB")
    if args.quick:
        worst = check(bundles, weights, args.dir / "out")
        print(f"largest difference from the numpy merge: {worst:.0f} bf16 steps")
        if worst > 1:
            sys.exit(1)


if __name__ == "__main__":
    main()
