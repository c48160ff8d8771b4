"""declared model architectures and datasets' public validation splits

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("architecture", sa.JSON(), nullable=True))
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("validation_sha256", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("validation_examples", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("validation_examples")
        batch.drop_column("validation_sha256")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("architecture")
