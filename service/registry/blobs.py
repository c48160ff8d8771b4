"""Content-addressed blob store.

A blob is named by the sha256 of its bytes. Writes go to a temporary file in
the store's own ``.tmp`` folder (same file system), are fsynced and then
renamed into place, so a crash never leaves half a blob under a real name,
and the same bytes are stored once. ``BlobStore`` is the small interface an
S3-compatible store can implement later; ``LocalBlobStore`` is the folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from service.errors import InvalidInput, PayloadTooLarge, StorageError


@dataclass
class StagedBlob:
    """Bytes written and hashed but not yet visible under their name."""

    path: Path
    sha256: str
    size: int


class BlobStore(Protocol):
    #: a local folder for bytes on their way in (uploads spooled, staged, hashed): on
    #: the blobs' own file system for a local store, the cache folder for a bucket
    staging_dir: Path

    def stage(
        self, chunks: Iterable[bytes | memoryview], *, max_bytes: int | None = None
    ) -> StagedBlob: ...

    def promote(self, staged: StagedBlob) -> bool: ...

    def discard(self, staged: StagedBlob) -> None: ...

    def open(self, sha256: str) -> BinaryIO: ...

    def local_path(self, sha256: str) -> Path: ...

    def exists(self, sha256: str) -> bool: ...

    def size(self, sha256: str) -> int: ...

    def delete(self, sha256: str) -> None: ...

    def shas(self) -> Iterator[str]: ...

    def ready(self) -> bool: ...

    def free_bytes(self) -> int | None:
        """Space left for new blobs (None: unknown or unlimited)."""
        ...


def _check_sha(sha256: str) -> str:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise InvalidInput(f"not a sha256 hex digest: {sha256!r}")
    return sha256


def _disk(op: Any, *args: Any) -> None:
    """Run a write to the store; a full disk, a quota or an I/O error is a StorageError
    (an error of the source being read, such as a client going away, is not)."""
    try:
        op(*args)
    except OSError as exc:
        raise StorageError(f"could not write to the blob store: {exc.strerror or exc}") from exc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalBlobStore:
    """Blobs in ``root/ab/cd/<sha256>``; temporary files in ``root/.tmp``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.tmp = self.root / ".tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.staging_dir = self.tmp
        self.sweep()

    def sweep(self) -> list[Path]:
        """Remove temporary files left by processes of this host that died mid-write
        (a SIGKILL or a power cut during an upload or a merge); they are never blobs."""
        removed = []
        for path in self.tmp.glob("stage-*"):
            pid = path.name.split("-")[1]
            if pid.isdigit() and not _alive(int(pid)):
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def _path(self, sha256: str) -> Path:
        _check_sha(sha256)
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def stage(
        self, chunks: Iterable[bytes | memoryview], *, max_bytes: int | None = None
    ) -> StagedBlob:
        """Write ``chunks`` to a temporary file, hashing as it goes."""
        digest = hashlib.sha256()
        size = 0
        fd, name = tempfile.mkstemp(dir=self.tmp, prefix=f"stage-{os.getpid()}-")
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                for block in chunks:
                    size += block.nbytes if isinstance(block, memoryview) else len(block)
                    if max_bytes is not None and size > max_bytes:
                        raise PayloadTooLarge(
                            f"upload is larger than the limit of {max_bytes} bytes",
                            limit=max_bytes,
                        )
                    digest.update(block)
                    _disk(out.write, block)
                _disk(out.flush)
                _disk(os.fsync, out.fileno())
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return StagedBlob(path=path, sha256=digest.hexdigest(), size=size)

    def promote(self, staged: StagedBlob) -> bool:
        """Move a staged blob under its name; False when those bytes were already stored."""
        target = self._path(staged.sha256)
        if target.exists():
            staged.path.unlink(missing_ok=True)
            return False
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged.path, target)
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            staged.path.unlink(missing_ok=True)
            raise StorageError(f"could not store blob {staged.sha256}: {exc}") from exc
        return True

    def discard(self, staged: StagedBlob) -> None:
        staged.path.unlink(missing_ok=True)

    def open(self, sha256: str) -> BinaryIO:
        try:
            return self._path(sha256).open("rb")
        except FileNotFoundError as exc:
            raise StorageError(f"blob {sha256} is missing from the store") from exc

    def local_path(self, sha256: str) -> Path:
        return self._path(sha256)

    def exists(self, sha256: str) -> bool:
        return self._path(sha256).is_file()

    def size(self, sha256: str) -> int:
        return self._path(sha256).stat().st_size

    def delete(self, sha256: str) -> None:
        self._path(sha256).unlink(missing_ok=True)

    def shas(self) -> Iterator[str]:
        for path in self.root.glob("??/??/*"):
            if path.is_file() and len(path.name) == 64:
                yield path.name

    def ready(self) -> bool:
        """The folder exists and can be written."""
        return self.tmp.is_dir() and os.access(self.tmp, os.W_OK)

    def free_bytes(self) -> int | None:
        """Free space on the blob folder's file system (as an unprivileged writer sees it)."""
        try:
            return shutil.disk_usage(self.tmp).free
        except OSError:
            return None
