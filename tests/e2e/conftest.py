"""A real `retarget serve` process on loopback, on its embedded defaults."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import free_port, service_env, wait_healthy


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    env = service_env(RETARGET_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
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
