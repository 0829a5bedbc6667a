"""What the SQL write fence costs (core/store/partition_epochs.py): group-committed journal appends and
inbox stagings from many sessions at once, without the fence, with it (``FOR SHARE`` read of the
partition's epoch row in the same transaction, once per partition and transaction). Rounds
interleave the variants; the figures are ratios against "no fence" within one run.

    .venv/bin/python -m bench.write_fence [--store postgres|sqlite] [--sessions 200] [--writes 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from uuid import uuid4

from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.partition_epochs as epochs
import core.store.tables  # noqa: F401 - the whole schema
from bench.pg import fresh_database, pg_url
from core.engine.journal import EntryKind, JournalEntry
from core.store.committer import GroupCommitter
from core.store.db import create_db_engine, metadata
from core.store.inbox import SqlInbox, StagedMessage
from core.store.journal_repo import SqlHistoryJournal

PARTITIONS = 16


class Held:
    def epoch_of(self, session_id: str | None) -> tuple[int, int]:
        return (hash(session_id) % PARTITIONS, 1)


async def _round(engine: AsyncEngine, fenced: bool, sessions: int, writes: int) -> float:
    """Messages per second: each session stages a message and appends an entry, ``writes`` times."""
    committer = GroupCommitter(engine)
    box = SqlInbox(engine, committer)
    journal = SqlHistoryJournal(engine, committer=committer)
    if fenced:
        box.fence = journal.fence = Held()
    tag = uuid4().hex[:6]

    async def session(n: int) -> None:
        sid = f"{tag}-{n}"
        for seq in range(writes):
            await box.stage([StagedMessage("cli", f"{sid}-{seq}", sid, 0, b"{}")])
            entry = JournalEntry(seq=seq, kind=EntryKind.EVENT, turn_id=None, external_event_id=None,
                                 at="2026-12-01T18:00:00Z", payload={"n": seq})
            await journal.append(sid, [entry])

    started = time.perf_counter()
    await asyncio.gather(*(session(n) for n in range(sessions)))
    elapsed = time.perf_counter() - started
    await committer.aclose()
    return sessions * writes / elapsed


async def _measure(engine: AsyncEngine, args: argparse.Namespace) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    for p in range(PARTITIONS):
        await epochs.record_epoch(engine, p, 1, "bench")
    results: dict[str, list[float]] = {"no fence": [], "fence (FOR SHARE)": []}
    await _round(engine, False, args.sessions, 2)  # warm-up
    for _ in range(args.rounds):
        results["no fence"].append(await _round(engine, False, args.sessions, args.writes))
        results["fence (FOR SHARE)"].append(await _round(engine, True, args.sessions, args.writes))
    base = statistics.median(results["no fence"])
    print(f"store={args.store} sessions={args.sessions} writes/session={args.writes} rounds={args.rounds}")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"  {name:18s} {median:8.0f} msg/s (stage + append)   ratio {median / base:.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--writes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.store == "postgres":
        async with fresh_database("fence") as database:
            engine = create_db_engine(pg_url(database, "postgresql+asyncpg"))
            try:
                await _measure(engine, args)
            finally:
                await engine.dispose()
        return
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_db_engine(f"sqlite+aiosqlite:///{Path(tmp) / 'fence.db'}")
        try:
            await _measure(engine, args)
        finally:
            await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
