"""Reading a file in bounded chunks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

#: the read size for streaming files (downloads, uploads, copies)
CHUNK = 1024 * 1024


def iter_file(fh: IO[bytes], chunk: int = CHUNK) -> Iterator[bytes]:
    while True:
        block = fh.read(chunk)
        if not block:
            return
        yield block
