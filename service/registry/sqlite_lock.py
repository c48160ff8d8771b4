"""SQLite's write lock as a dataset lock's second half (Postgres: an advisory lock)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.errors import Busy


def sqlite_write_transaction(session: Session, dataset_id: str) -> None:
    """Hold SQLite's write lock from now until the session's transaction ends: a
    second writer waits (busy timeout) until this one commits, and then reads what it
    wrote. pysqlite opens a transaction only before a write, so a connection already
    in one has written and holds the lock."""
    if session.get_bind().dialect.name != "sqlite":
        return
    raw = session.connection().connection.driver_connection
    if getattr(raw, "in_transaction", False):
        return
    try:
        session.execute(text("BEGIN IMMEDIATE"))
    except OperationalError as exc:
        if "locked" in str(exc.orig):
            raise Busy(
                f"dataset {dataset_id!r} is busy with another release; retry shortly"
            ) from exc
        raise
