"""`alembic upgrade head`, the only way the schema is made."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

#: the Alembic folder: inside the package in an installed wheel (mapped there at build
#: time, see setup.py), else the top-level `migrations/` of a source checkout
_PACKAGED = Path(__file__).resolve().parents[1] / "migrations"
MIGRATIONS = _PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[2] / "migrations"


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
