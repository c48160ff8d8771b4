"""exposures (raw downloads, scored plans) and the secret uniform of random selections

``exposures``: private models seen outside a release, charged by the ledger.
``selection_uniforms``: one secret uniform per dataset, at which every random
selection inverts its CDF (common random numbers), so near-identical plans select
the same model instead of drawing again.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.registry.models import UTCDateTime

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "exposures",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("model_ids", sa.JSON(), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=36), nullable=True),
        sa.Column("key_name", sa.String(length=200), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("first_at", UTCDateTime(), nullable=False),
        sa.Column("last_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_exposures_dataset_id_datasets"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exposures")),
    )
    op.create_index(
        "ix_exposures_dataset_subject", "exposures", ["dataset_id", "subject"], unique=False
    )
    op.create_table(
        "selection_uniforms",
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("u", sa.Float(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_selection_uniforms_dataset_id_datasets"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_selection_uniforms")),
    )


def downgrade() -> None:
    op.drop_table("selection_uniforms")
    op.drop_index("ix_exposures_dataset_subject", table_name="exposures")
    op.drop_table("exposures")
