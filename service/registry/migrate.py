"""`alembic upgrade head`, the only way the schema is made."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

#: shipped inside the package, so an installed wheel migrates from any folder
MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def alembic_config(*, url: str | None = None, connection: Connection | None = None) -> Config:
    if not MIGRATIONS.is_dir():
        raise RuntimeError(f"migrations folder not found at {MIGRATIONS}")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.attributes["url"] = url
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(*, url: str | None = None, connection: Connection | None = None) -> None:
    """Bring the schema to the newest revision; a no-op when it is already there."""
    command.upgrade(alembic_config(url=url, connection=connection), "head")
