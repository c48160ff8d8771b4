"""one verified checkpoint per (dataset, run, step)

A run has one iterate per step, so two verified checkpoints at the same step of one
run cannot both be it; the ledger and checkpoint averaging would charge them as one
trajectory. Rows registered before the rule that share a (run, step) keep their
earliest verified row; the others lose ``lineage_verified`` (they are then charged as
independent models, never less than before). Then a partial unique index keeps it so.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 15:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHERE = sa.text("lineage_verified")


def upgrade() -> None:
    conn = op.get_bind()
    models = sa.table(
        "models",
        sa.column("id", sa.String),
        sa.column("dataset_id", sa.String),
        sa.column("lineage_run_id", sa.String),
        sa.column("lineage_step", sa.BigInteger),
        sa.column("lineage_verified", sa.Boolean),
        sa.column("created_at", sa.DateTime),
    )
    rows = conn.execute(
        sa.select(models.c.id, models.c.dataset_id, models.c.lineage_run_id, models.c.lineage_step)
        .where(models.c.lineage_verified.is_(True), models.c.lineage_run_id.is_not(None))
        .order_by(models.c.created_at, models.c.id)
    ).all()
    seen: set[tuple[str, str, int | None]] = set()
    for model_id, dataset_id, run_id, step in rows:
        key = (dataset_id, run_id, step)
        if key in seen:
            conn.execute(
                sa.update(models).where(models.c.id == model_id).values(lineage_verified=False)
            )
        seen.add(key)
    op.create_index(
        "uq_models_run_step",
        "models",
        ["dataset_id", "lineage_run_id", "lineage_step"],
        unique=True,
        postgresql_where=_WHERE,
        sqlite_where=_WHERE,
    )


def downgrade() -> None:
    op.drop_index("uq_models_run_step", table_name="models")
