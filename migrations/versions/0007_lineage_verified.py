"""models.lineage_verified: checkpoint lineage checked step for step at registration

Rows registered before the check stay unverified (False): the ledger and checkpoint
averaging treat them as independent models.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 19:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(
            sa.Column("lineage_verified", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("lineage_verified")
