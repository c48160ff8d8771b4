"""api_keys.session_epoch: dashboard sessions that logout ends server-side

A dashboard cookie carries the epoch of its key at login; every dashboard request
compares it with the key's row, and logout bumps the row's epoch, so a copied cookie
stops working the moment its session logs out (and so do the key's other sessions).

Revision ID: 0017
Revises: 0014
Create Date: 2026-11-28 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column("session_epoch", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("session_epoch")
