"""The schema comes from Alembic alone, and the migrations match the models."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from service.registry.db import make_engine
from service.registry.migrate import upgrade
from service.registry.models import Base


def _diff(engine: Engine) -> list:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))


def test_postgres_schema_matches_models_after_upgrade(postgres_engine: Engine) -> None:
    assert _diff(postgres_engine) == []


def test_sqlite_schema_matches_models_and_upgrade_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url=url)
    upgrade(url=url)
    engine = make_engine(url)
    try:
        assert {"datasets", "models", "alembic_version"} <= set(inspect(engine).get_table_names())
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_postgres_upgrade_is_idempotent(postgres_url: str, postgres_engine: Engine) -> None:
    upgrade(url=postgres_url)
    assert _diff(postgres_engine) == []
