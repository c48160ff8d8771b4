"""The admin dashboard in headless Chromium (Debian's package) driven by Playwright,
against a real `retarget serve` process: log in, walk every page, move the plan
explorer's slider. Screenshots go to tests/e2e/artifacts/ (not committed)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.helpers import checkpoint_bytes, sgd

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent / "artifacts"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed: apt-get install chromium"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


def populate(base: str, admin_key: str, release: bool = True) -> dict[str, str]:
    """A dataset with three DP-SGD models, a read key, a release and a deployment
    (without ``release``: models and the key only)."""
    with httpx2.Client(base_url=base, timeout=120) as http:
        http.headers["Authorization"] = f"Bearer {admin_key}"
        ds = http.post(
            "/v1/datasets", json={"name": "digits", "metric": "accuracy", "epsilon_cap": 50}
        ).json()["id"]
        ids = []
        for i, (sigma, acc) in enumerate(((0.8, 0.92), (1.5, 0.88), (3.0, 0.75))):
            meta = {
                "dataset_id": ds,
                "name": f"logreg-sigma{sigma}",
                "mechanism": sgd(sigma),
                # accuracy of a public proxy run: 'prior', shown to read keys
                "metrics": {"accuracy": acc + 1e-9, "val_loss": 0.3},
                "metric_declarations": {"accuracy": {"source": "prior"}},
                "lineage": {"run_id": f"run-{i}", "step": 400},
            }
            resp = http.post(
                "/v1/models",
                files={"weights": ("m.safetensors", checkpoint_bytes(seed=i))},
                data={"metadata": json.dumps(meta)},
            )
            assert resp.status_code == 201, resp.text
            ids.append(resp.json()["id"])
        if not release:
            read = http.post("/v1/keys", json={"name": "dashboard viewer", "scopes": ["read"]})
            return {"dataset": ds, "model": ids[0], "read_key": read.json()["key"]}
        dep = http.post(
            "/v1/deployments",
            json={"name": "search-ranker", "dataset_id": ds, "epsilon": 3.0, "delta": 1e-5},
        )
        assert dep.status_code == 201, dep.text
        read = http.post("/v1/keys", json={"name": "dashboard viewer", "scopes": ["read"]})
        assert read.status_code == 201, read.text
        return {"dataset": ds, "model": ids[0], "read_key": read.json()["key"]}


def shoot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def images_loaded(page: Page) -> bool:
    return bool(
        page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
    )


def test_dashboard_pages_and_plan_explorer(server: tuple[str, Path], browser: Browser) -> None:
    base, data_dir = server
    admin_key = (data_dir / "admin-key").read_text().strip()
    made = populate(base, admin_key)
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []

    def on_console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            errors.append(msg.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # not logged in: every page sends you to the login form; a bad key is refused
    page.goto(f"{base}/admin/datasets/{made['dataset']}")
    assert page.url.endswith("/admin/login")
    page.fill("#key", "rt_not-a-key")
    page.click("button[type=submit]")
    assert "unknown, revoked" in page.inner_text("main")
    shoot(page, "01-login")

    page.fill("#key", made["read_key"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/admin")
    assert "digits" in page.inner_text("table")
    shoot(page, "02-datasets")

    page.click("text=digits")
    page.wait_for_selector("#models")
    text = page.inner_text("#models")
    assert "logreg-sigma0.8" in text and "DP-SGD q=0.01 sigma=0.8" in text
    assert "run-0" in text
    shoot(page, "03-dataset")

    page.click("text=logreg-sigma0.8")
    page.wait_for_load_state("networkidle")
    assert images_loaded(page)
    # a read key sees that raw weights exist, never a link to them (models:download only)
    assert "raw weights: scope models:download only" in page.inner_text("main")
    assert page.locator("a[href$='/weights']").count() == 0
    assert "(lineage verified)" in page.inner_text("main")
    # metrics rounded; one read from the model (declared nothing) hidden from a read key
    assert "accuracy=0.920" in page.inner_text("main")
    assert "val_loss=" not in page.inner_text("main") and "hidden from this key" in page.inner_text(
        "main"
    )
    shoot(page, "04-model")

    page.goto(f"{base}/admin/datasets/{made['dataset']}/explorer")
    # selectors, not wait_for_function: its predicate is eval'd, which the CSP forbids
    # plans past the request's budget answer 202 and the script polls: allow for it
    page.wait_for_selector("#explorer[data-shown-epsilon]", timeout=120_000)
    first_eps = page.get_attribute("#explorer", "data-shown-epsilon")
    first = page.inner_text("#plans tbody")
    assert "RS, RDP" in first and "LC, PLD" in first
    # the frontier is fetched by the script (polled while its plans compute), then shown
    page.wait_for_selector("#frontier[data-loaded]", timeout=120_000)
    assert page.is_visible("#frontier")
    assert images_loaded(page)  # the frontier SVG
    # in utility terms: the dataset's metric (declared 'prior', so this read key may see
    # it) against certified epsilon, every method drawn, the inputs named with tooltips
    svg = context.request.get(f"{base}/admin/datasets/{made['dataset']}/frontier.svg").text()
    assert "accuracy (RS: expected)" in svg and "noise variance" not in svg
    assert "certified epsilon" in svg
    for name in ("logreg-sigma0.8", "logreg-sigma1.5", "logreg-sigma3.0"):
        assert f">{name}</text>" in svg and f"<title>{name}: epsilon" in svg
    assert "RS, PLD" in svg and "RS, RDP" in svg
    shoot(page, "05-explorer")

    # move the slider to its far end with the keyboard, as a person would
    page.focus("#target")
    page.keyboard.press("End")
    page.wait_for_selector(f"#explorer:not([data-shown-epsilon='{first_eps}'])", timeout=120_000)
    moved = page.inner_text("#plans tbody")
    assert moved != first
    assert page.inner_text("#target-value") != first_eps
    shoot(page, "06-explorer-moved")
    # the plan shown is the server's plan at that target
    eps = float(page.get_attribute("#explorer", "data-shown-epsilon") or "0")
    lc_eps = float(page.inner_text("tr[data-plan=lc_rdp] td.num"))
    assert 0 < lc_eps <= eps

    page.goto(f"{base}/admin/datasets/{made['dataset']}/releases")
    assert "cumulative guarantee" in page.inner_text("main").lower()
    assert "search-ranker" in page.inner_text("table")
    shoot(page, "07-releases")

    page.goto(f"{base}/admin/deployments")
    page.click("text=search-ranker")
    body = page.inner_text("main")
    assert "(3.0, 1e-05)" in body and "released" in body
    shoot(page, "08-deployment")

    for secret in (admin_key, made["read_key"]):
        assert secret not in page.content()
    assert errors == [], errors
    context.close()


def test_dashboard_refuses_keys_without_read_scope(server: tuple[str, Path]) -> None:
    base, data_dir = server
    admin_key = (data_dir / "admin-key").read_text().strip()
    with httpx2.Client(base_url=base, timeout=30, follow_redirects=False) as http:
        http.headers["Authorization"] = f"Bearer {admin_key}"
        publish = http.post("/v1/keys", json={"name": "ci", "scopes": ["publish"]}).json()["key"]
        del http.headers["Authorization"]
        assert http.get("/admin").headers["location"] == "/admin/login"
        form = http.get("/admin/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        resp = http.post("/admin/login", data={"key": publish, "csrf": token.group(1)})
        assert resp.status_code == 200 and "not a read/admin key" in resp.text
        assert "retarget_session" not in resp.headers.get("set-cookie", "")
        forged = http.get("/admin", cookies={"retarget_session": "someid.9999999999.00"})
        assert forged.status_code == 303


@pytest.mark.parametrize("server", [{"RETARGET_PLAN_REQUEST_BUDGET_S": "0"}], indirect=True)
def test_explorer_polls_plans_and_frontier_computed_as_jobs(
    server: tuple[str, Path], browser: Browser
) -> None:
    """No plan is answered in its request: the explorer's plans and its frontier come
    back 202 with a job link first, and the page polls until it can show them."""
    base, data_dir = server
    admin_key = (data_dir / "admin-key").read_text().strip()
    made = populate(base, admin_key)
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    statuses: dict[str, list[int]] = {"plans.json": [], "frontier.svg": []}

    def on_response(resp) -> None:  # type: ignore[no-untyped-def]
        for name, seen in statuses.items():
            if f"/{name}" in resp.url:
                seen.append(resp.status)

    page.on("response", on_response)
    page.goto(f"{base}/admin/login")
    page.fill("#key", made["read_key"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/admin")
    page.goto(f"{base}/admin/datasets/{made['dataset']}/explorer")
    page.wait_for_selector("#explorer[data-shown-epsilon]", timeout=120_000)
    page.wait_for_selector("#frontier[data-loaded]", timeout=120_000)
    assert "RS, RDP" in page.inner_text("#plans tbody")
    assert images_loaded(page)
    assert page.inner_text("#frontier-status") == ""
    shoot(page, "09-explorer-after-jobs")
    for name, seen in statuses.items():
        assert seen[0] == 202 and seen[-1] == 200, (name, seen)
        assert set(seen) <= {200, 202}, (name, seen)
    assert errors == [], errors
    context.close()


@pytest.mark.parametrize("server", [{"RETARGET_PLAN_JOB_BUDGET_S": "0.001"}], indirect=True)
def test_explorer_shows_why_plans_past_their_budget_failed(
    server: tuple[str, Path], browser: Browser
) -> None:
    """Every plan runs past a 1 ms budget: the page says so for the plans and the chart,
    with the problem's reason; no script error, no broken image."""
    base, data_dir = server
    admin_key = (data_dir / "admin-key").read_text().strip()
    made = populate(base, admin_key, release=False)
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{base}/admin/login")
    page.fill("#key", made["read_key"])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/admin")
    page.goto(f"{base}/admin/datasets/{made['dataset']}/explorer")
    page.wait_for_selector("#status:has-text('could not plan')", timeout=120_000)
    page.wait_for_selector("#frontier-status:has-text('could not draw')", timeout=120_000)
    assert "wall-clock budget" in page.inner_text("#status")
    assert "wall-clock budget" in page.inner_text("#frontier-status")
    # no broken image: the chart stays hidden, without a source
    assert not page.is_visible("#frontier")
    assert page.get_attribute("#frontier", "src") is None
    shoot(page, "10-explorer-over-budget")
    assert errors == [], errors
    context.close()


def attack_site(html: str) -> tuple[str, Any]:
    """A page served on another port of the same host (same site, another origin)."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/", server


def test_a_charged_download_needs_the_page_and_no_other_port_can_trigger_it(
    server: tuple[str, Path], browser: Browser
) -> None:
    """Issue #30.8 in a real browser: a logged-in admin downloads a model's weights from
    its page (a form POST with the session's token; charged once), while a page on
    another port of the same host, whose requests carry the SameSite=Strict cookie,
    gets nothing charged: not with an image (a GET), not with a form it posts."""
    base, data_dir = server
    admin_key = (data_dir / "admin-key").read_text().strip()
    made = populate(base, admin_key, release=False)
    model = made["model"]
    api = httpx2.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {admin_key}"})

    def charged() -> int:
        ledger = api.get(f"/v1/datasets/{made['dataset']}/ledger").json()
        return len(ledger["exposures"])

    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    page.goto(f"{base}/admin/login")
    page.fill("#key", admin_key)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/admin")
    page.goto(f"{base}/admin/models/{model}")
    assert page.locator("a[href$='/weights']").count() == 0  # no link: a form
    with page.expect_download() as download:
        page.click("text=download weights")
    assert Path(download.value.path()).read_bytes() == checkpoint_bytes(seed=0)
    assert charged() == 1

    target = f"{base}/admin/models/{model}/weights"
    url, site = attack_site(
        f'<img src="{target}"><form method="post" action="{target}">'
        '<input type="hidden" name="csrf" value="guessed"></form>'
        "<script>setTimeout(() => document.forms[0].submit(), 300)</script>"
    )
    try:
        statuses: list[int] = []
        page.on("response", lambda r: statuses.append(r.status) if r.url == target else None)
        page.goto(url)
        page.wait_for_url(target)
        page.wait_for_load_state("load")
        assert statuses and all(s in (403, 405) for s in statuses), statuses
        assert 403 in statuses  # the form's post, refused
    finally:
        site.shutdown()
    assert charged() == 1
    # still logged in: the attack ended nothing
    page.goto(f"{base}/admin/models/{model}")
    assert page.url.endswith(f"/admin/models/{model}")
    context.close()
    api.close()
