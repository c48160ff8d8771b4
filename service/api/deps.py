"""Dependencies as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.jobs.queue import Jobs
from service.registry.blobs import BlobStore


@dataclass
class AppContext:
    """What the routes share: settings, the database and the blob store."""

    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    blobs: BlobStore
    jobs: Jobs


def get_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


ContextDep = Annotated[AppContext, Depends(get_context)]


def get_session(ctx: ContextDep) -> Iterator[Session]:
    session = ctx.session_factory()
    try:
        yield session
    finally:
        session.close()


def get_blobs(ctx: ContextDep) -> BlobStore:
    return ctx.blobs


def get_settings_dep(ctx: ContextDep) -> Settings:
    return ctx.settings


SessionDep = Annotated[Session, Depends(get_session)]
BlobsDep = Annotated[BlobStore, Depends(get_blobs)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_jobs(ctx: ContextDep) -> Jobs:
    return ctx.jobs


JobsDep = Annotated[Jobs, Depends(get_jobs)]
