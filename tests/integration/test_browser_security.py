"""Attacks on the dashboard and the operational endpoints (issue #18): framing, injected
script, cross-site form posts, cookies sent in clear behind a TLS proxy, sessions that
another replica cannot read, open metrics and docs, and outages that answered 500."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from service.registry.migrate import upgrade
from tests.conftest import Backend, authorize
from tests.integration.test_webhook_security import seed


def login(client: TestClient, key: str, **headers: str):
    form = client.get("/admin/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None
    return client.post(
        "/admin/login",
        data={"key": key, "csrf": token.group(1)},
        headers=headers,
        follow_redirects=False,
    )


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url=url)
    return url


def app_on(db_url: str, tmp_path: Path, **settings) -> TestClient:
    return TestClient(
        create_app(Settings(data_dir=tmp_path, database_url=db_url, auto_migrate=False, **settings))
    )


@pytest.fixture
def web(db_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    with app_on(db_url, tmp_path) as c:
        key = authorize(c, c.app.state.ctx.session_factory)
        yield c, key


def test_dashboard_responses_forbid_framing_inline_script_and_referrers(
    web: tuple[TestClient, str],
) -> None:
    client, key = web
    assert login(client, key).status_code == 303
    for path in ("/admin/login", "/admin", "/admin/deployments", "/admin/static/style.css"):
        resp = client.get(path)
        assert resp.status_code == 200, path
        csp = resp.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert resp.headers["x-frame-options"] == "DENY"
        assert resp.headers["referrer-policy"] == "same-origin"
        assert resp.headers["x-content-type-options"] == "nosniff"
    assert client.get("/admin/nope").headers["x-frame-options"] == "DENY"


INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>|\sstyle=|\son[a-z]+=", re.IGNORECASE)


def test_no_page_has_inline_script_or_style(web: tuple[TestClient, str]) -> None:
    client, key = web
    dep = seed(client)
    ds = dep["dataset_id"]
    models = client.get(f"/v1/models?dataset_id={ds}").json()["data"]
    assert login(client, key).status_code == 303
    pages = [
        "/admin",
        f"/admin/datasets/{ds}",
        f"/admin/datasets/{ds}/explorer",
        f"/admin/datasets/{ds}/releases",
        f"/admin/models/{models[0]['id']}",
        "/admin/deployments",
        "/admin/deployments/prod",
        "/admin/login",
    ]
    for path in pages:
        resp = client.get(path)
        assert resp.status_code == 200, path
        assert INLINE.search(resp.text) is None, (path, INLINE.search(resp.text))


def test_login_without_a_matching_csrf_token_is_refused(web: tuple[TestClient, str]) -> None:
    client, key = web
    form = client.get("/admin/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None
    nonce = token.group(1).split(".")[0]
    attempts = [
        {"key": key},  # no token: a cross-site form cannot read ours
        {"key": key, "csrf": "someone-elses.0000"},
        {"key": key, "csrf": f"{nonce}.{'0' * 64}"},
    ]
    for data in attempts:
        resp = client.post("/admin/login", data=data, follow_redirects=False)
        assert resp.status_code == 403
        assert "retarget_session" not in resp.headers.get("set-cookie", "")
    # the attacker sets both copies to a token of their own (cookie tossing): no MAC
    client.cookies.set("retarget_csrf", f"{nonce}.{'0' * 64}", path="/admin")
    resp = client.post(
        "/admin/login", data={"key": key, "csrf": f"{nonce}.{'0' * 64}"}, follow_redirects=False
    )
    assert resp.status_code == 403
    client.cookies.clear()
    elsewhere = login(client, key, origin="https://evil.example.invalid")
    assert elsewhere.status_code == 403


def test_logout_needs_the_csrf_token(web: tuple[TestClient, str]) -> None:
    client, key = web
    assert login(client, key).status_code == 303
    assert client.post("/admin/logout", follow_redirects=False).status_code == 403
    assert client.get("/admin", follow_redirects=False).status_code == 200  # still in
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/admin").text)
    assert token is not None
    out = client.post("/admin/logout", data={"csrf": token.group(1)}, follow_redirects=False)
    assert out.status_code == 303


def test_logout_ends_the_session_server_side(db_url: str, tmp_path: Path) -> None:
    """A cookie copied before logout (another browser, a stolen header) stops working
    the moment its session logs out, though its signature and expiry are still good."""
    with app_on(db_url, tmp_path) as client, app_on(db_url, tmp_path) as thief:
        key = authorize(client, client.app.state.ctx.session_factory)
        assert login(client, key).status_code == 303
        copied = client.cookies["retarget_session"]
        thief.cookies.set("retarget_session", copied, path="/admin")
        assert thief.get("/admin", follow_redirects=False).status_code == 200
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/admin").text)
        assert token is not None
        out = client.post("/admin/logout", data={"csrf": token.group(1)}, follow_redirects=False)
        assert out.status_code == 303
        assert thief.get("/admin", follow_redirects=False).status_code == 303
        assert thief.get("/admin/deployments", follow_redirects=False).status_code == 303
        # the copy cannot log itself out again to revive anything, nor open a page later
        client.cookies.set("retarget_session", copied, path="/admin")
        assert client.get("/admin", follow_redirects=False).status_code == 303
        # a new login starts a new session that works
        client.cookies.clear()
        assert login(client, key).status_code == 303
        assert client.get("/admin", follow_redirects=False).status_code == 200


def test_a_logout_from_another_origin_is_refused(web: tuple[TestClient, str]) -> None:
    client, key = web
    assert login(client, key).status_code == 303
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/admin").text)
    assert token is not None
    for headers in ({"Sec-Fetch-Site": "same-site"}, {"Origin": "http://testserver:8081"}):
        out = client.post(
            "/admin/logout", data={"csrf": token.group(1)}, headers=headers, follow_redirects=False
        )
        assert out.status_code == 403
    assert client.get("/admin", follow_redirects=False).status_code == 200


def test_cookies_are_secure_behind_a_trusted_tls_proxy_only(db_url: str, tmp_path: Path) -> None:
    proxied = {"X-Forwarded-Proto": "https"}
    with app_on(db_url, tmp_path) as c:
        key = authorize(c, c.app.state.ctx.session_factory)
        c.headers.update(proxied)  # anyone may send the header: not trusted by default
        assert "secure" not in login(c, key).headers["set-cookie"].lower()
    with app_on(db_url, tmp_path, forwarded_allow_ips="*") as c:
        c.headers.update(proxied)
        form = c.get("/admin/login")
        assert "secure" in form.headers["set-cookie"].lower()
        token = form.cookies["retarget_csrf"]
        c.cookies.clear()  # a Secure cookie: this http test client would not send it back
        resp = c.post(
            "/admin/login",
            data={"key": key, "csrf": token},
            headers={"Cookie": f"retarget_csrf={token}"},
            follow_redirects=False,
        )
        cookie = resp.headers["set-cookie"]
        assert "retarget_session" in cookie and "secure" in cookie.lower()


def test_replicas_without_a_configured_secret_share_sessions(db_url: str, tmp_path: Path) -> None:
    with app_on(db_url, tmp_path) as first, app_on(db_url, tmp_path) as second:
        key = authorize(first, first.app.state.ctx.session_factory)
        assert login(first, key).status_code == 303
        second.cookies.update(first.cookies)
        assert second.get("/admin", follow_redirects=False).status_code == 200
    other = tmp_path / "other"
    other_url = f"sqlite:///{other}.sqlite"
    upgrade(url=other_url)
    with app_on(other_url, tmp_path) as stranger:  # another database: another secret
        stranger.cookies.update(first.cookies)
        assert stranger.get("/admin", follow_redirects=False).status_code == 303


def test_metrics_need_a_read_key_or_are_switched_off(client: TestClient, backend: Backend) -> None:
    assert client.get("/metrics").status_code == 200  # an admin key
    anonymous = client.headers.pop("Authorization")
    assert client.get("/metrics").status_code == 401
    authorize(client, backend.session_factory, "publish")
    assert client.get("/metrics").status_code == 403
    authorize(client, backend.session_factory, "read")
    assert "retarget_jobs_queued_total" in client.get("/metrics").text
    client.headers["Authorization"] = anonymous
    ctx = client.app.state.ctx
    ctx.settings.metrics = "off"
    assert client.get("/metrics").status_code == 404
    ctx.settings.metrics = "open"
    client.headers.pop("Authorization")
    assert client.get("/metrics").status_code == 200


def test_interactive_docs_are_off_unless_asked_for(db_url: str, tmp_path: Path) -> None:
    with app_on(db_url, tmp_path) as c:
        assert c.get("/docs").status_code == 404 and c.get("/redoc").status_code == 404
        assert c.get("/openapi.json").status_code == 200
    with app_on(db_url, tmp_path, docs=True) as c:
        assert c.get("/docs").status_code == 200 and c.get("/redoc").status_code == 200


def test_an_unreachable_database_is_503_for_an_uncached_key(tmp_path: Path) -> None:
    down = "postgresql+psycopg://postgres@127.0.0.1:1/nothing?connect_timeout=2"
    settings = Settings(data_dir=tmp_path, database_url=down, auto_migrate=False)
    with TestClient(create_app(settings)) as c:
        resp = c.get("/v1/datasets", headers={"Authorization": "Bearer rt_uncached-key"})
        assert resp.status_code == 503
        assert resp.json()["type"] == "urn:retarget:problem:storage-unavailable"
        assert resp.headers["retry-after"]
        assert c.get("/admin/login").status_code == 503
        assert c.get("/readyz").status_code == 503


def test_readyz_is_not_ready_when_the_blob_disk_is_nearly_full(
    client: TestClient,
) -> None:
    assert client.get("/readyz").json()["checks"]["disk"] == "ok"
    client.app.state.ctx.settings.readyz_min_free_bytes = 2**62
    resp = client.get("/readyz")
    assert resp.status_code == 503 and resp.json()["checks"]["disk"].startswith("low:")
