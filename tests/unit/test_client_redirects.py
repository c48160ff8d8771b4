"""Downloads ask for a redirect and follow one to the bucket without the key, checking
the bytes against the sha256 the service announced on the redirect."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx
import pytest

from retarget.client import RetargetClient
from retarget.client.aio import AsyncRetargetClient
from retarget.client.errors import DownloadCorrupt

BODY = bytes(range(256)) * 40
SHA = hashlib.sha256(BODY).hexdigest()
OBJECT = "http://bucket.invalid/blobs/ab/cd?X-Amz-Signature=s"


class Service:
    """The API (307 to the bucket when asked) and the bucket (its own ETag, Range)."""

    def __init__(self, body: bytes = BODY) -> None:
        self.body = body
        self.seen: list[tuple[str, dict[str, str]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host, dict(request.headers)))
        if request.url.host == "service.invalid":
            assert request.headers["Prefer"] == "redirect"
            headers = {"ETag": f'"{SHA}"', "Location": OBJECT}
            return httpx.Response(307, headers=headers)
        headers = {"ETag": '"0123-md5-of-the-bucket"'}
        first = int(request.headers.get("Range", "bytes=0-")[6:].rstrip("-"))
        if first:
            headers["Content-Range"] = f"bytes {first}-{len(self.body) - 1}/{len(self.body)}"
            return httpx.Response(206, content=self.body[first:], headers=headers)
        return httpx.Response(200, content=self.body, headers=headers)


def _sync(handler: Service) -> RetargetClient:
    return RetargetClient("http://service.invalid", "k", transport=httpx.MockTransport(handler))


def test_a_download_follows_the_redirect_without_the_key_and_checks_the_sha(
    tmp_path: Path,
) -> None:
    service = Service()
    with _sync(service) as rt:
        got = rt.releases.download("r", tmp_path / "m.safetensors")
    assert got.sha256 == SHA and (tmp_path / "m.safetensors").read_bytes() == BODY
    (api, api_headers), (bucket, bucket_headers) = service.seen
    assert api == "service.invalid" and api_headers["authorization"] == "Bearer k"
    assert bucket == "bucket.invalid" and "authorization" not in bucket_headers


def test_the_async_client_follows_the_redirect_too(tmp_path: Path) -> None:
    service = Service()

    async def run() -> str:
        transport = httpx.MockTransport(service)
        async with AsyncRetargetClient("http://service.invalid", "k", transport=transport) as rt:
            return (await rt.releases.download("r", tmp_path / "m.safetensors")).sha256

    assert asyncio.run(run()) == SHA
    assert "authorization" not in service.seen[1][1]


def test_bytes_from_the_bucket_that_do_not_hash_to_the_announced_sha_are_refused(
    tmp_path: Path,
) -> None:
    with _sync(Service(body=b"tampered" + BODY)) as rt, pytest.raises(DownloadCorrupt):
        rt.releases.download("r", tmp_path / "m.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_a_part_of_the_announced_bytes_resumes_from_the_bucket(tmp_path: Path) -> None:
    (tmp_path / "m.safetensors.part").write_bytes(BODY[:1000])
    (tmp_path / "m.safetensors.part.etag").write_text(f'"{SHA}"')
    service = Service()
    with _sync(service) as rt:
        got = rt.releases.download("r", tmp_path / "m.safetensors")
    assert got.resumed_from == 1000 and got.sha256 == SHA
    bucket_headers = service.seen[1][1]
    assert bucket_headers["range"] == "bytes=1000-" and "if-range" not in bucket_headers


def test_a_part_of_other_bytes_is_not_resumed_through_the_redirect(tmp_path: Path) -> None:
    (tmp_path / "m.safetensors.part").write_bytes(b"z" * 1000)
    (tmp_path / "m.safetensors.part.etag").write_text('"' + "0" * 64 + '"')
    service = Service()
    with _sync(service) as rt:
        got = rt.releases.download("r", tmp_path / "m.safetensors")
    assert got.resumed_from == 0 and got.sha256 == SHA
    assert "range" not in service.seen[1][1]
