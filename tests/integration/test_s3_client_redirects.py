"""The Python client against the service with its blobs in a bucket (a real SeaweedFS
server): downloads are redirected to presigned URLs, read from the bucket without the
key, and checked against the sha256 the service announced."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from retarget.client import RetargetClient
from tests.integration.test_s3_api import s3_client, s3_settings, seed, source_bucket

__all__ = ["s3_client", "s3_settings", "source_bucket"]  # the fixtures, shared


class Router(httpx.BaseTransport):
    """The service's requests to the app in process, the bucket's over loopback; each
    request's host and whether it carried the key are recorded."""

    def __init__(self, app: httpx.BaseTransport) -> None:
        self.app, self.net = app, httpx.HTTPTransport()
        self.seen: list[tuple[str, bool]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host, "authorization" in request.headers))
        if request.url.host == "testserver":  # the test client's own stream type, re-wrapped
            answer = self.app.handle_request(request)
            answer.read()
            return httpx.Response(
                answer.status_code, headers=answer.headers.raw, content=answer.content
            )
        return self.net.handle_request(request)


def test_the_client_downloads_from_the_bucket_without_the_key(
    s3_client: TestClient, tmp_path: Path
) -> None:
    ds, _ = seed(s3_client)
    body = {"dataset_id": ds, "epsilon": 1.0, "delta": 1e-5, "method": "lc", "accountant": "rdp"}
    release = s3_client.post("/v1/retarget", json=body).json()
    key = s3_client.headers["Authorization"].removeprefix("Bearer ")
    router = Router(s3_client._transport)
    with RetargetClient("http://testserver", key, transport=router) as rt:
        got = rt.releases.download(release["release_id"], tmp_path / "merged.safetensors")
    data = (tmp_path / "merged.safetensors").read_bytes()
    assert got.sha256 == release["sha256"] == hashlib.sha256(data).hexdigest()
    assert router.seen[0] == ("testserver", True)
    assert len(router.seen) == 2 and router.seen[1][0] != "testserver"
    assert router.seen[1][1] is False  # the key never reaches the bucket
