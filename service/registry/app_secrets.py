"""Secrets the service makes for itself once and keeps in the database (table
``app_secrets``), so every replica reads the same value without configuration."""

from __future__ import annotations

import secrets

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from service.registry.db import session_scope
from service.registry.models import AppSecret


def app_secret(*, session_factory: sessionmaker[Session], name: str) -> str:
    """The secret ``name``, created (256 random bits) by the first replica that asks."""
    with session_scope(session_factory) as session:
        row = session.get(AppSecret, name)
        if row is not None:
            return row.value
    try:
        with session_scope(session_factory) as session:
            session.add(AppSecret(name=name, value=secrets.token_hex(32)))
    except IntegrityError:  # another replica made it first: use theirs
        pass
    with session_scope(session_factory) as session:
        row = session.get(AppSecret, name)
        assert row is not None
        return row.value
