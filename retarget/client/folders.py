"""Folders on disk: a bundle to upload (sharded safetensors and their index, a PEFT
adapter and its configuration, sidecars) and a release or deployment pulled into
one, file by file.

An upload reads each file in chunks (never whole into memory). A pull writes each
file as ``transfer.py`` writes one download (``.part``, Range to resume, sha256
checked), checks it against the listing's sha256 too, and keeps a small record,
``.retarget.json``, of what it wrote: the next pull into the folder skips files that
are current (304) and removes the files it wrote before that the new release no
longer has (a leftover ``model.safetensors`` beside a new index would be loaded
instead of the shards), never any other file.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from retarget.client.errors import DownloadCorrupt

CHUNK = 4 * 1024 * 1024
#: what a pull writes about itself in the folder (hidden: loaders ignore it)
RECORD = ".retarget.json"


def folder_files(folder: Path) -> list[tuple[str, Path]]:
    """Every file of ``folder`` as (relative POSIX path, path), sorted; names starting
    with '.' (``.cache``, ``.retarget.json``, ``.DS_Store``) and their contents left out.
    Symbolic links to files are followed (a Hub cache snapshot is made of them)."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no folder at {folder}")
    out = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            if name.startswith(".") or name.endswith(".part") or not path.is_file():
                continue
            out.append((path.relative_to(folder).as_posix(), path))
    if not out:
        raise FileNotFoundError(f"no files to upload in {folder}")
    return sorted(out)


@dataclass(frozen=True)
class BodyFile:
    """A file sent as a request's whole body; progress counts from ``offset`` of ``total``
    (the other files of the same upload)."""

    path: Path
    size: int
    progress: Any = None
    offset: int = 0
    total: int | None = None

    def chunks(self) -> Iterator[bytes]:
        done = 0
        with self.path.open("rb") as fh:
            while block := fh.read(CHUNK):
                done += len(block)
                if done > self.size:
                    raise OSError(f"{self.path} grew while it was being uploaded")
                if self.progress is not None:
                    self.progress(self.offset + done, self.total)
                yield block
        if done != self.size:
            raise OSError(f"{self.path} changed size while it was being uploaded")

    async def achunks(self) -> AsyncIterator[bytes]:
        for block in self.chunks():
            yield block


def target_in(folder: Path, path: str) -> Path:
    """Where a listed file goes in ``folder``; a path that would leave it is refused."""
    parts = PurePosixPath(path).parts
    if (
        not parts
        or path.startswith("/")
        or "\\" in path
        or any(p in ("", ".", "..") or p.startswith(".") for p in parts)
    ):
        raise DownloadCorrupt(f"the service listed a file path {path!r} outside the folder")
    return folder.joinpath(*parts)


def read_record(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_record(folder: Path, record: dict[str, Any]) -> None:
    tmp = folder / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    os.replace(tmp, folder / RECORD)


def remove_stale(folder: Path, before: dict[str, Any], now: set[str]) -> list[str]:
    """Delete the files an earlier pull wrote that the new listing lacks."""
    removed = []
    for f in before.get("files", []):
        path = f.get("path") if isinstance(f, dict) else None
        if not isinstance(path, str) or path in now:
            continue
        try:
            target = target_in(folder, path)
        except DownloadCorrupt:
            continue
        if target.is_file():
            target.unlink()
            removed.append(path)
    return sorted(removed)
