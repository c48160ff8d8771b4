"""releases: released models and the ledger behind them

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.registry.models import UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "releases",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("method", sa.String(length=32), nullable=False),
        sa.Column("accountant", sa.String(length=8), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("bound", sa.String(length=200), nullable=False),
        sa.Column("weights", sa.JSON(), nullable=False),
        sa.Column("drawn_model_id", sa.String(length=36), nullable=True),
        sa.Column("exposed_model_ids", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("deployment", sa.String(length=200), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_releases_dataset_id_datasets"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_releases")),
        sa.UniqueConstraint("request_hash", name=op.f("uq_releases_request_hash")),
    )
    op.create_index(
        "ix_releases_dataset_created", "releases", ["dataset_id", "created_at"], unique=False
    )
    op.create_index(op.f("ix_releases_sha256"), "releases", ["sha256"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_releases_sha256"), table_name="releases")
    op.drop_index("ix_releases_dataset_created", table_name="releases")
    op.drop_table("releases")
