"""Linear combinations of bundles: sharded checkpoints and PEFT LoRA adapters.

A sharded model is combined tensor by tensor across shards: every input shard is
memory-mapped, each output tensor accumulated in float32 from one input tensor at
a time and streamed into its output shard, whose header is written first (offsets
depend on shapes only). Sidecars (configuration, tokenizer files, chat template)
must be byte-identical across the inputs and are copied; the index is rewritten
for the output shards.

LoRA adapters are combined exactly. A model with adapter (A_i, B_i) and scaling
s_i is W0 + s_i B_i A_i; with weights l_i summing to 1 the combination is
W0 + sum_i l_i s_i B_i A_i, which is not (sum l_i B_i)(sum l_i A_i). It is one
adapter of rank R = sum_i r_i: A = [A_1; ...; A_N] (stacked along the rank),
B = [c_1 B_1 | ... | c_N B_N] with c_i = l_i s_i, and a configuration whose
scaling is 1 (lora_alpha = r = R).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from service.errors import InvalidInput
from service.formats.bundles import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    INDEX_SUFFIX,
    is_sidecar,
    lora_role,
    lora_scaling,
)
from service.formats.checkpoints import read_signature
from service.merging.device import Buffer, ToDevice, merge_device, to_host
from service.merging.pipeline import pipelined_chunks
from service.merging.safetensors_stream import DTYPES, FLOAT_DTYPES, header_bytes, tensor_views

Chunks = Iterator[bytes | memoryview]


@dataclass(frozen=True)
class BundleInput:
    """One bundle to combine: its weight and its files (bundle path -> local file, sha256)."""

    weight: float
    kind: str
    paths: dict[str, Path]
    shas: dict[str, str]


@dataclass
class OutFile:
    """A file of the output: bytes to write, or a stored blob copied as is."""

    path: str
    chunks: Callable[[], Chunks] | None = None
    sha256: str | None = None
    data: bytes | None = None
    size: int = field(default=0)


def shared_sidecars(inputs: list[BundleInput]) -> list[OutFile]:
    """The sidecars every input holds byte for byte, as copies; InvalidInput naming the
    files that differ or that some inputs lack."""
    paths = set().union(*({p for p in i.shas if is_sidecar(p)} for i in inputs))
    differ = sorted(p for p in paths if len({i.shas.get(p) for i in inputs}) > 1)
    if differ:
        raise InvalidInput(
            f"configuration or tokenizer files differ between the merged models: {differ}; "
            "only models of one architecture and tokenizer can be combined",
            files=differ,
        )
    return [OutFile(path=p, sha256=inputs[0].shas[p]) for p in sorted(paths)]


def combine(
    inputs: list[BundleInput],
    *,
    out_dtype: str | None,
    max_shard_size: int | None,
    metadata: dict[str, str],
    device: torch.device | None = None,
) -> list[OutFile]:
    """The output files of sum_i weight_i * input_i (weights, index, configuration,
    copied sidecars); nothing is read past the headers until a file's chunks are."""
    if not inputs:
        raise InvalidInput("nothing to merge")
    kinds = {i.kind for i in inputs}
    if len(kinds) > 1:
        raise InvalidInput(f"bundles of different kinds cannot be combined: {sorted(kinds)}")
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise InvalidInput(f"output dtype {out_dtype!r} is not one of {FLOAT_DTYPES}")
    device = device or merge_device()
    sidecars = shared_sidecars(inputs)
    if inputs[0].kind == "peft_lora":
        return [*_lora(inputs, out_dtype, metadata, device), *sidecars]
    return [*_sharded(inputs, out_dtype, max_shard_size, metadata, device), *sidecars]


def _locate(item: BundleInput) -> tuple[dict[str, Any], dict[str, str]]:
    """An input's signature over all its shards and the shard each tensor is in."""
    signature: dict[str, Any] = {}
    where: dict[str, str] = {}
    for path in sorted(p for p in item.paths if p.endswith(".safetensors")):
        for name, entry in read_signature(item.paths[path]).items():
            signature[name] = entry
            where[name] = path
    return signature, where


def _file_metadata(inputs: list[BundleInput], provenance: dict[str, str]) -> dict[str, str]:
    """The ``__metadata__`` entries every shard of every input agrees on, plus provenance."""
    common: dict[str, str] | None = None
    for item in inputs:
        for path in (p for p in item.paths if p.endswith(".safetensors")):
            with safe_open(str(item.paths[path]), framework="pt", device="cpu") as fh:
                meta = dict(fh.metadata() or {})
            common = (
                meta if common is None else {k: v for k, v in common.items() if meta.get(k) == v}
            )
    return {**(common or {}), **provenance}


def _sharded(
    inputs: list[BundleInput],
    out_dtype: str | None,
    max_shard_size: int | None,
    provenance: dict[str, str],
    device: torch.device,
) -> list[OutFile]:
    located = [_locate(i) for i in inputs]
    signature, first_where = located[0]
    for k, (sig, _) in enumerate(located[1:], start=1):
        if sig != signature:
            raise InvalidInput(
                f"tensor names, shapes or dtypes of input {k} differ from the first: "
                "a linear combination needs equal signatures"
            )
    out_sig = {
        n: {**e, "dtype": out_dtype} if out_dtype is not None else e for n, e in signature.items()
    }
    layout = _layout(inputs[0], first_where, out_sig, max_shard_size)
    metadata = _file_metadata(inputs, provenance)
    sources = [
        (i.weight, {n: i.paths[w[n]] for n in signature})
        for i, (_, w) in zip(inputs, located, strict=True)
    ]

    def shard_chunks(names: list[str]) -> Callable[[], Chunks]:
        return lambda: _linear_chunks(names, out_sig, sources, metadata, device)

    files = [OutFile(path=shard, chunks=shard_chunks(names)) for shard, names in layout.items()]
    if len(layout) > 1:
        index_name = next(
            (p for p in inputs[0].paths if p.endswith(INDEX_SUFFIX)), "model" + INDEX_SUFFIX
        )
        weight_map = {n: shard for shard, names in layout.items() for n in names}
        total = sum(_nbytes(out_sig[n]) for n in weight_map)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        files.append(OutFile(path=index_name, data=json.dumps(index, indent=2).encode() + b"\n"))
    return files


def _nbytes(entry: dict[str, Any]) -> int:
    return math.prod(entry["shape"]) * DTYPES[entry["dtype"]][1]


def _layout(
    first: BundleInput,
    where: dict[str, str],
    out_sig: dict[str, Any],
    max_shard_size: int | None,
) -> dict[str, list[str]]:
    """Output shard -> its tensors: the first input's sharding, or shards packed up to
    ``max_shard_size`` bytes in the first input's order."""
    ordered = sorted(out_sig, key=lambda n: (where[n], n))
    if max_shard_size is None:
        layout: dict[str, list[str]] = {}
        for name in ordered:
            layout.setdefault(where[name], []).append(name)
        return layout
    groups: list[list[str]] = [[]]
    size = 0
    for name in ordered:
        nbytes = _nbytes(out_sig[name])
        if groups[-1] and size + nbytes > max_shard_size:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    if len(groups) == 1:
        return {"model.safetensors": groups[0]}
    n = len(groups)
    return {f"model-{i + 1:05d}-of-{n:05d}.safetensors": g for i, g in enumerate(groups)}


class _Files:
    """Memory-mapped safetensors files, opened once each."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.open: dict[Path, Any] = {}

    def tensor(self, path: Path, name: str) -> torch.Tensor:
        if path not in self.open:
            self.open[path] = self.stack.enter_context(
                safe_open(str(path), framework="pt", device="cpu")
            )
        return self.open[path].get_tensor(name)


def _linear_chunks(
    names: list[str],
    out_sig: dict[str, Any],
    sources: list[tuple[float, dict[str, Path]]],
    metadata: dict[str, str],
    device: torch.device,
) -> Chunks:
    """One output shard: header, then each tensor's float32 accumulation, cast. On the
    CPU the tensors are cut into slabs computed by worker threads while this thread
    writes (``pipeline``); on CUDA the accumulator and the cast buffer are reused across
    tensors (``device.Buffer``) and the copies go through pinned host memory
    (``device.ToDevice``, ``to_host``)."""
    yield header_bytes({n: out_sig[n] for n in names}, metadata)
    if device.type == "cpu":
        yield from pipelined_chunks(names, out_sig, sources)
        return
    acc_buf = Buffer(torch.float32, device)
    in_buf = Buffer(torch.float32, device)
    out_buf = Buffer(torch.float32, torch.device("cpu"), pinned=device.type == "cuda")
    to_device = ToDevice(device)
    with ExitStack() as stack:
        files = _Files(stack)
        for name in sorted(names):
            shape = out_sig[name]["shape"]
            acc = acc_buf.view(shape)
            for k, (weight, where) in enumerate(sources):
                # read only: on the CPU the tensor is the memory-mapped file itself
                t = to_device(files.tensor(where[name], name))
                if t.dtype != torch.float32:  # widen into a reused buffer (mixed-dtype
                    t = in_buf.view(shape).copy_(t)  # arithmetic is several times slower)
                if k == 0:
                    torch.mul(t, weight, out=acc)
                else:
                    acc.add_(t, alpha=weight)
                del t
            out_dtype = DTYPES[out_sig[name]["dtype"]][0]
            if out_dtype == torch.float32 and acc.device.type == "cpu":
                out = acc
            else:
                out_buf.dtype = out_dtype
                out = out_buf.view(shape)
                to_host(acc, out)
            yield from tensor_views(out)


def _lora(
    inputs: list[BundleInput],
    out_dtype: str | None,
    provenance: dict[str, str],
    device: torch.device,
) -> list[OutFile]:
    configs = [json.loads(i.paths[ADAPTER_CONFIG].read_bytes()) for i in inputs]
    for key in ("base_model_name_or_path", "target_modules", "modules_to_save", "task_type"):
        values = [_normal(c.get(key)) for c in configs]
        if any(v != values[0] for v in values):
            raise InvalidInput(
                f"LoRA adapters with different {key} cannot be combined: "
                f"{sorted({json.dumps(v) for v in values})}",
                field=key,
            )
    total = sum(i.weight for i in inputs)
    if not math.isclose(total, 1.0, rel_tol=0, abs_tol=1e-6):
        raise InvalidInput(f"an exact LoRA combination needs weights summing to 1, got {total}")
    signatures = [read_signature(i.paths[ADAPTER_WEIGHTS]) for i in inputs]
    names = sorted(signatures[0])
    if any(sorted(s) != names for s in signatures):
        raise InvalidInput("the adapters hold different tensors (other layers or modules)")
    ranks = [int(c["r"]) for c in configs]
    rank = sum(ranks)
    coefficients = [i.weight * lora_scaling(c) for i, c in zip(inputs, configs, strict=True)]
    out_sig: dict[str, Any] = {}
    for name in names:
        entry = signatures[0][name]
        shape = list(entry["shape"])
        role = lora_role(name)
        if role == "A":
            shape[0] = rank
        elif role == "B":
            shape[1] = rank
        elif any(s[name] != entry for s in signatures):
            raise InvalidInput(f"tensor {name!r} differs in shape or dtype between the adapters")
        out_sig[name] = {"dtype": out_dtype or entry["dtype"], "shape": shape}
    metadata = _file_metadata(inputs, provenance)
    paths = [i.paths[ADAPTER_WEIGHTS] for i in inputs]
    weights = [i.weight for i in inputs]

    def chunks() -> Chunks:
        yield header_bytes(out_sig, metadata)
        with ExitStack() as stack:
            files = _Files(stack)
            for name in names:
                parts = [files.tensor(p, name).to(device, torch.float32) for p in paths]
                role = lora_role(name)
                if role == "A":
                    acc = torch.cat(parts, dim=0)
                elif role == "B":
                    acc = torch.cat([c * t for c, t in zip(coefficients, parts, strict=True)], 1)
                else:
                    acc = sum(
                        (w * t for w, t in zip(weights, parts, strict=True)),
                        torch.zeros_like(parts[0]),
                    )
                out = acc.to(DTYPES[out_sig[name]["dtype"]][0]).cpu()
                yield from tensor_views(out)
                del parts, acc, out

    config = {
        **configs[0],
        "r": rank,
        "lora_alpha": rank,
        "use_rslora": False,
        "rank_pattern": {},
        "alpha_pattern": {},
    }
    config_bytes = json.dumps(config, indent=2, sort_keys=True).encode() + b"\n"
    return [
        OutFile(path=ADAPTER_WEIGHTS, chunks=chunks),
        OutFile(path=ADAPTER_CONFIG, data=config_bytes),
    ]


def _normal(value: Any) -> Any:
    """A configuration value compared as a set where PEFT treats it as one."""
    return sorted(value) if isinstance(value, list) else value
