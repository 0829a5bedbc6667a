"""SQL history journal with group commit.

``append`` hands its rows to a ``GroupCommitter`` (the process-wide one when
given, else its own): one writer takes everything queued, writes it in ONE
transaction and resolves every caller after the commit, so under load many
sessions share each transaction without any fixed delay. A failing batch is
retried one append at a time, so a single bad append (e.g. a taken seq →
``Conflict``) cannot fail the others. Entries are durable when ``append`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from sqlalchemy import delete, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine.journal import EntryKind, JournalEntry
from core.errors import Conflict, Unavailable
from core.store.committer import GroupCommitter
from core.store.journal_tables import journal_entries


class SqlHistoryJournal:
    """``HistoryJournal`` on SQLAlchemy async (SQLite or PostgreSQL). Call ``aclose`` at shutdown."""

    def __init__(self, engine: AsyncEngine, *, committer: GroupCommitter | None = None) -> None:
        self._engine = engine
        self._own_committer = committer is None
        self._committer = committer if committer is not None else GroupCommitter(engine)
        self.appends = 0

    @property
    def transactions(self) -> int:
        """Transactions the committer has run (shared with other writers when it is the process's)."""
        return self._committer.transactions

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        """Durably append (group-committed); Conflict when a seq is already taken."""
        if not entries:
            return
        rows = [
            {
                "session_id": session_id, "seq": e.seq, "kind": e.kind.value, "turn_id": e.turn_id,
                "external_event_id": e.external_event_id, "at": e.at, "payload": orjson.dumps(e.payload).decode(),
            }
            for e in entries
        ]
        try:
            await self._committer.run(lambda conn: conn.execute(insert(journal_entries), rows))
        except Exception as exc:
            error = _translate(session_id, entries, exc)
            if error is exc:
                raise
            raise error from exc
        self.appends += 1

    async def load(self, session_id: str) -> list[JournalEntry]:
        """Every entry of the session in seq order."""
        query = select(journal_entries).where(journal_entries.c.session_id == session_id).order_by(journal_entries.c.seq)
        try:
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except DBAPIError as exc:
            raise Unavailable(f"journal read failed: {exc.orig!r}") from exc
        return [
            JournalEntry(
                seq=row.seq, kind=EntryKind(row.kind), turn_id=row.turn_id,
                external_event_id=row.external_event_id, at=row.at, payload=orjson.loads(row.payload),
            )
            for row in rows
        ]

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind]
    ) -> list[JournalEntry]:
        """Entries of ``kinds`` tied to the event in seq order (index ``ix_journal_entries_event``)."""
        query = (
            select(journal_entries)
            .where(
                journal_entries.c.session_id == session_id,
                journal_entries.c.external_event_id == external_event_id,
                journal_entries.c.kind.in_([k.value for k in kinds]),
            )
            .order_by(journal_entries.c.seq)
        )
        try:
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except DBAPIError as exc:
            raise Unavailable(f"journal read failed: {exc.orig!r}") from exc
        return [
            JournalEntry(
                seq=row.seq, kind=EntryKind(row.kind), turn_id=row.turn_id,
                external_event_id=row.external_event_id, at=row.at, payload=orjson.loads(row.payload),
            )
            for row in rows
        ]

    async def event_ids(self, session_id: str, kinds: Sequence[EntryKind]) -> set[str]:
        """Distinct event ids of the session's entries of ``kinds`` (read once per loaded session)."""
        query = (
            select(journal_entries.c.external_event_id)
            .where(
                journal_entries.c.session_id == session_id,
                journal_entries.c.external_event_id.is_not(None),
                journal_entries.c.kind.in_([k.value for k in kinds]),
            )
            .distinct()
        )
        try:
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except DBAPIError as exc:
            raise Unavailable(f"journal read failed: {exc.orig!r}") from exc
        return {str(row[0]) for row in rows}

    async def clear(self, session_id: str) -> None:
        """Delete the session's history."""
        await self._committer.run(
            lambda conn: conn.execute(delete(journal_entries).where(journal_entries.c.session_id == session_id))
        )

    async def aclose(self) -> None:
        """Flush queued appends (and stop the committer when it is this journal's own)."""
        if self._own_committer:
            await self._committer.aclose()


def _translate(session_id: str, entries: list[JournalEntry], exc: Exception) -> Exception:
    if isinstance(exc, IntegrityError):
        seqs = [e.seq for e in entries]
        return Conflict(f"journal of {session_id!r} already holds one of seqs {seqs}")
    if isinstance(exc, DBAPIError):
        return Unavailable(f"journal write failed: {exc.orig!r}")
    return exc
