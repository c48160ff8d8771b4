"""API keys."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from service.api.schemas.common import In, Name

#: every scope a key may carry (service.registry.keys.SCOPES)
Scope = Literal["admin", "publish", "release", "read", "models:download"]


class KeyCreate(In):
    name: Name
    scopes: list[Scope] = Field(min_length=1)


class KeyPublic(BaseModel):
    id: str
    name: str
    prefix: str = Field(description="the key's first characters, to tell keys apart")
    scopes: list[str]
    created_at: datetime
    revoked_at: datetime | None


class KeysPublic(BaseModel):
    data: list[KeyPublic]
    count: int
    offset: int
    limit: int


class KeyCreated(KeyPublic):
    key: str = Field(description="the API key; shown this once, stored only hashed")
