"""Cross-process change notification on PostgreSQL: what one process wrote, the others read back.

PostgreSQL is the source of truth for the session tree, places, workspaces, generations and the
registered platform instances; every process keeps a table of them in memory for synchronous reads.
Each write transaction also sends ``pg_notify`` on :data:`CHANNEL` naming the keys it changed
(delivered at commit, in commit order); every other process ``LISTEN``s, reads those rows back and
installs them. A payload too large for a notification, or a listener that lost its connection (it
may have missed notifications), means "reload everything". SQLite has no such notification: it
stays the single-process store (a second process stands by, docs/protocol.md "Scaling out").
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from core.sessions.ports import StoreChange
from core.store.committer import GroupCommitter
from core.store.driver_sql import Piece, joins_pieces, run_pieces
from core.store.session_repo import (
    SqlSessionRepository,
    place_from_row,
    session_from_row,
    session_row,
    workspace_from_row,
)
from core.store.session_tables import generations_table, places_table, sessions_table, workspaces_table

CHANNEL = "turnstile_shared_state"
MAX_PAYLOAD_BYTES = 7000  # PostgreSQL's limit is 8000; past this a change says "reload everything"
RECONNECT_DELAY_S = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SharedChange:
    """The keys one committed transaction changed (or ``everything``), and which process wrote it."""

    origin: str
    sessions: tuple[str, ...] = ()
    places: tuple[str, ...] = ()
    workspaces: tuple[str, ...] = ()
    generations: tuple[str, ...] = ()
    platforms: bool = False
    everything: bool = False

    def encode(self) -> str:
        """The notification payload (a bare ``everything`` when the keys do not fit)."""
        payload = json.dumps({
            "o": self.origin, "s": self.sessions, "p": self.places, "w": self.workspaces, "g": self.generations,
            "pl": self.platforms, "all": self.everything,
        }, separators=(",", ":"))
        if len(payload.encode()) > MAX_PAYLOAD_BYTES:
            return json.dumps({"o": self.origin, "all": True})
        return payload

    @staticmethod
    def decode(payload: str) -> SharedChange | None:
        """A notification's change; None when it is not one of ours."""
        try:
            value = json.loads(payload)
            return SharedChange(
                origin=str(value["o"]),
                sessions=tuple(value.get("s", ())), places=tuple(value.get("p", ())),
                workspaces=tuple(value.get("w", ())), generations=tuple(value.get("g", ())),
                platforms=bool(value.get("pl")), everything=bool(value.get("all")),
            )
        except (ValueError, KeyError, TypeError):
            return None


def merged(changes: list[SharedChange]) -> SharedChange:
    """Changes heard together read back as one (a busy writer elsewhere costs one read per batch)."""
    if len(changes) == 1:
        return changes[0]

    def union(pick: Callable[[SharedChange], tuple[str, ...]]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(key for change in changes for key in pick(change)))

    return SharedChange(
        origin="", sessions=union(lambda c: c.sessions), places=union(lambda c: c.places),
        workspaces=union(lambda c: c.workspaces), generations=union(lambda c: c.generations),
        platforms=any(c.platforms for c in changes), everything=any(c.everything for c in changes),
    )


def keys_of(change: StoreChange, origin: str) -> SharedChange:
    """The keys a ``StoreChange`` writes."""
    return SharedChange(
        origin=origin,
        sessions=tuple(dict.fromkeys([*(r.id for r in change.sessions), *change.deleted_sessions])),
        places=tuple(dict.fromkeys([*(p.key for p in change.places), *change.deleted_places])),
        workspaces=tuple(dict.fromkeys([*(w.id for w in change.workspaces), *change.deleted_workspaces])),
        generations=tuple(dict.fromkeys(sid for sid, _ in change.generations)),
    )


def notify(conn: Connection, change: SharedChange) -> None:
    """Inside a write transaction: tell the other processes (PostgreSQL only; at commit)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": change.encode()})


class NotifyingSessionRepository(SqlSessionRepository):
    """The session repository whose every write transaction also notifies the other processes."""

    def __init__(self, engine: AsyncEngine, committer: GroupCommitter | None = None, *, origin: str) -> None:
        super().__init__(engine, committer)
        self.origin = origin
        self._pieces = joins_pieces(engine)

    def _apply(self, conn: Connection, change: StoreChange) -> None:
        if conn.dialect.name != "postgresql":  # SQLite has no one to tell: the keys need not be gathered
            super()._apply(conn, change)
            return
        if self._joins(change):
            # A turn's bookkeeping (one record): the upsert and its notification as ONE statement, a
            # data-modifying WITH (run whether or not it is read) and the pg_notify after it.
            run_pieces(conn, [self._piece(conn, change)])
            return
        super()._apply(conn, change)
        notify(conn, keys_of(change, self.origin))

    def _joins(self, change: StoreChange) -> bool:
        return self._pieces and _one_record(change)

    def _piece(self, conn: Connection, change: StoreChange) -> Piece:
        """The one record's upsert and its notification as a ``Piece`` (it joins the journal append it
        waited for in one statement: ``GroupCommitter``)."""
        sql, (values,) = self._upsert_statement(conn, sessions_table, ("id",), [session_row(change.sessions[0])])
        return Piece(sql, values, notify=(CHANNEL, keys_of(change, self.origin).encode()))


def _one_record(change: StoreChange) -> bool:
    """The change upserts one session record and writes nothing else."""
    return len(change.sessions) == 1 and StoreChange(sessions=change.sessions) == change


async def read_back(engine: AsyncEngine, change: SharedChange) -> StoreChange:
    """The current rows of ``change``'s keys as a ``StoreChange``: rows gone read as deletions."""
    async with engine.connect() as conn:
        sessions = await _rows(conn, sessions_table, "id", change.sessions)
        places = await _rows(conn, places_table, "key", change.places)
        workspaces = await _rows(conn, workspaces_table, "id", change.workspaces)
        generations = await _rows(conn, generations_table, "session_id", change.generations)
    return StoreChange(
        sessions=tuple(session_from_row(r) for r in sessions.values()),
        deleted_sessions=tuple(k for k in change.sessions if k not in sessions),
        places=tuple(place_from_row(r) for r in places.values()),
        deleted_places=tuple(k for k in change.places if k not in places),
        workspaces=tuple(workspace_from_row(r) for r in workspaces.values()),
        deleted_workspaces=tuple(k for k in change.workspaces if k not in workspaces),
        generations=tuple((str(r["session_id"]), int(r["generation"])) for r in generations.values()),
    )


async def _rows(conn: Any, table: Any, key: str, values: Iterable[str]) -> dict[str, Any]:
    wanted = list(values)
    if not wanted:
        return {}
    rows = (await conn.execute(select(table).where(table.c[key].in_(wanted)))).mappings().all()
    return {str(r[key]): r for r in rows}


class ChangeFeed:
    """LISTENs on :data:`CHANNEL` over its own asyncpg connection; hands other origins' changes on.

    ``listen()`` before the load, ``deliver()`` after it: nothing committed in between is missed,
    and nothing heard is installed under a load that read older rows. ``on_change`` runs one
    change at a time, in notification order (changes waiting together are merged). After the connection is
    lost the feed reconnects and hands on an ``everything`` change (notifications may be missed).
    """

    def __init__(self, dsn: str, origin: str, on_change: Callable[[SharedChange], Awaitable[None]]) -> None:
        self._dsn = dsn
        self._origin = origin
        self._on_change = on_change
        self._queue: asyncio.Queue[SharedChange] = asyncio.Queue()
        self._conn: Any = None
        self._lost = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def listen(self) -> None:
        """Start hearing changes (queued, not handed on yet): call before loading what they change."""
        await self._connect()
        self._tasks = [asyncio.create_task(self._keep_connected())]

    def deliver(self) -> None:
        """Hand the changes heard since ``listen`` on, and every later one (after the load)."""
        self._tasks.append(asyncio.create_task(self._deliver()))

    async def _connect(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        self._conn = await asyncpg.connect(self._dsn)
        self._lost.clear()
        self._conn.add_termination_listener(lambda _conn: self._lost.set())
        await self._conn.add_listener(CHANNEL, self._heard)

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        change = SharedChange.decode(payload)
        if change is not None and change.origin != self._origin:
            self._queue.put_nowait(change)

    async def _keep_connected(self) -> None:
        while True:
            await self._lost.wait()
            log.warning("the shared-state listener lost its PostgreSQL connection; reconnecting")
            while True:
                try:
                    await self._connect()
                    break
                except (OSError, Exception) as exc:  # asyncpg's errors are its own tree
                    log.warning("reconnecting the shared-state listener: %r", exc)
                    await asyncio.sleep(RECONNECT_DELAY_S)
            self._queue.put_nowait(SharedChange(origin="", everything=True, platforms=True))

    async def _deliver(self) -> None:
        while True:
            change = merged([await self._queue.get(), *self._drain_queue()])
            try:
                await self._on_change(change)
            except Exception:
                log.exception("installing a change made by another process failed; reloading everything")
                await self._queue.put(SharedChange(origin="", everything=True, platforms=True))
                await asyncio.sleep(RECONNECT_DELAY_S)

    def _drain_queue(self) -> list[SharedChange]:
        waiting = []
        while not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        return waiting

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._conn is not None:
            try:
                await self._conn.close(timeout=5)
            except Exception as exc:
                log.warning("closing the shared-state listener: %r", exc)
            self._conn = None


async def read_with_ancestors(engine: AsyncEngine, session_ids: Iterable[str]) -> StoreChange:
    """The current rows of ``session_ids`` and of all their ancestors up to the roots, with their
    generations (a read-through before a cross-session rule is judged); ids not stored read as deletions."""
    found: dict[str, Any] = {}
    missing: list[str] = []
    frontier = list(dict.fromkeys(session_ids))
    async with engine.connect() as conn:
        while frontier:
            rows = await _rows(conn, sessions_table, "id", frontier)
            missing += [k for k in frontier if k not in rows]
            found.update(rows)
            frontier = list(dict.fromkeys(
                str(r["parent_id"]) for r in rows.values() if r["parent_id"] and str(r["parent_id"]) not in found
            ))
        generations = await _rows(conn, generations_table, "session_id", [*found, *missing])
    return StoreChange(
        sessions=tuple(session_from_row(r) for r in found.values()),
        deleted_sessions=tuple(missing),
        generations=tuple((str(r["session_id"]), int(r["generation"])) for r in generations.values()),
    )
