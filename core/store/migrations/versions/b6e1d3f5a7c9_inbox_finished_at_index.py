"""inbox index on finished_at: the prune reads the rows it deletes, not the whole table

Revision ID: b6e1d3f5a7c9
Revises: e2b7c9d4f1a8
Create Date: 2026-12-05 20:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "b6e1d3f5a7c9"
down_revision = "e2b7c9d4f1a8"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_inbox_finished_at", "inbox", ["finished_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_inbox_finished_at", table_name="inbox")
