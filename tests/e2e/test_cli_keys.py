"""`retarget keys create` and database errors, as a user runs them in a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.registry.db import make_engine, make_sessionmaker
from service.registry.keys import find_key

CLI = [sys.executable, "-m", "retarget.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETARGET_")}
    env.update(extra)
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_no_database_is_created_by_accident(tmp_path: Path) -> None:
    out = _run(["keys", "create", "--scope", "read"], tmp_path, _env())
    assert out.returncode == 2
    assert "no database at" in out.stderr and "--create" in out.stderr
    assert out.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing was made


def test_the_key_alone_goes_to_stdout_after_it_is_stored(tmp_path: Path) -> None:
    out = _run(["keys", "create", "--scope", "read", "--create"], tmp_path, _env())
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1
    db = tmp_path / "retarget-data" / "retarget.db"
    assert str(db.resolve()) in out.stderr  # says where the key lives
    engine = make_engine(f"sqlite:///{db}")
    try:
        with make_sessionmaker(engine)() as session:
            row = find_key(session=session, key=lines[0])
            assert row is not None and list(row.scopes) == ["read"]
    finally:
        engine.dispose()
    # with the data folder there, no --create is needed
    again = _run(["keys", "create", "--scope", "admin"], tmp_path, _env())
    assert again.returncode == 0 and len(again.stdout.splitlines()) == 1


def test_an_unusable_database_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not SQLite" * 100)
    out = _run(["migrate"], tmp_path, _env(RETARGET_DATABASE_URL=f"sqlite:///{bad}"))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("retarget:")]
    assert len(errors) == 1 and "cannot use the database" in errors[0]
