"""journal rows keyed by generation

Revision ID: 7f3c2b9e4a10
Revises: a3c5e7f9b1d2
Create Date: 2026-12-01 11:30:00

Existing rows become generation 0's (the id's first generation); the primary key is
(session_id, generation, seq), so each generation's seqs start at 0.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '7f3c2b9e4a10'
down_revision = 'a3c5e7f9b1d2'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('journal_entries', schema=None, recreate='auto') as batch_op:
        batch_op.add_column(
            sa.Column('generation', sa.BigInteger(), server_default=sa.text('0'), autoincrement=False, nullable=False)
        )
        batch_op.drop_constraint('pk_journal_entries', type_='primary')
        batch_op.create_primary_key('pk_journal_entries', ['session_id', 'generation', 'seq'])


def downgrade() -> None:
    # Only the newest generation of each id is kept: older ones would clash on (session_id, seq).
    op.execute(
        "DELETE FROM journal_entries WHERE generation < "
        "(SELECT MAX(j.generation) FROM journal_entries j WHERE j.session_id = journal_entries.session_id)"
    )
    with op.batch_alter_table('journal_entries', schema=None, recreate='auto') as batch_op:
        batch_op.drop_constraint('pk_journal_entries', type_='primary')
        batch_op.create_primary_key('pk_journal_entries', ['session_id', 'seq'])
        batch_op.drop_column('generation')
