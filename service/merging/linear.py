"""Linear combination: sum_i lambda_i theta_i, tensor by tensor.

Inputs are memory-mapped (safe_open), each output tensor is accumulated in
float32 on the merge device (the GPU when there is one) from one input tensor
at a time, cast back to the inputs' dtype and streamed out. The accumulator and
the cast buffer are reused across tensors: peak memory is one float32 tensor
plus one output tensor (inputs are memory-mapped: page cache, not process
memory), not N models.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import torch
from safetensors import safe_open

from service.errors import InvalidInput
from service.formats.checkpoints import read_signature
from service.merging.base import MergeInput, MergeMethod
from service.merging.device import Buffer, ToDevice, merge_device, to_host
from service.merging.safetensors_stream import (
    DTYPES,
    FLOAT_DTYPES,
    header_bytes,
    tensor_bytes,
    tensor_views,
)


class LinearMerge(MergeMethod):
    name = "linear"

    def __init__(self, device: torch.device | None = None, out_dtype: str | None = None) -> None:
        """``out_dtype``: a safetensors float dtype ("F32", "BF16", "F16") for every float
        tensor of the output; None keeps each tensor's input dtype. Accumulation is
        float32 either way."""
        if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
            raise InvalidInput(f"output dtype {out_dtype!r} is not one of {FLOAT_DTYPES}")
        self.device = device or merge_device()
        self.out_dtype = out_dtype

    def chunks(
        self, inputs: list[MergeInput], provenance: dict[str, str] | None = None
    ) -> Iterator[bytes | memoryview]:
        if not inputs:
            raise InvalidInput("nothing to merge")
        signature = read_signature(inputs[0].path)
        for item in inputs[1:]:
            other = read_signature(item.path)
            if other != signature:
                a, b = inputs[0].label or "the first model", item.label or "another model"
                raise InvalidInput(
                    f"tensor names, shapes or dtypes differ between {a} and {b} "
                    f"({_first_difference(signature, other, a, b)}): a linear combination "
                    "needs equal signatures"
                )
        if self.out_dtype is not None:
            signature = {
                name: {**sig, "dtype": self.out_dtype} if sig["dtype"] in FLOAT_DTYPES else sig
                for name, sig in signature.items()
            }
        yield header_bytes(signature, {**shared_metadata(inputs), **(provenance or {})})
        acc_buf = Buffer(torch.float32, self.device)
        cuda = self.device.type == "cuda"
        out_buf = Buffer(torch.float32, torch.device("cpu"), pinned=cuda)
        to_device = ToDevice(self.device)
        with ExitStack() as stack:
            files = [
                stack.enter_context(safe_open(str(i.path), framework="pt", device="cpu"))
                for i in inputs
            ]
            for name in sorted(signature):
                dtype = signature[name]["dtype"]
                if dtype not in FLOAT_DTYPES:
                    # integer buffers (step counters, ...) cannot be averaged: keep the first's
                    yield from tensor_bytes(files[0].get_tensor(name))
                    continue
                shape = signature[name]["shape"]
                acc = acc_buf.view(shape)
                for k, (item, fh) in enumerate(zip(inputs, files, strict=True)):
                    # never write into t: on the CPU it is the memory-mapped file itself,
                    # and a write would copy its pages into process memory for good
                    t = to_device(fh.get_tensor(name)).to(torch.float32)
                    if k == 0:
                        torch.mul(t, item.weight, out=acc)
                    else:
                        acc.add_(t, alpha=item.weight)
                    del t
                out_dtype = DTYPES[dtype][0]
                if out_dtype == torch.float32 and acc.device.type == "cpu":
                    out = acc
                else:
                    out_buf.dtype = out_dtype
                    out = out_buf.view(shape)
                    to_host(acc, out)  # cast (and copy back from the GPU) into a reused buffer
                yield from tensor_views(out)


def shared_metadata(inputs: list[MergeInput]) -> dict[str, str]:
    """The ``__metadata__`` entries every input has with the same value ({"format": "pt"})."""
    common: dict[str, str] | None = None
    for item in inputs:
        with safe_open(str(item.path), framework="pt", device="cpu") as fh:
            meta = dict(fh.metadata() or {})
        common = meta if common is None else {k: v for k, v in common.items() if meta.get(k) == v}
    return common or {}


def _first_difference(left: dict[str, Any], right: dict[str, Any], a: str, b: str) -> str:
    for name in sorted(set(left) | set(right)):
        if name not in right or name not in left:
            return f"tensor {name!r} is in {a if name in left else b} only"
        if left[name] != right[name]:
            x, y = left[name], right[name]
            return (
                f"tensor {name!r} is {x['shape']} {x['dtype']} in {a}, "
                f"{y['shape']} {y['dtype']} in {b}"
            )
    return "their signatures differ"
