"""Serving stored blobs: ETag = sha256, 304 on If-None-Match, Range from the file response."""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.responses import FileResponse

from service.errors import StorageError
from service.registry.blobs import BlobStore

SAFETENSORS = "application/octet-stream"

#: OpenAPI responses of every endpoint that serves a blob (404 added by the route).
WEIGHTS_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {SAFETENSORS: {}}, "description": "safetensors bytes"},
    206: {"content": {SAFETENSORS: {}}, "description": "the requested byte range"},
    304: {"description": "Not modified"},
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
