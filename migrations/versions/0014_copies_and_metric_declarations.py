"""a checkpoint's bytes registered twice are one model; metrics say how they were computed

``duplicate_of``: a model whose sha256 equals an earlier model's in the same dataset
is a copy of it, never an independent run (weighting two copies as independent runs
claims noise that does not exist). New copies are refused (409); rows registered
before the rule keep their earliest model as the original and point the later ones
at it (``duplicate_of``): plans leave copies out, and a partial unique index keeps
one original per (dataset, sha256).

``metric_declarations``: per metric, how it was computed ({"source": "prior" |
"models" | "private", "sensitivity": ...}); rows from before say nothing, which the
service reads as "models" (computed from the models: shown only to admin keys).

Revision ID: 0014
Revises: 0015
Create Date: 2026-11-28 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHERE = sa.text("duplicate_of IS NULL")


def upgrade() -> None:
    # plain ADD / DROP COLUMN (SQLite >= 3.35 too): a batch copy of ``datasets`` would
    # break the foreign keys that point at it
    op.add_column("datasets", sa.Column("metric_goal", sa.String(length=3), nullable=True))
    op.add_column("models", sa.Column("duplicate_of", sa.String(length=36), nullable=True))
    op.add_column("models", sa.Column("metric_declarations", sa.JSON(), nullable=True))
    conn = op.get_bind()
    models = sa.table(
        "models",
        sa.column("id", sa.String),
        sa.column("dataset_id", sa.String),
        sa.column("sha256", sa.String),
        sa.column("duplicate_of", sa.String),
        sa.column("created_at", sa.DateTime),
    )
    rows = conn.execute(
        sa.select(models.c.id, models.c.dataset_id, models.c.sha256).order_by(
            models.c.created_at, models.c.id
        )
    ).all()
    first: dict[tuple[str, str], str] = {}
    for model_id, dataset_id, sha256 in rows:
        key = (dataset_id, sha256)
        if key in first:
            conn.execute(
                sa.update(models).where(models.c.id == model_id).values(duplicate_of=first[key])
            )
        else:
            first[key] = model_id
    op.create_index(
        "uq_models_dataset_sha256",
        "models",
        ["dataset_id", "sha256"],
        unique=True,
        postgresql_where=_WHERE,
        sqlite_where=_WHERE,
    )


def downgrade() -> None:
    op.drop_index("uq_models_dataset_sha256", table_name="models")
    op.drop_column("models", "metric_declarations")
    op.drop_column("models", "duplicate_of")
    op.drop_column("datasets", "metric_goal")
