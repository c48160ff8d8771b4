"""Reading uploaded checkpoints: safetensors only, checked before anything is stored.

A pickle is code execution, so only safetensors is accepted. The file is
opened with the safetensors library, which checks that the header is valid
JSON, that every tensor's byte range lies inside the file and that the ranges
cover the data exactly; a file that fails any check is refused.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from safetensors import safe_open

from service.accounting.mechanisms import canonical_json
from service.errors import InvalidUpload

#: The first 8 bytes of a safetensors file are the header length; more than
#: this is a header bomb, not a checkpoint.
MAX_HEADER_BYTES = 100 * 1024 * 1024


def _refuse_foreign(head: bytes) -> None:
    """Name the format of a file that is plainly not safetensors.

    A safetensors file starts with its header's length (8 bytes, little-endian) and
    then "{"; a file whose ninth byte is "{" is never called foreign here."""
    if head[8:9] == b"{":
        return
    foreign = _foreign_format(head)
    if foreign is not None:
        raise InvalidUpload(
            f"this is {foreign}, not safetensors: pickles can run code, so only safetensors "
            "is accepted. Convert it with safetensors.torch.save_file(state_dict, "
            "'model.safetensors')"
        )


#: Tensor dtypes a checkpoint may hold: the floats a merge combines. Integers and
#: booleans cannot be weighted and summed, 8-bit floats and complex tensors cannot
#: be merged either: all are refused at upload, naming the tensor, rather than
#: failing (or being passed through unmerged) later inside a merge.
ACCEPTED_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})


def _foreign_format(head: bytes) -> str | None:
    """What a file that is not safetensors most likely is, by its first bytes."""
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (what torch.save writes: a .pt / .pth / .bin pickle)"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "a Python pickle (torch.save's legacy format)"
    if head.startswith(b"\x93NUMPY"):
        return "a NumPy .npy file"
    return None


def read_signature(path: Path) -> dict[str, Any]:
    """The tensor signature of a safetensors file: ``{name: {dtype, shape}}``.

    Raises ``InvalidUpload`` for anything that is not a complete, valid
    safetensors file with at least one tensor.
    """
    with path.open("rb") as fh:
        head = fh.read(9)
    _refuse_foreign(head)  # a clearer reason than a header that does not parse
    head = head[:8]
    if len(head) < 8:
        raise InvalidUpload("not a safetensors file: shorter than its 8-byte header length")
    header_len = int.from_bytes(head, "little")
    if header_len > MAX_HEADER_BYTES or header_len > path.stat().st_size - 8:
        raise InvalidUpload(
            f"not a safetensors file: header length {header_len} does not fit the file"
        )
    try:
        tensors: dict[str, Any] = {}
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                sl = f.get_slice(name)
                tensors[name] = {"dtype": sl.get_dtype(), "shape": list(sl.get_shape())}
    except Exception as exc:  # safetensors raises its own error types and OSError
        raise InvalidUpload(f"not a valid safetensors file: {exc}") from exc
    if not tensors:
        raise InvalidUpload("the safetensors file holds no tensors")
    refused = [
        (n, t["dtype"]) for n, t in sorted(tensors.items()) if t["dtype"] not in ACCEPTED_DTYPES
    ]
    if refused:
        named = ", ".join(f"{n!r} ({d})" for n, d in refused[:5])
        more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
        raise InvalidUpload(
            f"tensor dtype not accepted: {named}{more}; a merge needs float tensors, "
            f"one of {', '.join(sorted(ACCEPTED_DTYPES))}",
            tensors=[n for n, _ in refused],
        )
    return dict(sorted(tensors.items()))


def signature_hash(signature: dict[str, Any]) -> str:
    """sha256 of the canonical signature: equal names, shapes and dtypes hash equal."""
    return hashlib.sha256(canonical_json(signature).encode()).hexdigest()
