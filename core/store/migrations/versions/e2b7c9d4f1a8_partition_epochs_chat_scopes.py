"""partition epochs (the write-time ownership fence of partitioned processes) and the chat types
messages declared one-to-one (SM-26, shared by every process)

Revision ID: e2b7c9d4f1a8
Revises: c4d8e1f2a6b3
Create Date: 2026-12-01 18:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "e2b7c9d4f1a8"
down_revision = "c4d8e1f2a6b3"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "partition_epochs",
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("owner", sa.String(length=256), nullable=False),
        sa.Column("recorded_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("partition", name=op.f("pk_partition_epochs")),
    )
    op.create_table(
        "learned_chat_scopes",
        sa.Column("platform", sa.String(length=128), nullable=False),
        sa.Column("chat_type", sa.String(length=128), nullable=False),
        sa.Column("learned_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("platform", "chat_type", name=op.f("pk_learned_chat_scopes")),
    )


def downgrade() -> None:
    op.drop_table("learned_chat_scopes")
    op.drop_table("partition_epochs")
