"""Uploaded file parts spill to disk past a small size: a bundle of many files does not
sit in memory while its form is parsed."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from service.api.routes.models import UPLOAD_SPOOL_BYTES


async def _parts(request: Request) -> JSONResponse:
    form = await request.form(max_files=8)
    rolled = {}
    for name, value in form.multi_items():
        rolled[name] = bool(getattr(value.file, "_rolled", True))  # type: ignore[union-attr]
    return JSONResponse(rolled)


def test_a_file_part_past_the_spool_size_is_on_disk_and_a_small_one_in_memory() -> None:
    app = Starlette(routes=[Route("/", _parts, methods=["POST"])])
    files = {
        "big": ("big.bin", b"x" * (UPLOAD_SPOOL_BYTES + 1)),
        "small": ("small.bin", b"y" * 100),
    }
    with TestClient(app) as client:
        rolled = client.post("/", files=files).json()
    assert rolled == {"big": True, "small": False}
    assert UPLOAD_SPOOL_BYTES * 1024 <= 64 * 1024**2  # a 1,024-file bundle: 64 MiB at most
