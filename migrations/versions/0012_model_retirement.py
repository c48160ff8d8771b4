"""models.retired_at, retired_reason: a model retired by an admin

A retired model stays in the registry (the ledger's history names it) but is left out
of every plan, release and deployment re-plan of its dataset; a request naming it is
refused. Retiring is how one registration stops holding a dataset hostage.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.registry.models import UTCDateTime

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("retired_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("retired_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("retired_reason")
        batch.drop_column("retired_at")
