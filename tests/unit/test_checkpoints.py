from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from service.errors import InvalidUpload
from service.formats.checkpoints import read_signature, signature_hash
from tests.helpers import checkpoint_bytes, pickle_bytes


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "ckpt"
    path.write_bytes(data)
    return path


def test_signature_lists_names_shapes_and_dtypes(tmp_path: Path) -> None:
    data = save({"b": torch.zeros(3, dtype=torch.bfloat16), "a": torch.zeros(2, 5)})
    sig = read_signature(write(tmp_path, data))
    assert sig == {"a": {"dtype": "F32", "shape": [2, 5]}, "b": {"dtype": "BF16", "shape": [3]}}
    same = save({"a": torch.ones(2, 5), "b": torch.ones(3, dtype=torch.bfloat16)})
    assert signature_hash(read_signature(write(tmp_path, same))) == signature_hash(sig)
    other = save({"a": torch.ones(2, 5), "b": torch.ones(3)})
    assert signature_hash(read_signature(write(tmp_path, other))) != signature_hash(sig)


def _header_file(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


@pytest.mark.parametrize(
    "data",
    [
        pickle_bytes(),
        b"",
        b"1234567",
        checkpoint_bytes()[:-1],
        checkpoint_bytes() + b"\x00",
        struct.pack("<Q", 2**40) + b"{}",
        _header_file(
            {"w": {"dtype": "F32", "shape": [10**6], "data_offsets": [0, 4 * 10**6]}}, b"\x00" * 16
        ),
        _header_file({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, b"\x00" * 8),
        _header_file({}, b""),
        b"{not json}" + b"\x00" * 100,
    ],
    ids=[
        "pickle",
        "empty",
        "short",
        "truncated",
        "trailing-byte",
        "header-bomb",
        "lying-sizes",
        "shape-offset-mismatch",
        "no-tensors",
        "garbage",
    ],
)
def test_anything_but_a_complete_safetensors_file_is_refused(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(InvalidUpload):
        read_signature(write(tmp_path, data))


def test_a_torch_pickle_is_refused_with_how_to_convert_it(tmp_path: Path) -> None:
    import io

    for legacy in (False, True):
        buf = io.BytesIO()
        torch.save({"w": torch.zeros(3)}, buf, _use_new_zipfile_serialization=not legacy)
        with pytest.raises(InvalidUpload, match=r"safetensors\.torch\.save_file"):
            read_signature(write(tmp_path, buf.getvalue()))


def test_a_safetensors_file_whose_length_bytes_look_like_a_pickle_is_accepted(
    tmp_path: Path,
) -> None:
    # a header of exactly 0x0280 bytes makes the file start with the pickle opcode 80 02
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header += b" " * (0x0280 - len(header))
    data = (0x0280).to_bytes(8, "little") + header + b"\x00" * 4
    assert data[:2] == b"\x80\x02"
    assert read_signature(write(tmp_path, data)) == {"w": {"dtype": "F32", "shape": [1]}}
