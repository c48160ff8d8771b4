"""the outbox of deployment work, deployments.policy_version, and app_secrets

The outbox records a webhook's policy change (and a release's notification) in the
same transaction as the delivery that asked for it, so a queue that is down loses
nothing. ``policy_version`` orders policy changes (an older one is refused).
``app_secrets`` holds the dashboard's session key, made here once so that every
replica agrees without configuration.

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-26 09:00:00
"""

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from service.registry.models import UTCDateTime

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    with op.batch_alter_table("outbox") as batch:
        batch.create_index("ix_outbox_due", ["status", "next_attempt_at"], unique=False)
    secrets_table = op.create_table(
        "app_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=200), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_app_secrets")),
    )
    op.bulk_insert(
        secrets_table,
        [{"name": "session", "value": secrets.token_hex(32), "created_at": datetime.now(UTC)}],
    )
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(
            sa.Column("policy_version", sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("policy_version")
    op.drop_table("app_secrets")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_index("ix_outbox_due")
    op.drop_table("outbox")
