"""Serving stored blobs: ETag = sha256, 304 on If-None-Match, Range requests (the file
response's for the local folder, one range streamed from object storage), and 307 to a
presigned URL when the client asks (``?redirect=true`` or ``Prefer: redirect``) and the
store can presign."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import FileResponse, RedirectResponse, StreamingResponse

from service.api.schemas import PendingPublic, Problem
from service.errors import StorageError
from service.registry.blobs import BlobStore

SAFETENSORS = "application/octet-stream"

#: OpenAPI responses of every endpoint that serves a blob (404 added by the route).
WEIGHTS_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {SAFETENSORS: {}}, "description": "safetensors bytes"},
    206: {"content": {SAFETENSORS: {}}, "description": "the requested byte range"},
    304: {"description": "Not modified"},
    307: {
        "description": "with ?redirect=true or Prefer: redirect, when the blob store can "
        "presign: a presigned URL of the object (Location), valid RETARGET_PRESIGN_EXPIRY_S"
    },
}

#: OpenAPI responses of a model's charged download (its weights, or one file of its bundle).
CHARGED_DOWNLOAD_RESPONSES: dict[int | str, dict[str, object]] = {
    **WEIGHTS_RESPONSES,
    202: {"model": PendingPublic, "description": "the model's profile is being computed"},
    404: {"model": Problem},
    409: {"model": Problem, "description": "the download would break the dataset's cap"},
}


def etag_for(sha256: str) -> str:
    return f'"{sha256}"'


def not_modified(request: Request, sha256: str) -> bool:
    """Whether the request's If-None-Match already names this blob (the answer is 304)."""
    return _matches(request.headers.get("if-none-match"), etag_for(sha256))


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or etag in tags or f"W/{etag}" in tags


DOWNLOAD_CHUNK = 4 * 1024 * 1024


def blob_response(request: Request, blobs: BlobStore, sha256: str, filename: str) -> Response:
    etag = etag_for(sha256)
    headers = {"ETag": etag, "Cache-Control": "private, max-age=0, must-revalidate"}
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    if not blobs.exists(sha256):
        raise StorageError(f"blob {sha256} is missing from the store")
    presign = getattr(blobs, "presign", None)
    if presign is not None:
        headers["Vary"] = "Prefer"  # a 307 or the bytes, as the request prefers
    if presign is not None and wants_redirect(request):
        return RedirectResponse(presign(sha256, filename), status_code=307, headers=headers)
    if hasattr(blobs, "stream"):
        return _streamed(request, blobs, sha256, filename, headers)
    response = FileResponse(
        blobs.local_path(sha256),
        media_type=SAFETENSORS,
        filename=filename,
        headers=headers,
    )
    # 4 MiB reads instead of 64 KiB: a checkpoint download is bound by the per-chunk
    # round trips through the event loop (benchmarks/load.py: about 3x on one process)
    response.chunk_size = DOWNLOAD_CHUNK
    return response


def wants_redirect(request: Request) -> bool:
    """A GET with ``?redirect=true`` (or 1) or a ``Prefer: redirect`` header (a 307
    answer to a POST would make the client send the POST to the object store)."""
    if request.method != "GET":
        return False
    if request.query_params.get("redirect", "").lower() in ("true", "1"):
        return True
    prefs = request.headers.get("prefer", "").lower().replace(";", ",").split(",")
    return "redirect" in (p.strip() for p in prefs)


def _range(header: str | None, size: int) -> tuple[int, int] | Literal[False] | None:
    """One byte range ``(first, last)``; None: send the whole blob; False: unsatisfiable.
    Several ranges are answered with the whole blob (allowed by RFC 9110)."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first_s, sep, last_s = header[6:].strip().partition("-")
    if not sep or not (first_s or last_s):
        return None
    try:
        if not first_s:  # the last N bytes
            n = int(last_s)
            return (max(size - n, 0), size - 1) if n > 0 and size else False
        first = int(first_s)
        last = min(int(last_s), size - 1) if last_s else size - 1
    except ValueError:
        return None
    if first > last or first >= size:
        return False
    return first, last


def _streamed(
    request: Request, blobs: Any, sha256: str, filename: str, headers: dict[str, str]
) -> Response:
    """The blob streamed from object storage, whole or one range of it."""
    size = blobs.size(sha256)
    headers = {
        **headers,
        "Accept-Ranges": "bytes",
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}",
    }
    wanted = _range(request.headers.get("range"), size)
    if_range = request.headers.get("if-range")
    if if_range is not None and if_range.strip() != headers["ETag"]:
        wanted = None  # the client's partial copy is of other bytes: send them all
    if wanted is False:
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{size}"})
    if wanted is None:
        headers["Content-Length"] = str(size)
        return StreamingResponse(blobs.stream(sha256), media_type=SAFETENSORS, headers=headers)
    first, last = wanted
    headers["Content-Length"] = str(last - first + 1)
    headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    return StreamingResponse(
        blobs.stream(sha256, first, last), status_code=206, media_type=SAFETENSORS, headers=headers
    )
