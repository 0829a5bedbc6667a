"""journal index on (session_id, external_event_id) for KS-14 answer lookups

Revision ID: 5d1e7a0c9b21
Revises: 7f3c2b9e4a10
Create Date: 2026-12-01 11:50:00.000000
"""

from __future__ import annotations

from alembic import op

revision = '5d1e7a0c9b21'
down_revision = "7f3c2b9e4a10"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_journal_entries_event', 'journal_entries', ['session_id', 'external_event_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_journal_entries_event', table_name='journal_entries')
