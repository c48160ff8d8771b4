"""Scoped API keys: every route in the route table is checked for its scope."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.api.app import api_routes, create_app
from service.api.deps import required_scope
from service.config import Settings
from service.registry.keys import SCOPES, hash_key
from service.registry.models import ApiKey
from tests.conftest import Backend, authorize

OPEN = {"/healthz", "/readyz"}  # /metrics needs the read scope (RETARGET_METRICS=key)
SIGNED = {"/v1/webhooks/policy-change"}  # HMAC signature instead of a key


def call(client: TestClient, method: str, path: str):
    url = re.sub(r"\{[^}]+\}", "nope", path)
    return client.request(method, url, json={} if method in ("POST", "PUT") else None)


def problem_type(method: str, resp) -> str:  # type: ignore[no-untyped-def]
    """The problem's type; a HEAD answer has no body, only the problem's media type."""
    if method == "HEAD":
        assert resp.headers["content-type"] == "application/problem+json"
        assert resp.content == b""
        return {401: "urn:retarget:problem:unauthorized", 403: "urn:retarget:problem:forbidden"}[
            resp.status_code
        ]
    return str(resp.json()["type"])


def test_every_route_needs_a_key_with_its_scope(client: TestClient, backend: Backend) -> None:
    client.headers.pop("Authorization")
    routes = api_routes()
    assert len(routes) >= 17
    for route in routes:
        scope = required_scope(route)
        for method in route.methods or ():
            if route.path in OPEN:
                assert scope is None
                assert call(client, method, route.path).status_code == 200
                continue
            if route.path in SIGNED:
                assert scope is None
                assert call(client, method, route.path).status_code == 401
                continue
            assert scope in SCOPES, f"{method} {route.path} declares no scope"
            anonymous = call(client, method, route.path)
            assert anonymous.status_code == 401, (method, route.path)
            assert anonymous.headers["www-authenticate"].startswith("Bearer")
            assert problem_type(method, anonymous) == "urn:retarget:problem:unauthorized"
            others = [s for s in SCOPES if s not in (scope, "admin")]
            authorize(client, backend.session_factory, *others)
            wrong = call(client, method, route.path)
            assert wrong.status_code == 403, (method, route.path, others)
            assert problem_type(method, wrong) == "urn:retarget:problem:forbidden"
            authorize(client, backend.session_factory, scope)
            assert call(client, method, route.path).status_code not in (401, 403)
            authorize(client, backend.session_factory, "admin")
            assert call(client, method, route.path).status_code not in (401, 403)
            client.headers.pop("Authorization")


def test_keys_are_shown_once_stored_hashed_and_revocable(
    client: TestClient, backend: Backend
) -> None:
    created = client.post("/v1/keys", json={"name": "serving", "scopes": ["read"]})
    assert created.status_code == 201
    key = created.json()["key"]
    listing = client.get("/v1/keys").json()["data"]
    assert all("key" not in k for k in listing)
    assert any(k["id"] == created.json()["id"] and k["prefix"] == key[:10] for k in listing)
    with backend.session_factory() as session:
        row = session.scalar(select(ApiKey).where(ApiKey.id == created.json()["id"]))
        assert row is not None and row.key_hash == hash_key(key)
        assert key not in (row.key_hash, row.prefix, row.name)
    reader = {"Authorization": f"Bearer {key}"}
    assert client.get("/v1/datasets", headers=reader).status_code == 200
    assert client.post("/v1/datasets", json={"name": "x"}, headers=reader).status_code == 403
    assert client.delete(f"/v1/keys/{created.json()['id']}").status_code == 200
    assert client.get("/v1/datasets", headers=reader).status_code == 401


@pytest.mark.parametrize(
    "header", ["", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer rt_not-a-real-key"]
)
def test_missing_malformed_and_unknown_keys_are_401(client: TestClient, header: str) -> None:
    client.headers["Authorization"] = header
    resp = client.get("/v1/datasets")
    assert resp.status_code == 401
    assert resp.headers["content-type"].startswith("application/problem+json")


def test_bad_scopes_are_refused(client: TestClient) -> None:
    for scopes in ([], ["root"], ["read", "everything"]):
        assert client.post("/v1/keys", json={"name": "k", "scopes": scopes}).status_code == 422


def test_auth_can_be_switched_off(tmp_path, backend: Backend) -> None:
    settings = Settings(data_dir=tmp_path, database_url=backend.url, auth=False, auto_migrate=False)
    with TestClient(create_app(settings, session_factory=backend.session_factory)) as c:
        assert c.get("/v1/datasets").status_code == 200


def test_the_download_scope_is_known_to_the_api_and_the_cli(
    client: TestClient, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from retarget.cli import app
    from retarget.cli.keys_cmds import Scope

    assert "models:download" in SCOPES
    created = client.post("/v1/keys", json={"name": "dl", "scopes": ["models:download"]})
    assert created.status_code == 201 and created.json()["scopes"] == ["models:download"]
    assert sorted(s.value for s in Scope) == sorted(SCOPES)
    # the CLI accepts the scope (and would refuse an unknown one with a usage error)
    runner = CliRunner()
    assert runner.invoke(app, ["keys", "create", "--scope", "nope"]).exit_code == 2
    env = {"RETARGET_DATA_DIR": str(tmp_path), "RETARGET_DATABASE_URL": ""}
    made = runner.invoke(app, ["keys", "create", "--scope", "models:download", "--create"], env=env)
    assert made.exit_code == 0, made.output
    assert "models:download" in made.output
    downloader = {"Authorization": f"Bearer {created.json()['key']}"}
    # the download scope is for raw weights only: nothing else is readable with it
    assert client.get("/v1/datasets", headers=downloader).status_code == 403
