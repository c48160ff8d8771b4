"""Linear combination: sum_i lambda_i theta_i, tensor by tensor.

Inputs are memory-mapped (safe_open), each output tensor is accumulated in
float32 on the merge device (the GPU when there is one) from one input tensor
at a time, cast back to the inputs' dtype and streamed out. Peak memory is the
output tensor being built plus the input tensor being added, not N models.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import torch
from safetensors import safe_open

from service.errors import InvalidInput
from service.merging.base import MergeInput, MergeMethod, merge_device
from service.merging.safetensors_stream import DTYPES, FLOAT_DTYPES, header_bytes, tensor_bytes
from service.registry.checkpoints import read_signature


class LinearMerge(MergeMethod):
    name = "linear"

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or merge_device()

    def chunks(self, inputs: list[MergeInput]) -> Iterator[bytes]:
        if not inputs:
            raise InvalidInput("nothing to merge")
        signature = read_signature(inputs[0].path)
        for item in inputs[1:]:
            if read_signature(item.path) != signature:
                raise InvalidInput(
                    "tensor names, shapes or dtypes differ between the models: "
                    "a linear combination needs equal signatures"
                )
        yield header_bytes(signature)
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
                acc = None
                for item, fh in zip(inputs, files, strict=True):
                    t = fh.get_tensor(name).to(self.device, torch.float32, non_blocking=True)
                    if acc is None:
                        acc = t.mul_(item.weight)
                    else:
                        acc.add_(t, alpha=item.weight)
                    del t
                assert acc is not None
                out = acc.to(DTYPES[dtype][0]).cpu()
                del acc
                yield from tensor_bytes(out)
