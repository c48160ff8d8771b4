"""Writing a safetensors file tensor by tensor, without holding the whole model.

The format is an 8-byte little-endian header length, a JSON header mapping each
tensor name to its dtype, shape and [start, end) byte offsets in the data
section, then the data. Offsets depend only on shapes and dtypes, so the header
is written first and each tensor's bytes follow as they are produced.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from typing import Any

import torch

#: safetensors dtype names -> (torch dtype, bytes per element)
DTYPES: dict[str, tuple[torch.dtype, int]] = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
    "BOOL": (torch.bool, 1),
}

FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


def header_bytes(
    signature: dict[str, dict[str, Any]], metadata: dict[str, str] | None = None
) -> bytes:
    """Length prefix and JSON header for tensors written in sorted-name order, with
    ``metadata`` as the file's ``__metadata__`` (string to string, as the format says)."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    offset = 0
    for name in sorted(signature):
        dtype = signature[name]["dtype"]
        size = math.prod(signature[name]["shape"]) * DTYPES[dtype][1]
        header[name] = {
            "dtype": dtype,
            "shape": list(signature[name]["shape"]),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the data section to 8 bytes
    return struct.pack("<Q", len(raw)) + raw


def tensor_bytes(tensor: torch.Tensor, chunk: int = 16 * 1024 * 1024) -> Iterator[bytes]:
    """A CPU tensor's raw little-endian bytes, in chunks."""
    flat = tensor.contiguous().view(-1).view(torch.uint8)
    for start in range(0, flat.numel(), chunk):
        yield flat[start : start + chunk].numpy().tobytes()


def tensor_views(tensor: torch.Tensor, chunk: int = 16 * 1024 * 1024) -> Iterator[memoryview]:
    """A CPU tensor's bytes as zero-copy views; each must be consumed before the next
    is asked for (the tensor's buffer is reused afterwards)."""
    raw = tensor.contiguous().view(-1).view(torch.uint8).numpy().data
    for start in range(0, len(raw), chunk):
        yield raw[start : start + chunk]
