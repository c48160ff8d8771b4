"""api_keys.session_epoch, releases.merge_recoveries: sessions that logout ends
server-side, pending merges taken up again at start-up

A dashboard cookie carries the epoch of its key at login; every dashboard request
compares it with the key's row, and logout bumps the row's epoch, so a copied cookie
stops working the moment its session logs out (and so do the key's other sessions).

A release left ``pending`` by a process that died mid-merge is merged again when the
service starts, at most a few times (``merge_recoveries`` counts them, and the
conditional update that bumps it lets one starting process take each); past that it
is abandoned and its reserved budget freed.

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
    with op.batch_alter_table("releases") as batch:
        batch.add_column(
            sa.Column("merge_recoveries", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("merge_recoveries")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("session_epoch")
