"""names: model aliases with their history, model tags, deployments that follow an alias

``model_aliases`` names one version of a model per (dataset, model name, alias);
``model_alias_events`` keeps every set, move and delete. ``model_tags`` holds free
key/value tags of a model version. A deployment may follow an alias
(``deployments.follows_name``, ``follows_alias``): it serves that one model, and a
move of the alias re-targets it.

Revision ID: 0015
Revises: 0016
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.registry.models import UTCDateTime

revision: str = "0015"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_aliases",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=36), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_model_aliases_dataset_id_datasets"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_model_aliases_model_id_models"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_aliases")),
        sa.UniqueConstraint("dataset_id", "name", "alias", name="uq_model_aliases_name_alias"),
    )
    op.create_index(
        op.f("ix_model_aliases_model_id"), "model_aliases", ["model_id"], unique=False
    )
    op.create_table(
        "model_alias_events",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=36), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("previous_model_id", sa.String(length=36), nullable=True),
        sa.Column("previous_version", sa.Integer(), nullable=True),
        sa.Column("key_name", sa.String(length=200), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_model_alias_events_dataset_id_datasets"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_alias_events")),
    )
    op.create_index(
        "ix_model_alias_events_name",
        "model_alias_events",
        ["dataset_id", "name", "created_at"],
        unique=False,
    )
    op.create_table(
        "model_tags",
        sa.Column("model_id", sa.String(length=36), nullable=False),
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("value", sa.String(length=1000), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_model_tags_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("model_id", "key", name=op.f("pk_model_tags")),
    )
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(sa.Column("follows_name", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("follows_alias", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("follows_alias")
        batch.drop_column("follows_name")
    op.drop_table("model_tags")
    op.drop_index("ix_model_alias_events_name", table_name="model_alias_events")
    op.drop_table("model_alias_events")
    op.drop_index(op.f("ix_model_aliases_model_id"), table_name="model_aliases")
    op.drop_table("model_aliases")
