"""A real `retarget serve` process on loopback, on its embedded defaults."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import free_port, service_env, wait_healthy


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """(base URL, data folder); settings of its own through indirect parametrization
    (a dict of RETARGET_* variables)."""
    port = free_port()
    extra = getattr(request, "param", None) or {}
    env = service_env(RETARGET_DATA_DIR=str(tmp_path / "data"), **extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "retarget.cli", "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base, 60, alive=lambda: proc.poll() is None):
            proc.terminate()
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"server did not start:\n{out}")
        yield base, tmp_path / "data"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def live_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One `retarget serve` shared by a module's tests: (base URL, admin key)."""
    folder = tmp_path_factory.mktemp("live")
    port = free_port()
    # the interactive API pages are off by default; this service shows them (RETARGET_DOCS).
    # Plans answer in their request here even on a loaded machine (the 202 path of a plan
    # over its budget has its own tests), so generated clients see the 200 they expect.
    env = service_env(
        RETARGET_DATA_DIR=str(folder / "data"),
        RETARGET_DOCS="true",
        RETARGET_PLAN_REQUEST_BUDGET_S="120",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "retarget.cli", "serve", "--port", str(port)],
        env=env,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base, 120, alive=lambda: proc.poll() is None):
            pytest.fail("server did not start")
        yield base, (folder / "data" / "admin-key").read_text().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
