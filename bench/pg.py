"""PostgreSQL for the bench: one fresh database per measured row, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")


def pg_url(database: str, driver: str = "postgresql") -> str:
    """``postgresql://`` (psycopg, LangGraph) or ``postgresql+asyncpg://`` (turnstile) URL of a database."""
    return f"{driver}://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(pg_url("postgres"), timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def database_bytes(database: str) -> int:
    """``pg_database_size``: every table, index, TOAST and free-space map of the database."""
    conn = await asyncpg.connect(pg_url(database), timeout=10)
    try:
        return int(await conn.fetchval("SELECT pg_database_size(current_database())"))
    finally:
        await conn.close()


async def commits(database: str) -> int:
    """Transactions committed in a database (``pg_stat_database.xact_commit``).

    Read after the measured process has closed its connections (a backend flushes its
    counters when it disconnects); the reading connection adds a few of its own.
    """
    conn = await asyncpg.connect(pg_url(database), timeout=10)
    try:
        return int(await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = $1", database))
    finally:
        await conn.close()


@asynccontextmanager
async def fresh_database(tag: str) -> AsyncIterator[str]:
    """An empty database named ``bench_<tag>_<hex>``, dropped (forcibly) on exit; yields its name."""
    name = f"bench_{tag}_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
