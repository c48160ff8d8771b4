"""Files sent ahead of a bundle's registration (``PUT /v1/uploads/{sha256}``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from service.api.schemas.common import In

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class BundleFileRef(In):
    """One file of a bundle registered by reference to an upload: its path in the
    bundle and the sha256 it was uploaded under."""

    path: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    sha256: Sha256


class UploadPublic(BaseModel):
    sha256: str
    size_bytes: int
    expires_at: datetime = Field(description="when it is removed unless a registration names it")


class UploadsMissingRequest(In):
    sha256: list[Sha256] = Field(min_length=1, max_length=1024)


class UploadsMissingPublic(BaseModel):
    missing: list[str] = Field(
        description="the sha256s asked about that this key has not uploaded (or that expired)"
    )
