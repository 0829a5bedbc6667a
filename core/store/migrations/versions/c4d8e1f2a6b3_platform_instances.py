"""platform instances registered over the control API (shared by every process on the database)

Revision ID: c4d8e1f2a6b3
Revises: 5d1e7a0c9b21
Create Date: 2026-12-01 14:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c4d8e1f2a6b3"
down_revision = "5d1e7a0c9b21"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "platform_instances",
        sa.Column("instance_id", sa.String(length=512), nullable=False),
        sa.Column("platform", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=128), nullable=False),
        sa.Column("claims_json", sa.JSON(), nullable=False),
        sa.Column("chat_scopes_json", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id", name=op.f("pk_platform_instances")),
    )


def downgrade() -> None:
    op.drop_table("platform_instances")
