"""Alembic environment: the URL comes from the caller or from RETARGET_* settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from service.config import Settings
from service.registry.db import make_engine
from service.registry.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    if connection.dialect.name == "postgresql":
        # Several replicas may start at once: one migrates, the others wait.
        connection.execute(text("SELECT pg_advisory_xact_lock(72616317)"))
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.attributes.get("url") or Settings().resolved_database_url
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `retarget migrate`")
run_online()
