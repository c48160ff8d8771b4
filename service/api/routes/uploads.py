"""A bundle's files sent one by one ahead of its registration: a resumable upload.

``POST /v1/uploads/missing`` says which of a folder's sha256s this key has not sent
yet; ``PUT /v1/uploads/{sha256}`` streams one file (checked to hash to the name);
``POST /v1/models`` with ``metadata.files`` (path and sha256 of each file) and no file
parts registers them. An interrupted upload re-sends only what is missing. Bounds
and the possession rule: ``service/registry/uploads.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Annotated, Any

import anyio.from_thread
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from service.api.context import Principal
from service.api.deps import ContextDep, require
from service.api.schemas import (
    Problem,
    UploadPublic,
    UploadsMissingPublic,
    UploadsMissingRequest,
)
from service.errors import PayloadTooLarge
from service.registry import uploads
from service.registry.db import session_scope

router = APIRouter(prefix="/v1/uploads", tags=["models"])

#: bytes handed from the event loop to the thread that writes the blob, per hop
BLOCK = 1024 * 1024

_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/octet-stream": {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "The file's bytes; they must hash to the sha256 in the path.",
                }
            }
        },
    }
}


def blocks(stream: AsyncIterator[bytes]) -> Iterator[bytes]:
    """The request body as blocks of about ``BLOCK`` bytes, read on the event loop from a
    worker thread (the body is never held whole, nor spooled to a second file)."""

    async def next_block() -> bytes:
        buf = bytearray()
        while len(buf) < BLOCK:
            try:
                buf += await stream.__anext__()
            except StopAsyncIteration:
                break
        return bytes(buf)

    while block := anyio.from_thread.run(next_block):
        yield block


@router.put(
    "/{sha256}",
    operation_id="uploads_put",
    status_code=201,
    response_model=UploadPublic,
    openapi_extra=_BODY,
    responses={
        200: {"model": UploadPublic, "description": "this key had sent these bytes already"},
        413: {"model": Problem},
        422: {"model": Problem},
    },
)
async def put_upload(
    sha256: str,
    request: Request,
    ctx: ContextDep,
    who: Annotated[Principal, require("publish")],
) -> JSONResponse:
    """One file of a bundle, named by its sha256 (scope ``publish``). Kept for
    ``RETARGET_UPLOAD_TTL_S`` for a registration by this key to name it; refused
    (nothing kept) when the bytes do not hash to the name or pass
    ``RETARGET_MAX_UPLOAD_BYTES`` together with this key's other pending uploads."""
    uploads.check_sha256(sha256)
    limit = ctx.settings.max_upload_bytes
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"upload is larger than the limit of {limit} bytes", limit=limit)
    owner = uploads.owner_of(who.key_id)
    stream = request.stream().__aiter__()

    def store() -> tuple[UploadPublic, bool]:
        with session_scope(ctx.session_factory) as session:
            row, new = uploads.receive(
                session=session,
                blobs=ctx.blobs,
                owner=owner,
                sha256=sha256,
                chunks=blocks(stream),
                max_bytes=limit,
                ttl_s=ctx.settings.upload_ttl_s,
            )
            public = UploadPublic(
                sha256=row.sha256,
                size_bytes=row.size_bytes,
                expires_at=row.created_at + timedelta(seconds=ctx.settings.upload_ttl_s),
            )
            return public, new

    public, new = await run_in_threadpool(store)
    return JSONResponse(public.model_dump(mode="json"), status_code=201 if new else 200)


@router.post(
    "/missing",
    operation_id="uploads_missing",
    response_model=UploadsMissingPublic,
    responses={422: {"model": Problem}},
)
def missing_uploads(
    body: UploadsMissingRequest,
    ctx: ContextDep,
    who: Annotated[Principal, require("publish")],
) -> UploadsMissingPublic:
    """Which of these sha256s this key still has to upload (scope ``publish``): the
    others are kept and a registration by this key may name them."""
    with session_scope(ctx.session_factory) as session:
        return UploadsMissingPublic(
            missing=uploads.missing(
                session=session,
                blobs=ctx.blobs,
                owner=uploads.owner_of(who.key_id),
                shas=list(body.sha256),
                ttl_s=ctx.settings.upload_ttl_s,
            )
        )
