"""file leases (KS-19 leases persisted)

Revision ID: a3c5e7f9b1d2
Revises: 46af92d84265
Create Date: 2026-12-01 11:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a3c5e7f9b1d2"
down_revision = "46af92d84265"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "file_leases",
        sa.Column("path", sa.String(length=2048), nullable=False),
        sa.Column("holder", sa.String(length=512), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("path", name=op.f("pk_file_leases")),
    )
    op.create_index(op.f("ix_file_leases_holder"), "file_leases", ["holder"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_file_leases_holder"), table_name="file_leases")
    op.drop_table("file_leases")
