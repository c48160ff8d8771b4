"""The CPU linear combination as a pipeline: reading, widening, the weighted sum and
the write overlapped (``RETARGET_MERGE_THREADS``).

Every output tensor is cut into slabs of ``SLAB`` elements. Worker threads compute
slabs (each reads its slice of every memory-mapped input, widens it to float32 into
a buffer of its own, accumulates, and casts into an output buffer) while the caller's
thread writes and hashes the slabs already done, in order. torch releases the GIL in
its kernels and a page fault on a memory-mapped input blocks only the thread that
reads it, so reading, arithmetic and writing proceed at once.

Memory is bounded by a window: at most ``window`` output slabs exist at a time (a
slab is computed only into a free output buffer, and a buffer is freed once the
caller has consumed its bytes), plus two float32 slabs per thread. With the default
slab of 4 Mi elements that is 8 MiB per window slot for bf16 output (16 MiB for
float32) and 32 MiB per thread.

The bytes are those of the sequential merge: each element is computed by the same
kernels in the same order (``mul`` by the first weight, then ``add_`` with each
further weight), and slab boundaries fall on multiples of 4096 elements, so a
vectorised kernel splits a slab where it would split the whole tensor.
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from service.merging.safetensors_stream import DTYPES

#: elements per slab (a multiple of 4096)
SLAB = 4 * 1024 * 1024
#: most merge threads one merge may use
MAX_THREADS = 64

_threads = 0


def configure_merge_threads(threads: int) -> int:
    """Set the worker threads of each CPU merge (0: one per core, at most 8); returns
    the number a merge will use."""
    global _threads
    if threads < 0 or threads > MAX_THREADS:
        raise ValueError(f"merge threads must be in [0, {MAX_THREADS}], got {threads}")
    _threads = threads
    return merge_threads()


def merge_threads() -> int:
    """Worker threads of one CPU merge."""
    return _threads or min(os.cpu_count() or 1, 8)


def slabs(numel: int, slab: int = SLAB) -> list[tuple[int, int]]:
    """[start, end) element ranges covering ``numel``, each ``slab`` long but the last."""
    if slab <= 0 or slab % 4096:
        raise ValueError(f"slab must be a positive multiple of 4096, got {slab}")
    return [(a, min(a + slab, numel)) for a in range(0, numel, slab)] or [(0, 0)]


class _Scratch(threading.local):
    """Per-thread float32 buffers: the accumulator and the widened input."""

    def __init__(self) -> None:
        self.acc = torch.empty(0, dtype=torch.float32)
        self.wide = torch.empty(0, dtype=torch.float32)

    def take(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.acc.numel() < n:
            self.acc = torch.empty(0, dtype=torch.float32)  # free before growing
            self.acc = torch.empty(n, dtype=torch.float32)
            self.wide = torch.empty(0, dtype=torch.float32)
            self.wide = torch.empty(n, dtype=torch.float32)
        return self.acc[:n], self.wide[:n]


def _slab(
    scratch: _Scratch,
    parts: list[tuple[float, torch.Tensor]],
    out: torch.Tensor,
) -> torch.Tensor:
    """sum_k weight_k * part_k in float32, cast into ``out`` (a flat slab buffer)."""
    n = out.numel()
    if out.dtype == torch.float32:
        acc, wide = out, scratch.take(n)[1]
    else:
        acc, wide = scratch.take(n)
    for k, (weight, part) in enumerate(parts):
        t = part
        if t.dtype != torch.float32:  # never write into part: it is the mapped file
            t = wide.copy_(t)
        if k == 0:
            torch.mul(t, weight, out=acc)
        else:
            acc.add_(t, alpha=weight)
    if acc is not out:
        out.copy_(acc)
    return out


class _Inputs:
    """Memory-mapped safetensors files, opened once each, read from the caller's thread."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.open: dict[Path, Any] = {}

    def flat(self, path: Path, name: str) -> torch.Tensor:
        if path not in self.open:
            self.open[path] = self.stack.enter_context(
                safe_open(str(path), framework="pt", device="cpu")
            )
        return self.open[path].get_tensor(name).reshape(-1)


def pipelined_chunks(
    names: list[str],
    out_sig: dict[str, Any],
    sources: list[tuple[float, dict[str, Path]]],
    *,
    threads: int | None = None,
    window: int | None = None,
    slab: int = SLAB,
) -> Iterator[memoryview]:
    """The data section of an output shard (tensors in sorted-name order), as zero-copy
    views: each must be consumed before the next is asked for."""
    threads = threads or merge_threads()
    window = window or 2 * threads + 1
    if threads < 1 or window < 1:
        raise ValueError(f"threads and window must be >= 1, got {threads} and {window}")
    biggest = max((math.prod(out_sig[n]["shape"]) for n in names), default=0)
    widest = max((DTYPES[out_sig[n]["dtype"]][1] for n in names), default=1)
    per_slab = min(slab, max(biggest, 1)) * widest
    free = [torch.empty(per_slab, dtype=torch.uint8) for _ in range(window)]
    pending: deque[tuple[Future[torch.Tensor], torch.Tensor]] = deque()
    scratch = _Scratch()
    with ExitStack() as stack:
        pool = stack.enter_context(
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="retarget-merge")
        )
        files = _Inputs(stack)
        try:
            for name in sorted(names):
                dtype = DTYPES[out_sig[name]["dtype"]][0]
                numel = math.prod(out_sig[name]["shape"])
                inputs = [(w, files.flat(where[name], name)) for w, where in sources]
                for a, b in slabs(numel, slab):
                    if not free:
                        done, raw = pending.popleft()
                        yield _bytes(done.result())
                        free.append(raw)
                    raw = free.pop()
                    out = raw[: (b - a) * dtype.itemsize].view(dtype)
                    parts = [(w, t[a:b]) for w, t in inputs]
                    pending.append((pool.submit(_slab, scratch, parts, out), raw))
            while pending:
                done, raw = pending.popleft()
                yield _bytes(done.result())
        finally:
            for fut, _ in pending:
                fut.cancel()
            for fut, _ in pending:  # no thread may still write a buffer once we return
                if not fut.cancelled():
                    fut.exception()


def _bytes(out: torch.Tensor) -> memoryview:
    return out.view(torch.uint8).numpy().data
