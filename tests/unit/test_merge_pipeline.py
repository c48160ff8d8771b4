"""The pipelined CPU merge (RETARGET_MERGE_THREADS): the bytes of the plain weighted sum,
whatever the threads, the slab size and the window, on tensors of odd sizes."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from service.merging import pipeline
from service.merging.bundles import BundleInput, combine
from service.merging.pipeline import pipelined_chunks, slabs
from service.merging.safetensors_stream import DTYPES

GEN = torch.Generator().manual_seed(11)
#: odd element counts: below, at and past slab boundaries of 4096 and 8192 elements
SHAPES = {
    "a.weight": [3, 4099],
    "b.weight": [8193],
    "c.bias": [1],
    "d.empty": [0, 5],
    "e.weight": [4096, 3],
}
WEIGHTS = (0.3, 0.5, 0.125, 0.075)


def _inputs(root: Path, dtype: torch.dtype) -> list[tuple[float, dict[str, Path]]]:
    sources = []
    for k, weight in enumerate(WEIGHTS):
        path = root / f"m{k}.safetensors"
        tensors = {n: torch.randn(s, generator=GEN).to(dtype) for n, s in SHAPES.items()}
        save_file(tensors, str(path))
        sources.append((weight, dict.fromkeys(SHAPES, path)))
    return sources


def _expected(sources: list[tuple[float, dict[str, Path]]], out: torch.dtype) -> bytes:
    """The weighted sum tensor by tensor, in float32, as one sequential loop writes it."""
    loaded = [(w, load_file(str(where["a.weight"]))) for w, where in sources]
    data = b""
    for name in sorted(SHAPES):
        acc = loaded[0][1][name].float() * loaded[0][0]
        for w, tensors in loaded[1:]:
            acc.add_(tensors[name].float(), alpha=w)
        data += acc.to(out).contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return data


@pytest.mark.parametrize(
    ("dtype", "out", "threads", "slab", "window"),
    [
        (torch.bfloat16, "BF16", 1, 4096, 1),
        (torch.bfloat16, "BF16", 3, 4096, 2),
        (torch.bfloat16, "F32", 4, 8192, 9),
        (torch.float16, "F16", 2, 4096, 5),
        (torch.float32, "F32", 3, 8192, 3),
        (torch.float32, "BF16", 2, 4096, 4),
    ],
)
def test_pipelined_merge_writes_the_bytes_of_the_plain_sum(
    tmp_path: Path, dtype: torch.dtype, out: str, threads: int, slab: int, window: int
) -> None:
    sources = _inputs(tmp_path, dtype)
    out_sig = {n: {"dtype": out, "shape": s} for n, s in SHAPES.items()}
    got = b"".join(
        bytes(v)
        for v in pipelined_chunks(
            list(SHAPES), out_sig, sources, threads=threads, slab=slab, window=window
        )
    )
    assert got == _expected(sources, DTYPES[out][0])


def test_slabs_cover_every_element_once_on_4096_boundaries() -> None:
    for numel in (0, 1, 4095, 4096, 4097, 3 * 8192 + 7):
        cut = slabs(numel, 8192)
        assert cut[0][0] == 0 and cut[-1][1] == numel
        assert all(b == c for (_, b), (c, _) in itertools.pairwise(cut))
        assert all(a % 4096 == 0 for a, _ in cut)
    with pytest.raises(ValueError, match="multiple of 4096"):
        slabs(10, 1000)


def test_merge_threads_setting_is_checked() -> None:
    try:
        assert pipeline.configure_merge_threads(3) == 3
        with pytest.raises(ValueError, match="merge threads"):
            pipeline.configure_merge_threads(-1)
        assert pipeline.configure_merge_threads(0) >= 1
    finally:
        pipeline.configure_merge_threads(0)


def test_a_sharded_bundle_merges_to_the_same_bytes_with_one_thread_or_several(
    tmp_path: Path,
) -> None:
    """The whole bundle LC (header, index, shards), through ``combine``."""
    bundles = []
    for k, weight in enumerate(WEIGHTS[:3]):
        folder = tmp_path / f"b{k}"
        folder.mkdir()
        names = sorted(SHAPES)
        shards = {"model-00001-of-00002.safetensors": names[:2]}
        shards["model-00002-of-00002.safetensors"] = names[2:]
        paths = {}
        for shard, members in shards.items():
            tensors = {n: torch.randn(SHAPES[n], generator=GEN).to(torch.bfloat16) for n in members}
            save_file(tensors, str(folder / shard), metadata={"format": "pt"})
            paths[shard] = folder / shard
        index = {"weight_map": {n: s for s, ms in shards.items() for n in ms}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        paths["model.safetensors.index.json"] = folder / "model.safetensors.index.json"
        shas = {p: hashlib.sha256(f.read_bytes()).hexdigest() for p, f in paths.items()}
        bundles.append(BundleInput(weight, "hf_bundle", paths, shas))

    def merged(threads: int) -> dict[str, str]:
        pipeline.configure_merge_threads(threads)
        files = combine(
            bundles,
            out_dtype=None,
            max_shard_size=None,
            metadata={"retarget.release_id": "r"},
            device=torch.device("cpu"),
        )
        out = {}
        for f in files:
            h = hashlib.sha256()
            for chunk in f.chunks() if f.chunks is not None else [f.data or b""]:
                h.update(chunk)
            out[f.path] = h.hexdigest()
        return out

    try:
        one, several = merged(1), merged(4)
    finally:
        pipeline.configure_merge_threads(0)
    assert one == several
    assert sorted(one) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
