"""uploads: blobs sent ahead of a bundle's registration, by the key that sent them

A bundle may be uploaded file by file (``PUT /v1/uploads/{sha256}``) and then
registered by naming the files' sha256s; an interrupted upload re-sends only what
is missing. Each row says that ``owner`` (an API key's id; "" when auth is off)
sent these bytes: a registration may name only blobs its own key sent, so knowing
a sha256 (models and releases show theirs) never lets a key claim bytes it never
had. ``created`` says whether the upload put the blob in the store (only then may
an expired, unregistered upload remove it again).

Revision ID: 0016
Revises: 0012
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "uploads",
        sa.Column("owner", sa.String(length=36), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "sha256", name=op.f("pk_uploads")),
    )
    op.create_index("ix_uploads_created_at", "uploads", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_uploads_created_at", table_name="uploads")
    op.drop_table("uploads")
