"""Schema migrations with Alembic, run programmatically at start-up (``upgrade head``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _upgrade(connection: Connection) -> None:
    command.upgrade(alembic_config(connection), "head")


async def migrate(engine: AsyncEngine) -> None:
    """Bring the database schema to the newest revision."""
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade)
