"""bundles: a model or release made of several files (sharded checkpoints, PEFT adapters)

``kind`` says what a model or release is (``safetensors``: one file, as before;
``hf_bundle``: a Hugging Face model folder; ``peft_lora``: a PEFT LoRA adapter).
``files`` lists a bundle's files (path, size, sha256), each a blob; ``sha256`` of a
bundle is then the blob of its manifest. A release's ``status`` is ``pending`` while
an async merge runs (the ledger counts it already), ``done`` after.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("models", "releases"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column(
                    "kind", sa.String(length=16), nullable=False, server_default="safetensors"
                )
            )
            batch.add_column(sa.Column("files", sa.JSON(), nullable=True))
    with op.batch_alter_table("releases") as batch:
        batch.add_column(
            sa.Column("status", sa.String(length=16), nullable=False, server_default="done")
        )


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("status")
    for table in ("models", "releases"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("files")
            batch.drop_column("kind")
