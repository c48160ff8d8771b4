"""Fixtures: real Postgres (a fresh database per test run, migrated by Alembic,
each test inside a transaction rolled back at the end) and the SQLite default
(a copy of a migrated file per test)."""

from __future__ import annotations

import os

# The random-allocation package (a reference in the balanced-iteration-subsampling tests)
# compiles its numba kernels on first use: about 40 s of one core in a fresh environment,
# for references that take a few seconds as plain Python. The figures are the same.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.config import Settings
from service.registry.db import make_engine
from service.registry.keys import create_key
from service.registry.migrate import upgrade
from tests.s3server import S3Bucket, S3Server, serve

# Under pytest-xdist each worker has its own Postgres database (postgres_url below) and
# its own Redis database for the tests that share the server's Redis.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER.startswith("gw"):
    os.environ.setdefault(
        "RETARGET_TEST_REDIS_URL", f"redis://127.0.0.1:6379/{15 - int(_XDIST_WORKER[2:]) % 15}"
    )

PG_ADMIN_URL = os.environ.get(
    "RETARGET_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A new database on the real server, migrated to head, dropped afterwards."""
    name = f"retarget_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url=url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite") / "template.db"
    upgrade(url=f"sqlite:///{path}")
    return path


class Backend:
    """A database for one test: its URL, a session factory and the engine behind it."""

    def __init__(self, name: str, url: str, engine: Engine, factory: sessionmaker[Session]):
        self.name = name
        self.url = url
        self.engine = engine
        self.session_factory = factory


@pytest.fixture(params=["sqlite", "postgres"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> Iterator[Backend]:
    if request.param == "sqlite":
        path = tmp_path / "retarget.db"
        shutil.copy(sqlite_template, path)
        url = f"sqlite:///{path}"
        engine = make_engine(url)
        yield Backend("sqlite", url, engine, sessionmaker(bind=engine, expire_on_commit=False))
        engine.dispose()
        return
    pg_engine: Engine = request.getfixturevalue("postgres_engine")
    url = request.getfixturevalue("postgres_url")
    conn = pg_engine.connect()
    outer = conn.begin()
    factory = sessionmaker(
        bind=conn, expire_on_commit=False, join_transaction_mode="create_savepoint"
    )
    try:
        yield Backend("postgres", url, pg_engine, factory)
    finally:
        outer.rollback()
        conn.close()


@pytest.fixture
def settings(tmp_path: Path, backend: Backend) -> Settings:
    # plans answer in the request however slow the test machine (the 202 path has its own tests)
    return Settings(
        data_dir=tmp_path / "data",
        database_url=backend.url,
        auto_migrate=False,
        plan_request_budget_s=600,
    )


def authorize(client: TestClient, factory: sessionmaker[Session], *scopes: str) -> str:
    """Create a key with ``scopes`` (default admin) and send it with every request."""
    with factory() as session:
        _, key = create_key(session=session, name="tests", scopes=list(scopes or ("admin",)))
        session.commit()
    client.headers["Authorization"] = f"Bearer {key}"
    return key


@pytest.fixture
def client(settings: Settings, backend: Backend) -> Iterator[TestClient]:
    app = create_app(settings, session_factory=backend.session_factory)
    with TestClient(app) as c:
        authorize(c, backend.session_factory)
        yield c


def blob_files(settings: Settings) -> list[str]:
    """Every file under the blob folder, temporary ones included."""
    root = settings.resolved_blob_dir
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def committed_db(postgres_url: str) -> Iterator[str]:
    """The session's Postgres database with real commits (workers and concurrent
    requests need rows other connections can see); emptied afterwards."""
    yield postgres_url
    engine = make_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "TRUNCATE releases, models, datasets, api_keys, outbox, webhook_deliveries, "
                "uploads CASCADE"
            )
        )
    engine.dispose()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS S3 server for the whole test session (started on first use, ~10 s)."""
    yield from serve(tmp_path_factory.mktemp("weed"))


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A new bucket on the test server; this process's AWS variables point at it."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return S3Bucket(s3_server, s3_server.new_bucket())
