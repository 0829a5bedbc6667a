"""The write-time ownership fence: one epoch per partition in the database, checked by every write.

A process that takes a partition (consumers/ownership.py) records the epoch it took it at (the
KV lease revision) in ``partition_epochs``, in its own transaction, before it replays the
partition's inbox. Every inbox staging and journal append of a partitioned process carries the
(partition, epoch) it holds and reads the row ``FOR SHARE`` inside its own (group) transaction:
when the stored epoch differs, the write is refused and nothing of it is written
(``OwnershipLost``). The share lock makes the hand-over exact on PostgreSQL: a new owner's
recording waits for every transaction that read the old epoch to commit, so its replay sees
what they staged, and a write that starts later sees the new epoch. On SQLite (one writer at a
time, one owner of every partition) the same statement holds trivially.

Epochs only move forward: a process that took a partition and records late never overwrites a
newer owner's epoch (``record_epoch`` answers False). KV revisions restart when the lease
bucket is created anew (a fresh broker over an old database); ``force_epoch`` is for the owner
that the bucket still names at that point.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Double,
    Integer,
    Select,
    String,
    Table,
    bindparam,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from core.errors import OwnershipLost
from core.store.db import metadata, upsert_insert
from core.store.driver_sql import driver_sql

partition_epochs = Table(
    "partition_epochs",
    metadata,
    Column("partition", Integer, primary_key=True, autoincrement=False),
    Column("epoch", BigInteger, nullable=False),
    Column("owner", String(256), nullable=False),
    Column("recorded_at", Double, nullable=False),
)

Claim = tuple[int, int]  # (partition, epoch)
_CONFIRMED = "turnstile_confirmed_epochs"  # conn.info: (transaction, claims confirmed in it)


class WriteFence(Protocol):
    """What a partitioned process holds: the epoch of a session's partition (None: not ours)."""

    def epoch_of(self, session_id: str | None) -> Claim | None: ...


def claims_of(fence: WriteFence | None, session_ids: Iterable[str | None]) -> set[Claim] | None:
    """The claims a write for ``session_ids`` carries; None without a fence (one owner of everything).
    Raises ``OwnershipLost`` when one of the sessions' partitions is not held at all."""
    if fence is None:
        return None
    claims: set[Claim] = set()
    for session_id in session_ids:
        claim = fence.epoch_of(session_id)
        if claim is None:
            raise OwnershipLost(f"partition of session {session_id!r} is not held here")
        claims.add(claim)
    return claims


def epochs_hold(conn: Connection, claims: set[Claim] | None) -> bool:
    """Inside a write transaction: do all ``claims`` match the stored epochs? Locks the rows FOR SHARE
    until the transaction ends, so no new owner records its epoch in between (PostgreSQL). A claim
    already confirmed in the same transaction is not read again: its row stays locked until the commit
    (a group transaction checks each partition once, not once per write)."""
    if not claims:
        return True
    transaction = conn.get_transaction()
    cached = conn.info.get(_CONFIRMED)
    confirmed: set[Claim] = cached[1] if cached is not None and cached[0] is transaction else set()
    wanted = claims - confirmed
    if not wanted:
        return True
    ordered = sorted(wanted)
    values = tuple(v for claim in ordered for v in claim)
    rows = conn.exec_driver_sql(_hold_sql(conn, len(ordered)), values).all()
    confirmed |= {(int(r[0]), int(r[1])) for r in rows}
    conn.info[_CONFIRMED] = (transaction, confirmed)
    return wanted <= confirmed


def _hold_sql(conn: Connection, claims: int) -> str:
    """``epochs_hold``'s statement for ``claims`` claims, as the dialect's SQL text, compiled once per count.
    Built and bound through SQLAlchemy's constructs on every check, a one-claim transaction (begin, the
    check, commit) took 215 µs on SQLite, on the event loop, against 56 µs now (298 against 60 with two)."""
    t = partition_epochs
    names = tuple(name for i in range(claims) for name in (f"p{i}", f"e{i}"))

    def build() -> Select[Any]:
        return (
            select(t.c.partition, t.c.epoch)
            .where(or_(*((t.c.partition == bindparam(f"p{i}")) & (t.c.epoch == bindparam(f"e{i}")) for i in range(claims))))
            .with_for_update(read=True)
        )

    return driver_sql(conn, f"epochs hold {claims}", build, names)


async def record_epoch(engine: AsyncEngine, partition: int, epoch: int, owner: str) -> bool:
    """Record ``epoch`` as ``partition``'s, in its own short transaction, unless a newer one is stored.
    True when ``epoch`` is the stored one afterwards."""
    t = partition_epochs
    values = {"partition": partition, "epoch": epoch, "owner": owner, "recorded_at": time.time()}
    async with engine.begin() as conn:
        insert = upsert_insert(conn.dialect.name)(t).values(values)
        await conn.execute(
            insert.on_conflict_do_update(
                index_elements=[t.c.partition],
                set_={"epoch": epoch, "owner": owner, "recorded_at": values["recorded_at"]},
                where=t.c.epoch < epoch,
            )
        )
        stored = await conn.scalar(select(t.c.epoch).where(t.c.partition == partition))
    return stored == epoch


async def force_epoch(engine: AsyncEngine, partition: int, epoch: int, owner: str) -> None:
    """Overwrite ``partition``'s epoch (the stored one came from an earlier lease bucket)."""
    async with engine.begin() as conn:
        await conn.execute(
            update(partition_epochs)
            .where(partition_epochs.c.partition == partition)
            .values(epoch=epoch, owner=owner, recorded_at=time.time())
        )


async def stored_epoch(engine: AsyncEngine, partition: int) -> int | None:
    """The epoch stored for ``partition`` (None: never recorded)."""
    async with engine.connect() as conn:
        value = await conn.scalar(select(partition_epochs.c.epoch).where(partition_epochs.c.partition == partition))
    return None if value is None else int(value)
