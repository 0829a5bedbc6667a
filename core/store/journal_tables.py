"""Tables of the session history journal and the knowledge store (on the shared ``metadata``)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, LargeBinary, String, Table, Text, text

from core.store.db import metadata

journal_entries = Table(
    "journal_entries",
    metadata,
    Column("session_id", String(512), primary_key=True),
    # SM-22: rows are the history of one generation of the id; a late write of an older
    # generation is never read by a newer one, whose seqs start at 0 again.
    Column("generation", BigInteger, primary_key=True, autoincrement=False, server_default=text("0")),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("kind", String(32), nullable=False),
    Column("turn_id", String(128), nullable=True),
    Column("external_event_id", String(512), nullable=True),
    Column("at", String(64), nullable=False),
    Column("payload", Text, nullable=False),
)
# KS-14: answers per external event are looked up in the journal (SqlHistoryJournal.entries_for_event).
Index("ix_journal_entries_event", journal_entries.c.session_id, journal_entries.c.external_event_id)

knowledge_nodes = Table(
    "knowledge_nodes",
    metadata,
    Column("id", String(512), primary_key=True),
    Column("parent_id", String(512), nullable=True),
    Column("content", Text, nullable=False),
    Column("version", Integer, nullable=False),
)
Index("ix_knowledge_nodes_parent_id", knowledge_nodes.c.parent_id)

knowledge_objects = Table(
    "knowledge_objects",
    metadata,
    Column("object_id", String(512), primary_key=True),
    Column("node_id", String(512), nullable=False),
    Column("file_name", String(1024), nullable=False),
    Column("media_type", String(255), nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("version", Integer, nullable=False),
)

knowledge_commits = Table(
    "knowledge_commits",
    metadata,
    Column("write_session_id", String(512), primary_key=True),
    Column("committed_at", String(64), nullable=False),
    Column("op_count", Integer, nullable=False),
)
