"""The Python client without a server: problem types, 202 waits, checked downloads."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import httpx
import pytest

from retarget.client import RetargetClient
from retarget.client.errors import (
    PROBLEMS,
    ClientError,
    DownloadCorrupt,
    InfeasibleTarget,
    PendingTimeout,
    ServerError,
    error_for,
)
from service.api import problems

SERVICE = Path(__file__).resolve().parents[2] / "service"


def _slugs_the_service_sends() -> set[str]:
    slugs = {slug for _, slug, _ in problems.TABLE.values()} | set(problems._HTTP_SLUGS.values())
    for path in (SERVICE / "api").rglob("*.py"):  # literal problem(status, "slug", ...) calls
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "problem"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
            ):
                slugs.add(node.args[1].value)
    return slugs


def test_every_problem_type_the_service_sends_has_its_class() -> None:
    sent = _slugs_the_service_sends()
    assert {"validation-error", "infeasible-target", "unauthorized"} <= sent
    assert sent <= set(PROBLEMS), sent - set(PROBLEMS)
    for slug, cls in PROBLEMS.items():
        status = 500 if issubclass(cls, ServerError) else 422
        assert type(error_for(status, {"type": f"urn:retarget:problem:{slug}"})) is cls


def test_an_unknown_problem_falls_back_on_its_status_class() -> None:
    assert type(error_for(418, {"type": "urn:x"})) is ClientError
    assert type(error_for(502, {})) is ServerError
    err = error_for(422, {"type": "urn:retarget:problem:infeasible-target", "min_epsilon": 2.5})
    assert isinstance(err, InfeasibleTarget) and err.min_epsilon == 2.5


def _client(handler) -> RetargetClient:  # type: ignore[no-untyped-def]
    return RetargetClient("http://service.invalid", "k", transport=httpx.MockTransport(handler))


def test_a_202_is_waited_out_then_answered() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return httpx.Response(
                202, json={"status": "pending", "jobs": []}, headers={"Retry-After": "0"}
            )
        return httpx.Response(200, json={"epsilon": 1.5, "delta": 1e-5, "accountant": "best"})

    with _client(handler) as rt:
        assert rt.models.epsilon("m").epsilon == 1.5
    assert len(calls) == 3 and calls[0].headers["Authorization"] == "Bearer k"


def test_a_202_past_the_wait_is_a_pending_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(202, json={"status": "pending", "jobs": [{"id": "j"}]})

    rt = _client(handler)
    rt.wait = 0.0
    with pytest.raises(PendingTimeout) as info:
        rt.models.epsilon("m")
    assert info.value.jobs == [{"id": "j"}]


def test_a_non_json_error_is_still_typed() -> None:
    rt = _client(lambda r: httpx.Response(502, text="bad gateway"))
    with rt, pytest.raises(ServerError) as info:
        rt.datasets.list()
    assert info.value.status == 502 and "bad gateway" in info.value.detail


def test_a_download_that_does_not_hash_to_its_etag_is_refused(tmp_path: Path) -> None:
    body = b"x" * 1000
    wrong = hashlib.sha256(b"other").hexdigest()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"ETag": f'"{wrong}"'})

    target = tmp_path / "m.safetensors"
    with _client(handler) as rt, pytest.raises(DownloadCorrupt):
        rt.releases.download("r", target)
    assert list(tmp_path.iterdir()) == []  # neither the file nor a .part is kept


def test_a_pull_of_the_current_file_sends_its_hash_and_keeps_it(tmp_path: Path) -> None:
    target = tmp_path / "m.safetensors"
    target.write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["If-None-Match"] == f'"{digest}"'
        return httpx.Response(304, headers={"ETag": f'"{digest}"'})

    with _client(handler) as rt:
        got = rt.deployments.pull("prod", target)
    assert got.changed is False and got.sha256 == digest


def test_a_left_over_part_the_service_cannot_resume_is_downloaded_again(tmp_path: Path) -> None:
    body = b"y" * 1000
    digest = hashlib.sha256(body).hexdigest()
    target = tmp_path / "m.safetensors"
    (tmp_path / "m.safetensors.part").write_bytes(body)  # complete, never renamed
    (tmp_path / "m.safetensors.part.etag").write_text(f'"{digest}"')
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Range"))
        if request.headers.get("Range"):
            return httpx.Response(416)
        return httpx.Response(200, content=body, headers={"ETag": f'"{digest}"'})

    with _client(handler) as rt:
        got = rt.releases.download("r", target)
    assert seen == ["bytes=1000-", None]
    assert got.sha256 == digest and sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]
