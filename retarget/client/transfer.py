"""Files to and from the service: progress on uploads, resumable checked downloads.

Uploads stream the checkpoint from disk (never read whole into memory) through a
reader that reports each chunk. Downloads write ``<target>.part``; a later attempt
asks for the rest with ``Range: bytes=<n>-`` and ``If-Range: <etag>`` (the service
answers 206 when the blob is unchanged, else the whole file again), the finished
file is checked against the sha256 in the ETag and only then renamed to ``target``.

Downloads ask for a redirect (``Prefer: redirect``): where the service keeps blobs in a
bucket it answers 307 to a presigned URL of the object, and the client reads the bytes
from the bucket, without its key, checking them against the sha256 in the ETag of the
307 (the bucket's own ETag is not a sha256). A service that keeps blobs on its disk
ignores the preference and sends the bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin

import httpx

from retarget.client.errors import DownloadCorrupt
from retarget.client.ops import Fetch, Progress, Upload, raise_for_problem
from retarget.client.types import Download

CHUNK = 4 * 1024 * 1024
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: what a download asks for: a redirect to the object where the service can give one
PREFER_REDIRECT = {"Prefer": "redirect"}


class ProgressReader(io.RawIOBase):
    """A file opened for reading that reports how much has been read."""

    def __init__(self, raw: IO[bytes], total: int, progress: Progress | None) -> None:
        self.raw, self.total, self.progress, self.done = raw, total, progress, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.raw.fileno()

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        pos = self.raw.seek(offset, whence)
        self.done = pos
        return pos

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        self.done += len(chunk)
        if self.progress is not None and chunk:
            self.progress(self.done, self.total)
        return chunk

    def close(self) -> None:
        self.raw.close()
        super().close()


def multipart(upload: Upload) -> tuple[dict[str, str], dict[str, Any], ProgressReader]:
    """``data`` and ``files`` for httpx, and the reader to close afterwards."""
    size = upload.file.stat().st_size
    reader = ProgressReader(upload.file.open("rb"), size, upload.progress)
    files = {"weights": (upload.file.name, reader, "application/octet-stream")}
    return {"metadata": json.dumps(upload.metadata)}, files, reader


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def part_of(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def request_headers(fetch: Fetch) -> tuple[dict[str, str], int]:
    """Headers of a download and the bytes already on disk to keep (``.part``)."""
    headers: dict[str, str] = {}
    if fetch.if_changed and fetch.target.is_file():
        headers["If-None-Match"] = f'"{sha256_of(fetch.target)}"'
    part = part_of(fetch.target)
    kept = part.stat().st_size if part.is_file() else 0
    etag_file = _etag_file(fetch.target)
    if kept and etag_file.is_file():
        headers["Range"] = f"bytes={kept}-"
        headers["If-Range"] = etag_file.read_text().strip()
    else:
        kept = 0
    return headers, kept


def follow(resp: httpx.Response, headers: dict[str, str]) -> tuple[str, dict[str, str], str] | None:
    """A redirect's (URL, headers for the request there, the ETag the service announced),
    or None when ``resp`` is no redirect. The range of a ``.part`` goes along only when
    the part is of the announced bytes (its If-Range is the redirect's ETag); the key
    never does (the request there is built without it)."""
    location = resp.headers.get("Location")
    if resp.status_code not in REDIRECTS or not location:
        return None
    etag = resp.headers.get("ETag", "")
    hop: dict[str, str] = {}
    if etag and "Range" in headers and headers.get("If-Range") == etag:
        hop["Range"] = headers["Range"]
    return urljoin(str(resp.url), location), hop, etag


def forget_part(target: Path) -> None:
    """Drop what an earlier attempt left (a range the service cannot serve: 416)."""
    part_of(target).unlink(missing_ok=True)
    _etag_file(target).unlink(missing_ok=True)


def _etag_file(target: Path) -> Path:
    return target.with_name(target.name + ".part.etag")


class Writer:
    """Writes one download's body, whichever driver reads it."""

    def __init__(
        self, fetch: Fetch, resp: httpx.Response, kept: int, etag: str | None = None
    ) -> None:
        """``etag``: the sha256 the service announced on a redirect (else the answer's)."""
        self.fetch = fetch
        self.etag = etag if etag is not None else resp.headers.get("ETag", "")
        self.resumed = resp.status_code == 206 and kept > 0
        self.offset = kept if self.resumed else 0
        length = resp.headers.get("Content-Length")
        self.total = self.offset + int(length) if length is not None else None
        fetch.target.parent.mkdir(parents=True, exist_ok=True)
        self.part = part_of(fetch.target)
        if self.etag:
            _etag_file(fetch.target).write_text(self.etag)
        self.file = self.part.open("ab" if self.resumed else "wb")
        self.done = self.offset

    def write(self, chunk: bytes) -> None:
        self.file.write(chunk)
        self.done += len(chunk)
        if self.fetch.progress is not None:
            self.fetch.progress(self.done, self.total)

    def finish(self) -> Download:
        self.file.close()
        digest = sha256_of(self.part)
        expected = self.etag.strip('"').removeprefix("W/").strip('"')
        if expected and expected != digest:
            self.part.unlink()
            _etag_file(self.fetch.target).unlink(missing_ok=True)
            raise DownloadCorrupt(
                f"{self.fetch.path}: the bytes hash to {digest}, the service announced "
                f"{expected}; the partial file was removed, download again"
            )
        os.replace(self.part, self.fetch.target)
        _etag_file(self.fetch.target).unlink(missing_ok=True)
        return Download(
            path=self.fetch.target,
            sha256=digest,
            size_bytes=self.fetch.target.stat().st_size,
            resumed_from=self.offset,
        )

    def abort(self) -> None:
        self.file.close()


def unchanged(fetch: Fetch) -> Download:
    """The result of a 304: the file on disk is current."""
    return Download(
        path=fetch.target,
        sha256=sha256_of(fetch.target),
        size_bytes=fetch.target.stat().st_size,
        changed=False,
    )


def write_all(writer: Writer, chunks: Iterable[bytes]) -> Download:
    try:
        for chunk in chunks:
            writer.write(chunk)
    except BaseException:
        writer.abort()  # the .part stays: the next attempt resumes from it
        raise
    return writer.finish()


def _hop(http: httpx.Client | httpx.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    request = http.build_request("GET", url, headers=headers)
    request.headers.pop("Authorization", None)  # the key stays with the service
    return request


def _settled(fetch: Fetch, resp: httpx.Response, again: bool) -> Download | bool | None:
    """Before the body: True to start over (416: the .part is no prefix of the bytes),
    the Download of a 304, False on an error (read the body, then raise), None to write."""
    if resp.status_code == 416 and again:
        forget_part(fetch.target)
        return True
    if resp.status_code == 304:
        return unchanged(fetch)
    return False if resp.status_code >= 400 else None


def fetch_sync(http: httpx.Client, fetch: Fetch, again: bool = True) -> Download:
    """One download (``Fetch``) with a blocking client, following a redirect to the object."""
    headers, kept = request_headers(fetch)
    resp = http.send(
        http.build_request("GET", fetch.path, headers=headers | PREFER_REDIRECT), stream=True
    )
    etag = None
    if (hop := follow(resp, headers)) is not None:
        resp.close()
        resp, etag = http.send(_hop(http, hop[0], hop[1]), stream=True), hop[2]
    try:
        settled = _settled(fetch, resp, again)
        if settled is True:
            return fetch_sync(http, fetch, again=False)
        if settled is False:
            resp.read()
            raise_for_problem(resp)
        if isinstance(settled, Download):
            return settled
        return write_all(Writer(fetch, resp, kept, etag), resp.iter_bytes(CHUNK))
    finally:
        resp.close()


async def fetch_async(http: httpx.AsyncClient, fetch: Fetch, again: bool = True) -> Download:
    """One download (``Fetch``) with an async client, following a redirect to the object."""
    headers, kept = request_headers(fetch)
    request = http.build_request("GET", fetch.path, headers=headers | PREFER_REDIRECT)
    resp = await http.send(request, stream=True)
    etag = None
    if (hop := follow(resp, headers)) is not None:
        await resp.aclose()
        resp, etag = await http.send(_hop(http, hop[0], hop[1]), stream=True), hop[2]
    try:
        settled = _settled(fetch, resp, again)
        if settled is True:
            return await fetch_async(http, fetch, again=False)
        if settled is False:
            await resp.aread()
            raise_for_problem(resp)
        if isinstance(settled, Download):
            return settled
        writer = Writer(fetch, resp, kept, etag)
        try:
            async for chunk in resp.aiter_bytes(CHUNK):
                writer.write(chunk)
        except BaseException:
            writer.abort()  # the .part stays: the next attempt resumes from it
            raise
        return writer.finish()
    finally:
        await resp.aclose()
