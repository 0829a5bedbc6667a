"""SQL tables of the session manager: sessions, places, workspaces, generations.

Registered on the shared ``core.store.db.metadata``. Structured fields are
portable JSON columns (SQLite and PostgreSQL). ``kind`` and ``children`` are
derived at load and not stored (SM-1).
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Double, Integer, String, Table, Text

from core.store.db import metadata

ID_LEN = 512

sessions_table = Table(
    "sessions",
    metadata,
    Column("id", String(ID_LEN), primary_key=True),
    Column("parent_id", String(ID_LEN), nullable=True, index=True),
    Column("name", Text, nullable=True),
    Column("title", Text, nullable=True),
    Column("status", String(16), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Column("created_from", String(128), nullable=True),
    Column("input_context", Text, nullable=True),
    Column("result", Text, nullable=True),
    Column("metadata_json", JSON(none_as_null=True), nullable=True),
    Column("origin_platform", String(128), nullable=True),
    Column("origin_chat", JSON(none_as_null=True), nullable=True),
    Column("workspace", String(128), nullable=True, index=True),
    Column("work", JSON(none_as_null=True), nullable=True),
    Column("current_dir", Text, nullable=True),
    Column("origin_instance", String(256), nullable=True),
    Column("last_reply_at", Double, nullable=True),
    Column("last_turn", JSON(none_as_null=True), nullable=True),
    Column("tokens", JSON(none_as_null=True), nullable=True),
    Column("take_settings", JSON(none_as_null=True), nullable=True),
)

places_table = Table(
    "places",
    metadata,
    Column("key", String(ID_LEN * 2), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("name", Text, nullable=True),
    Column("root", Text, nullable=True),
    Column("metadata_json", JSON(none_as_null=True), nullable=True),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
)

workspaces_table = Table(
    "workspaces",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("name", Text, nullable=True),
    Column("root", Text, nullable=True, unique=True),
    Column("created_at", Double, nullable=False),
)

generations_table = Table(
    "session_generations",
    metadata,
    Column("session_id", String(ID_LEN), primary_key=True),
    Column("generation", BigInteger, nullable=False),
)
