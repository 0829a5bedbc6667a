"""Alembic environment: always runs on the connection turnstile hands in (see core/store/migrate.py)."""

from __future__ import annotations

from alembic import context

import core.store.tables  # noqa: F401  (registers every table on the shared metadata)
from core.store.db import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through core.store.migrate.migrate(db_engine)")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
